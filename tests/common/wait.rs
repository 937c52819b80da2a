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

/// Polls `ready` (async) every [`LOCAL_POLL`] until it gives a value, and
/// returns it; fails the test after `timeout`, naming `what` it waited for.
#[track_caller]
pub fn wait_for<'a, T: 'a>(
    what: &'a str,
    timeout: Duration,
    mut ready: impl AsyncFnMut() -> Option<T> + 'a,
) -> impl Future<Output = T> + 'a {
    let caller = std::panic::Location::caller();
    async move {
        let mut found = None;
        poll_until(timeout, async || {
            found = ready().await;
            found.is_some()
        })
        .await;
        found.unwrap_or_else(|| panic!("gave up after {timeout:?} waiting for {what} ({caller})"))
    }
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

/// Polls `ready` every `every` until it gives a value, blocking the
/// thread: the value, or `None` once `timeout` has passed without one.
pub fn poll_for<T>(
    timeout: Duration,
    every: Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> Option<T> {
    let mut found = None;
    poll_blocking(timeout, every, || {
        found = ready();
        found.is_some()
    });
    found
}

/// Whether `child` exits within `timeout`, polled every [`LOCAL_POLL`];
/// one still running then is left running for the caller to kill.
pub fn exits_within(child: &mut std::process::Child, timeout: Duration) -> bool {
    poll_blocking(timeout, LOCAL_POLL, || {
        child.try_wait().expect("the child's status").is_some()
    })
}
