//! Tamper-proof mode (`policy export --static`) on kube-apiserver 1.37 or
//! later, started by `FG_E2E_STATIC=FOLDER e2e/cluster.sh up DIR` (e2e/go.mod
//! pins v1.37.2): its AdmissionConfiguration loads FOLDER/policies (and
//! FOLDER/webhooks), empty at start. The scenario writes the export of the
//! harness's policy there and proves what docs/tamper-proof.md claims: a
//! cluster admin who is not the operator can neither delete the webhook's
//! registration nor edit the policy ConfigMap; with the webhook gone a
//! person's strip is still refused and Kubernetes' own controllers still
//! finish; the operator can make a change; a change of the files is loaded,
//! and a file that does not load leaves the last good set in force.
//!
//! Only for such a cluster (`.ci/run` runs it alone, with `--exact`): the
//! rest of the suite runs on a cluster without static manifests, and this
//! scenario fails without `FG_E2E_STATIC`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::harness::{CONFIG, NAMESPACE, OVERRIDE, Policy, Run, bin, env, run, wait_until};
use super::{STRIP, builtin_controllers_complete, configmap};

const PROTECT: &str = "finalizer-guard-protect.static.k8s.io";
const BACKSTOP: &str = "finalizer-guard.static.k8s.io";
const POLICY_CONFIGMAP: &str = "finalizer-guard-policy";

fn folder() -> PathBuf {
    PathBuf::from(std::env::var_os("FG_E2E_STATIC").expect(
        "FG_E2E_STATIC: start the cluster with FG_E2E_STATIC=FOLDER e2e/cluster.sh up DIR (.ci/run does)",
    ))
}

/// `finalizer-guard policy ACTION --static FOLDER` with the operators given.
fn static_command(action: &str, folder: &Path, policy: &Path, operators: &[&str]) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(["policy", action, "--static"])
        .arg(folder)
        .arg("--install-dir")
        .arg(folder);
    for o in operators {
        cmd.args(["--operator", o]);
    }
    cmd.arg(policy);
    run(cmd, None)
}

fn patch_configmap(user: &str, c: &super::harness::Cluster, dry_run: bool) -> Run {
    let mut args = vec![
        "patch",
        "configmap",
        POLICY_CONFIGMAP,
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"e2e/touched":"yes"}}}"#,
    ];
    if dry_run {
        args.push("--dry-run=server");
    }
    c.kubectl(user, &args)
}

