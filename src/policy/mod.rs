//! The policy core: `(change, policy) -> decision`.
//!
//! Pure and synchronous: no I/O, no clock, no JSON or Kubernetes types. The
//! wire layer ([`crate::admission`]) turns an AdmissionReview into a [`Change`];
//! everything about *whether* a removal is allowed, and *why*, lives here.

pub mod approval;
pub mod builtin;
pub mod config;
mod decide;
pub mod kinds;
mod lint;
mod load;
pub mod message;
mod model;
pub mod overrides;
pub mod presets;
pub mod seal;

pub use config::{Accepts, Approval, InvalidPolicy, Mode, Policy, PolicyError};
pub use decide::{decide, rules_for};
pub use lint::PolicyWarning;
pub use load::{LoadError, from_bytes, load};
pub use model::*;
pub use overrides::{Override, OverrideProblem, Refusal};
