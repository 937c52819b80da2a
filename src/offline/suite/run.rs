//! Running the cases under the paths given: suites, recordings, case
//! files and folders of them, each review decided as the server decides it.

use std::fmt::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::file::{Expected, SuiteCase, SuiteFile};
use super::outcome::CaseOutcome;
use super::short;
use crate::admission::{self, Reviewed};
use crate::error::Error;
use crate::files::{self, Found};
use crate::offline::cases::{self, CaseFile};
use crate::policy::Policy;
use crate::trail::recording::{self, Recording};

/// Runs every case under `paths`. `policy` replaces the suites' own. A
/// review, recording or case file larger than the largest body the webhook
/// accepts by default is refused.
pub fn run(paths: &[PathBuf], policy: Option<&Policy>) -> Vec<CaseOutcome> {
    run_with(paths, policy, files::DEFAULT_MAX_BODY_BYTES)
}

/// [`run`], refusing review, recording and case files larger than
/// `max_body_bytes` (the webhook's `--max-body-bytes`).
pub fn run_with(
    paths: &[PathBuf],
    policy: Option<&Policy>,
    max_body_bytes: usize,
) -> Vec<CaseOutcome> {
    let runner = Runner {
        override_policy: policy.cloned().map(Arc::new),
        default: Arc::new(Policy::embedded_default()),
        limit: max_body_bytes as u64,
    };
    let mut outcomes = Vec::new();
    for path in paths {
        runner.path(path, &mut outcomes);
    }
    outcomes
}

/// What every case of one run is decided under.
struct Runner {
    /// `--policy`: replaces every suite's own.
    override_policy: Option<Arc<Policy>>,
    /// The embedded policy: a suite's that names none, and a recording's or
    /// case file's without `--policy`.
    default: Arc<Policy>,
    /// The largest review, recording or case file read.
    limit: u64,
}

impl Runner {
    fn path(&self, path: &Path, out: &mut Vec<CaseOutcome>) {
        if !path.is_dir() {
            return self.file(path, out);
        }
        let before = out.len();
        for found in files::walk(path, &runs) {
            match found {
                Found::File(file) => self.file(&file, out),
                Found::Again { path, first } => out.push(unreadable(&path, files::again(&first))),
                Found::Error { path, error } => {
                    out.push(unreadable(&path, format!("cannot read: {error}")));
                }
            }
        }
        if out.len() == before {
            out.push(unreadable(
                path,
                "no suite, recording or case file in this folder".into(),
            ));
        }
    }

    fn file(&self, path: &Path, out: &mut Vec<CaseOutcome>) {
        if is_suite(path) {
            run_suite(path, self.override_policy.as_ref(), self.limit, out);
        } else {
            let policy = self.override_policy.as_ref().unwrap_or(&self.default);
            out.push(run_json(path, policy, self.limit));
        }
    }
}

/// What a folder's walk runs: suite files (YAML), recordings and case files
/// (JSON), and folders so named.
fn runs(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "json" || e == "yaml" || e == "yml")
}

