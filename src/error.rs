//! The one error type of the binary's commands.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::offline::doctor::Blocked;
use crate::policy::LoadError;

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
