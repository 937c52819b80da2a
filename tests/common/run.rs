//! A command run to its end: what it printed, and how it exited; its exit
//! checked with everything it printed shown when it is not the one expected.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// What one command printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        self
    }

    /// Exited `code` (-1: killed by a signal), or the test fails showing
    /// all it printed.
    #[track_caller]
    pub fn exits(self, code: i32) -> Run {
        assert_eq!(self.code, code, "expected exit {code}: {self:#?}");
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
    Run::from(child.wait_with_output().expect("the command ends"))
}
