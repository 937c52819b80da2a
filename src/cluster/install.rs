//! Which policy the installed webhook serves, whatever its Helm release (or
//! kustomize overlay) is called: from each ValidatingWebhookConfiguration
//! holding [`WEBHOOK_NAME`], to the Service it calls, to the Deployment
//! whose pods that Service selects, to the ConfigMap mounted where the
//! container's `--policy` points. That is the file the webhook's pods read,
//! so it is the policy the webhook decides under.
//!
//! Several installs serving the same policy are one answer; serving
//! different ones, no answer: the operator is told which and asked to pick
//! (`--policy FILE`). Where the webhook configurations may not be listed,
//! the Deployments labelled as the chart and `manifests/` label the
//! webhook's are followed instead, and that is said. Where a read is
//! forbidden, the permission missing is named; where nothing is installed,
//! that is said, and the caller judges under the embedded default policy.

use std::collections::BTreeMap;
use std::path::Path;

use super::session::{ClusterError, POLICY_KEY};
use crate::admission::WEBHOOK_NAME;
use crate::flags::POLICY_ENV;
use crate::policy::{self, Policy};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Service};
use kube::api::ListParams;
use kube::{Api, Client};

/// The labels the chart and `manifests/` set on the webhook's Deployment
/// (`watch` runs in a Deployment of the same name label, another component).
const APP_LABEL: &str =
    "app.kubernetes.io/name=finalizer-guard,app.kubernetes.io/component=webhook";

/// Where a Deployment's webhook container reads its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// A key of a ConfigMap in the Deployment's namespace.
    ConfigMap { name: String, key: String },
    /// No `--policy`: the embedded default policy.
    Embedded,
}

/// Why one install's policy could not be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// A read the API server refused: what, and the permission it needs.
    Forbidden { what: String, needs: String },
    /// Something the chain leads to is not there, or cannot be followed.
    Broken(String),
}

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trouble::Forbidden { what, needs } => {
                write!(f, "you may not {what} (it needs {needs})")
            }
            Trouble::Broken(why) => f.write_str(why),
        }
    }
}

/// A policy an install serves, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPolicy {
    /// `validatingwebhookconfiguration/fg-finalizer-guard -> service/... -> deployment/...`
    pub via: String,
    /// `configmap NS/NAME`, or `embedded default`.
    pub name: String,
    /// The policy's text; `None` for the embedded default.
    pub text: Option<String>,
}

/// What the search came to.
#[derive(Debug)]
pub enum Located {
    /// Every install found serves this policy (one, or several alike);
    /// `others` says what could not be followed beside it.
    Policy {
        found: Vec<FoundPolicy>,
        others: Vec<String>,
    },
    /// Installs serving different policies: which.
    Ambiguous(Vec<FoundPolicy>),
    /// Nothing found: why, said plainly.
    NotFound(String),
}

/// Follows every installed webhook to the policy it serves.
pub async fn locate(client: &Client) -> Result<Located, ClusterError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let configurations = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            let unlisted = refused(
                e,
                "list validatingwebhookconfigurations",
                "list on validatingwebhookconfigurations.admissionregistration.k8s.io",
            )?;
            return by_label(client, unlisted).await;
        }
    };
    let services = webhook_services(&configurations);
    if services.is_empty() {
        return Ok(Located::NotFound(format!(
            "finalizer-guard's webhook ({WEBHOOK_NAME}) is not installed: no ValidatingWebhookConfiguration holds it"
        )));
    }
    let mut found = Vec::new();
    let mut troubles = Vec::new();
    for (configuration, target) in services {
        let via = format!("validatingwebhookconfiguration/{configuration}");
        match follow(client, &configuration, &target).await? {
            Ok(mut f) => found.append(&mut f),
            Err(t) => troubles.push((via, t)),
        }
    }
    let others: Vec<String> = troubles
        .iter()
        .map(|(via, t)| format!("{via}: {t}"))
        .collect();
    Ok(settle(found, others))
}

