//! AdmissionReview requests built a field at a time, as kube-apiserver sends
//! them: for tests, benches and examples, so none of them spells the
//! envelope out by hand.
//!
//! ```
//! use finalizer_guard::admission::ReviewBuilder;
//! use serde_json::json;
//!
//! let body = ReviewBuilder::pod_update("alice")
//!     .finalizers(json!(["example.com/cleanup"]), json!(null))
//!     .annotate("finalizer-guard.io/override", "node-lost: INC-4711")
//!     .to_vec();
//! ```

use serde_json::{Map, Value, json};

/// An AdmissionReview request under construction.
#[derive(Debug, Clone)]
pub struct ReviewBuilder {
    api_version: String,
    uid: String,
    operation: String,
    /// `request.kind`: group, version, kind.
    kind: [String; 3],
    /// `request.resource`: group, version, resource.
    resource: [String; 3],
    subresource: Option<String>,
    name: String,
    namespace: Option<String>,
    /// `None`: `userInfo` carries no username.
    username: Option<String>,
    groups: Vec<String>,
    extra: Map<String, Value>,
    object: Option<Value>,
    old_object: Option<Value>,
    dry_run: bool,
}

/// The uid of every built request, unless [`ReviewBuilder::uid`] says otherwise.
pub const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

impl ReviewBuilder {
    /// `user` updates Pod `web-0` in `team-a`, which is being deleted (an
    /// override releases only such an object: [`ReviewBuilder::live`] makes
    /// it a live one); neither object has finalizers yet.
    pub fn pod_update(user: &str) -> ReviewBuilder {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "team-a", "uid": "6f0ad0c1-5d0c-4bd3-9a35-0c6a2b1d7e11",
                "deletionTimestamp": "2026-11-21T07:00:00Z",
            },
        });
        ReviewBuilder {
            api_version: "admission.k8s.io/v1".into(),
            uid: UID.into(),
            operation: "UPDATE".into(),
            kind: ["".into(), "v1".into(), "Pod".into()],
            resource: ["".into(), "v1".into(), "pods".into()],
            subresource: None,
            name: "web-0".into(),
            namespace: Some("team-a".into()),
            username: Some(user.into()),
            groups: vec!["system:authenticated".into()],
            extra: Map::new(),
            object: Some(pod.clone()),
            old_object: Some(pod),
            dry_run: false,
        }
    }

    /// The object is not being deleted: no `deletionTimestamp`.
    pub fn live(self) -> Self {
        self.edit_both(|o| {
            if let Some(meta) = o["metadata"].as_object_mut() {
                meta.remove("deletionTimestamp");
            }
        })
    }

    /// `admission.k8s.io/v1` (the default) or `admission.k8s.io/v1beta1`.
    pub fn api_version(mut self, api_version: &str) -> Self {
        self.api_version = api_version.into();
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = uid.into();
        self
    }

    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`, as the wire spells them.
    pub fn operation(mut self, operation: &str) -> Self {
        self.operation = operation.into();
        self
    }

    /// `request.resource` and `request.kind`.
    pub fn resource(mut self, group: &str, version: &str, resource: &str, kind: &str) -> Self {
        self.resource = [group.into(), version.into(), resource.into()];
        self.kind = [group.into(), version.into(), kind.into()];
        for object in [&mut self.object, &mut self.old_object]
            .into_iter()
            .flatten()
        {
            object["kind"] = json!(kind);
            object["apiVersion"] = json!(if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            });
        }
        self
    }

    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.into());
        self
    }

    /// The object's name, in the request and in both objects.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self.edit_both(|o| o["metadata"]["name"] = json!(name))
    }

    /// The object's namespace, in the request and in both objects; `None`: cluster-scoped.
    pub fn namespace(mut self, namespace: Option<&str>) -> Self {
        self.namespace = namespace.map(String::from);
        self.edit_both(|o| match namespace {
            Some(ns) => o["metadata"]["namespace"] = json!(ns),
            None => {
                if let Some(meta) = o["metadata"].as_object_mut() {
                    meta.remove("namespace");
                }
            }
        })
    }

    /// `request.userInfo.username`; `None` leaves it out.
    pub fn username(mut self, username: Option<&str>) -> Self {
        self.username = username.map(String::from);
        self
    }

    /// `request.userInfo.groups`.
    pub fn groups(mut self, groups: &[&str]) -> Self {
        self.groups = groups.iter().map(|g| g.to_string()).collect();
        self
    }

    /// One of `request.userInfo.extra`'s attributes.
    pub fn extra(mut self, key: &str, values: &[&str]) -> Self {
        self.extra.insert(key.into(), json!(values));
        self
    }

    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// `metadata.finalizers` of `oldObject` and `object`: a list, or `null`.
    pub fn finalizers(self, old: Value, new: Value) -> Self {
        self.edit_old_object(|o| o["metadata"]["finalizers"] = old)
            .edit_object(|o| o["metadata"]["finalizers"] = new)
    }

    /// An annotation on `object`, the object as it will be stored.
    pub fn annotate(self, key: &str, value: &str) -> Self {
        self.edit_object(|o| annotate(o, key, value))
    }

    /// An annotation on `oldObject`.
    pub fn annotate_old(self, key: &str, value: &str) -> Self {
        self.edit_old_object(|o| annotate(o, key, value))
    }

    /// Replaces `object`; `None` leaves it out.
    pub fn object(mut self, object: Option<Value>) -> Self {
        self.object = object;
        self
    }

    /// Replaces `oldObject`; `None` leaves it out.
    pub fn old_object(mut self, old_object: Option<Value>) -> Self {
        self.old_object = old_object;
        self
    }

    /// Changes `object` in place (when there is one).
    pub fn edit_object(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        if let Some(object) = self.object.as_mut() {
            edit(object);
        }
        self
    }

    /// Changes `oldObject` in place (when there is one).
    pub fn edit_old_object(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        if let Some(object) = self.old_object.as_mut() {
            edit(object);
        }
        self
    }

    /// Changes both objects in place.
    pub fn edit_both(self, edit: impl Fn(&mut Value)) -> Self {
        self.edit_object(&edit).edit_old_object(&edit)
    }

    /// The AdmissionReview, as JSON.
    pub fn to_value(&self) -> Value {
        let [kind_group, kind_version, kind] = &self.kind;
        let [group, version, resource] = &self.resource;
        let mut request = json!({
            "uid": self.uid,
            "kind": {"group": kind_group, "version": kind_version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": kind_group, "version": kind_version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": self.name,
            "operation": self.operation,
            "userInfo": {"groups": self.groups},
            "dryRun": self.dry_run,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
        });
        if let Some(username) = &self.username {
            request["userInfo"]["username"] = json!(username);
        }
        if !self.extra.is_empty() {
            request["userInfo"]["extra"] = Value::Object(self.extra.clone());
        }
        let fields = request.as_object_mut().expect("an object");
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                fields.insert(key.into(), value);
            }
        };
        put("namespace", self.namespace.clone().map(Value::from));
        put("subResource", self.subresource.clone().map(Value::from));
        put("object", self.object.clone());
        put("oldObject", self.old_object.clone());
        json!({
            "apiVersion": self.api_version,
            "kind": "AdmissionReview",
            "request": request,
        })
    }

    /// The AdmissionReview body, serialized.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_value()).expect("JSON always serializes")
    }
}

fn annotate(object: &mut Value, key: &str, value: &str) {
    let meta = &mut object["metadata"];
    if !meta["annotations"].is_object() {
        meta["annotations"] = Value::Object(Map::new());
    }
    meta["annotations"][key] = json!(value);
}
