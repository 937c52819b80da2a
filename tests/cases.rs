//! Replays the recorded case files offline, through the server's own code path.
//!
//! Every `*.json` in `tests/fixtures/cases/` is decided under
//! `tests/fixtures/policy.yaml`, and every one in `tests/fixtures/cases-warn/`
//! under `tests/fixtures/policy-warn.yaml`, and checked by
//! [`finalizer_guard::offline::cases`] (the checks `finalizer-guard test` runs: the
//! format and its checks are described there).
//!
//! All failing files are reported together, each with every reason.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use finalizer_guard::offline::cases::{
    CaseFile, Expect, check_file, check_raw, check_review, is_qualified_name,
};
use finalizer_guard::policy::{self, Mode, Policy};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The contract asks for a broad corpus; a shrinking one is a regression.
const MIN_ENFORCE_CASES: usize = 50;

fn load_policy(file: &str) -> Policy {
    let path = Path::new(FIXTURES).join(file);
    policy::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn case_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(FIXTURES).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// Checks every file of `dir` under `policy`, then fails once, listing them all.
fn run_dir(dir: &str, policy: &Policy, min_cases: usize) {
    let files = case_files(dir);
    let mut report = String::new();
    let mut failed = 0;
    for path in &files {
        let problems = check_file(policy, path).problems;
        if !problems.is_empty() {
            failed += 1;
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let _ = writeln!(report, "FAIL {dir}/{name}:");
            for p in problems {
                let _ = writeln!(report, "    - {p}");
            }
        }
    }
    println!("{dir}: {} passed, {failed} failed", files.len() - failed);
    assert!(
        failed == 0,
        "{failed} of {} case files in {dir} failed:\n{report}",
        files.len()
    );
    assert!(
        files.len() >= min_cases,
        "{dir} holds {} case files, want at least {min_cases}",
        files.len()
    );
}

#[test]
fn enforce_cases() {
    let policy = load_policy("policy.yaml");
    assert_eq!(
        policy.mode,
        Mode::Enforce,
        "policy.yaml must be in enforce mode"
    );
    run_dir("cases", &policy, MIN_ENFORCE_CASES);
}

#[test]
fn warn_cases() {
    let policy = load_policy("policy-warn.yaml");
    let mut same_rules = load_policy("policy.yaml");
    same_rules.mode = Mode::Warn;
    assert_eq!(
        policy, same_rules,
        "policy-warn.yaml must be policy.yaml with mode: warn"
    );
    run_dir("cases-warn", &policy, 1);
}

#[test]
fn the_checker_itself_can_fail() {
    // Guards against a checker that passes everything: a wrong expectation,
    // a stale uid and a malformed body that is judged must each be reported.
    let policy = load_policy("policy.yaml");
    let path = Path::new(FIXTURES).join("cases/pod-merge-patch-finalizers-null-denied.json");
    let case: CaseFile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let doc = case.review.unwrap();
    let wrong = Expect {
        allowed: Some(true),
        message_contains: vec!["no such text".to_string()],
        ..Expect::default()
    };
    let problems = check_review(&policy, doc.clone(), &wrong).problems;
    assert!(
        problems.iter().any(|p| p.starts_with("allowed=false")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("lacks \"no such text\"")),
        "{problems:?}"
    );
    let silent = Expect {
        allowed: Some(false),
        silent: true,
        ..Expect::default()
    };
    assert!(
        check_review(&policy, doc.clone(), &silent)
            .problems
            .iter()
            .any(|p| p.starts_with("nothing was removed, yet audit annotations")),
    );
    let valid = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{"username":"x"}}}"#;
    assert!(
        !check_raw(&policy, valid, &Expect::default())
            .problems
            .is_empty()
    );
    // Every expectation is checked: an audit annotation that is not there fails.
    let audit = Expect {
        audit_contains: vec!["decision=authorized".to_string()],
        ..Expect::default()
    };
    assert!(
        check_review(&policy, doc, &audit)
            .problems
            .iter()
            .any(|p| p.contains("lack \"decision=authorized\"")),
    );
    assert!(is_qualified_name("removed-finalizers"));
    assert!(is_qualified_name("a"));
    assert!(!is_qualified_name("finalizer-guard.io/decision"));
    assert!(!is_qualified_name("-a"));
    assert!(!is_qualified_name(&"a".repeat(64)));
}