/// Whether a refusal is RBAC's: the trouble it is, or the error it is.
fn refused(e: kube::Error, what: &str, needs: &str) -> Result<Trouble, ClusterError> {
    match e {
        kube::Error::Api(status) if status.code == 403 => Ok(Trouble::Forbidden {
            what: what.into(),
            needs: needs.into(),
        }),
        other => Err(ClusterError::api(what.to_string(), other)),
    }
}

/// One object along the chain, or why not: `missing` when it does not
/// exist, `what` and `needs` when reading it is forbidden.
async fn get<K>(
    api: &Api<K>,
    name: &str,
    missing: String,
    what: String,
    needs: String,
) -> Result<Result<K, Trouble>, ClusterError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(Ok(object)),
        Ok(None) => Ok(Err(Trouble::Broken(missing))),
        Err(e) => refused(e, &what, &needs).map(Err),
    }
}

/// Where a webhook configuration sends its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Service { namespace: String, name: String },
    Url(String),
}

/// Each configuration holding [`WEBHOOK_NAME`], with where it calls.
fn webhook_services(configurations: &[ValidatingWebhookConfiguration]) -> Vec<(String, Endpoint)> {
    let mut out = Vec::new();
    for c in configurations {
        let name = c.metadata.name.clone().unwrap_or_default();
        for w in c
            .webhooks
            .iter()
            .flatten()
            .filter(|w| w.name == WEBHOOK_NAME)
        {
            let target = match (&w.client_config.service, &w.client_config.url) {
                (Some(s), _) => Endpoint::Service {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                },
                (None, url) => Endpoint::Url(url.clone().unwrap_or_default()),
            };
            out.push((name.clone(), target));
        }
    }
    out
}

/// The Deployments that serve a webhook: those whose pods its Service
/// selects; for a `url:` webhook, which names no Service, the Deployment
/// of the configuration's own name carrying the label the chart and
/// `manifests/` both set (the chart names both after the release).
async fn serving(
    client: &Client,
    configuration: &str,
    target: &Endpoint,
) -> Result<Result<(String, Vec<Deployment>), Trouble>, ClusterError> {
    let (namespace, name) = match target {
        Endpoint::Url(url) => {
            let api: Api<Deployment> = Api::all(client.clone());
            let params = ListParams::default().labels(APP_LABEL);
            let list = match api.list(&params).await {
                Ok(list) => list.items,
                Err(e) => {
                    return refused(
                        e,
                        "list deployments in all namespaces",
                        "list on deployments.apps in all namespaces",
                    )
                    .map(Err);
                }
            };
            let named: Vec<Deployment> = list
                .into_iter()
                .filter(|d| d.metadata.name.as_deref() == Some(configuration))
                .collect();
            if named.is_empty() {
                return Ok(Err(Trouble::Broken(format!(
                    "it calls {} by url, and no Deployment {configuration} labelled {APP_LABEL} runs in the cluster",
                    crate::output::quoted(url)
                ))));
            }
            let via = format!(
                " (calls a url) -> deployment/{configuration}, of the same name and labelled {APP_LABEL}"
            );
            return Ok(Ok((via, named)));
        }
        Endpoint::Service { namespace, name } => (namespace, name),
    };
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let read = get(
        &services,
        name,
        format!("it calls service {namespace}/{name}, which does not exist"),
        format!("get service {namespace}/{name}"),
        format!("get on services in {namespace}"),
    );
    let service = match read.await? {
        Ok(service) => service,
        Err(trouble) => return Ok(Err(trouble)),
    };
    let selector = service
        .spec
        .and_then(|s| s.selector)
        .filter(|s| !s.is_empty());
    let Some(selector) = selector else {
        return Ok(Err(Trouble::Broken(format!(
            "service {namespace}/{name} selects no pods"
        ))));
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let list = match deployments.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            return refused(
                e,
                &format!("list deployments in {namespace}"),
                &format!("list on deployments.apps in {namespace}"),
            )
            .map(Err);
        }
    };
    let selected: Vec<Deployment> = list.into_iter().filter(|d| selects(&selector, d)).collect();
    if selected.is_empty() {
        return Ok(Err(Trouble::Broken(format!(
            "no Deployment in {namespace} runs the pods service {name} selects"
        ))));
    }
    Ok(Ok((format!(" -> service/{name}"), selected)))
}

