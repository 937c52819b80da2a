//! `finalizer-guard unstick` and `approve` on the real control plane: what
//! the on-call engineer runs instead of a `kubectl patch` loop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};

use serde_json::{Value, json};

use super::harness::{Env, OVERRIDE, Policy, env, wait_until};
use super::{CNI, configmap, dead_node, delete_nowait, finalizers, pod, unavailable_apiservice};

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
    for needle in [
        "pod/web-0 -n e2e-unstick-node: Terminating for",
        CNI,
        "owner:       unknown",
        "owner alive: no: node lost-node-1 Ready=Unknown for 60m (past --not-ready-for 5m)",
        "may leak:  node lost-node-1",
        "only with an override (finalizer-guard.io/override): --reason node-lost|",
        "22 stuck object(s) (1 listed objects are not stuck",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?}: {}", run.stdout);
    }

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
    let overrides = env
        .audit_records()
        .into_iter()
        .filter(|r| {
            r["decision"] == "override"
                && r["user"] == "carol"
                && r["name"].as_str().is_some_and(|n| n.starts_with("web-"))
        })
        .filter(|r| r["dryRun"] != true)
        .count();
    assert_eq!(overrides, 22);
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
    for needle in [
        "owner:       built-in controller pvc-protection (kube-controller-manager)",
        "owner alive: yes: kube-controller-manager holds its lease",
        "unstick:     leaves it, its owner being alive: name it with --finalizer to remove it",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?}: {}", run.stdout);
    }

    let release = |extra: &[&str]| {
        let mut args = vec![
            "unstick",
            "pvc/data",
            "-n",
            ns,
            "--reason",
            "controller-uninstalled",
            "--detail",
            "INC-4806 snapshot operator removed",
        ];
        args.extend_from_slice(extra);
        c.finalizer_guard("carol", &args)
    };
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

    // Named: it goes.
    let run = release(&["--finalizer", protection, "-o", "json"]);
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
    for needle in [
        "kubernetes (spec.finalizers)",
        "owner:       built-in controller namespace (kube-controller-manager)",
        &format!("blocked by: APIService {name} is not Available"),
        "NamespaceDeletionDiscoveryFailure",
        "--reason node-lost|controller-unavailable|controller-uninstalled|apiservice-unavailable",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?}: {}", run.stdout);
    }

    let release = [
        "unstick",
        &target,
        "--reason",
        "apiservice-unavailable",
        "--detail",
        "INC-4802 the metrics API has no backend",
    ];
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
    let mut plugin = release.to_vec();
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
    let finalize = env
        .audit_records()
        .into_iter()
        .find(|r| r["name"] == ns && r["decision"] == "override" && r["dryRun"] != true)
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
    std::thread::sleep(std::time::Duration::from_secs(3));
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
        run.stderr.contains("finalizer-guard fails closed"),
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
