//! The wire layer: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! [`review`] is the one function the server, `check` and the tests call, so
//! an offline replay is exactly what the server would answer. It reads the
//! request with kube-core's admission types over a lean object type that keeps
//! only what a decision needs: a 3 MiB ConfigMap's `data` or a Pod's
//! `managedFields` are skipped by the parser, never built.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as WireOperation,
};
use kube_core::response::StatusSummary;
use kube_core::{DynamicResourceScope, Resource, Status};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::ledger::{self, Ledger};
use crate::policy::{
    self, Change, Decision, FinalizerField, FinalizerLists, Operation, Outcome, Policy, Requester,
    Target, message,
};

const V1: &str = "admission.k8s.io/v1";
const V1BETA1: &str = "admission.k8s.io/v1beta1";

/// Audit annotation values are cut to this many characters.
const MAX_AUDIT_VALUE_CHARS: usize = 256;

/// An object as the webhook reads it: the metadata a decision needs, and
/// `spec.finalizers` (a Namespace's). Everything else is skipped unparsed.
#[derive(Debug, Clone, Default)]
pub struct LeanObject {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub metadata: ObjectMeta,
    pub spec_finalizers: Vec<String>,
    /// `spec` or `spec.finalizers` was there but of another shape than an
    /// object holding a list of strings; `spec_finalizers` then holds only
    /// the strings found, if any.
    pub spec_finalizers_malformed: bool,
}

impl Serialize for LeanObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(Serialize)]
        struct Spec<'a> {
            finalizers: &'a [String],
        }
        let mut map = serializer.serialize_map(None)?;
        if let Some(v) = &self.api_version {
            map.serialize_entry("apiVersion", v)?;
        }
        if let Some(k) = &self.kind {
            map.serialize_entry("kind", k)?;
        }
        map.serialize_entry("metadata", &self.metadata)?;
        if !self.spec_finalizers.is_empty() {
            map.serialize_entry(
                "spec",
                &Spec {
                    finalizers: &self.spec_finalizers,
                },
            )?;
        }
        map.end()
    }
}

impl Resource for LeanObject {
    type DynamicType = ();
    type Scope = DynamicResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Object")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for LeanObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Repr {
            #[serde(default)]
            api_version: Option<StringOrNothing>,
            #[serde(default)]
            kind: Option<StringOrNothing>,
            #[serde(default)]
            metadata: Option<LeanMeta>,
            #[serde(default)]
            spec: Option<SpecFinalizers>,
        }
        let repr = Repr::deserialize(deserializer)?;
        let meta = repr.metadata.unwrap_or_default();
        let spec = repr.spec.unwrap_or_default();
        Ok(LeanObject {
            api_version: repr.api_version.and_then(|s| s.0),
            kind: repr.kind.and_then(|s| s.0),
            metadata: ObjectMeta {
                name: meta.name,
                generate_name: meta.generate_name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                deletion_timestamp: meta
                    .deletion_timestamp
                    .and_then(|t| t.0)
                    .and_then(|t| t.parse().ok())
                    .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
                labels: meta.labels.map(|l| l.0),
                finalizers: meta.finalizers,
                annotations: meta.annotations.map(|a| a.0),
                ..ObjectMeta::default()
            },
            spec_finalizers: spec.names,
            spec_finalizers_malformed: spec.malformed,
        })
    }
}

/// The fields of `metadata` a decision reads, and those that identify the object.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<StringOrNothing>,
    #[serde(default)]
    labels: Option<Annotations>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    annotations: Option<Annotations>,
}

/// Annotations or labels, skipping any value that is not a string: the apiserver never
/// sends one, and a hand-made review should not fail on a field only an
/// override reads.
struct Annotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((key, value)) = map.next_entry::<String, StringOrNothing>()? {
                    if let Some(value) = value.0 {
                        out.insert(key, value);
                    }
                }
                Ok(Annotations(out))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Visitor methods for scalars: `null` is "nothing here" (the value's
/// `Default`), and so is any other scalar, unless `other` says what it is
/// instead (a string is left to the visitor).
macro_rules! skip_scalars {
    () => {
        skip_scalars!(Self::Value::default());
    };
    ($other:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
    };
}

/// `spec.finalizers` when `spec` is an object holding a list of strings.
/// Any other shape reads as empty, since a custom resource's `spec` can be
/// anything, but is remembered as malformed: a Namespace's `spec.finalizers`
/// is judged, and there a list read as empty could hide a removal.
#[derive(Default)]
struct SpecFinalizers {
    names: Vec<String>,
    malformed: bool,
}

impl SpecFinalizers {
    fn malformed() -> Self {
        SpecFinalizers {
            names: Vec::new(),
            malformed: true,
        }
    }
}

/// Visitor methods for the scalars a finalizer list is not: `null` is an
/// empty list (as the apiserver treats it), any other scalar is malformed.
macro_rules! malformed_scalars {
    () => {
        skip_scalars!(SpecFinalizers::malformed());
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(SpecFinalizers::malformed())
        }
    };
}

