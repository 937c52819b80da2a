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

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use clap::{CommandFactory, Parser};
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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests")
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
// Tests

#[test]
fn every_object_parses_into_its_type_without_losing_a_field() {
    let mut problems = Vec::new();
    let mut count = 0;
    for path in yaml_files(&manifests()) {
        if is_kustomization(&path) {
            continue;
        }
        let docs = read_documents(&path);
        assert!(!docs.is_empty(), "{}: no object", path.display());
        for doc in docs {
            count += 1;
            if let Err(e) = check_object(&doc) {
                problems.push(format!("{}: {}: {e}", path.display(), describe(&doc)));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(count >= 14, "only {count} objects found");
}

#[test]
fn round_trip_catches_a_misspelled_field() {
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {"containers": [{"name": "c", "readOnlyRootFileSystem": true}]}},
        },
    });
    let e = check_object(&deployment).unwrap_err();
    assert!(e.contains("readOnlyRootFileSystem is dropped"), "{e}");
    let certificate = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "x"},
        "spec": {"dnsName": ["a"]},
    });
    assert!(
        check_cert_manager(&certificate)
            .unwrap_err()
            .contains("dnsName")
    );
}

/// The base lists every file in its folder, and each object is where the
/// overlays expect it: namespaced ones in the namespace, the rest cluster-wide.
#[test]
fn the_base_lists_every_file_and_names_its_namespace() {
    let dir = manifests().join("base");
    let listed: BTreeSet<String> = kustomization(&dir)["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let files: BTreeSet<String> = yaml_files(&dir)
        .iter()
        .filter(|p| !is_kustomization(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed, files,
        "manifests/base/kustomization.yaml lists every file"
    );
    for object in &Base::load().objects {
        let kind = text(object, "/kind");
        let namespace = text(object, "/metadata/namespace");
        if is_cluster_scoped(kind) {
            assert_eq!(namespace, "", "{} is cluster-scoped", describe(object));
        } else {
            assert_eq!(namespace, NAMESPACE, "{}", describe(object));
        }
    }
    for overlay in ["cert-manager", "self-managed"] {
        let k = kustomization(&manifests().join("overlays").join(overlay));
        assert_eq!(k["namespace"], NAMESPACE, "{overlay}");
        assert!(
            k["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "../../base"),
            "overlay {overlay} builds on the base"
        );
    }
}

/// `kubectl apply -k` over the manifests of 0.1.0 must not change what it
/// cannot: a Deployment's selector is immutable, and the Service and the
/// PodDisruptionBudget select the same pods. So the rendered objects carry
/// none of Helm's bookkeeping labels, and select as 0.1.0 did.
#[test]
fn the_selectors_are_those_of_0_1_0_and_no_helm_labels_are_shipped() {
    let base = Base::load();
    let selector = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "finalizer-guard".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "webhook".to_string(),
        ),
    ]);
    let (deployment, _, _) = base.pod();
    assert_eq!(
        deployment.spec.selector.match_labels.as_ref(),
        Some(&selector),
        "the Deployment's selector of 0.1.0"
    );
    let service: Service = base.one("Service");
    assert_eq!(service.spec.unwrap().selector.as_ref(), Some(&selector));
    let pdb: PodDisruptionBudget = base.one("PodDisruptionBudget");
    assert_eq!(
        pdb.spec.unwrap().selector.unwrap().match_labels.as_ref(),
        Some(&selector)
    );
    for path in yaml_files(&manifests()) {
        let text = std::fs::read_to_string(&path).unwrap();
        for label in [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ] {
            assert!(
                !text.contains(label),
                "{}: {label}: these objects are no Helm release",
                path.display()
            );
        }
    }
}

#[test]
fn no_key_material_is_shipped() {
    for path in yaml_files(&manifests()) {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains("BEGIN CERTIFICATE"),
            "{} holds PEM material",
            path.display()
        );
        for doc in documents(&text).unwrap() {
            assert_ne!(
                api_kind(&doc),
                "v1/Secret",
                "{}: the base and overlays ship no Secret object",
                path.display()
            );
        }
    }
    let sm = kustomization(&manifests().join("overlays/self-managed"));
    let files: Vec<&str> = sm["secretGenerator"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files, ["tls.crt", "tls.key", "ca.crt"], "never ca.key");
}

fn api_kind(object: &Value) -> String {
    format!("{}/{}", text(object, "/apiVersion"), text(object, "/kind"))
}

#[test]
fn webhook_configuration_matches_the_contract() {
    let base = Base::load();
    let (config, webhook) = base.webhook();
    assert_eq!(config.metadata.name.as_deref(), Some("finalizer-guard"));
    assert_eq!(webhook.name, WEBHOOK);
    let service = webhook.client_config.service.clone().expect("a service");
    assert_eq!(service.namespace, NAMESPACE);
    assert_eq!(service.name, SERVICE);
    assert_eq!(service.path.as_deref(), Some("/validate"));
    assert_eq!(service.port, Some(443));
    assert!(webhook.client_config.url.is_none());
    assert!(
        webhook.client_config.ca_bundle.is_none(),
        "the caBundle comes from an overlay"
    );
    assert_eq!(webhook.admission_review_versions, ["v1", "v1beta1"]);
    assert_eq!(webhook.side_effects, "None");
    assert!(
        webhook
            .timeout_seconds
            .is_some_and(|t| (1..=5).contains(&t))
    );
    // The first install only warns, so it fails open; enforcing fails closed
    // (docs/install.md's patch switches both together).
    let config_map: ConfigMap = base.one("ConfigMap");
    let policy = Policy::from_yaml(&config_map.data.unwrap()["policy.yaml"]).unwrap();
    assert_eq!(policy.mode, Mode::Warn, "the first install warns");
    assert_eq!(
        webhook.failure_policy.as_deref(),
        Some("Ignore"),
        "a warn-mode webhook fails open"
    );
    assert_eq!(webhook.match_policy.as_deref(), Some("Equivalent"));
    let empty = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector::default();
    assert_eq!(webhook.namespace_selector.as_ref(), Some(&empty));
    assert_eq!(webhook.object_selector.as_ref(), Some(&empty));

    let rules = webhook.rules.clone().unwrap_or_default();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..]),
        "UPDATE removes finalizers; CREATE can carry a two-person approval"
    );
    assert_eq!(rule.api_groups.as_deref(), Some(&["*".to_string()][..]));
    assert_eq!(rule.api_versions.as_deref(), Some(&["*".to_string()][..]));
    assert_eq!(rule.scope.as_deref(), Some("*"));
    let resources = rule.resources.clone().unwrap_or_default();
    for (resource, subresource) in [
        ("pods", ""),
        ("widgets", ""),
        ("namespaces", ""),
        ("namespaces", "finalize"),
        ("pods", "status"),
        ("persistentvolumeclaims", "status"),
    ] {
        assert!(
            rule_covers(&resources, resource, subresource),
            "rules do not send {resource}/{subresource}"
        );
    }

    // kube-apiserver's validation: "*/*" stands alone; "*" with no other
    // main resource.
    if resources.iter().any(|r| r == "*/*") {
        assert_eq!(resources.len(), 1, "'*/*' must stand alone");
    }
    if resources.iter().any(|r| r == "*") {
        assert_eq!(resources.iter().filter(|r| !r.contains('/')).count(), 1);
    }

    let conditions = webhook.match_conditions.clone().unwrap_or_default();
    assert!(!conditions.is_empty() && conditions.len() <= 64);
    for condition in &conditions {
        let name = condition.name.as_bytes();
        assert!(
            name.len() <= 63
                && name.first().is_some_and(u8::is_ascii_alphanumeric)
                && name.last().is_some_and(u8::is_ascii_alphanumeric)
                && name
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)),
            "{}: not a qualified name",
            condition.name
        );
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "removes-finalizer-or-writes-approval",
            "not-builtin-controller"
        ]
    );
    for condition in &conditions {
        for optional in ["?.", "?[", "orValue", "optional."] {
            assert!(
                !condition.expression.contains(optional),
                "{}: plain CEL, no optional types",
                condition.name
            );
        }
    }
}

