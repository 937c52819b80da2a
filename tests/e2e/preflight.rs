//! From warn to enforce on the real control plane: `doctor --cluster` names
//! what enforce would block, `policy suggest` writes the rule from the API
//! server's audit log, and under enforce with that rule the controller goes
//! on while a person's strip is refused.
//!
//! The controller is a real one: `examples/widget_controller.rs` (kube-rs's
//! `Controller` and `finalizer`), built here and run with a ServiceAccount
//! token of its own.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use super::harness::{Env, OVERRIDE, env, wait_until};
use super::{configmap, delete_nowait, denied, finalizers, unavailable_apiservice};

const NS: &str = "e2e-preflight";
const SYSTEM_NS: &str = "e2e-widgets-system";
const FINALIZER: &str = "widgets.e2e.example.com/cleanup";
const HOLD: &str = "e2e.example.com/hold";
const STRIP: &str = r#"{"metadata":{"finalizers":null}}"#;

/// Builds the example with the test binary's own target folder, and returns its path.
fn controller_binary() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_finalizer-guard"));
    let profile_dir = bin.parent().expect("the binary's folder");
    let target = profile_dir.parent().expect("the target folder");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // The environment of a shell, not of this test: the variables cargo sets
    // for a test run would make it rebuild dependencies.
    build.env_clear();
    for (key, value) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        if [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "TMPDIR",
        ]
        .contains(&key_str.as_ref())
        {
            build.env(&key, value);
        }
    }
    build
        .args(["build", "--locked", "--example", "widget_controller"])
        .current_dir(crate::common::repository::root())
        .env("CARGO_TARGET_DIR", target);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "cargo build --example widget_controller");
    let path = profile_dir.join("examples/widget_controller");
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The controller process; stopped when dropped.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CRD, the controller's ServiceAccount and RBAC, its token in a kubeconfig.
fn install_controller(env: &Env) -> PathBuf {
    let c = &env.cluster;
    c.apply(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.e2e.example.com"},
        "spec": {
            "group": "e2e.example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }));
    wait_until("the Widget CRD to be served", 60, || {
        c.admin(&["get", "widgets.e2e.example.com", "-A"]).code == 0
    });
    c.admin(&["create", "namespace", SYSTEM_NS]).ok();
    wait_until("serviceaccount default", 60, || {
        c.admin(&["get", "serviceaccount", "default", "-n", SYSTEM_NS])
            .code
            == 0
    });
    c.admin(&[
        "create",
        "serviceaccount",
        "widget-controller",
        "-n",
        SYSTEM_NS,
    ])
    .ok();
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "e2e-widget-controller"},
        "rules": [{"apiGroups": ["e2e.example.com"], "resources": ["widgets"],
                   "verbs": ["get", "list", "watch", "patch", "update"]}],
    }));
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-widget-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-widget-controller"},
        "subjects": [{"kind": "ServiceAccount", "name": "widget-controller", "namespace": SYSTEM_NS}],
    }));
    let token = c
        .admin(&[
            "create",
            "token",
            "widget-controller",
            "-n",
            SYSTEM_NS,
            "--duration",
            "2h",
        ])
        .ok()
        .stdout;
    let admin: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(c.kubeconfig("admin")).unwrap()).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let path = env.work.join("widget-controller.kubeconfig");
    fs::write(
        &path,
        serde_json::to_string_pretty(&json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [{"name": "widget-controller", "user": {"token": token.trim()}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "widget-controller"}}],
            "current-context": "e2e",
        }))
        .unwrap(),
    )
    .unwrap();
    path
}

fn start_controller(env: &Env, kubeconfig: &PathBuf) -> Controller {
    let binary = controller_binary();
    let log = fs::File::create(env.work.join("widget-controller.log")).unwrap();
    Controller(
        Command::new(binary)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the widget controller starts"),
    )
}

fn widget(name: &str) -> Value {
    json!({
        "apiVersion": "e2e.example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"size": 1},
    })
}

/// `doctor --cluster EXTRA` as admin: its exit code, its JSON report and its text.
fn doctor(env: &Env, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["doctor", "--cluster"];
    args.extend_from_slice(extra);
    let text = env.cluster.finalizer_guard("admin", &args);
    assert!(text.code == 0 || text.code == 1, "{text:#?}");
    args.extend_from_slice(&["-o", "json"]);
    let json = env.cluster.finalizer_guard("admin", &args);
    assert_eq!(json.code, text.code, "{json:#?}");
    (json.code, json.json(), text.stdout)
}

