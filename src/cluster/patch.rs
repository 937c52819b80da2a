//! The JSON patches `unstick` and `approve` write, as typed operations.
//!
//! Every patch is built by [`PatchBuilder`], which starts it with `test`s
//! of the uid and the resourceVersion the command read, so it lands on that object as it was
//! read and on no other. A patch is addressed by name, and a name outlives
//! its object: a StatefulSet's pod or a namespace deleted and created again
//! under the same name has a new uid, and the `test` fails (422) instead of
//! changing the new object.

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::api::DynamicObject;
use serde_json::Value;

/// `/metadata/NAME`, each token escaped as RFC 6901 says.
fn metadata<'t>(tokens: impl IntoIterator<Item = Token<'t>>) -> PointerBuf {
    PointerBuf::from_tokens(std::iter::once(Token::new("metadata")).chain(tokens))
}

fn test(path: PointerBuf, value: impl Into<Value>) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path,
        value: value.into(),
    })
}

fn remove(path: PointerBuf) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation { path })
}

fn add(path: PointerBuf, value: impl Into<Value>) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path,
        value: value.into(),
    })
}

/// `test` ops that hold the patch to the object with this uid, at this
/// resourceVersion.
fn same_object(uid: &str, resource_version: &str) -> [PatchOperation; 2] {
    [
        test(metadata([Token::new("uid")]), uid),
        test(metadata([Token::new("resourceVersion")]), resource_version),
    ]
}

/// The one way a patch is built: held first to the object it is meant for,
/// then the changes, each a typed operation.
pub struct PatchBuilder<'o> {
    object: &'o DynamicObject,
    ops: Vec<PatchOperation>,
}