/// Whether a webhook rule's `resources` send `resource/subresource`, as
/// kube-apiserver matches them.
fn rule_covers(resources: &[String], resource: &str, subresource: &str) -> bool {
    resources.iter().any(|entry| {
        let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
        (r == "*" || r == resource) && (s == "*" || s == subresource)
    })
}

#[test]
fn rule_matching_follows_kube_apiserver() {
    let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(rule_covers(&r(&["*"]), "pods", ""));
    assert!(!rule_covers(&r(&["*"]), "pods", "status"));
    assert!(rule_covers(&r(&["*/*"]), "pods", ""));
    assert!(rule_covers(&r(&["*/*"]), "namespaces", "finalize"));
    assert!(rule_covers(&r(&["*/status"]), "pods", "status"));
    assert!(rule_covers(&r(&["pods/*"]), "pods", "status"));
    assert!(!rule_covers(&r(&["*/status"]), "pods", ""));
    assert!(rule_covers(
        &r(&["namespaces/finalize"]),
        "namespaces",
        "finalize"
    ));
    assert!(!rule_covers(
        &r(&["namespaces/finalize"]),
        "pods",
        "finalize"
    ));
}

#[test]
fn match_conditions_skip_exactly_the_builtin_controller_usernames() {
    let (_, webhook) = Base::load().webhook();
    let conditions = webhook.match_conditions.unwrap_or_default();
    let skip = conditions
        .iter()
        .find(|c| c.name == "not-builtin-controller")
        .expect("a not-builtin-controller condition");
    // The usernames, or else a write of an approval: the same expression
    // as the third part of the first condition.
    let (users, or_approval) = skip
        .expression
        .split_once("\n||\n")
        .expect("usernames || a write of an approval");
    let quoted: Vec<&str> = users.split('\'').skip(1).step_by(2).collect();
    assert_eq!(
        quoted,
        builtin::all_usernames(),
        "keep the list in step with src/policy/builtin.rs"
    );
    assert!(users.contains("request.userInfo.username in ["));
    let first = &conditions[0].expression;
    let writes_approval = first.rsplit("\n||\n").next().unwrap();
    assert_eq!(
        or_approval, writes_approval,
        "a built-in controller's write of an approval is sent, as anyone's"
    );
}

/// docs/security.md names every identity the shipped matchConditions
/// let past the webhook: what an operator reads is what is skipped.
#[test]
fn the_security_guide_names_every_skipped_identity() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md"))
            .unwrap();
    let section = guide
        .split("- `not-builtin-controller`:")
        .nth(1)
        .expect("docs/security.md explains the not-builtin-controller condition");
    let section = section.split("\n## ").next().unwrap();
    let missing: Vec<&str> = builtin::all_usernames()
        .into_iter()
        .filter(|user| !section.contains(&format!("`{user}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/security.md does not name these skipped identities: {missing:?}"
    );
}

#[test]
fn match_conditions_name_the_approval_annotations_the_policy_uses() {
    let base = Base::load();
    let (_, webhook) = base.webhook();
    let conditions = webhook.match_conditions.unwrap_or_default();
    let guarded = &conditions[0].expression;
    let list = &guarded[guarded.rfind("[\n").expect("the approval key list")..];
    let list = &list[..list.find(']').unwrap()];
    let keys: Vec<&str> = list.split('\'').skip(1).step_by(2).collect();
    assert_eq!(
        keys,
        [
            DEFAULT_OVERRIDE_ANNOTATION,
            approval::APPROVED_BY,
            approval::OVERRIDE_EXPIRES,
            finalizer_guard::policy::seal::APPROVAL_SEAL,
        ]
    );
    let config_map: ConfigMap = base.one("ConfigMap");
    let policy = Policy::from_yaml(&config_map.data.unwrap()["policy.yaml"]).unwrap();
    assert_eq!(
        policy.override_settings.annotation, keys[0],
        "the policy's override annotation is the one the webhook is sent"
    );
}

#[test]
fn deployment_is_locked_down_and_highly_available() {
    let base = Base::load();
    let (deployment, pod, container) = base.pod();
    let spec = deployment.spec.clone();
    assert!(spec.replicas.unwrap_or(1) >= 2);
    let rolling = spec.strategy.unwrap().rolling_update.unwrap();
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));

    let spread: Vec<_> = pod.topology_spread_constraints.clone().unwrap_or_default();
    let keys: Vec<&str> = spread.iter().map(|c| c.topology_key.as_str()).collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );
    let template_labels = spec.template.metadata.unwrap().labels.unwrap();
    for constraint in &spread {
        let selector = constraint
            .label_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap();
        assert!(
            selector
                .iter()
                .all(|(k, v)| template_labels.get(k) == Some(v))
        );
    }
    assert_eq!(
        spec.selector.match_labels.as_ref(),
        Some(&template_labels),
        "the selector is the template's labels"
    );

    let pod_security = pod.security_context.clone().unwrap();
    assert!(yes(pod_security.run_as_non_root));
    assert_eq!(pod_security.run_as_user, Some(65532));
    assert_eq!(pod_security.run_as_group, Some(65532));
    assert_eq!(
        pod_security.seccomp_profile.unwrap().type_,
        "RuntimeDefault"
    );
    let security = container.security_context.clone().unwrap();
    assert!(yes(security.run_as_non_root));
    assert_eq!(security.run_as_user, Some(65532));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert!(yes(security.read_only_root_filesystem));
    assert_eq!(security.privileged, None);
    let capabilities = security.capabilities.unwrap();
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(capabilities.add.is_none());
    assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "the server writes Events through the API"
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("finalizer-guard"));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    assert!(pod.host_network.is_none() && pod.host_pid.is_none());

    let resources = container.resources.clone().unwrap();
    let requests = resources.requests.unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    assert!(resources.limits.unwrap().contains_key("memory"));

    // The probes are on the admin port.
    let admin = container
        .ports
        .clone()
        .unwrap()
        .into_iter()
        .find(|p| p.container_port == 9090)
        .expect("the admin port");
    let admin_name = IntOrString::String(admin.name.clone().unwrap());
    for (probe, path) in [
        (container.readiness_probe.clone(), "/readyz"),
        (container.liveness_probe.clone(), "/healthz"),
    ] {
        let get = probe.expect("a probe").http_get.expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert!(get.port == admin_name || get.port == IntOrString::Int(9090));
        assert!(get.scheme.is_none() || get.scheme.as_deref() == Some("HTTP"));
    }
}

