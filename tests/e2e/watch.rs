//! `finalizer-guard watch` on the real control plane: objects stuck on
//! finalizers show in its gauges and get a FinalizerStuck Event within
//! `--stuck-after` plus 30 s, a type created after it started included,
//! and the gauges drop back once `unstick` releases them.
//!
//! It runs as the chart's watch Deployment would run it: the chart is
//! rendered (`helm template`), its ServiceAccount, ClusterRole and binding
//! are applied, and the Deployment's container is started here (there is no
//! kubelet) with the container's arguments and environment, a token of that
//! ServiceAccount, and the release's policy file where the pod mounts it.
//! Only the addresses change: `--admin-listen` on a free local port.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{Cluster, Env, NAMESPACE, bin, env, free_port, http_get, poll, wait_until};
use super::{delete_nowait, unavailable_apiservice};
use crate::common::assert::assert_contains_all;

const GROUP: &str = "e2e-watch.example.com";
const NS: &str = "e2e-watched-ns";
const STUCK_NS: &str = "e2e-watch-stuck";
/// `--stuck-after`, and how long after it the gauges and Events may take.
const STUCK_AFTER: u64 = 5;
const WITHIN: u64 = STUCK_AFTER + 30;

/// The running `watch`, stopped when the scenario ends however it ends.
struct Watch {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Watch {
    fn metrics(&self) -> String {
        http_get(self.port, "/metrics").unwrap_or_default()
    }

    /// A gauge's value, `None` while the series does not exist.
    fn gauge(&self, name: &str, labels: &str) -> Option<f64> {
        let prefix = format!("{name}{{{labels}}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
    }

    fn stuck(&self, finalizer: &str, resource: &str) -> Option<f64> {
        self.gauge(
            "finalizer_guard_stuck_objects",
            &format!("finalizer=\"{finalizer}\",resource=\"{resource}\""),
        )
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the log has a line saying `message` about `object`.
    fn logged(&self, message: &str, object: &str) -> bool {
        self.log().lines().any(|l| {
            let line: Value = serde_json::from_str(l).unwrap_or_default();
            line["message"] == message && line["object"] == object
        })
    }
}

/// The chart's objects for `watch` (and the policy ConfigMap its pod mounts),
/// rendered as release `finalizer-guard` in namespace `finalizer-guard`.
fn chart_objects(env: &Env) -> Vec<Value> {
    super::helm::render(
        &env.work,
        &[
            "--set",
            &format!("watch.stuckAfter={STUCK_AFTER}s"),
            // The scenarios before this one leave namespaces held by 130
            // finalizers each (tests/e2e/vap.rs): past the default 100
            // names, this scenario's would be counted as `other`.
            "--set",
            "watch.maxFinalizers=1000",
            "--show-only",
            "templates/watch.yaml",
            "--show-only",
            "templates/configmap.yaml",
        ],
    )
}

/// The chart's watch, started as its pod would start: its RBAC applied,
/// its container's arguments and environment, a token of its ServiceAccount,
/// and the policy it mounts. `--admin-listen` goes to `port`.
fn start_chart_watch(env: &Env, port: u16, log: &Path) -> Child {
    let c = &env.cluster;
    let objects = chart_objects(env);
    let mut account = String::new();
    let mut deployment = None;
    for object in &objects {
        match object["kind"].as_str().unwrap() {
            "ServiceAccount" => {
                account = object["metadata"]["name"].as_str().unwrap().to_string();
                c.apply(object).ok();
            }
            "ClusterRole" | "ClusterRoleBinding" => {
                c.apply(object).ok();
            }
            "Deployment" => deployment = Some(object.clone()),
            _ => {}
        }
    }
    assert_eq!(account, "finalizer-guard-watch");
    let deployment = deployment.expect("the chart's watch Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], account.as_str());
    let container = &pod["containers"][0];

    // The policy file, where the pod mounts the release's ConfigMap.
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("the policy ConfigMap")["data"]["policy.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let policy_file = env.work.join("watch-policy.yaml");
    fs::write(&policy_file, policy).unwrap();
    let mut args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let at = |args: &[String], flag: &str| args.iter().position(|a| a == flag).unwrap() + 1;
    let i = at(&args, "--policy");
    assert_eq!(args[i], format!("{mount}/policy.yaml"));
    args[i] = policy_file.to_str().unwrap().to_string();
    let i = at(&args, "--admin-listen");
    assert_eq!(args[i], "0.0.0.0:9091");
    args[i] = format!("127.0.0.1:{port}");

    let kubeconfig = c.token_kubeconfig(&account, NAMESPACE, &env.work.join("watch.kubeconfig"));
    let mut command = Command::new(bin());
    command.args(&args).arg("--kubeconfig").arg(&kubeconfig);
    for var in container["env"].as_array().into_iter().flatten() {
        command.env(
            var["name"].as_str().unwrap(),
            var["value"].as_str().unwrap_or_default(),
        );
    }
    command
        .env("NO_COLOR", "1")
        .env("HOSTNAME", "finalizer-guard-watch-e2e")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// A namespaced CRD `PLURAL.e2e-watch.example.com`, established, with the
/// ClusterRole its chart would ship to let `view` read it (aggregated to
/// view): the chart's watch reads custom resources through that (its
/// ClusterRole `finalizer-guard-watch-view`), not through `*`, which would
/// take Secrets in.
fn crd(c: &Cluster, plural: &str, kind: &str) {
    let name = format!("{plural}.{GROUP}");
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("e2e-watch-view-{plural}"),
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": [GROUP], "resources": [plural], "verbs": ["get", "list", "watch"]}],
    }));
    c.apply(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }));
    wait_until(&format!("{name} to be established"), 60, || {
        c.get(&["crd", &name]).unwrap()["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
    });
}

/// An object of that CRD holding `finalizer`, then deleted: its controller
/// is gone (there never was one), so it stays Terminating.
fn stuck_object(c: &Cluster, kind: &str, name: &str, finalizer: &str) {
    let object = json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": kind,
        "metadata": {"name": name, "namespace": NS, "finalizers": [finalizer]},
    });
    // kubectl's discovery may lag a new type by a moment.
    wait_until(&format!("{kind} {name} to be created"), 30, || {
        c.kubectl_in("admin", &["apply", "-f", "-"], Some(&object.to_string()))
            .code
            == 0
    });
    c.admin(&[
        "delete",
        &format!("{}.{GROUP}", kind.to_lowercase()),
        name,
        "-n",
        NS,
        "--wait=false",
    ])
    .ok();
}

