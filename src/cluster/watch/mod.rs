//! `finalizer-guard watch`: the live signal of objects stuck on finalizers.
//!
//! One metadata-only watch per type the API server serves (kube-runtime's
//! watcher over `PartialObjectMetadata`: a paginated first list, then a
//! watch resumed from its resourceVersion, with bookmarks and backoff; a
//! list again only when the API server says that resourceVersion is too
//! old). Discovery runs again every `--discovery-interval`, and at once when
//! a CustomResourceDefinition or an APIService changes, so a new type is
//! watched without a restart. Namespaces are watched whole (they are few):
//! what holds a namespace is its `spec.finalizers`.
//!
//! Only objects being deleted that still hold finalizers are kept, a few
//! strings each: memory grows with what is stuck, not with the cluster.
//! One deleting for longer than `--stuck-after` is counted in
//! `finalizer_guard_stuck_objects{finalizer,resource}` (computed at each
//! scrape) and gets a `FinalizerStuck` Event saying what `unstick` explains
//! (the same code, `super::explain`) and the exact command to run.

mod announce;
mod discovery;
#[cfg(test)]
mod fixtures;
mod metrics;
mod run;
mod tracker;

pub use announce::{REASON, REPORTING_CONTROLLER};
pub use run::*;
pub use tracker::OTHER;
