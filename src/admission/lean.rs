//! The lean serde types: an object as the webhook reads it.
//!
//! kube-core's admission types carry the envelope; the objects inside are
//! read as [`LeanObject`], which keeps only what a decision needs: a 3 MiB
//! ConfigMap's `data` or a Pod's `managedFields` are skipped by the parser,
//! never built. A field of an unexpected shape reads as absent where the
//! decision does not depend on it, and is remembered where it does.
//!
//! [`LedgerObject`] reads the few fields of `oldObject` the leak ledger
//! reports; it is parsed only for an override, never on the common path.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::{DynamicResourceScope, Resource};
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;

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
pub(crate) struct StringOrNothing(pub(crate) Option<String>);

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

/// A `T` where the value is an object; any other value reads as `T::default()`.
#[derive(Default)]
pub(crate) struct ObjectOr<T>(pub(crate) T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for ObjectOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = ObjectOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(ObjectOr)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Self::Value::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Self::Value::default())
            }
            skip_scalars!();
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// The items of a list; any other value reads as empty.
pub(crate) struct ListOr<T>(pub(crate) Vec<T>);

impl<T> Default for ListOr<T> {
    fn default() -> Self {
        ListOr(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = ListOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(SeqAccessDeserializer::new(seq)).map(ListOr)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Self::Value::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Self::Value::default())
            }
            skip_scalars!();
        }
        deserializer.deserialize_any(V(PhantomData))
    }
}

/// Whether the value is an object, whatever it holds.
#[derive(Default)]
pub(crate) struct Present(pub(crate) bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Present;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Present(true))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// A string field of the ledger: absent, empty or of another shape is nothing.
type Text = StringOrNothing;

fn text(t: Text) -> Option<String> {
    t.0.filter(|s| !s.is_empty())
}

