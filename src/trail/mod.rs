//! What a review leaves behind: Kubernetes Events ([`events`]), recorded
//! AdmissionReviews ([`recording`]) and the Prometheus metrics ([`metrics`]).

pub mod audit_log;
pub mod events;
pub mod metrics;
pub mod recording;
