//! `test`: policy tests over recorded AdmissionReviews.
//!
//! A PATH is a suite file (YAML: policy, reviews, expectations), a recording
//! written by `serve --record-dir` (its expectation is the decision it got), an
//! apiserver-sim case file, or a folder of any of these. Every review is
//! decided with [`crate::admission::review`], the server's own function.
//! `--policy` replaces every suite's policy: replaying recordings under a new
//! policy lists each decision that would change.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::admission::{self, Reviewed};
use crate::error::Result;
use crate::policy::Policy;
use crate::recording::{self, Recording};

/// A suite file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuiteFile {
    /// The policy file, relative to the suite file. Default: the embedded policy.
    #[serde(default)]
    pub policy: Option<PathBuf>,
    pub cases: Vec<SuiteCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuiteCase {
    #[serde(default)]
    pub name: Option<String>,
    /// An AdmissionReview (or a recording), relative to the suite file.
    pub review: PathBuf,
    pub expect: Expected,
    /// The exact decision, e.g. `authorized`, `would-deny`, `nothing-removed`.
    #[serde(default)]
    pub decision: Option<String>,
    /// A substring of the denial message or a warning.
    #[serde(default)]
    pub message_contains: Option<String>,
}

/// What a suite expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    /// Allowed without an override (authorized, nothing removed, not judged, or warn mode).
    Allowed,
    /// Denied.
    Denied,
    /// Allowed by an override annotation.
    Override,
}

impl Expected {
    fn of(decision: &str) -> Expected {
        match decision {
            "override" => Expected::Override,
            "denied" => Expected::Denied,
            _ => Expected::Allowed,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Expected::Allowed => "allowed",
            Expected::Denied => "denied",
            Expected::Override => "override",
        }
    }
}

/// The apiserver-sim case format.
#[derive(Debug, Deserialize)]
struct SimCase {
    #[serde(default)]
    review: Option<serde_json::Value>,
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    expect: SimExpect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SimExpect {
    #[serde(default)]
    allowed: Option<bool>,
    #[serde(default)]
    message_contains: Vec<String>,
    #[serde(default)]
    warning_contains: Vec<String>,
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub name: String,
    /// `None`: passed. `Some(why)`: failed or changed, and why.
    pub failure: Option<String>,
    /// What was decided, for the passing line.
    pub summary: String,
}

impl Outcome {
    pub fn line(&self) -> String {
        match &self.failure {
            None => format!("ok   {}: {}", self.name, self.summary),
            Some(why) => format!("FAIL {}: {why}", self.name),
        }
    }
}

/// Runs every case under `paths`. `policy` replaces the suites' own.
pub fn run(paths: &[PathBuf], policy: Option<&Policy>) -> Vec<Outcome> {
    let override_policy = policy.cloned().map(Arc::new);
    let default_policy = Arc::new(Policy::embedded_default());
    let mut outcomes = Vec::new();
    for path in paths {
        run_path(
            path,
            override_policy.as_ref(),
            &default_policy,
            &mut outcomes,
        );
    }
    outcomes
}

fn run_path(
    path: &Path,
    override_policy: Option<&Arc<Policy>>,
    default: &Arc<Policy>,
    out: &mut Vec<Outcome>,
) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => return out.push(failed(path, format!("cannot read folder: {e}"))),
        };
        entries.sort();
        let before = out.len();
        for entry in entries {
            if is_suite(&entry) || entry.extension().is_some_and(|e| e == "json") {
                run_path(&entry, override_policy, default, out);
            }
        }
        if out.len() == before {
            out.push(failed(
                path,
                "no suite, recording or case file in this folder".into(),
            ));
        }
    } else if is_suite(path) {
        run_suite(path, override_policy, out);
    } else {
        out.push(run_json(path, override_policy.unwrap_or(default)));
    }
}