#[test]
fn watch_runs_alone_as_its_own_account_with_read_only_rbac() {
    let base = Base::load();
    let account: ServiceAccount = base.watch_one("ServiceAccount");
    let name = account.metadata.name.clone().unwrap();
    assert_eq!(name, "finalizer-guard-watch");
    assert_eq!(account.automount_service_account_token, Some(false));

    let deployment: Deployment = base.watch_one("Deployment");
    let spec = deployment.spec;
    assert_eq!(
        spec.replicas,
        Some(1),
        "one: two would announce each object twice"
    );
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("Recreate"));
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&labels));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(name.as_str()));
    assert_eq!(pod.automount_service_account_token, Some(true));
    let (_, webhook_pod, webhook_container) = base.pod();
    assert_eq!(pod.security_context, webhook_pod.security_context);
    let container = &pod.containers[0];
    assert_eq!(
        container.security_context,
        webhook_container.security_context
    );
    assert!(
        container
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()
            .contains_key("memory")
    );
    // Its arguments are what `watch` takes, its policy the webhook's file.
    let args = container.args.clone().unwrap();
    let mut argv = vec!["finalizer-guard".to_string()];
    argv.extend(args.iter().cloned());
    let parsed = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let cli::Command::Watch(watch) = parsed.command else {
        panic!("{args:?} is not watch");
    };
    let config = watch.into_config();
    assert_eq!(config.admin_listen.port(), 9091);
    assert_eq!(config.stuck_after, std::time::Duration::from_secs(600));
    assert!(config.events);
    assert_eq!(
        config.policy.as_deref(),
        Some(Path::new("/etc/finalizer-guard/policy/policy.yaml"))
    );
    let mounts = container.volume_mounts.clone().unwrap();
    assert!(
        mounts
            .iter()
            .all(|m| m.read_only == Some(true) && m.sub_path.is_none())
    );
    for (probe, path) in [
        (container.readiness_probe.clone(), "/readyz"),
        (container.liveness_probe.clone(), "/healthz"),
    ] {
        let get = probe.expect("a probe").http_get.expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.port, IntOrString::String("admin".into()));
    }

    // Read-only on every type but Secrets; Events created and patched;
    // nothing else. RBAC cannot take Secrets out of "*": the core group's
    // types are named, other groups read whole, none of them the core group.
    let roles: Vec<ClusterRole> = base
        .watch
        .iter()
        .filter(|o| text(o, "/kind") == "ClusterRole")
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect();
    assert_eq!(roles.len(), 2, "watch's role and its view aggregation");
    let role = roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("finalizer-guard-watch"))
        .unwrap();
    let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role
        .rules
        .clone()
        .unwrap()
        .into_iter()
        .map(|r| (r.api_groups.unwrap(), r.resources.unwrap(), r.verbs))
        .collect();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let read = strings(&["get", "list", "watch"]);
    assert_eq!(rules.len(), 3, "{rules:?}");
    let (groups, resources, verbs) = &rules[0];
    assert_eq!((groups, verbs), (&strings(&[""]), &read));
    for needed in [
        "pods",
        "nodes",
        "namespaces",
        "persistentvolumes",
        "configmaps",
    ] {
        assert!(
            resources.iter().any(|r| r == needed),
            "{needed}: {resources:?}"
        );
    }
    assert!(
        !resources
            .iter()
            .any(|r| r == "secrets" || r == "*" || r.contains('/'))
    );
    let (groups, resources, verbs) = &rules[1];
    assert_eq!((resources, verbs), (&strings(&["*"]), &read));
    assert!(
        !groups.iter().any(|g| g.is_empty() || g == "*"),
        "a group in {groups:?} would read Secrets"
    );
    for needed in [
        "apps",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
    ] {
        assert!(groups.iter().any(|g| g == needed), "{needed}: {groups:?}");
    }
    assert_eq!(
        rules[2],
        (
            strings(&["events.k8s.io"]),
            strings(&["events"]),
            strings(&["create", "patch"])
        )
    );
    let view = roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("finalizer-guard-watch-view"))
        .unwrap();
    let selectors: Vec<_> = view
        .aggregation_rule
        .clone()
        .unwrap()
        .cluster_role_selectors
        .unwrap()
        .into_iter()
        .map(|s| s.match_labels.unwrap())
        .collect();
    assert_eq!(
        selectors,
        [
            BTreeMap::from([(
                "rbac.authorization.k8s.io/aggregate-to-view".to_string(),
                "true".to_string()
            )]),
            BTreeMap::from([(
                "finalizer-guard.io/aggregate-to-watch".to_string(),
                "true".to_string()
            )]),
        ]
    );
    let bindings: Vec<ClusterRoleBinding> = base
        .watch
        .iter()
        .filter(|o| text(o, "/kind") == "ClusterRoleBinding")
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect();
    assert_eq!(bindings.len(), 2);
    for binding in &bindings {
        assert!(
            roles
                .iter()
                .any(|r| r.metadata.name.as_ref() == Some(&binding.role_ref.name))
        );
        let subjects = binding.subjects.clone().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].name, name);
        assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
    }

    // Its Service selects its pod, and the webhook's selects none of it.
    let service: Service = base.watch_one("Service");
    let selector = service.spec.unwrap().selector.unwrap();
    assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let webhook_service: Service = base.one("Service");
    let webhook_selector = webhook_service.spec.unwrap().selector.unwrap();
    assert!(
        !webhook_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v)),
        "the webhook's Service must not send kube-apiserver to watch"
    );
    let pdb: PodDisruptionBudget = base.one("PodDisruptionBudget");
    let pdb_selector = pdb.spec.unwrap().selector.unwrap().match_labels.unwrap();
    assert!(!pdb_selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
}

