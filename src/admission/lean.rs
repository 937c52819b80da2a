//! The owned view: the request as kube-core's types hold it, for a
//! recording; and the leak ledger.
//!
//! `owned` copies what the one reading ([`super::request`]) read, so a
//! finalizer list, `spec.finalizers`, an annotation or a uid reads here as a
//! review reads it, and a body is refused here as it is there. What a
//! recording keeps beyond what a decision reads (the object's name, labels
//! and resourceVersion, the request's `requestKind` and `options`, ...) is
//! read beside it by the lenient rules: a field of another shape is absent,
//! never a failure. Off the review's path.
//!
//! `LedgerObject` reads the few fields of `oldObject` the leak ledger
//! reports, by the same lenient rules; it is parsed only for an override,
//! never on the common path.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_core::admission::AdmissionRequest;
use kube_core::{DynamicResourceScope, GroupVersionKind, GroupVersionResource, Resource, TypeMeta};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::request::{
    IfList, IfObject, IfString, LedgerParts, Object, Request, StringMap, deletion_timestamps,
    from_body,
};
use crate::admission::cut::cut;
use crate::admission::ledger::{Ledger, kept, push};

/// An object as the webhook reads it: the metadata a decision needs and what
/// identifies the object, and `spec.finalizers` (a Namespace's). Everything
/// else is skipped unparsed.
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

/// The request `parse` read from `body` (answered in `api_version`), owned,
/// with what a recording keeps beyond it read from the same body. Where the
/// lenient rules cannot read the body at all (a key sent twice, a label that
/// is not UTF-8), the recording keeps only what a decision reads.
pub(super) fn owned(
    api_version: &str,
    request: &Request<'_>,
    body: &[u8],
) -> AdmissionRequest<LeanObject> {
    let details = from_body::<Details<'_>>(body)
        .map(|d| d.request.or_default())
        .unwrap_or_default();
    let [new_deletion, old_deletion] = deletion_timestamps(body);
    let user = details.user_info.or_default();
    let (kind, resource) = (&request.kind, &request.resource);
    AdmissionRequest {
        types: TypeMeta {
            api_version: api_version.into(),
            kind: "AdmissionReview".into(),
        },
        uid: request.uid.to_string(),
        kind: GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
        resource: GroupVersionResource::gvr(&resource.group, &resource.version, &resource.resource),
        sub_resource: request.sub_resource.as_ref().map(|s| s.0.to_string()),
        request_kind: kube(details.request_kind),
        request_resource: kube(details.request_resource).map(|r: GroupVersionResource| {
            GroupVersionResource::gvr(&r.group, &r.version, &r.resource)
        }),
        request_sub_resource: details.request_sub_resource.0.map(Cow::into_owned),
        name: request.name.to_string(),
        namespace: request.namespace.as_ref().map(|s| s.0.to_string()),
        operation: request.operation.clone(),
        user_info: UserInfo {
            username: request.user_info.username.as_ref().map(|s| s.0.to_string()),
            uid: user.uid.0.map(Cow::into_owned),
            groups: list(&request.user_info.groups),
            // Values can carry a token's claims: only the keys are read.
            extra: user
                .extra
                .0
                .map(|extra| extra.into_keys().map(|key| (key, Vec::new())).collect()),
        },
        object: request
            .object
            .as_ref()
            .map(|o| LeanObject::new(o, details.object.or_default(), new_deletion)),
        old_object: request
            .old_object
            .as_ref()
            .map(|o| LeanObject::new(o, details.old_object.or_default(), old_deletion)),
        dry_run: request.dry_run,
        options: kube(details.options),
    }
}

impl LeanObject {
    /// `object` as the one reading read it, with what identifies it and
    /// since when it is being deleted.
    fn new(
        object: &Object<'_>,
        identity: ObjectIdentity<'_>,
        deletion: Option<jiff::Timestamp>,
    ) -> LeanObject {
        let meta = identity.metadata.or_default();
        // The review's reading says whether it is being deleted; the other, since when.
        let deletion_timestamp = deletion.filter(|_| object.deleting);
        let annotations = object.annotations_where(|_| true);
        LeanObject {
            api_version: identity.api_version.0.map(Cow::into_owned),
            kind: identity.kind.0.map(Cow::into_owned),
            metadata: ObjectMeta {
                name: meta.name.0.map(Cow::into_owned),
                generate_name: meta.generate_name.0.map(Cow::into_owned),
                namespace: meta.namespace.0.map(Cow::into_owned),
                uid: object.uid.as_deref().map(String::from),
                resource_version: meta.resource_version.0.map(Cow::into_owned),
                deletion_timestamp: deletion_timestamp.map(Time),
                labels: meta.labels.0.map(|l| l.0),
                finalizers: list(&object.finalizers),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..ObjectMeta::default()
            },
            spec_finalizers: object
                .spec_finalizers
                .iter()
                .map(|s| s.to_string())
                .collect(),
            spec_finalizers_malformed: object.spec_finalizers_malformed,
        }
    }
}

