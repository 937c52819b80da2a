//! The files of `policy export --static`, rendered: the backstop, the
//! guard's guard, the static webhook and the AdmissionConfiguration, each
//! with the header that says what it is.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, ValidatingWebhookConfiguration, Validation, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::offline::vap::{self, lit};
use crate::policy::config::{Mode, Policy};

/// The suffix kube-apiserver requires of every object loaded from a static
/// manifest, and refuses in a name written through the API.
pub const SUFFIX: &str = ".static.k8s.io";

/// The backstop policy and its binding, loaded from disk.
pub const BACKSTOP: &str = "finalizer-guard.static.k8s.io";
/// The policy (and binding) guarding finalizer-guard's own API objects.
pub const PROTECT: &str = "finalizer-guard-protect.static.k8s.io";
/// The static webhook configuration.
pub const WEBHOOK: &str = "finalizer-guard.static.k8s.io";

/// The files an export writes, relative to DIR.
pub const ADMISSION_CONFIG: &str = "admission-config.yaml";
pub const POLICIES: &str = "policies";
pub const WEBHOOKS: &str = "webhooks";
const BACKSTOP_FILE: &str = "policies/backstop.yaml";
const PROTECT_FILE: &str = "policies/protect.yaml";
const WEBHOOK_FILE: &str = "webhooks/webhook.yaml";
/// Every file any export writes: a directory holding only these (and their
/// folders) is a previous export, which a new one replaces.
pub const KNOWN_FILES: &[&str] = &[ADMISSION_CONFIG, BACKSTOP_FILE, PROTECT_FILE, WEBHOOK_FILE];

/// The webhook's registration as the chart renders it with its defaults
/// (scripts/render-manifests.sh keeps the two the same): the static webhook
/// is this, with its name, client and the policy's settings changed.
const RENDERED_WEBHOOK: &str = include_str!("../../../manifests/base/webhook.yaml");
/// The override annotation the rendered registration names.
const DEFAULT_ANNOTATION: &str = "finalizer-guard.io/override";
/// The matchCondition that skips Kubernetes' own controllers (left out when
/// the policy sets `builtinControllers: false`, as the chart does).
const SKIP_BUILTIN_CONDITION: &str = "not-builtin-controller";

/// The static webhook: where kube-apiserver calls it and the CA it trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `https://HOST[:PORT]/validate`, reachable from kube-apiserver.
    pub url: String,
    /// PEM: the CA that signed the webhook's serving certificate.
    pub ca_bundle: Vec<u8>,
}

/// What the export cannot read from the policy: who the operators are, the
/// names of the objects to guard, where the files will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Usernames allowed to change or delete finalizer-guard's objects.
    pub operator_users: Vec<String>,
    /// Groups allowed to change or delete finalizer-guard's objects.
    pub operator_groups: Vec<String>,
    /// The ValidatingWebhookConfiguration registered through the API.
    pub webhook_configuration: String,
    /// The webhook's name in it.
    pub webhook_name: String,
    /// The backstop ValidatingAdmissionPolicy and binding registered through the API.
    pub backstop: String,
    /// The policy ConfigMap's namespace and name.
    pub configmap_namespace: String,
    pub configmap_name: String,
    /// The absolute path of DIR on the control plane's hosts, as kube-apiserver sees it.
    pub install_dir: String,
    /// The static webhook, if wanted.
    pub webhook: Option<Webhook>,
}

impl Options {
    /// The chart's names (a release `finalizer-guard` in namespace
    /// `finalizer-guard`), these operators, files at `install_dir`.
    pub fn new(operator_users: Vec<String>, install_dir: impl Into<String>) -> Options {
        Options {
            operator_users,
            operator_groups: Vec::new(),
            webhook_configuration: "finalizer-guard".into(),
            webhook_name: "finalizers.finalizer-guard.io".into(),
            backstop: vap::NAME.into(),
            configmap_namespace: "finalizer-guard".into(),
            configmap_name: "finalizer-guard-policy".into(),
            install_dir: install_dir.into(),
            webhook: None,
        }
    }
}

/// Why nothing is exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaticError {
    #[error("the backstop policy is not exported: {0}")]
    Export(#[from] vap::ExportError),
    #[error(
        "no operator: name at least one identity (--operator USER or --operator-group GROUP) that may still change or delete finalizer-guard's objects; without one nobody could, short of editing the files on every control-plane host"
    )]
    NoOperator,
    #[error("{flag}: {why}")]
    Invalid { flag: &'static str, why: String },
}

