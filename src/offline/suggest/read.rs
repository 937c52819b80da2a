//! Reading evidence from files and folders: the only part of `policy
//! suggest` that touches files.

use std::cell::Cell;
use std::io::{BufRead, Read};
use std::path::Path;
use std::rc::Rc;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::evidence::{Evidence, Parsed};
use super::managed;
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
                "{}: no webhook audit records, recordings or kube-apiserver audit events (as a cluster writes them, or as EKS, GKE or AKS deliver them) in this folder",
                path.display()
            ));
        }
        return Ok(());
    }
    if read_file(path, evidence)? == 0 {
        return Err(format!(
            "{}: neither webhook audit records (JSON lines), a recording, nor a kube-apiserver audit log (as a cluster writes it, or as EKS, GKE or AKS deliver it)",
            path.display()
        ));
    }
    Ok(())
}

/// The longest line of a log, and the largest recording or entry of a
/// JSON document, read: a kube-apiserver audit event at the
/// RequestResponse level carries the request and the response, each an
/// object of up to 3 MiB.
const MAX_EVIDENCE_LINE: usize = 16 * 1024 * 1024;

/// How many evidence entries the file held.
fn read_file(path: &Path, evidence: &mut Evidence) -> Result<usize, String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = files::open_regular(path).map_err(err)?;
    let mut reader = std::io::BufReader::new(file);
    if reader.fill_buf().map_err(err)?.starts_with(&[0x1f, 0x8b]) {
        return Err(format!(
            "{}: gzip-compressed (as a CloudWatch Logs export to S3 is): gunzip it first",
            path.display()
        ));
    }
    let mut lines = Lines::default();
    let Some(first) = lines.next(&mut reader).map_err(err)? else {
        return Ok(0);
    };
    let mut found = 0;
    let mut add = |parsed| found += usize::from(evidence.add(parsed));
    // A recording, a CloudWatch Logs or Azure Monitor document, or a JSON
    // array of entries (gcloud, az) is one pretty-printed JSON document;
    // logs are JSON lines.
    if matches!(first.trim(), "{" | "[") {
        let mut text = first.into_bytes();
        text.push(b'\n');
        document(std::io::Cursor::new(text).chain(reader), &mut add)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(found);
    }
    // Lines neither JSON nor a CloudWatch export line are skipped, and said
    // to be: evidence in a garbled line would otherwise go missing unseen.
    let mut unread = Unread::default();
    unread.count(&first, 1, managed::line(&first, &mut add));
    while let Some(line) = lines.next(&mut reader).map_err(err)? {
        let read = managed::line(&line, &mut add);
        unread.count(&line, lines.number, read);
    }
    if let Some(first) = unread.first {
        eprintln!(
            "note: {}: skipped {} line(s) neither JSON nor a CloudWatch Logs export line (the first: line {first}); a removal in them is not counted",
            crate::output::escape(&path.display().to_string()),
            unread.lines
        );
    }
    Ok(found)
}

/// The lines of a log that could not be read.
#[derive(Default)]
struct Unread {
    lines: usize,
    first: Option<usize>,
}

impl Unread {
    fn count(&mut self, line: &str, number: usize, read: bool) {
        if !read && !line.trim().is_empty() {
            self.lines += 1;
            self.first.get_or_insert(number);
        }
    }
}

/// Reads one JSON document from `reader`, entry by entry: the elements of
/// a top-level array, or of an object's `events` (CloudWatch Logs) or
/// `records` (Azure Monitor) array, each parsed and handed to `out` before
/// the next is read; any other object (a recording) whole. Each entry, and
/// the rest of the document between them, is at most
/// [`MAX_EVIDENCE_LINE`] bytes: past it the reading stops with an error,
/// the document is never held whole.
fn document(reader: impl Read, out: &mut dyn FnMut(Parsed)) -> Result<(), String> {
    let used = Rc::new(Cell::new(0));
    let counted = Counted {
        inner: reader,
        used: Rc::clone(&used),
    };
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(counted));
    let top = Top { out, used: &used };
    match top.deserialize(&mut de).and_then(|()| de.end()) {
        Ok(()) => Ok(()),
        Err(e) if e.is_io() => Err(e.to_string()),
        Err(e) => Err(format!("not a whole JSON document: {e}")),
    }
}

