//! The one review function: parse, read the change, decide, respond, and the audit record.

use std::collections::BTreeMap;

use kube_core::admission::{AdmissionRequest, Operation as WireOperation};
use serde::de::IgnoredAny;

use super::lean::LeanObject;
use super::request::{Object, Request};
use crate::admission::audit::{self, AuditEntry, AuditRecord, Subject};
use crate::admission::ledger::Ledger;
use crate::policy::seal::SealKey;
use crate::policy::{
    self, Change, Decision, FinalizerField, FinalizerLists, IdentityClass, Mode, Operation,
    Outcome, Policy, Requester, Target, Verdict, approval, message,
};

const V1: &str = "admission.k8s.io/v1";
const V1BETA1: &str = "admission.k8s.io/v1beta1";

/// Longest `request.uid` read: kube-apiserver sends a UUID (36 bytes).
pub const MAX_UID_BYTES: usize = 128;

/// The webhook's name in the ValidatingWebhookConfiguration the chart and
/// `manifests/` install; kube-apiserver writes the `auditAnnotations` of a
/// response in its audit log as `WEBHOOK_NAME/KEY`.
pub const WEBHOOK_NAME: &str = "finalizers.finalizer-guard.io";

/// Why a body could not be judged. The server answers 400 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("body is not an AdmissionReview: {0}")]
    NotAdmissionReview(String),
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request has no uid")]
    NoUid,
    /// kube-apiserver sends a UUID (36 characters): a longer uid is forged,
    /// and the answer echoes it.
    #[error("AdmissionReview request.uid is longer than {MAX_UID_BYTES} bytes: not a uid")]
    UidTooLong,
    #[error("UPDATE request has no {0}: cannot tell which finalizers it removes")]
    NoObject(&'static str),
    #[error("body is nested more than 128 levels deep at line {line} column {column}")]
    TooDeep { line: usize, column: usize },
    #[error(
        "{0}.spec.finalizers is not a list of finalizer names: cannot tell which finalizers it removes"
    )]
    NotFinalizerList(&'static str),
    /// An annotation a decision reads (the override's, an approval's) sent
    /// twice in `request.object` or `request.oldObject`: neither copy may win.
    #[error(
        "body is not an AdmissionReview: {object}.metadata.annotations: duplicate field `{key}`"
    )]
    DuplicateAnnotation { object: &'static str, key: String },
}

/// The answer to one review: the typed decision and its evidence, the
/// response bytes, and the audit record.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// The response AdmissionReview, serialized.
    pub body: Vec<u8>,
    pub operation: Operation,
    /// The API group of the resource written (`""` for the core group).
    pub group: String,
    /// The kind of identity that asked.
    pub identity: IdentityClass,
    /// What was decided and why, with what it read from the object.
    pub decision: Decision,
    /// For an override: what the removed finalizers were protecting.
    pub ledger: Option<Ledger>,
    /// `status.message` of a denial.
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// Present when finalizers were removed or an approval written.
    pub audit: Option<AuditEntry>,
}

impl Reviewed {
    pub fn verdict(&self) -> Verdict {
        self.decision.verdict()
    }

    pub fn allowed(&self) -> bool {
        self.decision.allowed()
    }

    /// How many finalizers were removed without a rule or built-in controller.
    pub fn unauthorized(&self) -> usize {
        self.decision.unauthorized().count()
    }

    /// The audit record, read back from the entry written.
    pub fn audit_record(&self) -> Option<AuditRecord> {
        let entry = self.audit.as_ref()?;
        Some(
            entry
                .record()
                .expect("an audit entry reads back as a record"),
        )
    }
}

/// Decides one AdmissionReview body under `policy`, by the webhook's clock,
/// with no key to seal two-person approvals with.
pub fn review(policy: &Policy, body: &[u8]) -> Result<Reviewed, ReviewError> {
    review_at(policy, body, jiff::Timestamp::now())
}

/// Decides one AdmissionReview body under `policy` as of `now`, with no seal key.
pub fn review_at(
    policy: &Policy,
    body: &[u8],
    now: jiff::Timestamp,
) -> Result<Reviewed, ReviewError> {
    review_with(policy, body, now, None)
}