/// One file of the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Relative to DIR, `/`-separated.
    pub path: &'static str,
    /// The objects in it, as JSON values (what `verify` compares).
    pub objects: Vec<(String, serde_json::Value)>,
    /// The text written: a comment header, then the objects as YAML.
    pub text: String,
}

fn check_names(flag: &'static str, names: &[String]) -> Result<(), StaticError> {
    for name in names {
        check_name(flag, name)?;
    }
    Ok(())
}

fn check_name(flag: &'static str, name: &str) -> Result<(), StaticError> {
    if name.is_empty() {
        return Err(StaticError::Invalid {
            flag,
            why: "empty".into(),
        });
    }
    if name.chars().any(char::is_control) {
        return Err(StaticError::Invalid {
            flag,
            why: format!("{:?} holds a control character", name),
        });
    }
    Ok(())
}

fn check(options: &Options) -> Result<(), StaticError> {
    if options.operator_users.is_empty() && options.operator_groups.is_empty() {
        return Err(StaticError::NoOperator);
    }
    check_names("--operator", &options.operator_users)?;
    check_names("--operator-group", &options.operator_groups)?;
    check_name("--webhook-configuration", &options.webhook_configuration)?;
    check_name("--webhook-name", &options.webhook_name)?;
    check_name("--backstop-name", &options.backstop)?;
    check_name("--configmap-namespace", &options.configmap_namespace)?;
    check_name("--configmap-name", &options.configmap_name)?;
    check_name("--install-dir", &options.install_dir)?;
    if !options.install_dir.starts_with('/') {
        return Err(StaticError::Invalid {
            flag: "--install-dir",
            why: format!(
                "{:?} is not an absolute path: kube-apiserver takes only absolute staticManifestsDir paths",
                options.install_dir
            ),
        });
    }
    if let Some(webhook) = &options.webhook {
        check_name("--webhook-url", &webhook.url)?;
        if !webhook.url.starts_with("https://") {
            return Err(StaticError::Invalid {
                flag: "--webhook-url",
                why: format!(
                    "{:?} is not an https:// URL: kube-apiserver calls admission webhooks over TLS only",
                    webhook.url
                ),
            });
        }
        let pem = String::from_utf8_lossy(&webhook.ca_bundle);
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(StaticError::Invalid {
                flag: "--webhook-ca-bundle",
                why: "no PEM certificate in it".into(),
            });
        }
    }
    Ok(())
}

fn labels() -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        "app.kubernetes.io/name".to_string(),
        "finalizer-guard".to_string(),
    )]))
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: labels(),
        ..ObjectMeta::default()
    }
}

fn to_json<T: serde::Serialize>(object: &T) -> serde_json::Value {
    serde_json::to_value(object).expect("Kubernetes objects serialize")
}

fn with_type(mut value: serde_json::Value, api_version: &str, kind: &str) -> serde_json::Value {
    // k8s-openapi writes apiVersion and kind itself; a plain value gets them here.
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
    }
    value
}

fn object<T: serde::Serialize + k8s_openapi::Resource>(object: &T) -> (String, serde_json::Value) {
    (
        T::KIND.to_string(),
        with_type(to_json(object), T::API_VERSION, T::KIND),
    )
}

/// The backstop policy and binding, renamed for a static manifest.
fn backstop(policy: &Policy) -> Result<[(String, serde_json::Value); 2], StaticError> {
    let mut export = vap::export(policy)?;
    export.policy.metadata.name = Some(BACKSTOP.into());
    export.binding.metadata.name = Some(BACKSTOP.into());
    export.binding.spec.policy_name = BACKSTOP.into();
    Ok([object(&export.policy), object(&export.binding)])
}

fn set<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| lit(s)).collect();
    format!("[{}]", items.join(", "))
}

