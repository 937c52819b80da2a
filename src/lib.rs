//! finalizer-guard: a validating admission webhook that guards `metadata.finalizers`.
#![forbid(unsafe_code)]

pub mod admission;
pub mod policy;
