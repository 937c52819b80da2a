//! Short suite cases: the object, the requester and the change, expanded
//! into the AdmissionReview kube-apiserver would send for that write.
//!
//! ```yaml
//! - name: a person strips a pod's finalizer
//!   object: {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/cleanup]}
//!   requester: {user: jane@example.com, groups: [oncall]}
//!   finalizersAfter: []
//!   expect: denied
//! ```
//!
//! What kube-apiserver would send: an `UPDATE` of the type's resource (from
//! [`crate::policy::kinds`], or the case's `resource` for a type the table
//! does not know), with no subresource, since `metadata.finalizers` is
//! written through the object itself; a Namespace whose `spec.finalizers`
//! changes is written through `namespaces/finalize`, and a Namespace's
//! request names it as its own namespace. The requester's groups get what
//! the authenticator adds: `system:authenticated`, and for a ServiceAccount
//! `system:serviceaccounts` and `system:serviceaccounts:NAMESPACE`. The
//! review is then judged as a recorded one is.
//!
//! A case that cannot be expanded is an error naming the case and the field
//! (`cases[2].object.kind: ...`), never a review made up around the gap; and
//! the review it expands to is held to the size a file may have.

use std::collections::BTreeMap;
use std::io;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::policy::kinds::{self, KnownType};

/// `requester`: who writes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaseRequester {
    /// A user name, exactly as the authenticator gives it.
    #[serde(default)]
    pub user: Option<String>,
    /// Groups besides those the authenticator adds.
    #[serde(default)]
    pub groups: Vec<String>,
    /// `NAMESPACE:NAME`.
    #[serde(default)]
    pub service_account: Option<String>,
}

/// `object`, short: what a decision reads of it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ShortObject {
    #[serde(default)]
    api_version: Option<String>,
    kind: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    deletion_timestamp: Option<String>,
    /// A Namespace's `spec.finalizers`, say.
    #[serde(default)]
    spec: Option<Value>,
}

/// What a short case gives: its object, requester and change.
pub struct Short<'a> {
    /// `cases[N]`: how an error names the case.
    pub at: String,
    pub object: &'a Value,
    pub resource: Option<&'a str>,
    pub requester: Option<&'a CaseRequester>,
    pub merge_patch: Option<&'a Value>,
    pub json_patch: Option<&'a Value>,
    pub finalizers_after: Option<&'a [String]>,
    pub dry_run: bool,
    /// The work every case of the suite has taken so far, against
    /// [`MAX_SUITE_PATCH_WORK`].
    pub spent: &'a std::cell::Cell<u64>,
}

/// The uid an object gets when the case gives none: what a two-person
/// approval's seal would bind to.
const OBJECT_UID: &str = "5c0f1e2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f";