/// A list of names, owned; `None` where it is empty.
fn list(names: &[Cow<'_, str>]) -> Option<Vec<String>> {
    (!names.is_empty()).then(|| names.iter().map(|s| s.to_string()).collect())
}

/// A field as kube-core's type reads it; absent where it does not.
fn kube<T: DeserializeOwned>(raw: Option<&RawValue>) -> Option<T> {
    serde_json::from_str(raw?.get()).ok()
}

/// What a recording keeps that no decision reads: `request`'s.
#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct Details<'a> {
    request: IfObject<RequestDetails<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct RequestDetails<'a> {
    request_kind: Option<&'a RawValue>,
    request_resource: Option<&'a RawValue>,
    request_sub_resource: IfString<'a>,
    user_info: IfObject<UserDetails<'a>>,
    object: IfObject<ObjectIdentity<'a>>,
    old_object: IfObject<ObjectIdentity<'a>>,
    options: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct UserDetails<'a> {
    uid: IfString<'a>,
    extra: IfObject<BTreeMap<String, IgnoredAny>>,
}

/// What identifies an object, beyond its uid.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct ObjectIdentity<'a> {
    api_version: IfString<'a>,
    kind: IfString<'a>,
    metadata: IfObject<ObjectIdentityMeta<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct ObjectIdentityMeta<'a> {
    name: IfString<'a>,
    generate_name: IfString<'a>,
    namespace: IfString<'a>,
    resource_version: IfString<'a>,
    labels: IfObject<StringMap>,
}

