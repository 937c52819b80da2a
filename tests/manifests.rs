//! The cluster manifests under `manifests/`, rendered from the Helm chart
//! by `scripts/render-manifests.sh` (`tests/manifests/helm.rs` checks that
//! what is committed is what renders).
//!
//! - Every object parses into its k8s-openapi type and serializes back to the
//!   same JSON: k8s-openapi drops fields it does not know, so a misspelled
//!   key shows up as a difference. cert-manager objects, which k8s-openapi
//!   has no types for, are checked against the few spec keys they may use.
//! - The objects say what CONTRACT.md and issue 4 ask: the webhook's name,
//!   Service, rules and matchConditions, the Deployment's security settings,
//!   a policy that parses; and what a `kubectl apply` over the manifests of
//!   0.1.0 needs (a Deployment's selector cannot change).
//! - `kubectl kustomize` builds the base and both overlays (`#[ignore]`d:
//!   it needs kubectl, `FG_KUBECTL`; `.ci/run` runs them with `--ignored`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use clap::{CommandFactory, Parser};
use common::repository;
use finalizer_guard::cli::{self, Cli};
use finalizer_guard::policy::config::{DEFAULT_OVERRIDE_ANNOTATION, DEFAULT_OVERRIDE_REASONS};
use finalizer_guard::policy::{Mode, Policy, approval, builtin};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhook,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const NAMESPACE: &str = "finalizer-guard";
const SERVICE: &str = "finalizer-guard";
const WEBHOOK: &str = "finalizers.finalizer-guard.io";
const TLS_SECRET: &str = "finalizer-guard-tls";

fn manifests() -> PathBuf {
    repository::path("manifests")
}

/// Every `.yaml`/`.yml` file under `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(OsStr::to_str),
                Some("yaml" | "yml")
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn is_kustomization(path: &Path) -> bool {
    path.file_name() == Some(OsStr::new("kustomization.yaml"))
}

/// The YAML documents of a file, as JSON values; empty documents skipped.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(doc).map_err(|e| e.to_string())?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

fn read_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `KIND NAMESPACE/NAME`, for messages.
fn describe(object: &Value) -> String {
    let namespace = text(object, "/metadata/namespace");
    let name = text(object, "/metadata/name");
    let kind = text(object, "/kind");
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

// ---------------------------------------------------------------------------
// Typed parsing and round trips

/// Where `before` and `after` first differ, if they do.
fn first_difference(before: &Value, after: &Value, path: &str) -> Option<String> {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    None => return Some(format!("{here} is dropped: not a field of the type")),
                    Some(other) => {
                        if let Some(d) = first_difference(value, other, &here) {
                            return Some(d);
                        }
                    }
                }
            }
            b.keys()
                .find(|key| !a.contains_key(*key))
                .map(|key| format!("{path}.{key} appears on the way back"))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]"))),
        _ => (before != after).then(|| format!("{path}: {before} comes back as {after}")),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Result<(), String> {
    let typed: T =
        serde_json::from_value(object.clone()).map_err(|e| format!("does not parse: {e}"))?;
    let back = serde_json::to_value(&typed).unwrap();
    match first_difference(object, &back, "") {
        None => Ok(()),
        Some(difference) => Err(difference),
    }
}

/// The spec keys cert-manager's v1 API has, for the kinds these manifests use.
fn cert_manager_keys(kind: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match kind {
        "Certificate" => &[
            (
                "/spec",
                &[
                    "subject",
                    "literalSubject",
                    "commonName",
                    "duration",
                    "renewBefore",
                    "renewBeforePercentage",
                    "dnsNames",
                    "ipAddresses",
                    "uris",
                    "otherNames",
                    "emailAddresses",
                    "secretName",
                    "secretTemplate",
                    "keystores",
                    "issuerRef",
                    "isCA",
                    "usages",
                    "privateKey",
                    "signatureAlgorithm",
                    "encodeUsagesInRequest",
                    "revisionHistoryLimit",
                    "additionalOutputFormats",
                    "nameConstraints",
                ],
            ),
            (
                "/spec/privateKey",
                &["rotationPolicy", "encoding", "algorithm", "size"],
            ),
            ("/spec/issuerRef", &["name", "kind", "group"]),
        ],
        "Issuer" | "ClusterIssuer" => &[
            ("/spec", &["acme", "ca", "vault", "selfSigned", "venafi"]),
            (
                "/spec/ca",
                &[
                    "secretName",
                    "crlDistributionPoints",
                    "ocspServers",
                    "issuingCertificateURLs",
                ],
            ),
            ("/spec/selfSigned", &["crlDistributionPoints"]),
        ],
        _ => &[],
    }
}