impl Short<'_> {
    /// The AdmissionReview body, at most `limit` bytes; or why not,
    /// naming the case and the field.
    pub fn expand(&self, limit: u64) -> Result<Vec<u8>, String> {
        let at = &self.at;
        let (old, known) = self.old_object()?;
        let (group, version) = split_api_version(text(&old, "/apiVersion"));
        let kind = text(&old, "/kind").to_string();
        let resource = self.resource(group, &kind, known)?;
        let name = text(&old, "/metadata/name").to_string();
        let namespace = old
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.check_scope(&kind, known, namespace.is_some())?;
        let new = self.changed(&old, limit)?;
        self.check_same_object(&old, &new)?;
        let is_namespace = group.is_empty() && resource == "namespaces";
        let subresource = (is_namespace
            && new.pointer("/spec/finalizers") != old.pointer("/spec/finalizers"))
        .then_some("finalize");
        let (username, groups) = self.user_info()?;

        let gvk = json!({"group": group, "version": version, "kind": kind});
        let gvr = json!({"group": group, "version": version, "resource": resource});
        let mut request = Map::new();
        request.insert("uid".into(), json!("00000000-0000-4000-8000-00000000c45e"));
        request.insert("kind".into(), gvk.clone());
        request.insert("resource".into(), gvr.clone());
        if let Some(sub) = subresource {
            request.insert("subResource".into(), json!(sub));
        }
        request.insert("requestKind".into(), gvk);
        request.insert("requestResource".into(), gvr);
        if let Some(sub) = subresource {
            request.insert("requestSubResource".into(), json!(sub));
        }
        request.insert("name".into(), json!(name));
        // kube-apiserver reads a Namespace's path, /namespaces/NAME, as its namespace.
        match (is_namespace, namespace) {
            (true, _) => {
                request.insert("namespace".into(), json!(name));
            }
            (false, Some(ns)) => {
                request.insert("namespace".into(), json!(ns));
            }
            (false, None) => {}
        }
        request.insert("operation".into(), json!("UPDATE"));
        request.insert(
            "userInfo".into(),
            json!({"username": username, "groups": groups}),
        );
        request.insert("object".into(), new);
        request.insert("oldObject".into(), old);
        request.insert("dryRun".into(), json!(self.dry_run));
        request.insert(
            "options".into(),
            json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
        );
        let review = json!({
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": request,
        });
        let body = serde_json::to_vec(&review).expect("a JSON value serializes");
        if body.len() as u64 > limit {
            return Err(too_large(at, limit));
        }
        Ok(body)
    }

    /// A namespace named for a namespaced type of the table, none for a
    /// cluster-scoped one.
    fn check_scope(
        &self,
        kind: &str,
        known: Option<&'static KnownType>,
        has_namespace: bool,
    ) -> Result<(), String> {
        let at = &self.at;
        match (known.map(|t| t.namespaced), has_namespace) {
            (Some(true), false) => Err(format!(
                "{at}.object.namespace: a {kind} lives in a namespace: name it"
            )),
            (Some(false), true) => Err(format!(
                "{at}.object.namespace: a {kind} is cluster-scoped: it has no namespace"
            )),
            _ => Ok(()),
        }
    }

    /// The write changes the object, not which object it is.
    fn check_same_object(&self, old: &Value, new: &Value) -> Result<(), String> {
        for (pointer, what) in [
            ("/apiVersion", "apiVersion"),
            ("/kind", "kind"),
            ("/metadata/name", "metadata.name"),
            ("/metadata/namespace", "metadata.namespace"),
            ("/metadata/uid", "metadata.uid"),
        ] {
            if new.pointer(pointer) != old.pointer(pointer) {
                return Err(format!(
                    "{}.{}: changes {what}: a write cannot change which object it is",
                    self.at,
                    self.change_field()
                ));
            }
        }
        Ok(())
    }

    /// The object before the write, with what kube-apiserver always sets
    /// (apiVersion, uid), and its type if the table knows it.
    fn old_object(&self) -> Result<(Value, Option<&'static KnownType>), String> {
        let at = &self.at;
        let Some(given) = self.object.as_object() else {
            return Err(format!(
                "{at}.object: a mapping (kind, name, namespace, finalizers, ...) or a whole object"
            ));
        };
        let mut object = if given.contains_key("metadata") {
            self.whole_object()?
        } else {
            self.short_object()?
        };
        let known = self.known_type(&mut object)?;
        Ok((object, known))
    }

    /// A whole object as given (`metadata` and all), checked, with a uid.
    fn whole_object(&self) -> Result<Value, String> {
        let at = &self.at;
        let mut whole = self.object.clone();
        for (pointer, field) in [("/kind", "kind"), ("/metadata/name", "metadata.name")] {
            if !whole.pointer(pointer).is_some_and(Value::is_string) {
                return Err(format!("{at}.object.{field}: missing, or not a string"));
            }
        }
        for (pointer, field) in [
            ("/apiVersion", "apiVersion"),
            ("/metadata/namespace", "metadata.namespace"),
            ("/metadata/uid", "metadata.uid"),
        ] {
            if whole.pointer(pointer).is_some_and(|v| !v.is_string()) {
                return Err(format!("{at}.object.{field}: not a string"));
            }
        }
        if !whole["metadata"].is_object() {
            return Err(format!("{at}.object.metadata: not a mapping"));
        }
        if let Some(ts) = whole.pointer("/metadata/deletionTimestamp") {
            timestamp(at, "object.metadata.deletionTimestamp", ts.as_str())?;
        }
        whole["metadata"]
            .as_object_mut()
            .expect("checked")
            .entry("uid")
            .or_insert_with(|| json!(OBJECT_UID));
        Ok(whole)
    }

    /// The short form (kind, name, namespace, finalizers, ...) made an object.
    fn short_object(&self) -> Result<Value, String> {
        let at = &self.at;
        let short: ShortObject =
            serde_json::from_value(self.object.clone()).map_err(|e| format!("{at}.object: {e}"))?;
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(short.name));
        if let Some(ns) = short.namespace {
            metadata.insert("namespace".into(), json!(ns));
        }
        metadata.insert(
            "uid".into(),
            json!(short.uid.as_deref().unwrap_or(OBJECT_UID)),
        );
        if let Some(ts) = short.deletion_timestamp {
            timestamp(at, "object.deletionTimestamp", Some(&ts))?;
            metadata.insert("deletionTimestamp".into(), json!(ts));
        }
        if !short.finalizers.is_empty() {
            metadata.insert("finalizers".into(), json!(short.finalizers));
        }
        if !short.annotations.is_empty() {
            metadata.insert("annotations".into(), json!(short.annotations));
        }
        let mut object = Map::new();
        if let Some(v) = short.api_version {
            object.insert("apiVersion".into(), json!(v));
        }
        object.insert("kind".into(), json!(short.kind));
        object.insert("metadata".into(), Value::Object(metadata));
        if let Some(spec) = short.spec {
            object.insert("spec".into(), spec);
        }
        Ok(Value::Object(object))
    }

    /// The object's type in the table (by its kind, or by the case's
    /// resource), and its apiVersion set from it when the case gives none.
    fn known_type(&self, object: &mut Value) -> Result<Option<&'static KnownType>, String> {
        let at = &self.at;
        let kind = text(object, "/kind").to_string();
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        let known = match &api_version {
            Some(v) => kinds::by_kind(Some(split_api_version(v).0), &kind),
            None => kinds::by_kind(None, &kind),
        };
        let known = known.or_else(|| {
            // The case's resource may name a type of the table by another kind: checked below.
            self.resource.and_then(|r| {
                let (plural, group) = r.split_once('.').unwrap_or((r, ""));
                kinds::by_resource(group, plural).filter(|t| t.kind == kind)
            })
        });
        if api_version.is_none() {
            let Some(t) = known else {
                return Err(format!(
                    "{at}.object.apiVersion: needed for kind {kind:?}, which is not one of Kubernetes' or the well-known controllers' types"
                ));
            };
            let v = if t.group.is_empty() {
                t.version.to_string()
            } else {
                format!("{}/{}", t.group, t.version)
            };
            object
                .as_object_mut()
                .expect("an object")
                .insert("apiVersion".into(), json!(v));
        }
        Ok(known)
    }

    /// The plural resource of `kind` in `group`: the case's `resource`,
    /// else the table's.
    fn resource(
        &self,
        group: &str,
        kind: &str,
        known: Option<&'static KnownType>,
    ) -> Result<String, String> {
        let at = &self.at;
        let Some(given) = self.resource else {
            return known.map(|t| t.resource.to_string()).ok_or_else(|| {
                format!(
                    "{at}.object.kind: {kind:?} of {:?} is not one of Kubernetes' or the well-known controllers' types: give the case resource: PLURAL{}",
                    if group.is_empty() { "the core group" } else { group },
                    if group.is_empty() {
                        String::new()
                    } else {
                        format!(".{group}")
                    }
                )
            });
        };
        let (plural, resource_group) = given.split_once('.').unwrap_or((given, ""));
        let word = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        if !word(plural) || !(resource_group.is_empty() || resource_group.split('.').all(word)) {
            return Err(format!(
                "{at}.resource: {given:?} is not RESOURCE or RESOURCE.GROUP, e.g. widgets.example.com"
            ));
        }
        if resource_group != group {
            return Err(format!(
                "{at}.resource: {given:?} is not in the group of the object's apiVersion ({:?})",
                group
            ));
        }
        if let Some(t) = kinds::by_resource(group, plural)
            && t.kind != kind
        {
            return Err(format!(
                "{at}.resource: {given:?} holds {}s, not {kind}s",
                t.kind
            ));
        }
        Ok(plural.to_string())
    }

    /// The case's change field, as an error names it.
    fn change_field(&self) -> &'static str {
        if self.merge_patch.is_some() {
            "mergePatch"
        } else if self.json_patch.is_some() {
            "jsonPatch"
        } else {
            "finalizersAfter"
        }
    }

    /// The object after the write.
    fn changed(&self, old: &Value, limit: u64) -> Result<Value, String> {
        let at = &self.at;
        let given = [
            self.merge_patch.is_some(),
            self.json_patch.is_some(),
            self.finalizers_after.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given != 1 {
            return Err(format!(
                "{at}: give exactly one change: mergePatch, jsonPatch or finalizersAfter"
            ));
        }
        let mut new = old.clone();
        if let Some(after) = self.finalizers_after {
            let metadata = new["metadata"]
                .as_object_mut()
                .expect("an object's metadata");
            if after.is_empty() {
                metadata.remove("finalizers");
            } else {
                metadata.insert("finalizers".into(), json!(after));
            }
        } else if let Some(patch) = self.merge_patch {
            json_patch::merge(&mut new, patch);
        } else if let Some(ops) = self.json_patch {
            let Some(ops) = ops.as_array() else {
                return Err(format!(
                    "{at}.jsonPatch: a list of operations, e.g. [{{op: remove, path: /metadata/finalizers/0}}]"
                ));
            };
            if self.spent.get() >= MAX_SUITE_PATCH_WORK {
                return Err(format!(
                    "{at}.jsonPatch: the suite's patches have taken more than {MAX_SUITE_PATCH_WORK} units of work in all, the most one suite's may take: split the suite, or give smaller objects"
                ));
            }
            // A refused patch may have taken its whole budget.
            let (patched, work) = json_patch(at, old, ops, limit).inspect_err(|_| {
                self.spent
                    .set(self.spent.get().saturating_add(MAX_PATCH_WORK));
            })?;
            self.spent.set(self.spent.get().saturating_add(work.0));
            new = patched;
        }
        if !new.get("metadata").is_some_and(Value::is_object) {
            return Err(format!(
                "{at}.{}: leaves no object metadata",
                self.change_field()
            ));
        }
        Ok(new)
    }

    /// `userInfo`: the name, and the groups as the authenticator gives them.
    fn user_info(&self) -> Result<(String, Vec<String>), String> {
        let at = &self.at;
        let Some(requester) = self.requester else {
            return Err(format!(
                "{at}.requester: missing: give user (and groups) or serviceAccount: NAMESPACE:NAME"
            ));
        };
        let (username, mut groups) = match (&requester.user, &requester.service_account) {
            (Some(user), None) => {
                if user.is_empty() {
                    return Err(format!("{at}.requester.user: empty"));
                }
                let everyone = if user == "system:anonymous" {
                    "system:unauthenticated"
                } else {
                    "system:authenticated"
                };
                (user.clone(), vec![everyone.to_string()])
            }
            (None, Some(sa)) => {
                let account = sa
                    .split_once(':')
                    .filter(|(ns, name)| is_name(ns) && is_name(name));
                let Some((ns, name)) = account else {
                    return Err(format!(
                        "{at}.requester.serviceAccount: {sa:?} must be NAMESPACE:NAME"
                    ));
                };
                (
                    format!("system:serviceaccount:{ns}:{name}"),
                    vec![
                        "system:serviceaccounts".to_string(),
                        format!("system:serviceaccounts:{ns}"),
                        "system:authenticated".to_string(),
                    ],
                )
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}.requester: give either user or serviceAccount, not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at}.requester: give user (and groups) or serviceAccount: NAMESPACE:NAME"
                ));
            }
        };
        for group in &requester.groups {
            if !groups.contains(group) {
                groups.insert(groups.len() - 1, group.clone());
            }
        }
        Ok((username, groups))
    }
}

