//! `finalizer-guard unstick` and `approve` on the real control plane: what
//! the on-call engineer runs instead of a `kubectl patch` loop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};

use serde_json::{Value, json};

use super::harness::{Env, OVERRIDE, Policy, env, wait_until};
use super::{
    CNI, configmap, custom_resource_type, dead_node, delete_nowait, finalizers, pod,
    unavailable_apiservice,
};
use crate::common::assert::assert_prints;

/// A Node whose kubelet stopped reporting an hour ago.
pub(super) fn not_ready_node(env: &Env, name: &str) {
    let c = &env.cluster;
    c.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}));
    let an_hour_ago = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1)).to_string();
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": an_hour_ago, "lastTransitionTime": an_hour_ago,
    }]}});
    c.admin(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ])
    .ok();
}

fn annotations(object: &Value) -> serde_json::Map<String, Value> {
    object["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_dead_nodes_pods_are_released_node_wide() {
    let env = env();
    let c = &env.cluster;
    let (ns, other_ns) = ("e2e-unstick-node", "e2e-unstick-node-2");
    c.namespace(ns);
    c.namespace(other_ns);
    not_ready_node(&env, "lost-node-1");
    let names: Vec<String> = (0..22).map(|i| format!("web-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let ns = if i % 2 == 0 { ns } else { other_ns };
        c.apply(&pod(ns, name, Some("lost-node-1"), &[CNI]));
        delete_nowait(&env, &["pod", name, "-n", ns]);
    }
    // A pod on the node that is not being deleted is left alone.
    c.apply(&pod(ns, "alive-0", Some("lost-node-1"), &[CNI]));

    // Explain: read-only, and it says what it knows.
    let run = c.finalizer_guard("carol", &["unstick", "--node", "lost-node-1"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            "pod/web-0 -n e2e-unstick-node: Terminating for",
            CNI,
            "owner:       unknown",
            "owner alive: no: node lost-node-1 Ready=Unknown for 60m (past --not-ready-for 5m)",
            "may leak:  node lost-node-1",
            "only with an override (finalizer-guard.io/override): --reason node-lost|",
            "22 stuck object(s) (1 listed objects are not stuck",
        ],
    );

    let release = |extra: &[&str]| {
        let mut args = vec![
            "unstick",
            "--node",
            "lost-node-1",
            "--reason",
            "node-lost",
            "--detail",
            "INC-4800 lost-node-1 powered off",
            "--force-delete",
        ];
        args.extend_from_slice(extra);
        c.finalizer_guard("carol", &args)
    };

    // A dry run through the API server and the webhook changes nothing; it
    // prints what would happen, a line per pod as kubectl drain prints.
    let run = release(&["--dry-run=server"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout.contains(&format!(
            "pod/web-0 -n {ns} released (server dry run): removed {CNI} with override \"node-lost: INC-4800 lost-node-1 powered off\""
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "pod/web-1 -n {other_ns} force-deleted (server dry run)"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "released 22 of 22 object(s), 0 already gone, 22 force-deleted (server dry run: nothing changed) (1 listed objects are not stuck and were left alone)"
        ),
        "{}",
        run.stdout
    );
    for name in &names {
        let ns = if name.trim_start_matches("web-").parse::<usize>().unwrap() % 2 == 0 {
            ns
        } else {
            other_ns
        };
        let pod = c.get(&["pod", name, "-n", ns]).unwrap();
        assert_eq!(finalizers(&pod), [CNI], "{name}");
        assert!(!annotations(&pod).contains_key(OVERRIDE), "{name}");
    }

    // The release: progress on standard error, the report for the incident
    // ticket on standard output.
    let run = release(&["-o", "json"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stderr.contains(&format!(
            "pod/web-0 -n {ns} released: removed {CNI} with override \"node-lost: INC-4800 lost-node-1 powered off\""
        )),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches("force-deleted").count(),
        22,
        "{}",
        run.stderr
    );
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["mode"], "release");
    assert_eq!(report["dryRun"], false);
    assert_eq!(report["user"]["username"], "carol");
    assert_eq!(report["reason"], "node-lost");
    assert_eq!(report["notStuck"], 1);
    assert_eq!(report["summary"]["released"], 22, "{report:#}");
    assert_eq!(report["summary"]["forceDeleted"], 22, "{report:#}");
    let web0 = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "web-0")
        .unwrap();
    assert_eq!(web0["result"], "released");
    assert_eq!(web0["removed"], json!([CNI]));
    assert_eq!(web0["mayLeak"]["node"], "lost-node-1");
    assert_eq!(web0["finalizers"][0]["ownerAlive"]["state"], "gone");
    assert_eq!(
        web0["override"],
        "node-lost: INC-4800 lost-node-1 powered off"
    );
    for name in &names {
        assert!(
            c.get(&["pod", name, "-n", ns]).is_none()
                && c.get(&["pod", name, "-n", other_ns]).is_none(),
            "{name} is gone"
        );
    }
    assert_eq!(
        finalizers(&c.get(&["pod", "alive-0", "-n", ns]).unwrap()),
        [CNI]
    );

    // Every removal went through the webhook as an override.
    let overrides = |records: &[Value]| {
        records
            .iter()
            .filter(|r| {
                r["decision"] == "override"
                    && r["user"] == "carol"
                    && r["name"].as_str().is_some_and(|n| n.starts_with("web-"))
                    && r["dryRun"] != true
            })
            .count()
    };
    let records = env.audit_records_when(|r| overrides(r) >= 22);
    assert_eq!(overrides(&records), 22);
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_change_between_the_read_and_the_patch_survives() {
    let env = env();
    let c = &env.cluster;
    let ns = "e2e-unstick-race";
    c.namespace(ns);
    let cleanup = "example.com/cache-cleanup";
    let backup = "example.com/backup";
    c.apply(&configmap(ns, "cache", &[cleanup, backup]));
    delete_nowait(&env, &["configmap", "cache", "-n", ns]);

    let mut child = c
        .finalizer_guard_command(
            "carol",
            &[
                "unstick",
                "configmap/cache",
                "-n",
                ns,
                "--finalizer",
                cleanup,
                "--reason",
                "controller-uninstalled",
                "--detail",
                "INC-4801 cache operator removed",
            ],
        )
        .env("FINALIZER_GUARD_PAUSE_BEFORE_WRITE", "4s")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "unstick ended before it paused"
        );
        if line.starts_with("pausing") {
            break;
        }
    }
    // Between its read and its write, the backup controller records its
    // progress. (Kubernetes refuses new finalizers on an object being
    // deleted, so a concurrent writer can only change other fields, or
    // remove finalizers.)
    c.admin(&[
        "label",
        "configmap",
        "cache",
        "-n",
        ns,
        "backup.example.com/state=uploading",
    ])
    .ok();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "configmap/cache -n {ns} released: removed {cleanup}"
        )),
        "{stdout}"
    );

    let cache = c
        .get(&["configmap", "cache", "-n", ns])
        .expect("held by the backup finalizer");
    // Exactly the named finalizer went; the concurrent write survived.
    assert_eq!(finalizers(&cache), [backup]);
    assert_eq!(
        cache["metadata"]["labels"]["backup.example.com/state"],
        "uploading"
    );
    // Override hygiene: the object still exists, so its override is gone.
    assert!(!annotations(&cache).contains_key(OVERRIDE), "{cache:#}");
    // The first write met the newer resourceVersion and was refused; the second went through.
    let patches: Vec<Value> = env
        .apiserver_audit()
        .into_iter()
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["name"] == "cache"
                && e["user"]["username"] == "carol"
        })
        .collect();
    assert!(
        patches.iter().any(|e| e["responseStatus"]["code"] == 422),
        "{patches:#?}"
    );
    super::release(&env, "configmap", "cache", ns);
}

