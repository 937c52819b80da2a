//! One bounded queue for the background writers: audit records, recordings
//! and Events. A review hands its item over and goes on; what a full queue
//! does is the writer's [`WhenFull`], and every item dropped is counted in
//! `finalizer_guard_dropped_total`.
//!
//! The receiving end is tokio's, so a writer may be a thread
//! (`blocking_recv`) or a task (`recv().await`).

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc::{self, error::TrySendError};

/// What a full queue does with one more item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// The sender waits for room: nothing is lost (audit records).
    Wait,
    /// The item is dropped and counted: a review is never delayed.
    Drop,
}

/// The sending end of a writer's queue.
pub struct Queue<T> {
    sender: mpsc::Sender<T>,
    when_full: WhenFull,
    name: &'static str,
    dropped: Counter,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            sender: self.sender.clone(),
            when_full: self.when_full,
            name: self.name,
            dropped: self.dropped.clone(),
        }
    }
}

/// A queue of at most `capacity` items for the writer `name`, counting its drops in `dropped`.
pub fn bounded<T>(
    name: &'static str,
    capacity: usize,
    when_full: WhenFull,
    dropped: Counter,
) -> (Queue<T>, mpsc::Receiver<T>) {
    let (sender, receiver) = mpsc::channel(capacity.max(1));
    let queue = Queue {
        sender,
        when_full,
        name,
        dropped,
    };
    (queue, receiver)
}

impl<T> Queue<T> {
    /// Queues `item`, waiting for room or dropping it as the queue's policy
    /// says. When the writer has stopped, a dropping queue counts the item and
    /// a waiting one hands it back, for the caller to write where it stands.
    pub fn send(&self, item: T) -> Result<(), T> {
        let unsent = match self.sender.try_send(item) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(item)) if self.when_full == WhenFull::Wait => {
                match wait_for_room(&self.sender, item) {
                    Ok(()) => return Ok(()),
                    Err(item) => item,
                }
            }
            Err(TrySendError::Full(item) | TrySendError::Closed(item)) => item,
        };
        match self.when_full {
            WhenFull::Wait => Err(unsent),
            WhenFull::Drop => {
                self.dropped.inc();
                tracing::warn!(queue = self.name, "queue full or writer stopped; dropped");
                Ok(())
            }
        }
    }

    /// Queues `item`, waiting for room whatever the policy (a flush must get through).
    pub async fn send_waiting(&self, item: T) -> Result<(), T> {
        self.sender.send(item).await.map_err(|e| e.0)
    }
}

/// Waits for room in `sender`. On a multi-threaded runtime's worker, the
/// runtime first hands that worker's other tasks (probes, other reviews) to a
/// fresh thread, so a stalled writer stalls only the reviews writing to it.
fn wait_for_room<T>(sender: &mpsc::Sender<T>, item: T) -> Result<(), T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| sender.blocking_send(item)).map_err(|e| e.0)
        }
        // A current-thread runtime cannot block inside itself: poll for room.
        Ok(_) => {
            let mut item = item;
            loop {
                match sender.try_send(item) {
                    Ok(()) => return Ok(()),
                    Err(TrySendError::Closed(unsent)) => return Err(unsent),
                    Err(TrySendError::Full(unsent)) => item = unsent,
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        Err(_) => sender.blocking_send(item).map_err(|e| e.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropping_queue_counts_every_drop() {
        let dropped = Counter::default();
        let (queue, mut receiver) = bounded("test", 2, WhenFull::Drop, dropped.clone());
        for i in 0..5 {
            assert_eq!(queue.send(i), Ok(()));
        }
        assert_eq!(dropped.get(), 3);
        assert_eq!(receiver.try_recv(), Ok(0));
        assert_eq!(receiver.try_recv(), Ok(1));
        drop(receiver);
        assert_eq!(queue.send(9), Ok(()));
        assert_eq!(dropped.get(), 4, "a stopped writer's items are counted too");
    }

    #[test]
    fn a_waiting_queue_waits_and_hands_back_when_the_writer_stopped() {
        let dropped = Counter::default();
        let (queue, mut receiver) = bounded("test", 1, WhenFull::Wait, dropped.clone());
        let writer = std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Some(i) = receiver.blocking_recv() {
                got.push(i);
            }
            got
        });
        for i in 0..100 {
            assert_eq!(queue.send(i), Ok(()));
        }
        let sender = queue.clone();
        drop(queue);
        drop(sender);
        assert_eq!(writer.join().unwrap(), (0..100).collect::<Vec<_>>());
        assert_eq!(dropped.get(), 0);
        let (queue, receiver) = bounded("test", 1, WhenFull::Wait, dropped.clone());
        drop(receiver);
        assert_eq!(queue.send(7), Err(7));
        assert_eq!(dropped.get(), 0);
    }
}
