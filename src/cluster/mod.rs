//! The commands that talk to a cluster: `unstick`, `approve`, `doctor --cluster`
//! and `watch`.
//!
//! They read kubeconfig as kubectl does, select objects as kubectl does
//! (`TYPE/NAME`, `-n`, `-A`, `-l`, `--node`) and write only through the API
//! server, so every write meets the webhook. "May this finalizer go, and
//! how?" is answered by [`crate::policy::decide`], the webhook's own core.

pub mod approve;
pub mod doctor;
mod engine;
mod explain;
mod install;
mod liveness;
mod object;
mod owner;
mod patch;
mod read;
mod release;
mod report;
mod select;
mod session;
pub mod unstick;
pub mod watch;

pub use engine::{Engine, OverrideValue, Targets};
pub use install::{PolicySource, cluster_policy, webhook_installed};
pub use select::{FoundObject, Selection};
pub use session::*;
