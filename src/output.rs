//! One output vocabulary for every command, as kubectl's printers give one:
//! `-o text|json`, a report that is a typed value knowing its text and JSON
//! forms ([`Report`]), and one [`Printer`] that puts each thing where it
//! belongs. Under `-o json` standard output holds the JSON document alone;
//! progress and notes go to standard error, so a pipe into `jq` still works
//! while a person watches.

use std::io::{self, Write};
use std::sync::Mutex;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// `-o FORMAT`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document for scripts and incident tickets (progress on standard error).
    Json,
}

/// `-o, --output text|json`: every command that prints a report takes it.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputFlag {
    /// Output format: text for people, json for scripts (progress and notes go to standard error).
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub format: Format,
}

/// A command's report: its JSON form is its serialization, its text form
/// what a person reads.
pub trait Report: Serialize {
    /// The text form. Lines a command printed as it went (progress) are
    /// not repeated here.
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()>;

    /// The JSON form: one indented document, unless the report says otherwise.
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }
}

/// Where each thing a command says goes: the report on standard output,
/// progress beside it in text and on standard error under `-o json`,
/// notes always on standard error. Shared by reference: each line is
/// written whole.
pub struct Printer {
    format: Format,
    out: Mutex<Box<dyn Write + Send>>,
    err: Mutex<Box<dyn Write + Send>>,
}

impl Printer {
    /// Standard output and standard error.
    pub fn stdio(format: Format) -> Printer {
        Printer::new(format, Box::new(io::stdout()), Box::new(io::stderr()))
    }

    pub fn new(format: Format, out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Printer {
        Printer {
            format,
            out: Mutex::new(out),
            err: Mutex::new(err),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_json(&self) -> bool {
        self.format == Format::Json
    }

    /// One line to `to`. A line that cannot be written is not a reason to
    /// stop work under way: the report at the end says whether output failed.
    fn line(to: &Mutex<Box<dyn Write + Send>>, line: impl std::fmt::Display) {
        let mut to = to.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(to, "{line}");
    }

    /// What happened to one object, as it happens: with the report in
    /// text, on standard error under `-o json`.
    pub fn progress(&self, line: impl std::fmt::Display) {
        match self.format {
            Format::Text => Self::line(&self.out, line),
            Format::Json => Self::line(&self.err, line),
        }
    }

    /// Part of the text report printed as the command goes (an object
    /// explained); the JSON document carries it instead.
    pub fn text(&self, line: impl std::fmt::Display) {
        if self.format == Format::Text {
            Self::line(&self.out, line);
        }
    }

    /// A note for the person running the command, in either format.
    pub fn note(&self, line: impl std::fmt::Display) {
        Self::line(&self.err, line);
    }

    /// The report, in the format asked for.
    pub fn report<R: Report + ?Sized>(&self, report: &R) -> io::Result<()> {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match self.format {
            Format::Text => report.write_text(&mut *out)?,
            Format::Json => report.write_json(&mut *out)?,
        }
        out.flush()
    }
}

/// A value quoted for people: in double quotes, with control characters,
/// quotes and backslashes escaped, so what is shown is on one line and
/// cannot pass for something else.
pub fn quoted(value: &str) -> String {
    format!("\"{}\"", value.escape_debug())
}

/// An error and its causes, on one line: "cannot reach the API server:
/// https://10.0.0.1/: client error (Connect): tcp connect error: Connection
/// refused (os error 111)". A cause already said by the one before it is not
/// repeated. An API server's refusal is its message and code.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        let (said, last) = match cause.downcast_ref::<kube::Error>() {
            // Its own text carries the Status's Debug form; its source is the Status.
            Some(kube::Error::Api(status)) => (api_status(status), true),
            _ => (cause.to_string(), false),
        };
        if !said.is_empty() && !text.contains(&said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&said);
        }
        next = if last { None } else { cause.source() };
    }
    text
}

/// What the API server said: its message and the HTTP code.
pub fn api_status(status: &kube::core::Status) -> String {
    let said = [status.message.trim(), status.reason.trim()]
        .into_iter()
        .find(|s| !s.is_empty());
    match said {
        Some(said) => format!("{said} ({})", status.code),
        None => format!("the API server answered {}", status.code),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[derive(Serialize)]
    struct Count {
        n: u32,
    }

    impl Report for Count {
        fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
            writeln!(out, "{} things", self.n)
        }
    }

    fn printed(format: Format) -> (String, String) {
        let (out, err) = (Buffer::default(), Buffer::default());
        let p = Printer::new(format, Box::new(out.clone()), Box::new(err.clone()));
        p.progress("pod/a released");
        p.text("pod/b: Terminating for 3m");
        p.note("note: read the cluster's policy");
        p.report(&Count { n: 2 }).unwrap();
        (out.text(), err.text())
    }

    #[test]
    fn text_keeps_progress_with_the_report_and_json_keeps_standard_output_clean() {
        let (out, err) = printed(Format::Text);
        assert_eq!(out, "pod/a released\npod/b: Terminating for 3m\n2 things\n");
        assert_eq!(err, "note: read the cluster's policy\n");

        let (out, err) = printed(Format::Json);
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc, serde_json::json!({"n": 2}));
        assert_eq!(err, "pod/a released\nnote: read the cluster's policy\n");
    }

    #[test]
    fn quoted_values_stay_on_one_line() {
        assert_eq!(quoted("node-lost: INC-1"), "\"node-lost: INC-1\"");
        assert_eq!(quoted("a\nb\"c"), "\"a\\nb\\\"c\"");
        assert_eq!(quoted("zero\u{200b}width"), "\"zero\\u{200b}width\"");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading pod/web-0")]
    struct Reading(#[source] kube::Error);

    #[test]
    fn an_api_servers_refusal_is_its_message_and_code_never_debug_text() {
        let status = kube::core::Status::failure(
            "pods \"web-0\" is forbidden: User \"alice\" cannot get resource \"pods\"",
            "Forbidden",
        )
        .with_code(403);
        let e = Reading(kube::Error::Api(status.boxed()));
        let text = chain(&e);
        assert_eq!(
            text,
            "reading pod/web-0: pods \"web-0\" is forbidden: User \"alice\" cannot get resource \"pods\" (403)"
        );
        assert!(!text.contains("Status {"), "{text}");
        // A cause its parent already said is not said twice.
        let io = io::Error::other("connection refused");
        let e = crate::error::Error::io("stdout", io);
        assert_eq!(chain(&e), "stdout: connection refused");
    }
}
