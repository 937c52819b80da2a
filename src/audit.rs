//! Audit records: one JSON line on standard output per judged finalizer removal.
//!
//! Logs go to standard error; audit records to standard output, so a log
//! pipeline can route them apart. Neither ever carries an object body.
//!
//! A review hands its record to [`AuditLog`], whose own thread renders and
//! writes it, a batch per write: the review's worker thread pays neither the
//! JSON nor the system call, nor a thread switch per record. No record is ever dropped: when the queue is
//! full the review waits for room, and a record that cannot be queued at all
//! is written where it stands.

use std::io::{BufWriter, Write};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::admission::AuditRecord;

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    kind: &'static str,
    #[serde(flatten)]
    record: &'a AuditRecord,
}

/// Renders one audit line (without the newline), stamped `time`.
pub fn render_at(record: &AuditRecord, time: jiff::Timestamp) -> String {
    let line = Line {
        time: time.to_string(),
        kind: "FinalizerRemoval",
        record,
    };
    serde_json::to_string(&line).expect("an audit record always serializes")
}

/// Records waiting for the writer thread, at most.
const QUEUE: usize = 4096;

/// Once woken by a record, the writer waits this long for others to join it:
/// under load one wake-up and one write carry many records, instead of a
/// thread switch per review. A line reaches standard output this much later.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);

enum Message {
    Record(jiff::Timestamp, Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

/// Writes audit lines from its own thread.
pub struct AuditLog {
    queue: SyncSender<Message>,
}

impl AuditLog {
    /// Audit lines on standard output.
    pub fn stdout() -> std::io::Result<AuditLog> {
        AuditLog::to(std::io::stdout())
    }

    /// Audit lines to `out`.
    pub fn to(out: impl Write + Send + 'static) -> std::io::Result<AuditLog> {
        let (queue, incoming) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || write_lines(&incoming, out))?;
        Ok(AuditLog { queue })
    }

    /// Queues one record, stamped now; waits for room when the queue is full.
    pub fn emit(&self, record: AuditRecord) {
        let message = Message::Record(jiff::Timestamp::now(), Box::new(record));
        let unsent = match self.queue.try_send(message) {
            Ok(()) => return,
            Err(TrySendError::Full(message)) => {
                match wait_outside_the_runtime(|| self.queue.send(message)) {
                    Ok(()) => return,
                    Err(unsent) => unsent.0,
                }
            }
            Err(TrySendError::Disconnected(message)) => message,
        };
        // The writer thread is gone: write this one here rather than lose it.
        if let Message::Record(time, record) = unsent {
            let mut line = render_at(&record, time);
            line.push('\n');
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                tracing::error!(error = %e, uid = %record.uid, "cannot write audit record");
            }
        }
    }

    /// Waits until every record queued before this call is written out.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        let queue = self.queue.clone();
        // `send` may wait for room: not on a runtime worker.
        let queued =
            tokio::task::spawn_blocking(move || queue.send(Message::Flush(done)).is_ok()).await;
        if matches!(queued, Ok(true)) {
            let _ = written.await;
        }
    }
}

/// Runs `f`, which may block; on a multi-threaded tokio runtime's worker,
/// the runtime first hands that worker's other tasks (probes, other reviews)
/// to a fresh thread, so a stalled standard output stalls only the reviews
/// writing to it.
fn wait_outside_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn write_lines(incoming: &Receiver<Message>, out: impl Write) {
    let mut out = BufWriter::with_capacity(64 * 1024, out);
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    while let Ok(first) = incoming.recv() {
        if matches!(first, Message::Record(..)) {
            std::thread::sleep(BATCH_WINDOW);
        }
        // Everything queued by now goes out in one write.
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Record(time, record) => {
                    let line = render_at(&record, time);
                    let written = out
                        .write_all(line.as_bytes())
                        .and_then(|()| out.write_all(b"\n"));
                    if let Err(e) = written {
                        tracing::error!(error = %e, uid = %record.uid, "cannot write audit record");
                    }
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = incoming.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            tracing::error!(error = %e, "cannot write audit records");
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(uid: &str) -> AuditRecord {
        let bytes = include_bytes!("../examples/reviews/pod-strip-finalizers.json");
        let mut reviewed =
            crate::admission::review(&crate::policy::Policy::embedded_default(), bytes).unwrap();
        let mut record = reviewed.audit.take().expect("a judged removal");
        record.uid = uid.into();
        record
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_record_is_written_once_in_order_by_flush() {
        let out = Shared::default();
        let log = AuditLog::to(out.clone()).unwrap();
        let n = QUEUE * 2 + 7; // more than the queue holds: emit waits, drops nothing
        for i in 0..n {
            log.emit(record(&format!("uid-{i}")));
        }
        log.flush().await;
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let uids: Vec<String> = text
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["kind"], "FinalizerRemoval");
                v["uid"].as_str().unwrap().to_string()
            })
            .collect();
        let want: Vec<String> = (0..n).map(|i| format!("uid-{i}")).collect();
        assert_eq!(uids, want);
    }
}