/// Decides one AdmissionReview body under `policy` as of `now`, sealing
/// and verifying two-person approvals with `seal_key`: what the server runs.
pub fn review_with(
    policy: &Policy,
    body: &[u8],
    now: jiff::Timestamp,
    seal_key: Option<&SealKey>,
) -> Result<Reviewed, ReviewError> {
    let (api_version, request) = parse(body)?;
    let annotations = Annotations::read(&request, policy)?;
    let change = change(&request, &annotations, now, seal_key)?;
    let decision = match too_many_names(&request, &change) {
        Some(field) => Decision {
            outcome: Outcome::TooManyNames {
                field,
                enforced: policy.mode == Mode::Enforce,
            },
            removed: Vec::new(),
            evidence: Default::default(),
        },
        None => policy::decide(&change, policy),
    };
    // Only an override reads what the object was protecting.
    let ledger = decision.override_used().map(|_| {
        let old = request.old_object.as_ref();
        old.map(|old| super::lean::ledger_of_parts(&old.ledger))
            .unwrap_or_default()
    });
    let answer = respond(
        api_version,
        &request.uid,
        &change,
        &decision,
        policy,
        ledger.as_ref(),
    );
    let audit = decision.audited().then(|| {
        let kind = &request.kind;
        let subject = Subject {
            uid: &request.uid,
            kind: (&kind.group, &kind.version, &kind.kind),
            object_uid: request.old_object.as_ref().and_then(|o| o.uid.as_deref()),
            dry_run: request.dry_run,
            extra: request.user_info.extra.as_ref(),
        };
        AuditEntry::new(
            subject,
            &change,
            &decision,
            policy.mode,
            ledger.as_ref(),
            answer.message.as_deref(),
        )
    });
    Ok(Reviewed {
        body: answer.body.into_bytes(),
        operation: change.operation,
        group: request.resource.group.to_string(),
        identity: change.requester.class(),
        decision,
        ledger,
        message: answer.message,
        warnings: answer.warning.into_iter().collect(),
        audit,
    })
}

/// Step 1: the body as an AdmissionReview request with a uid, and the
/// version to answer in. The one check of the envelope: [`parse_owned`]
/// reads through it too.
pub fn parse(body: &[u8]) -> Result<(&'static str, Request<'_>), ReviewError> {
    let parsed: super::request::Review<'_> = match super::request::from_body(body) {
        Ok(parsed) => parsed,
        Err(e) => return Err(explain(body, e)),
    };
    let version = match &*parsed.api_version {
        V1 => V1,
        V1BETA1 => V1BETA1,
        _ => "",
    };
    if parsed.kind != "AdmissionReview" || version.is_empty() {
        return Err(ReviewError::NotAdmissionReview(format!(
            "apiVersion {:?} kind {:?}, want {V1} or {V1BETA1} AdmissionReview",
            parsed.api_version, parsed.kind
        )));
    }
    let request = parsed.request.ok_or(ReviewError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    if request.uid.len() > MAX_UID_BYTES {
        return Err(ReviewError::UidTooLong);
    }
    Ok((version, request))
}

/// The body as kube-core's owned AdmissionRequest: what a recording keeps.
/// Read by [`parse`], so refused as a review refuses it, with what a
/// recording keeps beyond a decision read beside it. Never on a review's path.
pub fn parse_owned(body: &[u8]) -> Result<AdmissionRequest<LeanObject>, ReviewError> {
    let (api_version, request) = parse(body)?;
    Ok(super::lean::owned(api_version, &request, body))
}

/// The annotations of `object` and `oldObject` that a decision reads: the
/// override annotation and the approval's. Others are never unescaped.
pub struct Annotations {
    new: BTreeMap<String, String>,
    old: BTreeMap<String, String>,
}

