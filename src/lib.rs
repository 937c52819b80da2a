//! finalizer-guard: a validating admission webhook that guards `metadata.finalizers`.
//!
//! - [`policy`]: the pure decision core, `(change, policy) -> decision`.
//! - [`admission`]: the wire layer, AdmissionReview bytes in and out.
//! - [`server`]: TLS, routes, hot reload, graceful drain.
//! - [`cli`]: `serve`, `certs`, `check`, `test`, `policy validate`, `policy suggest`, `doctor`.
//! - [`cluster`]: `unstick`, `approve` and `doctor --cluster`, which talk to a cluster.
//! - `suggest`: rules from warn mode's `would-deny` evidence and enforce's denials.
//! - [`output`]: one `-o text|json` vocabulary and printer for every command's report.
//! - [`files`]: reading the files the offline commands are given: regular files only, bounded, no folder twice.
//! - [`flags`]: flags more than one command takes (`--policy`, durations).
//! - `vap`: the policy as a ValidatingAdmissionPolicy (`policy export --vap`).
//! - [`version`]: `version` and `--version`: commit, target, build date.
//! - [`yaml`]: reading YAML from outside: what its aliases expand to bounded before it is built.
#![forbid(unsafe_code)]

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod error;
pub mod files;
pub mod flags;
pub mod offline;
pub mod output;
pub mod policy;
pub mod queue;
pub mod server;
pub mod trail;
pub mod version;
pub mod yaml;
