//! The binary as a user runs it.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::assert::assert_contains_all;
use common::wait::{LOCAL_POLL, exits_within, poll_blocking, poll_for};

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

#[cfg(unix)]
#[test]
fn certs_reuse_no_ca_that_someone_else_could_have_planted_or_can_change() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Its own CA, in its own folder: reused.
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("reusing the CA in"), "{}", stderr(&o));
    // The folder writable by others: whoever could write there could have
    // put their own CA (and key) in place.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is writable by others (mode 0777)"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("not reusing the CA found there"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A CA key that is a symlink to a key elsewhere.
    let elsewhere = dir.path().join("planted.key");
    std::fs::rename(out.join("ca.key"), &elsewhere).unwrap();
    symlink(&elsewhere, out.join("ca.key")).unwrap();
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symlink"), "{}", stderr(&o));
}

/// `certs` writes each file as a new file renamed into place: a key is
/// readable by its owner only even where the file it replaces was not, and
/// a symlink at a file's name is replaced, the file it led to untouched.
#[cfg(unix)]
#[test]
fn certs_never_keep_a_loose_mode_nor_write_through_a_symlink() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    std::fs::create_dir(&out).unwrap();
    for key in ["tls.key", "client.key"] {
        std::fs::write(out.join(key), "old key\n").unwrap();
        std::fs::set_permissions(out.join(key), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let outside = dir.path().join("outside.pem");
    std::fs::write(&outside, "not yours to write\n").unwrap();
    symlink(&outside, out.join("tls.crt")).unwrap();
    let dangling = dir.path().join("created-through-the-link");
    symlink(&dangling, out.join("ca.key")).unwrap();

    let o = run(&[
        "certs",
        "--out",
        out.to_str().unwrap(),
        "--client",
        "kube-apiserver",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    for (file, mode) in [
        ("ca.key", 0o600),
        ("tls.key", 0o600),
        ("client.key", 0o600),
        ("ca.crt", 0o644),
        ("tls.crt", 0o644),
        ("client.crt", 0o644),
    ] {
        let meta = std::fs::symlink_metadata(out.join(file)).unwrap();
        assert!(meta.file_type().is_file(), "{file} is not a regular file");
        // A umask takes bits away, never adds them.
        assert_eq!(
            meta.permissions().mode() & 0o7777 & !mode,
            0,
            "{file}: {:o}",
            meta.permissions().mode()
        );
        assert!(
            std::fs::read_to_string(out.join(file))
                .unwrap()
                .starts_with("-----BEGIN"),
            "{file}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "not yours to write\n"
    );
    assert!(
        !dangling.exists(),
        "a key was written through a dangling symlink"
    );
    // Nothing left behind but the six files.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ca.crt",
            "ca.key",
            "client.crt",
            "client.key",
            "tls.crt",
            "tls.key"
        ]
    );
}

/// `serve` in dev mode writes its CA into a folder of the user's own that
/// no one else may write in: a folder that is a symlink, or that others
/// may write in (where they could plant a symlink), is refused, saying why;
/// in one of the user's own, a symlink at `ca.crt` is replaced, not followed.
#[cfg(unix)]
#[test]
fn serve_dev_mode_refuses_a_folder_others_control_and_never_follows_a_symlink() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("victim");
    std::fs::write(&outside, "keep me\n").unwrap();
    let serve = |dev: &Path| {
        let mut serve = bin();
        serve
            .args(["serve", "--dev-cert-dir"])
            .arg(dev)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .env_remove("FINALIZER_GUARD_POLICY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        serve
    };
    // A refusal ends at once; a serve that does not refuse is stopped
    // after 30 s, its status then `None`.
    let refused = |dev: &Path| {
        let mut child = serve(dev).spawn().unwrap();
        exits_within(&mut child, Duration::from_secs(30));
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        (o.status.code(), stderr(&o))
    };

    // A folder anyone may write in, with a symlink planted in it.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    symlink(&outside, open.join("ca.crt")).unwrap();
    let (code, err) = refused(&open);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is writable by others (mode 0777)"), "{err}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    // Group-writable: the same.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o770)).unwrap();
    let (code, err) = refused(&open);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is writable by its group (mode 0770)"),
        "{err}"
    );

    // The folder itself a symlink (to a folder of the user's own).
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    symlink(&mine, &link).unwrap();
    let (code, err) = refused(&link);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a symlink"), "{err}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    assert!(!mine.join("ca.crt").exists());

    // A folder of the user's own holding a symlink: replaced, not followed.
    symlink(&outside, mine.join("ca.crt")).unwrap();
    let mut child = serve(&mine).spawn().unwrap();
    let regular = || std::fs::symlink_metadata(mine.join("ca.crt")).is_ok_and(|m| m.is_file());
    poll_blocking(Duration::from_secs(30), LOCAL_POLL, || {
        regular() || child.try_wait().unwrap().is_some()
    });
    let written = regular();
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(written, "ca.crt never became a file of its own: {o:?}");
    assert!(
        std::fs::read_to_string(mine.join("ca.crt"))
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    // A folder it makes is the user's alone.
    let made = dir.path().join("made/dev");
    let mut child = serve(&made).spawn().unwrap();
    poll_blocking(Duration::from_secs(30), LOCAL_POLL, || {
        made.join("ca.crt").exists() || child.try_wait().unwrap().is_some()
    });
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let mode = std::fs::metadata(&made).map(|m| m.permissions().mode() & 0o777);
    assert!(matches!(mode, Ok(m) if m & 0o077 == 0), "{mode:?} {o:?}");
}

/// `certs` refuses a name no certificate check could match
/// ([`a_bad_flag_value_is_repeated_escaped_and_cut_never_raw`] has each
/// flag's words) before it writes anything, and takes a wildcard.
#[test]
fn certs_refuses_a_name_no_certificate_check_could_match_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let out = out.to_str().unwrap();
    let o = run(&["certs", "--out", out, "--dns", "a b"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(!Path::new(out).exists(), "nothing written");

    let o = run(&["certs", "--out", out, "--dns", "*.example.com"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("*.example.com"), "{}", stderr(&o));
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
fn policy_validate_warns_of_rules_that_match_nothing() {
    let (_dir, path) = policy_file(
        "rules:\n  - name: tenant\n    finalizers: [example.com/x]\n    serviceAccounts: [\"team-a:*\"]\n    resources: [pods.core]\n",
    );
    let o = run(&["policy", "validate", path.to_str().unwrap()]);
    // Valid: the policy guards everything, but the rule was meant for someone.
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(out.contains(": valid (mode enforce, 1 rules"), "{out}");
    assert!(
        out.contains(r#"warning: tenant: serviceAccounts "team-a:*" matches nothing"#),
        "{out}"
    );
    assert!(
        out.contains(r#"warning: tenant: resources "pods.core" matches nothing: the core group has no name, write "pods""#),
        "{out}"
    );
    let clean = run(&["policy", "validate", "tests/fixtures/policy.yaml"]);
    assert!(!stdout(&clean).contains("warning"), "{}", stdout(&clean));
}

/// Identity lists too broad to trust fail `policy validate --strict`, each
/// naming its list and why: approvers everyone is in are refused outright
/// (by plain `validate` and by `serve`), a namespace's every ServiceAccount
/// with every finalizer and a preset trusting every ServiceAccount of
/// `default` are warnings.
#[test]
fn policy_validate_strict_refuses_identity_lists_too_broad_to_trust() {
    let approval = |users: &str, groups: &str| {
        format!(
            "override:\n  approval:\n    users: {users}\n    groups: {groups}\n    maxAge: 2h\n"
        )
    };
    let refused: [(String, &[&str]); 2] = [
        (
            approval("[sec-lead]", "[\"system:authenticated\"]"),
            &[
                r#"override.approval.groups: "system:authenticated" is every authenticated user: any of them could approve an override and any other one remove the finalizer, so it would take no second person"#,
            ],
        ),
        (
            approval(
                "[\"system:anonymous\"]",
                "[\"system:unauthenticated\", \"system:serviceaccounts\"]",
            ),
            &[
                r#"override.approval.users: "system:anonymous" is every unauthenticated request: any of them could approve"#,
                r#"override.approval.groups: "system:unauthenticated" is every unauthenticated request: any of them could approve"#,
                r#"override.approval.groups: "system:serviceaccounts" is every ServiceAccount of every namespace: any of them could approve"#,
            ],
        ),
    ];
    for (text, says) in &refused {
        let (_dir, path) = policy_file(text);
        let path = path.to_str().unwrap();
        for strict in [false, true] {
            let args: &[&str] = if strict {
                &["policy", "validate", "--strict", path]
            } else {
                &["policy", "validate", path]
            };
            let o = run(args);
            assert_eq!(o.status.code(), Some(1), "{text}\n{o:?}");
            for said in *says {
                assert!(
                    stdout(&o).contains(&format!("{path}: {said}")),
                    "{}",
                    stdout(&o)
                );
            }
        }
        let refusal = serve_refusal(Path::new(path));
        assert!(refusal.contains(says[0]), "{refusal}");
    }

    let warned = [
        (
            "rules:\n  - finalizers: [\"*\"]\n    groups: [\"system:serviceaccounts:team-a\"]\n",
            r#"rules[0]: groups "system:serviceaccounts:team-a" is every ServiceAccount of namespace team-a, so every pod there (its default ServiceAccount's too): each of them may remove every finalizer (finalizers "*"), so the guard is off for them"#,
        ),
        (
            "presets:\n  - name: crossplane\n    namespace: default\n",
            r#"presets[0].namespace "default": preset:crossplane/providers would trust group "system:serviceaccounts:default", every ServiceAccount of namespace default, where everything that names no namespace runs: each of them may remove "finalizer.managedresource.crossplane.io", "in-use.crossplane.io", so the guard is off for them"#,
        ),
    ];
    for (text, says) in warned {
        let (_dir, path) = policy_file(text);
        let path = path.to_str().unwrap();
        let lax = run(&["policy", "validate", path]);
        assert_eq!(lax.status.code(), Some(0), "{text}\n{lax:?}");
        assert!(
            stdout(&lax).contains(&format!("{path}: warning: {says}")),
            "{}",
            stdout(&lax)
        );
        let strict = run(&["policy", "validate", "--strict", path]);
        assert_eq!(strict.status.code(), Some(1), "{text}\n{strict:?}");
        let out = stdout(&strict);
        assert!(
            out.starts_with(&format!(
                "{path}: refused under --strict: 1 warning (each below)\n"
            )),
            "{out}"
        );
        assert!(out.contains(says), "{out}");
    }
    // The narrower forms, and the preset in its own namespace, pass.
    let (_dir, path) = policy_file(
        "presets: [crossplane]\nrules:\n  - finalizers: [\"example.com/*\"]\n    groups: [\"system:serviceaccounts:team-a\"]\n    namespaces: [team-a]\noverride:\n  approval:\n    groups: [security]\n    maxAge: 2h\n",
    );
    let o = run(&["policy", "validate", "--strict", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

/// The policies of the issue that lock Argo CD out, or switch the guard off,
/// are valid but warned of; `--strict` fails them, each warning still
/// listed with its rule and fix. The shipped policies pass `--strict`.
#[test]
fn policy_validate_strict_fails_on_every_warning() {
    let (_dir, path) = policy_file(
        r#"rules:
  - name: argocd
    finalizers: ["resources-finalizer.argocd.argoproj.io"]
    users: ["argocd-application-controller"]
    resources: ["applications"]
  - name: everyone
    finalizers: ["*"]
    groups: ["system:authenticated"]
"#,
    );
    let path = path.to_str().unwrap();
    let lax = run(&["policy", "validate", path]);
    assert_eq!(lax.status.code(), Some(0), "{lax:?}");
    let warned: Vec<String> = stdout(&lax)
        .lines()
        .filter(|l| l.contains(": warning: "))
        .map(str::to_string)
        .collect();
    assert_eq!(warned.len(), 3, "{}", stdout(&lax));
    for (warning, says) in warned.iter().zip([
        r#"argocd: users "argocd-application-controller" matches nothing if it is a ServiceAccount, which is sent as system:serviceaccount:NAMESPACE:NAME; write serviceAccounts: ["NAMESPACE:argocd-application-controller"]"#,
        r#"argocd: resources "applications" matches nothing: with no group it names the core group, which has no applications; write "applications.argoproj.io""#,
        r#"everyone: groups "system:authenticated" is every authenticated user: each of them may remove every finalizer (finalizers "*"), so the guard is off for them"#,
    ]) {
        assert!(warning.contains(says), "{warning}");
    }

    let strict = run(&["policy", "validate", "--strict", path]);
    assert_eq!(strict.status.code(), Some(1), "{strict:?}");
    let out = stdout(&strict);
    assert!(
        out.starts_with(&format!(
            "{path}: refused under --strict: 3 warnings (each below)\n"
        )),
        "{out}"
    );
    assert!(!out.contains(": valid ("), "{out}");
    for warning in &warned {
        assert!(out.contains(warning.as_str()), "{out}");
    }
    let json = run(&["policy", "validate", "--strict", "-o", "json", path]);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["valid"], false, "{report:#}");
    assert_eq!(report["strict"], true, "{report:#}");
    assert_eq!(
        report["warnings"].as_array().unwrap().len(),
        3,
        "{report:#}"
    );

    // warn mode's would-block is a warning too.
    let (_dir, blocks) = policy_file("mode: warn\nbuiltinControllers: false\n");
    let blocks = blocks.to_str().unwrap();
    assert_eq!(run(&["policy", "validate", blocks]).status.code(), Some(0));
    let o = run(&["policy", "validate", "--strict", blocks]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).contains("refused under --strict"), "{o:?}");
    assert!(
        stderr(&o).contains("served in warn mode, refused in enforce mode"),
        "{o:?}"
    );

    // What ships passes.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for shipped in [
        "examples/policy.yaml",
        "src/policy/default.yaml",
        "tests/fixtures/policy.yaml",
        "tests/fixtures/policy-warn.yaml",
    ] {
        let o = run(&[
            "policy",
            "validate",
            "--strict",
            root.join(shipped).to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{shipped}: {o:?}");
    }
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
    assert!(
        stdout(&o).ends_with("11 passed, 0 failed\n"),
        "{}",
        stdout(&o)
    );

    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    // A suite names files inside its folder: a copy of the examples beside it.
    std::fs::copy("examples/policy.yaml", dir.path().join("policy.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("reviews")).unwrap();
    for entry in std::fs::read_dir("examples/reviews").unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            dir.path().join("reviews").join(entry.file_name()),
        )
        .unwrap();
    }
    let text = std::fs::read_to_string("examples/suite.yaml")
        .unwrap()
        .replacen("expect: denied", "expect: allowed", 1);
    std::fs::write(&suite, text).unwrap();
    let o = run(&["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("FAIL a person strips a pod's finalizer: expected allowed, got denied: "),
        "{out}"
    );
    assert!(out.ends_with("10 passed, 1 failed\n"), "{out}");
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
    let kubeconfig = unreachable_kubeconfig(dir.path());
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

/// A kubeconfig whose API server refuses every connection.
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    kubeconfig
}

#[test]
fn watch_waits_unready_for_an_api_server_it_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = bin()
        .args(["watch", "--admin-listen", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let get = |path: &str| {
        let url = format!("http://127.0.0.1:{port}{path}");
        rt.block_on(async {
            let r = reqwest::Client::new().get(url).send().await.ok()?;
            Some((r.status().as_u16(), r.text().await.unwrap_or_default()))
        })
    };
    // Alive, unready, and saying why, past its first retries.
    let readyz = poll_for(Duration::from_secs(30), Duration::from_millis(100), || {
        assert!(child.try_wait().unwrap().is_none(), "watch exited");
        get("/readyz").filter(|answer| answer.1.contains("cannot reach the API server yet"))
    })
    .expect("/readyz never said why it is not ready within 30 s");
    assert_eq!(readyz.0, 503, "{readyz:?}");
    assert!(readyz.1.contains("https://127.0.0.1:1/"), "{readyz:?}");
    // Still running 2 s on, retrying: the time passing is what is under
    // test (it does not give up and exit), not a wait for a condition.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "watch exited");
    assert_eq!(get("/healthz"), Some((200, "ok\n".to_string())));
    // SIGTERM while waiting: a clean stop.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stderr(&o).contains("retry_in"), "{o:?}");
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
    // -o json is every report's, the offline one's too.
    let o = run(&["doctor", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["blocked"], serde_json::json!([]), "{report:#}");
}

/// `-o json` prints each command's report as JSON on standard output, and
/// nothing else there; `check --json` (hidden) is `check -o json`.
#[test]
fn every_report_has_a_json_form() {
    let json = |args: &[&str]| -> (Option<i32>, serde_json::Value, String) {
        let o = run(args);
        let doc = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {}", stdout(&o)));
        (o.status.code(), doc, stderr(&o))
    };
    let review = "examples/reviews/pod-strip-finalizers.json";
    let (code, line, _) = json(&["check", "-o", "json", review]);
    assert_eq!(code, Some(1));
    assert_eq!(line["file"], review);
    assert_eq!(line["decision"], "denied");
    assert_eq!(
        run(&["check", "--json", review]).stdout,
        run(&["check", "-o", "json", review]).stdout
    );
    // A line per file, whatever the format.
    let o = run(&["check", "-o", "json", review, review]);
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    assert_eq!(
        stdout(&run(&["check", "-o", "text", review])),
        stdout(&run(&["check", review]))
    );

    let (code, report, _) = json(&["test", "-o", "json", "examples/suite.yaml"]);
    assert_eq!(code, Some(0));
    assert_eq!(report["failed"], 0, "{report:#}");
    assert!(report["passed"].as_u64().unwrap() > 0, "{report:#}");
    assert!(report["cases"][0]["name"].is_string(), "{report:#}");

    let (code, report, _) = json(&[
        "policy",
        "validate",
        "-o",
        "json",
        "tests/fixtures/policy.yaml",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(report["valid"], true, "{report:#}");
    assert_eq!(report["policy"]["mode"], "enforce", "{report:#}");
    let (_dir, bad) = policy_file("rules:\n  - finalizers: [\"a*b\"]\n");
    let (code, report, _) = json(&["policy", "validate", "-o", "json", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert_eq!(report["valid"], false, "{report:#}");
    assert!(
        report["errors"][0].as_str().unwrap().contains("a*b"),
        "{report:#}"
    );
    let (_dir, warn) = policy_file("mode: warn\nbuiltinControllers: false\n");
    let (code, report, err) = json(&["policy", "validate", "-o", "json", warn.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(
        !report["wouldBlock"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert!(
        err.contains("served in warn mode, refused in enforce mode"),
        "{err}"
    );

    let (_dir, blocks) = policy_file("builtinControllers: false\n");
    let (code, report, _) = json(&["doctor", "-o", "json", "--policy", blocks.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let blocked = report["blocked"].as_array().unwrap();
    assert!(
        blocked
            .iter()
            .any(|b| b["controller"] == "namespace" && b["verdict"] == "denied"),
        "{report:#}"
    );
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

/// An API server stand-in: enough of kube-apiserver for `doctor --cluster`
/// and `unstick --node` to read an empty cluster whose installed policy
/// (the ConfigMap) is `mode: warn`. Returns its URL (plain HTTP).
async fn empty_cluster() -> String {
    use axum::extract::Request;
    use axum::http::{Method, StatusCode};

    async fn answer(request: Request) -> (StatusCode, [(&'static str, &'static str); 1], String) {
        let json = |status, body: serde_json::Value| {
            (
                status,
                [("content-type", "application/json")],
                body.to_string(),
            )
        };
        let path = request.uri().path().to_string();
        match (request.method().clone(), path.as_str()) {
            (Method::POST, "/apis/authentication.k8s.io/v1/selfsubjectreviews") => json(
                StatusCode::CREATED,
                serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                    "metadata": {},
                    "status": {"userInfo": {"username": "carol", "groups": ["sre-oncall"]}},
                }),
            ),
            // The installed webhook, as manifests/ installs it: its
            // configuration, its Service, the Deployment that Service
            // selects, and the ConfigMap that Deployment mounts.
            (
                Method::GET,
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            ) => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfigurationList", "metadata": {},
                    "items": [{
                        "metadata": {"name": "finalizer-guard"},
                        "webhooks": [{
                            "name": "finalizers.finalizer-guard.io",
                            "clientConfig": {"service": {"namespace": "finalizer-guard", "name": "finalizer-guard"}},
                            "sideEffects": "None", "admissionReviewVersions": ["v1"],
                        }],
                    }],
                }),
            ),
            (Method::GET, "/api/v1/namespaces/finalizer-guard/services/finalizer-guard") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "finalizer-guard", "namespace": "finalizer-guard"},
                    "spec": {"selector": {"app.kubernetes.io/name": "finalizer-guard"}},
                }),
            ),
            (Method::GET, "/apis/apps/v1/namespaces/finalizer-guard/deployments") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
                    "items": [{
                        "metadata": {"name": "finalizer-guard", "namespace": "finalizer-guard"},
                        "spec": {
                            "selector": {"matchLabels": {"app.kubernetes.io/name": "finalizer-guard"}},
                            "template": {
                                "metadata": {"labels": {"app.kubernetes.io/name": "finalizer-guard"}},
                                "spec": {
                                    "containers": [{
                                        "name": "finalizer-guard",
                                        "args": ["serve", "--policy", "/etc/finalizer-guard/policy/policy.yaml"],
                                        "volumeMounts": [{"name": "policy", "mountPath": "/etc/finalizer-guard/policy"}],
                                    }],
                                    "volumes": [{"name": "policy", "configMap": {"name": "finalizer-guard-policy"}}],
                                },
                            },
                        },
                    }],
                }),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/finalizer-guard/configmaps/finalizer-guard-policy",
            ) => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "finalizer-guard-policy", "namespace": "finalizer-guard"},
                    "data": {"policy.yaml": "mode: warn\n"},
                }),
            ),
            // Aggregated discovery: no types served.
            (Method::GET, "/api" | "/apis") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList",
                    "metadata": {}, "items": [],
                }),
            ),
            // Every other list is empty: namespaces, APIServices, pods on a node.
            (Method::GET, _) => json(
                StatusCode::OK,
                serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
            ),
            _ => json(
                StatusCode::NOT_FOUND,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
        }
    }

    let app = axum::Router::new().fallback(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_commands_judge_the_clusters_policy_whatever_the_environment_says() {
    let url = empty_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    // What `serve`'s environment would hold: another policy, that blocks
    // Kubernetes' own controllers.
    let (_env_dir, env_policy) = policy_file("mode: enforce\nbuiltinControllers: false\n");
    let (_flag_dir, flag_policy) = policy_file("mode: enforce\n");
    let env_policy = env_policy.to_str().unwrap().to_string();
    let flag_policy = flag_policy.to_str().unwrap().to_string();
    let run = |args: Vec<&str>| {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let env_policy = env_policy.clone();
        tokio::task::spawn_blocking(move || {
            bin()
                .args(&args)
                .env("FINALIZER_GUARD_POLICY", &env_policy)
                .output()
                .unwrap()
        })
    };

    // doctor --cluster judges the ConfigMap's policy, and says the environment was not read.
    let o = run(vec![
        "doctor",
        "--cluster",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["policy"]["name"], "configmap finalizer-guard/finalizer-guard-policy",
        "{report:#}"
    );
    assert_eq!(report["mode"], "warn", "{report:#}");
    assert_eq!(report["complete"], true, "{report:#}");
    assert!(
        stderr(&o).contains("FINALIZER_GUARD_POLICY is set, and doctor --cluster does not read it"),
        "{o:?}"
    );
    // --policy on the command line does replace it.
    let o = run(vec![
        "doctor",
        "--cluster",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
        "--policy",
        &flag_policy,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["policy"]["name"], flag_policy.as_str(), "{report:#}");
    assert_eq!(report["mode"], "enforce", "{report:#}");
    assert!(!stderr(&o).contains("FINALIZER_GUARD_POLICY"), "{o:?}");

    // unstick explains under the cluster's policy too.
    let o = run(vec![
        "unstick",
        "--node",
        "worker-9",
        "--kubeconfig",
        &kubeconfig,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stdout(&o).contains(
            "as carol under configmap finalizer-guard/finalizer-guard-policy (mode warn):"
        ),
        "{o:?}"
    );
    assert!(stdout(&o).contains("no stuck objects found"), "{o:?}");

    // Every report names the context, the API server and the user, in
    // text and JSON, explaining and releasing (dry run) alike.
    let server = format!("{url}/");
    let line = format!("cluster: context \"x\", API server \"{server}\", as \"carol\"");
    assert!(stdout(&o).contains(&line), "{line}\n{o:?}");
    for args in [
        vec!["doctor", "--cluster"],
        vec!["unstick", "--node", "worker-9"],
        vec![
            "unstick",
            "--node",
            "worker-9",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--dry-run",
            "server",
        ],
    ] {
        let with = |more: &[&'static str]| {
            let mut all = args.clone();
            all.extend(["--kubeconfig", kubeconfig.as_str()]);
            all.extend(more);
            all
        };
        let o = run(with(&[])).await.unwrap();
        assert!(stdout(&o).contains(&line), "{args:?}: {line}\n{o:?}");
        let o = run(with(&["-o", "json"])).await.unwrap();
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            report["cluster"],
            serde_json::json!({"context": "x", "server": server}),
            "{args:?}: {report:#}"
        );
        assert_eq!(report["user"]["username"], "carol", "{args:?}: {report:#}");
    }

    // Offline, doctor reads the environment as before: that policy blocks
    // the built-in controllers.
    let o = run(vec!["doctor"]).await.unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).contains("BLOCKED"), "{o:?}");
}

/// A kube-apiserver audit event carrying the webhook's `would-deny`.
fn audit_event(
    id: &str,
    user: serde_json::Value,
    impersonated: Option<serde_json::Value>,
    object: serde_json::Value,
    finalizers: &str,
) -> String {
    let mut event = serde_json::json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": id,
        "stage": "ResponseComplete", "verb": "update", "user": user, "objectRef": object,
        "requestReceivedTimestamp": "2026-11-23T19:00:00Z",
        "annotations": {
            "finalizers.finalizer-guard.io/decision": "would-deny",
            "finalizers.finalizer-guard.io/unauthorized-finalizers": finalizers,
        },
    });
    if let Some(impersonated) = impersonated {
        event["impersonatedUser"] = impersonated;
    }
    event.to_string()
}

/// One of the webhook's own audit records, a `would-deny`, of a review
/// whose caller was authenticated (`serve --client-ca`).
fn webhook_record(user: &str, groups: &[&str], namespace: &str, finalizers: &[&str]) -> String {
    let removed: Vec<serde_json::Value> = finalizers
        .iter()
        .map(|f| serde_json::json!({"finalizer": f, "field": "metadata.finalizers"}))
        .collect();
    serde_json::json!({
        "time": "2026-11-23T19:00:01Z", "kind": "FinalizerRemoval", "user": user, "groups": groups,
        "operation": "UPDATE", "resource": "widgets.example.com", "namespace": namespace, "name": "w",
        "removedFinalizers": removed, "decision": "would-deny", "mode": "warn", "dryRun": false,
        "authenticated": true,
    })
    .to_string()
}

/// A `serve --record-dir` recording of a `would-deny`, as written (pretty
/// JSON) for a review whose caller was authenticated (`serve --client-ca`).
fn recording(user: &str, namespace: &str, removed: &str) -> String {
    let review = serde_json::json!({
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
        "resource": {"group": "example.com", "version": "v1", "resource": "widgets"},
        "name": "w", "namespace": namespace, "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": {"metadata": {"name": "w", "namespace": namespace, "finalizers": []}},
        "oldObject": {"metadata": {"name": "w", "namespace": namespace, "finalizers": [removed]}},
    }});
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "finalizer-guard.io/v1alpha1", "kind": "Recording",
        "recordedAt": "2026-11-23T19:00:02Z", "mode": "warn", "decision": "would-deny",
        "allowed": true, "authenticated": true, "review": review,
    }))
    .unwrap()
}

/// `policy suggest [--merge BASE] PATHS`: exit 0, its YAML.
fn suggest_ok(base: Option<&Path>, paths: &[&Path]) -> String {
    let mut cmd = bin();
    cmd.args(["policy", "suggest"]);
    if let Some(base) = base {
        cmd.arg("--merge").arg(base);
    }
    let o = cmd.args(paths).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    stdout(&o)
}

/// `yaml` passes `policy validate`; its policy and its top-level keys.
fn validated(yaml: &str) -> (finalizer_guard::policy::Policy, Vec<String>) {
    let (_dir, path) = policy_file(yaml);
    let o = run(&["policy", "validate", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}\n{yaml}");
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
    let keys = value
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    let policy = finalizer_guard::policy::Policy::from_yaml(yaml).unwrap();
    (policy, keys)
}

/// Usernames, finalizers and namespaces that try to end a comment or a
/// quoted value and write policy keys of their own.
const INJECTIONS: [&str; 4] = [
    "x\nmode: warn\noverride:\n  requireDeletion: false\nbuiltinControllers: false\nrules:\n- name: evil\n  finalizers: [\"*\"]\n  users: [mallory]\n#",
    "y\u{2028}mode: warn\u{2028}#",
    "z\u{85}builtinControllers: false\u{85}#",
    "q\"]\nmode: warn\n#\u{202E}\u{0}\u{1b}[2J",
];

#[test]
fn policy_suggest_escapes_what_it_reads_from_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let recordings = dir.path().join("recordings");
    std::fs::create_dir(&recordings).unwrap();
    let sa = "system:serviceaccount:ops:widgets";
    let widget = |ns: &str| serde_json::json!({"resource": "widgets", "apiGroup": "example.com", "namespace": ns, "name": "w"});
    let user =
        |name: &str| serde_json::json!({"username": name, "groups": ["system:authenticated"]});
    let mut log = vec![audit_event(
        "ok",
        user(sa),
        None,
        widget("team-a"),
        "example.com/a",
    )];
    let mut records = Vec::new();
    for (i, bad) in INJECTIONS.iter().enumerate() {
        // The bad value as the person, as a software identity, as a finalizer
        // and as a namespace, in each kind of evidence.
        for (j, name) in [
            bad.to_string(),
            format!("system:{bad}"),
            format!("{sa}{bad}"),
        ]
        .iter()
        .enumerate()
        {
            log.push(audit_event(
                &format!("{i}-{j}"),
                user(name),
                None,
                widget("team-a"),
                "example.com/a",
            ));
            records.push(webhook_record(
                name,
                &["system:authenticated"],
                "team-a",
                &["example.com/a"],
            ));
            std::fs::write(
                recordings.join(format!("rec-{i}-{j}.json")),
                recording(name, "team-a", "example.com/a"),
            )
            .unwrap();
        }
        log.push(audit_event(
            &format!("{i}-f"),
            user(sa),
            None,
            widget("team-a"),
            &format!("example.com/{bad}"),
        ));
        log.push(audit_event(
            &format!("{i}-n"),
            user(sa),
            None,
            widget(&format!("team-a{bad}")),
            "example.com/a",
        ));
        records.push(webhook_record(
            sa,
            &[],
            "team-a",
            &[&format!("example.com/{bad}")],
        ));
        records.push(webhook_record(
            sa,
            &[],
            &format!("team-a{bad}"),
            &["example.com/a"],
        ));
        std::fs::write(
            recordings.join(format!("rec-{i}-f.json")),
            recording(sa, "team-a", &format!("example.com/{bad}")),
        )
        .unwrap();
        std::fs::write(
            recordings.join(format!("rec-{i}-n.json")),
            recording(sa, &format!("team-a{bad}"), "example.com/a"),
        )
        .unwrap();
    }
    let audit = dir.path().join("audit.log");
    std::fs::write(&audit, log.join("\n")).unwrap();
    let webhook = dir.path().join("webhook.log");
    std::fs::write(&webhook, records.join("\n")).unwrap();
    let paths = [audit.as_path(), webhook.as_path(), recordings.as_path()];

    let no_raw_controls = |yaml: &str| {
        let raw = yaml.chars().find(|c| {
            (c.is_control() && *c != '\n') || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202E}')
        });
        assert_eq!(raw, None, "{yaml}");
    };
    let only_the_controller = |policy: &finalizer_guard::policy::Policy, yaml: &str| {
        assert_eq!(policy.rules.len(), 1, "{yaml}");
        let rule = &policy.rules[0];
        assert_eq!(rule.service_accounts, [sa], "{yaml}");
        assert!(rule.users.is_empty() && rule.groups.is_empty(), "{yaml}");
        assert_eq!(
            rule.finalizers,
            [finalizer_guard::policy::config::FinalizerPattern::Exact(
                "example.com/a".into()
            )],
            "{yaml}"
        );
    };

    let yaml = suggest_ok(None, &paths);
    no_raw_controls(&yaml);
    let (policy, keys) = validated(&yaml);
    assert_eq!(keys, ["rules"], "{yaml}");
    only_the_controller(&policy, &yaml);
    // What could not be a rule is still said, escaped, in comments.
    assert!(yaml.contains("x\\nmode: warn\\noverride:"), "{yaml}");
    assert!(yaml.contains("y\\u2028mode: warn"), "{yaml}");

    let (_base_dir, base) = policy_file(
        "mode: enforce\nbuiltinControllers: true\nrules: []\noverride:\n  requireDeletion: true\n",
    );
    let merged = suggest_ok(Some(&base), &paths);
    no_raw_controls(&merged);
    let (policy, keys) = validated(&merged);
    assert_eq!(
        keys,
        ["mode", "builtinControllers", "rules", "override"],
        "{merged}"
    );
    assert_eq!(policy.mode, finalizer_guard::policy::Mode::Enforce);
    assert!(policy.builtin_controllers);
    assert!(policy.override_settings.require_deletion);
    only_the_controller(&policy, &merged);

    // Merged again, and again: nothing more is added.
    let (_merged_dir, merged_path) = policy_file(&merged);
    let twice = suggest_ok(Some(&merged_path), &paths);
    assert_eq!(validated(&twice).0, policy, "{twice}");
    let (_twice_dir, twice_path) = policy_file(&twice);
    assert_eq!(suggest_ok(Some(&twice_path), &paths), twice);
}