/// The webhook's configuration, then the Deployments serving it, then
/// each one's policy.
async fn follow(
    client: &Client,
    configuration: &str,
    target: &Endpoint,
) -> Result<Result<Vec<FoundPolicy>, Trouble>, ClusterError> {
    let (via, deployments) = match serving(client, configuration, target).await? {
        Ok(serving) => serving,
        Err(trouble) => return Ok(Err(trouble)),
    };
    let via = format!("validatingwebhookconfiguration/{configuration}{via}");
    policies(client, &via, deployments).await
}

/// The policy each Deployment's webhook container reads.
async fn policies(
    client: &Client,
    via: &str,
    deployments: Vec<Deployment>,
) -> Result<Result<Vec<FoundPolicy>, Trouble>, ClusterError> {
    let mut found = Vec::new();
    for deployment in deployments {
        let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
        let deployment_name = deployment.metadata.name.clone().unwrap_or_default();
        let mut via = via.to_string();
        if !via.contains("-> deployment/") {
            via.push_str(&format!(" -> deployment/{deployment_name}"));
        }
        via.push_str(&format!(" in namespace {namespace}"));
        let served = match policy_mount(&deployment) {
            Ok(served) => served,
            Err(why) => {
                return Ok(Err(Trouble::Broken(format!(
                    "deployment {namespace}/{deployment_name}: {why}"
                ))));
            }
        };
        let (config_map, key) = match served {
            Served::Embedded => {
                found.push(FoundPolicy {
                    via,
                    name: "embedded default".into(),
                    text: None,
                });
                continue;
            }
            Served::ConfigMap { name, key } => (name, key),
        };
        let shown = format!("configmap {namespace}/{config_map}");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let read = get(
            &api,
            &config_map,
            format!(
                "deployment {namespace}/{deployment_name} mounts {shown}, which does not exist"
            ),
            format!("get {shown}"),
            format!("get on configmaps in {namespace}"),
        );
        let text = match read.await? {
            Ok(cm) => cm.data.and_then(|mut d| d.remove(&key)),
            Err(trouble) => return Ok(Err(trouble)),
        };
        let Some(text) = text else {
            return Err(ClusterError::PolicyKeyMissing { name: shown, key });
        };
        found.push(FoundPolicy {
            via,
            name: shown,
            text: Some(text),
        });
    }
    Ok(Ok(found))
}

/// Without the webhook configurations: the Deployments labelled as the
/// chart and `manifests/` label the webhook's, and their policies.
async fn by_label(client: &Client, unlisted: Trouble) -> Result<Located, ClusterError> {
    let api: Api<Deployment> = Api::all(client.clone());
    let list = match api.list(&ListParams::default().labels(APP_LABEL)).await {
        Ok(list) => list.items,
        Err(e) => {
            let also = refused(
                e,
                "list deployments in all namespaces",
                "list on deployments.apps in all namespaces",
            )?;
            return Ok(Located::NotFound(format!(
                "{unlisted}, and {also}: the installed webhook, and so its policy, cannot be found"
            )));
        }
    };
    if list.is_empty() {
        return Ok(Located::NotFound(format!(
            "{unlisted}, and no Deployment labelled {APP_LABEL} runs in the cluster"
        )));
    }
    let via = format!("deployment labelled {APP_LABEL}");
    let found = match policies(client, &via, list).await? {
        Ok(found) => found,
        Err(trouble) => {
            return Ok(Located::NotFound(format!(
                "{unlisted}; by label: {trouble}"
            )));
        }
    };
    Ok(settle(
        found,
        vec![format!(
            "{unlisted}: found by the label {APP_LABEL}, not through the webhook configuration"
        )],
    ))
}

/// One policy, several, or none.
fn settle(found: Vec<FoundPolicy>, others: Vec<String>) -> Located {
    let mut distinct: Vec<&Option<String>> = found.iter().map(|f| &f.text).collect();
    distinct.sort();
    distinct.dedup();
    match distinct.len() {
        0 => Located::NotFound(others.join("; ")),
        1 => Located::Policy { found, others },
        _ => Located::Ambiguous(found),
    }
}