/// cert-manager objects: k8s-openapi has no types for them, so check their
/// shape and the spec keys they may use.
fn check_cert_manager(object: &Value) -> Result<(), String> {
    let kind = text(object, "/kind");
    let keys = cert_manager_keys(kind);
    if keys.is_empty() {
        return Err(format!("cert-manager kind {kind} is not expected here"));
    }
    if text(object, "/metadata/name").is_empty() {
        return Err("metadata.name is missing".into());
    }
    if !object["spec"].is_object() {
        return Err("spec is missing".into());
    }
    for (pointer, allowed) in keys {
        if let Some(Value::Object(map)) = object.pointer(pointer)
            && let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str()))
        {
            return Err(format!(
                "{}.{key} is not a cert-manager field",
                pointer.replace('/', ".")
            ));
        }
    }
    Ok(())
}

/// Parses `object` into the k8s-openapi type its apiVersion and kind name,
/// and checks that nothing is lost on the way back.
fn check_object(object: &Value) -> Result<(), String> {
    match (text(object, "/apiVersion"), text(object, "/kind")) {
        ("v1", "Namespace") => round_trip::<Namespace>(object),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(object),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(object),
        ("v1", "Secret") => round_trip::<Secret>(object),
        ("v1", "Service") => round_trip::<Service>(object),
        ("v1", "ResourceQuota") => round_trip::<ResourceQuota>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(object)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(object),
        ("apps/v1", "Deployment") => round_trip::<Deployment>(object),
        ("batch/v1", "Job") => round_trip::<Job>(object),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(object),
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<NetworkPolicy>(object),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            round_trip::<ValidatingWebhookConfiguration>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<ValidatingAdmissionPolicy>(object)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<ValidatingAdmissionPolicyBinding>(object)
        }
        ("cert-manager.io/v1", _) => check_cert_manager(object),
        (api_version, kind) => Err(format!(
            "apiVersion {api_version:?} kind {kind:?} is not a kind these manifests should hold"
        )),
    }
}

fn is_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "ValidatingWebhookConfiguration"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
            | "ClusterIssuer"
    )
}

// ---------------------------------------------------------------------------
// The objects

/// A kustomization.yaml, as YAML.
fn kustomization(dir: &Path) -> Value {
    let path = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let k: Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(k["kind"], "Kustomization", "{}", path.display());
    k
}

/// The base's objects: the files its kustomization lists. The rendered
/// files carry their namespace already; the base's kustomization repeats it.
struct Base {
    /// The webhook's objects, and what the release shares.
    objects: Vec<Value>,
    /// `finalizer-guard watch`'s (labelled component `watch`).
    watch: Vec<Value>,
}

fn is_watch(object: &Value) -> bool {
    object
        .pointer("/metadata/labels/app.kubernetes.io~1component")
        .and_then(Value::as_str)
        == Some("watch")
}

impl Base {
    fn load() -> Base {
        let dir = manifests().join("base");
        let k = kustomization(&dir);
        assert_eq!(k["namespace"], NAMESPACE);
        let mut objects = Vec::new();
        for resource in k["resources"].as_array().expect("resources") {
            let file = dir.join(resource.as_str().expect("a file name"));
            objects.extend(read_documents(&file));
        }
        let (watch, objects) = objects.into_iter().partition(is_watch);
        Base { objects, watch }
    }

