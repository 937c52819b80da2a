//! The audit log: the records reviews render ([`AuditEntry`]) written out,
//! one JSON line each, on standard output.
//!
//! A review hands its record to [`AuditLog`], whose own thread renders and
//! writes it, a batch per write: the review's worker thread pays neither the
//! JSON nor the system call, nor a thread switch per record. No record is
//! ever dropped: when the queue is full the review waits for room
//! ([`WhenFull::Wait`]), asynchronously and for at most [`AUDIT_WAIT`]; one
//! that gets none is refused (answered with an error, never allowed without
//! its record), and a record whose writer has stopped is written where it
//! stands. A writer that makes no progress with records in hand for
//! [`STALL`] (standard output not read) is [`AuditLog::stalled`]: `/readyz`
//! then says not ready, and reviews are refused at once. A write that fails
//! (a closed pipe, a full disk) loses the records it carried (counted in
//! `finalizer_guard_dropped_total{queue="audit"}`, logged): from then on a
//! review is answered only once its own record is written, and `/readyz`
//! says not ready, until a write goes through again. At exit, the records
//! not written out are counted and named by uid.

use std::collections::BTreeMap;
use std::io::Write;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};

use crate::admission::audit::{AuditEntry, write_line};
use crate::queue::{self, Queue, WhenFull};

/// Records waiting for the writer thread, at most.
const QUEUE: usize = 4096;

/// Bytes of records waiting for the writer thread, at most: a record is
/// bounded (its strings cut), but 4096 of the largest would still be
/// hundreds of MiB. Past this a review waits, as it does for a full queue.
pub const QUEUE_BYTES: usize = 16 * 1024 * 1024;

/// How long a review waits for room for its audit record before it is
/// refused. The writer empties a full queue in milliseconds when standard
/// output is read, so a wait this long means the log pipeline is not
/// reading; one second leaves most of kube-apiserver's `timeoutSeconds`
/// (5 in the chart) for the error to reach it, so the write is refused by
/// the webhook's answer, not by a timeout.
pub const AUDIT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the writer may hold records without writing a byte before the
/// server says it is not ready: longer than a log agent's short pause
/// (a file rotated, a restart), short enough that kube-apiserver turns to
/// another replica within seconds.
pub const STALL: std::time::Duration = std::time::Duration::from_secs(3);

/// Most often a refusal, or a loss of records, is logged; the others are
/// counted in the next line (written at the latest [`LOG_EVERY`] later, or at exit).
const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// After a write fails, `/readyz` says not ready for this long, then ready
/// again so that the next review tries the output (its record written, or
/// the review refused and the server unready again): a full disk freed, or
/// a reader back, is found even by a pod taken out of its Service.
pub const FAILED_UNREADY: std::time::Duration = std::time::Duration::from_secs(30);

/// How many uids of the records not written out the exit line lists.
pub const UNWRITTEN_UIDS_LISTED: usize = 100;

/// Once woken by a record, the writer waits this long for others to join it:
/// under load one wake-up and one write carry many records, instead of a
/// thread switch per review. A line reaches standard output this much later.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);

/// A batch is written out once it holds this many bytes.
const BATCH_BYTES: usize = 64 * 1024;

/// The most one write carries: progress is marked per write, so a reader
/// that reads slowly, but reads, is not taken for one that does not.
const WRITE_CHUNK: usize = 16 * 1024;

enum Message {
    Record(Queued),
    Flush(oneshot::Sender<()>),
}

/// A record in the queue.
struct Queued {
    /// Its place among the records held ([`Progress::held`]); none for a probe.
    seq: Option<u64>,
    time: jiff::Timestamp,
    /// [`AuditEntry::fields`].
    fields: String,
    /// The review's uid, as the record has it.
    uid: String,
    /// Its share of [`QUEUE_BYTES`], given back once it is written.
    bytes: Option<tokio::sync::OwnedSemaphorePermit>,
    /// A probe (sent while writes fail): told whether it was written, and
    /// not counted lost if not (its review is refused).
    written: Option<oneshot::Sender<bool>>,
}