#[test]
fn container_arguments_are_what_serve_accepts_and_fit_the_grace_period() {
    let base = Base::load();
    let (_, pod, container) = base.pod();
    let args = container.args.clone().unwrap();
    assert_eq!(
        args,
        [
            "serve",
            "--policy",
            "/etc/finalizer-guard/policy/policy.yaml",
            "--tls-cert",
            "/etc/finalizer-guard/tls/tls.crt",
            "--tls-key",
            "/etc/finalizer-guard/tls/tls.key",
            // Connections' buffers and the body budget fit the 128Mi limit.
            "--max-connections",
            "256",
        ]
    );
    let parsed = Cli::try_parse_from(
        std::iter::once("finalizer-guard").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("serve refuses the container's arguments: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("not serve");
    };
    let config = serve.into_config();
    assert!(config.policy.is_some() && config.tls.is_some());
    assert_eq!(config.listen.port(), 8443);
    assert_eq!(config.admin_listen.port(), 9090);
    let grace = pod
        .termination_grace_period_seconds
        .expect("a grace period");
    let needed = (config.shutdown_delay + config.shutdown_timeout).as_secs();
    assert!(
        u64::try_from(grace).unwrap() > needed,
        "terminationGracePeriodSeconds {grace} must exceed the shutdown delay and timeout ({needed}s)"
    );

    // Every environment variable is one `serve` reads.
    let command = Cli::command();
    let serve_command = command.find_subcommand("serve").unwrap();
    let known: BTreeSet<String> = serve_command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    for env in container.env.clone().unwrap_or_default() {
        assert!(known.contains(&env.name), "serve reads no {}", env.name);
    }

    // The files named in the arguments are in whole-folder mounts.
    let mounts = container.volume_mounts.clone().unwrap();
    let volumes = pod.volumes.clone().unwrap();
    for (file, key) in [
        (&args[2], "policy.yaml"),
        (&args[4], "tls.crt"),
        (&args[6], "tls.key"),
    ] {
        let (folder, name) = file.rsplit_once('/').unwrap();
        assert_eq!(name, key);
        let mount = mounts
            .iter()
            .find(|m| m.mount_path == folder)
            .unwrap_or_else(|| panic!("no volume mounted at {folder}"));
        assert!(
            mount.sub_path.is_none() && mount.sub_path_expr.is_none(),
            "subPath mounts never update"
        );
        assert!(yes(mount.read_only));
        let volume = volumes.iter().find(|v| v.name == mount.name).unwrap();
        if key == "policy.yaml" {
            let config_map: ConfigMap = base.one("ConfigMap");
            assert_eq!(
                volume.config_map.as_ref().unwrap().name,
                config_map.metadata.name.unwrap()
            );
            assert!(config_map.data.unwrap().contains_key(key));
        } else {
            let secret = volume.secret.as_ref().expect("a Secret volume");
            assert_eq!(secret.secret_name.as_deref(), Some(TLS_SECRET));
            assert!(
                secret.items.is_none(),
                "every key of the Secret, tls.crt and tls.key among them"
            );
        }
    }
}

#[test]
fn service_and_disruption_budget_select_the_webhook_pods() {
    let base = Base::load();
    let (deployment, _, container) = base.pod();
    let labels = deployment.spec.template.metadata.unwrap().labels.unwrap();
    let selects = |selector: &BTreeMap<String, String>| {
        !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    };

    let service: Service = base.one("Service");
    assert_eq!(service.metadata.name.as_deref(), Some(SERVICE));
    assert_eq!(service.metadata.namespace.as_deref(), Some(NAMESPACE));
    let spec = service.spec.unwrap();
    assert!(selects(&spec.selector.unwrap()));
    let container_ports = container.ports.unwrap();
    let target = |port: &IntOrString| -> i32 {
        match port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => {
                container_ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .unwrap_or_else(|| panic!("no container port named {name}"))
                    .container_port
            }
        }
    };
    let ports = spec.ports.unwrap();
    let https = ports.iter().find(|p| p.port == 443).expect("port 443");
    assert_eq!(target(https.target_port.as_ref().unwrap()), 8443);
    let metrics = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a metrics port");
    assert_eq!(metrics.port, 9090);
    assert_eq!(target(metrics.target_port.as_ref().unwrap()), 9090);

    let pdb: PodDisruptionBudget = base.one("PodDisruptionBudget");
    let spec = pdb.spec.unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
    assert!(selects(&spec.selector.unwrap().match_labels.unwrap()));
}

#[test]
fn policy_in_the_config_map_parses_and_starts_in_warn_mode() {
    let config_map: ConfigMap = Base::load().one("ConfigMap");
    let text = &config_map.data.unwrap()["policy.yaml"];
    let policy = Policy::from_yaml(text).unwrap_or_else(|e| panic!("policy.yaml: {e}"));
    assert_eq!(policy.mode, Mode::Warn, "first install: warn");
    assert!(
        policy.builtin_controllers,
        "the matchConditions skip the built-in controllers"
    );
    assert!(
        finalizer_guard::policy::servable::check(&policy).is_empty(),
        "doctor: every built-in controller may remove its own finalizers"
    );
    assert_eq!(
        policy.override_settings.annotation,
        DEFAULT_OVERRIDE_ANNOTATION
    );
    assert_eq!(policy.override_settings.reasons, DEFAULT_OVERRIDE_REASONS);
}

#[test]
fn rbac_grants_only_creating_and_patching_events() {
    let base = Base::load();
    let role: ClusterRole = base.named("ClusterRole", "finalizer-guard-events");
    let rules = role.rules.clone().unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["events.k8s.io".to_string()][..]),
        "the server writes events.k8s.io/v1 Events"
    );
    assert_eq!(rule.resources.as_deref(), Some(&["events".to_string()][..]));
    // Patch: a repeated Event's series count.
    assert_eq!(rule.verbs, ["create", "patch"]);
    assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
    let binding: ClusterRoleBinding = base.one("ClusterRoleBinding");
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, "finalizer-guard");
    assert_eq!(subjects[0].namespace.as_deref(), Some(NAMESPACE));
    let account: ServiceAccount = base.one("ServiceAccount");
    assert_eq!(
        account.automount_service_account_token,
        Some(false),
        "a token only for pods that ask"
    );
    assert!(
        base.objects
            .iter()
            .all(|o| !matches!(text(o, "/kind"), "Role" | "RoleBinding")),
        "no namespaced grants"
    );
}

