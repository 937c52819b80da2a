//! One output vocabulary for every command, as kubectl's printers give one:
//! `-o text|json`, a report that is a typed value knowing its text and JSON
//! forms ([`Report`]), and one [`Printer`] that puts each thing where it
//! belongs. Under `-o json` standard output holds the JSON document alone;
//! progress and notes go to standard error, so a pipe into `jq` still works
//! while a person watches.

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::Mutex;

use clap::{Args, ValueEnum};
use serde::Serialize;
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

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

    /// One line to `to`, escaped ([`escape`]): what it quotes from the
    /// cluster never acts on the terminal. A line that cannot be written is
    /// not a reason to stop work under way: the report at the end says
    /// whether output failed.
    fn line(to: &Mutex<Box<dyn Write + Send>>, line: impl std::fmt::Display) {
        let line = line.to_string();
        let mut to = to.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(to, "{}", escape_lines(&line));
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
            // Escaped as every line is; JSON escapes what it must itself.
            Format::Text => {
                let mut text = Vec::new();
                report.write_text(&mut text)?;
                let text = String::from_utf8_lossy(&text);
                out.write_all(escape_lines(&text).as_bytes())?;
            }
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

/// Whether a character would act on a terminal or hide in a line instead of
/// being shown: control and format characters, unassigned and private-use
/// code points, line and paragraph separators.
pub(crate) fn hidden(c: char) -> bool {
    if c.is_ascii() {
        // The only ASCII characters of these categories are the controls.
        return c.is_ascii_control();
    }
    c.is_control()
        || c.general_category_group() == GeneralCategoryGroup::Other
        || matches!(
            c.general_category(),
            GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        )
}

/// A value as a terminal line, a log line or an Event note shows it, on one
/// line: each hidden character (an escape sequence's ESC, a newline, a
/// bidirectional override) written as `\u{..}`, the rest as it is.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.contains(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape`] for text of several lines: each line escaped, the line breaks kept.
fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.contains(|c: char| c != '\n' && hidden(c)) {
        return Cow::Borrowed(s);
    }
    let lines: Vec<Cow<'_, str>> = s.split('\n').map(escape).collect();
    Cow::Owned(lines.join("\n"))
}

/// A parser's error (serde_json's, serde_yaml_ng's) without the values it
/// quotes from the file: the field path, the line and column, and the kind of
/// problem stay; `invalid type: string "…"` becomes `invalid type: a string`,
/// and the name in `unknown field `…`` or `unknown variant `…`` is withheld.
/// A file named by someone else (a suite's policy, a review) may be a secret:
/// what it holds must not reach a CI log through an error.
pub fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let next = [
            "invalid type: ",
            "invalid value: ",
            "unknown field `",
            "unknown variant `",
        ]
        .iter()
        .filter_map(|m| rest.find(m).map(|at| (at, *m)))
        .min();
        let Some((at, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + marker.len()..];
        if let Some(kind) = marker.strip_suffix('`') {
            // A name taken from the file, raw: the schema's own list follows it.
            out.push_str(kind);
            out.push_str("(name not shown)");
            let end = ["`, expected", "`, there are no"]
                .iter()
                .filter_map(|m| rest.rfind(m))
                .max();
            rest = match end {
                Some(end) => &rest[end + 1..],
                None => "",
            };
            continue;
        }
        out.push_str(marker);
        // serde's `Unexpected`: `string "…"` (Debug-escaped), `integer `1``,
        // `character `c``, `boolean `true``, `map`, `sequence`, …
        if let Some(after) = rest.strip_prefix("string \"") {
            out.push_str("a string");
            let mut escaped = false;
            let mut end = after.len();
            for (i, c) in after.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &after[end.min(after.len())..];
        } else if let Some(tick) = rest.find(" `").filter(|&t| {
            rest[..t]
                .chars()
                .all(|c| c.is_ascii_alphabetic() || c == ' ')
        }) {
            out.push_str(&rest[..tick]);
            let after = &rest[tick + 2..];
            rest = match after.find('`') {
                Some(end) => &after[end + 1..],
                None => "",
            };
        }
    }
}

