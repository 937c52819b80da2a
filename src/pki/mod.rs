//! Certificates and keys, below the commands that serve them (`serve`) and
//! the ones that make or read them offline (`certs`, `check`).

pub mod certificates;
pub mod keys;
