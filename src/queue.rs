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
    /// The sender waits for room, asynchronously and up to a bound of its
    /// own ([`Queue::reserve_by`]): nothing is dropped unseen (audit
    /// records). A sender that gets no room in time says so to its caller.
    Wait,
    /// The item is dropped and counted: a review is never delayed.
    Drop,
}

/// Why a waiting queue took no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unqueued {
    /// No room before the deadline: the writer is not keeping up.
    Full,
    /// The writer has stopped.
    Stopped,
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
    /// Queues `item` without waiting. A dropping queue that is full, or
    /// whose writer has stopped, counts it; a waiting one hands it back
    /// (its senders wait with [`Queue::reserve_by`] instead).
    pub fn send(&self, item: T) -> Result<(), T> {
        let unsent = match self.sender.try_send(item) {
            Ok(()) => return Ok(()),
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

    /// Room for one item, waited for (asynchronously: no thread is held)
    /// until `deadline`. The item is then queued with the permit's `send`,
    /// which never waits.
    pub async fn reserve_by(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<mpsc::Permit<'_, T>, Unqueued> {
        match tokio::time::timeout_at(deadline, self.sender.reserve()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(Unqueued::Stopped),
            Err(_) => Err(Unqueued::Full),
        }
    }

    /// Queues `item`, waiting for room whatever the policy (a flush must get through).
    pub async fn send_waiting(&self, item: T) -> Result<(), T> {
        self.sender.send(item).await.map_err(|e| e.0)
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

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_queue_waits_within_its_deadline_and_says_why_not() {
        use tokio::time::{Duration, Instant};
        let dropped = Counter::default();
        let (queue, mut receiver) = bounded("test", 1, WhenFull::Wait, dropped.clone());
        queue.reserve_by(Instant::now()).await.unwrap().send(1);
        // Full: no room within the bound, and the wait ends at the bound.
        let started = Instant::now();
        let full = queue.reserve_by(started + Duration::from_millis(50)).await;
        assert_eq!(full.err(), Some(Unqueued::Full));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(
            queue.send(2),
            Err(2),
            "a waiting queue hands back, never drops"
        );
        // Room again once the writer takes one.
        assert_eq!(receiver.recv().await, Some(1));
        queue
            .reserve_by(Instant::now() + Duration::from_secs(1))
            .await
            .unwrap()
            .send(3);
        assert_eq!(receiver.recv().await, Some(3));
        drop(receiver);
        let stopped = queue
            .reserve_by(Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(stopped.err(), Some(Unqueued::Stopped));
        assert_eq!(dropped.get(), 0);
    }
}
