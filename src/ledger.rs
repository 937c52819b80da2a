//! The leak ledger: what an overridden finalizer was protecting.
//!
//! When an override strips a finalizer, the clean-up its controller would have
//! done is now someone's job. The ledger reads, from the object as it was
//! (`oldObject`), what that clean-up concerns — a pod's node, IPs and volumes,
//! a Service's load-balancer ingress, a PersistentVolume's CSI driver and
//! volume handle, a claim's volume, otherwise the owners — so it lands in the
//! audit record, the audit annotations and an Event. Read only on overrides:
//! the hot path never parses `spec` or `status`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the removed finalizers were protecting. Empty fields are omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
    /// `NAME (pvc CLAIM)`, `NAME (csi DRIVER)`, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load_balancer: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csi_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_handle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// `KIND/NAME`, when nothing more specific was found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
}

impl Ledger {
    pub fn is_empty(&self) -> bool {
        *self == Ledger::default()
    }

    /// One line, for an audit annotation or an Event.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(node) = &self.node {
            parts.push(format!("node {node}"));
        }
        if !self.pod_ips.is_empty() {
            parts.push(format!("pod IPs {}", self.pod_ips.join(" ")));
        }
        if !self.volumes.is_empty() {
            parts.push(format!("volumes {}", self.volumes.join(", ")));
        }
        if !self.load_balancer.is_empty() {
            parts.push(format!("load balancer {}", self.load_balancer.join(" ")));
        }
        if let Some(driver) = &self.csi_driver {
            parts.push(format!("CSI driver {driver}"));
        }
        if let Some(handle) = &self.volume_handle {
            parts.push(format!("volume handle {handle}"));
        }
        if let Some(volume) = &self.volume_name {
            parts.push(format!("volume {volume}"));
        }
        if !self.owners.is_empty() {
            parts.push(format!("owners {}", self.owners.join(", ")));
        }
        if parts.is_empty() {
            "nothing recorded on the object".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Reads the ledger of `oldObject` in an AdmissionReview body. Fields of an
/// unexpected shape are skipped; a body that is not JSON yields an empty ledger.
pub fn read(body: &[u8]) -> Ledger {
    #[derive(Deserialize)]
    struct Review {
        request: Request,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Request {
        #[serde(default)]
        old_object: Value,
    }
    let object = match serde_json::from_slice::<Review>(body) {
        Ok(review) => review.request.old_object,
        Err(_) => return Ledger::default(),
    };
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(String::from);
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let (spec, status) = (&object["spec"], &object["status"]);

    let mut ledger = Ledger {
        node: text(&spec["nodeName"]),
        ..Ledger::default()
    };
    ledger.pod_ips = list(&status["podIPs"])
        .iter()
        .filter_map(|p| text(&p["ip"]))
        .collect();
    if ledger.pod_ips.is_empty() {
        ledger.pod_ips.extend(text(&status["podIP"]));
    }
    for volume in list(&spec["volumes"]) {
        let name = text(&volume["name"]).unwrap_or_default();
        if let Some(claim) = text(&volume["persistentVolumeClaim"]["claimName"]) {
            ledger.volumes.push(format!("{name} (pvc {claim})"));
        } else if let Some(driver) = text(&volume["csi"]["driver"]) {
            ledger.volumes.push(format!("{name} (csi {driver})"));
        } else if volume["ephemeral"].is_object() {
            ledger.volumes.push(format!("{name} (ephemeral pvc)"));
        }
    }
    for ingress in list(&status["loadBalancer"]["ingress"]) {
        ledger.load_balancer.extend(
            text(&ingress["ip"])
                .into_iter()
                .chain(text(&ingress["hostname"])),
        );
    }
    ledger.csi_driver = text(&spec["csi"]["driver"]);
    ledger.volume_handle = text(&spec["csi"]["volumeHandle"]);
    ledger.volume_name = text(&spec["volumeName"]);
    if ledger.is_empty() {
        ledger.owners = list(&object["metadata"]["ownerReferences"])
            .iter()
            .filter_map(|o| Some(format!("{}/{}", text(&o["kind"])?, text(&o["name"])?)))
            .collect();
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(old: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"request": {"oldObject": old}})).unwrap()
    }

    #[test]
    fn a_pod_on_a_lost_node() {
        let l = read(&body(json!({
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
        let svc = read(&body(
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]}}}),
        ));
        assert_eq!(svc.load_balancer, ["203.0.113.7", "lb.example.com"]);
        let pv = read(&body(
            json!({"spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0abc"}}}),
        ));
        assert_eq!(
            pv.summary(),
            "CSI driver ebs.csi.aws.com; volume handle vol-0abc"
        );
        let pvc = read(&body(json!({"spec": {"volumeName": "pvc-1234"}})));
        assert_eq!(pvc.summary(), "volume pvc-1234");
    }

    #[test]
    fn otherwise_the_owners_and_never_a_failure() {
        let cr = read(&body(
            json!({"metadata": {"ownerReferences": [{"kind": "Cluster", "name": "prod"}]}, "spec": "opaque", "status": [1]}),
        ));
        assert_eq!(
            cr.owners,
            ["Cluster/prod"],
            "a spec of another shape is skipped, not an error"
        );
        let cr = read(&body(
            json!({"metadata": {"ownerReferences": [{"kind": "Cluster", "name": "prod"}]}, "spec": {"replicas": 3}}),
        ));
        assert_eq!(cr.owners, ["Cluster/prod"]);
        assert_eq!(read(b"not json"), Ledger::default());
        assert_eq!(
            read(&body(Value::Null)).summary(),
            "nothing recorded on the object"
        );
    }
}
