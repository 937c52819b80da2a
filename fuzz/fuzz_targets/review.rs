//! Arbitrary bytes through the wire layer, `admission::review_at`, under four
//! policies (enforce and warn; single-person and two-person overrides, with
//! rules), checking what the contract promises of every answer.
#![no_main]

use std::collections::BTreeSet;
use std::sync::LazyLock;

use finalizer_guard::admission::{LeanObject, ReviewError, Reviewed, parse_owned, review_at};
use finalizer_guard::admission::audit::AuditRecord;
use finalizer_guard::policy::{Mode, Policy};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Approvals in the seeds expire after this clock, and within `maxAge` of it.
const NOW: &str = "2026-11-21T08:00:00Z";

const TWO_PERSON: &str = r#"
rules:
  - name: platform-admins
    finalizers: ["*"]
    groups: ["platform-admins"]
  - name: team-a-db-operator
    finalizers: ["db.example.com/*"]
    serviceAccounts: ["team-a:db-operator"]
    namespaces: ["team-a"]
    resources: ["pods", "widgets.example.com"]
override:
  approval:
    users: [sec-lead@example.com]
    groups: [security-approvers]
    maxAge: 2h
"#;

static POLICIES: LazyLock<[Policy; 4]> = LazyLock::new(|| {
    let parse = |yaml: &str| Policy::from_yaml(yaml).expect("fuzz policies are valid");
    let enforce = parse(include_str!("../../tests/fixtures/policy.yaml"));
    let warn = parse(include_str!("../../tests/fixtures/policy-warn.yaml"));
    let two_person = parse(TWO_PERSON);
    let mut two_person_warn = two_person.clone();
    two_person_warn.mode = Mode::Warn;
    assert_eq!(enforce.mode, Mode::Enforce);
    assert_eq!(warn.mode, Mode::Warn);
    [enforce, warn, two_person, two_person_warn]
});

static CLOCK: LazyLock<jiff::Timestamp> = LazyLock::new(|| NOW.parse().unwrap());

const DECISIONS: &[&str] = &[
    "not-judged",
    "nothing-removed",
    "authorized",
    "override",
    "denied",
    "would-deny",
    "approval-recorded",
    "approval-denied",
    "approval-would-deny",
];

fuzz_target!(|data: &[u8]| {
    // What a JSON reader sees in the body, to compare the echoes with.
    let input: Option<Value> = serde_json::from_slice(data).ok();
    for policy in POLICIES.iter() {
        match review_at(policy, data, *CLOCK) {
            Ok(reviewed) => check_answer(policy, data, input.as_ref(), &reviewed),
            Err(error) => check_refusal(&error),
        }
    }
});

/// A refusal is a 400 with a one-line reason.
fn check_refusal(error: &ReviewError) {
    let text = error.to_string();
    assert!(!text.is_empty());
    let breaks = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    assert!(!text.contains(breaks), "reason spans lines: {text:?}");
}

