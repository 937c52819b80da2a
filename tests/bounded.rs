//! What one client may make the server hold is bounded: the answer, the
//! audit record and the warnings of a review whatever it removes; a
//! connection whose client does not read its answers, or sends no request,
//! over HTTP/1.1 or HTTP/2; the series of /metrics whatever the bodies say.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{start_with, strip};
use finalizer_guard::admission::{self, ReviewBuilder};
use finalizer_guard::audit::MAX_AUDITED_FINALIZERS;
use finalizer_guard::policy::message::{MAX_NAMED_FINALIZERS, MAX_WARNING_CHARS, Thousands};
use finalizer_guard::policy::{Policy, Verdict};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest body `serve` accepts by default (`--max-body-bytes`).
const MAX_BODY: usize = 8 * 1024 * 1024;

/// How long anything the server should do promptly may take here.
const BOUND: Duration = Duration::from_secs(30);

/// A review of at most `max` bytes by `mallory` stripping as many tiny
/// finalizers as fit; how many.
fn strip_many(builder: ReviewBuilder, max: usize) -> (Vec<u8>, usize) {
    let template = builder.finalizers(json!("LIST"), Value::Null).to_vec();
    let template = String::from_utf8(template).unwrap();
    let room = max - (template.len() - "\"LIST\"".len());
    let mut list = String::with_capacity(room);
    list.push('[');
    let mut n = 0usize;
    loop {
        let name = format!("\"f{n:x}\"");
        if list.len() + name.len() + 2 > room {
            break;
        }
        if n > 0 {
            list.push(',');
        }
        list.push_str(&name);
        n += 1;
    }
    list.push(']');
    let body = template.replacen("\"LIST\"", &list, 1).into_bytes();
    assert!(body.len() <= max);
    (body, n)
}

#[test]
fn a_review_removing_any_number_of_finalizers_has_a_bounded_answer_and_record() {
    let (body, n) = strip_many(ReviewBuilder::pod_update("mallory"), MAX_BODY);
    assert!(n > 800_000, "{n} finalizers");
    let enforce = Policy::embedded_default();
    let reviewed = admission::review(&enforce, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Denied);
    assert_eq!(reviewed.unauthorized(), n);
    // The message still names the first finalizers, the object, the
    // requester and how to override; the rest are counted.
    let message = reviewed.message.clone().unwrap();
    let more = format!(
        "\"f{:x}\" and {} more from pods \"web-0\" in namespace \"team-a\": requester \"mallory\"",
        MAX_NAMED_FINALIZERS - 1,
        Thousands(n - MAX_NAMED_FINALIZERS)
    );
    assert!(message.contains(&more), "{message}");
    assert!(message.contains("finalizer-guard.io/override"), "{message}");
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    let entry = reviewed.audit.as_ref().unwrap();
    assert!(
        entry.fields().len() < 16 * 1024,
        "audit record of {} bytes",
        entry.fields().len()
    );
    let record = reviewed.audit_record().unwrap();
    assert_eq!(record.removed_finalizers.len(), MAX_AUDITED_FINALIZERS);
    assert_eq!(record.removed_finalizers[0].finalizer, "f0");
    assert_eq!(
        record.removed_finalizers_omitted,
        n - MAX_AUDITED_FINALIZERS
    );
    let answer: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let removed = answer["response"]["auditAnnotations"]["removed-finalizers"]
        .as_str()
        .unwrap();
    assert!(
        removed.starts_with("f0,f1,f2,") && removed.ends_with("..."),
        "{removed}"
    );

    // Warn mode: a bounded warning in place of the denial.
    let warn = Policy::from_yaml("mode: warn\n").unwrap();
    let reviewed = admission::review(&warn, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::WouldDeny);
    assert!(reviewed.warnings[0].chars().count() <= MAX_WARNING_CHARS);
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    assert!(reviewed.audit.unwrap().fields().len() < 16 * 1024);

    // An override: allowed, with a bounded warning and record.
    let (body, _) = strip_many(
        ReviewBuilder::pod_update("mallory")
            .annotate("finalizer-guard.io/override", "node-lost: INC-4711 gone"),
        MAX_BODY,
    );
    let reviewed = admission::review(&enforce, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Override);
    assert!(reviewed.warnings[0].chars().count() <= MAX_WARNING_CHARS);
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    assert!(reviewed.audit.unwrap().fields().len() < 16 * 1024);
}