/// Reads `child`'s standard error until it says it paused before a write,
/// and hands back the reader for the rest.
fn until_paused(child: &mut Child) -> BufReader<std::process::ChildStderr> {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "unstick ended before it paused"
        );
        if line.starts_with("pausing") {
            return stderr;
        }
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_name_taken_by_a_new_object_between_the_read_and_the_patch_is_left_alone() {
    let env = env();
    let c = &env.cluster;
    let ns = "e2e-unstick-replaced";
    c.namespace(ns);
    let cleanup = "example.com/cleanup";
    for name in ["cache", "scratch"] {
        c.apply(&configmap(ns, name, &[cleanup]));
    }
    delete_nowait(&env, &["configmap", "cache", "scratch", "-n", ns]);
    let uid = |name: &str| {
        c.get(&["configmap", name, "-n", ns]).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let explained = uid("cache");
    let audited = env.apiserver_audit().len();

    let mut child = c
        .finalizer_guard_command(
            "carol",
            &[
                "unstick",
                "configmaps",
                "-n",
                ns,
                "--reason",
                "controller-uninstalled",
                "--detail",
                "INC-4805 cache operator removed",
                "-o",
                "json",
            ],
        )
        .env("FINALIZER_GUARD_PAUSE_BEFORE_WRITE", "5s")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = until_paused(&mut child);
    // Between unstick's read and its write, someone else releases both; a
    // new, live `cache` takes the name (as a StatefulSet's pod would).
    for name in ["cache", "scratch"] {
        super::release(&env, "configmap", name, ns);
        wait_until(&format!("{name} to be gone"), 30, || {
            c.get(&["configmap", name, "-n", ns]).is_none()
        });
    }
    c.apply(&configmap(ns, "cache", &[cleanup]));
    let new = uid("cache");
    assert_ne!(new, explained);

    let mut progress = String::new();
    stderr.read_to_string(&mut progress).unwrap();
    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{progress}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(out.status.code(), Some(1), "{report:#}\n{progress}");

    // The new object keeps its finalizer, and no override was written to it.
    let cache = c.get(&["configmap", "cache", "-n", ns]).unwrap();
    assert_eq!(finalizers(&cache), [cleanup], "{cache:#}");
    assert!(!annotations(&cache).contains_key(OVERRIDE), "{cache:#}");
    assert!(cache["metadata"]["deletionTimestamp"].is_null());

    // Said as it happened, never as released by this run.
    assert!(
        progress.contains(&format!(
            "configmap/cache -n {ns} replaced: a new object (uid {new}) took the name; left alone"
        )),
        "{progress}"
    );
    assert!(
        progress.contains(&format!(
            "configmap/scratch -n {ns} gone: deleted before this run wrote to it; nothing written"
        )),
        "{progress}"
    );
    assert!(!progress.contains("released"), "{progress}");
    let object = |name: &str| {
        report["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {report:#}"))
            .clone()
    };
    let cache_report = object("cache");
    assert_eq!(cache_report["result"], "replaced", "{report:#}");
    assert_eq!(cache_report["uid"], explained.as_str());
    assert_eq!(cache_report["replacedByUid"], new.as_str());
    assert!(cache_report.get("removed").is_none(), "{report:#}");
    assert!(!cache_report["overrideCleared"].as_bool().unwrap());
    assert_eq!(object("scratch")["result"], "gone", "{report:#}");
    assert_eq!(report["summary"]["released"], 0, "{report:#}");
    assert_eq!(report["summary"]["replaced"], 1, "{report:#}");
    assert_eq!(report["summary"]["gone"], 1, "{report:#}");

    // unstick's patches to the name were all refused by their uid test:
    // the API server applied none of them.
    let patches: Vec<Value> = env
        .apiserver_audit()
        .into_iter()
        .skip(audited)
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["namespace"] == ns
                && e["user"]["username"] == "carol"
        })
        .collect();
    assert!(!patches.is_empty(), "unstick wrote nothing at all");
    assert!(
        patches
            .iter()
            .all(|e| e["responseStatus"]["code"] == 422 || e["responseStatus"]["code"] == 404),
        "{patches:#?}"
    );
    super::release(&env, "configmap", "cache", ns);
}

