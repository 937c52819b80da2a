//! Waiting for a condition instead of sleeping in its place: a sleep long
//! enough on a quiet machine is too short on a loaded one, and too long
//! everywhere else. A sleep stays only where the time itself is under test
//! (a client idle for longer than a timeout), saying so.

use std::time::{Duration, Instant};

/// How often the conditions of a local server are looked at.
pub const LOCAL_POLL: Duration = Duration::from_millis(20);

/// Polls `done` (async) every [`LOCAL_POLL`] until it holds; fails the test
/// after `timeout`, naming `what` it waited for.
#[track_caller]
pub fn wait_until<'a>(
    what: &'a str,
    timeout: Duration,
    mut done: impl AsyncFnMut() -> bool + 'a,
) -> impl Future<Output = ()> + 'a {
    let caller = std::panic::Location::caller();
    async move {
        assert!(
            poll_until(timeout, async || done().await).await,
            "gave up after {timeout:?} waiting for {what} ({caller})"
        );
    }
}

/// Polls `done` (async) every [`LOCAL_POLL`] until it holds: whether it did
/// within `timeout`, for a caller that says more than [`wait_until`] when
/// it did not.
pub async fn poll_until(timeout: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done().await {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(LOCAL_POLL).await;
    }
    true
}

/// Polls `done` every `every` until it holds, blocking the thread: whether
/// it held within `timeout`.
pub fn poll_blocking(timeout: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
    true
}

/// [`poll_blocking`] every [`LOCAL_POLL`], failing the test after `timeout`.
#[track_caller]
pub fn wait_until_blocking(what: &str, timeout: Duration, done: impl FnMut() -> bool) {
    assert!(
        poll_blocking(timeout, LOCAL_POLL, done),
        "gave up after {timeout:?} waiting for {what}"
    );
}