impl<'o> PatchBuilder<'o> {
    /// Held to the object with `uid` (the one explained, whatever was read
    /// since), at the resourceVersion `object` was read at.
    pub fn held_to(uid: &str, object: &'o DynamicObject) -> PatchBuilder<'o> {
        let version = object.metadata.resource_version.as_deref();
        PatchBuilder {
            object,
            ops: Vec::from(same_object(uid, version.unwrap_or_default())),
        }
    }

    /// Held to `object` as read; `None` when the API server sent it without
    /// a uid or a resourceVersion (nothing is written without them).
    pub fn as_read(object: &'o DynamicObject) -> Option<PatchBuilder<'o>> {
        let meta = &object.metadata;
        let ops = same_object(
            meta.uid.as_deref().filter(|u| !u.is_empty())?,
            meta.resource_version.as_deref().filter(|v| !v.is_empty())?,
        );
        Some(PatchBuilder {
            object,
            ops: Vec::from(ops),
        })
    }

    /// Held to the uid alone: any later version of the same object, never
    /// another one of the same name.
    pub fn same_uid(uid: &str, object: &'o DynamicObject) -> PatchBuilder<'o> {
        PatchBuilder {
            object,
            ops: vec![test(metadata([Token::new("uid")]), uid)],
        }
    }

    /// Sets `annotations`: the whole map when the object has none yet (a
    /// path into a missing map is an error), else key by key.
    pub fn add_annotations(mut self, annotations: &[(&str, &str)]) -> Self {
        if annotations.is_empty() {
            return self;
        }
        match &self.object.metadata.annotations {
            None => {
                let map: serde_json::Map<String, Value> = annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::from(*v)))
                    .collect();
                self.ops
                    .push(add(metadata([Token::new("annotations")]), map));
            }
            Some(_) => self.ops.extend(
                annotations
                    .iter()
                    .map(|(k, v)| add(metadata([Token::new("annotations"), Token::new(*k)]), *v)),
            ),
        }
        self
    }

    /// Removes the annotation `key`, `test`ing first that it still holds `value`.
    pub fn remove_annotation(mut self, key: &str, value: &str) -> Self {
        let at = || metadata([Token::new("annotations"), Token::new(key)]);
        self.ops.push(test(at(), value));
        self.ops.push(remove(at()));
        self
    }

    /// Removes each finalizer of `plan` from `metadata.finalizers`, `test`ing
    /// its value at its index; from the end, so each index still points at
    /// the name tested.
    pub fn remove_finalizers(mut self, plan: &[String]) -> Self {
        let finalizers = self.object.metadata.finalizers.as_deref().unwrap_or(&[]);
        for (i, name) in finalizers.iter().enumerate().rev() {
            if plan.contains(name) {
                let at = || metadata([Token::new("finalizers"), Token::from(i)]);
                self.ops.push(test(at(), name.as_str()));
                self.ops.push(remove(at()));
            }
        }
        self
    }

    pub fn build(self) -> json_patch::Patch {
        json_patch::Patch(self.ops)
    }
}

/// A JSON patch that removes exactly `plan` from `metadata.finalizers` of
/// `object`, testing first that it is the object with `uid` (the one
/// explained) at the resourceVersion read, and each value at its index; it
/// writes the override annotation when given. `None`: nothing to do.
pub fn removal(
    uid: &str,
    object: &DynamicObject,
    plan: &[String],
    annotation: Option<(&str, &str)>,
) -> Option<json_patch::Patch> {
    let finalizers = object.metadata.finalizers.as_deref().unwrap_or(&[]);
    let any = finalizers.iter().any(|f| plan.contains(f));
    if !any && (annotation.is_none() || !plan.is_empty()) {
        return None;
    }
    let patch = PatchBuilder::held_to(uid, object)
        .add_annotations(annotation.as_slice())
        .remove_finalizers(plan);
    Some(patch.build())
}

/// The approval's annotations as one JSON patch that first `test`s the uid
/// and resourceVersion read: it never lands on an object created since under
/// the same name, nor on one changed since it was read. `None` when the
/// object came without a uid or resourceVersion.
pub fn approval(object: &DynamicObject, annotations: &[(&str, &str)]) -> Option<json_patch::Patch> {
    Some(
        PatchBuilder::as_read(object)?
            .add_annotations(annotations)
            .build(),
    )
}

/// Removes the annotations `keys` that `object` carries, each `test`ed at
/// the value read, from the object with `uid` only. `None`: it carries none.
pub fn clearing(uid: &str, object: &DynamicObject, keys: &[&str]) -> Option<json_patch::Patch> {
    let annotations = object.metadata.annotations.as_ref()?;
    let present: Vec<(&str, &String)> = keys
        .iter()
        .filter_map(|k| Some((*k, annotations.get(*k)?)))
        .collect();
    if present.is_empty() {
        return None;
    }
    let patch = present
        .into_iter()
        .fold(PatchBuilder::same_uid(uid, object), |p, (k, v)| {
            p.remove_annotation(k, v)
        });
    Some(patch.build())
}

/// The Namespace `namespaces/finalize` is sent: `object` with `kept` as its
/// `spec.finalizers`, and the uid explained and the resourceVersion read as
/// the API server's preconditions (that subresource takes no patch).
pub fn finalize_body(object: &DynamicObject, uid: &str, kept: &[String]) -> DynamicObject {
    let mut body = object.clone();
    body.metadata.uid = Some(uid.to_string());
    body.data["spec"]["finalizers"] = Value::from(kept.to_vec());
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::approval::APPROVED_BY;
    use serde_json::json;

    fn object(meta: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta}))
            .unwrap()
    }

    fn pod(finalizers: &[&str], annotations: Option<&[(&str, &str)]>) -> DynamicObject {
        object(json!({
            "name": "web-0", "namespace": "team-a", "uid": "uid-1", "resourceVersion": "42",
            "finalizers": finalizers,
            "annotations": annotations.map(|a| a.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()),
        }))
    }

    fn ops(patch: json_patch::Patch) -> Value {
        serde_json::to_value(patch).unwrap()
    }

    #[test]
    fn paths_are_escaped_and_ops_serialize_as_rfc_6902() {
        let ops = json_patch::Patch(vec![
            test(
                metadata([Token::new("annotations"), Token::new("a.io/b~c")]),
                "v",
            ),
            remove(metadata([Token::new("finalizers"), Token::from(3_usize)])),
        ]);
        assert_eq!(
            serde_json::to_value(ops).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/annotations/a.io~1b~0c", "value": "v"},
                {"op": "remove", "path": "/metadata/finalizers/3"},
            ])
        );
    }

    #[test]
    fn as_read_needs_a_uid_and_a_resource_version() {
        let read = object(json!({"name": "c", "uid": "u-1", "resourceVersion": "7"}));
        let patch = PatchBuilder::as_read(&read).expect("both are there");
        assert_eq!(
            ops(patch.build()),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            ])
        );
        for meta in [
            json!({"name": "c", "resourceVersion": "7"}),
            json!({"name": "c", "uid": "u-1"}),
            json!({"name": "c", "uid": "", "resourceVersion": "7"}),
        ] {
            assert!(
                PatchBuilder::as_read(&object(meta.clone())).is_none(),
                "{meta}"
            );
        }
    }

    #[test]
    fn removes_exactly_the_plan_testing_the_uid_and_each_index_from_the_end() {
        let o = pod(&["a", "keep", "b", "a"], None);
        let patch = removal("uid-1", &o, &["a".into(), "b".into()], None).unwrap();
        assert_eq!(
            ops(patch),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "test", "path": "/metadata/finalizers/3", "value": "a"},
                {"op": "remove", "path": "/metadata/finalizers/3"},
                {"op": "test", "path": "/metadata/finalizers/2", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/2"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": "a"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[test]
    fn the_patch_tests_the_uid_explained_not_the_one_read_again() {
        // Read again after a refused write, the name holds another object
        // with the same finalizer: a patch built from it still tests the
        // uid that was explained, and the API server refuses it.
        let new = pod(&["a"], None);
        let patch = removal("uid-explained", &new, &["a".into()], None).unwrap();
        assert_eq!(
            ops(patch.clone())[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "uid-explained"})
        );
        let mut stored = serde_json::to_value(&new).unwrap();
        assert!(json_patch::patch(&mut stored, &patch).is_err());
        assert_eq!(stored["metadata"]["finalizers"], json!(["a"]));
        // On the object explained it removes the finalizer.
        let patch = removal("uid-1", &new, &["a".into()], None).unwrap();
        json_patch::patch(&mut stored, &patch).unwrap();
        assert_eq!(stored["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn writes_the_override_in_the_same_patch() {
        let key = "finalizer-guard.io/override";
        let bare = pod(&["x"], None);
        let with_map = pod(&["x"], Some(&[("team", "a")]));
        let value = "node-lost: INC-1";
        assert_eq!(
            ops(removal("uid-1", &bare, &["x".into()], Some((key, value))).unwrap())[2],
            json!({"op": "add", "path": "/metadata/annotations", "value": {key: value}})
        );
        assert_eq!(
            ops(removal("uid-1", &with_map, &["x".into()], Some((key, value))).unwrap())[2],
            json!({"op": "add", "path": "/metadata/annotations/finalizer-guard.io~1override", "value": value})
        );
    }

    #[test]
    fn nothing_to_do_is_no_patch() {
        let o = pod(&["other"], None);
        assert!(removal("uid-1", &o, &["gone".into()], None).is_none());
        assert!(removal("uid-1", &o, &["gone".into()], Some(("k", "v"))).is_none());
        // The override alone (a Namespace before its finalize write), still held to the uid.
        let alone = removal("uid-1", &o, &[], Some(("k", "v"))).unwrap();
        assert_eq!(ops(alone)[0]["path"], "/metadata/uid");
    }

    #[test]
    fn the_approval_lands_only_on_the_object_read() {
        let read = pod(&[], None);
        let patch = approval(&read, &[(APPROVED_BY, "sec-lead")]).unwrap();
        assert_eq!(
            ops(patch.clone()),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/annotations", "value": {APPROVED_BY: "sec-lead"}},
            ])
        );
        // The object it was read from takes it.
        let mut same = serde_json::to_value(&read).unwrap();
        json_patch::patch(&mut same, &patch).unwrap();
        assert_eq!(same["metadata"]["annotations"][APPROVED_BY], "sec-lead");
        // A pod created since under the same name does not, even at the same resourceVersion.
        let mut recreated = serde_json::to_value(&read).unwrap();
        recreated["metadata"]["uid"] = json!("uid-2");
        assert!(json_patch::patch(&mut recreated, &patch).is_err());
        assert!(recreated["metadata"]["annotations"].is_null());
        // Nor the same pod changed since.
        let mut changed = serde_json::to_value(&read).unwrap();
        changed["metadata"]["resourceVersion"] = json!("43");
        assert!(json_patch::patch(&mut changed, &patch).is_err());
        // No uid, no write.
        let bare = object(json!({"name": "web-0", "resourceVersion": "42"}));
        assert!(approval(&bare, &[(APPROVED_BY, "sec-lead")]).is_none());
    }

    #[test]
    fn clearing_removes_only_what_is_there_as_it_was_read_from_the_same_object() {
        let key = "finalizer-guard.io/override";
        let o = pod(&[], Some(&[(key, "node-lost: INC-1"), ("team", "a")]));
        let patch = clearing("uid-1", &o, &[key, APPROVED_BY]).unwrap();
        assert_eq!(
            ops(patch.clone()),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
                {"op": "test", "path": "/metadata/annotations/finalizer-guard.io~1override", "value": "node-lost: INC-1"},
                {"op": "remove", "path": "/metadata/annotations/finalizer-guard.io~1override"},
            ])
        );
        let mut stored = serde_json::to_value(&o).unwrap();
        json_patch::patch(&mut stored, &patch).unwrap();
        assert_eq!(stored["metadata"]["annotations"], json!({"team": "a"}));
        assert!(clearing("uid-1", &o, &[APPROVED_BY]).is_none());
        assert!(clearing("uid-1", &pod(&[], None), &[key]).is_none());
    }

    #[test]
    fn the_finalize_body_carries_the_uid_explained_and_the_resource_version_read() {
        let ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "legacy", "uid": "uid-1", "resourceVersion": "9"},
            "spec": {"finalizers": ["kubernetes", "example.com/x"]},
        }))
        .unwrap();
        let body = finalize_body(&ns, "uid-1", &["example.com/x".into()]);
        assert_eq!(body.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(body.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(body.data["spec"]["finalizers"], json!(["example.com/x"]));
    }
}