/// A ClusterRole's rule: API groups, resources, non-resource URLs, verbs.
type Rule = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// The on-call role (docs/runbook.md) grants what `unstick`, `approve` and
/// `doctor --cluster` call (src/cluster/), rule by rule, and nothing more:
/// a rule added here is added on purpose. `finalizer-guard-oncall` is
/// aggregated from `finalizer-guard-oncall-rules` (and `view`); it reads
/// every type but Secrets, and patches only the types it lists.
/// tests/e2e/oncall.rs runs the three commands as a user bound to it and
/// nothing else.
#[test]
fn oncall_role_grants_what_the_cluster_commands_call_and_no_more() {
    let base = Base::load();
    let role: ClusterRole = base.named("ClusterRole", "finalizer-guard-oncall");
    assert!(
        role.rules.is_none(),
        "aggregated: Kubernetes writes its rules"
    );
    let selectors: Vec<BTreeMap<String, String>> = role
        .aggregation_rule
        .expect("aggregated")
        .cluster_role_selectors
        .unwrap()
        .into_iter()
        .map(|s| s.match_labels.unwrap())
        .collect();
    assert_eq!(
        selectors,
        [
            BTreeMap::from([(
                "finalizer-guard.io/aggregate-to-oncall".to_string(),
                "finalizer-guard-oncall".to_string()
            )]),
            BTreeMap::from([(
                "rbac.authorization.k8s.io/aggregate-to-view".to_string(),
                "true".to_string()
            )]),
        ]
    );
    let own: ClusterRole = base.named("ClusterRole", "finalizer-guard-oncall-rules");
    assert_eq!(
        own.metadata.labels.unwrap()["finalizer-guard.io/aggregate-to-oncall"],
        "finalizer-guard-oncall"
    );
    let rules: Vec<Rule> = own
        .rules
        .unwrap()
        .into_iter()
        .map(|r| {
            assert!(r.resource_names.is_none());
            (
                r.api_groups.unwrap_or_default(),
                r.resources.unwrap_or_default(),
                r.non_resource_urls.unwrap_or_default(),
                r.verbs,
            )
        })
        .collect();
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules[..2],
        [
            // whoami: a SelfSubjectReview.
            (
                v(&["authentication.k8s.io"]),
                v(&["selfsubjectreviews"]),
                v(&[]),
                v(&["create"])
            ),
            // Discovery.
            (
                v(&[]),
                v(&[]),
                v(&["/api", "/api/*", "/apis", "/apis/*"]),
                v(&["get"])
            ),
        ]
    );
    // Every type read but Secrets: the core group's named, Kubernetes' own
    // groups whole.
    let (core, groups) = (&rules[2], &rules[3]);
    assert_eq!((&core.0, &core.3), (&v(&[""]), &v(&["get", "list"])));
    assert!(!core.1.contains(&"secrets".to_string()) && !core.1.contains(&"*".to_string()));
    for needed in ["pods", "nodes", "namespaces", "services", "configmaps"] {
        assert!(core.1.contains(&needed.to_string()), "{needed}");
    }
    assert_eq!((&groups.1, &groups.3), (&v(&["*"]), &v(&["get", "list"])));
    assert!(
        groups.0.iter().all(|g| g.ends_with("k8s.io")
            || ["apps", "autoscaling", "batch", "policy"].contains(&g.as_str())),
        "{groups:?}"
    );
    // The types it releases, a rule per group, and the last two.
    let n = rules.len();
    for rule in &rules[4..n - 2] {
        assert_eq!(rule.3, v(&["get", "list", "patch"]), "{rule:?}");
        assert_eq!(rule.0.len(), 1, "{rule:?}");
        assert_ne!(rule.0[0], "*", "{rule:?}");
        for resource in &rule.1 {
            assert!(
                !["*", "secrets", "configmaps"].contains(&resource.as_str()),
                "{rule:?}"
            );
        }
    }
    assert!(n - 6 >= 20, "{rules:#?}");
    assert_eq!(
        rules[n - 2..],
        [
            // unstick namespace/NAME.
            (
                v(&[""]),
                v(&["namespaces/finalize"]),
                v(&[]),
                v(&["update"])
            ),
            // --force-delete.
            (v(&[""]), v(&["pods"]), v(&[]), v(&["delete"])),
        ]
    );
    for verb in [
        "watch",
        "create",
        "update",
        "delete",
        "deletecollection",
        "escalate",
        "bind",
        "impersonate",
        "*",
    ] {
        assert!(
            !rules[2..n - 2]
                .iter()
                .any(|r| r.3.iter().any(|have| have == verb)),
            "no {verb} on what it reads or releases"
        );
    }
    // Bound by you, not by the manifests.
    for binding in base
        .objects
        .iter()
        .filter(|o| text(o, "/kind").ends_with("Binding"))
    {
        assert!(!text(binding, "/roleRef/name").starts_with("finalizer-guard-oncall"));
    }
}

/// Words as a POSIX shell splits them, for the plain commands of the docs:
/// double and single quotes, a trailing comment, a redirection dropped.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, '#' | '>') if word.is_none() => break,
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    words
}

/// docs/runbook.md's commands are ones the binary takes, and the role it
/// binds is the one the manifests ship.
#[test]
fn the_runbook_commands_are_what_the_binary_takes() {
    let runbook =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbook.md"))
            .unwrap();
    let mut commands = Vec::new();
    for block in runbook.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap().replace("\\\n", " ");
        commands.extend(
            block
                .lines()
                .filter(|l| l.trim_start().starts_with("finalizer-guard "))
                .map(shell_words),
        );
    }
    assert!(commands.len() >= 5, "{commands:?}");
    let mut seen = BTreeSet::new();
    for words in &commands {
        let parsed = Cli::try_parse_from(words)
            .unwrap_or_else(|e| panic!("docs/runbook.md: {}: {e}", words.join(" ")));
        if let cli::Command::Unstick(_) = parsed.command {
            for flag in [
                "--node",
                "--reason",
                "--force-delete",
                "--orphan-contents",
                "--dry-run=server",
            ] {
                if words.iter().any(|w| w == flag) {
                    seen.insert(flag);
                }
            }
        }
    }
    assert_eq!(seen.len(), 5, "both incidents' releases: {seen:?}");
    assert!(runbook.contains("--clusterrole=finalizer-guard-oncall"));
    Base::load().named::<ClusterRole>("ClusterRole", "finalizer-guard-oncall");
}

/// The cert-manager overlay's output: a CA of its own issues the Secret the
/// pods mount, for the Service's names, and the CA injector is told which.
fn check_cert_manager_overlay(objects: &[Value]) {
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| text(o, "/kind") == kind && text(o, "/metadata/name") == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let serving = find("Certificate", "finalizer-guard-serving");
    assert_eq!(text(serving, "/spec/secretName"), TLS_SECRET);
    let names: Vec<String> = serde_json::from_value(serving["spec"]["dnsNames"].clone()).unwrap();
    assert_eq!(
        names,
        finalizer_guard::server::certs::service_names(SERVICE, NAMESPACE)
    );
    let issuer = text(serving, "/spec/issuerRef/name");
    let ca_issuer = find("Issuer", issuer);
    let ca_secret = text(ca_issuer, "/spec/ca/secretName");
    let ca = objects
        .iter()
        .find(|o| text(o, "/kind") == "Certificate" && text(o, "/spec/secretName") == ca_secret)
        .expect("a CA certificate");
    assert_eq!(ca["spec"]["isCA"], json!(true));
    assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
    find("Issuer", text(ca, "/spec/issuerRef/name"));

    let webhook = find("ValidatingWebhookConfiguration", "finalizer-guard");
    assert_eq!(
        text(
            webhook,
            "/metadata/annotations/cert-manager.io~1inject-ca-from"
        ),
        format!("{NAMESPACE}/finalizer-guard-serving")
    );
}