fn is_suite(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

fn failed(path: &Path, why: String) -> Outcome {
    Outcome {
        name: path.display().to_string(),
        failure: Some(why),
        summary: String::new(),
    }
}

fn run_suite(path: &Path, override_policy: Option<&Arc<Policy>>, out: &mut Vec<Outcome>) {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return out.push(failed(path, format!("cannot read suite: {e}"))),
    };
    let suite: SuiteFile = match serde_yaml_ng::from_str(&text) {
        Ok(suite) => suite,
        Err(e) => return out.push(failed(path, format!("not a suite file: {e}"))),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let policy = match (override_policy, &suite.policy) {
        (Some(p), _) => p.clone(),
        (None, Some(file)) => match crate::cli::load_policy(Some(&base.join(file))) {
            Ok(p) => Arc::new(p),
            Err(e) => return out.push(failed(path, e.to_string())),
        },
        (None, None) => Arc::new(Policy::embedded_default()),
    };
    for case in suite.cases {
        let file = base.join(&case.review);
        let name = case
            .name
            .clone()
            .unwrap_or_else(|| file.display().to_string());
        let body = match read_review(&file) {
            Ok(body) => body,
            Err(why) => {
                out.push(Outcome {
                    name,
                    failure: Some(why),
                    summary: String::new(),
                });
                continue;
            }
        };
        let (failure, summary_line) = match admission::review(&policy, &body) {
            Err(e) => (
                Some(format!("expected {}, got error: {e}", case.expect.as_str())),
                String::new(),
            ),
            Ok(r) => (check_suite_case(&case, &r), r.decision.to_string()),
        };
        out.push(Outcome {
            name,
            failure,
            summary: summary_line,
        });
    }
}

fn check_suite_case(case: &SuiteCase, r: &Reviewed) -> Option<String> {
    let got = Expected::of(r.decision);
    let mut why = String::new();
    if got != case.expect {
        let _ = write!(why, "expected {}, got {}", case.expect.as_str(), summary(r));
    } else if let Some(decision) = &case.decision
        && decision != r.decision
    {
        let _ = write!(why, "expected decision {decision}, got {}", summary(r));
    } else if let Some(needle) = &case.message_contains
        && !said(r).to_lowercase().contains(&needle.to_lowercase())
    {
        let _ = write!(
            why,
            "expected the message to contain {needle:?}, got {}",
            summary(r)
        );
    }
    (!why.is_empty()).then_some(why)
}

/// What a review was answered with, in one line.
fn summary(r: &Reviewed) -> String {
    match (&r.message, r.warnings.first()) {
        (Some(m), _) => format!("{}: {m}", r.decision),
        (None, Some(w)) => format!("{}: {w}", r.decision),
        (None, None) => r.decision.to_string(),
    }
}

fn said(r: &Reviewed) -> String {
    let mut s = r.message.clone().unwrap_or_default();
    for w in &r.warnings {
        s.push('\n');
        s.push_str(w);
    }
    s
}

/// The AdmissionReview bytes in a review file or a recording.
fn read_review(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match serde_json::from_slice::<Recording>(&bytes) {
        Ok(r) if r.kind == recording::KIND => {
            Ok(serde_json::to_vec(&r.review).expect("JSON re-serializes"))
        }
        _ => Ok(bytes),
    }
}

/// A recording, an apiserver-sim case file, or a bare review (which has no expectation).
fn run_json(path: &Path, policy: &Policy) -> Outcome {
    let name = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => return failed(path, format!("cannot read: {e}")),
    };
    let value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return failed(path, format!("not JSON: {e}")),
    };
    if value["kind"] == recording::KIND {
        let recorded: Recording = match serde_json::from_value(value) {
            Ok(r) => r,
            Err(e) => return failed(path, format!("not a recording: {e}")),
        };
        let body = serde_json::to_vec(&recorded.review).expect("JSON re-serializes");
        return match admission::review(policy, &body) {
            Err(e) => failed(
                path,
                format!("recorded {}, now error: {e}", recorded.decision),
            ),
            Ok(r) if r.decision == recorded.decision && r.allowed == recorded.allowed => Outcome {
                name,
                failure: None,
                summary: format!("{} (as recorded)", r.decision),
            },
            Ok(r) => Outcome {
                name,
                failure: Some(format!(
                    "changed: recorded {}, now {}",
                    recorded.decision,
                    summary(&r)
                )),
                summary: String::new(),
            },
        };
    }
    if value.get("expect").is_some()
        && (value.get("review").is_some() || value.get("raw").is_some())
    {
        let case: SimCase = match serde_json::from_value(value) {
            Ok(c) => c,
            Err(e) => return failed(path, format!("not a case file: {e}")),
        };
        return run_sim_case(name, case, policy);
    }
    failed(
        path,
        "a bare AdmissionReview has no expectation: list it in a suite file, or use `check`".into(),
    )
}

