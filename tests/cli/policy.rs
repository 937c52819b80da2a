//! `policy validate` and `policy export`: every problem named, the strict
//! checks, and what `serve` and `doctor` refuse of a policy refused here too.

use super::*;

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
    let root = common::repository::root();
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
