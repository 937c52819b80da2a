//! What a command printed, checked for the lines it must hold: a failure
//! names every line missing at once and shows the whole output, instead of
//! the first missing line and one stream.
//!
//! ```ignore
//! assert_prints(&output, &["4 stuck object(s)", "owner alive: no"]);
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;
use std::process::Output;

use super::run::Run;

/// What a command printed, and how it exited.
pub trait Printed {
    fn code(&self) -> Option<i32>;
    fn stdout(&self) -> Cow<'_, str>;
    fn stderr(&self) -> Cow<'_, str>;
}

impl Printed for Output {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
    fn stdout(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.stdout)
    }
    fn stderr(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.stderr)
    }
}

impl Printed for Run {
    fn code(&self) -> Option<i32> {
        Some(self.code)
    }
    fn stdout(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.stdout)
    }
    fn stderr(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.stderr)
    }
}

/// Which of a command's streams must hold the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
    /// Each line on one or the other.
    Either,
}

/// Standard output holds each of `needles` (anywhere, in any order).
#[track_caller]
pub fn assert_prints(output: &impl Printed, needles: &[&str]) {
    assert_prints_on(output, Stream::Stdout, needles);
}

/// Standard error holds each of `needles`.
#[track_caller]
pub fn assert_prints_on_stderr(output: &impl Printed, needles: &[&str]) {
    assert_prints_on(output, Stream::Stderr, needles);
}

#[track_caller]
pub fn assert_prints_on(output: &impl Printed, stream: Stream, needles: &[&str]) {
    let (stdout, stderr) = (output.stdout(), output.stderr());
    let (text, name) = match stream {
        Stream::Stdout => (stdout.clone(), "standard output"),
        Stream::Stderr => (stderr.clone(), "standard error"),
        Stream::Either => (
            Cow::Owned(format!("{stdout}\n{stderr}")),
            "neither standard output nor error",
        ),
    };
    if let Some(missing) = missing(&text, needles) {
        let verb = if stream == Stream::Either {
            "holds"
        } else {
            "lacks"
        };
        let code = output
            .code()
            .map_or_else(|| "none (killed by a signal)".into(), |c| c.to_string());
        panic!(
            "{name} {verb} {missing}exit code: {code}\n--- standard output ---\n{stdout}\n--- standard error ---\n{stderr}\n--- end ---"
        );
    }
}

/// `text` (not a command's output: a message, a metrics page, an Event's
/// note), named `what`, holds each of `needles`.
#[track_caller]
pub fn assert_contains_all(what: &str, text: &str, needles: &[&str]) {
    if let Some(missing) = missing(text, needles) {
        panic!("{what} lacks {missing}--- {what} ---\n{text}\n--- end ---");
    }
}

/// The needles `text` lacks, one a line, or `None` when it has them all.
fn missing(text: &str, needles: &[&str]) -> Option<String> {
    assert!(!needles.is_empty(), "no lines to look for");
    let lacking: Vec<&&str> = needles.iter().filter(|n| !text.contains(**n)).collect();
    if lacking.is_empty() {
        return None;
    }
    let mut out = format!("{} of {} expected:\n", lacking.len(), needles.len());
    for needle in lacking {
        let _ = writeln!(out, "  missing: {needle:?}");
    }
    Some(out)
}

/// Nothing a terminal would act on in what the command printed: no escape
/// sequence, no control character but the line breaks.
#[track_caller]
pub fn assert_printable(output: &impl Printed) {
    let (stdout, stderr) = (output.stdout(), output.stderr());
    let raw: Vec<char> = stdout
        .chars()
        .chain(stderr.chars())
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        raw.is_empty(),
        "raw control characters {raw:?} in:\n--- standard output ---\n{stdout}\n--- standard error ---\n{stderr}\n--- end ---"
    );
}
