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
//!
//! A ledger is bounded whatever the object holds, as the rest of the audit
//! record is: each list keeps its first [`MAX_LEDGER_ENTRIES`] entries and
//! counts the others (`podIpsOmitted`, `volumesOmitted`, ...), and each
//! string taken from the object is cut as the record cuts every string
//! from the request ([`crate::admission::cut::cut`], 512 characters).

use serde::{Deserialize, Serialize};

use crate::admission::cut::cut;

/// How many entries of each list (pod IPs, volumes, load-balancer entries,
/// owners) a ledger keeps: the first; the others are counted in the list's
/// `...Omitted`.
pub const MAX_LEDGER_ENTRIES: usize = 16;

/// What the removed finalizers were protecting. Empty fields are omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ledger {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
    /// Pod IPs past the first [`MAX_LEDGER_ENTRIES`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub pod_ips_omitted: usize,
    /// `NAME (pvc CLAIM)`, `NAME (csi DRIVER)`, ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Volumes past the first [`MAX_LEDGER_ENTRIES`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub volumes_omitted: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load_balancer: Vec<String>,
    /// Load-balancer entries past the first [`MAX_LEDGER_ENTRIES`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub load_balancer_omitted: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csi_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_handle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// `KIND/NAME`, when nothing more specific was found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// Owners past the first [`MAX_LEDGER_ENTRIES`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub owners_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A string taken from the object, as a ledger keeps it.
pub(crate) fn kept(s: &str) -> String {
    cut(s).into_owned()
}

/// Adds an entry to one of a ledger's lists, unless the list is full:
/// then only counts it. `entry` is made only when kept; its parts taken
/// from the object are cut ([`kept`]).
pub(crate) fn push(list: &mut Vec<String>, omitted: &mut usize, entry: impl FnOnce() -> String) {
    if list.len() < MAX_LEDGER_ENTRIES {
        list.push(entry());
    } else {
        *omitted += 1;
    }
}

/// `items` joined by `sep`, and `and N more` when some were not listed.
fn listing(items: &[String], sep: &str, omitted: usize) -> String {
    let mut out = items.join(sep);
    if omitted > 0 {
        out.push_str(&format!(" and {omitted} more"));
    }
    out
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
            parts.push(format!(
                "pod IPs {}",
                listing(&self.pod_ips, " ", self.pod_ips_omitted)
            ));
        }
        if !self.volumes.is_empty() {
            parts.push(format!(
                "volumes {}",
                listing(&self.volumes, ", ", self.volumes_omitted)
            ));
        }
        if !self.load_balancer.is_empty() {
            parts.push(format!(
                "load balancer {}",
                listing(&self.load_balancer, " ", self.load_balancer_omitted)
            ));
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
            parts.push(format!(
                "owners {}",
                listing(&self.owners, ", ", self.owners_omitted)
            ));
        }
        if parts.is_empty() {
            "nothing recorded on the object".into()
        } else {
            parts.join("; ")
        }
    }
}