/// `group/version`, or `version` for the core group.
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn text<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A DNS label, as namespaces and ServiceAccount names are (near enough: a
/// name kube-apiserver would refuse is refused).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

fn timestamp(at: &str, field: &str, value: Option<&str>) -> Result<(), String> {
    match value.map(str::parse::<jiff::Timestamp>) {
        Some(Ok(_)) => Ok(()),
        _ => Err(format!(
            "{at}.{field}: not a timestamp like \"2026-11-26T10:00:00Z\""
        )),
    }
}

fn too_large(at: &str, limit: u64) -> String {
    format!(
        "{at}: the review it expands to is larger than {limit} bytes, the largest file `test` reads (--max-body-bytes)"
    )
}

/// How deep an object a short case may build: serde_json's own recursion
/// limit, which a review kube-apiserver sends never reaches.
const MAX_DEPTH: usize = 128;

/// The most work a short case's JSON patch may take, in units: a node of
/// an operation read (its value, what a `test` compares), a node copied, an
/// array item shifted by an insertion or a removal, a node visited when the
/// object's depth must be checked again. A patch of a real object takes a
/// few hundred; a patch that would take more is refused before it is
/// applied.
pub const MAX_PATCH_WORK: u64 = 1_000_000;

/// The most work the patches of one suite's cases may take in all: each
/// case within [`MAX_PATCH_WORK`], many cases reusing one costly patch by
/// alias could otherwise take an hour. Some ten seconds of work.
pub const MAX_SUITE_PATCH_WORK: u64 = 20 * MAX_PATCH_WORK;

/// The work a patch has taken so far, against [`MAX_PATCH_WORK`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Work(u64);

impl Work {
    /// What is left of the budget.
    fn left(self) -> u64 {
        MAX_PATCH_WORK.saturating_sub(self.0)
    }

    /// Takes `units` more, or says why the case is refused.
    fn spend(&mut self, units: u64, at: &str, i: usize) -> Result<(), String> {
        self.0 = self.0.saturating_add(units);
        if self.0 > MAX_PATCH_WORK {
            return Err(format!(
                "{at}.jsonPatch[{i}]: the patch takes more than {MAX_PATCH_WORK} units of work (nodes read, copied or visited, array items shifted), the most a case's patch may take: give fewer operations, or a smaller object"
            ));
        }
        Ok(())
    }
}

/// `old` with the JSON patch `ops` applied, and the work it took: refused
/// past [`MAX_PATCH_WORK`], past `limit` bytes (only `copy` grows the object
/// past what the file held) or deeper than [`MAX_DEPTH`].
///
/// Each operation is paid for before it is applied, by what it costs: its
/// own nodes, the array items it shifts, the nodes it copies. The object's
/// depth is not walked after each operation; a bound on it is kept instead
/// (an `add` nests its value under its path; a `move` or a `copy` nests
/// what it moves as much deeper as its path is longer than its `from`), and
/// the object is walked, and the walk paid for, only when that bound passes
/// [`MAX_DEPTH`].
fn json_patch(at: &str, old: &Value, ops: &[Value], limit: u64) -> Result<(Value, Work), String> {
    use json_patch::PatchOperation as Op;
    use serde::Deserialize as _;
    let mut new = old.clone();
    let mut work = Work::default();
    let mut size = json_size(old);
    let mut depth = measure(old, u64::MAX).depth;
    for (i, op) in ops.iter().enumerate() {
        work.spend(measure(op, work.left()).nodes, at, i)?;
        let op = Op::deserialize(op).map_err(|e| format!("{at}.jsonPatch[{i}]: {e}"))?;
        let (path, from) = match &op {
            Op::Add(o) => (o.path.as_str(), ""),
            Op::Remove(o) => (o.path.as_str(), ""),
            Op::Replace(o) => (o.path.as_str(), ""),
            Op::Move(o) => (o.path.as_str(), o.from.as_str()),
            Op::Copy(o) => (o.path.as_str(), o.from.as_str()),
            Op::Test(o) => (o.path.as_str(), ""),
        };
        // The array items an insertion at `path`, or a removal, shifts.
        let shifts = match &op {
            Op::Add(_) | Op::Copy(_) | Op::Remove(_) => shifted(&new, path),
            Op::Move(_) => shifted(&new, from).saturating_add(shifted(&new, path)),
            Op::Replace(_) | Op::Test(_) => 0,
        };
        work.spend(shifts, at, i)?;
        if let Op::Copy(_) = &op
            && let Some(source) = new.pointer(from)
        {
            work.spend(measure(source, work.left()).nodes, at, i)?;
            size = size.saturating_add(json_size(source));
            if size > limit {
                return Err(too_large(at, limit));
            }
        }
        json_patch::patch_unsafe(&mut new, std::slice::from_ref(&op)).map_err(|e| {
            let why = match e.kind {
                json_patch::PatchErrorKind::TestFailed => {
                    "the test failed: the object holds another value there".to_string()
                }
                kind => kind.to_string(),
            };
            format!("{at}.jsonPatch[{i}]: at {:?}: {why}", e.path.as_str())
        })?;
        depth = match &op {
            Op::Add(json_patch::AddOperation { value, .. })
            | Op::Replace(json_patch::ReplaceOperation { value, .. }) => {
                depth.max(segments(path) + measure(value, u64::MAX).depth)
            }
            Op::Move(_) | Op::Copy(_) => depth + segments(path).saturating_sub(segments(from)),
            Op::Remove(_) | Op::Test(_) => depth,
        };
        if depth > MAX_DEPTH as u64 {
            let walked = measure(&new, work.left());
            work.spend(walked.nodes, at, i)?;
            if walked.depth > MAX_DEPTH as u64 {
                return Err(format!(
                    "{at}.jsonPatch[{i}]: nests the object deeper than {MAX_DEPTH} levels, which kube-apiserver would not store"
                ));
            }
            depth = walked.depth;
        }
    }
    Ok((new, work))
}

/// The reference tokens of a JSON pointer (`/a/b`: 2).
fn segments(pointer: &str) -> u64 {
    pointer.matches('/').count() as u64
}

/// The array items an insertion at, or a removal from, `pointer` shifts:
/// those from its index on (none at `-`, the end); none when what holds
/// it is not an array.
fn shifted(object: &Value, pointer: &str) -> u64 {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return 0;
    };
    let Some(Value::Array(items)) = object.pointer(parent) else {
        return 0;
    };
    let index = last.parse::<usize>().unwrap_or(items.len());
    items.len().saturating_sub(index) as u64
}