/// The policy and binding that refuse to anyone but the operators the
/// UPDATE and DELETE of finalizer-guard's own API objects.
fn protect(options: &Options) -> [(String, serde_json::Value); 2] {
    let spec = ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(protected_objects(options)),
        match_conditions: Some(vec![MatchCondition {
            // resourceNames cannot say the namespace: a ConfigMap of that
            // name elsewhere is not the policy's.
            name: "finalizer-guard-object".into(),
            expression: format!(
                "request.resource.resource != 'configmaps' || request.namespace == {}",
                lit(&options.configmap_namespace)
            ),
        }]),
        variables: None,
        validations: Some(vec![operators_only(options)]),
        audit_annotations: None,
        param_kind: None,
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(PROTECT),
        spec: Some(spec),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(PROTECT),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: PROTECT.into(),
            validation_actions: vec!["Deny".into(), "Audit".into()],
            match_resources: None,
            param_ref: None,
        },
    };
    [object(&policy), object(&binding)]
}

/// The UPDATE and DELETE of finalizer-guard's webhook configuration,
/// backstop policy and binding, and policy ConfigMap, by name.
fn protected_objects(options: &Options) -> MatchResources {
    let rule = |group: &str, version: &str, resources: &[&str], names: Vec<String>| {
        NamedRuleWithOperations {
            api_groups: Some(vec![group.into()]),
            api_versions: Some(vec![version.into()]),
            operations: Some(vec!["UPDATE".into(), "DELETE".into()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            resource_names: Some(names),
            scope: Some("*".into()),
        }
    };
    MatchResources {
        match_policy: Some("Equivalent".into()),
        namespace_selector: Some(LabelSelector::default()),
        object_selector: Some(LabelSelector::default()),
        resource_rules: Some(vec![
            rule(
                "admissionregistration.k8s.io",
                "*",
                &["validatingwebhookconfigurations"],
                vec![options.webhook_configuration.clone()],
            ),
            rule(
                "admissionregistration.k8s.io",
                "*",
                &[
                    "validatingadmissionpolicies",
                    "validatingadmissionpolicybindings",
                ],
                vec![options.backstop.clone()],
            ),
            rule(
                "",
                "v1",
                &["configmaps"],
                vec![options.configmap_name.clone()],
            ),
        ]),
        exclude_resource_rules: None,
    }
}

/// Allowed to the operators (`--operator`, `--operator-group`) alone, and
/// the refusal naming them.
fn operators_only(options: &Options) -> Validation {
    let operators = format!(
        "request.userInfo.username in {} || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in {}))",
        set(&options.operator_users),
        set(&options.operator_groups),
    );
    let mut who = Vec::new();
    if !options.operator_users.is_empty() {
        who.push(format!("users {}", options.operator_users.join(", ")));
    }
    if !options.operator_groups.is_empty() {
        who.push(format!("groups {}", options.operator_groups.join(", ")));
    }
    let who = who.join(" and ");
    Validation {
        expression: operators,
        message: Some(format!(
            "finalizer-guard's webhook configuration, backstop policy and policy ConfigMap are guarded by {PROTECT}, \
             loaded by kube-apiserver from its static manifests: only {who} may change or delete them"
        )),
        message_expression: None,
        reason: Some("Forbidden".into()),
    }
}

/// The chart's webhook registration, called at the URL given, with the
/// policy's failure policy, override annotation and built-in controllers.
fn webhook(policy: &Policy, options: &Options, hook: &Webhook) -> (String, serde_json::Value) {
    use serde::Deserialize;
    let mut configuration = serde_yaml_ng::Deserializer::from_str(RENDERED_WEBHOOK)
        .filter_map(|d| ValidatingWebhookConfiguration::deserialize(d).ok())
        .next()
        .expect("manifests/base/webhook.yaml holds the ValidatingWebhookConfiguration");
    configuration.metadata = meta(WEBHOOK);
    let annotation = lit(&policy.override_settings.annotation);
    for w in configuration.webhooks.iter_mut().flatten() {
        w.name = options.webhook_name.clone();
        w.client_config = WebhookClientConfig {
            ca_bundle: Some(ByteString(hook.ca_bundle.clone())),
            service: None,
            url: Some(hook.url.clone()),
        };
        w.failure_policy = Some(
            match policy.mode {
                Mode::Enforce => "Fail",
                Mode::Warn => "Ignore",
            }
            .into(),
        );
        let conditions = w.match_conditions.get_or_insert_with(Vec::new);
        if !policy.builtin_controllers {
            conditions.retain(|c| c.name != SKIP_BUILTIN_CONDITION);
        }
        for c in conditions.iter_mut() {
            c.expression = c.expression.replace(
                &format!("'{DEFAULT_ANNOTATION}',"),
                &format!("{annotation},"),
            );
        }
    }
    object(&configuration)
}

fn admission_config(options: &Options) -> (String, serde_json::Value) {
    let dir = options.install_dir.trim_end_matches('/');
    let mut plugins = vec![serde_json::json!({
        "name": "ValidatingAdmissionPolicy",
        "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyConfiguration",
            "staticManifestsDir": format!("{dir}/{POLICIES}"),
        },
    })];
    if options.webhook.is_some() {
        plugins.push(serde_json::json!({
            "name": "ValidatingAdmissionWebhook",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "WebhookAdmissionConfiguration",
                "staticManifestsDir": format!("{dir}/{WEBHOOKS}"),
            },
        }));
    }
    (
        "AdmissionConfiguration".into(),
        serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": plugins,
        }),
    )
}