#[test]
#[ignore = "needs a 1.37 cluster in tamper-proof mode (FG_E2E_DIR, FG_E2E_STATIC): see .ci/run"]
fn tamper_proof_mode_guards_the_guard_and_the_backstop_outlives_the_webhook() {
    let folder = folder();
    let mut env = env();
    let c = env.cluster.clone();

    c.require_release(
        37,
        "static manifests (manifest-based admission control) are beta and on by default from 1.37",
    );

    // The harness's policy, exported into the folders kube-apiserver watches,
    // with `admin` (who installed the webhook) as the only operator.
    let policy = env.work.join("static-policy.yaml");
    fs::write(&policy, env.policy(Policy::default())).unwrap();
    static_command("export", &folder, &policy, &["admin"]).ok();
    static_command("validate", &folder, &policy, &["admin"]).ok();
    let other = static_command("validate", &folder, &policy, &["carol"]);
    assert_eq!(other.code, 1, "{other:#?}");
    assert!(
        other.stdout.contains("policies/protect.yaml: the ValidatingAdmissionPolicy finalizer-guard-protect.static.k8s.io differs from the export at spec.validations[0].expression"),
        "{other:#?}"
    );
    // kube-apiserver was started with the export's entries, merged into its own.
    let exported: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(folder.join("admission-config.yaml")).unwrap())
            .unwrap();
    let running = fs::read_to_string(c.dir.join("admission-config.yaml")).unwrap();
    for plugin in exported["plugins"].as_array().unwrap() {
        let dir = plugin["configuration"]["staticManifestsDir"]
            .as_str()
            .unwrap();
        assert!(
            running.contains(&format!("staticManifestsDir: {dir}\n")),
            "{dir} not in {running}"
        );
    }

    // A cluster admin who is not the operator: a ServiceAccount bound to cluster-admin.
    let ns = "e2e-static";
    c.namespace(ns);
    c.admin(&["create", "serviceaccount", "rogue", "-n", ns])
        .ok();
    c.admin(&[
        "create",
        "clusterrolebinding",
        "e2e-static-rogue",
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={ns}:rogue"),
    ])
    .ok();
    c.token_kubeconfig("rogue", ns, &c.dir.join("rogue.kubeconfig"));
    let delete_config = ["delete", "validatingwebhookconfiguration", CONFIG];
    // Loaded from the folder once written (a change is picked up within a minute).
    wait_until("kube-apiserver to load the static policies", 120, || {
        let mut args = delete_config.to_vec();
        args.push("--dry-run=server");
        c.kubectl("rogue", &args).stderr.contains(PROTECT)
    });
    c.kubectl("rogue", &delete_config).refused(PROTECT);
    c.kubectl(
        "rogue",
        &[
            "patch",
            "validatingwebhookconfiguration",
            CONFIG,
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]"#,
        ],
    )
    .refused(PROTECT);
    patch_configmap("rogue", &c, false).refused(PROTECT);
    patch_configmap("alice", &c, false).refused(PROTECT);
    c.kubectl(
        "rogue",
        &["delete", "configmap", POLICY_CONFIGMAP, "-n", NAMESPACE],
    )
    .refused(PROTECT);
    // A ConfigMap of that name elsewhere is not the policy's.
    c.apply(&configmap(ns, POLICY_CONFIGMAP, &[]));
    c.kubectl(
        "rogue",
        &["delete", "configmap", POLICY_CONFIGMAP, "-n", ns],
    )
    .ok();
    // The backstop registered through the API, too.
    let vap = c.dir.join("api-backstop.yaml");
    let export = run(
        {
            let mut cmd = Command::new(bin());
            cmd.args(["policy", "export", "--vap"]).arg(&policy);
            cmd
        },
        None,
    )
    .ok();
    fs::write(&vap, export.stdout).unwrap();
    c.admin(&["apply", "-f", vap.to_str().unwrap()]).ok();
    for kind in [
        "validatingadmissionpolicy",
        "validatingadmissionpolicybinding",
    ] {
        c.kubectl("rogue", &["delete", kind, "finalizer-guard"])
            .refused(PROTECT);
    }
    assert!(
        c.get(&["validatingwebhookconfiguration", CONFIG]).is_some(),
        "the webhook's registration is gone"
    );

    // The operator may: remove the API backstop, edit the ConfigMap.
    for kind in [
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ] {
        c.admin(&["delete", kind, "finalizer-guard"]).ok();
    }
    patch_configmap("admin", &c, false).ok();

    // The webhook gone: its server stopped, its registration deleted by the
    // operator. A person's strip is still refused, by the static backstop.
    env.stop();
    c.admin(&delete_config).ok();
    c.apply(&configmap(ns, "guarded", &["example.com/cleanup"]));
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "guarded",
            "-n",
            ns,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .refused(&format!("ValidatingAdmissionPolicy '{BACKSTOP}'"));
    c.admin(&[
        "patch",
        "configmap",
        "guarded",
        "-n",
        ns,
        "--type=merge",
        "-p",
        STRIP,
    ])
    .refused(&format!("ValidatingAdmissionPolicy '{BACKSTOP}'"));

    // Kubernetes' own controllers finish: garbage collection (foreground
    // and orphan), PV and PVC protection, a Job, a CRD's instances, a
    // namespace full of objects.
    builtin_controllers_complete(&env, "static");

    // A namespace with a finalizer'd object inside: it waits for the
    // object, which an override releases (the backstop honours it).
    let doomed = "e2e-static-doomed";
    c.namespace(doomed);
    c.apply(&configmap(doomed, "held", &["example.com/cleanup"]));
    c.admin(&["delete", "namespace", doomed, "--wait=false"])
        .ok();
    wait_until("the namespace controller to delete the object", 60, || {
        c.get(&["configmap", "held", "-n", doomed])
            .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    });
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            doomed,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .refused(&format!("ValidatingAdmissionPolicy '{BACKSTOP}'"));
    c.kubectl(
        "alice",
        &[
            "annotate",
            "configmap",
            "held",
            "-n",
            doomed,
            &format!("{OVERRIDE}=controller-uninstalled: e2e static cleanup"),
        ],
    )
    .ok();
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            doomed,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .ok();
    wait_until("the namespace to be gone", 120, || {
        c.get(&["namespace", doomed]).is_none()
    });

    // A change of the files is loaded: carol becomes an operator.
    static_command("export", &folder, &policy, &["admin", "carol"]).ok();
    wait_until("kube-apiserver to load carol as an operator", 120, || {
        patch_configmap("carol", &c, true).code == 0
    });
    patch_configmap("alice", &c, true).refused(PROTECT);

    // A file that does not load (a kind the plugin does not take) leaves the
    // last good set in force: carol may still, alice still may not.
    let log = c.dir.join("logs/kube-apiserver.log");
    let errors = || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("reloading manifest config")
            .count()
    };
    let before = errors();
    let broken = folder.join("policies/broken.yaml");
    fs::write(
        &broken,
        serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x.static.k8s.io"},
        }))
        .unwrap(),
    )
    .unwrap();
    wait_until("kube-apiserver to refuse the broken file", 120, || {
        errors() > before
    });
    patch_configmap("carol", &c, true).ok();
    patch_configmap("alice", &c, true).refused(PROTECT);
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "guarded",
            "-n",
            ns,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .refused(&format!("ValidatingAdmissionPolicy '{BACKSTOP}'"));
    // And the export refuses to write over a folder holding it.
    static_command("export", &folder, &policy, &["admin"]).refused("policies/broken.yaml");
    fs::remove_file(&broken).unwrap();
    static_command("export", &folder, &policy, &["admin"]).ok();
    wait_until("kube-apiserver to load admin alone again", 120, || {
        patch_configmap("carol", &c, true).stderr.contains(PROTECT)
    });

    // Clean up.
    c.admin(&["delete", "configmap", "guarded", "-n", ns, "--wait=false"])
        .ok();
    c.admin(&[
        "annotate",
        "configmap",
        "guarded",
        "-n",
        ns,
        &format!("{OVERRIDE}=controller-uninstalled: e2e static cleanup"),
    ])
    .ok();
    c.admin(&[
        "patch",
        "configmap",
        "guarded",
        "-n",
        ns,
        "--type=merge",
        "-p",
        STRIP,
    ])
    .ok();
    c.admin(&["delete", "clusterrolebinding", "e2e-static-rogue"])
        .ok();
    c.admin(&["delete", "namespace", ns, "--timeout=120s"]).ok();
}
