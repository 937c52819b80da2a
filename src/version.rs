//! `finalizer-guard version` and `--version`: what was built, from which
//! commit, for which target and when (set by build.rs).

use std::io::{self, Write};

use serde::Serialize;

use crate::output::Report;

/// The crate's version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit built, `-dirty` when a tracked file differed from it, or
/// `unknown` (built without git).
pub const COMMIT: &str = env!("FG_BUILD_COMMIT");
/// The target triple, e.g. `x86_64-unknown-linux-musl`.
pub const TARGET: &str = env!("FG_BUILD_TARGET");
/// RFC 3339, UTC: the commit's time in a release (reproducible), else the build's.
pub const BUILD_DATE: &str = env!("FG_BUILD_DATE");
/// Whether the dependency list is embedded for scanners (`cargo auditable`).
const AUDITABLE: bool = matches!(env!("FG_BUILD_AUDITABLE").as_bytes(), b"1");

/// `--version`'s line, after the program's name: `0.1.0 (commit C, target T, built D)`.
pub const LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FG_BUILD_COMMIT"),
    ", target ",
    env!("FG_BUILD_TARGET"),
    ", built ",
    env!("FG_BUILD_DATE"),
    ")"
);

/// `finalizer-guard version`'s report.
#[derive(Debug, Serialize)]
pub struct Info {
    pub version: &'static str,
    pub commit: &'static str,
    pub dirty: bool,
    pub target: &'static str,
    pub build_date: &'static str,
    /// `cargo-auditable` when the dependency list is embedded (the binary's
    /// `.dep-v0` section: `cargo audit bin`, syft, trivy and grype read it), else `none`.
    pub dependencies: &'static str,
}

impl Info {
    pub fn of_this_build() -> Info {
        Info {
            version: VERSION,
            commit: COMMIT,
            dirty: COMMIT.ends_with("-dirty"),
            target: TARGET,
            build_date: BUILD_DATE,
            dependencies: if AUDITABLE { "cargo-auditable" } else { "none" },
        }
    }
}

/// `version`: this build's report on standard output.
pub fn print(format: crate::output::Format) -> io::Result<()> {
    crate::output::Printer::stdio(format).report(&Info::of_this_build())
}

impl Report for Info {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "finalizer-guard {}", self.version)?;
        writeln!(out, "commit:       {}", self.commit)?;
        writeln!(out, "target:       {}", self.target)?;
        writeln!(out, "built:        {}", self.build_date)?;
        let deps = if self.dependencies == "none" {
            "not embedded (a release build embeds them: cargo auditable)"
        } else {
            "embedded (cargo auditable: read with `cargo audit bin`, syft, trivy or grype)"
        };
        writeln!(out, "dependencies: {deps}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_version_commit_target_and_date() {
        assert!(LINE.starts_with(&format!(
            "{VERSION} (commit {COMMIT}, target {TARGET}, built "
        )));
        assert!(LINE.ends_with(&format!("built {BUILD_DATE})")));
        assert!(!TARGET.is_empty());
        // RFC 3339 in UTC: 2026-11-26T22:41:10Z.
        assert_eq!(BUILD_DATE.len(), 20, "{BUILD_DATE}");
        assert!(BUILD_DATE.ends_with('Z') && BUILD_DATE.as_bytes()[10] == b'T');
    }

    #[test]
    fn a_dirty_commit_says_so() {
        let info = Info::of_this_build();
        assert_eq!(info.dirty, COMMIT.ends_with("-dirty"));
        assert!(LINE.contains("-dirty,") == info.dirty);
    }
}