/// Whether the Deployment's pods carry every label of the Service's selector.
fn selects(selector: &BTreeMap<String, String>, deployment: &Deployment) -> bool {
    let labels = deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    labels.is_some_and(|labels| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// The `--policy` file of a container running `serve`: from its arguments
/// (`--policy PATH`, `--policy=PATH`) or the environment variable that
/// stands for the flag.
fn policy_path(container: &Container) -> Option<String> {
    let args: Vec<&String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .collect();
    let mut path = None;
    for (i, arg) in args.iter().enumerate() {
        if let Some(p) = arg.strip_prefix("--policy=") {
            path = Some(p.to_string());
        } else if arg.as_str() == "--policy" {
            path = args.get(i + 1).map(|p| p.to_string());
        }
    }
    path.or_else(|| {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == POLICY_ENV)
            .and_then(|e| e.value.clone())
    })
}

/// Where the Deployment's webhook container reads its policy: the
/// ConfigMap volume mounted over its `--policy` path, and the key.
pub fn policy_mount(deployment: &Deployment) -> Result<Served, String> {
    let pod = deployment
        .spec
        .template
        .spec
        .as_ref()
        .ok_or("it has no pod template")?;
    let serving = pod.containers.iter().find(|c| {
        c.args
            .iter()
            .flatten()
            .chain(c.command.iter().flatten())
            .any(|a| a == "serve")
    });
    let container = serving.ok_or("no container runs `finalizer-guard serve`")?;
    let Some(path) = policy_path(container) else {
        return Ok(Served::Embedded);
    };
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let dir = m.mount_path.trim_end_matches('/');
            let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
            Some((m, rest.to_string()))
        })
        .max_by_key(|(m, _)| m.mount_path.len());
    let Some((mount, relative)) = mount else {
        return Err(format!(
            "its policy file {path} is on no mounted volume (the image's own file)"
        ));
    };
    if mount.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(format!(
            "its policy is mounted with subPath at {}",
            mount.mount_path
        ));
    }
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .ok_or_else(|| format!("it mounts volume {}, which it does not define", mount.name))?;
    let Some(config_map) = &volume.config_map else {
        return Err(format!(
            "its policy file {path} is on volume {}, which is not a ConfigMap",
            volume.name
        ));
    };
    // `items` maps keys to paths; without it every key is a file of its name.
    let key = match &config_map.items {
        Some(items) if !items.is_empty() => items
            .iter()
            .find(|i| i.path == relative)
            .map(|i| i.key.clone())
            .ok_or_else(|| {
                format!(
                    "configmap {} mounted at {} maps no key to {relative}",
                    config_map.name, mount.mount_path
                )
            })?,
        _ => relative,
    };
    Ok(Served::ConfigMap {
        name: config_map.name.clone(),
        key,
    })
}

/// What the operator reads when nothing was found: why, and what the
/// decision is judged under.
pub fn not_found_note(why: &str) -> String {
    format!("{why}; judged under the embedded default policy (or pass --policy FILE)")
}

/// The error for installs serving different policies.
pub fn ambiguous(found: &[FoundPolicy]) -> ClusterError {
    let each: Vec<String> = found
        .iter()
        .map(|f| format!("  {} serves {}", f.via, f.name))
        .collect();
    ClusterError::Usage(format!(
        "{} finalizer-guard installs serve different policies, and a removal must pass each of them:\n{}\n\
         judge under one of them with --policy FILE, e.g.\n  kubectl get configmap -n NAMESPACE NAME -o jsonpath='{{.data.{}}}' > policy.yaml",
        found.len(),
        each.join("\n"),
        POLICY_KEY.replace('.', "\\.")
    ))
}

/// Where the policy came from, for the report.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySource {
    /// `FILE`, `configmap NS/NAME`, or `embedded default`.
    pub name: String,
    /// How it was found: from each webhook configuration holding the
    /// webhook to what its pods mount.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub served_by: Vec<String>,
    /// Something the operator should know about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The policy the installed webhook serves (`locate`), or `--policy FILE`.