#[test]
fn policy_suggest_writes_rules_for_the_impersonated_identity_not_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = serde_json::json!({
        "username": "system:serviceaccount:cattle-impersonation-system:cattle-impersonation-u-7x2k",
        "groups": ["system:serviceaccounts", "system:authenticated"],
    });
    let widget = serde_json::json!({"resource": "widgets", "apiGroup": "example.com", "namespace": "team-a", "name": "w"});
    let log = dir.path().join("audit.log");
    std::fs::write(
        &log,
        [
            audit_event(
                "1",
                proxy.clone(),
                Some(serde_json::json!({"username": "u-7x2k", "groups": ["team-a-admins"]})),
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "2",
                proxy,
                Some(serde_json::json!({"username": "system:serviceaccount:ops:widgets"})),
                widget,
                "example.com/b",
            ),
        ]
        .join("\n"),
    )
    .unwrap();
    let yaml = suggest_ok(None, &[&log]);
    let (policy, _) = validated(&yaml);
    assert_eq!(policy.rules.len(), 1, "{yaml}");
    assert_eq!(
        policy.rules[0].service_accounts,
        ["system:serviceaccount:ops:widgets"],
        "{yaml}"
    );
    assert!(!yaml.contains("cattle-impersonation"), "{yaml}");
    assert!(
        yaml.contains("#   u-7x2k: stripped example.com/a x1"),
        "{yaml}"
    );
}