/// The self-managed overlay's output: the Secret holds the serving pair and
/// the CA, and the caBundle is the CA.
fn check_self_managed(objects: &[Value], bundle: &finalizer_guard::server::certs::Bundle) {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = objects
        .iter()
        .find(|o| text(o, "/kind") == "Secret")
        .expect("a Secret");
    assert_eq!(text(secret, "/metadata/name"), TLS_SECRET);
    assert_eq!(text(secret, "/metadata/namespace"), NAMESPACE);
    assert_eq!(text(secret, "/type"), "kubernetes.io/tls");
    let keys: BTreeSet<&str> = secret["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["ca.crt", "tls.crt", "tls.key"]));
    assert_eq!(text(secret, "/data/tls.crt"), b64(&bundle.cert_pem));
    assert_eq!(text(secret, "/data/tls.key"), b64(&bundle.key_pem));
    assert_eq!(text(secret, "/data/ca.crt"), b64(&bundle.ca_cert_pem));
    let webhook = objects
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(
        text(webhook, "/webhooks/0/clientConfig/caBundle"),
        finalizer_guard::server::certs::ca_bundle(&bundle.ca_cert_pem),
        "the caBundle `finalizer-guard certs` prints"
    );
    let all = serde_json::to_string(objects).unwrap();
    assert!(
        !all.contains(&b64(&bundle.ca_key_pem)),
        "ca.key never leaves certs/"
    );
}

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
fn write_certs(overlay: &Path) -> finalizer_guard::server::certs::Bundle {
    let certs_dir = overlay.join("../../../certs");
    let authority = finalizer_guard::server::certs::Authority::generate(30).unwrap();
    let bundle = authority
        .issue(
            &finalizer_guard::server::certs::service_names(SERVICE, NAMESPACE),
            &[],
            30,
        )
        .unwrap();
    finalizer_guard::server::certs::write(&bundle, &certs_dir).unwrap();
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::copy(certs_dir.join(file), overlay.join(file)).unwrap();
    }
    bundle
}

// ---------------------------------------------------------------------------
// kubectl kustomize

/// `FG_KUBECTL`, else `kubectl` on PATH, else the one `e2e/build.sh` caches.
/// The tests that need it are `#[ignore]`d: run with `--ignored`, they fail
/// without it rather than pass.
fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("FG_KUBECTL") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "FG_KUBECTL={} is not a file",
            path.display()
        );
        return path;
    }
    let on_path = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from("kubectl");
    }
    let cache = std::env::var_os("FG_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("finalizer-guard-e2e"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/finalizer-guard-e2e"))
        });
    let cached = cache.and_then(|dir| {
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("kubectl"))
            .find(|p| p.is_file())
    });
    cached.expect("no kubectl: set FG_KUBECTL, put kubectl on PATH, or build it with e2e/build.sh (.ci/run does)")
}

fn kustomize(kubectl: &Path, dir: &Path) -> Vec<Value> {
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut objects = documents(&String::from_utf8(output.stdout).unwrap()).unwrap();
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

fn sorted_ids(objects: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = objects.iter().map(describe).collect();
    ids.sort();
    ids
}

#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn kubectl_kustomize_builds_the_base_and_both_overlays() {
    let kubectl = kubectl();
    let copy = copy_manifests();
    let root = copy.path().join("manifests");
    let overlay = root.join("overlays/self-managed");

    // Without the certificate files, the self-managed overlay refuses to build:
    // nothing half-installed.
    let refused = Command::new(&kubectl)
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("tls.crt"), "{said}");

    let bundle = write_certs(&overlay);
    let base = Base::load();
    let base: Vec<Value> = base.objects.into_iter().chain(base.watch).collect();
    for dir in [
        root.clone(),
        root.join("base"),
        root.join("overlays/cert-manager"),
        overlay.clone(),
    ] {
        let built = kustomize(&kubectl, &dir);
        for object in &built {
            if let Err(e) = check_object(object) {
                panic!(
                    "kubectl kustomize {}: {}: {e}",
                    dir.display(),
                    describe(object)
                );
            }
        }
        // The base's objects, as committed, in every build: kustomize only
        // reorders keys and objects, and an overlay adds to them.
        for object in &base {
            let built = built
                .iter()
                .find(|o| describe(o) == describe(object))
                .unwrap_or_else(|| panic!("{}: lost {}", dir.display(), describe(object)));
            let changed_by_overlay = text(object, "/kind") == "ValidatingWebhookConfiguration"
                && dir.starts_with(root.join("overlays"));
            if !changed_by_overlay && let Some(d) = first_difference(object, built, "") {
                panic!("{}: {}: {d}", dir.display(), describe(object));
            }
        }
        if dir == root || dir == root.join("base") {
            assert_eq!(sorted_ids(&built), sorted_ids(&base), "{}", dir.display());
        }
        if dir == root.join("overlays/cert-manager") {
            check_cert_manager_overlay(&built);
        }
        if dir == overlay {
            check_self_managed(&built, &bundle);
        }
    }
    println!("kubectl kustomize built manifests/, base and both overlays");
}

/// The first YAML block of `page` (docs/install.md, docs/security.md) holding `needle`.
fn guide_example(page: &str, needle: &str) -> String {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
    guide
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .find(|block| block.contains(needle))
        .unwrap_or_else(|| panic!("{page} shows no overlay with {needle:?}"))
}

