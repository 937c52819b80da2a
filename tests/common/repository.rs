//! The repository the tests run in: its root, and paths and files under it.

use std::path::{Path, PathBuf};

/// The repository's root (the crate's manifest folder).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `rel` under the repository's root.
pub fn path(rel: impl AsRef<Path>) -> PathBuf {
    root().join(rel)
}

/// The text of the file `rel` under the repository's root; fails the test
/// naming the file when it cannot be read.
#[track_caller]
pub fn read(rel: impl AsRef<Path>) -> String {
    let file = path(rel);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The chart, `charts/finalizer-guard`.
pub fn chart() -> PathBuf {
    path("charts/finalizer-guard")
}

/// The tests' own files, `tests/fixtures`.
pub fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}