impl Annotations {
    /// Refuses one of them sent twice in an object, as a duplicated field a
    /// decision reads is refused ([`super::request`]).
    pub fn read(request: &Request<'_>, policy: &Policy) -> Result<Annotations, ReviewError> {
        let wanted = |k: &str| approval::is_approval_key(&policy.override_settings, k);
        let of = |object: Option<&Object<'_>>, field: &'static str| match object {
            None => Ok(BTreeMap::new()),
            Some(o) => o
                .decided_annotations(wanted)
                .map_err(|key| ReviewError::DuplicateAnnotation { object: field, key }),
        };
        Ok(Annotations {
            new: of(request.object.as_ref(), "request.object")?,
            old: of(request.old_object.as_ref(), "request.oldObject")?,
        })
    }
}

/// Step 2: what the request changes, as the policy core reads it.
pub fn change<'a>(
    request: &'a Request<'a>,
    annotations: &'a Annotations,
    now: jiff::Timestamp,
    seal_key: Option<&'a SealKey>,
) -> Result<Change<'a>, ReviewError> {
    let operation = match request.operation {
        WireOperation::Create => Operation::Create,
        WireOperation::Update => Operation::Update,
        WireOperation::Delete => Operation::Delete,
        WireOperation::Connect => Operation::Connect,
    };
    let (object, old_object) = (request.object.as_ref(), request.old_object.as_ref());
    if operation == Operation::Update {
        if object.is_none() {
            return Err(ReviewError::NoObject("object"));
        }
        if old_object.is_none() {
            return Err(ReviewError::NoObject("oldObject"));
        }
    }
    let change = Change {
        operation,
        target: Target {
            group: &request.resource.group,
            resource: &request.resource.resource,
            subresource: request.sub_resource.as_ref().map_or("", |s| &s.0),
            namespace: request.namespace.as_ref().map(|s| &*s.0),
            name: &request.name,
        },
        requester: Requester {
            username: request.user_info.username.as_ref().map_or("", |s| &s.0),
            groups: &request.user_info.groups,
        },
        metadata_finalizers: FinalizerLists {
            old: old_object.map_or(&[], |o| &o.finalizers),
            new: object.map_or(&[], |o| &o.finalizers),
        },
        spec_finalizers: FinalizerLists {
            old: old_object.map_or(&[], |o| &o.spec_finalizers),
            new: object.map_or(&[], |o| &o.spec_finalizers),
        },
        annotations: &annotations.new,
        old_annotations: &annotations.old,
        deleting: old_object.is_some_and(|o| o.deleting),
        // The object's uid: oldObject's for an UPDATE (the API server keeps
        // it unchanged), object's for a CREATE.
        uid: old_object
            .or(object)
            .and_then(|o| o.uid.as_deref())
            .filter(|uid| !uid.is_empty()),
        now,
        seal_key,
    };
    if change.target.is_namespace_finalize() {
        // A list read as empty in oldObject would hide its removal: refuse.
        for (field, object) in [
            ("request.oldObject", old_object),
            ("request.object", object),
        ] {
            if object.is_some_and(|o| o.spec_finalizers_malformed) {
                return Err(ReviewError::NotFinalizerList(field));
            }
        }
    }
    Ok(change)
}

/// The finalizer list of an UPDATE that held more names than a review
/// reads, where the decision would read it: `metadata.finalizers` of any
/// object, `spec.finalizers` of a Namespace through `namespaces/finalize`
/// (on any other object `spec.finalizers` is not judged, however long).
fn too_many_names(request: &Request<'_>, change: &Change<'_>) -> Option<FinalizerField> {
    if change.operation != Operation::Update {
        return None;
    }
    let objects = || [&request.old_object, &request.object].into_iter().flatten();
    if objects().any(|o| o.finalizers_too_many) {
        Some(FinalizerField::Metadata)
    } else if change.target.is_namespace_finalize() && objects().any(|o| o.spec_finalizers_too_many)
    {
        Some(FinalizerField::Spec)
    } else {
        None
    }
}

/// What [`respond`] answers.
pub struct Answer {
    /// The response AdmissionReview, serialized.
    pub body: String,
    /// `status.message` of a denial.
    pub message: Option<String>,
    pub warning: Option<String>,
}