/// The command that writes these files again, for the headers.
fn command(options: &Options) -> String {
    let mut words: Vec<String> = vec![
        "finalizer-guard".into(),
        "policy".into(),
        "export".into(),
        "--static".into(),
        "DIR".into(),
    ];
    let defaults = Options::new(Vec::new(), "");
    let mut flag = |name: &str, value: &str| {
        words.push(name.into());
        words.push(value.into());
    };
    for u in &options.operator_users {
        flag("--operator", u);
    }
    for g in &options.operator_groups {
        flag("--operator-group", g);
    }
    flag("--install-dir", &options.install_dir);
    let named = [
        (
            "--webhook-configuration",
            &options.webhook_configuration,
            &defaults.webhook_configuration,
        ),
        (
            "--webhook-name",
            &options.webhook_name,
            &defaults.webhook_name,
        ),
        ("--backstop-name", &options.backstop, &defaults.backstop),
        (
            "--configmap-namespace",
            &options.configmap_namespace,
            &defaults.configmap_namespace,
        ),
        (
            "--configmap-name",
            &options.configmap_name,
            &defaults.configmap_name,
        ),
    ];
    for (name, value, default) in named {
        if value != default {
            flag(name, value);
        }
    }
    if let Some(w) = &options.webhook {
        flag("--webhook-url", &w.url);
        flag("--webhook-ca-bundle", "CA.crt");
    }
    words.push("POLICY".into());
    crate::output::shell_command(words)
}

fn comment(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            let _ = writeln!(out, "# {}", crate::output::escape(line));
        }
    }
    out
}

/// The objects as one YAML stream, `---` between them only: kube-apiserver's
/// loader takes a document of nothing but comments (the header, were it
/// followed by `---`) for an object without a kind, and refuses the file.
fn yaml(objects: &[(String, serde_json::Value)]) -> String {
    let mut out = String::new();
    for (i, (_, value)) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(value).expect("JSON values serialize as YAML"));
    }
    out
}

fn file(path: &'static str, header: String, objects: Vec<(String, serde_json::Value)>) -> File {
    let text = format!("{}{}", comment(&header), yaml(&objects));
    File {
        path,
        objects,
        text,
    }
}

/// Every file of the export of `policy` with `options`, in the order written.
pub fn render(policy: &Policy, options: &Options) -> Result<Vec<File>, StaticError> {
    check(options)?;
    let backstop = backstop(policy)?;
    let common = common_header(options);
    let mut files = vec![
        backstop_file(policy, backstop, &common),
        protect_file(options, &common),
    ];
    if let Some(hook) = &options.webhook {
        files.push(webhook_file(policy, options, hook, &common));
    }
    files.push(admission_config_file(options, &common));
    Ok(files)
}

/// What every file's header says first: how kube-apiserver loads them, and
/// how they were made.
fn common_header(options: &Options) -> String {
    let regenerate = command(options);
    let dir = options.install_dir.trim_end_matches('/');
    format!(
        "finalizer-guard, tamper-proof mode: loaded by kube-apiserver 1.37 or later from disk\n\
         (manifest-based admission control; the ManifestBasedAdmissionControlConfig feature,\n\
         beta and on by default from 1.37, alpha and off in 1.36) through {dir}/{ADMISSION_CONFIG}.\n\
         Objects loaded from files cannot be read, changed or deleted through the API; their\n\
         names end in {SUFFIX}, which the API refuses. kube-apiserver re-reads a changed\n\
         file within a minute; a set that does not load is logged and the last good one stays.\n\
         Copy the whole folder to {dir} on every control-plane host.\n\
         Generated by `{regenerate}`;\n\
         check it with `policy validate --static DIR` and the same flags. Do not edit.\n"
    )
}

