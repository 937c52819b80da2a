//! `check`: recorded AdmissionReviews decided offline, exactly as the server
//! would decide them, one line per file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::admission;
use crate::error::{Error, Result, TlsError};
use crate::output::{Format, Printer, Report, escape};
use crate::pki::keys;
use crate::policy::seal::SealKey;
use crate::policy::{self, Policy, Verdict};

/// `check`'s settings, from the command line.
#[derive(Debug)]
pub struct Check {
    /// `--policy` (or `$FINALIZER_GUARD_POLICY`); `None`: the embedded default.
    pub policy: Option<PathBuf>,
    pub format: Format,
    /// The webhook's serving key, to verify approvals' seals.
    pub tls_key: Option<PathBuf>,
    pub max_body_bytes: usize,
    pub reviews: Vec<PathBuf>,
}

/// Exit code: 0 all allowed, 1 any denied, 2 any file not decided.
pub fn run(check: Check) -> Result<i32> {
    let Check {
        policy,
        format,
        tls_key,
        max_body_bytes,
        reviews,
    } = check;
    let policy = load_policy(policy.as_deref())?;
    let seal_key = tls_key.as_deref().map(seal_key).transpose()?;
    let out = Printer::stdio(format);
    let (mut denied, mut errors) = (false, false);
    for path in &reviews {
        let line = check_file(&policy, seal_key.as_ref(), max_body_bytes, path);
        denied |= line.allowed == Some(false);
        errors |= line.error.is_some();
        out.report(&line).map_err(Error::stdout)?;
    }
    Ok(if errors {
        2
    } else if denied {
        1
    } else {
        0
    })
}

/// Loads `--policy`, or the embedded default.
pub(crate) fn load_policy(path: Option<&Path>) -> Result<Policy> {
    match path {
        None => Ok(Policy::embedded_default()),
        Some(path) => policy::load(path).map_err(|e| Error::policy(path, e)),
    }
}

/// What `check` concluded for one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckLine {
    pub file: String,
    /// `None` when the file could not be decided.
    pub allowed: Option<bool>,
    pub decision: Option<Verdict>,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
}

impl Report for CheckLine {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        // Each value on its line: a file name's newline cannot forge a result line.
        let file = escape(&self.file);
        match (&self.error, self.allowed) {
            (Some(e), _) => writeln!(out, "{file}: error: {}", escape(e)),
            (None, Some(false)) => writeln!(
                out,
                "{file}: denied: {}",
                escape(self.message.as_deref().unwrap_or_default())
            ),
            (None, _) => writeln!(out, "{file}: allowed"),
        }
    }

    /// One JSON object per line, as the contract says: a line per file
    /// whatever the format.
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }
}

/// Decides one file with the server's own function. Only a regular file
/// no larger than `max_body_bytes` (what the webhook would accept) is read.
pub fn check_file(
    policy: &Policy,
    seal_key: Option<&SealKey>,
    max_body_bytes: usize,
    path: &Path,
) -> CheckLine {
    let file = path.display().to_string();
    let failed = |e: String| CheckLine {
        file: file.clone(),
        allowed: None,
        decision: None,
        message: None,
        warnings: Vec::new(),
        error: Some(e),
    };
    let body = match crate::files::read_regular(path, max_body_bytes as u64) {
        Ok(body) => body,
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
            return failed(format!(
                "{e}: the webhook would answer 413 (--max-body-bytes)"
            ));
        }
        Err(e) => return failed(e.to_string()),
    };
    match admission::review_with(policy, &body, jiff::Timestamp::now(), seal_key) {
        Ok(r) => CheckLine {
            file,
            allowed: Some(r.allowed()),
            decision: Some(r.verdict()),
            message: r.message,
            warnings: r.warnings,
            error: None,
        },
        // What the file holds is not quoted: it may be a secret passed by mistake.
        Err(e) => failed(crate::output::without_values(&e.to_string())),
    }
}

/// The webhook's serving key, to verify approvals' seals as it does.
fn seal_key(path: &Path) -> Result<SealKey> {
    let pem = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let key = keys::seal_key(&pem).map_err(|e| TlsError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check`'s text line is one line, whatever the file's name holds.
    #[test]
    fn a_check_line_is_one_line_whatever_the_file_is_named() {
        let line = CheckLine {
            file: "x.json: allowed\nevil.json\u{1b}[2J".into(),
            allowed: Some(false),
            decision: None,
            message: Some("denied\nother.json: allowed".into()),
            warnings: Vec::new(),
            error: None,
        };
        let mut out = Vec::new();
        line.write_text(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "x.json: allowed\\u{a}evil.json\\u{1b}[2J: denied: denied\\u{a}other.json: allowed\n"
        );
    }
}
