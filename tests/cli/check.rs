//! `check`: reviews judged offline, its exit codes and JSON, and the
//! override annotation's entries.

use super::*;

#[test]
fn check_prints_one_line_per_file_with_the_contract_format() {
    let o = run(&[
        "check",
        "examples/reviews/pod-strip-finalizers.json",
        "examples/reviews/pod-strip-finalizers-override.json",
        "examples/reviews/deployment-foreground-deletion-gc.json",
        "Cargo.toml",
        "does-not-exist.json",
    ]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with(
        "examples/reviews/pod-strip-finalizers.json: denied: finalizer-guard denied removing finalizer \"example.com/cleanup\""
    ));
    assert_eq!(
        lines[1],
        "examples/reviews/pod-strip-finalizers-override.json: allowed"
    );
    assert_eq!(
        lines[2],
        "examples/reviews/deployment-foreground-deletion-gc.json: allowed"
    );
    assert!(
        lines[3].starts_with("Cargo.toml: error: body is not"),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].starts_with("does-not-exist.json: error: "),
        "{}",
        lines[4]
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn check_exit_codes_and_json() {
    let allowed = run(&[
        "check",
        "examples/reviews/pod-strip-finalizers-override.json",
    ]);
    assert_eq!(allowed.status.code(), Some(0));
    let denied = run(&[
        "check",
        "--json",
        "examples/reviews/namespace-finalize-stuck.json",
    ]);
    assert_eq!(denied.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_str(stdout(&denied).trim()).unwrap();
    assert_eq!(
        line["file"],
        "examples/reviews/namespace-finalize-stuck.json"
    );
    assert_eq!(line["allowed"], false);
    assert_eq!(line["decision"], "denied");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("spec.finalizers \"kubernetes\"")
    );
}

#[test]
fn check_under_a_policy_that_authorizes_the_requester() {
    let (_dir, policy) =
        policy_file("rules:\n  - finalizers: [example.com/*]\n    groups: [oncall]\n");
    let o = run(&[
        "check",
        "--policy",
        policy.to_str().unwrap(),
        "examples/reviews/pod-strip-finalizers.json",
    ]);
    assert_eq!(
        stdout(&o).trim(),
        "examples/reviews/pod-strip-finalizers.json: allowed"
    );
}

#[test]
fn a_bad_policy_is_refused_naming_the_field_and_line() {
    let (_dir, policy) =
        policy_file("mode: enforce\nrules:\n  - finalizers: [a]\n    usrs: [bob]\n");
    let o = run(&[
        "check",
        "--policy",
        policy.to_str().unwrap(),
        "examples/reviews/pod-strip-finalizers.json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("unknown field `usrs`") && err.contains("line 4"),
        "{err}"
    );

    let refused = serve_refusal(&policy);
    assert!(refused.contains("unknown field `usrs`"), "{refused}");
}

#[test]
fn a_review_larger_than_the_webhook_accepts_is_refused() {
    let review = "examples/reviews/pod-strip-finalizers.json";
    let size = std::fs::metadata(review).unwrap().len().to_string();
    let o = run(&["check", "--max-body-bytes", &size, review]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let smaller = (std::fs::metadata(review).unwrap().len() - 1).to_string();
    let o = run(&["check", "--max-body-bytes", &smaller, review]);
    assert_eq!(
        stdout(&o),
        format!(
            "{review}: error: larger than {smaller} bytes: the webhook would answer 413 (--max-body-bytes)\n"
        )
    );
    assert_eq!(o.status.code(), Some(2));
    // The same variable as the webhook's.
    let o = bin()
        .args(["check", review])
        .env("FINALIZER_GUARD_MAX_BODY_BYTES", &smaller)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = run(&["test", "--max-body-bytes", "100", "examples/suite.yaml"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stdout(&o).contains("larger than 100 bytes"), "{o:?}");
}

/// An annotation the decision reads, sent twice, decides nothing: `check`
/// refuses the review as the webhook does (400).
#[test]
fn check_refuses_an_override_annotation_sent_twice() {
    let text =
        std::fs::read_to_string("examples/reviews/pod-strip-finalizers-override.json").unwrap();
    let line = r#""finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off, pod IP 10.244.3.17 released by hand""#;
    assert_eq!(text.matches(line).count(), 1);
    let dir = tempfile::tempdir().unwrap();
    let twice = dir.path().join("twice.json");
    std::fs::write(
        &twice,
        text.replace(
            line,
            &format!("{line},\n\"finalizer-guard.io/override\": null"),
        ),
    )
    .unwrap();
    let twice = twice.to_str().unwrap();
    let o = run(&["check", twice]);
    assert_eq!(
        stdout(&o),
        format!(
            "{twice}: error: body is not an AdmissionReview: request.object.metadata.annotations: duplicate field `finalizer-guard.io/override`\n"
        ),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));
}

/// The example override review, removing `finalizers` with the override `value`.
fn override_review(dir: &Path, name: &str, finalizers: &[&str], value: &str) -> String {
    let text =
        std::fs::read_to_string("examples/reviews/pod-strip-finalizers-override.json").unwrap();
    let mut review: serde_json::Value = serde_json::from_str(&text).unwrap();
    let request = &mut review["request"];
    request["oldObject"]["metadata"]["finalizers"] = serde_json::json!(finalizers);
    request["object"]["metadata"]["annotations"]["finalizer-guard.io/override"] = value.into();
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(&review).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn check_denies_an_override_a_removed_finalizer_does_not_accept() {
    let dir = tempfile::tempdir().unwrap();
    let both = ["example.com/cleanup", "kubernetes.io/pvc-protection"];
    // The embedded default: pvc-protection takes only node-lost.
    let lost = override_review(
        dir.path(),
        "lost.json",
        &both,
        "node-lost: INC-1 worker-3 gone",
    );
    let down = override_review(
        dir.path(),
        "down.json",
        &both,
        "controller-unavailable: INC-2 kube-controller-manager down",
    );
    let only_cleanup = override_review(
        dir.path(),
        "cleanup.json",
        &["example.com/cleanup"],
        "controller-unavailable: INC-2 its operator is down",
    );
    let o = run(&["check", &lost, &down, &only_cleanup]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{lost}: allowed"));
    assert!(
        lines[1].starts_with(&format!("{down}: denied: finalizer-guard denied removing finalizers \"example.com/cleanup\", \"kubernetes.io/pvc-protection\"")),
        "{out}"
    );
    assert!(
        lines[1].contains(
            "is not valid: \"kubernetes.io/pvc-protection\" accepts only node-lost (override.finalizers[0])."
        ) && lines[1].ends_with("REASON one of: node-lost."),
        "{out}"
    );
    // The contract's example: any approved reason still releases a finalizer no entry names.
    assert_eq!(lines[2], format!("{only_cleanup}: allowed"));

    // never: no override at all; --json names it too.
    let (_p, policy) = policy_file(
        "override:\n  finalizers:\n    - finalizers: [\"example.com/*\"]\n      never: true\n",
    );
    let o = run(&[
        "check",
        "--json",
        "--policy",
        policy.to_str().unwrap(),
        &lost,
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let line: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(line["allowed"], false);
    let message = line["message"].as_str().unwrap();
    assert!(
        message.contains("no override releases \"example.com/cleanup\": only its rule or controller (override.finalizers[0])"),
        "{message}"
    );
}

#[test]
fn contradicting_override_entries_are_refused_naming_both() {
    let (_dir, policy) = policy_file(
        "override:\n  finalizers:\n    - finalizers: [\"example.com/*\"]\n      never: true\n    - finalizers: [example.com/cleanup]\n      reasons: [node-lost]\n",
    );
    let o = run(&["policy", "validate", policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains("override.finalizers[1].finalizers: \"example.com/cleanup\" and override.finalizers[0].finalizers \"example.com/*\" can both match \"example.com/cleanup\""),
        "{}",
        stdout(&o)
    );
    assert!(serve_refusal(&policy).contains("override.finalizers[1]"));
}