#[test]
fn policy_suggest_never_writes_rules_for_administrators_or_anonymous_requests() {
    let dir = tempfile::tempdir().unwrap();
    let widget = serde_json::json!({"resource": "widgets", "apiGroup": "example.com", "namespace": "team-a", "name": "w"});
    let user =
        |name: &str, groups: &[&str]| serde_json::json!({"username": name, "groups": groups});
    let log = dir.path().join("audit.log");
    std::fs::write(
        &log,
        [
            audit_event(
                "1",
                user("system:admin", &["system:masters", "system:authenticated"]),
                None,
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "2",
                user("system:anonymous", &["system:unauthenticated"]),
                None,
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "3",
                user(
                    "kube:admin",
                    &["system:cluster-admins", "system:authenticated"],
                ),
                None,
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "4",
                user("kubernetes-admin", &["kubeadm:cluster-admins"]),
                None,
                widget.clone(),
                "example.com/a",
            ),
            // Impersonating an administrator, or a service account put in system:masters.
            audit_event(
                "5",
                user("system:serviceaccount:cattle-system:proxy", &[]),
                Some(user("system:admin", &["system:masters"])),
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "6",
                user("system:serviceaccount:cattle-system:proxy", &[]),
                Some(user(
                    "system:serviceaccount:ops:widgets",
                    &["system:masters"],
                )),
                widget.clone(),
                "example.com/a",
            ),
            audit_event(
                "7",
                user("system:kube-scheduler", &["system:unauthenticated"]),
                None,
                widget,
                "example.com/a",
            ),
        ]
        .join("\n"),
    )
    .unwrap();
    let records = dir.path().join("webhook.log");
    std::fs::write(
        &records,
        [
            webhook_record(
                "system:admin",
                &["system:masters"],
                "team-a",
                &["example.com/b"],
            ),
            webhook_record(
                "system:anonymous",
                &["system:unauthenticated"],
                "team-a",
                &["example.com/b"],
            ),
        ]
        .join("\n"),
    )
    .unwrap();
    let recordings = dir.path().join("recordings");
    std::fs::create_dir(&recordings).unwrap();
    std::fs::write(
        recordings.join("r.json"),
        recording("system:admin", "team-a", "example.com/c"),
    )
    .unwrap();
    let paths = [log.as_path(), records.as_path(), recordings.as_path()];

    let yaml = suggest_ok(None, &paths);
    assert!(validated(&yaml).0.rules.is_empty(), "{yaml}");
    assert!(
        yaml.starts_with("# finalizer-guard policy suggest: 0 rule(s)"),
        "{yaml}"
    );
    assert_contains_all(
        "the suggested policy",
        &yaml,
        &[
            "#   system:admin (a cluster administrator): stripped",
            "#   kube:admin (a cluster administrator): stripped",
            "#   kubernetes-admin (a cluster administrator): stripped",
            "#   system:serviceaccount:ops:widgets (a cluster administrator): stripped",
            "#   system:anonymous (unauthenticated): stripped",
            "#   system:kube-scheduler (unauthenticated): stripped",
        ],
    );
    let (_base_dir, base) = policy_file("mode: warn\nrules: []\n");
    let merged = suggest_ok(Some(&base), &paths);
    assert!(validated(&merged).0.rules.is_empty(), "{merged}");
}