/// The backstop: the policy as `policy export --vap` writes it, renamed.
fn backstop_file(
    policy: &Policy,
    backstop: [(String, serde_json::Value); 2],
    common: &str,
) -> File {
    let mut not_expressed = String::new();
    for line in vap::NOT_EXPRESSED {
        let _ = writeln!(not_expressed, "  - {line}");
    }
    file(
        BACKSTOP_FILE,
        format!(
            "{common}\n\
             The backstop: the policy as a ValidatingAdmissionPolicy ({BACKSTOP}), decided by\n\
             kube-apiserver itself on every UPDATE that removes a finalizer, as `policy export --vap`\n\
             writes it, renamed. It holds with the webhook, its registration and its pods gone.\n\
             Its audit annotations are prefixed {BACKSTOP}/ (decision, removed-finalizers, ...).\n\
             Mode: {} ({} rules). Not decided here, only by the webhook:\n{not_expressed}",
            policy.mode.as_str(),
            policy.rules.len(),
        ),
        backstop.to_vec(),
    )
}

/// The guard's guard: finalizer-guard's own objects, the operators' alone.
fn protect_file(options: &Options, common: &str) -> File {
    let who = options
        .operator_users
        .iter()
        .map(|u| format!("user {u}"))
        .chain(options.operator_groups.iter().map(|g| format!("group {g}")))
        .collect::<Vec<_>>()
        .join(", ");
    file(
        PROTECT_FILE,
        format!(
            "{common}\n\
             The guard's guard ({PROTECT}): refuses the UPDATE and DELETE of finalizer-guard's own\n\
             API objects to everyone but {who}:\n\
             \x20 - the ValidatingWebhookConfiguration {} (its webhook {}),\n\
             \x20 - the ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding {},\n\
             \x20 - the ConfigMap {}/{} (the policy the webhook serves).\n\
             Creating them is not refused (a first install); `helm upgrade` of the release must run as\n\
             an operator. Whoever may impersonate an operator is one. Not guarded here: the webhook's\n\
             Deployment, Service, Secrets and namespace; with them gone the backstop still refuses strips.\n",
            options.webhook_configuration,
            options.webhook_name,
            options.backstop,
            options.configmap_namespace,
            options.configmap_name,
        ),
        protect(options).to_vec(),
    )
}

/// The webhook's registration, called at `--webhook-url`.
fn webhook_file(policy: &Policy, options: &Options, hook: &Webhook, common: &str) -> File {
    file(
        WEBHOOK_FILE,
        format!(
            "{common}\n\
             The webhook's registration ({WEBHOOK}), as the chart writes it with its defaults,\n\
             called at {} (static manifests take a URL, not a Service): the policy's override\n\
             annotation, failurePolicy {} (mode {}). It cannot be deleted through the API; with it,\n\
             the chart's own registration (webhook {}) is a second call of the same server.\n",
            hook.url,
            match policy.mode {
                Mode::Enforce => "Fail",
                Mode::Warn => "Ignore",
            },
            policy.mode.as_str(),
            options.webhook_name,
        ),
        vec![webhook(policy, options, hook)],
    )
}

/// The AdmissionConfiguration kube-apiserver is given.
fn admission_config_file(options: &Options, common: &str) -> File {
    let dir = options.install_dir.trim_end_matches('/');
    file(
        ADMISSION_CONFIG,
        format!(
            "{common}\n\
             The AdmissionConfiguration: give it to kube-apiserver with\n\
             \x20 --admission-control-config-file={dir}/{ADMISSION_CONFIG}\n\
             (kubeadm: the kube-apiserver static pod's command, plus a hostPath volume and mount of\n\
             {dir}; k3s: --kube-apiserver-arg=admission-control-config-file=...; RKE2:\n\
             kube-apiserver-arg in /etc/rancher/rke2/config.yaml). A cluster that already has an\n\
             AdmissionConfiguration (PodSecurity, EventRateLimit, ...) gets these plugins entries\n\
             added to its own instead: only one file is read. kube-apiserver does not start if a\n\
             folder named here is missing or its files do not load.\n"
        ),
        vec![admission_config(options)],
    )
}