/// Why a review's audit record was not queued: the review must be refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unwritten {
    /// No room within [`AUDIT_WAIT`]: the writer is not keeping up.
    NoRoom,
    /// The writer has held records for this long without writing any.
    Stalled(std::time::Duration),
    /// Writes to standard output fail, with this error.
    Failing(String),
}

impl std::fmt::Display for Unwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unwritten::NoRoom => write!(
                f,
                "the audit log is not being written (standard output not read): no room for this review's audit record within {}s; not decided without it",
                AUDIT_WAIT.as_secs()
            ),
            Unwritten::Stalled(stuck) => write!(
                f,
                "the audit log is not being written (standard output not read, or read too slowly): no audit record written for {}s; not decided without this review's audit record",
                stuck.as_secs()
            ),
            Unwritten::Failing(error) => write!(
                f,
                "audit records cannot be written: {error}; not decided without this review's audit record"
            ),
        }
    }
}

/// The writer's state, shared with the reviews and `/readyz`.
struct Progress {
    start: std::time::Instant,
    /// Milliseconds from `start` (plus one) of the writer's last progress
    /// while it holds records: it took them, or wrote some bytes. 0 while
    /// it holds none.
    busy: std::sync::atomic::AtomicU64,
    /// The error of the last write, and when (milliseconds as `busy`),
    /// while writes fail; cleared by a write that goes through.
    failing: std::sync::Mutex<Option<(String, u64)>>,
    failed: std::sync::atomic::AtomicBool,
    /// Whether a review is trying the failing output ([`AuditLog::emit`]).
    probing: std::sync::atomic::AtomicBool,
    /// The uids of the records queued and not yet written (or lost), by
    /// order of queueing: what an exit that cannot wait names.
    held: std::sync::Mutex<(u64, BTreeMap<u64, String>)>,
    refusals: Throttled,
    lost: Throttled,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            start: std::time::Instant::now(),
            busy: std::sync::atomic::AtomicU64::new(0),
            failing: std::sync::Mutex::new(None),
            failed: std::sync::atomic::AtomicBool::new(false),
            probing: std::sync::atomic::AtomicBool::new(false),
            held: std::sync::Mutex::new((0, BTreeMap::new())),
            refusals: Throttled::default(),
            lost: Throttled::default(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn moved(&self) {
        self.busy
            .store(self.now(), std::sync::atomic::Ordering::Relaxed);
    }

    fn idle(&self) {
        self.busy.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long the writer has held records without progress.
    fn stuck_for(&self) -> std::time::Duration {
        match self.busy.load(std::sync::atomic::Ordering::Relaxed) {
            0 => std::time::Duration::ZERO,
            since => std::time::Duration::from_millis(self.now().saturating_sub(since)),
        }
    }

    /// The error of the last write, and how long ago, while writes fail.
    fn failing(&self) -> Option<(String, std::time::Duration)> {
        if !self.failed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing.as_ref().map(|(error, at)| {
            (
                error.clone(),
                std::time::Duration::from_millis(self.now().saturating_sub(*at)),
            )
        })
    }

    fn fail(&self, error: &std::io::Error) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        *failing = Some((error.to_string(), self.now()));
        self.failed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// A write went through: reports whether writes were failing.
    fn recovered(&self) -> bool {
        if !self.failed.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        self.failed
            .store(false, std::sync::atomic::Ordering::Release);
        failing.take().is_some()
    }

    /// Notes a record queued: its place among those held.
    fn hold(&self, uid: &str) -> u64 {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let seq = held.0;
        held.0 += 1;
        held.1.insert(seq, uid.to_string());
        seq
    }

    fn release(&self, seq: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.1.remove(&seq);
    }

    /// How many records are held, and the uids of the first [`UNWRITTEN_UIDS_LISTED`].
    fn unwritten(&self) -> (usize, Vec<String>) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let uids = held
            .1
            .values()
            .take(UNWRITTEN_UIDS_LISTED)
            .cloned()
            .collect();
        (held.1.len(), uids)
    }

    /// Logs the refusals and losses counted since their last line, when
    /// [`LOG_EVERY`] has passed since it (or at once, `now`).
    fn log_due(&self, now: bool) {
        let at = std::time::Instant::now();
        if let Some(tally) = self.refusals.due(at, now) {
            log_refused(&tally);
        }
        if let Some(tally) = self.lost.due(at, now) {
            log_lost(&tally);
        }
    }
}

/// What a throttled line counts: how many since the last line, the first
/// and last uid among them, and the last reason.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct ThrottledCount {
    count: u64,
    first: Option<String>,
    last: Option<String>,
    reason: String,
}