/// The review, as far as the ledger reads it: `request.oldObject`.
#[derive(Deserialize)]
struct LedgerReview {
    #[serde(default)]
    request: ObjectOr<LedgerRequest>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LedgerRequest {
    #[serde(default)]
    old_object: ObjectOr<LedgerObject>,
}

/// The fields of an object the leak ledger reports.
#[derive(Deserialize, Default)]
pub(crate) struct LedgerObject {
    #[serde(default)]
    metadata: ObjectOr<LedgerMeta>,
    #[serde(default)]
    spec: ObjectOr<LedgerSpec>,
    #[serde(default)]
    status: ObjectOr<LedgerStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LedgerMeta {
    #[serde(default)]
    owner_references: ListOr<ObjectOr<OwnerReference>>,
}

#[derive(Deserialize, Default)]
struct OwnerReference {
    #[serde(default)]
    kind: Text,
    #[serde(default)]
    name: Text,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LedgerSpec {
    #[serde(default)]
    node_name: Text,
    #[serde(default)]
    volumes: ListOr<ObjectOr<Volume>>,
    #[serde(default)]
    csi: ObjectOr<Csi>,
    #[serde(default)]
    volume_name: Text,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Volume {
    #[serde(default)]
    name: Text,
    #[serde(default)]
    persistent_volume_claim: ObjectOr<Claim>,
    #[serde(default)]
    csi: ObjectOr<Csi>,
    #[serde(default)]
    ephemeral: ObjectOr<Present>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Claim {
    #[serde(default)]
    claim_name: Text,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Csi {
    #[serde(default)]
    driver: Text,
    #[serde(default)]
    volume_handle: Text,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LedgerStatus {
    #[serde(default, rename = "podIP")]
    pod_ip: Text,
    #[serde(default, rename = "podIPs")]
    pod_ips: ListOr<ObjectOr<PodIp>>,
    #[serde(default)]
    load_balancer: ObjectOr<LoadBalancer>,
}

#[derive(Deserialize, Default)]
struct PodIp {
    #[serde(default)]
    ip: Text,
}

#[derive(Deserialize, Default)]
struct LoadBalancer {
    #[serde(default)]
    ingress: ListOr<ObjectOr<Ingress>>,
}

#[derive(Deserialize, Default)]
struct Ingress {
    #[serde(default)]
    ip: Text,
    #[serde(default)]
    hostname: Text,
}

/// Reads the ledger of `oldObject` in an AdmissionReview body. Fields of an
/// unexpected shape are skipped; a body that does not parse yields an empty ledger.
pub fn read_ledger(body: &[u8]) -> Ledger {
    match serde_json::from_slice::<LedgerReview>(body) {
        Ok(review) => review.request.0.old_object.0.into(),
        Err(_) => Ledger::default(),
    }
}

/// Reads the ledger of an object read from the API server.
pub fn ledger_of(object: &serde_json::Value) -> Ledger {
    LedgerObject::deserialize(object).map_or_else(|_| Ledger::default(), Ledger::from)
}

impl From<LedgerObject> for Ledger {
    fn from(object: LedgerObject) -> Ledger {
        let (spec, status) = (object.spec.0, object.status.0);
        let mut ledger = Ledger {
            node: text(spec.node_name),
            ..Ledger::default()
        };
        ledger.pod_ips = status
            .pod_ips
            .0
            .into_iter()
            .filter_map(|p| text(p.0.ip))
            .collect();
        if ledger.pod_ips.is_empty() {
            ledger.pod_ips.extend(text(status.pod_ip));
        }
        for ObjectOr(volume) in spec.volumes.0 {
            let name = text(volume.name).unwrap_or_default();
            if let Some(claim) = text(volume.persistent_volume_claim.0.claim_name) {
                ledger.volumes.push(format!("{name} (pvc {claim})"));
            } else if let Some(driver) = text(volume.csi.0.driver) {
                ledger.volumes.push(format!("{name} (csi {driver})"));
            } else if volume.ephemeral.0.0 {
                ledger.volumes.push(format!("{name} (ephemeral pvc)"));
            }
        }
        for ObjectOr(ingress) in status.load_balancer.0.ingress.0 {
            ledger
                .load_balancer
                .extend(text(ingress.ip).into_iter().chain(text(ingress.hostname)));
        }
        ledger.csi_driver = text(spec.csi.0.driver);
        ledger.volume_handle = text(spec.csi.0.volume_handle);
        ledger.volume_name = text(spec.volume_name);
        if ledger.is_empty() {
            ledger.owners = object
                .metadata
                .0
                .owner_references
                .0
                .into_iter()
                .filter_map(|ObjectOr(o)| Some(format!("{}/{}", text(o.kind)?, text(o.name)?)))
                .collect();
        }
        ledger
    }
}

#[cfg(test)]
mod ledger_tests {
    use super::*;
    use serde_json::{Value, json};

    fn body(old: Value) -> Vec<u8> {
        crate::admission::ReviewBuilder::pod_update("alice")
            .old_object(Some(old))
            .to_vec()
    }

    #[test]
    fn a_pod_on_a_lost_node() {
        let l = read_ledger(&body(json!({
            "kind": "Pod",
            "metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}]},
            "spec": {"nodeName": "worker-3", "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                {"name": "cfg", "configMap": {"name": "web"}}
            ]},
            "status": {"podIP": "10.244.3.17", "podIPs": [{"ip": "10.244.3.17"}, {"ip": "fd00::17"}]}
        })));
        assert_eq!(l.node.as_deref(), Some("worker-3"));
        assert_eq!(l.pod_ips, ["10.244.3.17", "fd00::17"]);
        assert_eq!(
            l.volumes,
            [
                "data (pvc data-web-0)",
                "secrets (csi secrets-store.csi.k8s.io)",
                "scratch (ephemeral pvc)"
            ]
        );
        assert!(
            l.owners.is_empty(),
            "owners only when nothing more specific"
        );
        assert_eq!(
            l.summary(),
            "node worker-3; pod IPs 10.244.3.17 fd00::17; volumes data (pvc data-web-0), secrets (csi secrets-store.csi.k8s.io), scratch (ephemeral pvc)"
        );
    }

    #[test]
    fn a_service_a_pv_and_a_pvc() {
        let svc = read_ledger(&body(
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]}}}),
        ));
        assert_eq!(svc.load_balancer, ["203.0.113.7", "lb.example.com"]);
        let pv = read_ledger(&body(
            json!({"spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0abc"}}}),
        ));
        assert_eq!(
            pv.summary(),
            "CSI driver ebs.csi.aws.com; volume handle vol-0abc"
        );
        let pvc = read_ledger(&body(json!({"spec": {"volumeName": "pvc-1234"}})));
        assert_eq!(pvc.summary(), "volume pvc-1234");
    }

    #[test]
    fn otherwise_the_owners_and_never_a_failure() {
        let cr = read_ledger(&body(
            json!({"metadata": {"ownerReferences": [{"kind": "Cluster", "name": "prod"}]}, "spec": "opaque", "status": [1]}),
        ));
        assert_eq!(
            cr.owners,
            ["Cluster/prod"],
            "a spec of another shape is skipped, not an error"
        );
        let cr = read_ledger(&body(
            json!({"metadata": {"ownerReferences": [{"kind": "Cluster", "name": "prod"}]}, "spec": {"replicas": 3}}),
        ));
        assert_eq!(cr.owners, ["Cluster/prod"]);
        assert_eq!(read_ledger(b"not json"), Ledger::default());
        assert_eq!(
            read_ledger(&body(Value::Null)).summary(),
            "nothing recorded on the object"
        );
    }
}