/// The fields of an object the leak ledger reports. A string field that is
/// absent, empty or of another shape is nothing.
#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
pub(crate) struct LedgerObject<'a> {
    metadata: IfObject<LedgerMeta<'a>>,
    spec: IfObject<LedgerSpec<'a>>,
    status: IfObject<LedgerStatus<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct LedgerMeta<'a> {
    owner_references: IfList<IfObject<OwnerReference<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct OwnerReference<'a> {
    kind: IfString<'a>,
    name: IfString<'a>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct LedgerSpec<'a> {
    node_name: IfString<'a>,
    volumes: IfList<IfObject<Volume<'a>>>,
    csi: IfObject<Csi<'a>>,
    volume_name: IfString<'a>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct Volume<'a> {
    name: IfString<'a>,
    persistent_volume_claim: IfObject<Claim<'a>>,
    csi: IfObject<Csi<'a>>,
    ephemeral: IfObject<IgnoredAny>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct Claim<'a> {
    claim_name: IfString<'a>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct Csi<'a> {
    driver: IfString<'a>,
    volume_handle: IfString<'a>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default, bound = "'de: 'a")]
struct LedgerStatus<'a> {
    #[serde(rename = "podIP")]
    pod_ip: IfString<'a>,
    #[serde(rename = "podIPs")]
    pod_ips: IfList<IfObject<PodIp<'a>>>,
    load_balancer: IfObject<LoadBalancer<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct PodIp<'a> {
    ip: IfString<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct LoadBalancer<'a> {
    ingress: IfList<IfObject<Ingress<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(default, bound = "'de: 'a")]
struct Ingress<'a> {
    ip: IfString<'a>,
    hostname: IfString<'a>,
}

/// The ledger of an object from the parts the review kept of it, as sent
/// ([`LedgerParts`]): only those are read again, not the body. A part of
/// an unexpected shape reads as nothing.
pub fn ledger_of_parts(parts: &LedgerParts<'_>) -> Ledger {
    fn read<'a, T: Deserialize<'a> + Default>(raw: Option<&'a RawValue>) -> T {
        raw.and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or_default()
    }
    let spec = LedgerSpec {
        node_name: read(parts.spec.node_name),
        volumes: read(parts.spec.volumes),
        csi: read(parts.spec.csi),
        volume_name: read(parts.spec.volume_name),
    };
    LedgerObject {
        metadata: IfObject(Some(LedgerMeta {
            owner_references: read(parts.owner_references),
        })),
        spec: IfObject(Some(spec)),
        status: read(parts.status),
    }
    .into()
}

/// Reads the ledger of an object read from the API server.
pub fn ledger_of(object: &serde_json::Value) -> Ledger {
    LedgerObject::deserialize(object).map_or_else(|_| Ledger::default(), Ledger::from)
}

impl From<LedgerObject<'_>> for Ledger {
    /// The ledger, bounded ([`crate::admission::ledger`]): each list its
    /// first entries, the others counted; each string cut.
    fn from(object: LedgerObject<'_>) -> Ledger {
        let (spec, status) = (object.spec.or_default(), object.status.or_default());
        let mut ledger = Ledger {
            node: spec.node_name.text().map(kept),
            ..Ledger::default()
        };
        for ip in status.pod_ips.0 {
            if let Some(ip) = ip.or_default().ip.text() {
                push(&mut ledger.pod_ips, &mut ledger.pod_ips_omitted, || {
                    kept(ip)
                });
            }
        }
        if ledger.pod_ips.is_empty() {
            ledger.pod_ips.extend(status.pod_ip.text().map(kept));
        }
        for volume in spec.volumes.0 {
            let volume = volume.or_default();
            let claim = volume.persistent_volume_claim.or_default().claim_name;
            let driver = volume.csi.or_default().driver;
            let what = match (claim.text(), driver.text()) {
                (Some(claim), _) => Some(("pvc ", claim)),
                (None, Some(driver)) => Some(("csi ", driver)),
                (None, None) if volume.ephemeral.0.is_some() => Some(("ephemeral pvc", "")),
                (None, None) => None,
            };
            if let Some((what, detail)) = what {
                let name = volume.name.text().unwrap_or_default();
                push(&mut ledger.volumes, &mut ledger.volumes_omitted, || {
                    format!("{} ({what}{})", cut(name), cut(detail))
                });
            }
        }
        for ingress in status.load_balancer.or_default().ingress.0 {
            let ingress = ingress.or_default();
            for entry in [ingress.ip.text(), ingress.hostname.text()]
                .into_iter()
                .flatten()
            {
                push(
                    &mut ledger.load_balancer,
                    &mut ledger.load_balancer_omitted,
                    || kept(entry),
                );
            }
        }
        let csi = spec.csi.or_default();
        ledger.csi_driver = csi.driver.text().map(kept);
        ledger.volume_handle = csi.volume_handle.text().map(kept);
        ledger.volume_name = spec.volume_name.text().map(kept);
        if ledger.is_empty() {
            for owner in object.metadata.or_default().owner_references.0 {
                let owner = owner.or_default();
                if let (Some(kind), Some(name)) = (owner.kind.text(), owner.name.text()) {
                    push(&mut ledger.owners, &mut ledger.owners_omitted, || {
                        format!("{}/{}", cut(kind), cut(name))
                    });
                }
            }
        }
        ledger
    }
}

#[cfg(test)]
mod ledger_tests {
    use super::*;
    use serde_json::{Value, json};

    fn body(old: Value) -> Vec<u8> {
        crate::admission::builder::ReviewBuilder::pod_update("alice")
            .old_object(Some(old))
            .to_vec()
    }