impl<'de> Deserialize<'de> for SpecFinalizers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = SpecFinalizers;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut finalizers: Option<SpecFinalizers> = None;
        while let Some(key) = map.next_key::<KeyIsFinalizers>()? {
            if !key.0 {
                map.next_value::<IgnoredAny>()?;
            } else if finalizers.is_some() {
                return Err(de::Error::duplicate_field("finalizers"));
            } else {
                finalizers = Some(map.next_value::<FinalizerList>()?.0);
            }
        }
        Ok(finalizers.unwrap_or_default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(SpecFinalizers::malformed())
    }

    malformed_scalars!();
}

/// A map key, compared with `finalizers` without allocating.
struct KeyIsFinalizers(bool);

impl<'de> Deserialize<'de> for KeyIsFinalizers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyIsFinalizers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(KeyIsFinalizers(v == "finalizers"))
            }
        }
        deserializer.deserialize_identifier(V)
    }
}

/// `spec.finalizers`: the strings of a list, malformed for anything else.
struct FinalizerList(SpecFinalizers);

impl<'de> Deserialize<'de> for FinalizerList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SpecFinalizers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of finalizer names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = SpecFinalizers::default();
                while let Some(item) = seq.next_element::<StringOrNothing>()? {
                    match item.0 {
                        Some(name) => out.names.push(name),
                        None => out.malformed = true,
                    }
                }
                Ok(out)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(SpecFinalizers::malformed())
            }
            malformed_scalars!();
        }
        deserializer.deserialize_any(V).map(FinalizerList)
    }
}

#[derive(Default)]
struct StringOrNothing(Option<String>);

impl<'de> Deserialize<'de> for StringOrNothing {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringOrNothing;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a finalizer name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StringOrNothing(Some(v.to_string())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StringOrNothing(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StringOrNothing(None))
            }
            skip_scalars!();
        }
        deserializer.deserialize_any(V)
    }
}

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
    #[error("UPDATE request has no {0}: cannot tell which finalizers it removes")]
    NoObject(&'static str),
    #[error("body is nested more than 128 levels deep at line {line} column {column}")]
    TooDeep { line: usize, column: usize },
    #[error(
        "{0}.spec.finalizers is not a list of finalizer names: cannot tell which finalizers it removes"
    )]
    NotFinalizerList(&'static str),
}

/// One finalizer in an audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditedRemoval {
    pub finalizer: String,
    /// `metadata.finalizers` or `spec.finalizers`.
    pub field: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<String>,
}

/// One judged finalizer removal: who, what, which decision and why. Never an object body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub uid: String,
    pub user: String,
    pub groups: Vec<String>,
    pub operation: &'static str,
    /// `resource` or `resource.group`.
    pub resource: String,
    /// The object's kind and apiVersion (`request.kind`).
    pub object_kind: String,
    pub object_api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_uid: Option<String>,
    pub removed_finalizers: Vec<AuditedRemoval>,
    pub decision: &'static str,
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_detail: Option<String>,
    /// Two-person rule: who approved the override (for an override, or an approval written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_expires: Option<String>,
    /// For an override: what the removed finalizers were protecting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected: Option<Ledger>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub dry_run: bool,
}

/// The answer to one review.
#[derive(Debug, Clone)]
pub struct Reviewed {
    /// The response AdmissionReview, serialized.
    pub body: Vec<u8>,
    pub uid: String,
    pub allowed: bool,
    /// `not-judged`, `nothing-removed`, `authorized`, `override`, `denied`, `would-deny`.
    pub decision: &'static str,
    pub operation: &'static str,
    /// The API group of the resource written (`""` for the core group).
    pub group: String,
    /// How many finalizers were removed without a rule or built-in controller.
    pub unauthorized: usize,
    /// `status.message` of a denial.
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// Present when finalizers were removed.
    pub audit: Option<AuditRecord>,
    /// The request as read (lean objects), when finalizers were removed: what
    /// a recording keeps.
    pub request: Option<Box<AdmissionRequest<LeanObject>>>,
}

