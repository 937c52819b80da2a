//! Case files: an AdmissionReview (or a raw body) and what the webhook must
//! answer, checked offline through the server's own code path.
//!
//! A case file is `{"note", "review": AdmissionReview, "expect"}` or
//! `{"note", "raw": "body", "expect": {"httpStatus": 400}}`. Each answer gets
//! the checks `apiserver-sim verify` applies over HTTPS
//! (shared/tools/apiserver-sim/main.go): kube-apiserver's own checks on a
//! webhook response, then the case's `expect`. Besides the fields
//! apiserver-sim reads (`allowed`, `messageContains`, `warningContains`,
//! `auditContains`, `responseVersion`, `httpStatus`, ...), `expect` may carry
//! fields apiserver-sim ignores, because they assert an absence it cannot:
//! - `silent`: the response has no audit annotations and no warnings (nothing removed);
//! - `messageExcludes`, `auditExcludes`: substrings the denial message / the
//!   `key=value` audit annotations must not contain (e.g. an authorized
//!   finalizer that a partial denial must not name).
//!
//! `finalizer-guard test` and the crate's own tests (tests/cases.rs) use these
//! same checks, so a case passes in both or in neither.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::admission::review;
use crate::policy::Policy;

/// One case file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    pub note: String,
    #[serde(default)]
    pub review: Option<Value>,
    #[serde(default)]
    pub raw: Option<String>,
    pub expect: Expect,
}

/// apiserver-sim's `expect`, plus the absence checks only this test makes.
/// Unknown fields are refused so that a misspelled expectation fails loudly
/// here instead of being ignored by both checkers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    #[serde(default)]
    pub allowed: Option<bool>,
    #[serde(default)]
    pub http_status: u16,
    #[serde(default)]
    pub message_contains: Vec<String>,
    #[serde(default)]
    pub warning_contains: Vec<String>,
    #[serde(default)]
    pub audit_contains: Vec<String>,
    /// A latency bound for the live server; meaningless offline.
    #[serde(default)]
    pub max_millis: u64,
    #[serde(default)]
    pub response_version: String,
    /// Declared by apiserver-sim but not checked there either.
    #[serde(default)]
    pub needs_audit_on_deny: bool,
    #[serde(default)]
    pub silent: bool,
    #[serde(default)]
    pub message_excludes: Vec<String>,
    #[serde(default)]
    pub audit_excludes: Vec<String>,
}

/// The response as apiserver-sim reads it (its `review` and `response` types).
#[derive(Debug, Deserialize)]
struct ResponseReview {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    allowed: Option<bool>,
    #[serde(default)]
    patch: Option<Value>,
    #[serde(default)]
    status: Option<ResponseStatus>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
    #[serde(default)]
    audit_annotations: Option<HashMap<String, String>>,
}

#[derive(Debug, Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

/// Case-insensitive substring, as apiserver-sim compares (`strings.ToLower`).
fn contains_folded(haystack: &str, needle: &str) -> bool {
    haystack
        .to_lowercase()
        .contains(needle.to_lowercase().as_str())
}

