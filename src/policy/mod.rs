//! The policy core: `(change, policy) -> decision`.
//!
//! Pure and synchronous: no I/O, no clock, no JSON or Kubernetes types. The
//! wire layer ([`crate::admission`]) turns an AdmissionReview into a [`Change`];
//! everything about *whether* a removal is allowed, and *why*, lives here.
//!
//! The files, bottom to top (each imports only those below it):
//! `field`, `text`, `kinds`, `builtin`, `breadth` (identities too broad to
//! trust); `config` (the validated policy) and
//! `invalid` (why one is refused); `presets`; `schema` (the file, checked);
//! `load` (text to policy, presets expanded); `seal`; `change`; `overrides`;
//! `approval`; `decision`; `message`; `decide`; `lint`; `servable`.

pub mod approval;
pub mod breadth;
pub mod builtin;
mod change;
pub mod config;
mod decide;
mod decision;
mod field;
mod invalid;
pub mod kinds;
mod lint;
mod load;
pub mod message;
pub mod overrides;
pub mod presets;
mod schema;
pub mod seal;
pub mod servable;
pub mod text;

pub use change::*;
pub use config::{Accepts, Approval, Mode, Policy};
pub use decide::{decide, rules_for};
pub use decision::*;
pub use field::FinalizerField;
pub use invalid::{InvalidPolicy, PolicyError};
pub use lint::PolicyWarning;
pub use load::{LoadError, from_bytes, load};
pub use overrides::{Override, OverrideProblem, Refusal};
pub(crate) use schema::is_dns_label;
