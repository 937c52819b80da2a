//! The one error type of the binary's commands, and its exit code: 1 when
//! the server could not start or stopped on an error, 2 otherwise (a usage
//! error, a file that could not be read, a cluster that could not be reached).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::policy::LoadError;
use crate::policy::servable::Blocked;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("policy {path}: {source}")]
    Policy {
        path: PathBuf,
        #[source]
        source: LoadError,
    },
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--max-inflight-body-bytes ({inflight}) is less than --max-body-bytes ({max_body}): the largest accepted body could never be read"
    )]
    BodyBudget { inflight: usize, max_body: usize },
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("certificate generation: {0}")]
    Certificate(#[from] rcgen::Error),
    /// Self-managed certificates (`serve --certificates-secret`), as they say it.
    #[error("certificates Secret: {0}")]
    Certificates(String),
    #[error(
        "the policy would block Kubernetes' own controllers (refused in enforce mode): {}",
        list(.0)
    )]
    BlocksBuiltinControllers(Vec<Blocked>),
    /// Asked wrongly: flags that do not go together.
    #[error("{0}")]
    Usage(String),
    /// A command that talks to a cluster could not, or was asked wrongly.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// `serve` could not start, or stopped on an error: exit 1.
    #[error(transparent)]
    Serve(Box<Error>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A file (or stream) that could not be read or written, named.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct IoError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Reads a whole file, naming it in the error.
pub fn read(path: &Path) -> std::result::Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|source| IoError {
        path: path.to_path_buf(),
        source,
    })
}

/// The blocked removals, on one line.
pub(crate) fn list(blocked: &[Blocked]) -> String {
    blocked
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// The process's exit code: 1 when the server could not start or stopped
    /// on an error, 2 for every other command.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Serve(_) => 1,
            _ => 2,
        }
    }

    /// What `serve` failed with.
    pub fn serve(e: Error) -> Self {
        Error::Serve(Box::new(e))
    }

    /// Standard output could not be written (closed, full).
    pub fn stdout(e: std::io::Error) -> Self {
        Error::io("stdout", e)
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io(IoError {
            path: path.into(),
            source,
        })
    }

    pub fn policy(path: impl Into<PathBuf>, source: LoadError) -> Self {
        Error::Policy {
            path: path.into(),
            source,
        }
    }
}

/// Why a command could not talk to the cluster, or was asked wrongly: exit 2.
/// Each keeps its cause as its source; [`crate::output::chain`] says them all.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0}")]
    Usage(String),
    #[error("kubeconfig{}", path.as_ref().map(|p| format!(": {}", p.display())).unwrap_or_default())]
    Kubeconfig {
        path: Option<PathBuf>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot reach the API server: {server}")]
    Connect {
        server: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{what}")]
    Api {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("policy {name}{hint}")]
    Policy {
        name: String,
        /// What to do about it, said before the policy's own errors.
        hint: &'static str,
        #[source]
        source: LoadError,
    },
    #[error("policy {name}: has no key {key}")]
    PolicyKeyMissing { name: String, key: String },
    #[error("writing the report")]
    Output(#[source] std::io::Error),
}

impl ClusterError {
    pub fn api(what: impl Into<String>, source: kube::Error) -> Self {
        ClusterError::Api {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// Worth trying again: the API server unreachable, or answering 429 or
    /// 5xx. A bad kubeconfig, a refusal (401, 403) or a bad policy is not.
    pub fn transient(&self) -> bool {
        match self {
            ClusterError::Connect { .. } => true,
            ClusterError::Api { source, .. } => match source.as_ref() {
                kube::Error::Api(status) => status.code == 429 || status.code >= 500,
                kube::Error::HyperError(_) | kube::Error::Service(_) => true,
                _ => false,
            },
            _ => false,
        }
    }

    pub(crate) fn kubeconfig(
        path: Option<&Path>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ClusterError::Kubeconfig {
            path: path.map(Path::to_path_buf),
            source: Box::new(source),
        }
    }
}

/// Why a certificate, key or CA bundle cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate: {0}")]
    Certificate(#[source] rustls_pki_types::pem::Error),
    #[error("certificate: no PEM certificate found")]
    NoCertificate,
    #[error("private key: {0}")]
    PrivateKey(#[source] rustls_pki_types::pem::Error),
    #[error("certificate and key: {0}")]
    KeyMismatch(#[source] rustls::Error),
    #[error("{0}")]
    Protocol(#[source] rustls::Error),
    #[error("client CA: {0}")]
    ClientCaPem(#[source] rustls_pki_types::pem::Error),
    #[error("client CA: {0}")]
    ClientCaCertificate(#[source] rustls::Error),
    #[error("client CA: no PEM certificate found")]
    NoClientCa,
    #[error("client CA: {0}")]
    ClientVerifier(#[source] rustls::server::VerifierBuilderError),
    #[error(transparent)]
    Read(#[from] IoError),
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<TlsError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve`'s failure exits 1, every other command's 2; wrapping says
    /// nothing of its own, so what is printed is the cause's text.
    #[test]
    fn serve_exits_1_and_every_other_error_2_with_the_same_text() {
        let bind = || Error::Bind {
            addr: "127.0.0.1:1".parse().unwrap(),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        let served = Error::serve(bind());
        assert_eq!(served.exit_code(), 1);
        assert_eq!(served.to_string(), bind().to_string());
        assert_eq!(bind().exit_code(), 2);
        let cluster = Error::from(ClusterError::Usage("no such type".into()));
        assert_eq!(cluster.exit_code(), 2);
        assert_eq!(cluster.to_string(), "no such type");
        assert_eq!(Error::Usage("add --cluster".into()).exit_code(), 2);
    }
}