pub async fn cluster_policy(
    client: &Client,
    file: Option<&Path>,
) -> Result<(Policy, PolicySource), ClusterError> {
    if let Some(path) = file {
        let name = path.display().to_string();
        let policy = policy::load(path).map_err(|source| ClusterError::Policy {
            name: name.clone(),
            hint: "",
            source,
        })?;
        let source = PolicySource {
            name,
            served_by: Vec::new(),
            note: None,
        };
        return Ok((policy, source));
    }
    let (found, others) = match locate(client).await? {
        Located::Policy { found, others } => (found, others),
        Located::Ambiguous(found) => return Err(ambiguous(&found)),
        Located::NotFound(why) => {
            let source = PolicySource {
                name: "embedded default".into(),
                served_by: Vec::new(),
                note: Some(not_found_note(&why)),
            };
            return Ok((Policy::embedded_default(), source));
        }
    };
    let first = &found[0];
    let policy = match &first.text {
        Some(text) => Policy::from_yaml(text).map_err(|e| ClusterError::Policy {
            name: first.name.clone(),
            hint: " (the webhook keeps its last good policy; pass --policy FILE)",
            source: e.into(),
        })?,
        None => Policy::embedded_default(),
    };
    let mut notes = Vec::new();
    if found.len() > 1 {
        notes.push(format!("{} installs serve this same policy", found.len()));
    }
    if first.text.is_none() {
        notes.push(
            "the installed webhook runs without --policy: it serves the embedded default policy"
                .into(),
        );
    }
    if !others.is_empty() {
        notes.push(format!(
            "also installed, but not followed to a policy: {}",
            others.join("; ")
        ));
    }
    let source = PolicySource {
        name: first.name.clone(),
        served_by: found.iter().map(|f| f.via.clone()).collect(),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    };
    Ok((policy, source))
}