    fn watch_one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let found: Vec<&Value> = self
            .watch
            .iter()
            .filter(|o| text(o, "/kind") == kind)
            .collect();
        assert_eq!(found.len(), 1, "the base holds one {kind} of watch");
        serde_json::from_value(found[0].clone()).unwrap()
    }

    fn one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let found: Vec<&Value> = self
            .objects
            .iter()
            .filter(|o| text(o, "/kind") == kind)
            .collect();
        assert_eq!(found.len(), 1, "the base holds one {kind}");
        serde_json::from_value(found[0].clone()).unwrap()
    }

    fn named<T: DeserializeOwned>(&self, kind: &str, name: &str) -> T {
        let found = self
            .objects
            .iter()
            .find(|o| text(o, "/kind") == kind && text(o, "/metadata/name") == name)
            .unwrap_or_else(|| panic!("the base holds no {kind} {name}"));
        serde_json::from_value(found.clone()).unwrap()
    }

    fn webhook(&self) -> (ValidatingWebhookConfiguration, ValidatingWebhook) {
        let config: ValidatingWebhookConfiguration = self.one("ValidatingWebhookConfiguration");
        let webhooks = config.webhooks.clone().unwrap_or_default();
        assert_eq!(webhooks.len(), 1, "one webhook");
        (config, webhooks[0].clone())
    }

    fn pod(&self) -> (Deployment, PodSpec, Container) {
        let deployment: Deployment = self.one("Deployment");
        let pod = deployment.spec.clone().template.spec.expect("a pod spec");
        assert_eq!(pod.containers.len(), 1, "one container");
        let container = pod.containers[0].clone();
        (deployment, pod, container)
    }
}

fn yes(flag: Option<bool>) -> bool {
    flag == Some(true)
}

// ---------------------------------------------------------------------------
// A copy of the manifests to build, with certificates

fn copy_manifests() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = manifests();
    for path in yaml_files(&root) {
        let to = dir
            .path()
            .join("manifests")
            .join(path.strip_prefix(&root).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&path, &to).unwrap();
    }
    dir
}

/// What the self-managed overlay's instructions do: `finalizer-guard certs`
/// into certs/, then ca.crt, tls.crt and tls.key copied into the overlay.
fn write_certs(overlay: &Path) -> finalizer_guard::pki::certificates::Bundle {
    let certs_dir = overlay.join("../../../certs");
    let authority = finalizer_guard::pki::certificates::CertificateAuthority::generate(30).unwrap();
    let bundle = authority
        .issue(
            &finalizer_guard::pki::certificates::service_names(SERVICE, NAMESPACE),
            &[],
            30,
        )
        .unwrap();
    finalizer_guard::pki::certificates::write(&bundle, &certs_dir).unwrap();
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::copy(certs_dir.join(file), overlay.join(file)).unwrap();
    }
    bundle
}

// ---------------------------------------------------------------------------
// kubectl kustomize

use common::tools::kubectl;

fn kustomize(kubectl: &Path, dir: &Path) -> Vec<Value> {
    let mut cmd = Command::new(kubectl);
    cmd.arg("kustomize").arg(dir);
    let built = common::run::run(cmd, None).ok();
    let mut objects = documents(&built.stdout).unwrap();
    // kustomize folds long base64 values over several lines; Go's base64
    // decoder (and so kube-apiserver) skips the line breaks, k8s-openapi's
    // does not.
    for object in &mut objects {
        let is_secret = text(object, "/kind") == "Secret";
        if let Some(Value::Object(data)) = object.get_mut("data")
            && is_secret
        {
            for value in data.values_mut() {
                unfold(value);
            }
        }
        if let Some(Value::Array(webhooks)) = object.get_mut("webhooks") {
            for webhook in webhooks {
                if let Some(bundle) = webhook.pointer_mut("/clientConfig/caBundle") {
                    unfold(bundle);
                }
            }
        }
    }
    objects
}

fn unfold(value: &mut Value) {
    if let Value::String(s) = value {
        s.retain(|c| !c.is_ascii_whitespace());
    }
}

// ---------------------------------------------------------------------------
// The tests, one file an area: the manifests' own (base, webhook, workloads,
// rbac, overlays, shipping), then the Helm chart that renders them, its
// alerts, a fleet of releases, and the docs that name what they install.

#[path = "manifests/base.rs"]
mod base;
#[path = "manifests/overlays.rs"]
mod overlays;
#[path = "manifests/rbac.rs"]
mod rbac;
#[path = "manifests/shipping.rs"]
mod shipping;
#[path = "manifests/webhook.rs"]
mod webhook;
#[path = "manifests/workloads.rs"]
mod workloads;

#[path = "manifests/helm.rs"]
mod helm;
#[path = "manifests/monitoring.rs"]
mod monitoring;

#[path = "manifests/fleet.rs"]
mod fleet;

#[path = "manifests/docs.rs"]
mod docs;

#[path = "manifests/managed.rs"]
mod managed;
