//! The seed review: pod `web-0` on a lost node, being deleted, and the
//! UPDATE that strips its finalizer.

use finalizer_guard::admission::ReviewBuilder;
use serde_json::{Value, json};

/// Pod `web-0` on a lost node, being deleted.
pub fn pod(finalizers: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "team-a",
            "uid": "6f0ad0c1-5d0c-4bd3-9a35-0c6a2b1d7e11",
            "deletionTimestamp": "2026-11-21T07:00:00Z",
            "finalizers": finalizers,
            "annotations": annotations,
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "nginx"}]},
    })
}

/// A pod UPDATE by `user`, from `old` to `new`.
pub fn update(user: &str, old: Value, new: Value) -> Value {
    ReviewBuilder::pod_update(user)
        .uid("0c9a8d74-9cb7-44dd-b98e-09fd62def2f4")
        .old_object(Some(old))
        .object(Some(new))
        .to_value()
}

/// The seed strip: `kubectl patch pod web-0 -p '{"metadata":{"finalizers":null}}'`.
pub fn strip(user: &str, annotations: Value) -> Value {
    update(
        user,
        pod(json!(["example.com/cleanup"]), annotations.clone()),
        pod(Value::Null, annotations),
    )
}
