//! The command line's flags: `serve`, `certs`, `check`, `test`, `policy`,
//! `doctor`, `version`, and the commands that talk to a cluster, `unstick`,
//! `approve` and `watch` ([`crate::cluster`]). Each command's body lives in
//! its layer ([`crate::offline`], [`crate::cluster`], [`crate::server`]);
//! main.rs runs them.
//!
//! Each command's arguments are destructured exhaustively where they become
//! its settings, so a new flag cannot be silently ignored.

mod cluster;
mod command;
mod offline;
mod policy;
mod serve;

pub use cluster::{ApproveArgs, UnstickArgs, WatchArgs, WriteFlags};
pub use command::{Cli, Command, VersionArgs};
pub use offline::{CertsArgs, CheckArgs, DoctorArgs};
pub use policy::{ExportArgs, PolicyCommand, PresetsArgs, SuggestArgs, TestArgs, ValidateArgs};
pub use serve::{LogFormat, SelfManagedFlags, ServeArgs};
