//! The binary as a user runs it.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A policy file with `text`, in a folder that lives as long as the guard.
fn policy_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// `serve` with this policy must refuse to start: exit 1, and why on stderr.
fn serve_refusal(policy: &Path) -> String {
    let serve = bin()
        .args(["serve", "--policy", policy.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(1));
    stderr(&serve)
}

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
fn certs_writes_a_chain_with_service_sans_and_prints_the_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = run(&[
        "certs",
        "--service",
        "fg",
        "--namespace",
        "ops",
        "--out",
        out.to_str().unwrap(),
        "--dns",
        "fg.example.com",
        "--ip",
        "10.0.0.7",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(Path::new(&out.join(f)).exists(), "{f}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "tls.key is readable by others");
    }
    use base64::Engine;
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(stdout(&o).trim())
        .unwrap();
    assert_eq!(bundle, std::fs::read(out.join("ca.crt")).unwrap());
    let err = stderr(&o);
    for san in [
        "fg.ops.svc",
        "fg.ops.svc.cluster.local",
        "fg.example.com",
        "10.0.0.7",
    ] {
        assert!(err.contains(san), "{err}");
    }

    // Re-running keeps the CA, so the caBundle in the cluster stays valid.
    let again = run(&[
        "certs",
        "--service",
        "fg",
        "--namespace",
        "ops",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(stdout(&again), stdout(&o));
}

#[test]
fn policy_validate_names_every_problem() {
    let ok = run(&["policy", "validate", "tests/fixtures/policy.yaml"]);
    assert_eq!(ok.status.code(), Some(0));
    assert!(
        stdout(&ok).contains("valid (mode enforce"),
        "{}",
        stdout(&ok)
    );

    let (_dir, bad) =
        policy_file("rules:\n  - finalizers: [\"a*b\"]\n    serviceAccounts: [nocolon]\n");
    let o = run(&["policy", "validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("rules[0].finalizers: \"a*b\""), "{out}");
    assert!(
        out.contains("rules[0].serviceAccounts: \"nocolon\" must be NAMESPACE:NAME"),
        "{out}"
    );
}

#[test]
fn doctor_and_serve_refuse_a_policy_that_blocks_builtin_controllers() {
    let ok = run(&["doctor"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));

    let (_dir, policy) = policy_file("builtinControllers: false\n");
    let o = run(&["doctor", "--policy", policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(
            "BLOCKED namespace controller (system:serviceaccount:kube-system:namespace-controller) removing finalizer \"kubernetes\" from namespaces: denied"
        ),
        "{}",
        stdout(&o)
    );

    let refused = serve_refusal(&policy);
    assert!(
        refused.contains("would block Kubernetes' own controllers"),
        "{refused}"
    );
    // Logs to a pipe carry no colour escapes.
    assert!(
        refused.contains("ERROR") && !refused.contains('\x1b'),
        "{refused:?}"
    );
}

#[test]
fn test_runs_the_example_suite_and_fails_on_a_wrong_expectation() {
    let o = run(&["test", "examples/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).ends_with("4 passed, 0 failed\n"));

    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    let text = std::fs::read_to_string("examples/suite.yaml")
        .unwrap()
        .replace(
            "policy: policy.yaml",
            &format!(
                "policy: {}/examples/policy.yaml",
                env!("CARGO_MANIFEST_DIR")
            ),
        )
        .replace(
            "review: reviews/",
            &format!("review: {}/examples/reviews/", env!("CARGO_MANIFEST_DIR")),
        )
        .replacen("expect: denied", "expect: allowed", 1);
    std::fs::write(&suite, text).unwrap();
    let o = run(&["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("FAIL a person strips a pod's finalizer: expected allowed, got denied: "),
        "{out}"
    );
    assert!(out.ends_with("3 passed, 1 failed\n"), "{out}");
}

#[test]
fn cluster_commands_exit_2_on_usage_and_connection_errors() {
    // Nothing selected.
    let o = run(&["unstick"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("name objects as TYPE/NAME"), "{o:?}");
    // --reason needs --detail; --force-delete needs --reason.
    assert_eq!(
        run(&["unstick", "pods", "--reason", "node-lost"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["unstick", "pods", "--force-delete"]).status.code(),
        Some(2)
    );
    // Only a server dry run exists.
    let o = run(&["unstick", "pods", "--dry-run=client"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // No kubeconfig to read: said, and exit 2.
    let o = bin()
        .args(["unstick", "pods", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("kubeconfig: /nonexistent/kubeconfig"),
        "{o:?}"
    );
    // An API server that does not answer: said, with its address.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let o = bin()
        .args([
            "approve",
            "pod/web-0",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--for",
            "1h",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("cannot reach the API server: https://127.0.0.1:1/"),
        "{o:?}"
    );
}

#[test]
fn doctor_cluster_exits_2_when_it_cannot_talk_to_a_cluster() {
    let o = bin()
        .args([
            "doctor",
            "--cluster",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("kubeconfig: /nonexistent/kubeconfig"),
        "{o:?}"
    );
    // A kubeconfig without --cluster is a mistake, not ignored.
    let o = run(&["doctor", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("add --cluster"), "{o:?}");
    // -o json belongs to --cluster.
    assert_eq!(run(&["doctor", "-o", "json"]).status.code(), Some(2));
}

#[test]
fn policy_suggest_reads_evidence_and_merges_into_a_valid_policy() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let event = |id: &str, user: &str, finalizers: &str| {
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "auditID": id, "stage": "ResponseComplete",
            "user": {"username": user, "groups": ["system:authenticated"]},
            "objectRef": {"resource": "widgets", "apiGroup": "example.com", "namespace": "team-a", "name": "w"},
            "requestReceivedTimestamp": "2026-11-23T19:00:00Z",
            "annotations": {
                "finalizers.finalizer-guard.io/decision": "would-deny",
                "finalizers.finalizer-guard.io/unauthorized-finalizers": finalizers,
            },
        })
        .to_string()
    };
    std::fs::write(
        &log,
        [
            event("1", "system:serviceaccount:ops:widgets", "example.com/a"),
            event("2", "system:serviceaccount:ops:widgets", "example.com/b"),
            event("3", "bob@example.com", "example.com/a"),
        ]
        .join("\n"),
    )
    .unwrap();
    let o = bin()
        .args(["policy", "suggest"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let yaml = stdout(&o);
    assert!(
        yaml.contains("serviceAccounts: [\"ops:widgets\"]"),
        "{yaml}"
    );
    assert!(yaml.contains("finalizers: [\"example.com/*\"]"), "{yaml}");
    assert!(yaml.contains("#   bob@example.com: stripped"), "{yaml}");
    assert!(stderr(&o).contains("3 would-deny removal(s)"), "{o:?}");

    let (_policy_dir, base) = policy_file("mode: warn\nrules: []\n");
    let o = bin()
        .args(["policy", "suggest", "--merge"])
        .arg(&base)
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let merged = dir.path().join("merged.yaml");
    std::fs::write(&merged, stdout(&o)).unwrap();
    let o = bin()
        .args(["policy", "validate"])
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("valid (mode warn, 1 rules"), "{o:?}");

    // Not evidence of any kind: exit 2, naming the file.
    let o = bin()
        .args(["policy", "suggest"])
        .arg(&base)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("neither webhook audit records"),
        "{o:?}"
    );
}

/// `serve` refuses this policy, and so does `policy validate`, through the
/// same check; warn mode serves it, and validate says what enforce would refuse.
#[test]
fn policy_validate_refuses_what_serve_refuses() {
    let (_dir, blocks) = policy_file("builtinControllers: false\n");
    let refused = serve_refusal(&blocks);
    assert!(
        refused.contains("the policy would block Kubernetes' own controllers"),
        "{refused}"
    );
    let o = run(&["policy", "validate", blocks.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!(
            "{}: the policy would block Kubernetes' own controllers (refused in enforce mode): ",
            blocks.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("namespace controller (system:serviceaccount:kube-system:namespace-controller) removing finalizer \"kubernetes\""),
        "{out}"
    );
    assert!(!out.contains("valid ("), "{out}");

    // Warn mode: served (logging what it would block), so valid, with a warning.
    let (_dir, warn) = policy_file("mode: warn\nbuiltinControllers: false\n");
    let o = run(&["policy", "validate", warn.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains(": valid (mode warn"), "{o:?}");
    assert!(
        stderr(&o).contains("warning: ")
            && stderr(&o).contains("refused in enforce mode: it would block the job controller"),
        "{o:?}"
    );

    // Whatever makes serve refuse at start makes validate exit non-zero.
    for policy in [
        "builtinControllers: false\n",
        "mode: enforce\nbuiltinControllers: false\nrules:\n  - finalizers: [\"kubernetes.io/pvc-protection\"]\n    users: [system:kube-controller-manager]\n",
        "rules:\n  - finalizers: [a]\n    usrs: [bob]\n",
        "mode: block\n",
    ] {
        let (_dir, path) = policy_file(policy);
        serve_refusal(&path);
        let o = run(&["policy", "validate", path.to_str().unwrap()]);
        assert_ne!(o.status.code(), Some(0), "{policy:?}: {o:?}");
    }
}