/// A reader that counts the bytes read since `used` was last set to 0,
/// failing past [`MAX_EVIDENCE_LINE`].
struct Counted<R> {
    inner: R,
    used: Rc<Cell<usize>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.used.set(self.used.get() + n);
        if self.used.get() > MAX_EVIDENCE_LINE + 64 * 1024 {
            return Err(std::io::Error::other(format!(
                "an entry of the JSON document (or the document, for a recording) is larger than {MAX_EVIDENCE_LINE} bytes: not read"
            )));
        }
        Ok(n)
    }
}

/// The top of a document: an array of entries, or an object.
struct Top<'a> {
    out: &'a mut dyn FnMut(Parsed),
    used: &'a Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object or array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        stream(&mut seq, self.out, self.used)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut rest = serde_json::Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if matches!(key.as_str(), "events" | "records") && !streamed {
                streamed = map.next_value_seed(Entries {
                    out: &mut *self.out,
                    used: self.used,
                })?;
            } else {
                rest.insert(key, map.next_value()?);
            }
        }
        if !streamed {
            managed::entries(&Value::Object(rest), self.out);
        }
        Ok(())
    }
}

/// Each element of a sequence, parsed and handed on as soon as it is read.
fn stream<'de, A: SeqAccess<'de>>(
    seq: &mut A,
    out: &mut dyn FnMut(Parsed),
    used: &Cell<usize>,
) -> Result<(), A::Error> {
    loop {
        used.set(0);
        match seq.next_element::<Value>()? {
            Some(value) => out(managed::entry(&value)),
            None => return Ok(()),
        }
    }
}

/// An object's `events` or `records`: streamed when an array (`true`), passed over otherwise.
struct Entries<'a> {
    out: &'a mut dyn FnMut(Parsed),
    used: &'a Cell<usize>,
}

impl<'de> DeserializeSeed<'de> for Entries<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<bool, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        stream(&mut seq, self.out, self.used).map(|()| true)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
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
    use super::super::evidence::EvidenceSource;
    use super::super::fixtures::{CONTROLLER, apiserver};
    use super::*;

    /// A pretty-printed document is read entry by entry: every entry of a
    /// CloudWatch Logs document and of a JSON array counts; one entry past
    /// the limit is an error, however small the others.
    #[test]
    fn documents_are_read_entry_by_entry_each_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.json");
        let events: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                serde_json::json!({"logStreamName": "kube-apiserver-audit-1", "eventId": i.to_string(),
                    "timestamp": 1, "message": apiserver(&i.to_string(), CONTROLLER, "would-deny", "example.com/a")})
            })
            .collect();
        let doc =
            serde_json::json!({"searchedLogStreams": [], "events": events, "nextToken": null});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        let mut e = Evidence::default();
        assert_eq!(read_file(&path, &mut e).unwrap(), 3);
        assert_eq!(e.seen.len(), 3);
        assert_eq!(e.read.get(&EvidenceSource::CloudWatch), Some(&3));

        // gcloud's JSON array.
        std::fs::write(&path, serde_json::to_string_pretty(&events).unwrap()).unwrap();
        assert_eq!(read_file(&path, &mut Evidence::default()).unwrap(), 3);

        // An entry past the limit: an error, not a whole read.
        let big = "x".repeat(MAX_EVIDENCE_LINE + 100 * 1024);
        let doc = serde_json::json!({"events": [events[0], {"message": big}, events[1]]});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        let err = read_file(&path, &mut Evidence::default()).unwrap_err();
        assert!(err.contains("larger than 16777216 bytes"), "{err}");

        // Not whole: an error naming why.
        std::fs::write(&path, "{\n  \"events\": [\n").unwrap();
        let err = read_file(&path, &mut Evidence::default()).unwrap_err();
        assert!(err.contains("not a whole JSON document"), "{err}");

        // Compressed, as an export to S3 is.
        std::fs::write(&path, [0x1f, 0x8b, 8, 0, 0]).unwrap();
        let err = read_file(&path, &mut Evidence::default()).unwrap_err();
        assert!(err.contains("gunzip it first"), "{err}");
    }

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
