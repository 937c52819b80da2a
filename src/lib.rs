//! finalizer-guard: a validating admission webhook that guards `metadata.finalizers`.
//!
//! - [`policy`]: the pure decision core, `(change, policy) -> decision`.
//! - [`admission`]: the wire layer, AdmissionReview bytes in and out; the audit record's format, the override ledger.
//! - [`trail`]: what a review leaves behind: the audit log's writer, Events, recordings, metrics.
//! - [`pki`]: certificates and keys: the ones `certs` and `serve`'s dev mode make, the PEM pair `serve` serves and `check` seals with.
//! - [`server`]: TLS, routes, hot reload, graceful drain, self-managed certificates.
//! - [`offline`]: the commands that need no cluster: `check`, `test`, `certs`, `policy validate`, `policy suggest`, `policy export` (`--vap`, `--static`), offline `doctor`.
//! - [`cluster`]: `unstick`, `approve`, `watch` and `doctor --cluster`, which talk to a cluster.
//! - [`cli`]: every command's flags.
//! - [`error`]: the one error type, with its exit code.
//! - [`output`]: one `-o text|json` vocabulary and printer for every command's report.
//! - [`files`]: reading the files the offline commands are given: regular files only, bounded, no folder twice.
//! - [`flags`]: flags more than one command takes (`--policy`, durations).
//! - [`queue`]: the bounded queue of the background writers.
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
pub mod pki;
pub mod policy;
pub mod queue;
pub mod server;
pub mod trail;
pub mod version;
pub mod yaml;
