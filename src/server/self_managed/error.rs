//! Why the Secret or the webhook configuration could not be kept current.

use crate::error::TlsError;

/// Why the Secret or the webhook configuration could not be kept current.
#[derive(Debug, thiserror::Error)]
pub enum CertificatesError {
    #[error(
        "forbidden: the webhook's ServiceAccount may not {verb} {object} (grant it: docs/install.md, \"Self-managed certificates\"): {message}"
    )]
    Forbidden {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("cannot {verb} {object}: {source}")]
    Api {
        verb: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("validatingwebhookconfiguration {config} has no webhook named {}", names.join(", "))]
    NoWebhook { config: String, names: Vec<String> },
    #[error("no {0} yet: its caBundle is written once it exists")]
    NoConfiguration(String),
    #[error("no Kubernetes API configuration: {0}")]
    Client(String),
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the Secret's serving certificate cannot be served: {0}")]
    Tls(#[from] TlsError),
    /// Lifetimes and margins that would make rotations run into each other.
    #[error("{0}")]
    Timing(String),
    #[error("{0}")]
    Other(String),
}

/// A result whose error is a [`CertificatesError`].
pub type CertificatesResult<T, E = CertificatesError> = std::result::Result<T, E>;