/// A line logged at most every [`LOG_EVERY`]: the first at once, the
/// others counted in the next, logged by the next note or by
/// [`Throttled::due`] (a timer, or exit) once the period is over.
#[derive(Default)]
struct Throttled {
    state: std::sync::Mutex<(Option<std::time::Instant>, ThrottledCount)>,
}

impl Throttled {
    /// Counts one; returns the tally to log, when a line is due.
    fn note(
        &self,
        at: std::time::Instant,
        uid: Option<&str>,
        reason: &str,
    ) -> Option<ThrottledCount> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let tally = &mut state.1;
        tally.count += 1;
        if let Some(uid) = uid {
            if tally.first.is_none() {
                tally.first = Some(uid.to_string());
            }
            tally.last = Some(uid.to_string());
        }
        if tally.reason != reason {
            tally.reason = reason.to_string();
        }
        Self::take(&mut state, at, false)
    }

    /// The tally counted since the last line, when one is due (or at once, `now`).
    fn due(&self, at: std::time::Instant, now: bool) -> Option<ThrottledCount> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Self::take(&mut state, at, now)
    }

    fn take(
        state: &mut (Option<std::time::Instant>, ThrottledCount),
        at: std::time::Instant,
        now: bool,
    ) -> Option<ThrottledCount> {
        if state.1.count == 0
            || !now
                && state
                    .0
                    .is_some_and(|logged| at.saturating_duration_since(logged) < LOG_EVERY)
        {
            return None;
        }
        state.0 = Some(at);
        let reason = state.1.reason.clone();
        Some(std::mem::replace(
            &mut state.1,
            ThrottledCount {
                reason,
                ..ThrottledCount::default()
            },
        ))
    }
}

fn log_refused(tally: &ThrottledCount) {
    tracing::error!(
        refused = tally.count,
        reason = %tally.reason,
        "reviews refused: no room for their audit records, or they cannot be written (is standard output read?); logged at most every 10s"
    );
}

fn log_lost(tally: &ThrottledCount) {
    tracing::error!(
        lost = tally.count,
        first_uid = ?tally.first.as_deref().unwrap_or_default(),
        last_uid = ?tally.last.as_deref().unwrap_or_default(),
        error = %tally.reason,
        "audit records lost: standard output cannot be written; their reviews were answered; logged at most every 10s"
    );
}

/// Clears [`Progress::probing`] when the probe ends, however it ends.
struct Probing<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Writes audit lines from its own thread.
pub struct AuditLog {
    queue: Queue<Message>,
    /// [`QUEUE_BYTES`], in byte permits.
    room: std::sync::Arc<tokio::sync::Semaphore>,
    progress: std::sync::Arc<Progress>,
    /// Reviews refused for want of room ([`Unwritten`]).
    unwritten: Counter,
}