/// One word of a command line a person pastes into a shell (bash, zsh, ksh,
/// POSIX sh), meaning exactly `word` there, whatever it holds: as it is
/// when it holds only characters no shell gives a meaning; in single quotes
/// otherwise (`'` written `'\''`); and where it holds a character that
/// would act on the terminal or hide (see [`escape`]), in ANSI-C quotes
/// (`$'...'`), each such character written as the escapes of its bytes, so
/// the line shown is plain printable text and pastes as the same bytes.
pub fn shell_word(word: &str) -> String {
    // zsh expands a word that starts with `=` (`=ls` is ls's path).
    let plain = !word.is_empty()
        && !word.starts_with('=')
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '.' | '-' | '_' | '/' | ':' | '@' | '+' | '=' | ',' | '%')
        });
    if plain {
        return word.to_string();
    }
    if !word.contains(hidden) {
        return format!("'{}'", word.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\'' => out.push_str(r"\'"),
            '\n' => out.push_str(r"\n"),
            '\t' => out.push_str(r"\t"),
            '\r' => out.push_str(r"\r"),
            // Its UTF-8 bytes, which `\xHH` gives back in every locale.
            c if hidden(c) => {
                let mut bytes = [0; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!(r"\x{b:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A command line for a person to paste: each word through [`shell_word`].
/// Placeholders a person replaces (`REASON`, `TEXT`) are plain words.
pub fn shell_command<S: AsRef<str>>(words: impl IntoIterator<Item = S>) -> String {
    let words: Vec<String> = words.into_iter().map(|w| shell_word(w.as_ref())).collect();
    words.join(" ")
}

/// An error and its causes, on one line: "cannot reach the API server:
/// https://10.0.0.1/: client error (Connect): tcp connect error: Connection
/// refused (os error 111)". A cause already said by the one before it is not
/// repeated. An API server's refusal is its message and code.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        // A boxed kube::Error (ClusterError keeps them boxed) is one too.
        let kube_error = cause.downcast_ref::<kube::Error>().or_else(|| {
            cause
                .downcast_ref::<Box<kube::Error>>()
                .map(|boxed| &**boxed)
        });
        let (said, last) = match kube_error {
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
    fn parser_errors_keep_where_and_what_but_not_the_value() {
        let token = "eyJhbGciOi.c2VjcmV0.sig";
        let e = serde_yaml_ng::from_str::<std::collections::BTreeMap<String, u8>>(token)
            .unwrap_err()
            .to_string();
        assert!(e.contains(token), "{e}");
        let shown = without_values(&e);
        assert!(!shown.contains("eyJ"), "{shown}");
        assert!(
            shown.starts_with("invalid type: a string, expected a map"),
            "{shown}"
        );
        let e = serde_json::from_str::<u8>(r#""AWS_SECRET \" \\ x""#)
            .unwrap_err()
            .to_string();
        let shown = without_values(&e);
        assert_eq!(
            shown,
            "invalid type: a string, expected u8 at line 1 column 20"
        );
        assert_eq!(
            without_values("rules[0]: unknown field `AKIA`, expected one of `a`, `b` at line 2"),
            "rules[0]: unknown field (name not shown), expected one of `a`, `b` at line 2"
        );
        assert_eq!(
            without_values("unknown variant `s3cr`et`, expected `x` or `y`"),
            "unknown variant (name not shown), expected `x` or `y`"
        );
        assert_eq!(
            without_values("invalid value: integer `42`, expected a port"),
            "invalid value: integer, expected a port"
        );
        assert_eq!(
            without_values("expected value at line 1 column 1"),
            "expected value at line 1 column 1"
        );
    }

    #[test]
    fn quoted_values_stay_on_one_line() {
        assert_eq!(quoted("node-lost: INC-1"), "\"node-lost: INC-1\"");
        assert_eq!(quoted("a\nb\"c"), "\"a\\nb\\\"c\"");
        assert_eq!(quoted("zero\u{200b}width"), "\"zero\\u{200b}width\"");
    }

    #[test]
    fn escapes_what_hides_or_breaks_a_line() {
        assert!(matches!(escape("plain/name-1"), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\nb\tc\u{200b}d\u{202e}e\u{2029}"),
            "a\\u{a}b\\u{9}c\\u{200b}d\\u{202e}e\\u{2029}"
        );
        assert_eq!(escape("w\u{1b}[2J\u{9b}"), "w\\u{1b}[2J\\u{9b}");
        // DEL, carriage return, NUL, the line separator, a zero-width joiner, a BOM.
        assert_eq!(
            escape("a\u{7f}b\rc\0d\u{2028}e\u{200d}f\u{feff}"),
            "a\\u{7f}b\\u{d}c\\u{0}d\\u{2028}e\\u{200d}f\\u{feff}"
        );
        assert_eq!(escape_lines("a\u{1b}\nb\r\n"), "a\\u{1b}\nb\\u{d}\n");
    }

    /// What a POSIX shell makes of `line`: its words, one a line (`printf
    /// '%s\n'`), or `None` when no shell is there to ask.
    fn words_in_shell(
        shell: &str,
        locale: &str,
        dir: &std::path::Path,
        line: &str,
    ) -> Option<String> {
        let out = std::process::Command::new(shell)
            .env("LC_ALL", locale)
            .arg("-c")
            .arg(format!("printf '%s\\n' {line}"))
            .current_dir(dir)
            .output()
            .ok()?;
        assert!(out.status.success(), "{shell}: {line}: {out:?}");
        Some(String::from_utf8(out.stdout).unwrap())
    }

    const HOSTILE: &[&str] = &[
        "x;touch${IFS}fg-pwned;#",
        "$(touch fg-pwned)",
        "`touch fg-pwned`",
        "it's",
        "\"quoted\" and 'single'",
        "back\\slash\\",
        "two\nlines",
        "tab\there",
        "\u{1b}[2J\u{1b}]0;title\u{7}",
        "\u{9b}31m",
        "r\u{e9}sum\u{e9}-\u{6f22}",
        "bidi\u{202e}txt.exe",
        "zero\u{200b}width",
        "",
        " ",
        "*",
        "~root",
        "=ls",
        "a|b&c>d<e",
        "!!",
        "#hash",
        "-n",
        "role/victim#decoy",
        "%41",
    ];

    #[test]
    fn shell_words_are_plain_text_and_mean_exactly_the_word() {
        assert_eq!(shell_word("web-0"), "web-0");
        assert_eq!(
            shell_word("widgets.example.com/w1"),
            "widgets.example.com/w1"
        );
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("$(x)"), "'$(x)'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(
            shell_word("x;touch${IFS}fg-pwned;#"),
            "'x;touch${IFS}fg-pwned;#'"
        );
        assert_eq!(shell_word("w\u{1b}[2J"), r"$'w\x1b[2J'");
        assert_eq!(shell_word("a\nb'c\\"), r"$'a\nb\'c\\'");
        assert_eq!(shell_word("x\u{202e}y"), r"$'x\xe2\x80\xaey'");
        assert_eq!(shell_word("=ls"), "'=ls'");
        assert_eq!(
            shell_command(["finalizer-guard", "unstick", "role/a b", "-n", "ns"]),
            "finalizer-guard unstick 'role/a b' -n ns"
        );
        for word in HOSTILE {
            let quoted = shell_word(word);
            // Plain printable text, on one line: nothing acts on the terminal.
            assert_eq!(escape(&quoted), quoted, "{word:?}");
            assert!(!quoted.contains('\n'), "{word:?}");
        }
    }

    /// Each hostile word, pasted into a real shell, is one word, exactly
    /// itself, and runs nothing.
    #[test]
    fn a_real_shell_reads_each_word_back_exactly() {
        let line = HOSTILE
            .iter()
            .map(|w| shell_word(w))
            .collect::<Vec<_>>()
            .join(" ");
        let mut asked = 0;
        let dir = std::env::temp_dir().join(format!("fg-shell-words-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // In a UTF-8 locale and without one: the bytes are the same.
        for (shell, locale) in [
            ("bash", "C.UTF-8"),
            ("bash", "C"),
            ("zsh", "C"),
            ("ksh", "C"),
        ] {
            let Some(out) = words_in_shell(shell, locale, &dir, &line) else {
                continue;
            };
            asked += 1;
            let expected: String = HOSTILE.iter().map(|w| format!("{w}\n")).collect();
            assert_eq!(out, expected, "{shell} {locale}");
        }
        let ran: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(ran.is_empty(), "a word ran a command: {ran:?}");
        assert!(asked > 0, "no shell to ask (bash is expected)");
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
        // Boxed, as ClusterError keeps it: the same.
        let status =
            kube::core::Status::failure("roles \"v\" is forbidden", "Forbidden").with_code(403);
        let e =
            crate::cluster::ClusterError::api("reading role/v", kube::Error::Api(status.boxed()));
        assert_eq!(chain(&e), "reading role/v: roles \"v\" is forbidden (403)");
        // A cause its parent already said is not said twice.
        let io = io::Error::other("connection refused");
        let e = crate::error::Error::io("stdout", io);
        assert_eq!(chain(&e), "stdout: connection refused");
    }
}