    /// The ledger of `oldObject`, as a review reads it for an override.
    fn read_ledger(body: &[u8]) -> Ledger {
        match crate::admission::review::parse(body) {
            Ok((_, request)) => request
                .old_object
                .map(|old| ledger_of_parts(&old.ledger))
                .unwrap_or_default(),
            Err(_) => Ledger::default(),
        }
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
    fn a_ledger_is_bounded_whatever_the_object_holds() {
        use crate::admission::ledger::MAX_LEDGER_ENTRIES;
        let long = "v".repeat(1000);
        let volumes: Vec<Value> = (0..100)
            .map(|i| json!({"name": long, "persistentVolumeClaim": {"claimName": format!("c{i}")}}))
            .collect();
        let ips: Vec<Value> = (0..40)
            .map(|i| json!({"ip": format!("10.0.0.{i}")}))
            .collect();
        let ingress: Vec<Value> = (0..30)
            .map(|i| json!({"ip": format!("203.0.113.{i}"), "hostname": long}))
            .collect();
        let l = read_ledger(&body(json!({
            "spec": {"nodeName": "n".repeat(100_000), "volumes": volumes,
                     "csi": {"driver": long, "volumeHandle": long}, "volumeName": long},
            "status": {"podIPs": ips, "loadBalancer": {"ingress": ingress}}
        })));
        assert_eq!(l.node.as_ref().unwrap().chars().count(), 512);
        assert_eq!(
            (l.pod_ips.len(), l.pod_ips_omitted),
            (MAX_LEDGER_ENTRIES, 24)
        );
        assert_eq!(
            (l.volumes.len(), l.volumes_omitted),
            (MAX_LEDGER_ENTRIES, 84)
        );
        assert_eq!(
            l.volumes[0],
            format!("{}... (pvc c0)", "v".repeat(509)),
            "the name cut, what it is kept"
        );
        assert_eq!(
            (l.load_balancer.len(), l.load_balancer_omitted),
            (MAX_LEDGER_ENTRIES, 44)
        );
        for s in [&l.csi_driver, &l.volume_handle, &l.volume_name] {
            assert_eq!(s.as_ref().unwrap().chars().count(), 512);
        }
        let summary = l.summary();
        assert!(summary.contains("10.0.0.15 and 24 more"), "{summary}");
        assert!(summary.contains("(pvc c15) and 84 more"), "{summary}");
        assert!(summary.len() < 64 * 1024, "{}", summary.len());
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.contains("\"volumesOmitted\":84"), "{json}");
        assert!(json.len() < 64 * 1024, "{}", json.len());

        let owners: Vec<Value> = (0..5000)
            .map(|i| json!({"kind": long, "name": format!("o{i}")}))
            .collect();
        let cr = read_ledger(&body(json!({"metadata": {"ownerReferences": owners}})));
        assert_eq!(
            (cr.owners.len(), cr.owners_omitted),
            (MAX_LEDGER_ENTRIES, 4984)
        );
        assert_eq!(cr.owners[0], format!("{}.../o0", "v".repeat(509)));
        assert!(cr.summary().ends_with("/o15 and 4984 more"));
    }

    #[test]
    fn a_spec_field_sent_twice_reads_as_the_last_and_a_status_twice_is_refused() {
        let one = String::from_utf8(body(json!({"spec": {"nodeName": "worker-3"}}))).unwrap();
        let twice = one.replacen(
            r#""nodeName":"worker-3""#,
            r#""nodeName":"worker-1","nodeName":"worker-3""#,
            1,
        );
        assert_ne!(one, twice);
        assert_eq!(
            read_ledger(twice.as_bytes()).node.as_deref(),
            Some("worker-3")
        );
        let one = String::from_utf8(body(json!({"status": {"podIP": "10.0.0.1"}}))).unwrap();
        let twice = one.replacen(
            r#""status":{"podIP":"10.0.0.1"}"#,
            r#""status":{},"status":{"podIP":"10.0.0.1"}"#,
            1,
        );
        assert_ne!(one, twice);
        let refused = crate::admission::review::parse(twice.as_bytes())
            .err()
            .expect("refused");
        assert!(
            refused.to_string().contains("duplicate field `status`"),
            "{refused}"
        );
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

#[cfg(test)]
mod owned_tests {
    use crate::admission::builder::ReviewBuilder;
    use crate::admission::review::{parse, parse_owned};
    use serde_json::json;

    #[test]
    fn details_of_another_shape_never_lose_what_decides() {
        let body = ReviewBuilder::pod_update("alice")
            .finalizers(json!(["example.com/a"]), json!(null))
            .to_vec();
        // In oldObject: a label that is not UTF-8 and a name sent twice.
        // The review skips both; the details cannot be read.
        let at = b"\"oldObject\":{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{";
        let i = body.windows(at.len()).position(|w| w == at).unwrap() + at.len();
        let odd = b"\"labels\":{\"app\":\"\xff\"},\"name\":\"twice\",";
        let body = [&body[..i], odd, &body[i..]].concat();
        let (_, request) = parse(&body).expect("the review reads it");
        assert!(request.old_object.as_ref().unwrap().deleting);
        let owned = parse_owned(&body).expect("and so does the owned request");
        let old = owned.old_object.unwrap().metadata;
        assert_eq!(old.finalizers, Some(vec!["example.com/a".to_string()]));
        assert_eq!(
            old.deletion_timestamp.map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-21T07:00:00Z"),
            "still being deleted, since when the review read"
        );
        assert_eq!(
            old.uid.as_deref(),
            Some("6f0ad0c1-5d0c-4bd3-9a35-0c6a2b1d7e11")
        );
        assert_eq!((old.name, old.labels), (None, None), "the details are lost");
    }
}
