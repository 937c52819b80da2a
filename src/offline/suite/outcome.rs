//! What one case came to, as `test` prints it.

use crate::output::escape;

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CaseOutcome {
    pub name: String,
    /// `None`: passed. `Some(why)`: failed or changed, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The failure is the input's: a path that cannot be read, or is not a
    /// suite, recording or case file (exit 2, as for `check`), not a case
    /// whose decision differs from its expectation (exit 1).
    pub unreadable: bool,
    /// What was decided, for the passing line.
    pub summary: String,
}

impl CaseOutcome {
    /// One line, whatever the name and the reason hold ([`escape`]): a
    /// case named with a newline cannot forge an `ok` line.
    pub fn line(&self) -> String {
        let name = escape(&self.name);
        match (&self.failure, self.unreadable) {
            (None, _) => format!("ok   {name}: {}", escape(&self.summary)),
            (Some(why), false) => format!("FAIL {name}: {}", escape(why)),
            (Some(why), true) => format!("ERROR {name}: {}", escape(why)),
        }
    }
}
