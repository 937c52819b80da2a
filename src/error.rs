//! The one error type of the binary's commands.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::policy::InvalidPolicy;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("policy {path}: {source}")]
    Policy {
        path: PathBuf,
        #[source]
        source: InvalidPolicy,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("certificate generation: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the policy would block Kubernetes' own controllers (refused in enforce mode): {0}")]
    BlocksBuiltinControllers(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