/// The finalizers doctor says enforce would block.
fn blocked(report: &Value) -> Vec<String> {
    report["finalizers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["blockedObjects"].as_u64().unwrap() > 0)
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn from_warn_to_enforce_with_doctor_and_suggest() {
    let mut env = env();
    // The shipped ConfigMap's policy as installed: mode warn, no rules.
    let shipped = env.shipped_policy.clone();
    env.set_policy(&shipped);
    let c = &env.cluster;
    let audit_log = c.dir.join("audit.log");
    let warn_from = fs::metadata(&audit_log).map(|m| m.len()).unwrap_or(0);

    // What enforce would block before this scenario adds anything.
    let (_, before, _) = doctor(&env, &[]);
    let already_blocked = blocked(&before);

    let kubeconfig = install_controller(&env);
    c.namespace(NS);
    let _controller = start_controller(&env, &kubeconfig);
    let names = ["w1", "w2", "w3"];
    for name in names {
        c.apply(&widget(name));
    }
    wait_until(
        "the controller to put its finalizer on each widget",
        60,
        || {
            names.iter().all(|name| {
                c.get(&["widget.e2e.example.com", name, "-n", NS])
                    .is_some_and(|w| finalizers(&w) == [FINALIZER])
            })
        },
    );
    c.apply(&configmap(NS, "held", &[HOLD]));

    // 3. doctor names the controller's finalizer as blocked under enforce.
    let (code, report, text) = doctor(&env, &[]);
    fs::write(env.work.join("doctor-warn.txt"), &text).unwrap();
    assert_eq!(code, 1, "{report:#}");
    let line = report["finalizers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == FINALIZER)
        .unwrap_or_else(|| panic!("{FINALIZER} in {report:#}"));
    assert_eq!(line["objects"], 3, "{line:#}");
    assert_eq!(line["types"]["widgets.e2e.example.com"], 3, "{line:#}");
    assert_eq!(line["blockedObjects"], 3, "{line:#}");
    assert_eq!(line["owners"], json!([]), "{line:#}");
    assert!(
        line["blockedIn"][0] == "widgets.e2e.example.com in namespace e2e-preflight",
        "{line:#}"
    );
    assert!(
        report["unreadable"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    assert!(
        text.contains(&format!(
            "BLOCKED {FINALIZER}: 3 object(s) (widgets.e2e.example.com 3); may remove: nobody but an override"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("finalizers: [\"{FINALIZER}\"]")),
        "{text}"
    );

    // An aggregated API that is down is reported, never skipped silently.
    {
        let _down = unavailable_apiservice(&env, "v1", "down.e2e.example.com");
        wait_until(
            "doctor to report the APIService's types unreadable",
            60,
            || {
                let (_, report, _) = doctor(&env, &[]);
                report["unreadable"].as_array().unwrap().iter().any(|u| {
                    u["type"]
                        .as_str()
                        .unwrap()
                        .starts_with("down.e2e.example.com/v1")
                })
            },
        );
        let (code, report, text) = doctor(&env, &[]);
        assert_eq!(code, 1, "{text}");
        assert!(
            text.contains(
                "UNREADABLE down.e2e.example.com/v1 (APIService v1.down.e2e.example.com): not Available"
            ),
            "{text}"
        );
        assert!(
            text.contains("incomplete: 1 type(s) could not be read"),
            "{text}"
        );
        // Every other type was still read.
        assert!(blocked(&report).contains(&FINALIZER.to_string()), "{text}");
        assert_eq!(report["complete"], false, "{report:#}");

        // Under a policy that blocks nothing, the incomplete read still
        // exits 1: what was not read was not judged.
        let anyone = env.work.join("anyone-policy.yaml");
        fs::write(
            &anyone,
            "mode: enforce\nrules:\n  - name: anyone\n    finalizers: [\"*\"]\n    groups: [\"system:authenticated\"]\n",
        )
        .unwrap();
        let (code, report, text) = doctor(&env, &["--policy", anyone.to_str().unwrap()]);
        assert!(blocked(&report).is_empty(), "{text}");
        assert_eq!(code, 1, "{text}");
        assert!(!text.contains("ok:"), "{text}");
        assert!(
            text.lines()
                .last()
                .is_some_and(|l| l.starts_with("incomplete: 1 type(s) could not be read")),
            "{text}"
        );
    }

    // 4. Warn mode: the controller's deletions go through as would-deny;
    // alice strips a ConfigMap's finalizer by hand.
    for name in ["w1", "w2"] {
        c.admin(&[
            "delete",
            "widget.e2e.example.com",
            name,
            "-n",
            NS,
            "--timeout=60s",
        ])
        .ok();
    }
    delete_nowait(&env, &["configmap", "held", "-n", NS]);
    let strip = c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ],
    );
    assert_eq!(strip.code, 0, "{strip:#?}");
    assert!(
        strip.stderr.contains("would"),
        "warn mode warns: {strip:#?}"
    );
    wait_until("the stripped configmap to go", 30, || {
        c.get(&["configmap", "held", "-n", NS]).is_none()
    });

    // 5. policy suggest from the API server's audit log of the warn period.
    let log = fs::read(&audit_log).unwrap();
    let warn_log = env.work.join("warn-period-audit.log");
    fs::write(&warn_log, &log[warn_from as usize..]).unwrap();
    let run = c.finalizer_guard("admin", &["policy", "suggest", warn_log.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run:#?}");
    let suggested = finalizer_guard::policy::Policy::from_yaml(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    assert_eq!(suggested.rules.len(), 1, "{}", run.stdout);
    let rule = &suggested.rules[0];
    assert_eq!(
        rule.service_accounts,
        [format!(
            "system:serviceaccount:{SYSTEM_NS}:widget-controller"
        )],
        "{}",
        run.stdout
    );
    assert!(
        rule.users.is_empty() && rule.groups.is_empty(),
        "{}",
        run.stdout
    );
    assert!(
        rule.finalizers.iter().any(|p| p.matches(FINALIZER)),
        "{}",
        run.stdout
    );
    assert!(
        !rule.finalizers.iter().any(|p| p.matches(HOLD)),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "#   alice: stripped {HOLD} x1 in 1 removal(s) from configmaps"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("# suggested from 2 would-deny removal(s)"),
        "{}",
        run.stdout
    );

    // 6. Merged into the installed policy: valid, and doctor finds nothing
    // more to block than before the scenario.
    let shipped_file = env.work.join("shipped-policy.yaml");
    fs::write(&shipped_file, &shipped).unwrap();
    let run = c.finalizer_guard(
        "admin",
        &[
            "policy",
            "suggest",
            "--merge",
            shipped_file.to_str().unwrap(),
            warn_log.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0, "{run:#?}");
    let merged = run.stdout;
    let merged_file = env.work.join("merged-policy.yaml");
    fs::write(&merged_file, &merged).unwrap();
    let validate = c.finalizer_guard(
        "admin",
        &["policy", "validate", merged_file.to_str().unwrap()],
    );
    assert_eq!(validate.code, 0, "{validate:#?}");
    assert!(
        validate.stdout.contains("valid (mode warn, 1 rules"),
        "{validate:#?}"
    );
    let (code, report, text) = doctor(&env, &["--policy", merged_file.to_str().unwrap()]);
    fs::write(env.work.join("doctor-merged.txt"), &text).unwrap();
    assert_eq!(blocked(&report), already_blocked, "{text}");
    if already_blocked.is_empty() {
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("ok: enforce would block none"), "{text}");
    }
    assert!(
        text.contains(&format!("ok      {FINALIZER}: 1 object(s)")),
        "{text}"
    );

    // 7. Enforce with the merged policy: the controller's deletion completes,
    // alice's strip is refused.
    let enforce = merged.replace("mode: warn", "mode: enforce");
    assert_ne!(enforce, merged);
    env.set_policy(&enforce);
    let c = &env.cluster;
    c.admin(&[
        "delete",
        "widget.e2e.example.com",
        "w3",
        "-n",
        NS,
        "--timeout=60s",
    ])
    .ok();
    assert!(c.get(&["widget.e2e.example.com", "w3", "-n", NS]).is_none());
    c.apply(&configmap(NS, "held-2", &[HOLD]));
    delete_nowait(&env, &["configmap", "held-2", "-n", NS]);
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held-2",
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .refused(&denied());
    assert_eq!(
        finalizers(&c.get(&["configmap", "held-2", "-n", NS]).unwrap()),
        [HOLD]
    );

    // Leave nothing stuck: released as an on-call engineer would.
    c.admin(&[
        "annotate",
        "configmap",
        "held-2",
        "-n",
        NS,
        &format!("{OVERRIDE}=controller-uninstalled: e2e cleanup"),
    ])
    .ok();
    c.admin(&[
        "patch",
        "configmap",
        "held-2",
        "-n",
        NS,
        "--type=merge",
        "-p",
        STRIP,
    ])
    .ok();
}