/// Whether the webhook is installed: `Some(true)` when a ValidatingWebhookConfiguration
/// holds [`WEBHOOK_NAME`], `None` when we may not look.
pub async fn webhook_installed(client: &Client) -> Option<bool> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .iter()
            .any(|c| c.webhooks.iter().flatten().any(|w| w.name == WEBHOOK_NAME)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(container: serde_json::Value, volumes: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "fg-finalizer-guard", "namespace": "fg"},
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/name": "finalizer-guard"}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "finalizer-guard", "app.kubernetes.io/instance": "fg"}},
                    "spec": {"containers": [container], "volumes": volumes},
                },
            },
        }))
        .unwrap()
    }

    fn chart_container(args: serde_json::Value) -> serde_json::Value {
        json!({
            "name": "finalizer-guard", "image": "finalizer-guard:0.1.0", "args": args,
            "volumeMounts": [
                {"name": "policy", "mountPath": "/etc/finalizer-guard/policy", "readOnly": true},
                {"name": "tls", "mountPath": "/etc/finalizer-guard/tls"},
            ],
        })
    }

    fn chart_volumes() -> serde_json::Value {
        json!([
            {"name": "policy", "configMap": {"name": "fg-finalizer-guard-policy"}},
            {"name": "tls", "secret": {"secretName": "fg-finalizer-guard-tls"}},
        ])
    }

    #[test]
    fn the_policy_is_the_config_map_mounted_where_policy_points() {
        let cm = |key: &str| Served::ConfigMap {
            name: "fg-finalizer-guard-policy".into(),
            key: key.into(),
        };
        for args in [
            json!([
                "serve",
                "--policy",
                "/etc/finalizer-guard/policy/policy.yaml"
            ]),
            json!(["serve", "--policy=/etc/finalizer-guard/policy/policy.yaml"]),
        ] {
            let d = deployment(chart_container(args), chart_volumes());
            assert_eq!(policy_mount(&d), Ok(cm("policy.yaml")));
        }
        // The environment variable stands for the flag.
        let mut container = chart_container(json!(["serve"]));
        container["env"] = json!([{"name": "FINALIZER_GUARD_POLICY", "value": "/etc/finalizer-guard/policy/p.yaml"}]);
        assert_eq!(
            policy_mount(&deployment(container, chart_volumes())),
            Ok(cm("p.yaml"))
        );
        // items: the path is another key's.
        let volumes = json!([{"name": "policy", "configMap": {"name": "fg-finalizer-guard-policy",
            "items": [{"key": "strict.yaml", "path": "policy.yaml"}]}}]);
        let d = deployment(
            chart_container(json!([
                "serve",
                "--policy",
                "/etc/finalizer-guard/policy/policy.yaml"
            ])),
            volumes,
        );
        assert_eq!(policy_mount(&d), Ok(cm("strict.yaml")));
        // No --policy: the embedded default.
        let d = deployment(chart_container(json!(["serve"])), chart_volumes());
        assert_eq!(policy_mount(&d), Ok(Served::Embedded));
    }

    #[test]
    fn a_policy_that_cannot_be_followed_says_why() {
        let d = deployment(
            chart_container(json!(["serve", "--policy", "/policy.yaml"])),
            chart_volumes(),
        );
        assert!(
            policy_mount(&d)
                .unwrap_err()
                .contains("on no mounted volume")
        );
        let d = deployment(
            chart_container(json!([
                "serve",
                "--policy",
                "/etc/finalizer-guard/tls/p.yaml"
            ])),
            chart_volumes(),
        );
        assert!(policy_mount(&d).unwrap_err().contains("not a ConfigMap"));
        let d = deployment(chart_container(json!(["watch"])), chart_volumes());
        assert!(policy_mount(&d).unwrap_err().contains("no container runs"));
        // A mount path is a directory: /etc/finalizer-guard/policy2 is not under it.
        let d = deployment(
            chart_container(json!([
                "serve",
                "--policy",
                "/etc/finalizer-guard/policy2/p.yaml"
            ])),
            chart_volumes(),
        );
        assert!(policy_mount(&d).is_err());
    }

    #[test]
    fn a_service_selects_a_deployment_by_its_pod_labels() {
        let d = deployment(chart_container(json!(["serve"])), chart_volumes());
        let selector = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(selects(
            &selector(&[("app.kubernetes.io/instance", "fg")]),
            &d
        ));
        assert!(!selects(
            &selector(&[("app.kubernetes.io/instance", "other")]),
            &d
        ));
        assert!(!selects(&selector(&[("component", "webhook")]), &d));
    }

    #[test]
    fn only_configurations_holding_the_webhook_count() {
        let configuration = |name: &str, webhook: &str, client: serde_json::Value| {
            serde_json::from_value::<ValidatingWebhookConfiguration>(json!({
                "metadata": {"name": name},
                "webhooks": [{"name": webhook, "clientConfig": client, "sideEffects": "None",
                    "admissionReviewVersions": ["v1"]}],
            }))
            .unwrap()
        };
        let list = [
            configuration(
                "fg-finalizer-guard",
                WEBHOOK_NAME,
                json!({"service": {"namespace": "fg", "name": "fg-finalizer-guard"}}),
            ),
            configuration(
                "other",
                "other.example.com",
                json!({"service": {"namespace": "x", "name": "y"}}),
            ),
            configuration(
                "dev",
                WEBHOOK_NAME,
                json!({"url": "https://127.0.0.1:8443/validate"}),
            ),
        ];
        assert_eq!(
            webhook_services(&list),
            [
                (
                    "fg-finalizer-guard".to_string(),
                    Endpoint::Service {
                        namespace: "fg".into(),
                        name: "fg-finalizer-guard".into()
                    }
                ),
                (
                    "dev".to_string(),
                    Endpoint::Url("https://127.0.0.1:8443/validate".into())
                ),
            ]
        );
    }

    #[test]
    fn different_policies_are_refused_naming_each_install() {
        let found = |via: &str, name: &str| FoundPolicy {
            via: via.into(),
            name: name.into(),
            text: Some(name.into()),
        };
        let e = ambiguous(&[found("a", "configmap x/p"), found("b", "configmap y/q")]).to_string();
        assert!(
            e.starts_with("2 finalizer-guard installs serve different policies"),
            "{e}"
        );
        assert!(
            e.contains("  a serves configmap x/p\n  b serves configmap y/q"),
            "{e}"
        );
        assert!(e.contains("--policy FILE"), "{e}");
    }
}