/// Decides one AdmissionReview body under `policy`, by the webhook's clock.
pub fn review(policy: &Policy, body: &[u8]) -> Result<Reviewed, ReviewError> {
    review_at(policy, body, jiff::Timestamp::now())
}

/// Decides one AdmissionReview body under `policy` as of `now`.
pub fn review_at(
    policy: &Policy,
    body: &[u8],
    now: jiff::Timestamp,
) -> Result<Reviewed, ReviewError> {
    let parsed: AdmissionReview<LeanObject> = match serde_json::from_slice(body) {
        Ok(parsed) => parsed,
        Err(e) => return Err(explain(body, e)),
    };
    let version = parsed.types.api_version.as_str();
    if parsed.types.kind != "AdmissionReview" || (version != V1 && version != V1BETA1) {
        return Err(ReviewError::NotAdmissionReview(format!(
            "apiVersion {:?} kind {:?}, want {V1} or {V1BETA1} AdmissionReview",
            parsed.types.api_version, parsed.types.kind
        )));
    }
    let request: AdmissionRequest<LeanObject> =
        parsed.try_into().map_err(|_| ReviewError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    let operation = match request.operation {
        WireOperation::Create => Operation::Create,
        WireOperation::Update => Operation::Update,
        WireOperation::Delete => Operation::Delete,
        WireOperation::Connect => Operation::Connect,
    };
    let empty = LeanObject::default();
    let (object, old_object) = match (operation, &request.object, &request.old_object) {
        (Operation::Update, None, _) => return Err(ReviewError::NoObject("object")),
        (Operation::Update, _, None) => return Err(ReviewError::NoObject("oldObject")),
        (_, object, old) => (
            object.as_ref().unwrap_or(&empty),
            old.as_ref().unwrap_or(&empty),
        ),
    };

    let no_annotations = BTreeMap::new();
    let username = request.user_info.username.as_deref().unwrap_or_default();
    let groups = request.user_info.groups.as_deref().unwrap_or_default();
    let change = Change {
        operation,
        target: Target {
            group: &request.resource.group,
            resource: &request.resource.resource,
            subresource: request.sub_resource.as_deref().unwrap_or_default(),
            namespace: request.namespace.as_deref(),
            name: &request.name,
        },
        requester: Requester { username, groups },
        metadata_finalizers: FinalizerLists {
            old: old_object
                .metadata
                .finalizers
                .as_deref()
                .unwrap_or_default(),
            new: object.metadata.finalizers.as_deref().unwrap_or_default(),
        },
        spec_finalizers: FinalizerLists {
            old: &old_object.spec_finalizers,
            new: &object.spec_finalizers,
        },
        annotations: object
            .metadata
            .annotations
            .as_ref()
            .unwrap_or(&no_annotations),
        old_annotations: old_object
            .metadata
            .annotations
            .as_ref()
            .unwrap_or(&no_annotations),
        now,
    };
    if change.target.is_namespace_finalize() {
        // A list read as empty in oldObject would hide its removal: refuse.
        for (field, lean) in [
            ("request.oldObject", old_object),
            ("request.object", object),
        ] {
            if lean.spec_finalizers_malformed {
                return Err(ReviewError::NotFinalizerList(field));
            }
        }
    }
    let decision = policy::decide(&change, policy);

    let mut response = AdmissionResponse::from(&request);
    let mut message_text = None;
    let warning = message::override_warning(&change, &decision)
        .or_else(|| message::would_deny_warning(&change, &decision));
    if !decision.allowed() {
        let text = message::denial(&change, &decision, policy);
        response = response.deny(&text);
        response.result = Status::failure(&text, "Forbidden").with_code(403);
        response.result.status = Some(StatusSummary::Failure);
        message_text = Some(text);
    }
    if let Some(w) = &warning {
        response.warnings = Some(vec![w.clone()]);
    }
    let ledger = override_of(&decision).map(|_| ledger::read(body));
    // Two-person rule: the approval used (from oldObject) or written (in object).
    let approval_annotations = match (&policy.override_settings.approval, &decision.outcome) {
        (Some(_), Outcome::Override(_)) => Some(change.old_annotations),
        (Some(_), Outcome::ApprovalRecorded | Outcome::ApprovalRefused { .. }) => {
            Some(change.annotations)
        }
        _ => None,
    };
    let approved_by =
        approval_annotations.and_then(|a| a.get(policy::approval::APPROVED_BY).cloned());
    let override_expires =
        approval_annotations.and_then(|a| a.get(policy::approval::OVERRIDE_EXPIRES).cloned());
    if decision.audited() {
        response.audit_annotations = audit_annotations(&decision, policy);
        for (key, value) in [
            ("approved-by", &approved_by),
            ("override-expires", &override_expires),
        ] {
            if let Some(value) = value {
                response.audit_annotations.insert(
                    key.to_string(),
                    message::truncate(value, MAX_AUDIT_VALUE_CHARS),
                );
            }
        }
        if let Some(ledger) = &ledger {
            response.audit_annotations.insert(
                "protected".to_string(),
                message::truncate(&ledger.summary(), MAX_AUDIT_VALUE_CHARS),
            );
        }
    }
    let audit = decision.audited().then(|| AuditRecord {
        uid: request.uid.clone(),
        user: username.to_string(),
        groups: groups.to_vec(),
        operation: operation.as_str(),
        resource: qualified_resource(&change.target),
        object_kind: request.kind.kind.clone(),
        object_api_version: if request.kind.group.is_empty() {
            request.kind.version.clone()
        } else {
            format!("{}/{}", request.kind.group, request.kind.version)
        },
        subresource: change.target.subresource.to_string(),
        namespace: change.target.object_namespace().map(String::from),
        name: request.name.clone(),
        object_uid: old_object.metadata.uid.clone(),
        removed_finalizers: decision
            .removed
            .iter()
            .map(|r| AuditedRemoval {
                finalizer: r.finalizer.clone(),
                field: r.field.path(),
                authorized_by: r.authorized_by.as_ref().map(ToString::to_string),
            })
            .collect(),
        decision: decision.label(),
        mode: policy.mode.as_str(),
        override_reason: override_of(&decision).map(|o| o.reason.clone()),
        override_detail: override_of(&decision).map(|o| o.detail.clone()),
        approved_by,
        override_expires,
        protected: ledger,
        message: message_text.clone(),
        dry_run: request.dry_run,
    });

    let body = serde_json::to_vec(&response.into_review())
        .expect("an AdmissionReview response always serializes");
    let judged = decision.audited();
    Ok(Reviewed {
        body,
        uid: request.uid.clone(),
        group: request.resource.group.clone(),
        request: judged.then(|| Box::new(request)),
        allowed: decision.allowed(),
        decision: decision.label(),
        operation: operation.as_str(),
        unauthorized: decision.unauthorized().count(),
        message: message_text,
        warnings: warning.into_iter().collect(),
        audit,
    })
}

fn override_of(decision: &Decision) -> Option<&policy::Override> {
    match &decision.outcome {
        Outcome::Override(o) => Some(o),
        _ => None,
    }
}

fn qualified_resource(target: &Target<'_>) -> String {
    if target.group.is_empty() {
        target.resource.to_string()
    } else {
        format!("{}.{}", target.resource, target.group)
    }
}

/// Audit annotations: plain qualified names without `/`, at most 63 characters,
/// which kube-apiserver prefixes with the webhook's name.
fn audit_annotations(decision: &Decision, policy: &Policy) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let join = |field: FinalizerField, only_unauthorized: bool| -> String {
        let names: Vec<&str> = decision
            .removed
            .iter()
            .filter(|r| r.field == field && (!only_unauthorized || r.authorized_by.is_none()))
            .map(|r| r.finalizer.as_str())
            .collect();
        message::truncate(&names.join(","), MAX_AUDIT_VALUE_CHARS)
    };
    out.insert("decision".to_string(), decision.label().to_string());
    for (field, removed_key, unauthorized_key) in [
        (
            FinalizerField::Metadata,
            "removed-finalizers",
            "unauthorized-finalizers",
        ),
        (
            FinalizerField::Spec,
            "removed-spec-finalizers",
            "unauthorized-spec-finalizers",
        ),
    ] {
        let removed = join(field, false);
        if !removed.is_empty() {
            out.insert(removed_key.to_string(), removed);
        }
        let unauthorized = join(field, true);
        if !unauthorized.is_empty() {
            out.insert(unauthorized_key.to_string(), unauthorized);
        }
    }
    let mut authorities: Vec<String> = Vec::new();
    for authority in decision
        .removed
        .iter()
        .filter_map(|r| r.authorized_by.as_ref())
    {
        let authority = authority.to_string();
        if !authorities.contains(&authority) {
            authorities.push(authority);
        }
    }
    if !authorities.is_empty() {
        out.insert(
            "authorized-by".to_string(),
            message::truncate(&authorities.join(", "), MAX_AUDIT_VALUE_CHARS),
        );
    }
    match &decision.outcome {
        Outcome::Override(o) => {
            out.insert("override-reason".to_string(), o.reason.clone());
            out.insert(
                "override-detail".to_string(),
                message::truncate(&o.detail, MAX_AUDIT_VALUE_CHARS),
            );
        }
        Outcome::Denied { problem, .. } => {
            out.insert("mode".to_string(), policy.mode.as_str().to_string());
            if *problem != policy::OverrideProblem::Absent {
                out.insert(
                    "override-problem".to_string(),
                    message::truncate(&problem.to_string(), MAX_AUDIT_VALUE_CHARS),
                );
            }
        }
        Outcome::ApprovalRefused { problem, .. } => {
            out.insert("mode".to_string(), policy.mode.as_str().to_string());
            out.insert(
                "approval-problem".to_string(),
                message::truncate(&problem.to_string(), MAX_AUDIT_VALUE_CHARS),
            );
        }
        _ => {}
    }
    out
}

