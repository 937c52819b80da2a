//! Reading a policy file: the one place a policy meets the file system.
//!
//! The CLI, `test`, the server's start and its reload all come through here,
//! so a file means the same everywhere: UTF-8 YAML, or refused.

use super::config::{InvalidPolicy, Policy};
use std::path::Path;

/// Why a policy file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// YAML is UTF-8: a file that is not would be read as something else than written.
    #[error("not UTF-8 (at byte {valid_up_to})")]
    NotUtf8 { valid_up_to: usize },
    #[error(transparent)]
    Invalid(#[from] InvalidPolicy),
}

/// Reads and validates the policy file at `path`.
pub fn load(path: &Path) -> Result<Policy, LoadError> {
    // A regular file, of a policy's size: a suite under review names its
    // policy file, and a FIFO or /dev/zero would never finish reading.
    let bytes = crate::files::read_regular(path, crate::files::MAX_POLICY_BYTES)
        .map_err(LoadError::Read)?;
    from_bytes(&bytes)
}

/// Validates a policy file's bytes, as [`load`] does once it has read them.
pub fn from_bytes(bytes: &[u8]) -> Result<Policy, LoadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    Ok(Policy::from_yaml(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_utf8_is_refused_not_replaced() {
        let e = from_bytes(b"mode: enforce\nrules: []\n# caf\xe9\n").unwrap_err();
        assert!(matches!(e, LoadError::NotUtf8 { valid_up_to: 29 }), "{e:?}");
        assert!(from_bytes(b"mode: warn\n").is_ok());
        assert!(matches!(
            load(Path::new("/nonexistent/policy.yaml")),
            Err(LoadError::Read(_))
        ));
    }
}
