//! Names Kubernetes stores but a URL, a terminal or a shell would misread,
//! on the real control plane. A Role's name is validated only as a path
//! segment: it may hold `#`, `?`, shell syntax, newlines and escape
//! sequences, and a tenant who may create Roles chooses it.

use std::process::Command;

use serde_json::{Value, json};

use super::harness::{Env, Policy, env, wait_until};
use super::{SEAL, delete_nowait, finalizers};
use crate::common::assert::{assert_printable, assert_prints};

const KEEP: &str = "example.com/keep";

fn role(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns, "finalizers": [KEEP]},
        "rules": [],
    })
}

/// A namespace where alice and carol may manage Roles (`edit` does not
/// grant it), holding a stuck Role of each name.
fn stuck_roles(env: &Env, ns: &str, names: &[&str]) {
    let c = &env.cluster;
    c.namespace(ns);
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "e2e-names-admin", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "developers"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "sre-oncall"},
        ],
    }));
    for name in names {
        c.apply(&role(ns, name));
        delete_nowait(env, &["role", name, "-n", ns]);
    }
}

/// The object's finalizer-guard annotations: the override and the approval.
fn annotation_keys(object: &Value) -> Vec<String> {
    object["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.keys()
                .filter(|k| k.starts_with("finalizer-guard.io/"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_name_holding_a_fragment_is_that_object_and_never_another() {
    let mut env = env();
    let policy = env.policy(Policy {
        approval: Some(json!({"groups": ["sre-oncall"], "maxAge": "2h"})),
        ..Policy::default()
    });
    env.set_policy(&policy);
    let ns = "e2e-names-decoy";
    // victim is protected; the tenant made victim#decoy.
    stuck_roles(&env, ns, &["victim", "victim#decoy"]);
    let c = &env.cluster;
    let victim = || c.get(&["role", "victim", "-n", ns]).unwrap();
    let before = victim();
    let untouched = |why: &str| {
        let now = victim();
        assert_eq!(finalizers(&now), [KEEP], "{why}: {now:#}");
        assert_eq!(
            now["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "{why}: victim was written: {now:#}"
        );
    };
    let approve = |target: &str| {
        c.finalizer_guard(
            "carol",
            &[
                "approve",
                target,
                "-n",
                ns,
                "--reason",
                "controller-uninstalled",
                "--detail",
                "INC-4900 the tenant's role",
                "--for",
                "1h",
            ],
        )
    };
    let unstick = |target: &str| {
        c.finalizer_guard(
            "alice",
            &[
                "unstick",
                target,
                "-n",
                ns,
                "--reason",
                "controller-uninstalled",
                "--detail",
                "INC-4900 the tenant's role",
            ],
        )
    };

    // The approver approves what the tenant asked for: the decoy, and only it.
    let run = approve("role/victim#decoy");
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout.contains(
            "role.rbac.authorization.k8s.io/victim#decoy -n e2e-names-decoy approved until"
        ),
        "{run:#?}"
    );
    let decoy = c.get(&["role", "victim#decoy", "-n", ns]).unwrap();
    assert!(
        annotation_keys(&decoy).contains(&SEAL.to_string()),
        "{decoy:#}"
    );
    untouched("approve role/victim#decoy");
    assert!(annotation_keys(&victim()).is_empty());

    // A name after `#` or `?` that is no object: nothing found, nothing written.
    for target in ["role/victim#nothing", "role/victim?x=1"] {
        let run = approve(target);
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(
            run.stdout
                .contains(&format!("{target} not found in namespace {ns}")),
            "{run:#?}"
        );
        untouched(target);
        let run = unstick(target);
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(run.stdout.contains("not found"), "{run:#?}");
        untouched(target);
    }

    // The tenant's on-call colleague uses the approval: the decoy goes, victim stays.
    let run = unstick("role/victim#decoy");
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout.contains(&format!(
            "role.rbac.authorization.k8s.io/victim#decoy -n {ns} released: removed {KEEP}"
        )),
        "{run:#?}"
    );
    wait_until("the decoy is gone", 30, || {
        c.get(&["role", "victim#decoy", "-n", ns]).is_none()
    });
    untouched("unstick role/victim#decoy");
    assert!(annotation_keys(&victim()).is_empty());

    let default = env.policy(Policy::default());
    env.set_policy(&default);
    super::release(&env, "role", "victim", ns);
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn hostile_names_are_listed_escaped_and_their_commands_run_nothing() {
    let env = env();
    let ns = "e2e-names-hostile";
    let names = [
        "x;touch${IFS}fg-pwned;#",
        "$(touch fg-pwned)",
        "bad\nname",
        "\u{1b}[2J\u{1b}]0;owned\u{7}esc",
        "it's",
        "plain",
    ];
    stuck_roles(&env, ns, &names);
    let c = &env.cluster;

    // The listing: every one explained, escaped; none fails the others.
    let run = c.finalizer_guard("carol", &["unstick", "roles", "-n", ns]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_printable(&run);
    assert_prints(
        &run,
        &[
            "role.rbac.authorization.k8s.io/bad\\u{a}name -n e2e-names-hostile: Terminating for",
            "role.rbac.authorization.k8s.io/\\u{1b}[2J\\u{1b}]0;owned\\u{7}esc -n e2e-names-hostile: Terminating for",
            "role.rbac.authorization.k8s.io/x;touch${IFS}fg-pwned;# -n e2e-names-hostile: Terminating for",
            "6 stuck object(s)",
        ],
    );

    // The namespace: each holder with the command that releases it, which
    // pasted into a shell is exactly that object's words and runs nothing.
    delete_nowait(&env, &["namespace", ns]);
    let run = c.finalizer_guard("admin", &["unstick", &format!("namespace/{ns}")]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_printable(&run);
    assert!(
        run.stdout.contains(&format!(
            "finalizer-guard unstick 'roles.rbac.authorization.k8s.io/x;touch${{IFS}}fg-pwned;#' -n {ns} --reason REASON --detail TEXT"
        )),
        "{}",
        run.stdout
    );
    let commands: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once(": finalizer-guard unstick ").map(|(_, c)| c))
        .collect();
    assert_eq!(commands.len(), names.len(), "{}", run.stdout);
    let shell = tempfile::tempdir().unwrap();
    let mut pasted_names = Vec::new();
    for command in &commands {
        let pasted = Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {command}"))
            .current_dir(shell.path())
            .output()
            .unwrap();
        assert!(pasted.status.success(), "{command}: {pasted:?}");
        let words = String::from_utf8(pasted.stdout).unwrap();
        let words: Vec<&str> = words.trim_end_matches('\0').split('\0').collect();
        assert_eq!(
            words[1..],
            ["-n", ns, "--reason", "REASON", "--detail", "TEXT"],
            "{command}"
        );
        let name = words[0]
            .strip_prefix("roles.rbac.authorization.k8s.io/")
            .unwrap_or_else(|| panic!("{command}: {words:?}"));
        pasted_names.push(name.to_string());
    }
    pasted_names.sort();
    let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(pasted_names, expected);
    assert_eq!(
        std::fs::read_dir(shell.path()).unwrap().count(),
        0,
        "a pasted command ran something"
    );

    // Released by TYPE: every one, and the namespace goes.
    let run = c.finalizer_guard(
        "admin",
        &[
            "unstick",
            "roles",
            "-n",
            ns,
            "--reason",
            "controller-uninstalled",
            "--detail",
            "INC-4901 hostile names",
        ],
    );
    assert_eq!(run.code, 0, "{run:#?}");
    assert_printable(&run);
    assert!(
        run.stdout.contains("released 6 of 6 object(s)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "role.rbac.authorization.k8s.io/bad\\u{{a}}name -n {ns} released: removed {KEEP} with override"
        )),
        "{}",
        run.stdout
    );
    wait_until(&format!("namespace {ns} is gone"), 120, || {
        c.get(&["namespace", ns]).is_none()
    });
}
