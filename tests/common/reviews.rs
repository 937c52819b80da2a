//! Generated AdmissionReviews for the benches and the allocation test: an
//! UPDATE of a ConfigMap whose object and oldObject are each about
//! `object_bytes` long, about 60% of that in `metadata.managedFields`
//! (FieldsV1 trees, as kube-apiserver writes them) and the rest in `data`,
//! with `finalizers` names on the old object and one of them removed.
//!
//! The finalizer list comes on top of `object_bytes`: 1024 names are ~40 KiB,
//! more than a whole 1 KiB object.
//!
//! A module of tests/common, and included by path from benches/decision.rs,
//! examples/gen_review.rs and examples/profile_review.rs; each uses only
//! part of it.
#![allow(dead_code)]

use std::fmt::Write as _;

/// The requester: a controller removing its own finalizer, the common case.
pub const REQUESTER: &str = "system:serviceaccount:ops:cleanup-controller";

/// The policy the generated reviews are decided under: the requester is
/// authorized for `example.com/*`, so every review is `authorized`.
pub const POLICY: &str = r#"
mode: enforce
builtinControllers: true
rules:
  - name: cleanup-controller
    finalizers: ["example.com/*"]
    serviceAccounts: ["ops:cleanup-controller"]
"#;

/// What a generated review looks like.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Bytes of each of object and oldObject, not counting the finalizer list.
    pub object_bytes: usize,
    /// Finalizers on oldObject; object keeps all but one.
    pub finalizers: usize,
    /// Object keeps none of them (`finalizers: null`), the worst case.
    pub remove_all: bool,
}

/// A generated review and what it is made of.
pub struct Generated {
    pub body: Vec<u8>,
    /// Length of the serialized `object` (oldObject is within a few bytes).
    pub object_len: usize,
    /// Length of its `managedFields` array.
    pub managed_fields_len: usize,
}

/// Managers that typically own a ConfigMap's fields, and how they write.
const MANAGERS: [(&str, &str); 4] = [
    ("kubectl-client-side-apply", "Update"),
    ("helm", "Update"),
    ("kustomize-controller", "Apply"),
    ("argocd-controller", "Apply"),
];

/// Short, realistic ConfigMap values; some need JSON escapes.
const VALUES: [&str; 4] = [
    "postgres://db.team-a.svc:5432/app",
    "log_level: info\\nformat: json\\n",
    "true",
    "{\\\"retries\\\": 3, \\\"backoff\\\": \\\"2s\\\"}",
];

pub fn finalizer(i: usize) -> String {
    format!("example.com/cleanup-{i:04}")
}

/// The review body for `shape`.
pub fn update_review(shape: Shape) -> Generated {
    let old_finalizers: Vec<String> = (0..shape.finalizers).map(finalizer).collect();
    let removed = shape.finalizers / 2;
    let new_finalizers: Vec<String> = old_finalizers
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != removed && !shape.remove_all)
        .map(|(_, f)| f.clone())
        .collect();
    let (object, managed_fields_len) = config_map(shape.object_bytes, &new_finalizers, "884214");
    let (old_object, _) = config_map(shape.object_bytes, &old_finalizers, "884213");
    let body = format!(
        concat!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"#,
            r#""uid":"705ab4f5-6393-11e8-b7cc-42010a800002","#,
            r#""kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"#,
            r#""resource":{{"group":"","version":"v1","resource":"configmaps"}},"#,
            r#""requestKind":{{"group":"","version":"v1","kind":"ConfigMap"}},"#,
            r#""requestResource":{{"group":"","version":"v1","resource":"configmaps"}},"#,
            r#""name":"app-config","namespace":"team-a","operation":"UPDATE","#,
            r#""userInfo":{{"username":"{user}","uid":"0c8a6f2e-4f0c-4d8e-9d55-1f5d3c9b2a10","#,
            r#""groups":["system:serviceaccounts","system:serviceaccounts:ops","system:authenticated"]}},"#,
            r#""object":{object},"oldObject":{old},"dryRun":false,"#,
            r#""options":{{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"cleanup-controller"}}}}}}"#
        ),
        user = REQUESTER,
        object = object,
        old = old_object,
    );
    Generated {
        body: body.into_bytes(),
        object_len: object.len(),
        managed_fields_len,
    }
}

