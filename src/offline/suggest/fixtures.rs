//! Evidence for the tests: kube-apiserver's audit events and what they are
//! read as.

use serde_json::{Value, json};

use super::evidence::{Evidence, EvidenceSource, Seen, parse_line};
use crate::policy::FinalizerField;

pub(super) const CONTROLLER: &str = "system:serviceaccount:widgets:widget-controller";

pub(super) fn apiserver(id: &str, user: &str, decision: &str, unauthorized: &str) -> String {
    json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "auditID": id, "stage": "ResponseComplete", "verb": "update",
        "user": {"username": user, "groups": ["system:authenticated"]},
        "objectRef": {"resource": "widgets", "namespace": "team-a", "name": "w1", "apiGroup": "example.com", "apiVersion": "v1"},
        "requestReceivedTimestamp": "2026-11-23T19:00:00.5Z",
        "annotations": {
            "finalizers.finalizer-guard.io/decision": decision,
            "finalizers.finalizer-guard.io/unauthorized-finalizers": unauthorized,
        },
    })
    .to_string()
}

pub(super) fn seen_at(resource: &str, namespace: Option<&str>, finalizer: &str) -> Seen {
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    Seen {
        username: CONTROLLER.into(),
        groups: vec!["system:serviceaccounts".into()],
        finalizers: vec![(finalizer.into(), FinalizerField::Metadata)],
        group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.map(String::from),
        name: "o".into(),
        time: None,
        audit_id: None,
        source: EvidenceSource::ApiserverAudit,
        authenticated: Some(true),
        denied: false,
    }
}

/// `seen_at`, by the ServiceAccount team-a:operator.
pub(super) fn tenant(resource: &str, namespace: Option<&str>, finalizer: &str) -> Seen {
    Seen {
        username: "system:serviceaccount:team-a:operator".into(),
        ..seen_at(resource, namespace, finalizer)
    }
}

pub(super) fn evidence(lines: &[String]) -> Evidence {
    let mut e = Evidence::default();
    for l in lines {
        e.add(parse_line(l));
    }
    e
}

pub(super) const SHIPPED: &str = "mode: warn\n# Kubernetes' own controllers.\nbuiltinControllers: true\nrules: []\n# Examples:\n# - name: cert-manager\noverride:\n  annotation: finalizer-guard.io/override\n";

/// kube-apiserver's event of the webhook denying `user`'s removal of
/// `example.com/a` from a widget in `ns` (enforce): a 403.
pub(super) fn denial(id: &str, user: &str, ns: &str, code: u64) -> String {
    let mut e: Value =
        serde_json::from_str(&apiserver(id, user, "denied", "example.com/a")).unwrap();
    e["objectRef"]["namespace"] = ns.into();
    e["responseStatus"] = json!({"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": code,
        "message": "admission webhook \"finalizers.finalizer-guard.io\" denied the request: finalizer-guard denied removing finalizer \"example.com/a\""});
    e.to_string()
}

/// kube-apiserver's event of `user`'s removal of `finalizer` from a
/// widget in `ns`, warn mode letting it through (`would-deny`), or
/// enforce denying it.
pub(super) fn removal(id: &str, user: &str, ns: &str, finalizer: &str, denied: bool) -> String {
    let decision = if denied { "denied" } else { "would-deny" };
    let mut e: Value = serde_json::from_str(&apiserver(id, user, decision, finalizer)).unwrap();
    e["objectRef"]["namespace"] = ns.into();
    if denied {
        e["responseStatus"] = json!({"code": 403});
    }
    e.to_string()
}

pub(super) const TENANT_BOT: &str = "system:serviceaccount:team-a:tenant-bot";