/// kube-system/kube-controller-manager as a leader-elected instance renews
/// it (this control plane runs one instance, without leader election), and
/// gone again when dropped.
struct ControllerManagerLease<'a>(&'a Env);

impl<'a> ControllerManagerLease<'a> {
    fn renew(env: &'a Env) -> Self {
        // A MicroTime: exactly six fractional digits.
        let at = jiff::Timestamp::now();
        let now = format!(
            "{}.{:06}Z",
            at.strftime("%Y-%m-%dT%H:%M:%S"),
            at.subsec_microsecond()
        );
        env.cluster.apply(&json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kube-controller-manager", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "e2e-control-plane_kcm", "leaseDurationSeconds": 60,
                "acquireTime": now, "renewTime": now,
            },
        }));
        ControllerManagerLease(env)
    }
}

impl Drop for ControllerManagerLease<'_> {
    fn drop(&mut self) {
        self.0
            .cluster
            .admin(&[
                "delete",
                "lease",
                "kube-controller-manager",
                "-n",
                "kube-system",
                "--ignore-not-found",
            ])
            .ok();
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_finalizer_whose_owner_is_alive_is_removed_only_when_named() {
    let env = env();
    let c = &env.cluster;
    let ns = "e2e-unstick-alive";
    let protection = "kubernetes.io/pvc-protection";
    let snapshot = "example.com/snapshot";
    c.namespace(ns);
    // A claim in use by a pod bound to a node: kube-controller-manager's
    // pvc-protection controller holds its finalizer, rightly.
    dead_node(&env, "e2e-alive-node");
    c.apply(&json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": ns, "finalizers": [snapshot]},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }));
    let mut db = pod(ns, "db-0", Some("e2e-alive-node"), &[]);
    db["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    c.apply(&db);
    delete_nowait(&env, &["pvc", "data", "-n", ns]);
    let held = || finalizers(&c.get(&["pvc", "data", "-n", ns]).unwrap());
    assert_eq!(held(), [snapshot, protection]);
    let _lease = ControllerManagerLease::renew(&env);

    // Explained: the owner is alive, and unstick says it leaves the finalizer.
    let run = c.finalizer_guard("carol", &["unstick", "pvc/data", "-n", ns]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            "owner:       built-in controller pvc-protection (kube-controller-manager)",
            "owner alive: yes: kube-controller-manager holds its lease",
            "unstick:     leaves it, its owner being alive: name it with --finalizer to remove it",
        ],
    );

    let release_for = |reason: &str, extra: &[&str]| {
        let mut args = vec![
            "unstick",
            "pvc/data",
            "-n",
            ns,
            "--reason",
            reason,
            "--detail",
            "INC-4806 snapshot operator removed",
        ];
        args.extend_from_slice(extra);
        c.finalizer_guard("carol", &args)
    };
    let release = |extra: &[&str]| release_for("controller-uninstalled", extra);
    // Not named: the snapshot finalizer goes, pvc-protection stays, and the
    // run says so and fails.
    let run = release(&[]);
    assert_eq!(run.code, 1, "{run:#?}");
    let label = format!("persistentvolumeclaim/data -n {ns}");
    assert!(
        run.stdout.contains(&format!(
            "{label} partly released: removed {snapshot} with override"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "{label} left: {protection} (owner alive: kube-controller-manager holds its lease"
        )) && run
            .stdout
            .contains("; name it with --finalizer to remove it)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("1 partly released"), "{}", run.stdout);
    assert_eq!(held(), [protection]);

    // Named, with a reason the shipped policy does not release it for
    // (override.finalizers): not attempted, and said why.
    let run = release(&["--finalizer", protection]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains(&format!(
            "{label} left: {protection} (it accepts only node-lost (override.finalizers[0]): not attempted with --reason controller-uninstalled)"
        )),
        "{}",
        run.stdout
    );
    assert_eq!(held(), [protection]);

    // Named, its pod's node lost: it goes.
    let run = release_for("node-lost", &["--finalizer", protection, "-o", "json"]);
    assert_eq!(run.code, 0, "{run:#?}");
    let report = run.json();
    assert_eq!(report["objects"][0]["result"], "released", "{report:#}");
    assert_eq!(report["objects"][0]["removed"], json!([protection]));
    assert!(report["objects"][0].get("left").is_none(), "{report:#}");
    wait_until("the claim to be gone", 30, || {
        c.get(&["pvc", "data", "-n", ns]).is_none()
    });
    c.admin(&[
        "delete",
        "pod",
        "db-0",
        "-n",
        ns,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ])
    .ok();
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_namespace_stuck_on_an_unavailable_apiservice_is_released_through_finalize() {
    let env = env();
    let c = &env.cluster;
    let api = unavailable_apiservice(&env, "v1alpha1", "unstick.e2e.example.com");
    let name = api.1.as_str();
    let ns = "e2e-unstick-ns";
    c.namespace(ns);
    c.admin(&["delete", "namespace", ns, "--wait=false"]).ok();
    wait_until("the namespace to report its discovery failure", 90, || {
        c.get(&["namespace", ns]).unwrap()["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "NamespaceDeletionDiscoveryFailure" && c["status"] == "True"
                })
            })
    });

    let target = format!("namespace/{ns}");
    let run = c.finalizer_guard("admin", &["unstick", &target]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            "kubernetes (spec.finalizers)",
            "owner:       built-in controller namespace (kube-controller-manager)",
            &format!("blocked by: APIService {name} is not Available"),
            "NamespaceDeletionDiscoveryFailure",
            "--reason node-lost|controller-unavailable|controller-uninstalled|apiservice-unavailable",
        ],
    );

    // The namespace's own finalizer stays without --orphan-contents.
    let release = [
        "unstick",
        &target,
        "--reason",
        "apiservice-unavailable",
        "--detail",
        "INC-4802 the metrics API has no backend",
    ];
    let run = c.finalizer_guard("admin", &release);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains("left: kubernetes (the namespace's own finalizer: removing it orphans what is still inside")
            && run.stdout.contains("pass --orphan-contents to remove it anyway"),
        "{}",
        run.stdout
    );
    let mut release = release.to_vec();
    release.push("--orphan-contents");
    let mut dry = release.to_vec();
    dry.push("--dry-run=server");
    let run = c.finalizer_guard("admin", &dry);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains("released (server dry run): removed kubernetes"),
        "{}",
        run.stdout
    );
    let still = c
        .get(&["namespace", ns])
        .expect("a dry run changes nothing");
    assert_eq!(still["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(!annotations(&still).contains_key(OVERRIDE));

    // As a kubectl plugin, the way the README installs it.
    let mut plugin = release.clone();
    plugin.remove(0);
    let mut args = vec!["unstick"];
    args.extend(plugin);
    let run = c.plugin("admin", &args);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains(&format!("namespace/{ns} released: removed kubernetes")),
        "{}",
        run.stdout
    );
    wait_until("the namespace to be gone", 30, || {
        c.get(&["namespace", ns]).is_none()
    });
    let finalize =
        |r: &Value| r["name"] == ns && r["decision"] == "override" && r["dryRun"] != true;
    let finalize = env
        .audit_records_when(|records| records.iter().any(finalize))
        .into_iter()
        .find(finalize)
        .expect("the override through namespaces/finalize");
    assert_eq!(finalize["subresource"], "finalize", "{finalize:#}");
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn two_person_release_with_unstick_and_approve() {
    let mut env = env();
    let policy = env.policy(Policy {
        approval: Some(json!({"groups": ["sre-oncall"], "maxAge": "2h"})),
        ..Policy::default()
    });
    env.set_policy(&policy);
    let c = &env.cluster;
    let ns = "e2e-unstick-two-person";
    c.namespace(ns);
    not_ready_node(&env, "lost-node-2");
    for name in ["db-0", "db-1"] {
        c.apply(&pod(ns, name, Some("lost-node-2"), &[CNI]));
        delete_nowait(&env, &["pod", name, "-n", ns]);
    }
    let unstick = |user: &str, name: &str| {
        c.finalizer_guard(
            user,
            &[
                "unstick",
                &format!("pod/{name}"),
                "-n",
                ns,
                "--reason",
                "node-lost",
                "--detail",
                "INC-4803 lost",
            ],
        )
    };

    // No approval yet: alice is told so, and nothing is written.
    let run = unstick("alice", "db-0");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains("no approval on the object"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("an approver (groups sre-oncall) runs: finalizer-guard approve pod/db-0 -n e2e-unstick-two-person"), "{}", run.stdout);

    // alice is no approver: the webhook refuses her approval.
    let approve = |user: &str, name: &str, for_: &str| {
        c.finalizer_guard(
            user,
            &[
                "approve",
                &format!("pod/{name}"),
                "-n",
                ns,
                "--reason",
                "node-lost",
                "--detail",
                "INC-4803 lost",
                "--for",
                for_,
            ],
        )
    };
    let run = approve("alice", "db-0", "1h");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains("not approved: denied") && run.stdout.contains("not an approver"),
        "{run:#?}"
    );

    // An expired approval is said plainly.
    let run = approve("carol", "db-1", "2s");
    assert_eq!(run.code, 0, "{run:#?}");
    // Its expiry, 2 s from when approve ran, is past this instant's 2 s.
    let expired = std::time::Instant::now() + std::time::Duration::from_secs(2);
    wait_until("the approval's expiry to pass", 30, || {
        std::time::Instant::now() > expired
    });
    let run = unstick("alice", "db-1");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains("the approval expired at"),
        "{}",
        run.stdout
    );

    // carol approves db-0; she may not use her own approval.
    let run = approve("carol", "db-0", "1h");
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains("pod/db-0 -n e2e-unstick-two-person approved until"),
        "{}",
        run.stdout
    );
    let run = unstick("carol", "db-0");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains("the approval is your own (carol)"),
        "{}",
        run.stdout
    );

    // alice uses it; the approval is removed from the pod, which waits for its kubelet.
    let run = unstick("alice", "db-0");
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(run.stdout.contains("(approved by carol)"), "{}", run.stdout);
    let db0 = c.get(&["pod", "db-0", "-n", ns]).unwrap();
    assert!(finalizers(&db0).is_empty());
    let left = annotations(&db0);
    assert!(
        !left.contains_key(OVERRIDE)
            && !left.contains_key("finalizer-guard.io/approved-by")
            && !left.contains_key("finalizer-guard.io/override-expires")
            && !left.contains_key("finalizer-guard.io/approval-seal"),
        "the approval used is cleared, its seal with it: {db0:#}"
    );

    let default = env.policy(Policy::default());
    env.set_policy(&default);
    super::release(&env, "pod", "db-1", ns);
    env.cluster
        .admin(&[
            "delete",
            "pods",
            "--all",
            "-n",
            ns,
            "--grace-period=0",
            "--force",
            "--wait=false",
        ])
        .ok();
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn unstick_says_when_the_webhook_is_down() {
    let mut env = env();
    let ns = "e2e-unstick-down";
    env.cluster.namespace(ns);
    env.cluster.apply(&configmap(ns, "a", &["example.com/a"]));
    env.cluster.apply(&configmap(ns, "b", &["example.com/b"]));
    delete_nowait(&env, &["configmap", "a", "b", "-n", ns]);
    env.stop();
    let run = env.cluster.finalizer_guard(
        "carol",
        &[
            "unstick",
            "configmaps",
            "-n",
            ns,
            "--reason",
            "controller-unavailable",
            "--detail",
            "INC-4804",
        ],
    );
    env.start();
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stderr.contains("failurePolicy is Fail")
            && run.stderr.contains(
                "rollout restart deployment -l app.kubernetes.io/name=finalizer-guard,app.kubernetes.io/component=webhook"
            ),
        "{run:#?}"
    );
    assert!(
        run.stderr
            .contains("never deletes or disables the ValidatingWebhookConfiguration"),
        "{run:#?}"
    );
    assert!(
        run.stdout
            .contains("not released: the webhook is unreachable"),
        "{run:#?}"
    );
    let c = &env.cluster;
    assert_eq!(
        finalizers(&c.get(&["configmap", "a", "-n", ns]).unwrap()),
        ["example.com/a"]
    );
    assert!(
        c.get(&["validatingwebhookconfiguration", "finalizer-guard"])
            .is_some()
    );
    for name in ["a", "b"] {
        super::release(&env, "configmap", name, ns);
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_namespace_held_by_a_custom_resource_lists_it_and_orphans_only_when_asked() {
    let env = env();
    let c = &env.cluster;
    let (group, ns) = ("contents.e2e.example.com", "e2e-unstick-contents");
    let type_name = format!("gadgets.{group}");
    custom_resource_type(&env, group, "gadgets", "Gadget");
    c.namespace(ns);
    // A Gadget whose controller is gone: nothing will ever remove its finalizer.
    let finalizer = "contents.e2e.example.com/teardown";
    c.apply(&json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": ns, "finalizers": [finalizer]},
    }));
    c.admin(&["delete", "namespace", ns, "--wait=false"]).ok();
    wait_until(
        "the namespace to wait on the Gadget's finalizer",
        90,
        || {
            c.get(&["namespace", ns]).unwrap()["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "NamespaceFinalizersRemaining" && c["status"] == "True"
                    })
                })
        },
    );
    let target = format!("namespace/{ns}");
    let command =
        format!("finalizer-guard unstick {type_name}/g1 -n {ns} --reason REASON --detail TEXT");

    // Explained: what is inside, what holds it, and the command for each.
    // As admin: carol's edit rights do not read custom resources, and what
    // cannot be listed is not counted (it would be said).
    let run = c.finalizer_guard("admin", &["unstick", &target]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            &format!("  still inside: 1 object(s) ({type_name} 1)"),
            "  holding finalizers (1), each released by its own command:",
            &format!("    {type_name}/g1 ({finalizer}): {command}"),
            "unstick:     removes it only with --orphan-contents",
        ],
    );
    let run = c.finalizer_guard("admin", &["unstick", &target, "-o", "json"]);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    let contents = &report["objects"][0]["contents"];
    assert_eq!(
        contents["remaining"],
        json!({type_name.clone(): 1}),
        "{report:#}"
    );
    assert_eq!(contents["holding"][0]["object"], format!("{type_name}/g1"));
    assert_eq!(contents["holding"][0]["finalizers"], json!([finalizer]));
    assert_eq!(contents["holding"][0]["command"], command);

    // Released without --orphan-contents: the namespace's own finalizer stays.
    let release = [
        "unstick",
        target.as_str(),
        "--reason",
        "controller-uninstalled",
        "--detail",
        "INC-4810 the gadget operator was uninstalled",
    ];
    let run = c.finalizer_guard("admin", &release);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_prints(
        &run,
        &[
            &format!(
                "{target} left: kubernetes (the namespace's own finalizer: removing it orphans what is still inside (1 object(s) ({type_name} 1))"
            ),
            "pass --orphan-contents to remove it anyway",
            &format!("    {type_name}/g1 ({finalizer}): {command}"),
        ],
    );
    let still = c.get(&["namespace", ns]).unwrap();
    assert_eq!(still["spec"]["finalizers"], json!(["kubernetes"]));

    // With it: released, and what it orphaned is said, counted by type.
    let mut orphaning = release.to_vec();
    orphaning.extend(["--orphan-contents", "-o", "json"]);
    let run = c.finalizer_guard("admin", &orphaning);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stderr
            .contains(&format!("{target} orphaned: 1 object(s) ({type_name} 1)")),
        "{}",
        run.stderr
    );
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    let object = &report["objects"][0];
    assert_eq!(object["result"], "released", "{report:#}");
    assert_eq!(object["orphaned"]["objects"], 1);
    assert_eq!(object["orphaned"]["byType"], json!({type_name.clone(): 1}));
    wait_until("the namespace to be gone", 30, || {
        c.get(&["namespace", ns]).is_none()
    });
    // Orphaned indeed: the Gadget outlives its namespace.
    let gadget = c
        .get(&[&type_name, "g1", "-n", ns])
        .expect("the orphaned Gadget is still stored");
    assert_eq!(finalizers(&gadget), [finalizer]);

    let listed = [
        "unstick",
        &format!("{type_name}/g1"),
        "-n",
        ns,
        "--reason",
        "controller-uninstalled",
        "--detail",
        "INC-4810 the gadget operator was uninstalled",
    ];
    let (git, minor) = c.server_version();
    let run = c.finalizer_guard("admin", &listed);
    if minor >= 37 {
        // From 1.37 kube-apiserver writes an object whose namespace is gone:
        // the listed command (a reason and a detail filled in) releases it.
        assert_eq!(run.code, 0, "{git}: {run:#?}");
    } else {
        // Before, it refuses every write to it as not found: the listed
        // command says what to do, the namespace again, then the release.
        assert_eq!(run.code, 1, "{git}: {run:#?}");
        assert!(
            run.stdout.contains(&format!(
                "its namespace {ns} no longer exists (it was orphaned), and the API server refuses every write to it as not found: create the namespace again (kubectl create namespace {ns})"
            )),
            "{run:#?}"
        );
        c.admin(&["create", "namespace", ns]).ok();
        let run = c.finalizer_guard("admin", &listed);
        assert_eq!(run.code, 0, "{run:#?}");
    }
    wait_until("the Gadget to be gone", 30, || {
        c.get(&[&type_name, "g1", "-n", ns]).is_none()
    });
    if c.get(&["namespace", ns]).is_some() {
        c.admin(&["delete", "namespace", ns, "--wait=false"]).ok();
    }
    c.admin(&["delete", "crd", &format!("gadgets.{group}")])
        .ok();
}

