//! What the suites against a live cluster share (`tests/e2e` on the control
//! plane, `tests/nodes` on real nodes): a command's run, polling, a plain
//! HTTP GET of an admin port, and the webhook's denial as kubectl prints it.
//! Each suite uses a part.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The name of the webhook in the shipped ValidatingWebhookConfiguration.
pub const WEBHOOK: &str = "finalizers.finalizer-guard.io";

/// What one command printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        self
    }

    /// Refused by the API server: exit 1, and `needle` on standard error.
    #[track_caller]
    pub fn refused(self, needle: &str) -> Run {
        assert_eq!(self.code, 1, "expected exit 1: {self:#?}");
        assert!(
            self.stderr.contains(needle),
            "expected {needle:?} on stderr: {self:#?}"
        );
        self
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {self:#?}"))
    }
}

/// Runs `cmd` to its end, `stdin` written to it if given.
#[track_caller]
pub fn run(mut cmd: Command, stdin: Option<&str>) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("stdin written");
    }
    let out = child.wait_with_output().expect("the command ends");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Polls `done` every 200 ms for up to `seconds`; fails the test past them.
#[track_caller]
pub fn wait_until(what: &str, seconds: u64, done: impl FnMut() -> bool) {
    assert!(poll(seconds, done), "gave up after {seconds}s: {what}");
}

/// Polls `done` every 200 ms for up to `seconds`: whether it came true, for
/// a caller that says more than [`wait_until`] when it did not.
pub fn poll(seconds: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    true
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