/// A ConfigMap of about `size` bytes (plus its finalizers); returns it and
/// the length of its managedFields.
fn config_map(size: usize, finalizers: &[String], resource_version: &str) -> (String, usize) {
    let mut meta = format!(
        concat!(
            r#"{{"name":"app-config","namespace":"team-a","uid":"3b1e4c52-8d0a-4a5e-b6a8-2f0c6d1e9a77","#,
            r#""resourceVersion":"{rv}","creationTimestamp":"2026-11-20T09:12:44Z","#,
            r#""deletionTimestamp":"2026-11-21T07:40:02Z","deletionGracePeriodSeconds":0,"#,
            r#""labels":{{"app.kubernetes.io/name":"app","app.kubernetes.io/managed-by":"Helm"}},"#,
            r#""annotations":{{"meta.helm.sh/release-name":"app","meta.helm.sh/release-namespace":"team-a"}},"#,
            r#""finalizers":["#
        ),
        rv = resource_version
    );
    for (i, f) in finalizers.iter().enumerate() {
        if i > 0 {
            meta.push(',');
        }
        write!(meta, "\"{f}\"").unwrap();
    }
    meta.push_str("],");
    let fixed = meta.len() - finalizers.iter().map(|f| f.len() + 3).sum::<usize>()
        + r#""managedFields":[]},"data":{}}"#.len()
        + r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"#.len();
    let budget = size.saturating_sub(fixed);

    // Keys are added one at a time to `data` and to every manager's
    // FieldsV1 tree until both reach their share of the budget.
    let mut data = String::new();
    // A small object has been written by one manager, a big one by several.
    let managers = &MANAGERS[..(size / 4096).clamp(1, MANAGERS.len())];
    let mut trees: Vec<String> = managers.iter().map(|_| String::new()).collect();
    let mut managed_len = managers.len() * MANAGER_OVERHEAD;
    let mut key = 0usize;
    while data.len() + managed_len < budget {
        let name = format!("setting-{key:06}");
        let value = VALUES[key % VALUES.len()];
        if data.len() + managed_len < budget && (data.len() as f64) < 0.4 * budget as f64 {
            if !data.is_empty() {
                data.push(',');
            }
            write!(data, "\"{name}\":\"{value}\"").unwrap();
        }
        for tree in trees.iter_mut() {
            if (managed_len as f64) >= 0.6 * budget as f64 {
                break;
            }
            let before = tree.len();
            write!(tree, ",\"f:{name}\":{{}}").unwrap();
            managed_len += tree.len() - before;
        }
        key += 1;
        if key > 10_000_000 {
            break;
        }
    }
    let mut managed = String::from("[");
    for (i, ((manager, operation), tree)) in managers.iter().zip(&trees).enumerate() {
        if i > 0 {
            managed.push(',');
        }
        write!(
            managed,
            concat!(
                r#"{{"manager":"{manager}","operation":"{operation}","apiVersion":"v1","#,
                r#""time":"2026-11-20T09:12:44Z","fieldsType":"FieldsV1","fieldsV1":"#,
                r#"{{"f:data":{{".":{{}}{tree}}},"f:metadata":{{"f:annotations":{{".":{{}},"#,
                r#""f:meta.helm.sh/release-name":{{}},"f:meta.helm.sh/release-namespace":{{}}}},"#,
                r#""f:labels":{{".":{{}},"f:app.kubernetes.io/managed-by":{{}},"f:app.kubernetes.io/name":{{}}}}}}}}}}"#
            ),
            manager = manager,
            operation = operation,
            tree = tree,
        )
        .unwrap();
    }
    managed.push(']');
    let object = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{meta}"managedFields":{managed}}},"data":{{{data}}}}}"#
    );
    (object, managed.len())
}

/// Bytes of one managedFields entry without its data leaves.
const MANAGER_OVERHEAD: usize = 420;