/// kube-apiserver keeps an audit annotation key only if it is a qualified name
/// (`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`) of at most 63 characters.
pub fn is_qualified_name(key: &str) -> bool {
    let b = key.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A fresh random v4 uid, as the apiserver makes one per call: a webhook that
/// answers with the uid it was recorded with, not the one it got, must fail.
fn fresh_uid() -> String {
    let state = std::collections::hash_map::RandomState::new();
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What one case came to: the decision (or refusal), and every problem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// What was decided, in one line: the verdict, or `refused: WHY`.
    pub decided: String,
    /// Empty when the case passes.
    pub problems: Vec<String>,
}

impl Checked {
    fn problem(problem: String) -> Checked {
        Checked {
            decided: String::new(),
            problems: vec![problem],
        }
    }
}

/// Reads and checks one case file.
pub fn check_file(policy: &Policy, path: &Path) -> Checked {
    let text = match crate::files::read_regular(path, crate::files::DEFAULT_MAX_BODY_BYTES as u64) {
        Ok(text) => text,
        Err(e) => return Checked::problem(format!("cannot read: {e}")),
    };
    // A Value keeps one copy of a repeated key: the webhook refuses such a review.
    if let Err(e) = crate::admission::json::distinct_keys(&text) {
        return Checked::problem(format!("bad case file: {e}"));
    }
    match serde_json::from_slice::<CaseFile>(&text) {
        Ok(case) => check(policy, &case),
        Err(e) => Checked::problem(format!("bad case file: {e}")),
    }
}

/// Checks one case: the case file itself, then the webhook's answer.
pub fn check(policy: &Policy, case: &CaseFile) -> Checked {
    let mut problems = Vec::new();
    if case.note.trim().is_empty() {
        problems.push("bad case file: empty note".to_string());
    }
    let expect = &case.expect;
    if expect.silent && expect.allowed != Some(true) {
        problems.push("bad case file: silent without \"allowed\": true".to_string());
    }
    let mut checked = match (&case.review, &case.raw) {
        (Some(_), Some(_)) | (None, None) => {
            Checked::problem("bad case file: needs exactly one of review and raw".to_string())
        }
        (None, Some(raw)) => check_raw(policy, raw, expect),
        (Some(doc), None) => check_review(policy, doc.clone(), expect),
    };
    problems.append(&mut checked.problems);
    checked.problems = problems;
    checked
}

/// A malformed body: the server answers 400, which offline is `Err` from `review`.
pub fn check_raw(policy: &Policy, raw: &str, expect: &Expect) -> Checked {
    let mut problems = Vec::new();
    let mut decided = String::new();
    if expect.http_status != 0 && expect.http_status != 400 {
        problems.push(format!(
            "bad case file: httpStatus {} cannot be checked offline; review() errors are HTTP 400",
            expect.http_status
        ));
    }
    match review(policy, raw.as_bytes()) {
        Err(e) => {
            let reason = e.to_string();
            if reason.trim().is_empty() || reason.contains('\n') {
                problems.push(format!("400 reason must be one line, got {reason:?}"));
            }
            decided = format!("refused: {reason}");
        }
        Ok(r) => problems.push(format!(
            "HTTP 200 for a malformed body, want 400 (allowed={}, decision={})",
            r.allowed(),
            r.verdict()
        )),
    }
    Checked { decided, problems }
}

/// What a response said, as the expectations read it.
struct Answered {
    allowed: bool,
    code: i64,
    message: String,
    warnings: Vec<String>,
    audit: HashMap<String, String>,
}

impl Answered {
    /// A denial's shape, then each of `expect`'s checks.
    fn problems(&self, expect: &Expect) -> Vec<String> {
        let Answered {
            allowed,
            code,
            message,
            warnings,
            audit,
        } = self;
        let mut problems = Vec::new();
        if let Some(want) = expect.allowed
            && *allowed != want
        {
            problems.push(format!(
                "allowed={allowed}, want {want} (message {message:?})"
            ));
        }
        if !allowed && message.trim().is_empty() {
            problems.push("denied without explanation (empty status.message)".to_string());
        }
        // docs/policy.md, the decision rules, Rule 6: a denial is an HTTP-style 403.
        if !allowed && *code != 403 {
            problems.push(format!("denied with status.code {code}, want 403"));
        }
        let mut pairs: Vec<String> = audit.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.sort();
        for (text, shown, lacks, wanted, unwanted) in [
            (
                message.clone(),
                format!("message {message:?}"),
                "lacks",
                &expect.message_contains,
                &expect.message_excludes,
            ),
            (
                warnings.join("\n"),
                format!("warnings {warnings:?}"),
                "lack",
                &expect.warning_contains,
                &Vec::new(),
            ),
            (
                pairs.join("\n"),
                format!("audit annotations {pairs:?}"),
                "lack",
                &expect.audit_contains,
                &expect.audit_excludes,
            ),
        ] {
            for s in wanted {
                if !contains_folded(&text, s) {
                    problems.push(format!("{shown} {lacks} {s:?}"));
                }
            }
            for s in unwanted {
                if contains_folded(&text, s) {
                    problems.push(format!("{shown} should not contain {s:?}"));
                }
            }
        }
        if expect.silent {
            if !audit.is_empty() {
                problems.push(format!(
                    "nothing was removed, yet audit annotations {pairs:?}"
                ));
            }
            if !warnings.is_empty() {
                problems.push(format!("nothing was removed, yet warnings {warnings:?}"));
            }
        }
        problems
    }
}

/// apiserver-sim's `verify` for a review case, then the absence checks.
pub fn check_review(policy: &Policy, mut doc: Value, expect: &Expect) -> Checked {
    // withUID: a fresh request.uid per call.
    let Some(request) = doc.get_mut("request").and_then(Value::as_object_mut) else {
        return Checked::problem("bad case: review has no request object".to_string());
    };
    let uid = fresh_uid();
    request.insert("uid".to_string(), Value::String(uid.clone()));
    let version = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let body = serde_json::to_vec(&doc).expect("a JSON value serializes");

    let reviewed = match review(policy, &body) {
        Ok(r) => r,
        Err(e) => return Checked::problem(format!("HTTP 400: {e}")),
    };
    let answer: ResponseReview = match serde_json::from_slice(&reviewed.body) {
        Ok(a) => a,
        Err(e) => return Checked::problem(format!("response is not an AdmissionReview: {e}")),
    };

    let decided = reviewed.verdict().to_string();
    let mut problems = Vec::new();
    let want = if expect.response_version.is_empty() {
        version.as_str()
    } else {
        expect.response_version.as_str()
    };
    if answer.api_version != want || answer.kind != "AdmissionReview" {
        problems.push(format!(
            "response is {}/{}, want {want}/AdmissionReview",
            answer.api_version, answer.kind
        ));
    }
    let Some(response) = answer.response else {
        problems.push("webhook response was absent".to_string());
        return Checked { decided, problems };
    };
    if response.uid != uid {
        problems.push(format!(
            "expected response.uid={uid:?}, got {:?}",
            response.uid
        ));
    }
    if response.patch.is_some() {
        problems.push("validating webhook may not return a patch".to_string());
    }
    let Some(allowed) = response.allowed else {
        problems.push("response.allowed is missing".to_string());
        return Checked { decided, problems };
    };
    let audit = response.audit_annotations.unwrap_or_default();
    let mut keys: Vec<&String> = audit.keys().collect();
    keys.sort();
    for key in keys {
        if !is_qualified_name(key) {
            problems.push(format!(
                "audit annotation key {key:?} is not a qualified name: kube-apiserver drops it"
            ));
        }
    }
    let (code, message) = response
        .status
        .map(|s| (s.code, s.message))
        .unwrap_or_default();
    let answered = Answered {
        allowed,
        code,
        message,
        warnings: response.warnings.unwrap_or_default(),
        audit,
    };
    problems.extend(answered.problems(expect));
    Checked { decided, problems }
}
