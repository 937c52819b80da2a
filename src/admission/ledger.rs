//! The leak ledger: what an overridden finalizer was protecting.
//!
//! When an override strips a finalizer, the clean-up its controller would have
//! done is now someone's job. The ledger reads, from the object as it was
//! (`oldObject`), what that clean-up concerns — a pod's node, IPs and volumes,
//! a Service's load-balancer ingress, a PersistentVolume's CSI driver and
//! volume handle, a claim's volume, otherwise the owners — so it lands in the
//! audit record, the audit annotations and an Event. Read only on overrides
//! (by the wire layer's lean parse, `admission/lean.rs`): the hot path never parses
//! `spec` or `status`.

use serde::{Deserialize, Serialize};

/// What the removed finalizers were protecting. Empty fields are omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
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
