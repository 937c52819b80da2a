//! `test`: policy tests over recorded AdmissionReviews.
//!
//! A PATH is a suite file (YAML: policy, cases, expectations; a case names a
//! review file, or is written short and expanded by `suite::short`), a recording
//! written by `serve --record-dir` (its expectation is the decision it got), an
//! apiserver-sim case file (checked in full by [`crate::offline::cases`]), or a folder
//! of any of these. Every review is decided with [`crate::admission::review`],
//! the server's own function.
//! Files are read through [`crate::files`]: regular files only (a FIFO or a
//! device is an input error, never waited on), none larger than the largest
//! body the webhook accepts, and a folder reached again through a symlink is
//! an input error, never walked twice.
//! `--policy` replaces every suite's policy: replaying recordings under a new
//! policy lists each decision that would change.

mod file;
mod outcome;
mod report;
mod run;
mod short;

pub use file::{Expected, SuiteCase, SuiteFile};
pub use outcome::CaseOutcome;
pub use report::{TestReport, test};
pub use run::{run, run_with};