/// The FinalizerStuck Events about `name` in `ns`, as kubectl reads them.
fn stuck_events(c: &Cluster, ns: &str, name: &str) -> Vec<Value> {
    c.get(&[
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={name},reason=FinalizerStuck"),
    ])
    .unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits for the one FinalizerStuck Event about `name`; returns its message.
/// It came within WITHIN of the object's deletion (`deleted`, its
/// deletionTimestamp), by the API server's clock: the scenario's own steps
/// in between take what they take.
fn the_event(c: &Cluster, ns: &str, name: &str, deleted: i64) -> String {
    wait_until(
        &format!("the FinalizerStuck Event of {name}"),
        WITHIN,
        || !stuck_events(c, ns, name).is_empty(),
    );
    let events = stuck_events(c, ns, name);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    let after = server_seconds(&event["metadata"]["creationTimestamp"]) - deleted;
    assert!(
        after <= WITHIN as i64,
        "{name}: its Event came {after} s after its deletion"
    );
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reportingComponent"], "finalizer-guard.io/watch");
    assert_eq!(event["reportingInstance"], "finalizer-guard-watch-e2e");
    event["message"].as_str().unwrap().to_string()
}

/// Seconds since the Unix epoch of an API server's timestamp.
fn server_seconds(at: &Value) -> i64 {
    let text = at.as_str().unwrap_or_else(|| panic!("no timestamp: {at}"));
    text.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .as_second()
}

/// The `finalizer-guard unstick ...` command a message ends with, as words.
fn command_in(message: &str) -> Vec<String> {
    let (_, command) = message
        .split_once("Explain and release: ")
        .unwrap_or_else(|| panic!("no command in {message:?}"));
    let words: Vec<String> = command.split(' ').map(String::from).collect();
    assert_eq!(words[..2], ["finalizer-guard", "unstick"], "{message}");
    words[2..].to_vec()
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn stuck_objects_are_counted_announced_and_released() {
    let env = env();
    let c = &env.cluster;
    // A type that exists before `watch` starts, and one created after.
    crd(c, "widgets", "Widget");
    c.namespace(NS);

    let port = free_port();
    let log = env.work.join("watch.log");
    let child = start_chart_watch(&env, port, &log);
    let watch = Watch { child, port, log };
    wait_until("watch to be ready", 60, || {
        http_get(watch.port, "/readyz").is_some()
    });
    assert_eq!(http_get(watch.port, "/healthz").as_deref(), Some("ok\n"));
    // Its RBAC lets it watch every type. A CRD an earlier scenario is still
    // deleting can fail its first list and count for a while (FAILING_FOR,
    // 90 s); a type it may not watch fails on every retry.
    wait_until("every type to be watchable", 100, || {
        watch
            .metrics()
            .contains("\nfinalizer_guard_unwatchable_types 0\n")
    });

    crd(c, "gadgets", "Gadget");
    let widget_finalizer = format!("widgets.{GROUP}/cleanup");
    let gadget_finalizer = format!("gadgets.{GROUP}/cleanup");
    stuck_object(c, "Widget", "stuck-widget-1", &widget_finalizer);
    stuck_object(c, "Gadget", "stuck-gadget-1", &gadget_finalizer);

    // The gauges, within --stuck-after plus 30 s (each wait follows its
    // deletion at once, and is bounded by WITHIN itself).
    wait_until("the widget in the gauges", WITHIN, || {
        watch.stuck(&widget_finalizer, &format!("widgets.{GROUP}")) == Some(1.0)
    });
    wait_until(
        "the gadget (a type newer than watch) in the gauges",
        WITHIN,
        || watch.stuck(&gadget_finalizer, &format!("gadgets.{GROUP}")) == Some(1.0),
    );

    // A namespace held by an APIService with no backend.
    let api = unavailable_apiservice(&env, "v1alpha1", "watch.e2e.example.com");
    c.namespace(STUCK_NS);
    delete_nowait(&env, &["namespace", STUCK_NS]);
    // Namespaces the scenarios before left Terminating count too, and they
    // may finish meanwhile: ours is checked by name.
    namespaces_agree(&watch, c, "stuck", WITHIN);
    let deleted =
        |args: &[&str]| server_seconds(&c.get(args).unwrap()["metadata"]["deletionTimestamp"]);
    let widget_deleted = deleted(&[&format!("widget.{GROUP}"), "stuck-widget-1", "-n", NS]);
    let gadget_deleted = deleted(&[&format!("gadget.{GROUP}"), "stuck-gadget-1", "-n", NS]);
    let ns_deleted = deleted(&["namespace", STUCK_NS]);
    let oldest = watch
        .gauge(
            "finalizer_guard_stuck_oldest_seconds",
            &format!("finalizer=\"{widget_finalizer}\""),
        )
        .unwrap();
    assert!(oldest >= STUCK_AFTER as f64, "{oldest}");
    // No object's name or namespace in any label.
    let metrics = watch.metrics();
    for name in ["stuck-widget-1", "stuck-gadget-1", STUCK_NS, NS] {
        assert!(!metrics.contains(name), "{name} in the metrics: {metrics}");
    }

    // Their Events: what unstick explains, and the command.
    let widget = the_event(c, NS, "stuck-widget-1", widget_deleted);
    assert_contains_all(
        "the Event's note",
        &widget,
        &[
            &format!("widget.{GROUP}/stuck-widget-1 -n {NS}: Terminating for "),
            &format!(
                "{widget_finalizer}; owner: unknown: no built-in controller or policy rule names it; owner alive: cannot tell: no owner is known"
            ),
            "may leak: nothing recorded on the object",
            &format!(
                "Explain and release: finalizer-guard unstick widget.{GROUP}/stuck-widget-1 -n {NS}"
            ),
        ],
    );
    let gadget = the_event(c, NS, "stuck-gadget-1", gadget_deleted);
    assert!(
        gadget.ends_with(&format!(
            "Explain and release: finalizer-guard unstick gadget.{GROUP}/stuck-gadget-1 -n {NS}"
        )),
        "{gadget}"
    );
    // Events about a cluster-scoped object live in `default`.
    let namespace = the_event(c, "default", STUCK_NS, ns_deleted);
    assert_contains_all(
        "the Event's note",
        &namespace,
        &[
            "kubernetes (spec.finalizers); owner: built-in controller namespace (kube-controller-manager)",
            &format!("blocked by: APIService {} is not Available", api.1),
            &format!("Explain and release: finalizer-guard unstick namespace/{STUCK_NS}"),
        ],
    );
    assert!(
        !namespace.contains(" -n "),
        "a namespace is cluster-scoped: {namespace}"
    );
    // Announced once, not on every tick: these 3 s are the ticks that must
    // announce nothing more (a window, not a wait for a condition).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        stuck_events(c, NS, "stuck-widget-1").len(),
        1,
        "a repeat comes after 5 minutes, as one more in the Event's series"
    );
    assert!(
        watch.logged("stuck", &format!("widget.{GROUP}/stuck-widget-1 -n {NS}")),
        "{}",
        watch.log()
    );

    // The commands the Events give, with a reason: released through the webhook.
    // A namespace's own `kubernetes` finalizer goes only with --orphan-contents,
    // which the person adds once unstick has listed what is inside.
    for (message, reason, also) in [
        (&widget, "controller-uninstalled", None),
        (&gadget, "controller-uninstalled", None),
        (
            &namespace,
            "apiservice-unavailable",
            Some("--orphan-contents"),
        ),
    ] {
        let mut args = command_in(message);
        args.extend(also.map(String::from));
        args.extend(
            [
                "--reason",
                reason,
                "--detail",
                "INC-5100 found by finalizer-guard watch",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut full = vec!["unstick"];
        full.extend_from_slice(&args);
        let run = c.finalizer_guard("admin", &full);
        assert_eq!(run.code, 0, "{full:?}: {run:#?}");
        assert!(run.stdout.contains("released"), "{run:#?}");
    }

    // The gauges drop back.
    wait_until("the widget's gauge to drop to 0", 30, || {
        watch.stuck(&widget_finalizer, &format!("widgets.{GROUP}")) == Some(0.0)
    });
    wait_until("the gadget's gauge to drop to 0", 30, || {
        watch.stuck(&gadget_finalizer, &format!("gadgets.{GROUP}")) == Some(0.0)
    });
    wait_until("the namespace to be gone", 60, || {
        c.get(&["namespace", STUCK_NS]).is_none()
    });
    // The unavailable APIService holds the namespaces earlier scenarios left
    // Terminating while it exists: ours is checked by name.
    namespaces_agree(&watch, c, "no longer stuck", 30);
    assert_eq!(
        watch.gauge(
            "finalizer_guard_stuck_oldest_seconds",
            &format!("finalizer=\"{widget_finalizer}\""),
        ),
        Some(0.0)
    );
    let log = watch.log();
    assert!(log.contains("no longer stuck"), "{log}");

    // A type that goes away is no longer watched, and its series go with it.
    drop(api);
    for plural in ["widgets", "gadgets"] {
        c.admin(&[
            "delete",
            "crd",
            &format!("{plural}.{GROUP}"),
            "--timeout=60s",
        ])
        .ok();
    }
    wait_until("the CRDs' series to go", 30, || {
        !watch
            .metrics()
            .lines()
            .any(|l| l.starts_with("finalizer_guard_stuck") && l.contains(GROUP))
    });
    assert!(http_get(watch.port, "/readyz").is_some(), "{}", watch.log());
}

/// Namespaces the API server shows held by their `kubernetes` finalizer for
/// longer than `--stuck-after`: what the namespaces' gauge should count.
fn namespaces_stuck_now(c: &Cluster) -> usize {
    let Some(list) = c.get(&["namespaces"]) else {
        return usize::MAX;
    };
    let now = jiff::Timestamp::now();
    let stuck_after = jiff::SignedDuration::from_secs(STUCK_AFTER as i64);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|ns| {
            let held = ns["spec"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == "kubernetes"));
            let since = ns["metadata"]["deletionTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            held && since.is_some_and(|t| now.duration_since(t) >= stuck_after)
        })
        .count()
}

/// Waits up to `seconds` for `watch` to have logged `message` about this
/// scenario's namespace and for its namespaces' gauge to equal the cluster's
/// own count (namespaces from other scenarios are in both); fails with the
/// two, the namespaces and the end of the log.
fn namespaces_agree(watch: &Watch, c: &Cluster, message: &str, seconds: u64) {
    let ours = format!("namespace/{STUCK_NS}");
    let mut seen = (None, 0);
    let agreed = poll(seconds, || {
        seen = (
            watch.stuck("kubernetes", "namespaces"),
            namespaces_stuck_now(c),
        );
        watch.logged(message, &ours) && seen.0 == Some(seen.1 as f64)
    });
    assert!(
        agreed,
        "after {seconds} s, the namespaces' gauge and the cluster's count (gauge, cluster) \
         are {seen:?}; {message:?} logged for {ours}: {}; the namespaces: {}\n\
         the log's end:\n{}",
        watch.logged(message, &ours),
        c.admin(&["get", "namespaces"]).stdout,
        tail(&watch.log(), 40),
    );
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
