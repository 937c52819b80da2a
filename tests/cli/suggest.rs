//! `policy suggest`: rules from what the evidence (audit events, the
//! webhook's records, recordings) shows, never more, and what it reads escaped.

use super::*;

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
    common::repository::fixtures()
        .join("suggest/flux")
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
    common::repository::fixtures()
        .join("suggest/attack")
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
