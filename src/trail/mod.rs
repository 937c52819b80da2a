//! What a review leaves behind: its audit record written out
//! ([`audit_log`]), Kubernetes Events ([`events`]), recorded AdmissionReviews
//! ([`recording`]) and the Prometheus metrics ([`metrics`]).

pub mod audit_log;
pub mod events;
pub mod metrics;
pub mod recording;