impl AuditLog {
    /// Audit lines on standard output, written straight to its file
    /// descriptor (no buffer in between: a failed write is known as it fails).
    pub fn stdout(dropped: Counter, unwritten: Counter) -> std::io::Result<AuditLog> {
        #[cfg(unix)]
        let out = {
            use std::os::fd::AsFd;
            std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?)
        };
        #[cfg(windows)]
        let out = {
            use std::os::windows::io::AsHandle;
            std::fs::File::from(std::io::stdout().as_handle().try_clone_to_owned()?)
        };
        AuditLog::to(out, dropped, unwritten)
    }

    /// Audit lines to `out`. The queue waits rather than drop; the records
    /// lost to a failed write are counted in `dropped`, the reviews refused
    /// for want of a written record in `unwritten`.
    pub fn to(
        out: impl Write + Send + 'static,
        dropped: Counter,
        unwritten: Counter,
    ) -> std::io::Result<AuditLog> {
        let (queue, incoming) = queue::bounded("audit", QUEUE, WhenFull::Wait, Counter::default());
        let progress = std::sync::Arc::new(Progress::new());
        let writing = progress.clone();
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || write_lines(incoming, out, &writing, &dropped))?;
        // Throttled lines left pending are logged once their period is over.
        let ticking = std::sync::Arc::downgrade(&progress);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    let Some(progress) = ticking.upgrade() else {
                        break;
                    };
                    progress.log_due(false);
                }
            })?;
        Ok(AuditLog {
            queue,
            room: std::sync::Arc::new(tokio::sync::Semaphore::new(QUEUE_BYTES)),
            progress,
            unwritten,
        })
    }

    /// Queues one record, stamped now. When the queue is full (records or
    /// [`QUEUE_BYTES`]) it waits for room, asynchronously, for at most
    /// [`AUDIT_WAIT`]; without room by then the record is not written and
    /// the review must be refused (counted, and logged at most every 10 s).
    /// A writer already [`AuditLog::stalled`] refuses at once. While writes
    /// fail, one review at a time tries the output, answered only once its
    /// record is written; the others are refused at once.
    pub async fn emit(&self, entry: AuditEntry) -> Result<(), Unwritten> {
        let time = jiff::Timestamp::now();
        let (fields, judged) = entry.into_parts();
        if let Some((error, _)) = self.progress.failing() {
            return self.probe(time, fields, judged.uid, error).await;
        }
        if let Some(stuck) = self.stalled() {
            return Err(self.refuse(Unwritten::Stalled(stuck)));
        }
        let deadline = tokio::time::Instant::now() + AUDIT_WAIT;
        // One record larger than the whole bound waits for an empty queue.
        let share = u32::try_from(fields.len().min(QUEUE_BYTES)).unwrap_or(u32::MAX);
        let room = tokio::time::timeout_at(deadline, self.room.clone().acquire_many_owned(share));
        let bytes = match room.await {
            Ok(permit) => permit.ok(),
            Err(_) => return Err(self.refuse(Unwritten::NoRoom)),
        };
        match self.queue.reserve_by(deadline).await {
            Ok(slot) => {
                let seq = self.progress.hold(&judged.uid);
                slot.send(Message::Record(Queued {
                    seq: Some(seq),
                    time,
                    fields,
                    uid: judged.uid,
                    bytes,
                    written: None,
                }));
                Ok(())
            }
            Err(queue::Unqueued::Full) => Err(self.refuse(Unwritten::NoRoom)),
            // The writer thread is gone: write this one here rather than lose it.
            Err(queue::Unqueued::Stopped) => {
                let mut line = String::with_capacity(fields.len() + 72);
                write_line(&mut line, time, &fields);
                line.push('\n');
                let mut out = std::io::stdout().lock();
                match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(self.refuse(Unwritten::Failing(e.to_string()))),
                }
            }
        }
    }

    /// Tries the failing output with this review's record: `Ok` once it is
    /// written, refused if it is not (or another review is trying).
    async fn probe(
        &self,
        time: jiff::Timestamp,
        fields: String,
        uid: String,
        error: String,
    ) -> Result<(), Unwritten> {
        if self
            .progress
            .probing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Err(self.refuse(Unwritten::Failing(error)));
        }
        let _probing = Probing(&self.progress.probing);
        let deadline = tokio::time::Instant::now() + AUDIT_WAIT;
        let (told, written) = oneshot::channel();
        match self.queue.reserve_by(deadline).await {
            Ok(slot) => slot.send(Message::Record(Queued {
                seq: None,
                time,
                fields,
                uid,
                bytes: None,
                written: Some(told),
            })),
            Err(_) => return Err(self.refuse(Unwritten::Failing(error))),
        }
        match tokio::time::timeout_at(deadline, written).await {
            Ok(Ok(true)) => Ok(()),
            _ => {
                let error = self.progress.failing().map_or(error, |(e, _)| e);
                Err(self.refuse(Unwritten::Failing(error)))
            }
        }
    }

    fn refuse(&self, unwritten: Unwritten) -> Unwritten {
        self.unwritten.inc();
        let reason = match &unwritten {
            Unwritten::NoRoom => format!(
                "no room for their audit records within {}s (standard output not read)",
                AUDIT_WAIT.as_secs()
            ),
            Unwritten::Stalled(_) => {
                format!(
                    "no audit record written for longer than {}s (standard output not read, or read too slowly)",
                    STALL.as_secs()
                )
            }
            Unwritten::Failing(error) => format!("audit records cannot be written: {error}"),
        };
        if let Some(tally) = self
            .progress
            .refusals
            .note(std::time::Instant::now(), None, &reason)
        {
            log_refused(&tally);
        }
        unwritten
    }

    /// How long the writer has held records without writing any, when
    /// that is longer than [`STALL`]: standard output is not being read.
    pub fn stalled(&self) -> Option<std::time::Duration> {
        Some(self.progress.stuck_for()).filter(|stuck| *stuck > STALL)
    }

    /// Why the server is not ready for reviews, if it is not: writes to
    /// standard output fail (for [`FAILED_UNREADY`] after each failure), or
    /// the writer is [`AuditLog::stalled`].
    pub fn unready(&self) -> Option<String> {
        if let Some((error, ago)) = self.progress.failing()
            && ago < FAILED_UNREADY
        {
            return Some(format!("audit records cannot be written: {error}"));
        }
        self.stalled().map(|stuck| {
            format!(
                "audit records not written for {}s (standard output not read, or read too slowly)",
                stuck.as_secs()
            )
        })
    }

    /// How many records were queued and are not written yet, and the uids
    /// of the first [`UNWRITTEN_UIDS_LISTED`] of them.
    pub fn unwritten(&self) -> (usize, Vec<String>) {
        self.progress.unwritten()
    }

    /// At exit: logs the refusals and losses still counted, and the records
    /// not written out (how many, and their uids, bounded), whose reviews
    /// may have been answered: kube-apiserver's audit log has them.
    /// Returns how many records were not written out.
    pub fn log_at_exit(&self) -> usize {
        self.progress.log_due(true);
        let (count, uids) = self.unwritten();
        if count > 0 {
            tracing::error!(
                unwritten = count,
                uids = ?uids,
                listed = uids.len(),
                "audit records not written out before exit: their reviews may have been answered; find them by uid in kube-apiserver's audit log"
            );
        }
        count
    }

    /// Waits until every record queued before this call is written out (or lost).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send_waiting(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// The lines of a batch, and where each ends.