/// Step 4: the response to the decision, in the request's `api_version`
/// with its `uid`: a 403 with the denial message, or allowed with a
/// warning; audit annotations when something was judged.
pub fn respond(
    api_version: &str,
    uid: &str,
    change: &Change<'_>,
    decision: &Decision,
    policy: &Policy,
    ledger: Option<&Ledger>,
) -> Answer {
    let warning = message::override_warning(change, decision)
        .or_else(|| message::would_deny_warning(change, decision));
    let message = (!decision.allowed()).then(|| message::denial(change, decision, policy));
    let mut out = String::with_capacity(
        384 + uid.len()
            + message.as_ref().map_or(0, String::len)
            + warning.as_ref().map_or(0, String::len),
    );
    out.push_str("{\"apiVersion\":");
    super::json::string(&mut out, api_version);
    out.push_str(",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    super::json::string(&mut out, uid);
    match &message {
        Some(text) => {
            out.push_str(
                ",\"allowed\":false,\"status\":{\"status\":\"Failure\",\"code\":403,\"message\":",
            );
            super::json::string(&mut out, text);
            out.push_str(",\"reason\":\"Forbidden\"}");
        }
        None => out.push_str(",\"allowed\":true,\"status\":{}"),
    }
    if decision.audited() {
        out.push_str(",\"auditAnnotations\":");
        audit::write_annotations(&mut out, decision, policy.mode, ledger);
    }
    if let Some(w) = &warning {
        out.push_str(",\"warnings\":[");
        super::json::string(&mut out, w);
        out.push(']');
    }
    out.push_str("}}");
    Answer {
        body: out,
        message,
        warning,
    }
}

/// Turns a parse failure into a one-line reason that names where it failed:
/// the same reading again, tracking the path. Only failures pay for it.
fn explain(body: &[u8], error: serde_json::Error) -> ReviewError {
    use serde_json::error::Category;
    let category = error.classify();
    // serde_json stops at 128 levels, before the stack could overflow.
    // (Fields the webhook skips are skipped without recursion, at any depth.)
    if category == Category::Syntax && error.to_string().starts_with("recursion limit exceeded") {
        return ReviewError::TooDeep {
            line: error.line(),
            column: error.column(),
        };
    }
    // serde_json reports some wrong types as syntax errors (a number where
    // an operation's name belongs): a body is not JSON only if it is not
    // UTF-8 or a parse that skips every value rejects it too.
    if category != Category::Data
        && (std::str::from_utf8(body).is_err()
            || serde_json::from_slice::<IgnoredAny>(body).is_err())
    {
        return ReviewError::NotJson(one_line(error.to_string()));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let reason = match serde_path_to_error::deserialize::<_, super::request::Review<'_>>(&mut de) {
        Err(e) if e.path().to_string() != "." => format!("{}: {}", e.path(), e.inner()),
        _ => error.to_string(),
    };
    ReviewError::NotAdmissionReview(one_line(reason))
}

/// Escapes control characters and line separators: serde's errors quote the
/// body's own keys and values (an unknown `operation`, a key in `extra`), and
/// a reason is one line, of a 400 body and of `check`'s output.
pub(crate) fn one_line(reason: String) -> String {
    let breaks = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !reason.contains(breaks) {
        return reason;
    }
    let mut out = String::with_capacity(reason.len() + 8);
    for c in reason.chars() {
        if breaks(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::builder::ReviewBuilder;
    use serde_json::{Value, json};

    fn update(old: Value, new: Value, user: &str) -> Vec<u8> {
        ReviewBuilder::pod_update(user)
            .old_object(Some(old))
            .object(Some(new))
            .to_vec()
    }

    fn pod(finalizers: Value) -> Value {
        // Being deleted: what an override can release.
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "team-a", "uid": "u-1", "deletionTimestamp": "2026-11-21T07:00:00Z", "finalizers": finalizers}})
    }

    fn response(r: &Reviewed) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn denial_is_a_403_with_the_uid_echoed() {
        let p = Policy::embedded_default();
        let r = review(
            &p,
            &update(pod(json!(["example.com/a"])), pod(Value::Null), "alice"),
        )
        .unwrap();
        let v = response(&r);
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"]["code"], 403);
        assert_eq!(v["response"]["status"]["reason"], "Forbidden");
        assert_eq!(v["response"]["status"]["status"], "Failure");
        assert_eq!(v["response"]["auditAnnotations"]["decision"], "denied");
        assert_eq!(
            v["response"]["auditAnnotations"]["removed-finalizers"],
            "example.com/a"
        );
        assert!(v["response"].get("patch").is_none());
        let audit = r.audit_record().unwrap();
        assert_eq!(audit.decision, Verdict::Denied);
        assert_eq!(audit.object_uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn nothing_removed_is_allowed_silently() {
        let p = Policy::embedded_default();
        let r = review(
            &p,
            &update(pod(json!(["a"])), pod(json!(["a", "b"])), "alice"),
        )
        .unwrap();
        let v = response(&r);
        assert_eq!(v["response"]["allowed"], true);
        assert!(v["response"].get("auditAnnotations").is_none());
        assert!(v["response"].get("warnings").is_none());
        assert!(r.audit.is_none());
    }

    #[test]
    fn v1beta1_is_answered_in_v1beta1() {
        let p = Policy::embedded_default();
        let mut body: Value =
            serde_json::from_slice(&update(pod(json!(["a"])), pod(json!([])), "alice")).unwrap();
        body["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let r = review(&p, &serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(response(&r)["apiVersion"], "admission.k8s.io/v1beta1");
    }

    #[test]
    fn an_override_on_a_live_object_is_quoted_and_refused() {
        let p = Policy::embedded_default();
        let live = |finalizers: Value| {
            let mut pod = pod(finalizers);
            pod["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("deletionTimestamp");
            pod["metadata"]["annotations"] =
                json!({"finalizer-guard.io/override": "node-lost: INC-4711 left behind"});
            pod
        };
        let r = review(
            &p,
            &update(live(json!(["example.com/a"])), live(json!([])), "alice"),
        )
        .unwrap();
        assert_eq!(r.verdict(), Verdict::Denied);
        let msg = r.message.unwrap();
        assert!(msg.contains("INC-4711 left behind"), "{msg}");
        assert!(msg.contains("not being deleted"), "{msg}");
    }

    #[test]
    fn override_is_allowed_with_a_warning_and_audit_annotations() {
        let p = Policy::embedded_default();
        let mut new = pod(Value::Null);
        new["metadata"]["annotations"] =
            json!({"finalizer-guard.io/override": "node-lost: INC-4711 server-1 powered off"});
        let r = review(&p, &update(pod(json!(["example.com/a"])), new, "alice")).unwrap();
        let v = response(&r);
        assert_eq!(v["response"]["allowed"], true);
        assert_eq!(
            v["response"]["auditAnnotations"]["override-reason"],
            "node-lost"
        );
        assert_eq!(
            v["response"]["auditAnnotations"]["override-detail"],
            "INC-4711 server-1 powered off"
        );
        assert!(
            v["response"]["warnings"][0]
                .as_str()
                .unwrap()
                .contains("override \"node-lost\"")
        );
    }

    #[test]
    fn malformed_bodies_have_one_line_reasons() {
        let p = Policy::embedded_default();
        let cases: &[(&[u8], &str)] = &[
            (b"", "body is not JSON"),
            (b"{", "body is not JSON"),
            (b"[1,2]", "body is not an AdmissionReview"),
            (br#"{"apiVersion":"v1","kind":"Pod"}"#, "apiVersion \"v1\" kind \"Pod\""),
            (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#, "has no request"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"PATCH"}}"#,
                "request",
            ),
        ];
        for (body, want) in cases {
            let e = review(&p, body).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(!e.contains('\n'), "{e:?}");
        }
        let no_old = update(Value::Null, pod(json!([])), "alice");
        assert_eq!(
            review(&p, &no_old).unwrap_err(),
            ReviewError::NoObject("oldObject")
        );
    }

    #[test]
    fn reasons_stay_on_one_line_whatever_the_body_quotes() {
        let p = Policy::embedded_default();
        let request = |fields: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"x","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},{fields}}}}}"#
            )
        };
        let cases = [
            // serde quotes an unknown variant, and the path names a map key.
            (
                request(r#""operation":"UP\nDATE\r","userInfo":{}"#),
                r"unknown variant `UP\nDATE\r`",
            ),
            (
                request(r#""operation":"UPDATE","userInfo":{"extra":{"a\nb\u2028c":5}}"#),
                r"request.userInfo.extra.a\nb\u{2028}c: invalid type",
            ),
        ];
        for (body, want) in cases {
            let e = review(&p, body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(!e.contains(|c: char| c.is_control()), "{e:?}");
        }
    }

    #[test]
    fn data_and_managed_fields_are_skipped_whatever_their_shape() {
        let p = Policy::embedded_default();
        let big = "x".repeat(100_000);
        let mut old = pod(json!(["example.com/a"]));
        old["data"] = json!({"k": big});
        old["metadata"]["managedFields"] = json!([{"fieldsV1": {"f:metadata": {}}}]);
        old["spec"] = json!("a custom resource may have any spec");
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!([]);
        new["spec"] = json!({"finalizers": [{"not": "a string"}, "kept"]});
        let r = review(&p, &update(old, new, "alice")).unwrap();
        assert_eq!(r.verdict(), Verdict::Denied);
    }

    #[test]
    fn a_namespace_spec_finalizers_of_another_shape_is_refused() {
        let p = Policy::embedded_default();
        let namespace = |spec: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "legacy"}, "spec": spec});
        let body = |old: Value, new: Value, subresource: &str| {
            let mut body: Value =
                serde_json::from_slice(&update(namespace(old), namespace(new), "alice")).unwrap();
            body["request"]["resource"] =
                json!({"group": "", "version": "v1", "resource": "namespaces"});
            body["request"]["subResource"] = json!(subresource);
            body["request"]["name"] = json!("legacy");
            body["request"]["namespace"] = json!("legacy");
            serde_json::to_string(&body).unwrap()
        };
        let finalize = |old: Value, new: Value, subresource: &str| {
            review(&p, body(old, new, subresource).as_bytes())
        };
        let stuck = json!({"finalizers": ["kubernetes"]});
        assert_eq!(
            finalize(stuck.clone(), json!({"finalizers": []}), "finalize")
                .unwrap()
                .verdict(),
            Verdict::Denied
        );
        for (old, new, field) in [
            (
                json!({"finalizers": "kubernetes"}),
                json!({"finalizers": []}),
                "request.oldObject",
            ),
            (
                json!({"finalizers": ["kubernetes", 7]}),
                json!({"finalizers": []}),
                "request.oldObject",
            ),
            (
                json!({"finalizers": {"kubernetes": true}}),
                json!({}),
                "request.oldObject",
            ),
            (json!(["kubernetes"]), json!({}), "request.oldObject"),
            (json!("kubernetes"), Value::Null, "request.oldObject"),
            (
                stuck.clone(),
                json!({"finalizers": [null]}),
                "request.object",
            ),
            (stuck.clone(), json!({"finalizers": 0}), "request.object"),
        ] {
            assert_eq!(
                finalize(old.clone(), new.clone(), "finalize").unwrap_err(),
                ReviewError::NotFinalizerList(field),
                "{old} -> {new}"
            );
        }
        // null is empty, as for the apiserver.
        assert_eq!(
            finalize(stuck.clone(), json!({"finalizers": null}), "finalize")
                .unwrap()
                .verdict(),
            Verdict::Denied
        );
        // Outside namespaces/finalize, spec.finalizers is not judged, whatever its shape.
        assert_eq!(
            finalize(json!({"finalizers": "kubernetes"}), json!([]), "")
                .unwrap()
                .verdict(),
            Verdict::NothingRemoved
        );
        // A duplicated key cannot pick which list is read.
        let text = body(stuck.clone(), json!({}), "finalize").replace(
            r#""spec":{}"#,
            r#""spec":{"finalizers":[],"finalizers":["kubernetes"]}"#,
        );
        let e = review(&p, text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("duplicate field `finalizers`"), "{e}");
    }

    #[test]
    fn an_annotation_the_decision_reads_sent_twice_is_refused() {
        let p = Policy::from_yaml("override:\n  annotation: example.com/release\n").unwrap();
        let over = |key: &str| {
            let mut new = pod(Value::Null);
            new["metadata"]["annotations"] =
                json!({"a": "1", key: "node-lost: INC-4711 server-1 powered off"});
            String::from_utf8(update(pod(json!(["example.com/a"])), new, "alice")).unwrap()
        };
        let text = over("example.com/release");
        assert_eq!(
            review(&p, text.as_bytes()).unwrap().verdict(),
            Verdict::Override
        );
        let valid = r#""example.com/release":"node-lost: INC-4711 server-1 powered off""#;
        assert!(text.contains(valid), "{text}");
        // A valid copy and one that is not: neither may win, in either order.
        for twice in [
            format!(r#"{valid},"example.com/release":null"#),
            format!(r#""example.com/release":null,{valid}"#),
            format!(r#"{valid},"example.com/release":"bogus""#),
            format!(r#"{valid},"exampl\u0065.com/release":null"#),
        ] {
            let body = text.replace(valid, &twice);
            assert_eq!(
                review(&p, body.as_bytes()).unwrap_err(),
                ReviewError::DuplicateAnnotation {
                    object: "request.object",
                    key: "example.com/release".into()
                },
                "{body}"
            );
        }
        // So for the approval's keys, in oldObject as in object.
        let old = text.replace(
            r#""finalizers":["example.com/a"]"#,
            r#""finalizers":["example.com/a"],"annotations":{"finalizer-guard.io/approved-by":"x","finalizer-guard.io/approved-by":"y"}"#,
        );
        let e = review(&p, old.as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "body is not an AdmissionReview: request.oldObject.metadata.annotations: duplicate field `finalizer-guard.io/approved-by`"
        );
        // An annotation no decision reads may be sent twice, as ever.
        let other = text.replace(r#""a":"1""#, r#""a":"1","a":null"#);
        assert_ne!(other, text);
        assert_eq!(
            review(&p, other.as_bytes()).unwrap().verdict(),
            Verdict::Override
        );
    }

    #[test]
    fn skipped_fields_may_be_any_depth() {
        let p = Policy::embedded_default();
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let strip = String::from_utf8(update(
            pod(json!(["example.com/a"])),
            pod(Value::Null),
            "alice",
        ))
        .unwrap();
        // What no decision reads is skipped without recursion, whatever its depth.
        let options = strip.replace(
            r#""options":{"#,
            &format!(r#""options":{{"x":{},"#, deep(100_000)),
        );
        let data = strip.replace(
            r#""kind":"Pod","#,
            &format!(r#""kind":"Pod","data":{},"#, deep(100_000)),
        );
        for body in [options, data] {
            assert_eq!(
                review(&p, body.as_bytes()).unwrap().verdict(),
                Verdict::Denied
            );
        }
    }

    #[test]
    fn two_person_messages_and_audit() {
        let p =
            Policy::from_yaml("override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n")
                .unwrap();
        let now: jiff::Timestamp = "2026-11-21T08:00:00Z".parse().unwrap();
        let key = SealKey::derive(b"the serving key");
        let review_at = |p: &Policy, body: &[u8], now| review_with(p, body, now, Some(&key));
        let unsealed = json!({
            "finalizer-guard.io/override": "node-lost: INC-4711",
            "finalizer-guard.io/approved-by": "sec-lead",
            "finalizer-guard.io/override-expires": "2026-11-21T09:00:00Z"
        });
        let with = |finalizers: Value, annotations: &Value| {
            let mut o = pod(finalizers);
            o["metadata"]["annotations"] = annotations.clone();
            o
        };
        // The approver writes: first told the seal, then with it recorded.
        let write = |annotations: &Value| {
            update(
                with(json!(["example.com/a"]), &Value::Null),
                with(json!(["example.com/a"]), annotations),
                "sec-lead",
            )
        };
        let r = review_at(&p, &write(&unsealed), now).unwrap();
        assert_eq!(r.verdict(), Verdict::ApprovalDenied);
        let msg = r.message.unwrap();
        let seal = msg
            .split("finalizer-guard.io/approval-seal must be \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("no seal in {msg}"));
        let mut approved = unsealed.clone();
        approved["finalizer-guard.io/approval-seal"] = seal.into();
        let r = review_at(&p, &write(&approved), now).unwrap();
        assert_eq!(r.verdict(), Verdict::ApprovalRecorded);
        assert_eq!(
            r.audit_record().unwrap().approved_by.as_deref(),
            Some("sec-lead")
        );
        // A non-approver cannot, and is never told a seal.
        let forged = update(
            with(json!(["example.com/a"]), &Value::Null),
            with(json!(["example.com/a"]), &unsealed),
            "mallory",
        );
        let r = review_at(&p, &forged, now).unwrap();
        assert_eq!(r.verdict(), Verdict::ApprovalDenied);
        let msg = r.message.unwrap();
        assert!(!msg.contains("approval-seal must be"), "{msg}");
        assert!(
            msg.contains("denied writing the override approval"),
            "{msg}"
        );
        assert!(
            msg.contains("the requester is not an approver. Approvers: users sec-lead"),
            "{msg}"
        );
        assert_eq!(
            response(&review_at(&p, &forged, now).unwrap())["response"]["status"]["code"],
            403
        );

        // Another person strips while it is valid; the approver cannot.
        let strip = |user: &str| {
            update(
                with(json!(["example.com/a"]), &approved),
                with(Value::Null, &approved),
                user,
            )
        };
        let r = review_at(&p, &strip("oncall"), now).unwrap();
        assert_eq!(r.verdict(), Verdict::Override);
        let v = response(&r);
        assert_eq!(v["response"]["auditAnnotations"]["approved-by"], "sec-lead");
        assert_eq!(
            v["response"]["auditAnnotations"]["override-expires"],
            "2026-11-21T09:00:00Z"
        );
        let r = review_at(&p, &strip("sec-lead"), now).unwrap();
        let msg = r.message.unwrap();
        assert!(
            msg.contains("\"sec-lead\" approved it and may not use their own approval"),
            "{msg}"
        );
        assert!(
            msg.contains("an approver (users sec-lead) first annotates the object"),
            "{msg}"
        );
        assert!(msg.contains("at most 2h ahead"), "{msg}");

        // The three annotations without the webhook's seal release nothing.
        let copied = update(
            with(json!(["example.com/a"]), &unsealed),
            with(Value::Null, &unsealed),
            "oncall",
        );
        let r = review_at(&p, &copied, now).unwrap();
        assert_eq!(r.verdict(), Verdict::Denied);
        assert!(
            r.message
                .unwrap()
                .contains("does not carry this webhook's seal"),
            "the denial says why"
        );
        // Nor does a sealed one offline, without the key.
        let r = review(&p, &strip("oncall")).unwrap();
        assert_eq!(r.verdict(), Verdict::Denied);
    }

    #[test]
    fn an_override_with_a_control_character_is_refused_and_quoted_escaped() {
        let p = Policy::embedded_default();
        let mut old = pod(json!(["example.com/a"]));
        old["metadata"]["annotations"] =
            json!({"finalizer-guard.io/override": "node-lost: INC-1\nmode: warn\u{202e}"});
        let mut new = old.clone();
        new["metadata"]["finalizers"] = Value::Null;
        let r = review(&p, &update(old, new, "oncall")).unwrap();
        assert_eq!(r.verdict(), Verdict::Denied);
        let msg = r.message.unwrap();
        assert!(
            msg.contains(r#""node-lost: INC-1\nmode: warn\u{202e}" is not valid"#)
                && msg.contains("control or format character U+000A"),
            "{msg}"
        );
        assert!(!msg.contains('\n') && !msg.contains('\u{202e}'), "{msg}");
    }
}
