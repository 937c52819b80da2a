//! The server: TLS webhook port, plain admin port, hot reload, graceful drain.

mod connections;
mod drain;
pub mod reload;
pub mod routes;
pub mod self_managed;
mod serve;
mod stall;
mod state;
pub mod tls;

pub use connections::{H2_NARROW, H2_WIDE, H2Bounds, WIDE_CONNECTIONS};
pub use serve::*;
pub use state::{AppState, BODY_WAITING_BYTES, EventsTarget, Limits, RecordConfig};
