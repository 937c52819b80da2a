//! What the suites against a live cluster share (`tests/e2e` on the control
//! plane, `tests/nodes` on real nodes): a command's run, polling, a plain
//! HTTP GET of an admin port, and the webhook's denial as kubectl prints it.
//! Each suite uses a part.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

pub use super::run::{Run, run};
use super::wait::poll_blocking;

/// The name of the webhook in the shipped ValidatingWebhookConfiguration.
pub const WEBHOOK: &str = "finalizers.finalizer-guard.io";

/// Polls `done` every 200 ms for up to `seconds`; fails the test past them.
#[track_caller]
pub fn wait_until(what: &str, seconds: u64, done: impl FnMut() -> bool) {
    assert!(poll(seconds, done), "gave up after {seconds}s: {what}");
}

/// Polls `done` every 200 ms for up to `seconds`: whether it came true, for
/// a caller that says more than [`wait_until`] when it did not.
pub fn poll(seconds: u64, done: impl FnMut() -> bool) -> bool {
    poll_blocking(
        Duration::from_secs(seconds),
        Duration::from_millis(200),
        done,
    )
}

/// `GET path` of plain HTTP at `addr` (an admin port): the body of a 200 answer.
pub fn http_get(addr: impl ToSocketAddrs, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: the body ends with the connection, never chunked.
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.lines()
        .next()?
        .contains(" 200 ")
        .then(|| body.to_string())
}

/// How kubectl reports the webhook's denial.
pub fn denied() -> String {
    format!("admission webhook \"{WEBHOOK}\" denied the request")
}

/// How kubectl reports a denial by the exported ValidatingAdmissionPolicy
/// (`policy export --vap`: policy and binding named `finalizer-guard`).
pub fn policy_denial() -> String {
    "ValidatingAdmissionPolicy 'finalizer-guard' with binding 'finalizer-guard' denied request"
        .to_string()
}

/// Waits (30 s at most) until `kubectl auth can-i patch configmaps -n NS
/// --as WHO`, run by `admin`, says yes: a binding just applied is in force.
pub fn wait_may_patch_configmaps(admin: impl Fn(&[&str]) -> Run, ns: &str, who: &str) {
    let can_i = [
        "auth",
        "can-i",
        "patch",
        "configmaps",
        "-n",
        ns,
        "--as",
        who,
    ];
    wait_until(
        &format!("{who} to be allowed to patch configmaps in {ns}"),
        30,
        || admin(&can_i).stdout.trim() == "yes",
    );
}
