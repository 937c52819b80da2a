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

#[cfg(test)]
mod tests {
    use super::super::file::*;
    use super::super::outcome::*;
    use super::super::report::*;
    use super::super::short;
    use super::*;
    use std::path::{Path, PathBuf};

    use crate::admission;
    use crate::policy::{Policy, Verdict};

    /// A folder holding a copy of examples/reviews as `reviews/`.
    fn examples_in_a_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews");
        std::fs::create_dir(dir.path().join("reviews")).unwrap();
        for entry in std::fs::read_dir(examples).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(
                entry.path(),
                dir.path().join("reviews").join(entry.file_name()),
            )
            .unwrap();
        }
        dir
    }

    /// A suite names files inside its folder only, and what a file it names
    /// holds is never quoted in an error.
    #[test]
    fn a_suite_reads_nothing_outside_its_folder_and_quotes_nothing_it_read() {
        let outside = tempfile::tempdir().unwrap();
        let token = outside.path().join("token");
        std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.sig\n").unwrap();
        let dir = examples_in_a_folder();
        std::os::unix::fs::symlink(&token, dir.path().join("link.yaml")).unwrap();
        std::os::unix::fs::symlink(&token, dir.path().join("link.json")).unwrap();
        std::fs::write(
            dir.path().join("secret.yaml"),
            "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.sig\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("secret.json"),
            "\"eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.sig\"",
        )
        .unwrap();
        let review = "reviews/pod-strip-finalizers.json";
        for (policy, review) in [
            (Some(token.display().to_string()), review.to_string()),
            (Some("../../../../../../etc/passwd".into()), review.into()),
            (Some("reviews/../link.yaml".into()), review.into()),
            (Some("link.yaml".into()), review.into()),
            (Some("secret.yaml".into()), review.into()),
            (None, token.display().to_string()),
            (None, "/etc/passwd".into()),
            (None, "../token".into()),
            (None, "link.json".into()),
            (None, "secret.json".into()),
        ] {
            let policy = policy.map_or(String::new(), |p| format!("policy: {p}\n"));
            let suite = dir.path().join("suite.yaml");
            std::fs::write(
                &suite,
                format!("{policy}cases:\n  - review: {review}\n    expect: denied\n"),
            )
            .unwrap();
            let outcomes = run(&[suite], None);
            let why = outcomes[0].failure.as_deref().unwrap_or_default();
            assert!(outcomes[0].unreadable, "{policy} {review}: {outcomes:?}");
            assert!(!why.contains("eyJ") && !why.contains("root:"), "{why}");
        }
        let suite = dir.path().join("suite.yaml");
        std::fs::write(&suite, "policy: link.yaml\ncases: []\n").unwrap();
        let why = run(&[suite], None)[0].failure.clone().unwrap();
        assert!(why.contains("a symlink out of the suite's folder"), "{why}");
    }

    /// A case's name, a reason, a summary: each on its result line, escaped.
    #[test]
    fn a_result_line_is_one_line_whatever_the_name_holds() {
        let forged = CaseOutcome {
            name: "tenant-cannot-strip: denied\nok   deny-cross-team\u{202e}".into(),
            failure: Some("expected denied, got x\n0 passed".into()),
            unreadable: false,
            summary: String::new(),
        };
        let line = forged.line();
        assert_eq!(
            line,
            "FAIL tenant-cannot-strip: denied\\u{a}ok   deny-cross-team\\u{202e}: expected denied, got x\\u{a}0 passed"
        );
        let report = TestReport::of(vec![forged]);
        let mut out = Vec::new();
        crate::output::Report::write_text(&report, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 2);
    }

    #[test]
    fn expected_classes() {
        assert_eq!(Expected::of(Verdict::Override), Expected::Override);
        for denied in [Verdict::Denied, Verdict::ApprovalDenied] {
            assert_eq!(Expected::of(denied), Expected::Denied, "{denied}");
        }
        for allowed in [
            Verdict::Authorized,
            Verdict::WouldDeny,
            Verdict::NothingRemoved,
            Verdict::NotJudged,
            Verdict::ApprovalRecorded,
            Verdict::ApprovalWouldDeny,
        ] {
            assert_eq!(Expected::of(allowed), Expected::Allowed, "{allowed}");
        }
    }

    /// A refused approval write is a denial (HTTP 403): a suite expecting
    /// `denied` passes, one expecting `allowed` fails.
    #[test]
    fn a_refused_approval_write_is_expected_as_denied() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("policy.yaml"),
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n",
        )
        .unwrap();
        let pod = |annotations: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-0","namespace":"team-a","finalizers":["example.com/a"]{annotations}}}}}"#
            )
        };
        let forged = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-1","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"name":"web-0","namespace":"team-a","operation":"UPDATE","userInfo":{{"username":"mallory"}},"object":{},"oldObject":{}}}}}"#,
            pod(
                r#","annotations":{"finalizer-guard.io/override":"node-lost: INC-1","finalizer-guard.io/approved-by":"mallory","finalizer-guard.io/override-expires":"2099-01-01T00:00:00Z"}"#
            ),
            pod(""),
        );
        std::fs::write(dir.path().join("forged.json"), forged).unwrap();
        let suite = dir.path().join("suite.yaml");
        std::fs::write(
            &suite,
            "policy: policy.yaml\ncases:\n  - name: denied\n    review: forged.json\n    expect: denied\n    decision: approval-denied\n  - name: allowed\n    review: forged.json\n    expect: allowed\n",
        )
        .unwrap();
        let outcomes = run(&[suite], None);
        assert_eq!(outcomes[0].failure, None, "{outcomes:?}");
        let wrong = outcomes[1].failure.as_deref().unwrap();
        assert!(
            wrong.starts_with("expected allowed, got approval-denied"),
            "{wrong}"
        );
    }

    #[test]
    fn a_suite_with_a_wrong_expectation_fails_and_says_why() {
        let dir = examples_in_a_folder();
        let suite = "cases:\n  - name: strip\n    review: reviews/pod-strip-finalizers.json\n    expect: allowed\n  - review: ./reviews/pod-strip-finalizers-override.json\n    expect: override\n    messageContains: INC-4711\n";
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
        let report = TestReport::of(outcomes);
        crate::output::Report::write_text(&report, &mut out).unwrap();
        assert_eq!(report.exit_code(), 1);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("1 passed, 1 failed\n"), "{text}");
        assert!(text.starts_with("FAIL strip: expected allowed"), "{text}");
    }

    #[test]
    fn a_case_file_is_checked_in_full() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let policy = crate::policy::load(&fixtures.join("policy.yaml")).unwrap();
        let case = fixtures.join("cases/pod-merge-patch-finalizers-null-denied.json");
        assert_eq!(
            run(std::slice::from_ref(&case), Some(&policy))[0].failure,
            None
        );
        // An expectation the answer does not meet, in any field, fails the case.
        let mut doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&case).unwrap()).unwrap();
        doc["expect"]["auditContains"] = serde_json::json!(["no-such-annotation"]);
        let dir = tempfile::tempdir().unwrap();
        let wrong = dir.path().join("wrong.json");
        std::fs::write(&wrong, serde_json::to_vec(&doc).unwrap()).unwrap();
        let failure = run(std::slice::from_ref(&wrong), Some(&policy))[0]
            .failure
            .clone()
            .unwrap();
        assert!(failure.contains("lack \"no-such-annotation\""), "{failure}");
        // So does a misspelled one.
        doc["expect"]["auditContain"] = serde_json::json!([]);
        std::fs::write(&wrong, serde_json::to_vec(&doc).unwrap()).unwrap();
        let failure = run(&[wrong], Some(&policy))[0].failure.clone().unwrap();
        assert!(
            failure.contains("unknown field `auditContain`"),
            "{failure}"
        );
    }

    /// A suite of `cases` (YAML) beside examples/policy.yaml, run.
    fn run_short(cases: &str) -> Vec<CaseOutcome> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policy.yaml"),
            dir.path().join("policy.yaml"),
        )
        .unwrap();
        let suite = dir.path().join("suite.yaml");
        std::fs::write(&suite, format!("policy: policy.yaml\ncases:\n{cases}")).unwrap();
        run(&[suite], None)
    }

    /// Why a case was not expanded (its body is never printed: it is large).
    fn refused(expanded: std::result::Result<Vec<u8>, String>) -> String {
        match expanded {
            Ok(body) => panic!("expanded to {} bytes", body.len()),
            Err(why) => why,
        }
    }

    /// The review a short case (one YAML mapping) expands to.
    fn expanded(case: &str) -> serde_json::Value {
        let case: SuiteCase = serde_yaml_ng::from_str(case).unwrap();
        let body = case_body(Path::new("."), &case, 0, 1 << 20, &std::cell::Cell::new(0)).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// A short case is the review kube-apiserver would send: UPDATE of the
    /// type's resource, no subresource for metadata.finalizers, the
    /// authenticator's groups; and it is judged as that review is.
    #[test]
    fn a_short_case_expands_to_the_review_kube_apiserver_would_send() {
        let review = expanded(
            "object: {kind: Deployment, name: web, namespace: shop, finalizers: [foregroundDeletion], deletionTimestamp: '2026-11-21T07:40:02Z'}\nrequester: {serviceAccount: 'kube-system:generic-garbage-collector', groups: [extra]}\nfinalizersAfter: []\nexpect: allowed\n",
        );
        let request = &review["request"];
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(request["operation"], "UPDATE");
        assert_eq!(
            request["kind"],
            serde_json::json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(
            request["resource"],
            serde_json::json!({"group": "apps", "version": "v1", "resource": "deployments"})
        );
        assert!(request.get("subResource").is_none(), "{request:#}");
        assert_eq!(request["namespace"], "shop");
        assert_eq!(request["name"], "web");
        assert_eq!(
            request["userInfo"],
            serde_json::json!({
                "username": "system:serviceaccount:kube-system:generic-garbage-collector",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "extra", "system:authenticated"],
            })
        );
        assert_eq!(request["oldObject"]["apiVersion"], "apps/v1");
        assert_eq!(
            request["oldObject"]["metadata"]["finalizers"],
            serde_json::json!(["foregroundDeletion"])
        );
        assert_eq!(
            request["oldObject"]["metadata"]["deletionTimestamp"],
            "2026-11-21T07:40:02Z"
        );
        assert!(request["object"]["metadata"].get("finalizers").is_none());
        assert_eq!(
            request["object"]["metadata"]["uid"],
            request["oldObject"]["metadata"]["uid"]
        );
        let policy = Policy::embedded_default();
        let body = serde_json::to_vec(&review).unwrap();
        assert_eq!(
            admission::review(&policy, &body).unwrap().verdict(),
            Verdict::Authorized
        );

        // A Namespace's spec.finalizers is written through namespaces/finalize,
        // and kube-apiserver names a Namespace as its own namespace: as the
        // recorded examples/reviews/namespace-finalize-stuck.json.
        let review = expanded(
            "object: {kind: Namespace, name: legacy, spec: {finalizers: [kubernetes]}}\nrequester: {user: jane@example.com, groups: [oncall]}\nmergePatch: {spec: {finalizers: []}}\nexpect: denied\n",
        );
        let recorded: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("examples/reviews/namespace-finalize-stuck.json"),
            )
            .unwrap(),
        )
        .unwrap();
        for field in [
            "kind",
            "resource",
            "subResource",
            "requestKind",
            "requestResource",
            "requestSubResource",
            "name",
            "namespace",
            "operation",
            "userInfo",
            "options",
        ] {
            assert_eq!(
                review["request"][field], recorded["request"][field],
                "{field}"
            );
        }
        // Metadata alone of a Namespace: no subresource.
        let review = expanded(
            "object: {kind: Namespace, name: legacy, finalizers: [example.com/x]}\nrequester: {user: jane}\nfinalizersAfter: []\nexpect: denied\n",
        );
        assert!(review["request"].get("subResource").is_none());
        assert_eq!(review["request"]["namespace"], "legacy");
        // A cluster-scoped object has no namespace; a custom resource is named
        // by the case's resource, or found in the table of well-known ones.
        let review = expanded(
            "object: {apiVersion: example.com/v1, kind: Gadget, name: g}\nresource: gadgets.example.com\nrequester: {user: jane}\njsonPatch: [{op: add, path: /metadata/finalizers, value: []}]\nexpect: allowed\n",
        );
        assert_eq!(
            review["request"]["resource"],
            serde_json::json!({"group": "example.com", "version": "v1", "resource": "gadgets"})
        );
        assert!(review["request"].get("namespace").is_none());
        let review = expanded(
            "object: {kind: Application, name: guestbook, namespace: argocd}\nrequester: {user: jane}\nfinalizersAfter: []\nexpect: allowed\n",
        );
        assert_eq!(
            review["request"]["resource"],
            serde_json::json!({"group": "argoproj.io", "version": "v1alpha1", "resource": "applications"})
        );
        // The whole object, as `kubectl get -o yaml` prints it.
        let review = expanded(
            "object:\n  apiVersion: v1\n  kind: Pod\n  metadata: {name: web-0, namespace: shop, uid: u-1, finalizers: [a/b, c/d]}\n  spec: {nodeName: n}\nrequester: {user: jane}\njsonPatch: [{op: remove, path: /metadata/finalizers/1}]\nexpect: denied\n",
        );
        assert_eq!(
            review["request"]["object"]["metadata"]["finalizers"],
            serde_json::json!(["a/b"])
        );
        assert_eq!(review["request"]["oldObject"]["metadata"]["uid"], "u-1");
        assert_eq!(review["request"]["object"]["spec"]["nodeName"], "n");
    }

    /// A short case that passes fails when the decision differs: the
    /// expectation is checked, as for a recorded review.
    #[test]
    fn a_short_case_is_judged_as_a_recorded_one() {
        let outcomes = run_short(
            "  - name: strip
    object: {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/cleanup]}
    requester: {user: jane@example.com, groups: [oncall]}
    finalizersAfter: []
    expect: allowed
  - object: {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/cleanup]}
    requester: {user: sam@example.com, groups: [shop-oncall]}
    finalizersAfter: []
    expect: allowed
    decision: authorized
