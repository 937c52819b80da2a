//! The corpus outside the repository: `$SHARED_DIR` (as `.ci/run`,
//! `scripts/load.sh` and `fuzz/seed.sh` read it), `../shared` beside the
//! checkout by default. A test that reads it fails when it is not there:
//! a test that passes on a missing input checks nothing. `FG_NO_SHARED=1`
//! skips such a test, said on its output; `.ci/run` never sets it.

use std::path::PathBuf;

/// The variable that skips the tests reading the shared corpus.
pub const SKIP: &str = "FG_NO_SHARED";

/// `$SHARED_DIR`, or `../shared` beside the checkout.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("SHARED_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => super::repository::path("../shared"),
    }
}

/// The folder `rel` of the shared corpus; `None` only when `FG_NO_SHARED=1`
/// says to skip (a line on standard output says so). Missing, it fails the
/// test naming the path and how to skip.
#[track_caller]
pub fn shared_folder(rel: &str) -> Option<PathBuf> {
    if std::env::var(SKIP).is_ok_and(|v| v == "1") {
        println!("skipped: {SKIP}=1: the shared corpus ({rel}) is not read");
        return None;
    }
    let dir = shared_dir().join(rel);
    assert!(
        dir.is_dir(),
        "{} is not a folder: this test reads the shared corpus (set SHARED_DIR to where it is, or {SKIP}=1 to skip this test)",
        dir.display()
    );
    Some(dir)
}