fn check_answer(policy: &Policy, data: &[u8], input: Option<&Value>, reviewed: &Reviewed) {
    let body: Value = serde_json::from_slice(&reviewed.body).expect("the response is JSON");
    assert_eq!(body["kind"], "AdmissionReview");
    let version = body["apiVersion"].as_str().expect("apiVersion");
    assert!(
        matches!(version, "admission.k8s.io/v1" | "admission.k8s.io/v1beta1"),
        "{version}"
    );
    let response = &body["response"];
    let uid = response["uid"].as_str().expect("the uid echoed");
    assert!(!uid.is_empty());
    // The version is not compared with `input`: given a duplicated top-level
    // `apiVersion`, kube-core's flattened TypeMeta takes the first and a JSON
    // Value the last. A duplicated `request` or `uid` is refused.
    if let Some(input) = input {
        assert_eq!(input["request"]["uid"].as_str(), Some(uid));
    }
    assert_eq!(response["allowed"].as_bool(), Some(reviewed.allowed()));
    assert!(body.get("request").is_none(), "an answer carries no object");

    let decision = reviewed.verdict().as_str();
    assert!(DECISIONS.contains(&decision), "{decision}");
    assert_eq!(
        reviewed.allowed(),
        !matches!(decision, "denied" | "approval-denied"),
        "{decision}"
    );
    if policy.mode == Mode::Warn {
        assert!(reviewed.allowed(), "warn mode denied: {decision}");
    }
    if reviewed.allowed() {
        assert!(reviewed.message.is_none());
    } else {
        assert_eq!(response["status"]["code"], 403);
        assert_eq!(response["status"]["reason"], "Forbidden");
        let message = response["status"]["message"].as_str().expect("a message");
        assert_eq!(Some(message), reviewed.message.as_deref());
        assert!(message.contains(&policy.override_settings.annotation));
    }
    if reviewed.operation.as_str() != "UPDATE" {
        assert!(
            matches!(decision, "not-judged") || decision.starts_with("approval-"),
            "{} judged: {decision}",
            reviewed.operation.as_str()
        );
    }

    let annotations = response.get("auditAnnotations");
    let warnings = response.get("warnings");
    if matches!(decision, "not-judged" | "nothing-removed") {
        assert!(annotations.is_none() && warnings.is_none() && reviewed.audit.is_none());
        return;
    }
    for warning in warnings.and_then(Value::as_array).into_iter().flatten() {
        let warning = warning.as_str().expect("a warning is a string");
        assert!(warning.chars().count() <= 256, "{warning:?}");
    }
    let annotations = annotations
        .and_then(Value::as_object)
        .expect("a judged removal has audit annotations");
    assert_eq!(annotations["decision"], decision);
    for (key, value) in annotations {
        assert!(is_audit_key(key), "audit annotation key {key:?}");
        let value = value.as_str().expect("audit annotation values are strings");
        assert!(value.chars().count() <= 256, "{key}: {value:?}");
    }

    // Removed = set(old) - set(new), each once, read from the request as parsed.
    // A refused approval write is decided before removals are looked at.
    let audit = &reviewed.audit_record().expect("an audit record");
    assert_eq!(audit.uid, uid);
    assert_eq!(audit.decision.as_str(), decision);
    // The owned request a recording keeps is the same reading: it never
    // refuses a body the review read, and reads the same uid and lists.
    let request = parse_owned(data).expect("the owned request of a body the review read");
    assert_eq!(request.uid, uid);
    if !matches!(decision, "approval-denied" | "approval-would-deny") {
        let judged = reviewed.operation.as_str() == "UPDATE";
        let (old, new) = (request.old_object.as_ref(), request.object.as_ref());
        let metadata = |o: Option<&LeanObject>| o.and_then(|o| o.metadata.finalizers.clone());
        check_removed(
            audit,
            "metadata.finalizers",
            judged,
            metadata(old),
            metadata(new),
        );
        let spec = |o: Option<&LeanObject>| o.map(|o| o.spec_finalizers.clone());
        let finalize = request.resource.group.is_empty()
            && request.resource.resource == "namespaces"
            && request.sub_resource.as_deref() == Some("finalize");
        check_removed(
            audit,
            "spec.finalizers",
            judged && finalize,
            spec(old),
            spec(new),
        );
    }
    let unauthorized = audit
        .removed_finalizers
        .iter()
        .filter(|r| r.authorized_by.is_none())
        .count();
    assert_eq!(unauthorized, reviewed.unauthorized());
    match decision {
        "authorized" => assert_eq!(unauthorized, 0),
        "override" | "denied" | "would-deny" => assert!(unauthorized > 0),
        _ => {}
    }
}

/// The audit record names each finalizer of `field` in `old` but not in `new`, once.
fn check_removed(
    audit: &AuditRecord,
    field: &str,
    judged: bool,
    old: Option<Vec<String>>,
    new: Option<Vec<String>>,
) {
    let set = |l: Option<Vec<String>>| l.unwrap_or_default().into_iter().collect::<BTreeSet<_>>();
    let want: BTreeSet<String> = match judged {
        true => set(old).difference(&set(new)).cloned().collect(),
        false => BTreeSet::new(),
    };
    let got: Vec<&str> = audit
        .removed_finalizers
        .iter()
        .filter(|r| r.field.path() == field)
        .map(|r| r.finalizer.as_str())
        .collect();
    assert_eq!(got.len(), want.len(), "{field}: each removal once: {got:?}");
    assert!(
        got.iter().all(|f| want.contains(*f)),
        "{field}: {got:?} vs {want:?}"
    );
}

/// A plain qualified name: at most 63 characters, alphanumeric at both ends,
/// `-`, `_` and `.` between, and no `/` (kube-apiserver adds the prefix).
fn is_audit_key(key: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !key.is_empty()
        && key.len() <= 63
        && key.starts_with(alnum)
        && key.ends_with(alnum)
        && key
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}
