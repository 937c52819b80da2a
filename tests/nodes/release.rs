//! What the scenarios share about the release: its objects as installed
//! and as rendered, what an uninstall leaves, the developers' rule, the
//! skipped identity, and its policy exported.

use super::*;

/// The objects `helm get manifest` says the release installed.
pub(crate) fn release_objects(n: &Nodes) -> Vec<Value> {
    let manifest = n
        .helm(&["get", "manifest", RELEASE, "-n", NAMESPACE])
        .ok()
        .stdout;
    manifest_objects(&manifest)
}

/// The objects of a rendered manifest (YAML documents).
pub(crate) fn manifest_objects(manifest: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(manifest)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The resource `kubectl get` names an object of a manifest by: `KIND.GROUP`.
pub(crate) fn resource(object: &Value) -> String {
    let kind = object["kind"].as_str().expect("a kind").to_lowercase();
    let api_version = object["apiVersion"].as_str().expect("an apiVersion");
    match api_version.rsplit_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind,
    }
}

/// What is left with the release's label (`app.kubernetes.io/instance`):
/// of every namespaced kind the API server lists, in every namespace (the
/// pods, ReplicaSets, Jobs and EndpointSlices the chart's objects made
/// too), and of the cluster-scoped kinds among `rendered`. `kubectl get -o
/// name`'s lines; empty when nothing is.
pub(crate) fn release_leftovers(n: &Nodes, rendered: &[Value]) -> String {
    let listed = n
        .admin(&[
            "api-resources",
            "--namespaced",
            "--verbs=list",
            "-o",
            "name",
        ])
        .ok()
        .stdout;
    let mut kinds: Vec<String> = listed.lines().map(str::to_string).collect();
    for object in rendered
        .iter()
        .filter(|o| o["metadata"]["namespace"].is_null())
    {
        let kind = resource(object);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let kinds = kinds.join(",");
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    n.admin(&["get", &kinds, "-A", "-l", &selector, "-o", "name"])
        .ok()
        .stdout
        .trim()
        .to_string()
}

/// `kubectl get` arguments for one object of a manifest.
pub(crate) fn get_args(object: &Value) -> Vec<String> {
    let mut args = vec![
        resource(object),
        object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string(),
    ];
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        args.extend(["-n".to_string(), ns.to_string()]);
    }
    args
}

/// A rule letting the developers (alice's group) remove the CNI finalizer,
/// for `helm --set-json`.
pub(crate) fn developers_rule() -> String {
    format!(
        r#"policy.rules=[{{"name":"developers-release-cni","finalizers":["{CNI}"],"groups":["developers"]}}]"#
    )
}

pub(crate) const SKIPPED_SA: &str = "system:serviceaccount:storage-system:volume-cleaner";
pub(crate) const SKIP_BINDING: &str = "nodes-e2e-skip-identities";

/// Should a scenario that changes the release fail half-way: the release
/// uninstalled, so the next scenario installs it afresh.
pub(crate) struct UninstallOnPanic<'a>(pub(crate) &'a Nodes);

impl Drop for UninstallOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"]);
        }
    }
}

/// The denial of the chart's backstop (its ValidatingAdmissionPolicy).
/// `finalizer-guard policy export --vap` of the policy the chart renders for
/// the release's values and `extra` (its ConfigMap's policy.yaml), written
/// to `work/NAME`: the steps values.yaml gives for the backstop.
pub(crate) fn export_release_policy(n: &Nodes, work: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let values = work.join(format!("{name}.values.yaml"));
    let current = n
        .helm(&["get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml"])
        .ok();
    std::fs::write(&values, current.stdout).expect("values written");
    let mut args = chart_command("template");
    args.extend([
        "-f",
        values.to_str().expect("a UTF-8 path"),
        "--show-only",
        "templates/configmap.yaml",
    ]);
    args.extend_from_slice(extra);
    let config_map: Value =
        serde_yaml_ng::from_str(&n.helm(&args).ok().stdout).expect("the ConfigMap");
    let policy = work.join(format!("{name}.policy.yaml"));
    std::fs::write(
        &policy,
        config_map["data"]["policy.yaml"]
            .as_str()
            .expect("policy.yaml"),
    )
    .expect("policy written");
    let mut export = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    export.args(["policy", "export", "--vap"]).arg(&policy);
    let vap = work.join(name);
    std::fs::write(&vap, run(export, None).ok().stdout).expect("the export written");
    vap
}