/// Turns a parse failure into a one-line reason that names where it failed.
/// Only failures pay for the path-tracking second parse.
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
    let reason = match serde_path_to_error::deserialize::<_, AdmissionReview<LeanObject>>(&mut de) {
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
    use serde_json::{Value, json};

    fn update(old: Value, new: Value, user: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "web-0",
                "namespace": "team-a",
                "operation": "UPDATE",
                "userInfo": {"username": user, "groups": ["system:authenticated"]},
                "object": new,
                "oldObject": old,
                "dryRun": false,
                "options": {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"}
            }
        }))
        .unwrap()
    }

    fn pod(finalizers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "team-a", "uid": "u-1", "finalizers": finalizers}})
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
        let audit = r.audit.unwrap();
        assert_eq!(audit.decision, "denied");
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
        assert_eq!(r.decision, "denied");
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
                .decision,
            "denied"
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
                .decision,
            "denied"
        );
        // Outside namespaces/finalize, spec.finalizers is not judged, whatever its shape.
        assert_eq!(
            finalize(json!({"finalizers": "kubernetes"}), json!([]), "")
                .unwrap()
                .decision,
            "nothing-removed"
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
    fn too_deep_is_refused_and_skipped_fields_may_be_any_depth() {
        let p = Policy::embedded_default();
        let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let strip = String::from_utf8(update(
            pod(json!(["example.com/a"])),
            pod(Value::Null),
            "alice",
        ))
        .unwrap();
        // A value parsed whole (request.options) is cut at 128 levels.
        let options = strip.replace(
            r#""options":{"#,
            &format!(r#""options":{{"x":{},"#, deep(100_000)),
        );
        assert!(matches!(
            review(&p, options.as_bytes()).unwrap_err(),
            ReviewError::TooDeep { line: 1, .. }
        ));
        // Skipped fields are skipped without recursion, whatever their depth.
        let data = strip.replace(
            r#""kind":"Pod","#,
            &format!(r#""kind":"Pod","data":{},"#, deep(100_000)),
        );
        assert_eq!(review(&p, data.as_bytes()).unwrap().decision, "denied");
    }

    #[test]
    fn two_person_messages_and_audit() {
        let p =
            Policy::from_yaml("override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n")
                .unwrap();
        let now: jiff::Timestamp = "2026-11-21T08:00:00Z".parse().unwrap();
        let approved = json!({
            "finalizer-guard.io/override": "node-lost: INC-4711",
            "finalizer-guard.io/approved-by": "sec-lead",
            "finalizer-guard.io/override-expires": "2026-11-21T09:00:00Z"
        });
        let with = |finalizers: Value, annotations: &Value| {
            let mut o = pod(finalizers);
            o["metadata"]["annotations"] = annotations.clone();
            o
        };
        // The approver writes; a non-approver cannot.
        let write = update(
            with(json!(["example.com/a"]), &Value::Null),
            with(json!(["example.com/a"]), &approved),
            "sec-lead",
        );
        let r = review_at(&p, &write, now).unwrap();
        assert_eq!(r.decision, "approval-recorded");
        assert_eq!(
            r.audit.as_ref().unwrap().approved_by.as_deref(),
            Some("sec-lead")
        );
        let forged = update(
            with(json!(["example.com/a"]), &Value::Null),
            with(json!(["example.com/a"]), &approved),
            "mallory",
        );
        let r = review_at(&p, &forged, now).unwrap();
        assert_eq!(r.decision, "approval-denied");
        let msg = r.message.unwrap();
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
        assert_eq!(r.decision, "override");
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
    }
}