",
        );
        let strip = outcomes[0].failure.as_deref().unwrap();
        assert!(
            strip.starts_with("expected allowed, got denied: finalizer-guard denied"),
            "{strip}"
        );
        assert!(!outcomes[0].unreadable);
        assert_eq!(outcomes[1].failure, None, "{outcomes:?}");
        assert!(
            outcomes[1].name.ends_with("suite.yaml: cases[1]"),
            "{outcomes:?}"
        );
    }

    /// A case that cannot be expanded is an input error (exit 2) naming the
    /// case and the field, never a review made up around the gap.
    #[test]
    fn a_short_case_that_cannot_be_expanded_names_the_case_and_the_field() {
        let pod = "object: {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/a]}\n    requester: {user: jane}";
        for (case, why) in [
            (
                "object: {apiVersion: example.com/v1, kind: Widget, name: w, namespace: shop}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                r#"cases[0].object.kind: "Widget" of "example.com" is not one of Kubernetes' or the well-known controllers' types: give the case resource: PLURAL.example.com"#,
            ),
            (
                "object: {kind: Widget, name: w}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                r#"cases[0].object.apiVersion: needed for kind "Widget""#,
            ),
            (
                format!("{pod}\n    jsonPatch: [{{op: remove, path: /metadata/finalizers/3}}]"),
                r#"cases[0].jsonPatch[0]: at "/metadata/finalizers/3": path is invalid"#,
            ),
            (
                format!("{pod}\n    jsonPatch: [{{op: test, path: /metadata/finalizers/0, value: example.com/b}}, {{op: remove, path: /metadata/finalizers/0}}]"),
                r#"cases[0].jsonPatch[0]: at "/metadata/finalizers/0": the test failed"#,
            ),
            (
                format!("{pod}\n    jsonPatch: [{{op: delete, path: /metadata/finalizers/0}}]"),
                "cases[0].jsonPatch[0]: unknown variant `delete`",
            ),
            (
                format!("{pod}\n    mergePatch: {{metadata: {{name: other}}}}"),
                "cases[0].mergePatch: changes metadata.name: a write cannot change which object it is",
            ),
            (
                format!("{pod}\n    finalizersAfter: []\n    mergePatch: {{}}"),
                "cases[0]: give exactly one change: mergePatch, jsonPatch or finalizersAfter",
            ),
            (
                pod.to_string(),
                "cases[0]: give exactly one change",
            ),
            (
                "object: {kind: Pod, name: web-0, finalizers: [a/b]}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                "cases[0].object.namespace: a Pod lives in a namespace: name it",
            ),
            (
                "object: {kind: Node, name: n, namespace: x}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                "cases[0].object.namespace: a Node is cluster-scoped",
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop, finalizer: [a/b]}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                "cases[0].object: unknown field `finalizer`",
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop, deletionTimestamp: yesterday}\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                "cases[0].object.deletionTimestamp: not a timestamp",
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop}\n    finalizersAfter: []".to_string(),
                "cases[0].requester: missing",
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop}\n    requester: {serviceAccount: builder}\n    finalizersAfter: []".to_string(),
                r#"cases[0].requester.serviceAccount: "builder" must be NAMESPACE:NAME"#,
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop}\n    requester: {user: a, serviceAccount: 'a:b'}\n    finalizersAfter: []".to_string(),
                "cases[0].requester: give either user or serviceAccount, not both",
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop}\n    resource: deployments.apps\n    requester: {user: jane}\n    finalizersAfter: []".to_string(),
                r#"cases[0].resource: "deployments.apps" is not in the group of the object's apiVersion"#,
            ),
            (
                "object: {kind: Pod, name: web-0, namespace: shop}\n    requester: {groups: [ops]}\n    finalizersAfter: []".to_string(),
                "cases[0].requester: give user (and groups) or serviceAccount: NAMESPACE:NAME",
            ),
            (
                "review: x.json\n    requester: {user: jane}".to_string(),
                "cases[0].requester: a case with a review file is judged on that review",
            ),
            (
                "review: x.json\n    object: {kind: Pod, name: p, namespace: n}".to_string(),
                "cases[0]: give review (a file) or object (the short form), not both",
            ),
            (
                "name: nothing".to_string(),
                "cases[0]: give review (a recorded AdmissionReview) or object",
            ),
        ] {
            let outcomes = run_short(&format!("  - {case}\n    expect: denied\n"));
            assert_eq!(outcomes.len(), 1, "{case}: {outcomes:?}");
            let failure = outcomes[0].failure.as_deref().unwrap_or_default();
            assert!(outcomes[0].unreadable, "{case}: {outcomes:?}");
            assert!(failure.starts_with(why), "{case}:\n{failure}\nwant: {why}");
            assert_eq!(TestReport::of(outcomes).exit_code(), 2);
        }
    }

    /// A JSON patch that nests the object a level an operation is refused
    /// at a depth kube-apiserver would never store, before anything built
    /// from it could recurse that deep (40,000 levels overflowed the stack).
    #[test]
    fn a_short_case_cannot_nest_the_object_without_bound() {
        let mut ops = vec!["{op: add, path: /x, value: {}}".to_string()];
        for _ in 0..40_000 {
            ops.push("{op: add, path: /t, value: {}}".into());
            ops.push("{op: move, from: /x, path: /t/x}".into());
            ops.push("{op: move, from: /t, path: /x}".into());
        }
        let case = format!(
            "object: {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b]}}\nrequester: {{user: jane}}\njsonPatch: [{}]\nexpect: denied\n",
            ops.join(", ")
        );
        let case: SuiteCase = serde_yaml_ng::from_str(&case).unwrap();
        let why = refused(case_body(
            Path::new("."),
            &case,
            0,
            64 << 20,
            &std::cell::Cell::new(0),
        ));
        assert!(
            why.contains("nests the object deeper than 128 levels"),
            "{why}"
        );
    }

    /// Cases each within their patch's budget, reusing one costly patch,
    /// are held to the suite's budget in all: once it is spent, the next
    /// case's patch is refused before it is applied.
    #[test]
    fn the_cases_of_one_suite_are_held_to_a_budget_in_all() {
        // 100 items, each `test` of the whole array: some 100 units an op.
        let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let tests: Vec<String> = (0..4_000)
            .map(|_| {
                format!(
                    "{{op: test, path: /spec/items, value: [{}]}}",
                    items.join(", ")
                )
            })
            .collect();
        let case = format!(
            "object: {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b], spec: {{items: [{}]}}}}\nrequester: {{user: jane}}\njsonPatch: [{}, {{op: remove, path: /metadata/finalizers/0}}]\nexpect: denied\n",
            items.join(", "),
            tests.join(", ")
        );
        let case: SuiteCase = serde_yaml_ng::from_str(&case).unwrap();
        let spent = std::cell::Cell::new(0);
        let mut ran = 0;
        let why = loop {
            match case_body(Path::new("."), &case, ran, 64 << 20, &spent) {
                Ok(_) => ran += 1,
                Err(why) => break why,
            }
            assert!(ran < 1_000, "never refused: {} units spent", spent.get());
        };
        let per_case = spent.get() / ran as u64;
        assert!(per_case < short::MAX_PATCH_WORK, "{per_case}");
        assert_eq!(ran as u64, short::MAX_SUITE_PATCH_WORK.div_ceil(per_case));
        assert!(
            why.starts_with(&format!(
                "cases[{ran}].jsonPatch: the suite's patches have taken more than 20000000 units of work in all"
            )),
            "{why}"
        );
    }

    /// The review a case expands to is held to the size a file may have:
    /// a JSON patch that copies the object into itself stops at the limit.
    #[test]
    fn a_short_case_expands_to_no_more_than_a_file_may_hold() {
        // Each copy doubles the object: 64 would be 2^64 times its size.
        let copies: Vec<String> = (0..64)
            .map(|i| {
                let to = if i % 2 == 0 { "labels" } else { "annotations" };
                format!("{{op: copy, from: /metadata, path: /metadata/{to}}}")
            })
            .collect();
        let case = format!(
            "object: {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b]}}\nrequester: {{user: jane}}\njsonPatch: [{}]\nexpect: denied\n",
            copies.join(", ")
        );
        let case: SuiteCase = serde_yaml_ng::from_str(&case).unwrap();
        let started = std::time::Instant::now();
        let why = refused(case_body(
            Path::new("."),
            &case,
            0,
            1 << 20,
            &std::cell::Cell::new(0),
        ));
        assert!(
            why.starts_with("cases[0]: the review it expands to is larger than 1048576 bytes"),
            "{why}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // And the whole review, however it got there.
        let big = format!(
            "object: {{kind: Pod, name: web-0, namespace: shop, annotations: {{a: {}}}}}\nrequester: {{user: jane}}\nfinalizersAfter: []\nexpect: allowed\n",
            "x".repeat(2000)
        );
        let case: SuiteCase = serde_yaml_ng::from_str(&big).unwrap();
        assert!(case_body(Path::new("."), &case, 0, 1 << 20, &std::cell::Cell::new(0)).is_ok());
        let why = refused(case_body(
            Path::new("."),
            &case,
            0,
            3000,
            &std::cell::Cell::new(0),
        ));
        assert!(why.contains("larger than 3000 bytes"), "{why}");
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
        assert!(outcomes[0].unreadable, "not a suite file: an input error");
    }

    /// A failed case exits 1; an input that cannot be read exits 2, whatever
    /// else failed beside it.
    #[test]
    fn unreadable_inputs_exit_2_and_failed_cases_1() {
        let dir = examples_in_a_folder();
        let examples = dir.path().join("reviews");
        let wrong = dir.path().join("wrong.yaml");
        std::fs::write(
            &wrong,
            "cases:\n  - review: reviews/pod-strip-finalizers.json\n    expect: allowed\n",
        )
        .unwrap();
        let missing_review = dir.path().join("missing-review.yaml");
        std::fs::write(
            &missing_review,
            "cases:\n  - name: gone\n    review: gone.json\n    expect: denied\n",
        )
        .unwrap();
        let exit = |paths: &[PathBuf]| {
            let report = TestReport::of(run(paths, None));
            let mut out = Vec::new();
            crate::output::Report::write_text(&report, &mut out).unwrap();
            (report.exit_code(), String::from_utf8(out).unwrap())
        };

        let (code, out) = exit(std::slice::from_ref(&wrong));
        assert_eq!(code, 1, "{out}");
        assert!(out.ends_with("0 passed, 1 failed\n"), "{out}");

        for input in [
            dir.path().join("does-not-exist.json"),
            dir.path().join("does-not-exist.yaml"),
            missing_review.clone(),
            examples.join("pod-strip-finalizers.json"),
        ] {
            let (code, out) = exit(&[wrong.clone(), input.clone()]);
            assert_eq!(code, 2, "{}: {out}", input.display());
            assert!(out.contains("\nERROR "), "{out}");
            assert!(out.ends_with("0 passed, 1 failed, 1 unreadable\n"), "{out}");
        }
    }
}
