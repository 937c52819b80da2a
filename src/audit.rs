//! Audit records: one JSON line on standard output per judged finalizer removal.
//!
//! Logs go to standard error; audit records to standard output, so a log
//! pipeline can route them apart. Neither ever carries an object body.

use std::io::Write;

use serde::Serialize;

use crate::admission::AuditRecord;

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    kind: &'static str,
    #[serde(flatten)]
    record: &'a AuditRecord,
}

/// Renders one audit line (without the newline).
pub fn render(record: &AuditRecord) -> String {
    let line = Line {
        time: jiff::Timestamp::now().to_string(),
        kind: "FinalizerRemoval",
        record,
    };
    serde_json::to_string(&line).expect("an audit record always serializes")
}

/// Writes one audit line to standard output.
pub fn emit(record: &AuditRecord) {
    let mut line = render(record);
    line.push('\n');
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
        tracing::error!(error = %e, uid = %record.uid, "cannot write audit record");
    }
}