fn run_sim_case(name: String, case: SimCase, policy: &Policy) -> Outcome {
    let body = match (&case.review, &case.raw) {
        (Some(review), _) => serde_json::to_vec(review).expect("JSON re-serializes"),
        (None, Some(raw)) => raw.clone().into_bytes(),
        (None, None) => unreachable!("checked by the caller"),
    };
    let result = admission::review(policy, &body);
    let (failure, summary_line) = match (&case.raw, result) {
        (Some(_), Err(e)) => (None, format!("refused: {e}")),
        (Some(_), Ok(r)) => (
            Some(format!(
                "expected a refusal (HTTP 400), got {}",
                summary(&r)
            )),
            String::new(),
        ),
        (None, Err(e)) => (Some(format!("refused: {e}")), String::new()),
        (None, Ok(r)) => {
            let mut problems = Vec::new();
            if let Some(allowed) = case.expect.allowed
                && allowed != r.allowed
            {
                problems.push(format!("expected allowed={allowed}, got {}", summary(&r)));
            }
            let message = r.message.clone().unwrap_or_default().to_lowercase();
            for needle in &case.expect.message_contains {
                if !message.contains(&needle.to_lowercase()) {
                    problems.push(format!("message lacks {needle:?}"));
                }
            }
            let warnings = r.warnings.join("\n").to_lowercase();
            for needle in &case.expect.warning_contains {
                if !warnings.contains(&needle.to_lowercase()) {
                    problems.push(format!("warnings lack {needle:?}"));
                }
            }
            if problems.is_empty() {
                (None, r.decision.to_string())
            } else {
                (Some(problems.join("; ")), String::new())
            }
        }
    };
    Outcome {
        name,
        failure,
        summary: summary_line,
    }
}

/// Prints one line per case and the closing count; returns the exit code.
pub fn report(outcomes: &[Outcome], out: &mut impl std::io::Write) -> Result<i32> {
    let failed = outcomes.iter().filter(|o| o.failure.is_some()).count();
    for o in outcomes {
        writeln!(out, "{}", o.line()).map_err(|e| crate::error::Error::io("stdout", e))?;
    }
    writeln!(out, "{} passed, {} failed", outcomes.len() - failed, failed)
        .map_err(|e| crate::error::Error::io("stdout", e))?;
    Ok(if failed > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_classes() {
        assert_eq!(Expected::of("override"), Expected::Override);
        assert_eq!(Expected::of("denied"), Expected::Denied);
        for allowed in ["authorized", "would-deny", "nothing-removed", "not-judged"] {
            assert_eq!(Expected::of(allowed), Expected::Allowed);
        }
    }

    #[test]
    fn a_suite_with_a_wrong_expectation_fails_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews");
        let suite = format!(
            "cases:\n  - name: strip\n    review: {0}/pod-strip-finalizers.json\n    expect: allowed\n  - review: {0}/pod-strip-finalizers-override.json\n    expect: override\n    messageContains: INC-4711\n",
            examples.display()
        );
        let path = dir.path().join("suite.yaml");
        std::fs::write(&path, suite).unwrap();
        let outcomes = run(&[path], None);
        assert_eq!(outcomes.len(), 2);
        let strip = outcomes[0].failure.as_deref().unwrap();
        assert!(
            strip.starts_with("expected allowed, got denied: finalizer-guard denied"),
            "{strip}"
        );
        assert_eq!(outcomes[1].failure, None);
        let mut out = Vec::new();
        assert_eq!(report(&outcomes, &mut out).unwrap(), 1);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("1 passed, 1 failed\n"), "{text}");
        assert!(text.starts_with("FAIL strip: expected allowed"), "{text}");
    }

    #[test]
    fn an_unknown_suite_key_is_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.yaml");
        std::fs::write(&path, "cases:\n  - review: x.json\n    expected: denied\n").unwrap();
        let outcomes = run(&[path], None);
        assert!(
            outcomes[0]
                .failure
                .as_deref()
                .unwrap()
                .contains("unknown field `expected`")
        );
    }
}
