//! Reading evidence from files and folders: the only part of `policy
//! suggest` that touches files.

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use super::evidence::{Evidence, parse_line, parse_recording};
use crate::files::{self, Found};

/// Reads a file or a folder (recursively) into `evidence`. A file with no
/// evidence of any kind is an error: the wrong path, most likely. Only
/// regular files are read (a FIFO or a device is an error), and no folder
/// twice: one reached again through a symlink is skipped, with a note.
pub fn read_path(path: &Path, evidence: &mut Evidence) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        let before: usize = evidence.read.values().sum();
        for found in files::walk(path, &|_| true) {
            match found {
                Found::File(entry) => {
                    if read_file(&entry, evidence)? == 0 {
                        eprintln!(
                            "note: {}: no evidence in it, skipped",
                            crate::output::escape(&entry.display().to_string())
                        );
                    }
                }
                Found::Again { path, first } => {
                    let again = format!("{}: {}", path.display(), files::again(&first));
                    eprintln!("note: {}", crate::output::escape(&again));
                }
                Found::Error { path, error } => return Err(format!("{}: {error}", path.display())),
            }
        }
        if evidence.read.values().sum::<usize>() == before {
            return Err(format!(
                "{}: no webhook audit records, recordings or kube-apiserver audit events in this folder",
                path.display()
            ));
        }
        return Ok(());
    }
    if read_file(path, evidence)? == 0 {
        return Err(format!(
            "{}: neither webhook audit records (JSON lines), a recording, nor a kube-apiserver audit log",
            path.display()
        ));
    }
    Ok(())
}

/// The longest line of a log, and the largest recording, read: a
/// kube-apiserver audit event at the RequestResponse level carries the
/// request and the response, each an object of up to 3 MiB.
const MAX_EVIDENCE_LINE: usize = 16 * 1024 * 1024;

/// How many evidence entries the file held.
fn read_file(path: &Path, evidence: &mut Evidence) -> Result<usize, String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = files::open_regular(path).map_err(err)?;
    let mut reader = std::io::BufReader::new(file);
    let mut lines = Lines::default();
    let Some(first) = lines.next(&mut reader).map_err(err)? else {
        return Ok(0);
    };
    let mut found = 0;
    // A recording is one pretty-printed JSON document; logs are JSON lines.
    if first.trim() == "{" {
        let mut text = first;
        std::io::Read::read_to_string(
            &mut std::io::Read::take(&mut reader, MAX_EVIDENCE_LINE as u64),
            &mut text,
        )
        .map_err(err)?;
        if text.len() >= MAX_EVIDENCE_LINE {
            return Err(format!(
                "{}: a recording larger than {MAX_EVIDENCE_LINE} bytes: not read",
                path.display()
            ));
        }
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            found += usize::from(evidence.add(parse_recording(&value)));
        }
        return Ok(found);
    }
    found += usize::from(evidence.add(parse_line(&first)));
    while let Some(line) = lines.next(&mut reader).map_err(err)? {
        found += usize::from(evidence.add(parse_line(&line)));
    }
    Ok(found)
}

/// The lines of a file, each at most [`MAX_EVIDENCE_LINE`] bytes: one
/// longer is an error naming it, not a read of the whole file into memory.
#[derive(Default)]
struct Lines {
    number: usize,
}

impl Lines {
    fn next(&mut self, reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        let limit = MAX_EVIDENCE_LINE as u64 + 1;
        std::io::Read::take(&mut *reader, limit).read_until(b'\n', &mut buf)?;
        if buf.is_empty() {
            return Ok(None);
        }
        self.number += 1;
        if buf.len() > MAX_EVIDENCE_LINE {
            return Err(std::io::Error::other(format!(
                "line {} is longer than {MAX_EVIDENCE_LINE} bytes",
                self.number
            )));
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        String::from_utf8(buf).map(Some).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {} is not UTF-8", self.number),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlong_line_is_an_error_not_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut text = String::from("{\"kind\":\"Event\"}\n");
        text.push_str(&"x".repeat(MAX_EVIDENCE_LINE + 10));
        std::fs::write(&path, text).unwrap();
        let e = read_file(&path, &mut Evidence::default()).unwrap_err();
        assert!(e.contains("line 2 is longer than"), "{e}");
        // Lines within the limit, CRLF or not, a last one without a newline.
        std::fs::write(&path, "a\r\nb\nc").unwrap();
        let mut reader = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let mut lines = Lines::default();
        let mut got = Vec::new();
        while let Some(line) = lines.next(&mut reader).unwrap() {
            got.push(line);
        }
        assert_eq!(got, ["a", "b", "c"]);
    }
}