/// `oncall` bound to what `unstick` needs to release pods, but not to read
/// nodes: it cannot tell a dead node from a live one.
struct NoNodeReads<'a>(&'a Env);

const NO_NODES: &str = "e2e-oncall-no-node-reads";

impl<'a> NoNodeReads<'a> {
    fn new(env: &'a Env) -> NoNodeReads<'a> {
        let c = &env.cluster;
        c.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": NO_NODES},
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "configmaps", "services"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "delete"]},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
                {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["get", "list"]},
            ],
        }));
        c.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": NO_NODES},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NO_NODES},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oncall"}],
        }));
        wait_until("the binding to take effect", 30, || {
            c.kubectl("oncall", &["auth", "can-i", "patch", "pods", "-A"])
                .stdout
                .trim()
                == "yes"
        });
        NoNodeReads(env)
    }
}

impl Drop for NoNodeReads<'_> {
    fn drop(&mut self) {
        let c = &self.0.cluster;
        c.admin(&[
            "delete",
            "clusterrolebinding",
            NO_NODES,
            "--ignore-not-found",
        ]);
        c.admin(&["delete", "clusterrole", NO_NODES, "--ignore-not-found"]);
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn no_pod_of_a_dead_node_is_left_behind_and_who_cannot_tell_is_told_why() {
    let env = env();
    let c = &env.cluster;
    let (ns, node) = ("e2e-unstick-seed-000", "lost-node-000");
    c.namespace(ns);
    not_ready_node(&env, node);
    // Three pods held by the CNI's finalizer, two no finalizer holds: all
    // five wait for a kubelet that will never confirm their deletion.
    let held = ["web-0", "web-1", "web-2"];
    let free = ["job-0", "job-1"];
    for name in held {
        c.apply(&pod(ns, name, Some(node), &[CNI]));
    }
    for name in free {
        c.apply(&pod(ns, name, Some(node), &[]));
    }
    for name in held.iter().chain(&free) {
        delete_nowait(&env, &["pod", name, "-n", ns]);
    }
    let release = |user: &str| {
        c.finalizer_guard(
            user,
            &[
                "unstick",
                "--node",
                node,
                "-n",
                ns,
                "--reason",
                "node-lost",
                "--detail",
                "INC-0000 lost-node-000 powered off",
                "--force-delete",
            ],
        )
    };
    let pods_left = || {
        held.iter()
            .chain(&free)
            .filter(|name| c.get(&["pod", name, "-n", ns]).is_some())
            .count()
    };

    // An on-call user who may not read nodes: the finalizers go, nothing is
    // force-deleted, and every pod left is counted, with why.
    let bound = NoNodeReads::new(&env);
    let cannot_tell =
        format!("whether its node is dead cannot be told (you may not read node {node}");
    let run = release("oncall");
    assert_eq!(run.code, 1, "{run:#?}");
    assert_prints(
        &run,
        &[
            &format!("pod/web-0 -n {ns} released: removed {CNI}"),
            &format!(
                "pod/web-0 -n {ns} left Terminating: no finalizer holds it, and {cannot_tell}"
            ),
            "whether it is dead takes get on nodes (the on-call role grants it)): not force-deleted",
            &format!("pod/job-0 -n {ns} not released: no finalizer holds it, and {cannot_tell}"),
            "released 3 of 5 object(s), 0 already gone, 0 force-deleted, 5 left Terminating",
        ],
    );
    assert_eq!(pods_left(), 5);
    // Run again: no finalizer left on any, and still stuck for the person on call.
    let run = release("oncall");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stdout.contains(
            "released 0 of 5 object(s), 0 already gone, 0 force-deleted, 5 left Terminating"
        ),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("no stuck objects found"),
        "{}",
        run.stdout
    );
    drop(bound);

    // Explained to carol, who reads nodes: dead, and how to finish them.
    let run = c.finalizer_guard("carol", &["unstick", "--node", node, "-n", ns]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            "no finalizer holds it: it waits for its node's kubelet to confirm the deletion",
            &format!(
                "node alive:  no: node {node} Ready=Unknown for 60m (past --not-ready-for 5m)"
            ),
            "--force-delete deletes it with grace period 0",
            "5 stuck object(s)",
        ],
    );
    // carol's release leaves none behind.
    let run = release("carol");
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains(&format!("pod/web-0 -n {ns} force-deleted: no finalizer held it; its node is dead (node {node} Ready=Unknown")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("released 0 of 5 object(s), 0 already gone, 5 force-deleted"),
        "{}",
        run.stdout
    );
    wait_until("every pod of the dead node to be gone", 30, || {
        pods_left() == 0
    });
}