#[test]
fn policy_suggest_scopes_each_rule_to_where_it_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = serde_json::json!({"username": "system:serviceaccount:team-a:operator", "groups": ["system:serviceaccounts"]});
    let platform = serde_json::json!({"username": "system:serviceaccount:platform:operator", "groups": ["system:serviceaccounts"]});
    let object = |resource: &str, group: &str, namespace: Option<&str>| {
        let mut o = serde_json::json!({"resource": resource, "apiGroup": group, "name": "o"});
        if let Some(ns) = namespace {
            o["namespace"] = ns.into();
        }
        o
    };
    let log = dir.path().join("audit.log");
    std::fs::write(
        &log,
        [
            audit_event(
                "1",
                tenant.clone(),
                None,
                object("databases", "db.example.com", Some("team-a")),
                "db.example.com/backup",
            ),
            audit_event(
                "2",
                tenant,
                None,
                object("databases", "db.example.com", Some("team-a")),
                "db.example.com/backup",
            ),
            audit_event(
                "3",
                platform.clone(),
                None,
                object("clusterissuers", "certs.example.com", None),
                "certs.example.com/cleanup",
            ),
            audit_event(
                "4",
                platform.clone(),
                None,
                object("namespaces", "", Some("team-b")),
                "platform.example.com/teardown",
            ),
            audit_event(
                "5",
                platform,
                None,
                object("configmaps", "", Some("team-b")),
                "platform.example.com/teardown",
            ),
        ]
        .join("\n"),
    )
    .unwrap();
    let (_base_dir, base) = policy_file("mode: warn\nrules: []\n");
    let merged = suggest_ok(Some(&base), &[&log]);
    let (policy, _) = validated(&merged);
    // Each rule's service accounts, namespaces and resources.
    type Scope = (Vec<String>, Option<Vec<String>>, Vec<String>);
    let scopes: Vec<Scope> = policy
        .rules
        .iter()
        .map(|r| {
            let resources = r.resources.iter().flatten();
            let resources = resources.map(|r| match r.group.as_str() {
                "" => r.resource.clone(),
                g => format!("{}.{g}", r.resource),
            });
            (
                r.service_accounts.clone(),
                r.namespaces.clone(),
                resources.collect(),
            )
        })
        .collect();
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let platform = v(&["system:serviceaccount:platform:operator"]);
    assert_eq!(
        scopes,
        [
            // Cluster-scoped objects: no namespaces, only their resources.
            (
                platform.clone(),
                None,
                v(&["clusterissuers.certs.example.com"])
            ),
            (platform.clone(), None, v(&["namespaces"])),
            // Seen outside its own namespace (platform): every namespace.
            (platform, None, v(&["configmaps"])),
            // The tenant's operator, seen in its own namespace alone: there, and that resource alone.
            (
                v(&["system:serviceaccount:team-a:operator"]),
                Some(v(&["team-a"])),
                v(&["databases.db.example.com"])
            ),
        ],
        "{merged}"
    );
    // Merged again: nothing added, and the text settles.
    let (_merged_dir, merged_path) = policy_file(&merged);
    let twice = suggest_ok(Some(&merged_path), &[&log]);
    assert_eq!(validated(&twice).0, policy, "{twice}");
    assert!(twice.starts_with("# finalizer-guard policy suggest: 0 rule(s) for controllers; 5 would-deny removal(s) the policy already allows\n"), "{twice}");
    let (_twice_dir, twice_path) = policy_file(&twice);
    assert_eq!(suggest_ok(Some(&twice_path), &[&log]), twice);
}