fn is_suite(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// A case that ran and did not decide as expected.
fn failed(path: &Path, why: String) -> CaseOutcome {
    CaseOutcome {
        name: path.display().to_string(),
        failure: Some(why),
        unreadable: false,
        summary: String::new(),
    }
}

/// An input that could not be read, or is not something `test` runs.
fn unreadable(path: &Path, why: String) -> CaseOutcome {
    CaseOutcome {
        unreadable: true,
        ..failed(path, why)
    }
}

fn run_suite(
    path: &Path,
    override_policy: Option<&Arc<Policy>>,
    limit: u64,
    out: &mut Vec<CaseOutcome>,
) {
    let text = match files::read_regular(path, limit) {
        Ok(text) => text,
        Err(e) => return out.push(unreadable(path, format!("cannot read suite: {e}"))),
    };
    let suite: SuiteFile = match crate::yaml::from_slice(&text, &crate::yaml::SUITE) {
        Ok(suite) => suite,
        Err(e) => return out.push(unreadable(path, format!("not a suite file: {e}"))),
    };
    let base = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let policy = match (override_policy, &suite.policy) {
        (Some(p), _) => p.clone(),
        (None, Some(file)) => {
            let (shown, file) = match inside(base, file, "policy") {
                Ok(found) => found,
                Err(why) => return out.push(unreadable(path, why)),
            };
            match crate::policy::load(&file) {
                Ok(p) => Arc::new(p),
                Err(e) => {
                    let why = Error::policy(shown, e).to_string();
                    return out.push(unreadable(path, crate::output::without_values(&why)));
                }
            }
        }
        (None, None) => Arc::new(Policy::embedded_default()),
    };
    let spent = std::cell::Cell::new(0);
    for (i, case) in suite.cases.iter().enumerate() {
        let name = case.name.clone().unwrap_or_else(|| match &case.review {
            Some(review) => base.join(review).display().to_string(),
            None => format!("{}: cases[{i}]", path.display()),
        });
        let body = match case_body(base, case, i, limit, &spent) {
            Ok(body) => body,
            Err(why) => {
                out.push(CaseOutcome {
                    name,
                    failure: Some(why),
                    unreadable: true,
                    summary: String::new(),
                });
                continue;
            }
        };
        // A review that cannot be decided (not an AdmissionReview, say) is
        // an input error, as `check` counts it; the expectation never meets it.
        let (failure, unreadable, summary_line) = match admission::review(&policy, &body) {
            Err(e) => (
                Some(crate::output::without_values(&format!(
                    "expected {}, got error: {e}",
                    case.expect.as_str()
                ))),
                true,
                String::new(),
            ),
            Ok(r) => (check_suite_case(case, &r), false, r.verdict().to_string()),
        };
        out.push(CaseOutcome {
            name,
            failure,
            unreadable,
            summary: summary_line,
        });
    }
}

/// The review a case is judged on: the file it names, or the expansion of
/// its short form. Why not, naming the case (`cases[N]`) and the field.
pub(super) fn case_body(
    base: &Path,
    case: &SuiteCase,
    index: usize,
    limit: u64,
    spent: &std::cell::Cell<u64>,
) -> std::result::Result<Vec<u8>, String> {
    let at = format!("cases[{index}]");
    let short_fields = [
        ("object", case.object.is_some()),
        ("resource", case.resource.is_some()),
        ("requester", case.requester.is_some()),
        ("mergePatch", case.merge_patch.is_some()),
        ("jsonPatch", case.json_patch.is_some()),
        ("finalizersAfter", case.finalizers_after.is_some()),
        ("dryRun", case.dry_run),
    ];
    match (&case.review, &case.object) {
        (Some(review), None) => {
            if let Some((field, _)) = short_fields.iter().find(|(_, given)| *given) {
                return Err(format!(
                    "{at}.{field}: a case with a review file is judged on that review; write the short form (object, requester, a change) without review"
                ));
            }
            let shown = base.join(review);
            inside(base, review, "review").and_then(|(_, file)| read_review(&shown, &file, limit))
        }
        (None, Some(object)) => short::Short {
            at,
            object,
            resource: case.resource.as_deref(),
            requester: case.requester.as_ref(),
            merge_patch: case.merge_patch.as_ref(),
            json_patch: case.json_patch.as_ref(),
            finalizers_after: case.finalizers_after.as_deref(),
            dry_run: case.dry_run,
            spent,
        }
        .expand(limit),
        (Some(_), Some(_)) => Err(format!(
            "{at}: give review (a file) or object (the short form), not both"
        )),
        (None, None) => Err(format!(
            "{at}: give review (a recorded AdmissionReview) or object, requester and a change (the short form)"
        )),
    }
}

fn check_suite_case(case: &SuiteCase, r: &Reviewed) -> Option<String> {
    let got = Expected::of(r.verdict());
    let mut why = String::new();
    if got != case.expect {
        let _ = write!(why, "expected {}, got {}", case.expect.as_str(), summary(r));
    } else if let Some(decision) = case.decision
        && decision != r.verdict()
    {
        let _ = write!(why, "expected decision {decision}, got {}", summary(r));
    } else if let Some(needle) = &case.message_contains
        && !said(r).to_lowercase().contains(&needle.to_lowercase())
    {
        let _ = write!(
            why,
            "expected the message to contain {}, got {}",
            crate::output::quoted(needle),
            summary(r)
        );
    }
    (!why.is_empty()).then_some(why)
}

/// What a review was answered with, in one line.
fn summary(r: &Reviewed) -> String {
    match (&r.message, r.warnings.first()) {
        (Some(m), _) => format!("{}: {m}", r.verdict()),
        (None, Some(w)) => format!("{}: {w}", r.verdict()),
        (None, None) => r.verdict().to_string(),
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

/// A file a suite names (`what`: its policy, a case's review), as shown and
/// as read: a relative path, without `..`, that stays inside the suite's
/// folder once its symlinks are resolved. A suite under review must not
/// read `/etc/passwd` or a token beside it into a CI log.
fn inside(
    base: &Path,
    named: &Path,
    what: &str,
) -> std::result::Result<(PathBuf, PathBuf), String> {
    let shown = base.join(named);
    let plain = named
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if named.is_absolute() || !plain || named.as_os_str().is_empty() {
        return Err(format!(
            "{what} {}: a suite names its files by paths relative to its folder, without `..`",
            named.display()
        ));
    }
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", shown.display());
    let folder = base.canonicalize().map_err(cannot)?;
    let file = shown.canonicalize().map_err(cannot)?;
    if !file.starts_with(&folder) {
        return Err(format!(
            "{what} {}: a symlink out of the suite's folder: refused",
            shown.display()
        ));
    }
    Ok((shown, file))
}

/// The AdmissionReview bytes in a review file or a recording (`path` as
/// shown, `file` as read). What the file holds is never quoted in an error.
fn read_review(path: &Path, file: &Path, limit: u64) -> std::result::Result<Vec<u8>, String> {
    let bytes = files::read_regular(file, limit)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    crate::admission::json::distinct_keys(&bytes).map_err(|e| {
        crate::output::without_values(&format!(
            "{}: not JSON the webhook would read: {e}",
            path.display()
        ))
    })?;
    match serde_json::from_slice::<Recording>(&bytes) {
        Ok(r) if r.kind == recording::KIND => {
            Ok(serde_json::to_vec(&r.review).expect("JSON re-serializes"))
        }
        _ => Ok(bytes),
    }
}

/// A recording, an apiserver-sim case file, or a bare review (which has no expectation).
fn run_json(path: &Path, policy: &Policy, limit: u64) -> CaseOutcome {
    let name = path.display().to_string();
    let bytes = match files::read_regular(path, limit) {
        Ok(bytes) => bytes,
        Err(e) => return unreadable(path, format!("cannot read: {e}")),
    };
    // A Value keeps one copy of a repeated key: the webhook refuses such a review.
    if let Err(e) = crate::admission::json::distinct_keys(&bytes) {
        return unreadable(path, format!("not JSON the webhook would read: {e}"));
    }
    let value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return unreadable(path, format!("not JSON: {e}")),
    };
    if value["kind"] == recording::KIND {
        let recorded: Recording = match serde_json::from_value(value) {
            Ok(r) => r,
            Err(e) => return unreadable(path, format!("not a recording: {e}")),
        };
        let body = serde_json::to_vec(&recorded.review).expect("JSON re-serializes");
        return match admission::review(policy, &body) {
            Err(e) => failed(
                path,
                format!("recorded {}, now error: {e}", recorded.decision),
            ),
            Ok(r) if r.verdict() == recorded.decision && r.allowed() == recorded.allowed => {
                CaseOutcome {
                    name,
                    failure: None,
                    unreadable: false,
                    summary: format!("{} (as recorded)", r.verdict()),
                }
            }
            Ok(r) => CaseOutcome {
                name,
                failure: Some(format!(
                    "changed: recorded {}, now {}",
                    recorded.decision,
                    summary(&r)
                )),
                unreadable: false,
                summary: String::new(),
            },
        };
    }
    if value.get("expect").is_some()
        && (value.get("review").is_some() || value.get("raw").is_some())
    {
        let case: CaseFile = match serde_json::from_value(value) {
            Ok(c) => c,
            Err(e) => return unreadable(path, format!("not a case file: {e}")),
        };
        let checked = cases::check(policy, &case);
        return CaseOutcome {
            name,
            failure: (!checked.problems.is_empty()).then(|| checked.problems.join("; ")),
            unreadable: false,
            summary: checked.decided,
        };
    }
    unreadable(
        path,
        "a bare AdmissionReview has no expectation: list it in a suite file, or use `check`".into(),
    )
}