/// The overlay docs/install.md shows for enforcing builds, over a copy of
/// `manifests/` where its `resources:` line expects it: the policy it is
/// given, and a webhook that fails closed.
#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn the_documented_enforce_overlay_fails_closed() {
    let example = guide_example("docs/install.md", "path: /webhooks/0/failurePolicy");
    let documents = documents(&example).unwrap();
    assert_eq!(documents[0]["kind"], "Kustomization", "{example}");
    assert_eq!(
        documents[0]["resources"][0],
        "../finalizer-guard/manifests/overlays/cert-manager"
    );
    let kubectl = kubectl();
    let copy = copy_manifests();
    let checkout = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::rename(copy.path().join("manifests"), checkout.join("manifests")).unwrap();
    let overlay = copy.path().join("my-finalizer-guard");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), &example).unwrap();
    std::fs::write(
        overlay.join("policy.yaml"),
        "mode: enforce\nrules:\n  - name: cleanup\n    finalizers: [example.com/cleanup]\n    serviceAccounts: [ops:cleanup]\n",
    )
    .unwrap();
    let built = kustomize(&kubectl, &overlay);
    let webhook = built
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(text(webhook, "/webhooks/0/failurePolicy"), "Fail");
    let config_maps: Vec<&Value> = built
        .iter()
        .filter(|o| text(o, "/kind") == "ConfigMap")
        .collect();
    assert_eq!(config_maps.len(), 1, "the policy replaces the shipped one");
    assert_eq!(
        describe(config_maps[0]),
        format!("ConfigMap {NAMESPACE}/finalizer-guard-policy"),
        "the name the Deployment mounts"
    );
    let policy = Policy::from_yaml(text(config_maps[0], "/data/policy.yaml")).unwrap();
    assert_eq!(policy.mode, Mode::Enforce);
    for object in &built {
        check_object(object).unwrap_or_else(|e| panic!("{}: {e}", describe(object)));
    }
}

/// The shipped policy, as the base's ConfigMap holds it.
fn shipped_policy() -> Policy {
    let config_map: ConfigMap = Base::load().named("ConfigMap", "finalizer-guard-policy");
    Policy::from_yaml(&config_map.data.unwrap()["policy.yaml"]).unwrap()
}

/// The ValidatingAdmissionPolicy and binding of a build, as one YAML stream,
/// without the namespace an overlay's `namespace:` gives every object
/// (kube-apiserver drops it from a cluster-scoped one).
fn backstop_of(built: &[Value]) -> String {
    let mut yaml = String::new();
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let mut object = built
            .iter()
            .find(|o| text(o, "/kind") == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
            .clone();
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml_ng::to_string(&object).unwrap());
    }
    yaml
}

/// manifests/vap is the export of the shipped policy: a policy changed in
/// the chart without the manifests rendered again fails here.
#[test]
fn the_shipped_validating_admission_policy_is_the_export_of_the_shipped_policy() {
    let dir = manifests().join("vap");
    assert_eq!(
        kustomization(&dir)["resources"],
        json!(["validatingadmissionpolicy.yaml"])
    );
    let file = dir.join("validatingadmissionpolicy.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    finalizer_guard::offline::vap::verify(&shipped_policy(), &yaml)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // And the check tells a policy that changed.
    let mut changed = shipped_policy();
    changed.mode = Mode::Enforce;
    assert!(finalizer_guard::offline::vap::verify(&changed, &yaml).is_err());
    for object in read_documents(&file) {
        check_object(&object).unwrap_or_else(|e| panic!("{}: {e}", describe(&object)));
    }
}

/// An overlay with the backstop component builds the webhook failing open
/// beside the export of the very policy its ConfigMap holds; docs/security.md's
/// overlay for a policy of your own does the same with yours, and the check
/// it shows (`policy validate --vap`) refuses an export left stale.
#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn backstop_overlays_install_the_export_of_their_policy_beside_a_webhook_failing_open() {
    let kubectl = kubectl();
    let copy = copy_manifests();
    let root = copy.path().join("manifests");
    write_certs(&root.join("overlays/self-managed"));
    let check = |built: &[Value], what: &str| -> Policy {
        let webhook = built
            .iter()
            .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
            .unwrap();
        assert_eq!(
            text(webhook, "/webhooks/0/failurePolicy"),
            "Ignore",
            "{what}"
        );
        let config_map = built
            .iter()
            .find(|o| text(o, "/kind") == "ConfigMap")
            .unwrap();
        let policy = Policy::from_yaml(text(config_map, "/data/policy.yaml")).unwrap();
        finalizer_guard::offline::vap::verify(&policy, &backstop_of(built))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        for object in built {
            check_object(object).unwrap_or_else(|e| panic!("{what}: {}: {e}", describe(object)));
        }
        policy
    };

    // The shipped policy: the component.
    let overlay = root.join("overlays/backstop");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [../self-managed]\ncomponents: [../../components/backstop]\n",
    )
    .unwrap();
    assert_eq!(
        check(&kustomize(&kubectl, &overlay), "the component"),
        shipped_policy()
    );

    // A policy of your own: docs/security.md's overlay, with the export
    // made as it says.
    let example = guide_example("docs/security.md", "- validatingadmissionpolicy.yaml");
    let checkout = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::rename(&root, checkout.join("manifests")).unwrap();
    let mine = copy.path().join("my-finalizer-guard");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), &example).unwrap();
    let policy_yaml = "mode: enforce\nrules:\n  - name: cleanup\n    finalizers: [example.com/cleanup]\n    serviceAccounts: [ops:cleanup]\n";
    std::fs::write(mine.join("policy.yaml"), policy_yaml).unwrap();
    let export = |policy: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
            .args(["policy", "export", "--vap"])
            .arg(mine.join(policy))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::write(mine.join("validatingadmissionpolicy.yaml"), out.stdout).unwrap();
    };
    export("policy.yaml");
    let policy = check(&kustomize(&kubectl, &mine), "docs/security.md's overlay");
    assert_eq!(policy.mode, Mode::Enforce);
    assert_eq!(policy.rules.len(), 1);
    let validate = || {
        Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
            .args(["policy", "validate", "--vap"])
            .arg(mine.join("validatingadmissionpolicy.yaml"))
            .arg(mine.join("policy.yaml"))
            .output()
            .unwrap()
    };
    assert!(validate().status.success());
    // The policy changes; the export does not: refused, and said why.
    std::fs::write(
        mine.join("policy.yaml"),
        policy_yaml.replace("ops:cleanup", "ops:cleanup-v2"),
    )
    .unwrap();
    let stale = validate();
    assert_eq!(stale.status.code(), Some(1));
    let said = String::from_utf8_lossy(&stale.stdout);
    assert!(
        said.contains("not `finalizer-guard policy export --vap"),
        "{said}"
    );
    assert!(
        said.contains("differs from the export of this policy at spec.variables"),
        "{said}"
    );
}

#[test]
fn gitignore_keeps_certificates_out_of_git() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `git check-ignore` exits 0 for an ignored path, 1 for a tracked one.
    let ignored = |path: &str| {
        let status = Command::new("git")
            .args(["check-ignore", "--no-index", "-q", path])
            .current_dir(root)
            .status()
            .ok()?;
        match status.code() {
            Some(0) => Some(true),
            Some(1) => Some(false),
            _ => None,
        }
    };
    match ignored("certs/ca.key") {
        None => eprintln!("note: not a git checkout; .gitignore not checked"),
        Some(_) => {
            for path in [
                "certs/ca.key",
                "certs/ca.crt",
                "certs/tls.key",
                "certs/tls.crt",
                "manifests/overlays/self-managed/tls.key",
                "manifests/overlays/self-managed/tls.crt",
                "manifests/overlays/self-managed/ca.crt",
                "manifests/overlays/self-managed/ca.key",
            ] {
                assert_eq!(ignored(path), Some(true), "{path} is not git-ignored");
            }
            for path in [
                "certs/README.md",
                "manifests/overlays/self-managed/kustomization.yaml",
            ] {
                assert_eq!(ignored(path), Some(false), "{path} is git-ignored");
            }
        }
    }
}