/// The issue's case, from evidence shaped as kube-apiserver and the webhook
/// write it (tests/fixtures/suggest/flux): Flux's source-controller removing
/// `finalizers.fluxcd.io` from GitRepositories in team-a and team-b in warn mode.
fn flux(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/suggest/flux")
        .join(file)
}

/// `policy suggest ARGS`: exit code, standard output, standard error.
fn suggest_run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let o = bin()
        .args(["policy", "suggest"])
        .args(args)
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

#[test]
fn policy_suggest_writes_a_rule_that_follows_the_controller_to_the_next_namespace() {
    let (_dir, base) = policy_file("mode: warn\nrules: []\n");
    let warn = flux("warn-audit.log");
    let (code, yaml, err) = suggest_run(&["--merge".as_ref(), base.as_os_str(), warn.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("read 9 kube-apiserver audit events; 3 would-deny removal(s)"),
        "{err}"
    );
    assert!(
        yaml.contains("  # seen in team-a, team-b: acts cluster-wide\n  - name: \"flux-system-source-controller\"\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n"),
        "{yaml}"
    );
    let (policy, _) = validated(&yaml);
    assert_eq!(policy.rules.len(), 1, "{yaml}");
    assert_eq!(policy.rules[0].namespaces, None, "{yaml}");

    // Seen in its own namespace alone: scoped there, unless a
    // ClusterRoleBinding lets it update GitRepositories everywhere.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("audit.log");
    let text = std::fs::read_to_string(&warn).unwrap();
    std::fs::write(
        &own,
        text.replace("team-a", "flux-system")
            .replace("team-b", "flux-system"),
    )
    .unwrap();
    let (code, yaml, err) = suggest_run(&[own.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        yaml.contains("  # seen only in its own namespace flux-system\n  - name:"),
        "{yaml}"
    );
    assert!(
        yaml.contains("    namespaces: [\"flux-system\"]\n"),
        "{yaml}"
    );
    let rbac = flux("rbac.json");
    let (code, yaml, err) =
        suggest_run(&["--bindings".as_ref(), rbac.as_os_str(), own.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        yaml.contains(
            "  # bound by ClusterRoleBinding flux-source-controller: acts cluster-wide\n  - name:"
        ),
        "{yaml}"
    );
    assert_eq!(validated(&yaml).0.rules[0].namespaces, None, "{yaml}");

    // A bindings file of neither kind, or not JSON: exit 2, naming it.
    for bad in [base.as_os_str(), warn.as_os_str()] {
        let (code, _, err) = suggest_run(&["--bindings".as_ref(), bad, own.as_os_str()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.starts_with("error: "), "{err}");
    }
}

/// After enforce, team-c is made and the controller is denied there: the
/// denials are evidence, and `--merge` widens the rule that stopped at
/// team-b rather than writing a second one. A person's denial stays a
/// comment.
#[test]
fn policy_suggest_widens_the_rule_enforce_denied_a_controller_by() {
    let policy = flux("policy-enforce.yaml");
    let (audit, records) = (flux("enforce-audit.log"), flux("enforce-webhook.log"));
    let (code, yaml, err) = suggest_run(&[
        "--merge".as_ref(),
        policy.as_os_str(),
        audit.as_os_str(),
        records.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "read 3 webhook audit records, 7 kube-apiserver audit events; 7 denied removal(s)\n"
        ),
        "{err}"
    );
    assert!(!err.contains("0 would-deny"), "{err}");
    assert!(
        err.contains("counted 3 webhook record(s) once, as the kube-apiserver audit event of the same request"),
        "{err}"
    );
    assert!(
        yaml.starts_with(
            "# finalizer-guard policy suggest: 0 rule(s) for controllers, 1 widened\n"
        ),
        "{yaml}"
    );
    assert!(
        yaml.contains("#   alice: stripped finalizers.fluxcd.io x1 in 1 removal(s)"),
        "{yaml}"
    );
    assert!(
        yaml.contains("  # widened by policy suggest: rule \"flux-system-source-controller\" (system:serviceaccount:flux-system:source-controller): 3 denied removal(s) in team-c, outside its namespaces team-a, team-b: team-c added; its namespaces now team-a, team-b (the rule's) and team-c (seen in the evidence), no further (to let it act in every namespace, remove its namespaces by hand)\n  - name: \"flux-system-source-controller\"\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    namespaces: [\"team-a\", \"team-b\", \"team-c\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n"),
        "{yaml}"
    );
    let (widened, _) = validated(&yaml);
    assert_eq!(widened.rules.len(), 1, "{yaml}");
    assert_eq!(
        widened.rules[0].namespaces,
        Some(vec!["team-a".into(), "team-b".into(), "team-c".into()]),
        "{yaml}"
    );
    assert_eq!(widened.mode, finalizer_guard::policy::Mode::Enforce);
    // Merged again: the denials are allowed now, and the text settles.
    let (_dir, merged) = policy_file(&yaml);
    let (code, twice, err) = suggest_run(&[
        "--merge".as_ref(),
        merged.as_os_str(),
        audit.as_os_str(),
        records.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        twice.starts_with("# finalizer-guard policy suggest: 0 rule(s) for controllers; 3 denied removal(s) the policy already allows\n"),
        "{twice}"
    );
    assert_eq!(validated(&twice).0, widened, "{twice}");

    // Without --merge: no rule from the denials alone (anyone can be
    // denied), and a note saying so.
    let (code, yaml, err) = suggest_run(&[audit.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("; 4 denied removal(s)"), "{err}");
    assert!(
        err.contains("note: 3 denied removal(s) by system:serviceaccount:flux-system:source-controller: no rule suggested: "),
        "{err}"
    );
    assert!(yaml.ends_with("\nrules: []\n"), "{yaml}");
    assert!(validated(&yaml).0.rules.is_empty(), "{yaml}");
}

/// A rule for one ServiceAccount in two namespaces, naming no resources.
const TEAM_A_OP: &str = "mode: enforce\nrules:\n  - name: team-a-op\n    finalizers: [\"example.com/cleanup\"]\n    serviceAccounts: [\"team-a:op\"]\n    namespaces: [team-a, team-b]\n";

/// kube-apiserver's audit event of the webhook (enforce) denying team-a:op
/// the removal of example.com/cleanup from a widget in team-c.
const TEAM_C_DENIAL: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"9b1c2d3e-0000-4f5a-8b7c-1d2e3f4a5b6c","stage":"ResponseComplete","requestURI":"/apis/example.com/v1/namespaces/team-c/widgets/w1","verb":"update","user":{"username":"system:serviceaccount:team-a:op","groups":["system:serviceaccounts","system:serviceaccounts:team-a","system:authenticated"]},"objectRef":{"resource":"widgets","namespace":"team-c","name":"w1","apiGroup":"example.com","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","reason":"Forbidden","code":403},"requestReceivedTimestamp":"2026-11-27T09:00:00.000000Z","stageTimestamp":"2026-11-27T09:00:00.004000Z","annotations":{"finalizers.finalizer-guard.io/decision":"denied","finalizers.finalizer-guard.io/mode":"enforce","finalizers.finalizer-guard.io/removed-finalizers":"example.com/cleanup","finalizers.finalizer-guard.io/unauthorized-finalizers":"example.com/cleanup"}}
"#;

/// What team-a:op may remove example.com/cleanup from after the merge.
const TEAM_A_OP_SUITE: &str = "policy: merged.yaml\ncases:
  - name: a widget in team-c (the denial seen)
    object: {apiVersion: example.com/v1, kind: Widget, name: w1, namespace: team-c, finalizers: [example.com/cleanup]}
    resource: widgets.example.com
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: allowed
  - name: a PersistentVolume (cluster-scoped)
    object: {kind: PersistentVolume, name: pv-1, finalizers: [example.com/cleanup]}
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: denied
  - name: a Secret in kube-system
    object: {kind: Secret, name: token, namespace: kube-system, finalizers: [example.com/cleanup]}
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: denied
  - name: a Secret in team-c (not seen)
    object: {kind: Secret, name: token, namespace: team-c, finalizers: [example.com/cleanup]}
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: denied
  - name: a widget in team-d (not seen)
    object: {apiVersion: example.com/v1, kind: Widget, name: w1, namespace: team-d, finalizers: [example.com/cleanup]}
    resource: widgets.example.com
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: denied
  - name: a Secret in team-b (the rule's own)
    object: {kind: Secret, name: token, namespace: team-b, finalizers: [example.com/cleanup]}
    requester: {serviceAccount: team-a:op}
    finalizersAfter: []
    expect: allowed
";

/// `--merge` widens a rule no further than the evidence shows: one denial
/// in team-c lets that removal through, and no other the rule did not
/// allow before (the rule names no resources: dropping its namespaces
/// would have allowed any object, cluster-scoped ones too), as the
/// webhook's own decision (`finalizer-guard test`) says.
#[test]
fn policy_suggest_merge_allows_no_more_than_the_evidence_shows() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let base = write("base.yaml", TEAM_A_OP);
    let audit = write("audit.log", TEAM_C_DENIAL);
    let suite = write("suite.yaml", TEAM_A_OP_SUITE);
    let (suite, base_text) = (suite.to_str().unwrap(), base.to_str().unwrap());
    // Before: the team-c widget is denied, as are the others.
    let before = run(&["test", "--policy", base_text, suite]);
    assert_eq!(before.status.code(), Some(1), "{before:?}");
    let out = stdout(&before);
    assert!(
        out.contains("FAIL a widget in team-c (the denial seen): expected allowed, got denied"),
        "{out}"
    );
    assert!(out.contains("5 passed, 1 failed"), "{out}");

    let (code, yaml, err) = suggest_run(&["--merge".as_ref(), base.as_os_str(), audit.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(!yaml.contains("# not merged"), "{yaml}");
    validated(&yaml);
    write("merged.yaml", &yaml);
    // After: the widget in team-c alone is allowed anew.
    let after = run(&["test", suite]);
    let out = stdout(&after);
    assert_eq!(
        after.status.code(),
        Some(0),
        "{out}{}\n{yaml}",
        stderr(&after)
    );
    assert!(out.contains("6 passed, 0 failed"), "{out}");
    // And the comments say where each namespace came from.
    assert!(
        yaml.contains("#   rule \"team-a-op\" (system:serviceaccount:team-a:op): 1 denied removal(s) in team-c, outside its namespaces team-a, team-b: not widened in place to team-c, as it names no resources, so every resource in team-c would be allowed; 1 rule(s) added beside it for what was seen in team-c (seen in the evidence), and no more\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("  # widens rule \"team-a-op\" to what the evidence shows: example.com/cleanup on widgets.example.com in team-c (seen in the evidence; the rule's own namespaces: team-a, team-b)\n"),
        "{yaml}"
    );
    assert!(!yaml.contains("acts cluster-wide"), "{yaml}");
}

/// A finalizer name the webhook cut to fit its audit annotation makes no
/// rule: a note says so, and where the name is whole.
#[test]
fn policy_suggest_writes_no_rule_for_a_name_cut_in_the_evidence() {
    use finalizer_guard::admission::{ReviewBuilder, WEBHOOK_NAME, review};
    let warn = finalizer_guard::policy::Policy::from_yaml("mode: warn\nrules: []\n").unwrap();
    let long = format!("a.io/{}", "x".repeat(300));
    let body = ReviewBuilder::pod_update("system:serviceaccount:team-a:op")
        .finalizers(serde_json::json!([long]), serde_json::json!([]))
        .to_vec();
    let reviewed = review(&warn, &body).unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&reviewed.body).unwrap();
    let annotations: serde_json::Map<String, serde_json::Value> =
        answer["response"]["auditAnnotations"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (format!("{WEBHOOK_NAME}/{k}"), v.clone()))
            .collect();
    let cut = annotations[&format!("{WEBHOOK_NAME}/unauthorized-finalizers")]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cut.ends_with("...") && cut.len() == 256, "{cut}");
    let event = serde_json::json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "auditID": "1", "stage": "ResponseComplete", "verb": "update",
        "user": {"username": "system:serviceaccount:team-a:op", "groups": ["system:serviceaccounts", "system:authenticated"]},
        "objectRef": {"resource": "pods", "namespace": "team-a", "name": "web-0", "apiVersion": "v1"},
        "responseStatus": {"code": 200},
        "annotations": annotations,
    });
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    std::fs::write(&audit, format!("{event}\n")).unwrap();
    let (code, yaml, err) = suggest_run(&[audit.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let note = format!(
        "{cut} on pods in team-a: the name was cut in the evidence (it ends with ..., as the webhook cuts an audit annotation's value past 256 characters and a name in its audit record past 512): no rule is suggested for a name not known in full; the webhook's own audit record of the request (its standard output) holds every name Kubernetes allows whole: give it too"
    );
    assert!(err.contains(&format!("note: {note}\n")), "{err}");
    assert!(yaml.contains(&format!("#   {note}\n")), "{yaml}");
    assert!(yaml.ends_with("\nrules: []\n"), "{yaml}");
    assert!(validated(&yaml).0.rules.is_empty(), "{yaml}");
}

fn attack(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/suggest/attack")
        .join(file)
}

/// A tenant's bot denied outside its namespace widens nothing; a finalizer
/// of Kubernetes' own controllers gets no rule; a policy with `presets:`
/// takes the merge.
#[test]
fn policy_suggest_widens_nothing_a_tenant_can_be_denied() {
    let (base, denial) = (attack("base3.yaml"), attack("e3.log"));
    let (code, yaml, err) =
        suggest_run(&["--merge".as_ref(), base.as_os_str(), denial.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("note: not widened: rule \"tenant-bot\" names team-a:tenant-bot in its own namespace only; denials elsewhere are what a tenant can produce: widen it by hand if it is a controller"),
        "{err}"
    );
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(yaml.ends_with(&text), "{yaml}");

    let (code, yaml, err) = suggest_run(&[attack("e1.log").as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("note: kubernetes.io/pvc-protection belongs to Kubernetes' pvc-protection controller: no rule suggested\n"),
        "{err}"
    );
    assert!(validated(&yaml).0.rules.is_empty(), "{yaml}");

    let dir = tempfile::tempdir().unwrap();
    let warn = dir.path().join("warn.log");
    let log = std::fs::read_to_string(&denial).unwrap();
    std::fs::write(
        &warn,
        log.replace("\"denied\"", "\"would-deny\"")
            .replace("\"code\": 403", "\"code\": 200"),
    )
    .unwrap();
    let presets = attack("base4.yaml");
    let (code, yaml, err) =
        suggest_run(&["--merge".as_ref(), presets.as_os_str(), warn.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(!yaml.contains("# not merged"), "{yaml}");
    assert!(yaml.contains("\npresets: [flux]\n"), "{yaml}");
    assert!(
        yaml.contains("  - name: \"team-a-tenant-bot\"\n    finalizers: [\"example.com/x\"]\n"),
        "{yaml}"
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

/// Each command's page, `docs/commands/COMMAND.md` (`policy validate`:
/// `policy-validate.md`), gives every long flag its `--help` shows; a
/// command group with no flag of its own (`policy`) needs no page.
#[test]
fn command_pages_name_every_flag_the_commands_take() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/commands");
    // `--flag`, not merely a longer `--flag-more`.
    let names = |page: &str, flag: &str| {
        page.match_indices(flag).any(|(at, _)| {
            page[at + flag.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
        })
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut pages = 0;
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(command) = queue.pop() {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let (flags, subcommands) = help_of(&args);
        for sub in subcommands {
            let mut next = command.clone();
            next.push(sub);
            queue.push(next);
        }
        let flags: Vec<String> = flags
            .into_iter()
            .filter(|f| f != "--help" && f != "--version")
            .collect();
        if command.is_empty() || flags.is_empty() {
            continue;
        }
        let file = docs.join(format!("{}.md", command.join("-")));
        let Ok(page) = std::fs::read_to_string(&file) else {
            missing.push(format!("{}: no page {}", command.join(" "), file.display()));
            continue;
        };
        pages += 1;
        for flag in flags {
            seen += 1;
            if !names(&page, &flag) {
                missing.push(format!("{}: {flag}", command.join(" ")));
            }
        }
    }
    assert!(seen > 40, "only {seen} flags found: is --help parsed?");
    assert!(pages >= 13, "only {pages} command pages checked");
    assert!(
        missing.is_empty(),
        "docs/commands/ does not give:\n{}",
        missing.join("\n")
    );
}

/// The binary, killed and failed if it has not finished within 60 s: a
/// command that would hang fails its test instead of stalling the run.
fn run_within(args: &[&str]) -> Output {
    let mut child = bin()
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if !exits_within(&mut child, Duration::from_secs(60)) {
        child.kill().unwrap();
        let o = child.wait_with_output().unwrap();
        panic!("{args:?} did not finish within 60 s: {o:?}");
    }
    child.wait_with_output().unwrap()
}

/// A FIFO at `path`: opening it to read waits for a writer that never comes.
fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

#[cfg(unix)]
#[test]
fn symlink_loops_in_a_folder_are_read_once_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::copy(
        "tests/fixtures/cases/pod-create-with-finalizers-allowed.json",
        root.join("case.json"),
    )
    .unwrap();
    // Each leads back to the folder: followed blindly, 2^40 paths and more.
    std::os::unix::fs::symlink(".", root.join("a.json")).unwrap();
    std::os::unix::fs::symlink(".", root.join("b.json")).unwrap();
    let root_text = root.to_str().unwrap();
    let o = run_within(&["test", root_text]);
    let out = stdout(&o);
    let again = format!(
        ": the folder {root_text} again (a symlink loop, or a second link to it): not read twice"
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("ERROR {root_text}/a.json{again}"),
            format!("ERROR {root_text}/b.json{again}"),
            format!("ok   {root_text}/case.json: not-judged"),
            "1 passed, 0 failed, 2 unreadable".to_string(),
        ],
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");

    // `policy suggest` walks folders too: a note, and the evidence read once.
    std::fs::remove_file(root.join("case.json")).unwrap();
    std::fs::write(
        root.join("audit.log"),
        webhook_record(
            "system:serviceaccount:ops:cleanup",
            &[],
            "team-a",
            &["example.com/cleanup"],
        ),
    )
    .unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
    let o = run_within(&["policy", "suggest", root_text]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = stderr(&o);
    for link in ["a.json", "b.json", "sub/up"] {
        assert!(
            err.contains(&format!("note: {root_text}/{link}{again}\n")),
            "{link}: {err}"
        );
    }
    assert!(stdout(&o).contains("ops:cleanup"), "{o:?}");
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.json");
    mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    let o = run_within(&["check", fifo, "/dev/zero"]);
    assert_eq!(
        stdout(&o),
        format!(
            "{fifo}: error: not a regular file (a FIFO)\n/dev/zero: error: not a regular file (a character device)\n"
        ),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));

    // In a folder `test` runs, a suite's review, and given to `test` itself.
    let folder = dir.path().to_str().unwrap();
    let o = run_within(&["test", folder]);
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {fifo}: cannot read: not a regular file (a FIFO)\n0 passed, 0 failed, 1 unreadable\n"
        ),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));
    let suite = dir.path().join("suite.yaml");
    std::fs::write(
        &suite,
        "cases:\n- name: a FIFO\n  review: x.json\n  expect: denied\n- name: zeros\n  review: /dev/zero\n  expect: denied\n",
    )
    .unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "ERROR a FIFO: cannot read {fifo}: not a regular file (a FIFO)\n"
        )),
        "{out}"
    );
    // A device is outside the suite's folder: refused before it is opened.
    assert!(
        out.contains(
            "ERROR zeros: review /dev/zero: a suite names its files by paths relative to its folder, without `..`\n"
        ),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(2));
    // A suite's policy file is read the same way.
    std::fs::write(&suite, "policy: x.json\ncases: []\n").unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    assert!(stdout(&o).contains("not a regular file (a FIFO)"), "{o:?}");
    assert_eq!(o.status.code(), Some(2));

    let o = run_within(&["policy", "suggest", folder]);
    assert!(
        stderr(&o).contains(&format!("error: {fifo}: not a regular file (a FIFO)")),
        "{o:?}"
    );
    assert_eq!(o.status.code(), Some(2));
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

/// `test` reads a recording's and a case file's review into a JSON value,
/// which keeps the last copy of a repeated key: with the override second, it
/// would judge an override the webhook refuses (400). Such files are refused.
#[test]
fn test_refuses_a_file_that_repeats_a_key() {
    let text =
        std::fs::read_to_string("examples/reviews/pod-strip-finalizers-override.json").unwrap();
    let line = r#""finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off, pod IP 10.244.3.17 released by hand""#;
    let twice = text.replace(
        line,
        &format!("\"finalizer-guard.io/override\": null,\n{line}"),
    );
    assert_ne!(twice, text);
    let dir = tempfile::tempdir().unwrap();
    // A recording of an override, whose object repeats the annotation.
    let recorded = std::fs::read_to_string(
        "tests/fixtures/real/v1.34.4/configmap-paths-configmaps-admin-override.json",
    )
    .unwrap();
    let value = r#""finalizer-guard.io/override": "controller-uninstalled: e2e cleanup""#;
    assert_eq!(recorded.matches(value).count(), 2);
    let recording = dir.path().join("recording.json");
    std::fs::write(
        &recording,
        recorded.replacen(
            value,
            &format!("\"finalizer-guard.io/override\": null, {value}"),
            1,
        ),
    )
    .unwrap();
    let case = dir.path().join("case.json");
    std::fs::write(
        &case,
        format!(
            r#"{{"note": "override sent twice", "review": {twice}, "expect": {{"allowed": true}}}}"#
        ),
    )
    .unwrap();
    for file in [&recording, &case] {
        let file = file.to_str().unwrap();
        let o = run(&["test", file]);
        let out = stdout(&o);
        assert!(
            out.contains(&format!("ERROR {file}"))
                && out.contains("duplicate key \"finalizer-guard.io/override\""),
            "{out}\n{o:?}"
        );
        assert_eq!(o.status.code(), Some(2), "{out}");
    }
}

/// The presets' own tests (examples/presets/suite.yaml, short cases) pass,
/// and cover every finalizer of every component of the catalog: a finalizer
/// added to the catalog without a case fails here.
#[test]
fn the_presets_suite_passes_and_covers_the_whole_catalog() {
    let o = run(&["test", "examples/presets/suite.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    let catalog = run(&["policy", "presets", "-o", "json"]);
    assert_eq!(catalog.status.code(), Some(0), "{}", stderr(&catalog));
    let catalog: serde_json::Value = serde_json::from_slice(&catalog.stdout).unwrap();
    let mut cases = 0;
    for preset in catalog["presets"].as_array().unwrap() {
        for component in preset["components"].as_array().unwrap() {
            let who = format!(
                "{}/{}",
                preset["name"].as_str().unwrap(),
                component["name"].as_str().unwrap()
            );
            for finalizer in component["finalizers"].as_array().unwrap() {
                let finalizer = finalizer.as_str().unwrap();
                let name = match finalizer.strip_suffix('*') {
                    Some(prefix) => format!("{prefix}example"),
                    None => finalizer.to_string(),
                };
                let line = format!("ok   preset {who} removes {name} from ");
                assert!(out.contains(&line), "no passing case {line:?}:\n{out}");
                cases += 1;
            }
            for denied in [
                "a person may not remove",
                "the same name in another namespace may not remove",
            ] {
                assert!(
                    out.lines()
                        .any(|l| l.starts_with(&format!("ok   {denied} "))
                            && l.contains(&format!("(preset {who}): denied"))),
                    "no case: {denied} ... (preset {who}):\n{out}"
                );
                cases += 1;
            }
        }
    }
    assert!(
        out.ends_with(&format!("{cases} passed, 0 failed\n")),
        "{out}"
    );
}

/// Argo CD under `presets: [argocd]` in enforce mode
/// (examples/presets/argocd/suite.yaml): the hook finalizer on a Job, a Pod
/// and a custom resource in application namespaces, and the pre-delete
/// finalizers on an Application, are the application controller's to take
/// off and nobody else's.
#[test]
fn argo_cds_hooks_and_pre_delete_finalizers_pass_under_the_argocd_preset() {
    let o = run(&["test", "examples/presets/argocd/suite.yaml"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for line in [
        "ok   the application controller takes the hook finalizer off a finished PreSync Job in an app namespace: authorized",
        "ok   the application controller takes the hook finalizer off a PostSync Pod in an app namespace: authorized",
        "ok   the application controller takes the hook finalizer off a custom resource hook in another app namespace: authorized",
        "ok   the application controller takes the hook finalizer off finalizer-guard's own policy-check Job: authorized",
        "ok   a person may not take the hook finalizer off a hook Job: denied",
        "ok   the Argo CD server may not take the hook finalizer off a hook Pod: denied",
        "ok   the app namespace's own ServiceAccount may not take the hook finalizer off a hook custom resource: denied",
        "ok   the application controller takes pre-delete-finalizer.argocd.argoproj.io off an Application once its pre-delete hooks ran: authorized",
        "ok   the application controller takes pre-delete-finalizer.argocd.argoproj.io/cleanup off an Application once its pre-delete hooks ran: authorized",
        "ok   the ApplicationSet controller may not take pre-delete-finalizer.argocd.argoproj.io/cleanup off an Application: denied",
    ] {
        assert!(out.lines().any(|l| l == line), "no line {line:?}:\n{out}");
    }
    assert!(out.ends_with("31 passed, 0 failed\n"), "{out}");
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

/// `version` and `--version` say the version, the commit, the target and the
/// build date; `-o json` the same fields for scripts.
#[test]
fn version_names_commit_target_and_build_date() {
    let line = run(&["--version"]);
    assert!(line.status.success(), "{}", stderr(&line));
    let line = stdout(&line);
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        line.starts_with(&format!("finalizer-guard {version} (commit ")),
        "{line}"
    );
    assert!(
        line.contains(", target ") && line.contains(", built "),
        "{line}"
    );

    let text = run(&["version"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.starts_with(&format!("finalizer-guard {version}\n")),
        "{text}"
    );
    for field in ["commit:", "target:", "built:", "dependencies:"] {
        assert!(
            text.lines().any(|l| l.starts_with(field)),
            "no {field} in {text}"
        );
    }

    let json = run(&["version", "-o", "json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["version"], version);
    let commit = json["commit"].as_str().unwrap();
    // The --version line and the report say the same build.
    assert!(line.contains(&format!(
        "(commit {commit}, target {}",
        json["target"].as_str().unwrap()
    )));
    assert!(
        line.trim_end()
            .ends_with(&format!("built {})", json["build_date"].as_str().unwrap()))
    );
    assert_eq!(json["dirty"], commit.ends_with("-dirty"));
    // Built in this checkout (git is here): a commit, not `unknown`.
    if Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.git")).exists() {
        let hash = commit.trim_end_matches("-dirty");
        assert!(
            hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "{commit}"
        );
    }
}

/// `policy export --static DIR`: the folder a user points kube-apiserver at,
/// checked by `policy validate --static`; bad input writes nothing.
#[test]
fn policy_export_static_writes_all_or_nothing_and_validate_checks_it() {
    let (tmp, policy) = policy_file("mode: enforce\n");
    let policy = policy.to_str().unwrap();
    let dir = tmp.path().join("static");
    let dir_text = dir.to_str().unwrap();
    let flags = ["--operator", "ops", "--install-dir", "/etc/kubernetes/fg"];
    let with = |first: &[&str]| -> Vec<String> {
        first
            .iter()
            .chain(flags.iter())
            .map(|s| s.to_string())
            .chain([policy.to_string()])
            .collect()
    };

    // No operator: exit 1, nothing written.
    let o = run(&["policy", "export", "--static", dir_text, policy]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("no operator"), "{o:?}");
    assert!(!dir.exists());
    // A webhook URL without its CA bundle: a usage error.
    let o = run(&args(&with(&[
        "policy",
        "export",
        "--static",
        dir_text,
        "--webhook-url",
        "https://fg.example/validate",
    ])));
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(!dir.exists());

    let export = with(&["policy", "export", "--static", dir_text]);
    let o = run(&args(&export));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for f in [
        "admission-config.yaml",
        "policies/backstop.yaml",
        "policies/protect.yaml",
    ] {
        assert!(stdout(&o).contains(f), "{o:?}");
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert!(
        stderr(&o)
            .contains("--admission-control-config-file=/etc/kubernetes/fg/admission-config.yaml")
    );
    let validate = with(&["policy", "validate", "--static", dir_text]);
    let o = run(&args(&validate));
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // Another policy: exit 1, the first difference named.
    let (_other, warn) = policy_file("mode: warn\n");
    let mut other = validate.clone();
    *other.last_mut().unwrap() = warn.to_str().unwrap().to_string();
    let o = run(&args(&other));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains("policies/backstop.yaml: the ValidatingAdmissionPolicy finalizer-guard.static.k8s.io differs from the export at spec."),
        "{o:?}"
    );

    // A folder holding anything else is left as it is.
    std::fs::write(dir.join("policies/mine.yaml"), "kept").unwrap();
    let o = run(&args(&export));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("\"policies/mine.yaml\""), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("policies/mine.yaml")).unwrap(),
        "kept"
    );
    let o = run(&args(&validate));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).contains("policies/mine.yaml: not written by this export"));
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Output to a reader that is gone (`| head`, `| true`) is an error the
/// command reports (exit 2), never a panic (exit 101), for every command
/// that prints what it made.
#[test]
fn a_closed_pipe_on_standard_output_is_an_error_not_a_panic() {
    let out = tempfile::tempdir().unwrap();
    let out = out.path().join("certs");
    for args in [
        vec!["policy", "export", "--vap", "examples/policy.yaml"],
        vec![
            "certs",
            "--service",
            "finalizer-guard",
            "--namespace",
            "finalizer-guard",
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = bin()
            .args(&args)
            .env_remove("FINALIZER_GUARD_POLICY")
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("Broken pipe"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

/// The test helper for command output: a failure names every missing line
/// and shows both streams and the exit code, so a failed run explains itself.
#[test]
fn assert_prints_names_every_missing_line_and_shows_the_whole_output() {
    use common::assert::{assert_prints, assert_prints_on_stderr};
    let o = run(&["version"]);
    assert_prints(&o, &["finalizer-guard ", "commit:"]);
    let failed = std::panic::catch_unwind(|| {
        assert_prints(&o, &["commit:", "no such line", "nor this one"]);
    })
    .expect_err("lines missing from standard output fail the test");
    let message = failed
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert_contains_all(
        "the failure message",
        message,
        &[
            "standard output lacks 2 of 3 expected:",
            "  missing: \"no such line\"\n  missing: \"nor this one\"\n",
            "exit code: 0",
            "--- standard output ---\nfinalizer-guard ",
            "--- standard error ---",
        ],
    );
    assert!(!message.contains("missing: \"commit:\""), "{message}");
    assert!(
        std::panic::catch_unwind(|| assert_prints_on_stderr(&o, &["commit:"])).is_err(),
        "version prints on standard output, not error"
    );
}

/// `serve --certificates-secret`: a malformed Secret name, a conflict with
/// `--tls-cert`, margins that overlap and an API server it cannot reach are
/// each refused before anything is served, with what to fix.
#[test]
fn serve_refuses_self_managed_certificates_it_cannot_keep() {
    let o = run(&["serve", "--certificates-secret", "just-a-name"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains(r#""just-a-name" is not NAMESPACE/NAME"#),
        "{o:?}"
    );

    let o = run(&[
        "serve",
        "--certificates-secret",
        "fg/c",
        "--tls-cert",
        "a",
        "--tls-key",
        "b",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("cannot be used with"), "{o:?}");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--certificates-secret",
            "fg/fg-certificates",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--events",
            "false",
        ];
        args.extend_from_slice(extra);
        let mut cmd = bin();
        cmd.args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("FINALIZER_GUARD_POLICY");
        cmd.output().unwrap()
    };
    let o = serve(&[
        "--ca-renew-before",
        "30m",
        "--ca-grace",
        "10m",
        "--certificate-renew-before",
        "20m",
    ]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stderr(&o).contains("--ca-renew-before (1800s) must be at least --certificate-renew-before (1200s) plus twice --ca-grace (600s"),
        "{o:?}"
    );
    let o = serve(&[]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stderr(&o).contains("certificates Secret: cannot get secret fg/fg-certificates"),
        "{o:?}"
    );
    assert!(!stderr(&o).contains("panicked"), "{o:?}");
}

#[test]
fn a_bad_flag_value_is_repeated_escaped_and_cut_never_raw() {
    let long = "x".repeat(100_000);
    for (args, says) in [
        (
            vec!["serve", "--cluster-name", "prod\n\u{1b}[2Jforged\u{202e}"],
            "is not a cluster name",
        ),
        (
            vec!["watch", "--cluster-name", long.as_str()],
            "is not a cluster name",
        ),
        (
            vec!["serve", "--shutdown-delay", "5\u{1b}[31ms\nforged"],
            "is not a duration",
        ),
        (
            vec!["serve", "--certificates-secret", "a\nb/\u{1b}c"],
            "is not NAMESPACE/NAME",
        ),
        (vec!["certs", "--dns", "a b"], "\"a b\" is not a DNS name"),
        (
            vec!["certs", "--dns", "web..example.com"],
            "is not a DNS name",
        ),
        (vec!["certs", "--dns", "*"], "is not a DNS name"),
        (
            vec!["certs", "--service", "Web Hook"],
            "\"Web Hook\" is not a Service name",
        ),
        (
            vec!["certs", "--namespace", "ops.prod"],
            "is not a namespace name",
        ),
        (
            vec!["serve", "--certificate-dns", "ok.example.com,-bad"],
            "\"-bad\" is not a DNS name",
        ),
        (
            vec!["serve", "--service", "fg_webhook\u{1b}[2J"],
            "is not a Service name",
        ),
        (
            vec!["certs", "--service", "123"],
            "\"123\" is not a Service name",
        ),
        (
            vec!["certs", "--dns", "10.0.0.1"],
            "\"10.0.0.1\" is an IP address",
        ),
        (
            vec!["serve", "--certificates-secret", "../secrets"],
            "is not NAMESPACE/NAME",
        ),
        (
            vec!["serve", "--certificates-secret", "ns/.."],
            "is not NAMESPACE/NAME",
        ),
        (
            vec!["serve", "--certificates-secret", "a.b/certs"],
            "is not NAMESPACE/NAME",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.contains(says), "{err}");
        assert!(!err.contains(['\u{1b}', '\u{202e}']), "{err:?}");
        let first = err.lines().next().unwrap();
        assert!(first.starts_with("error: invalid value for '--"), "{first}");
        assert!(first.contains(says), "the value on one line: {err:?}");
        assert!(err.len() < 1024, "{} bytes: {err:.200}", err.len());
        assert!(err.contains("--help"), "{err}");
    }
}

/// The binary with at most `mib` MiB of address space (`ulimit -v`): an
/// input that makes it allocate without bound aborts it (signal 6)
/// instead of taking the machine's memory.
#[cfg(unix)]
fn run_capped(mib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mib * 1024))
        .arg(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .output()
        .unwrap()
}

/// A policy or suite of 20 KB whose anchors, repeated by alias, expand to
/// millions of nodes is refused before it is built, naming the limit:
/// with 512 MiB of address space, `policy validate` and `test` of them
/// aborted, out of memory, before. Anchors reused as a suite reuses an
/// object still read as if written out.
#[cfg(unix)]
#[test]
fn an_alias_bomb_is_refused_before_it_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_capped(512, &["policy", "validate", "examples/policy.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    // One anchored list of 4,000 items, repeated 4,000 times: 16 million nodes.
    let policy = dir.path().join("policy.yaml");
    let list = vec!["x"; 4000].join(",");
    let aliases = vec!["*a"; 4000].join(",");
    std::fs::write(&policy, format!("presets: [&a [{list}], {aliases}]\n")).unwrap();
    assert!(std::fs::metadata(&policy).unwrap().len() < 21_000);
    let o = run_capped(512, &["policy", "validate", policy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "{}: expands to more than 100000 nodes by line 1 column 8086 (an alias counts as all of the node it repeats); a YAML document may expand to at most 100000 nodes\n",
            policy.display()
        )
    );

    // An object of 200 lists of 1,000 items, in each of 200 cases: 40 million nodes.
    let suite = dir.path().join("suite.yaml");
    let lists = (1..200).map(|i| format!("l{i}: *l")).collect::<Vec<_>>();
    let mut text = format!(
        "cases:\n  - object: &o {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b], spec: {{l0: &l [{}], {}}}}}\n    requester: {{user: jane}}\n    finalizersAfter: []\n    expect: denied\n",
        vec!["0"; 1000].join(","),
        lists.join(", ")
    );
    let case = "  - {object: *o, requester: {user: jane}, finalizersAfter: [], expect: denied}\n";
    text.push_str(&case.repeat(200));
    std::fs::write(&suite, &text).unwrap();
    assert!(text.len() < 21_000, "{}", text.len());
    let o = run_capped(512, &["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {}: not a suite file: expands to more than 1000000 nodes by line 9 column 14 (an alias counts as all of the node it repeats); a YAML document may expand to at most 1000000 nodes\n0 passed, 0 failed, 1 unreadable\n",
            suite.display()
        )
    );

    // The same object, reused by a few cases and its policy's rules by
    // alias too: each case decided.
    let suite = dir.path().join("reused.yaml");
    std::fs::write(
        dir.path().join("policy.yaml"),
        "rules:\n  - finalizers: [example.com/a]\n    groups: &oncall [oncall]\n  - finalizers: [example.com/b]\n    groups: *oncall\n",
    )
    .unwrap();
    std::fs::write(
        &suite,
        "policy: policy.yaml\ncases:\n  - object: &o {kind: Pod, name: web-0, namespace: shop, finalizers: [example.com/a, example.com/b]}\n    requester: &jane {user: jane}\n    finalizersAfter: []\n    expect: denied\n  - {object: *o, requester: {user: joe, groups: [oncall]}, finalizersAfter: [], expect: allowed}\n  - {object: *o, requester: *jane, finalizersAfter: [example.com/a, example.com/b], expect: allowed}\n",
    )
    .unwrap();
    let o = run_capped(512, &["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).ends_with("3 passed, 0 failed\n"), "{o:?}");
}

/// A short case whose JSON patch would take quadratic work (each of 2,000
/// insertions at the front of a 1,000-item array shifts it) is refused,
/// naming the budget, before the work is done; it ran through before.
#[test]
fn a_json_patch_past_its_work_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    let ops = vec!["{op: add, path: /spec/items/0, value: 1}"; 2000].join(", ");
    std::fs::write(
        &suite,
        format!(
            "cases:\n  - object: {{kind: Pod, name: web-0, namespace: shop, finalizers: [a/b], spec: {{items: [{}]}}}}\n    requester: {{user: jane}}\n    jsonPatch: [{ops}]\n    expect: allowed\n",
            vec!["0"; 1000].join(",")
        ),
    )
    .unwrap();
    let o = run_within(&["test", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!(
            "ERROR {}: cases[0]: cases[0].jsonPatch[730]: the patch takes more than 1000000 units of work (nodes read, copied or visited, array items shifted), the most a case's patch may take: give fewer operations, or a smaller object\n0 passed, 0 failed, 1 unreadable\n",
            suite.display()
        )
    );
}

/// Every other command that reads YAML from outside refuses the bomb as
/// `policy validate` does: `policy suggest --merge`'s policy, the exports
/// `policy validate --vap` and `--static` compare with the policy.
#[cfg(unix)]
#[test]
fn every_yaml_reader_refuses_an_alias_bomb() {
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.yaml");
    let list = vec!["x"; 4000].join(",");
    let aliases = vec!["*a"; 4000].join(",");
    std::fs::write(&bomb, format!("presets: [&a [{list}], {aliases}]\n")).unwrap();
    let bomb = bomb.to_str().unwrap();
    let refusal = "expands to more than 100000 nodes by line 1 column 8086 (an alias counts as all of the node it repeats); a YAML document may expand to at most 100000 nodes";

    let o = run_capped(
        512,
        &["policy", "suggest", "--merge", bomb, "evidence.json"],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert_eq!(stderr(&o), format!("error: policy {bomb}: {refusal}\n"));

    let policy = "examples/policy.yaml";
    let o = run_capped(512, &["policy", "validate", "--vap", bomb, policy]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains(&format!("not YAML: {refusal}; export it again")),
        "{o:?}"
    );

    let exported = dir.path().join("static");
    let exported = exported.to_str().unwrap();
    let o = run(&[
        "policy",
        "export",
        "--static",
        exported,
        "--operator",
        "admin",
        policy,
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    std::fs::copy(bomb, dir.path().join("static/admission-config.yaml")).unwrap();
    let o = run_capped(
        512,
        &[
            "policy",
            "validate",
            "--static",
            exported,
            "--operator",
            "admin",
            policy,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains(&format!(
            "admission-config.yaml: not YAML: {refusal}; export it again"
        )),
        "{o:?}"
    );
}