#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    records: Vec<(usize, Queued)>,
}

fn write_lines(
    mut incoming: mpsc::Receiver<Message>,
    mut out: impl Write,
    progress: &Progress,
    dropped: &Counter,
) {
    let mut batch = Batch::default();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    let mut line = String::new();
    while let Some(first) = incoming.blocking_recv() {
        progress.moved();
        if matches!(first, Message::Record(..)) {
            std::thread::sleep(BATCH_WINDOW);
        }
        // Everything queued by now goes out in as few writes as it fits.
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Record(mut queued) => {
                    line.clear();
                    write_line(&mut line, queued.time, &queued.fields);
                    line.push('\n');
                    batch.buf.extend_from_slice(line.as_bytes());
                    // Its bytes leave the queue (into the batch).
                    drop(queued.bytes.take());
                    queued.fields = String::new();
                    batch.records.push((batch.buf.len(), queued));
                    if batch.buf.len() >= BATCH_BYTES {
                        write_batch(&mut out, &mut batch, progress, dropped);
                    }
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = incoming.try_recv().ok();
        }
        write_batch(&mut out, &mut batch, progress, dropped);
        progress.idle();
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Writes the batch out, [`WRITE_CHUNK`] at most per write, marking
/// progress after each. On an error the records not wholly written are
/// lost (counted in `dropped`, logged throttled), the writer is failing
/// until a write goes through.
fn write_batch(out: &mut impl Write, batch: &mut Batch, progress: &Progress, dropped: &Counter) {
    if batch.records.is_empty() {
        return;
    }
    let mut at = 0;
    let mut error = None;
    while at < batch.buf.len() {
        let end = batch.buf.len().min(at + WRITE_CHUNK);
        match out.write(&batch.buf[at..end]) {
            Ok(0) => {
                error = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                break;
            }
            Ok(n) => {
                at += n;
                progress.moved();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    if error.is_none()
        && let Err(e) = out.flush()
    {
        error = Some(e);
    }
    // The writer's state first: a review told its record was written finds it so.
    match &error {
        Some(e) => progress.fail(e),
        None => {
            if progress.recovered() {
                progress.log_due(true);
                tracing::warn!("audit records written again");
            }
        }
    }
    let now = std::time::Instant::now();
    for (end, queued) in batch.records.drain(..) {
        let written = error.is_none() || end <= at;
        if let Some(seq) = queued.seq {
            progress.release(seq);
        }
        match queued.written {
            Some(told) => {
                let _ = told.send(written);
            }
            None if !written => {
                dropped.inc();
                let reason = error.as_ref().map(ToString::to_string).unwrap_or_default();
                if let Some(tally) = progress.lost.note(now, Some(&queued.uid), &reason) {
                    log_lost(&tally);
                }
            }
            None => {}
        }
    }
    batch.buf.clear();
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

    fn record(uid: &str) -> AuditEntry {
        let bytes = include_bytes!("../../examples/reviews/pod-strip-finalizers.json");
        let text = std::str::from_utf8(bytes)
            .unwrap()
            .replace("a4f1c7de-0f3b-4c55-9a0e-6c1d2b3e4f50", uid);
        let mut reviewed =
            crate::admission::review(&crate::policy::Policy::embedded_default(), text.as_bytes())
                .unwrap();
        reviewed.audit.take().expect("a judged removal")
    }

    /// An output nobody reads until it is opened: writes wait.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, std::sync::Condvar)>,
        out: Shared,
    }

    impl Gate {
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut open = self.open.0.lock().unwrap();
            while !*open {
                open = self.open.1.wait(open).unwrap();
            }
            self.out.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An output nobody reads: a full queue refuses each review after
    /// [`AUDIT_WAIT`], many at once on one thread (none holds a thread
    /// while it waits), counted; the writer reads stalled after [`STALL`];
    /// once read, every queued record is written and reviews go through.
    #[tokio::test(flavor = "current_thread")]
    async fn an_output_nobody_reads_refuses_reviews_within_the_bound_then_recovers() {
        let gate = Gate::default();
        let unwritten = Counter::default();
        let log =
            Arc::new(AuditLog::to(gate.clone(), Counter::default(), unwritten.clone()).unwrap());
        let entry = record("uid-0");
        let mut queued = 0;
        let refused_at = loop {
            let started = tokio::time::Instant::now();
            match log.emit(entry.clone()).await {
                Ok(()) => queued += 1,
                Err(Unwritten::NoRoom) => break started.elapsed(),
                Err(other) => panic!("{other:?}"),
            }
            assert!(queued < 2 * QUEUE, "the queue is bounded");
        };
        assert!(queued >= QUEUE, "{queued}");
        assert!(refused_at >= AUDIT_WAIT, "{refused_at:?}");
        assert!(refused_at < AUDIT_WAIT * 3, "{refused_at:?}");
        assert_eq!(unwritten.get(), 1);
        // Many reviews waiting at once, on this one thread: each refused at the bound.
        let started = tokio::time::Instant::now();
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..500 {
            let (log, entry) = (log.clone(), entry.clone());
            waiting.spawn(async move { log.emit(entry).await });
        }
        while let Some(result) = waiting.join_next().await {
            // Refused at the bound, or at once once the writer reads stalled.
            assert!(
                matches!(
                    result.unwrap(),
                    Err(Unwritten::NoRoom | Unwritten::Stalled(_))
                ),
                "refused"
            );
        }
        assert!(
            started.elapsed() < AUDIT_WAIT * 3,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(unwritten.get(), 501);
        // Not writing with records in hand: stalled once STALL has passed.
        tokio::time::sleep(STALL.saturating_sub(started.elapsed()) + AUDIT_WAIT).await;
        let stalled = log.stalled().expect("stalled");
        assert!(stalled > STALL, "{stalled:?}");
        gate.open();
        log.flush().await;
        assert_eq!(log.stalled(), None);
        assert_eq!(
            String::from_utf8(gate.out.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .count(),
            queued
        );
        log.emit(record("uid-1")).await.unwrap();
        log.flush().await;
        assert_eq!(log.stalled(), None);
        assert_eq!(unwritten.get(), 501);
    }

    /// An output whose writes fail (a closed pipe) while `failing` is set,
    /// noting the size of each write.
    #[derive(Clone, Default)]
    struct Flaky {
        failing: Arc<std::sync::atomic::AtomicBool>,
        out: Shared,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(32));
            }
            self.out.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn uids(out: &Shared) -> Vec<String> {
        String::from_utf8(out.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                v["uid"].as_str().unwrap().to_string()
            })
            .collect()
    }

    /// A write that fails loses its records, counted; from then on a
    /// review is refused unless its own record is written, and the log
    /// says why until a write goes through again.
    #[tokio::test(flavor = "current_thread")]
    async fn a_failing_output_refuses_reviews_counts_the_records_lost_then_recovers() {
        let out = Flaky::default();
        let (dropped, unwritten) = (Counter::default(), Counter::default());
        let log = AuditLog::to(out.clone(), dropped.clone(), unwritten.clone()).unwrap();
        log.emit(record("uid-0")).await.unwrap();
        log.flush().await;
        assert_eq!(log.unready(), None);
        out.failing.store(true, std::sync::atomic::Ordering::SeqCst);
        // Queued before the failure is known: answered, and lost.
        log.emit(record("uid-1")).await.unwrap();
        log.flush().await;
        assert_eq!(dropped.get(), 1, "the record lost is counted");
        assert_eq!(log.unwritten(), (0, vec![]));
        let unready = log.unready().expect("unready while writes fail");
        assert!(
            unready.starts_with("audit records cannot be written: Broken pipe"),
            "{unready}"
        );
        // From now on: refused, its record not written, not counted lost.
        for uid in ["uid-2", "uid-3"] {
            match log.emit(record(uid)).await {
                Err(Unwritten::Failing(e)) => assert!(e.contains("Broken pipe"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(unwritten.get(), 2);
        assert_eq!(dropped.get(), 1);
        assert!(
            Unwritten::Failing("Broken pipe".into())
                .to_string()
                .starts_with("audit records cannot be written: Broken pipe")
        );
        // Written again (a disk freed): answered, ready.
        out.failing
            .store(false, std::sync::atomic::Ordering::SeqCst);
        log.emit(record("uid-4")).await.unwrap();
        assert_eq!(log.unready(), None);
        log.emit(record("uid-5")).await.unwrap();
        log.flush().await;
        assert_eq!(uids(&out.out), ["uid-0", "uid-4", "uid-5"]);
        assert_eq!((dropped.get(), unwritten.get()), (1, 2));
    }

    /// A writer stalled (nothing written for [`STALL`] with records in
    /// hand) refuses the next review at once rather than queue it behind
    /// the others; the records it holds are named, for an exit that cannot
    /// wait for them.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_writer_refuses_at_once_and_names_the_records_it_holds() {
        let gate = Gate::default();
        let unwritten = Counter::default();
        let log = AuditLog::to(gate.clone(), Counter::default(), unwritten.clone()).unwrap();
        log.emit(record("uid-0")).await.unwrap();
        log.emit(record("uid-1")).await.unwrap();
        tokio::time::sleep(STALL + std::time::Duration::from_millis(300)).await;
        let started = tokio::time::Instant::now();
        assert!(matches!(
            log.emit(record("uid-2")).await,
            Err(Unwritten::Stalled(_))
        ));
        assert!(
            started.elapsed() < AUDIT_WAIT / 4,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(unwritten.get(), 1);
        let unready = log.unready().expect("unready while stalled");
        assert!(unready.contains("or read too slowly"), "{unready}");
        assert_eq!(
            log.unwritten(),
            (2, vec!["uid-0".to_string(), "uid-1".to_string()])
        );
        gate.open();
        log.flush().await;
        assert_eq!(log.unwritten(), (0, vec![]));
        log.emit(record("uid-3")).await.unwrap();
        log.flush().await;
        assert_eq!(uids(&gate.out), ["uid-0", "uid-1", "uid-3"]);
    }

    /// Each write carries at most [`WRITE_CHUNK`] bytes, progress marked
    /// after each: a reader that reads slowly is seen to read.
    #[tokio::test(flavor = "current_thread")]
    async fn a_large_batch_is_written_in_chunks() {
        #[derive(Clone, Default)]
        struct Sizes(Arc<Mutex<Vec<usize>>>, Gate);
        impl Write for Sizes {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let n = self.1.write(buf)?;
                self.0.lock().unwrap().push(n);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Sizes::default();
        let log = AuditLog::to(out.clone(), Counter::default(), Counter::default()).unwrap();
        let n = 300;
        for i in 0..n {
            log.emit(record(&format!("uid-{i}"))).await.unwrap();
        }
        out.1.open();
        log.flush().await;
        assert_eq!(uids(&out.1.out).len(), n);
        let sizes = out.0.lock().unwrap().clone();
        let total: usize = sizes.iter().sum();
        assert!(total > 4 * WRITE_CHUNK, "{total}");
        assert!(sizes.iter().all(|&n| n <= WRITE_CHUNK), "{sizes:?}");
    }

    /// A throttled line: the first at once, the next ones counted and
    /// logged once the period is over, by a later note or by the timer.
    #[test]
    fn a_throttled_line_counts_every_note_and_is_logged_once_due() {
        let line = Throttled::default();
        let t0 = std::time::Instant::now();
        let secs = std::time::Duration::from_secs;
        let first = line.note(t0, Some("a"), "Broken pipe").unwrap();
        assert_eq!((first.count, first.first.as_deref()), (1, Some("a")));
        assert_eq!(line.note(t0 + secs(1), Some("b"), "Broken pipe"), None);
        assert_eq!(line.note(t0 + secs(2), Some("c"), "Broken pipe"), None);
        assert_eq!(line.due(t0 + secs(9), false), None);
        let pending = line.due(t0 + secs(11), false).expect("due by the timer");
        assert_eq!(
            (
                pending.count,
                pending.first.as_deref(),
                pending.last.as_deref()
            ),
            (2, Some("b"), Some("c"))
        );
        assert_eq!(line.due(t0 + secs(30), false), None, "nothing pending");
        assert_eq!(
            line.note(t0 + secs(31), None, "x").map(|t| t.count),
            Some(1)
        );
        line.note(t0 + secs(32), None, "x");
        assert_eq!(
            line.due(t0 + secs(33), true).map(|t| t.count),
            Some(1),
            "at exit"
        );
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_record_is_written_once_in_order_by_flush() {
        let out = Shared::default();
        let log = AuditLog::to(out.clone(), Counter::default(), Counter::default()).unwrap();
        let n = QUEUE * 2 + 7; // more than the queue holds: emit waits, drops nothing
        for i in 0..n {
            log.emit(record(&format!("uid-{i}"))).await.unwrap();
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
