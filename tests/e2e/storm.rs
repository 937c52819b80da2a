//! A controller stuck in a retry loop against a denial: ten denied writes a
//! second for a minute on one object. The webhook's Events for it must be
//! one Event whose series counts every denial, and cost the API server a
//! handful of writes, counted in kube-apiserver's own audit log (which
//! `e2e/cluster.sh` makes record Event creates, patches and updates).

use std::fs;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::harness::{NAMESPACE, env, wait_until};
use crate::{STRIP, denied, release};

const NS: &str = "e2e-storm";
/// The stuck controller's pace and persistence.
const PER_SECOND: u32 = 10;
const SECONDS: u32 = 60;
/// The most Event writes (creates and series updates) the storm may cost.
const MAX_EVENT_WRITES: usize = 15;

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn a_retry_storm_is_one_event_and_a_few_writes() {
    let env = env();
    let c = &env.cluster;
    c.namespace(NS);
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stuck", "namespace": NS, "finalizers": ["example.com/storm"]},
        "data": {"k": "v"},
    }));
    // Repeats update an Event's series: a patch of the Event.
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "e2e-finalizer-guard-event-series"},
        "rules": [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["patch"]}],
    }));
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-finalizer-guard-event-series"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-finalizer-guard-event-series"},
        "subjects": [{"kind": "ServiceAccount", "name": "finalizer-guard", "namespace": NAMESPACE}],
    }));

    // The stuck controller: a ServiceAccount of its own, allowed to edit
    // ConfigMaps in the namespace, and not by the policy to remove the finalizer.
    c.admin(&["create", "serviceaccount", "stuck-controller", "-n", NS])
        .ok();
    c.admin(&[
        "create",
        "rolebinding",
        "stuck-controller-edit",
        "-n",
        NS,
        "--clusterrole=edit",
        &format!("--serviceaccount={NS}:stuck-controller"),
    ])
    .ok();
    let token = c
        .admin(&["create", "token", "stuck-controller", "-n", NS])
        .ok()
        .stdout;
    let admin: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(c.kubeconfig("admin")).unwrap()).unwrap();
    let kubeconfig: Kubeconfig = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "stuck-controller", "user": {"token": token.trim()}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "stuck-controller"}}],
        "current-context": "e2e",
    }))
    .unwrap();

    let audited = env.apiserver_audit().len();
    let started = Instant::now();
    let (denials, unexpected) = storm(kubeconfig);
    let took = started.elapsed();
    assert!(unexpected.is_empty(), "{unexpected:#?}");
    assert_eq!(denials, (PER_SECOND * SECONDS) as usize);

    // The Event: one, its series counting every denial once the last
    // repeats are written (at most an interval after the storm).
    let mut event = Value::Null;
    wait_until("the Event's series to count every denial", 30, || {
        let events = storm_events(&env);
        assert_eq!(events.len(), 1, "one Event for the storm: {events:#?}");
        event = events[0].clone();
        event["series"]["count"] == denials
    });
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.starts_with(&format!(
            "system:serviceaccount:{NS}:stuck-controller may not remove finalizers example.com/storm; see finalizer-guard's audit record "
        )),
        "{note}"
    );

    // What it cost the API server: the webhook's writes of Events in the namespace.
    let writes: Vec<Value> = env
        .apiserver_audit()
        .into_iter()
        .skip(audited)
        .filter(|e| {
            e["objectRef"]["resource"] == "events"
                && e["objectRef"]["namespace"] == NS
                && e["user"]["username"]
                    == format!("system:serviceaccount:{NAMESPACE}:finalizer-guard")
        })
        .collect();
    let verbs: Vec<(String, i64)> = writes
        .iter()
        .map(|e| {
            (
                e["verb"].as_str().unwrap().to_string(),
                e["responseStatus"]["code"].as_i64().unwrap(),
            )
        })
        .collect();
    eprintln!(
        "storm: {denials} denials in {:.1} s, {} Event writes: {verbs:?}",
        took.as_secs_f64(),
        writes.len()
    );
    assert!(
        verbs
            .iter()
            .all(|(verb, code)| matches!(verb.as_str(), "create" | "patch")
                && (200..300).contains(code)),
        "{verbs:?}"
    );
    assert_eq!(
        verbs.iter().filter(|(verb, _)| verb == "create").count(),
        1,
        "{verbs:?}"
    );
    assert!(verbs.len() >= 2, "the series was written: {verbs:?}");
    assert!(
        writes.len() <= MAX_EVENT_WRITES,
        "{} Event writes for {denials} denials: {verbs:?}",
        writes.len()
    );

    // And `kubectl describe` shows it as one line with its count.
    let described = c
        .kubectl("alice", &["describe", "configmap", "stuck", "-n", NS])
        .ok();
    assert!(
        described.stdout.contains("FinalizerRemovalDenied")
            && described.stdout.contains(&format!("(x{denials} over")),
        "{described:#?}"
    );

    c.admin(&[
        "delete",
        "clusterrolebinding,clusterrole",
        "e2e-finalizer-guard-event-series",
    ])
    .ok();
    release(&env, "configmap", "stuck", NS);
    c.admin(&["delete", "namespace", NS, "--timeout=120s"]).ok();
}

/// Strips the finalizer of `stuck` `PER_SECOND` times a second for
/// `SECONDS`, as the controller's retry loop would, through kube-rs.
/// Returns the writes the webhook denied and whatever else came back.
fn storm(kubeconfig: Kubeconfig) -> (usize, Vec<String>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), NS);
        let strip: Value = serde_json::from_str(STRIP).unwrap();
        let (mut denials, mut unexpected) = (0, Vec::new());
        let start = tokio::time::Instant::now();
        let step = Duration::from_secs(1) / PER_SECOND;
        for i in 0..PER_SECOND * SECONDS {
            tokio::time::sleep_until(start + step * i).await;
            match api
                .patch("stuck", &PatchParams::default(), &Patch::Merge(&strip))
                .await
            {
                Err(kube::Error::Api(status))
                    if status.code == 403 && status.message.contains(&denied()) =>
                {
                    denials += 1;
                }
                other => unexpected.push(format!("{other:?}")),
            }
        }
        (denials, unexpected)
    })
}

/// The events.k8s.io Events in the namespace about `stuck`.
fn storm_events(env: &crate::harness::Env) -> Vec<Value> {
    let list = env
        .cluster
        .get(&["events.v1.events.k8s.io", "-n", NS])
        .unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == "stuck" && e["reason"] == "FinalizerRemovalDenied")
        .cloned()
        .collect()
}
