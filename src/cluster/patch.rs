//! The JSON patches `unstick` and `approve` write, as typed operations.
//!
//! Every patch starts with [`same_object`]: it `test`s the uid and the
//! resourceVersion the command read, so it lands on that object as it was
//! read and on no other. A patch is addressed by name, and a name outlives
//! its object: a StatefulSet's pod or a namespace deleted and created again
//! under the same name has a new uid, and the `test` fails (422) instead of
//! changing the new object.

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::api::DynamicObject;
use serde_json::Value;

/// `/metadata/NAME`, each token escaped as RFC 6901 says.
pub fn metadata<'t>(tokens: impl IntoIterator<Item = Token<'t>>) -> PointerBuf {
    PointerBuf::from_tokens(std::iter::once(Token::new("metadata")).chain(tokens))
}

pub fn test(path: PointerBuf, value: impl Into<Value>) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path,
        value: value.into(),
    })
}

pub fn remove(path: PointerBuf) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation { path })
}

pub fn add(path: PointerBuf, value: impl Into<Value>) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path,
        value: value.into(),
    })
}

/// `test` ops that hold the patch to the object with this uid, at this
/// resourceVersion.
pub fn same_object(uid: &str, resource_version: &str) -> [PatchOperation; 2] {
    [
        test(metadata([Token::new("uid")]), uid),
        test(metadata([Token::new("resourceVersion")]), resource_version),
    ]
}

/// [`same_object`] for `object` as read; `None` when the API server sent it
/// without a uid or a resourceVersion (nothing is written without them).
pub fn as_read(object: &DynamicObject) -> Option<[PatchOperation; 2]> {
    let meta = &object.metadata;
    Some(same_object(
        meta.uid.as_deref().filter(|u| !u.is_empty())?,
        meta.resource_version.as_deref().filter(|v| !v.is_empty())?,
    ))
}

/// Ops that set `annotations` on `object`: the whole map when it has none
/// yet (a path into a missing map is an error), else key by key.
pub fn add_annotations(
    object: &DynamicObject,
    annotations: &[(&str, &str)],
) -> Vec<PatchOperation> {
    match &object.metadata.annotations {
        None => {
            let map: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v)))
                .collect();
            vec![add(metadata([Token::new("annotations")]), map)]
        }
        Some(_) => annotations
            .iter()
            .map(|(k, v)| add(metadata([Token::new("annotations"), Token::new(*k)]), *v))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let object = |meta: Value| -> DynamicObject {
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}),
            )
            .unwrap()
        };
        let ops = as_read(&object(
            json!({"name": "c", "uid": "u-1", "resourceVersion": "7"}),
        ))
        .expect("both are there");
        assert_eq!(
            serde_json::to_value(json_patch::Patch(ops.to_vec())).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            ])
        );
        assert!(as_read(&object(json!({"name": "c", "resourceVersion": "7"}))).is_none());
        assert!(as_read(&object(json!({"name": "c", "uid": "u-1"}))).is_none());
        assert!(
            as_read(&object(
                json!({"name": "c", "uid": "", "resourceVersion": "7"})
            ))
            .is_none()
        );
    }
}
