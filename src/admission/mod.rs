//! The wire layer: AdmissionReview bytes in, AdmissionReview bytes out.
//!
//! [`review`] is the one function the server, `check` and the tests call, so
//! an offline replay is exactly what the server would answer. It runs in
//! named steps: [`parse`] the body into a request that borrows from it
//! ([`request`]: the one reading of a body, and its rules), read the
//! [`change`], let the policy core decide, [`respond`] (JSON written
//! straight into one buffer), and render the audit record
//! ([`crate::admission::audit::AuditEntry`]). Where a whole request is wanted, a
//! recording, [`parse_owned`] copies the same reading into kube-core's owned
//! admission types ([`lean`]); the reason a body is refused is found by the
//! same reading, tracking the path.
//!
//! The files, bottom to top (each imports only those below it): [`cut`]
//! (how much of a request's string is kept), `json`, [`ledger`],
//! [`request`], [`lean`], [`audit`] (the record's format), `builder`,
//! `review`. What writes the audit record out is above, in
//! `trail::audit_log`.

pub mod audit;
mod builder;
pub mod cut;
pub(crate) mod json;
pub mod lean;
pub mod ledger;
pub mod request;
mod review;

pub use builder::{ReviewBuilder, UID};
pub use lean::LeanObject;
pub use request::{Object, Request};
pub use review::*;
