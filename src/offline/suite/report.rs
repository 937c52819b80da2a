//! `test` itself: the run, and its report.

use std::path::{Path, PathBuf};

use super::outcome::CaseOutcome;
use super::run::run_with;
use crate::error::Error;

/// `test`: exit 0 when every case passed, 1 when any failed or changed, 2
/// when an input could not be read (as `check` and `policy validate`). With
/// `policy` (shadow replay), every case is decided under it instead of its
/// suite's own.
pub fn test(
    policy: Option<&Path>,
    format: crate::output::Format,
    max_body_bytes: usize,
    paths: &[PathBuf],
) -> crate::error::Result<i32> {
    let policy = policy
        .map(|p| crate::offline::check::load_policy(Some(p)))
        .transpose()?;
    let report = TestReport::of(run_with(paths, policy.as_ref(), max_body_bytes));
    crate::output::Printer::stdio(format)
        .report(&report)
        .map_err(Error::stdout)?;
    Ok(report.exit_code())
}

/// What `test` reports: every case's outcome, and the counts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TestReport {
    pub cases: Vec<CaseOutcome>,
    pub passed: usize,
    pub failed: usize,
    /// Inputs that could not be read, or are not a suite, recording or case file.
    pub unreadable: usize,
}

impl TestReport {
    pub fn of(cases: Vec<CaseOutcome>) -> TestReport {
        let unreadable = cases.iter().filter(|o| o.unreadable).count();
        let failed = cases.iter().filter(|o| o.failure.is_some()).count() - unreadable;
        let passed = cases.len() - failed - unreadable;
        TestReport {
            cases,
            passed,
            failed,
            unreadable,
        }
    }

    /// 0 all passed, 1 any failed or changed, 2 any input unreadable (as `check`).
    pub fn exit_code(&self) -> i32 {
        if self.unreadable > 0 {
            2
        } else if self.failed > 0 {
            1
        } else {
            0
        }
    }
}

impl crate::output::Report for TestReport {
    /// One line per case and the closing count.
    fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for o in &self.cases {
            writeln!(out, "{}", o.line())?;
        }
        let (passed, failed, unreadable) = (self.passed, self.failed, self.unreadable);
        if unreadable > 0 {
            writeln!(
                out,
                "{passed} passed, {failed} failed, {unreadable} unreadable"
            )
        } else {
            writeln!(out, "{passed} passed, {failed} failed")
        }
    }
}