/// A value's nodes (itself included), and how deep it nests arrays and
/// objects (`{}`: 1, a scalar: 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Measure {
    nodes: u64,
    depth: u64,
}

/// The [`Measure`] of `value`, found without recursion (a value nested deep
/// enough to overflow the stack must not do so here). The walk stops past
/// `most` nodes, counting `most + 1`: the budget it is paid from bounds it.
fn measure(value: &Value, most: u64) -> Measure {
    let mut nodes = 0_u64;
    let mut depth = 0_u64;
    let mut stack = vec![(value, 1_u64)];
    while let Some((value, level)) = stack.pop() {
        nodes += 1;
        if nodes > most {
            break;
        }
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        depth = depth.max(level);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    Measure { nodes, depth }
}

/// How many bytes `value` takes as JSON, without writing them anywhere.
fn json_size(value: &Value) -> u64 {
    struct Count(u64);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("a JSON value serializes");
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod whose spec holds an array of `items` zeros.
    fn pod(items: usize) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "finalizers": ["a/b"]},
            "spec": {"items": vec![0; items]},
        })
    }

    fn ops(op: Value, n: usize) -> Vec<Value> {
        vec![op; n]
    }

    fn patched(old: &Value, ops: &[Value]) -> Result<(Value, Work), String> {
        json_patch("cases[0]", old, ops, 64 << 20)
    }

    /// Why the patch is refused (the object is too large to print).
    fn refused(old: &Value, ops: &[Value]) -> String {
        match patched(old, ops) {
            Ok((_, work)) => panic!("applied, with {work:?}"),
            Err(why) => why,
        }
    }

    /// Thousands of `test`s on an object holding a 100,000-item array: the
    /// work is each operation's own (4 nodes), not a walk of the object
    /// after each (400 million nodes, seconds, before).
    #[test]
    fn a_patch_costs_what_its_operations_do_not_the_object_s_size() {
        let old = pod(100_000);
        let tests = ops(
            json!({"op": "test", "path": "/spec/items/5", "value": 0}),
            4000,
        );
        let (new, work) = patched(&old, &tests).unwrap();
        assert_eq!(new, old);
        assert_eq!(work, Work(4000 * 4));
        // Appending shifts nothing; a removal at the end neither.
        let appends = ops(
            json!({"op": "add", "path": "/spec/items/-", "value": 1}),
            4000,
        );
        let (new, work) = patched(&old, &appends).unwrap();
        assert_eq!(new["spec"]["items"].as_array().unwrap().len(), 104_000);
        assert_eq!(work, Work(4000 * 4));
        let removals = ops(json!({"op": "remove", "path": "/metadata/finalizers/0"}), 1);
        assert_eq!(patched(&old, &removals).unwrap().1, Work(3 + 1));
    }

    /// Each insertion at the front of a long array shifts every item: paid
    /// for, and refused past the budget before it is done.
    #[test]
    fn a_patch_past_its_work_budget_is_refused_naming_it() {
        let old = pod(1000);
        let inserts = ops(
            json!({"op": "add", "path": "/spec/items/0", "value": 1}),
            2000,
        );
        let why = refused(&old, &inserts);
        assert_eq!(
            why,
            "cases[0].jsonPatch[730]: the patch takes more than 1000000 units of work (nodes read, copied or visited, array items shifted), the most a case's patch may take: give fewer operations, or a smaller object"
        );
        // Under it, the same operations apply.
        let (new, work) = patched(&old, &inserts[..730]).unwrap();
        assert_eq!(new["spec"]["items"].as_array().unwrap().len(), 1730);
        assert_eq!(work.0, (0..730).map(|i| 4 + 1000 + i).sum::<u64>());
        // What copies are paid for: the nodes copied.
        let copies = ops(
            json!({"op": "copy", "from": "/spec/items", "path": "/spec/copy"}),
            1,
        );
        assert_eq!(patched(&old, &copies).unwrap().1, Work(4 + 1001));
    }

    /// The depth is not walked after each operation, only when a bound on
    /// it passes the limit; a patch that makes that happen again and again
    /// pays for each walk and is refused at the budget.
    #[test]
    fn the_object_is_walked_only_when_it_may_have_grown_too_deep() {
        // The root, spec, and 126 levels under it: 128 deep, the most a
        // case may build.
        let mut deep = json!({});
        for _ in 0..125 {
            deep = json!({ "d": deep });
        }
        let mut old = pod(100_000);
        old["spec"]["deep"] = deep;
        old["spec"]["scalar"] = json!(1);
        old["spec"]["a"] = json!({"b": {}});
        assert_eq!(measure(&old, u64::MAX).depth, 128);
        // A scalar moved two levels down and back: the bound passes 128
        // each time it goes down, though the object grows no deeper.
        let there = json!({"op": "move", "from": "/spec/scalar", "path": "/spec/a/b/scalar"});
        let back = json!({"op": "move", "from": "/spec/a/b/scalar", "path": "/spec/scalar"});
        let (_, work) = patched(&old, &[there.clone(), back.clone()]).unwrap();
        let walk = measure(&old, u64::MAX).nodes;
        assert_eq!(work, Work(2 * 4 + walk));
        let bounce: Vec<Value> = (0..100)
            .flat_map(|_| [there.clone(), back.clone()])
            .collect();
        let why = refused(&old, &bounce);
        assert!(why.contains("more than 1000000 units of work"), "{why}");
        // One level deeper than the limit is refused as before.
        let innermost = format!("/spec/deep{}/x", "/d".repeat(125));
        let deeper = ops(json!({"op": "add", "path": innermost, "value": {}}), 1);
        let why = refused(&old, &deeper);
        assert!(
            why.contains("nests the object deeper than 128 levels"),
            "{why}"
        );
    }
}