#[cfg(test)]
mod tests {
    use super::super::folder::{StaticVerifyError, StaticWriteError, read_dir, verify, write};
    use super::*;

    fn options() -> Options {
        Options::new(vec!["alice".into()], "/etc/kubernetes/finalizer-guard")
    }

    fn enforce() -> Policy {
        Policy::from_yaml("mode: enforce\n").unwrap()
    }

    #[test]
    fn every_object_is_named_for_a_static_manifest_and_bindings_name_their_policy() {
        let mut o = options();
        o.webhook = Some(Webhook {
            url: "https://10.0.0.1:8443/validate".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
        });
        let files = render(&enforce(), &o).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path).collect();
        assert_eq!(
            paths,
            [BACKSTOP_FILE, PROTECT_FILE, WEBHOOK_FILE, ADMISSION_CONFIG]
        );
        for f in files.iter().filter(|f| f.path != ADMISSION_CONFIG) {
            for (kind, v) in &f.objects {
                let name = v["metadata"]["name"].as_str().unwrap();
                assert!(name.ends_with(SUFFIX), "{kind} {name}");
                if kind.ends_with("Binding") {
                    assert!(v["spec"]["policyName"].as_str().unwrap().ends_with(SUFFIX));
                    assert!(v["spec"].get("paramRef").is_none());
                }
                assert!(v["spec"].get("paramKind").is_none());
            }
        }
        let hook = &files[2].objects[0].1;
        assert_eq!(
            hook["webhooks"][0]["clientConfig"]["url"],
            "https://10.0.0.1:8443/validate"
        );
        assert!(hook["webhooks"][0]["clientConfig"].get("service").is_none());
        assert_eq!(hook["webhooks"][0]["failurePolicy"], "Fail");
        let config = &files[3].objects[0].1;
        assert_eq!(
            config["plugins"][0]["configuration"]["staticManifestsDir"],
            "/etc/kubernetes/finalizer-guard/policies"
        );
        assert_eq!(
            config["plugins"][1]["configuration"]["staticManifestsDir"],
            "/etc/kubernetes/finalizer-guard/webhooks"
        );
        for f in &files {
            assert!(f.text.starts_with("# finalizer-guard, tamper-proof mode"));
            // The header is the first object's: no document of comments alone.
            let first = f.text.lines().find(|l| !l.starts_with('#')).unwrap();
            assert_eq!(
                first,
                "apiVersion: ".to_string() + f.objects[0].1["apiVersion"].as_str().unwrap(),
                "{}",
                f.path
            );
        }
    }

    #[test]
    fn the_guard_names_the_operators_and_objects_as_cel_literals() {
        let mut o = options();
        o.operator_users = vec!["it's".into()];
        o.operator_groups = vec!["ops".into()];
        o.configmap_namespace = "fg".into();
        let files = render(&enforce(), &o).unwrap();
        let v = &files[1].objects[0].1;
        assert_eq!(
            v["spec"]["validations"][0]["expression"],
            r"request.userInfo.username in ['it\'s'] || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['ops']))"
        );
        assert_eq!(
            v["spec"]["matchConditions"][0]["expression"],
            "request.resource.resource != 'configmaps' || request.namespace == 'fg'"
        );
        let rules = v["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .unwrap();
        assert_eq!(rules[0]["resourceNames"][0], "finalizer-guard");
        assert_eq!(rules[1]["resourceNames"][0], "finalizer-guard");
        assert_eq!(rules[2]["resourceNames"][0], "finalizer-guard-policy");
        assert_eq!(
            rules[0]["operations"],
            serde_json::json!(["UPDATE", "DELETE"])
        );
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let mut o = options();
        o.operator_users.clear();
        assert_eq!(render(&enforce(), &o), Err(StaticError::NoOperator));
        let mut o = options();
        o.install_dir = "relative".into();
        assert!(matches!(
            render(&enforce(), &o),
            Err(StaticError::Invalid {
                flag: "--install-dir",
                ..
            })
        ));
        let mut o = options();
        o.webhook = Some(Webhook {
            url: "http://x/validate".into(),
            ca_bundle: Vec::new(),
        });
        assert!(matches!(
            render(&enforce(), &o),
            Err(StaticError::Invalid {
                flag: "--webhook-url",
                ..
            })
        ));
        let approval =
            Policy::from_yaml("override:\n  approval:\n    users: [a]\n    maxAge: 1h\n").unwrap();
        // Exported as `policy export --vap` exports it: taking no override.
        assert!(render(&approval, &options()).is_ok());
    }

    #[test]
    fn the_static_webhook_takes_the_policys_annotation_and_builtin_setting() {
        let p = Policy::from_yaml(
            "mode: warn\nbuiltinControllers: false\noverride:\n  annotation: example.com/break-glass\n",
        )
        .unwrap();
        let mut o = options();
        o.webhook = Some(Webhook {
            url: "https://fg.example:8443/validate".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
        });
        let files = render(&p, &o).unwrap();
        let hook = &files[2].objects[0].1["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Ignore");
        let conditions = hook["matchConditions"].as_array().unwrap();
        assert!(
            conditions
                .iter()
                .all(|c| c["name"] != SKIP_BUILTIN_CONDITION)
        );
        let text = conditions[0]["expression"].as_str().unwrap();
        assert!(text.contains("'example.com/break-glass',"), "{text}");
        assert!(!text.contains("'finalizer-guard.io/override'"));
    }

    #[test]
    fn verify_takes_the_export_and_names_the_first_difference() {
        let files = render(&enforce(), &options()).unwrap();
        let mut found: BTreeMap<String, Result<String, String>> = files
            .iter()
            .map(|f| (f.path.to_string(), Ok(f.text.clone())))
            .collect();
        assert_eq!(verify(&enforce(), &options(), &found), Ok(()));
        let warn = Policy::from_yaml("mode: warn\n").unwrap();
        assert!(matches!(
            verify(&warn, &options(), &found),
            Err(StaticVerifyError::Differs { ref file, ref object, .. })
                if file == BACKSTOP_FILE && object == "ValidatingAdmissionPolicy finalizer-guard.static.k8s.io"
        ));
        let mut bob = options();
        bob.operator_users = vec!["bob".into()];
        assert_eq!(
            verify(&enforce(), &bob, &found),
            Err(StaticVerifyError::Differs {
                file: PROTECT_FILE.into(),
                object: format!("ValidatingAdmissionPolicy {PROTECT}"),
                at: "spec.validations[0].expression".into(),
            })
        );
        found.insert("policies/extra.yaml".into(), Ok(String::new()));
        assert_eq!(
            verify(&enforce(), &options(), &found),
            Err(StaticVerifyError::Extra("policies/extra.yaml".into()))
        );
        found.remove(PROTECT_FILE);
        assert_eq!(
            verify(&enforce(), &options(), &found),
            Err(StaticVerifyError::Missing(PROTECT_FILE.into()))
        );
    }

    #[test]
    fn write_refuses_a_folder_with_other_files_and_replaces_a_previous_export() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("static");
        let mut o = options();
        o.webhook = Some(Webhook {
            url: "https://fg.example:8443/validate".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
        });
        let files = render(&enforce(), &o).unwrap();
        write(&dir, &files).unwrap();
        assert_eq!(verify(&enforce(), &o, &read_dir(&dir).unwrap()), Ok(()));
        // No temporary folder is left beside it.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        // Again, without the webhook: replaced file by file, the webhook's removed.
        let files = render(&enforce(), &options()).unwrap();
        write(&dir, &files).unwrap();
        assert_eq!(
            verify(&enforce(), &options(), &read_dir(&dir).unwrap()),
            Ok(())
        );
        assert_eq!(std::fs::read_dir(dir.join(WEBHOOKS)).unwrap().count(), 0);
        // A folder holding anything else is left alone.
        std::fs::write(dir.join("policies/mine.yaml"), "x").unwrap();
        let before = read_dir(&dir).unwrap();
        let e = write(&dir, &files).unwrap_err();
        assert!(e.to_string().contains("\"policies/mine.yaml\""), "{e}");
        assert_eq!(read_dir(&dir).unwrap(), before);
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            write(&file, &files),
            Err(StaticWriteError::Foreign { .. })
        ));
    }
}