/// One licence, said the same in the crate, the chart and the image.
#[test]
fn the_licence_is_stated_wherever_the_product_ships() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let licence = env!("CARGO_PKG_LICENSE");
    assert_eq!(licence, "Apache-2.0");
    let text = std::fs::read_to_string(root.join("LICENSE")).unwrap();
    assert!(
        text.contains("Apache License") && text.contains("Version 2.0, January 2004"),
        "LICENSE is the Apache License 2.0"
    );
    assert!(
        text.contains("END OF TERMS AND CONDITIONS"),
        "LICENSE is whole"
    );
    let chart: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("charts/finalizer-guard/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        chart["annotations"]["artifacthub.io/license"],
        json!(licence),
        "Chart.yaml's Artifact Hub licence"
    );
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("org.opencontainers.image.licenses=\"{licence}\""))
            && dockerfile.contains("COPY LICENSE "),
        "the image is labelled and carries the licence"
    );
}

/// `docker build .` (the Dockerfile's `COPY . .`) compiles: every file the
/// binary's code embeds (`include_str!`, `include_bytes!` outside the
/// file's `#[cfg(test)]` part) is in the build context `.dockerignore`
/// leaves, as are Cargo.toml, Cargo.lock and src/.
#[test]
fn the_image_build_context_holds_every_file_the_binary_embeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = DockerIgnore::read(&root.join(".dockerignore"));
    for always in ["Cargo.toml", "Cargo.lock", "src/main.rs", "src/lib.rs"] {
        assert!(!rules.ignores(always), ".dockerignore leaves out {always}");
    }
    for key in [
        "certs/tls.key",
        "manifests/base/tls.key",
        "manifests/base/ca.pem",
        "manifests/overlays/self-managed/tls.crt",
    ] {
        assert!(rules.ignores(key), ".dockerignore lets {key} in");
    }
    let mut embedded = Vec::new();
    let mut sources = vec![root.join("src")];
    while let Some(dir) = sources.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources.push(path);
                continue;
            }
            if path.extension() != Some(OsStr::new("rs")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (at, _) in code.match_indices("include_") {
                let rest = &code[at + "include_".len()..];
                let Some(rest) = rest
                    .strip_prefix("str!(\"")
                    .or_else(|| rest.strip_prefix("bytes!(\""))
                else {
                    continue;
                };
                let file = &rest[..rest.find('"').expect("a closing quote")];
                // Relative to the including file, as the macros resolve it.
                let mut resolved = path.parent().unwrap().to_path_buf();
                for part in Path::new(file).components() {
                    match part {
                        std::path::Component::ParentDir => {
                            resolved.pop();
                        }
                        other => resolved.push(other),
                    }
                }
                let relative = resolved.strip_prefix(root).unwrap().to_path_buf();
                assert!(
                    resolved.is_file(),
                    "{} embeds {file}: missing",
                    path.display()
                );
                embedded.push((path.strip_prefix(root).unwrap().to_path_buf(), relative));
            }
        }
    }
    assert!(
        embedded
            .iter()
            .any(|(_, f)| f == Path::new("manifests/base/webhook.yaml")),
        "the static export's webhook is found among the embedded files: {embedded:?}"
    );
    for (source, file) in &embedded {
        let file = file.to_str().unwrap();
        assert!(
            !rules.ignores(file),
            "{} embeds {file}, which .dockerignore leaves out of the image's build context",
            source.display()
        );
    }
}

/// `.dockerignore`'s rules, as Docker and podman apply them: each line a
/// pattern of `/`-separated parts (`*` and `?` within a part, `**` any
/// number of parts), matching a path or one of its parent folders; `!`
/// takes a match back; the last matching line wins.
struct DockerIgnore(Vec<(bool, Vec<String>)>);

impl DockerIgnore {
    fn read(path: &Path) -> DockerIgnore {
        let text = std::fs::read_to_string(path).unwrap();
        DockerIgnore(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| {
                    let (keep, pattern) = match l.strip_prefix('!') {
                        Some(p) => (true, p),
                        None => (false, l),
                    };
                    let parts = pattern
                        .trim_matches('/')
                        .split('/')
                        .map(str::to_string)
                        .collect();
                    (keep, parts)
                })
                .collect(),
        )
    }

    fn ignores(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        let mut ignored = false;
        for (keep, pattern) in &self.0 {
            // The path itself or a folder it is in.
            if (1..=parts.len()).any(|n| parts_match(pattern, &parts[..n])) {
                ignored = !keep;
            }
        }
        ignored
    }
}

fn parts_match(pattern: &[String], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(p), _) if p == "**" => {
            parts_match(&pattern[1..], path)
                || (!path.is_empty() && parts_match(pattern, &path[1..]))
        }
        (Some(p), Some(first)) => {
            glob(p.as_bytes(), first.as_bytes()) && parts_match(&pattern[1..], &path[1..])
        }
        _ => false,
    }
}

fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], name) || (!name.is_empty() && glob(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pattern[1..], &name[1..]),
        _ => false,
    }
}

#[test]
fn dockerignore_rules_match_as_docker_applies_them() {
    let rules = DockerIgnore(
        [
            (false, "target"),
            (false, "manifests/*"),
            (true, "manifests/base"),
            (false, "**/*.key"),
        ]
        .into_iter()
        .map(|(keep, p)| (keep, p.split('/').map(str::to_string).collect()))
        .collect(),
    );
    for ignored in [
        "target",
        "target/debug/x",
        "a.key",
        "certs/deep/tls.key",
        "manifests/overlays/x.yaml",
        "manifests/base/tls.key",
    ] {
        assert!(rules.ignores(ignored), "{ignored}");
    }
    for kept in [
        "src/target.rs",
        "a.keys",
        "manifests/base/webhook.yaml",
        "manifests",
    ] {
        assert!(!rules.ignores(kept), "{kept}");
    }
}

// ---------------------------------------------------------------------------
// The Helm chart renders what these manifests install

#[path = "manifests/helm.rs"]
mod helm;
#[path = "manifests/monitoring.rs"]
mod monitoring;

#[path = "manifests/fleet.rs"]
mod fleet;

#[path = "manifests/docs.rs"]
mod docs;
