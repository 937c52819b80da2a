//! The server: TLS webhook port, plain admin port, hot reload, graceful drain.

pub mod certs;
mod drain;
pub mod reload;
pub mod routes;
pub mod self_managed;
mod serve;
mod stall;
pub mod tls;

pub use serve::*;
