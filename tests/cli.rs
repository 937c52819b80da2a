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

/// 2 means the input could not be read, for every command that reads files.
#[test]
fn an_unreadable_input_exits_2_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone.json");
    let gone_yaml = dir.path().join("gone.yaml");
    let gone = gone.to_str().unwrap();
    let gone_yaml = gone_yaml.to_str().unwrap();
    for args in [
        vec!["check", gone],
        vec![
            "check",
            "--policy",
            gone_yaml,
            "examples/reviews/pod-strip-finalizers.json",
        ],
        vec!["test", gone],
        vec!["test", gone_yaml],
        vec!["test", "examples/suite.yaml", gone],
        vec!["test", "--policy", gone_yaml, "examples/suite.yaml"],
        vec!["policy", "validate", gone_yaml],
        vec!["policy", "suggest", gone],
        vec!["doctor", "--policy", gone_yaml],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(
            format!("{}{}", stdout(&o), stderr(&o)).contains("gone."),
            "{args:?} names the file: {o:?}"
        );
    }
    // A case that decides otherwise than expected is a failure, not an input error.
    let o = run(&["test", "examples/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// A duration a person types wrong is answered in the flag's own terms.
#[test]
fn approve_for_says_which_durations_it_takes() {
    for typed in ["1y", "2d", "soon"] {
        let o = run(&[
            "approve",
            "pod/web-0",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--for",
            typed,
        ]);
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        let err = stderr(&o);
        assert!(err.contains("--for <DURATION>"), "{err}");
        assert!(
            err.contains("ms, s, m or h") && err.contains("30m"),
            "{err}"
        );
        assert!(
            !err.contains("jiff") && !err.contains("Span"),
            "no library talk: {err}"
        );
    }
}

/// The long flags one `--help` lists, and the subcommands it names.
fn help_of(command: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut args = command.to_vec();
    args.push("--help");
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    let text = stdout(&o);
    let mut flags = Vec::new();
    let mut commands = Vec::new();
    let mut section = "";
    for line in text.lines().filter(|l| !l.is_empty()) {
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        let entry = line.trim_start();
        match section {
            "Commands" => {
                let name = entry.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    commands.push(name.to_string());
                }
            }
            // `-n, --namespace <NS>` or `--node <NODE>`; descriptions and
            // possible values are indented further and start otherwise.
            "Options" if entry.starts_with('-') => {
                if let Some(flag) = entry.split([' ', ',']).find(|w| w.starts_with("--")) {
                    flags.push(flag.split(['=', '[']).next().unwrap().to_string());
                }
            }
            _ => {}
        }
    }
    (flags, commands)
}

/// README.md's table of commands gives every long flag `--help` shows, in
/// the command's own row (`doctor`'s rows: `doctor` and `doctor --cluster`).
#[test]
fn readme_names_every_flag_the_commands_take() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## Commands\n")
        .nth(1)
        .expect("a ## Commands section")
        .split("\n## ")
        .next()
        .unwrap();
    // The table's rows, by the command in their first cell.
    let rows: Vec<(&str, &str)> = section
        .lines()
        .filter_map(|line| {
            let cell = line.strip_prefix("| `")?;
            Some((&cell[..cell.find('`')?], line))
        })
        .collect();
    assert!(rows.len() >= 9, "the table of commands: {rows:?}");
    // `--flag`, not merely a longer `--flag-more`.
    let names = |row: &str, flag: &str| {
        row.match_indices(flag).any(|(at, _)| {
            row[at + flag.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
        })
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(command) = queue.pop() {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (flags, subcommands) = help_of(&args);
        for sub in subcommands {
            let mut next = command.clone();
            next.push(sub);
            queue.push(next);
        }
        let name = command.join(" ");
        let own: Vec<&str> = rows
            .iter()
            .filter(|(cell, _)| *cell == name || cell.starts_with(&format!("{name} --")))
            .map(|(_, row)| *row)
            .collect();
        for flag in flags {
            if flag == "--help" || flag == "--version" {
                continue;
            }
            seen += 1;
            if !own.iter().any(|row| names(row, &flag)) {
                missing.push(format!("{name}: {flag}"));
            }
        }
    }
    assert!(seen > 40, "only {seen} flags found: is --help parsed?");
    assert!(
        missing.is_empty(),
        "README.md's table of commands does not give:\n{}",
        missing.join("\n")
    );
}
