//! The Helm chart in `charts/finalizer-guard`, the one source of what
//! `manifests/` installs: `scripts/render-manifests.sh` renders it there, and
//! a test fails when what is committed is not what renders. What the
//! overlays add by hand (cert-manager's CA injection, the self-managed
//! Secret and caBundle) is compared with the chart's own way of doing it.
//! The rest are the chart's values, templates, notes and schema.
//!
//! Needs a helm binary: `FG_HELM`, or the one `e2e/helm/build.sh` caches.
//! The tests are `#[ignore]`d, so `cargo test` says they did not run;
//! `.ci/run` builds helm, sets `FG_HELM` and runs them with `--ignored`.

use super::*;

use finalizer_guard::policy::builtin::BUILTIN_CONTROLLERS;

/// The release name and namespace under which the chart's names are the
/// names of `manifests/`.
pub(crate) const RELEASE: &str = "finalizer-guard";

pub(crate) fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/finalizer-guard")
}

/// The Helm version `e2e/helm/go.mod` pins.
fn pinned_helm_version() -> String {
    let go_mod =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/helm/go.mod"))
            .unwrap();
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("require helm.sh/helm/v3 "))
        .or_else(|| {
            go_mod
                .lines()
                .find_map(|l| l.trim().strip_prefix("helm.sh/helm/v3 "))
        })
        .expect("e2e/helm/go.mod requires helm.sh/helm/v3")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `FG_HELM`, else the binary `e2e/helm/build.sh` caches. The tests that
/// need it are `#[ignore]`d: run with `--ignored`, they fail without it.
pub(crate) fn helm() -> PathBuf {
    if let Some(path) = std::env::var_os("FG_HELM") {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "FG_HELM={} is not a file", path.display());
        return path;
    }
    let cache = std::env::var_os("FG_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("finalizer-guard-e2e"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/finalizer-guard-e2e"))
        })
        .expect("no HOME to find the helm cache under: set FG_HELM");
    let cached = cache
        .join(format!("helm-{}", pinned_helm_version()))
        .join("helm");
    assert!(
        cached.is_file(),
        "no helm at {}: set FG_HELM, or build it with e2e/helm/build.sh (.ci/run does)",
        cached.display()
    );
    cached
}

/// What one helm run printed, and how it exited.
pub(crate) struct HelmRun {
    pub(crate) ok: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn run_helm(helm: &Path, args: &[&str]) -> HelmRun {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(helm)
        .args(args)
        // No user configuration or repositories leak in.
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    HelmRun {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `helm template finalizer-guard charts/finalizer-guard -n finalizer-guard ARGS`.
pub(crate) fn template(helm: &Path, args: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut full = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    full.extend_from_slice(args);
    let run = run_helm(helm, &full);
    assert!(run.ok, "helm {}: {}", full.join(" "), run.stderr);
    documents(&run.stdout).unwrap_or_else(|e| panic!("helm template printed no YAML: {e}"))
}

/// Labels only Helm's objects carry, which manifests/ leaves out.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn without_helm_labels(object: &Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for key in HELM_LABELS {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut object = object.clone();
    strip(&mut object);
    object
}

pub(crate) fn find<'a>(objects: &'a [Value], id: &str) -> Option<&'a Value> {
    objects.iter().find(|o| describe(o) == id)
}

pub(crate) fn check_all(objects: &[Value]) {
    for object in objects {
        if let Err(e) = check_object(object) {
            panic!("helm template: {}: {e}", describe(object));
        }
    }
}

/// Every file under `dir`, by its path below it.
fn files_below(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(here) = stack.pop() {
        for entry in std::fs::read_dir(&here).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// What `scripts/render-manifests.sh` writes is what `manifests/` holds:
/// the script, run into a folder of its own, and `diff -u` for each file
/// that differs. The files it does not write (base/namespace.yaml and the
/// kustomizations of manifests/ and its overlays) are kept by hand; any other file in the base
/// would be one nobody renders.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn manifests_are_what_the_chart_renders() {
    let helm = helm();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(root.join("scripts/render-manifests.sh"))
        .arg(out.path())
        .env("FG_HELM", &helm)
        .env("FG_BIN", env!("CARGO_BIN_EXE_finalizer-guard"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "scripts/render-manifests.sh: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rendered = files_below(out.path());
    let by_hand = [
        "kustomization.yaml",
        "vap/kustomization.yaml",
        "components/backstop/kustomization.yaml",
        "base/namespace.yaml",
        "overlays/cert-manager/kustomization.yaml",
        "overlays/self-managed/kustomization.yaml",
    ];
    let committed: BTreeSet<PathBuf> = files_below(&manifests())
        .into_iter()
        .filter(|p| !by_hand.iter().any(|h| p == Path::new(h)))
        // The self-managed overlay's certificate files, git-ignored.
        .filter(|p| !p.starts_with("overlays/self-managed"))
        .collect();
    assert!(
        rendered.contains(Path::new("base/deployment.yaml"))
            && rendered.contains(Path::new("overlays/cert-manager/certificates.yaml")),
        "{rendered:?}"
    );
    let mut problems = Vec::new();
    for file in rendered.union(&committed) {
        let (ours, theirs) = (manifests().join(file), out.path().join(file));
        if !ours.is_file() {
            problems.push(format!(
                "manifests/{}: rendered, not committed",
                file.display()
            ));
            continue;
        }
        if !theirs.is_file() {
            problems.push(format!(
                "manifests/{}: committed, not rendered",
                file.display()
            ));
            continue;
        }
        let diff = Command::new("diff")
            .arg("-u")
            .arg(&ours)
            .arg(&theirs)
            .output()
            .expect("diff runs");
        if !diff.status.success() {
            problems.push(String::from_utf8_lossy(&diff.stdout).into_owned());
        }
    }
    assert!(
        problems.is_empty(),
        "manifests/ is not what charts/finalizer-guard renders: run scripts/render-manifests.sh\n{}",
        problems.join("\n")
    );
}

/// The objects of a kustomize build are those of the chart for the same
/// settings, but for the Namespace (Helm installs into one) and what the
/// chart leaves out (`also`), Helm's labels set aside.
fn assert_same_objects(chart: &[Value], built: &[Value], also: &[&str], what: &str) {
    let ids = |objects: &[Value]| -> Vec<String> {
        let mut ids: Vec<String> = objects
            .iter()
            .filter(|o| text(o, "/kind") != "Namespace")
            .map(describe)
            .filter(|id| !also.contains(&id.as_str()))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(built), ids(chart), "{what} and the chart");
    for object in built {
        if let Some(rendered) = find(chart, &describe(object))
            && let Some(d) = first_difference(&without_helm_labels(rendered), object, "")
        {
            panic!("{}: {d} (left: the chart, right: {what})", describe(object));
        }
    }
}

/// What the overlays add by hand, the chart does its own way: the
/// cert-manager overlay's patch is the chart's `certificates.source:
/// cert-manager`, the self-managed overlay's caBundle is the chart's
/// `certificates.external.caBundle`, and its Secret is the one the chart
/// leaves to the user.
#[test]
#[ignore = "needs helm (FG_HELM) and kubectl (FG_KUBECTL): see .ci/run"]
fn each_overlay_installs_what_the_chart_installs_for_its_certificates() {
    let (helm, kubectl) = (helm(), kubectl());
    let off = ["--set", "policyCheck.enabled=false"];

    let mut args = off.to_vec();
    args.extend(["--set", "certificates.source=cert-manager"]);
    let chart = template(&helm, &args);
    check_all(&chart);
    let built = kustomize(&kubectl, &manifests().join("overlays/cert-manager"));
    assert_same_objects(&chart, &built, &[], "manifests/overlays/cert-manager");

    let copy = copy_manifests();
    let overlay = copy.path().join("manifests/overlays/self-managed");
    let bundle = write_certs(&overlay);
    let ca_bundle = format!(
        "certificates.external.caBundle={}",
        finalizer_guard::server::certs::ca_bundle(&bundle.ca_cert_pem)
    );
    let mut args = off.to_vec();
    args.extend(["--set", "certificates.source=external", "--set", &ca_bundle]);
    let chart = template(&helm, &args);
    check_all(&chart);
    assert!(
        chart.iter().all(|o| text(o, "/kind") != "Secret"),
        "external: the chart makes no Secret"
    );
    let built = kustomize(&kubectl, &overlay);
    assert_same_objects(
        &chart,
        &built,
        &[&format!("Secret {NAMESPACE}/{TLS_SECRET}")],
        "manifests/overlays/self-managed",
    );
}

/// The generated certificates: a CA, and a serving certificate it issued for
/// the Service's names, whose CA is the caBundle.
/// `policy.presets` reaches the ConfigMap the pods serve as the policy's
/// `presets:`, and the schema refuses what is no preset's shape.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn presets_reach_the_policy_and_the_schema_checks_their_shape() {
    let helm = helm();
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        "policy:\n  presets:\n    - flux\n    - name: argocd\n      namespace: gitops\n",
    )
    .unwrap();
    let rendered = template(&helm, &["-f", values.path().to_str().unwrap()]);
    let config_map = find(
        &rendered,
        &format!("ConfigMap {NAMESPACE}/finalizer-guard-policy"),
    )
    .unwrap();
    let policy = Policy::from_yaml(text(config_map, "/data/policy.yaml")).unwrap();
    let labels: Vec<&str> = policy.rules.iter().map(|r| r.label.as_str()).collect();
    assert!(
        labels.contains(&"preset:flux/helm-controller"),
        "{labels:?}"
    );
    let argocd = policy
        .rules
        .iter()
        .find(|r| r.label == "preset:argocd/application-controller")
        .unwrap();
    assert_eq!(
        argocd.service_accounts,
        ["system:serviceaccount:gitops:argocd-application-controller"]
    );

    for bad in [
        "policy.presets[0]=Flux",
        "policy.presets[0].name=flux,policy.presets[0].serviceAccount=x",
    ] {
        let chart = chart();
        let run = run_helm(
            &helm,
            &["template", RELEASE, chart.to_str().unwrap(), "--set", bad],
        );
        assert!(!run.ok, "--set {bad} was accepted");
        assert!(run.stderr.contains("/policy/presets/0"), "{}", run.stderr);
    }
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn generated_certificates_name_the_service_and_fill_the_ca_bundle() {
    let helm = helm();
    let rendered = template(
        &helm,
        &[
            "--set",
            "certificates.source=generated",
            "--set",
            "certificates.generated.extraIPAddresses={127.0.0.1}",
        ],
    );
    let secret = |name: &str| {
        find(&rendered, &format!("Secret {NAMESPACE}/{name}"))
            .unwrap_or_else(|| panic!("no Secret {name}"))
            .clone()
    };
    let decode = |value: &Value| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap();
        String::from_utf8(bytes).unwrap()
    };
    let pem_der = |pem: &str| {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    };
    let tls = secret(TLS_SECRET);
    let ca = secret("finalizer-guard-ca");
    assert_eq!(tls["type"], "kubernetes.io/tls");
    assert_eq!(tls["data"]["ca.crt"], ca["data"]["tls.crt"]);
    let ca_pem = decode(&ca["data"]["tls.crt"]);
    let cert_pem = decode(&tls["data"]["tls.crt"]);
    assert!(decode(&tls["data"]["tls.key"]).contains("PRIVATE KEY"));

    let ca_der = pem_der(&ca_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert!(ca_cert.is_ca());
    let cert_der = pem_der(&cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der).unwrap();
    assert_eq!(cert.issuer(), ca_cert.subject(), "issued by the CA");
    let san = cert
        .subject_alternative_name()
        .unwrap()
        .expect("a subjectAltName");
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &san.value.general_names {
        match name {
            x509_parser::extensions::GeneralName::DNSName(n) => dns.push(n.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(ip) => ips.push(ip.to_vec()),
            _ => {}
        }
    }
    assert_eq!(
        dns,
        finalizer_guard::server::certs::service_names(SERVICE, NAMESPACE)
    );
    assert_eq!(ips, [vec![127u8, 0, 0, 1]]);

    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    assert_eq!(
        text(webhook, "/webhooks/0/clientConfig/caBundle"),
        finalizer_guard::server::certs::ca_bundle(&ca_pem),
        "the caBundle is the CA that issued the serving certificate"
    );
    assert_eq!(
        text(
            &tls,
            "/metadata/annotations/finalizer-guard.io~1certificate-names"
        ),
        r#"{"dns":["finalizer-guard","finalizer-guard.finalizer-guard","finalizer-guard.finalizer-guard.svc","finalizer-guard.finalizer-guard.svc.cluster.local"],"ip":["127.0.0.1"]}"#
    );
}

/// The default certificates, `self`: what `helm template` renders is the
/// same bytes every time (no `lookup`, no generated key), the webhook
/// configuration carries no caBundle (the pods write it), the pods are told
/// their Secret and configuration in arguments `serve` takes, and the RBAC
/// is get and update on that Secret and get and patch on that
/// configuration, by name, and nothing else.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn self_managed_certificates_render_the_same_bytes_and_the_least_rbac() {
    let helm = helm();
    let chart = chart();
    let args = [
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--set",
        "events.enabled=false",
        "--set",
        "certificates.self.extraIPAddresses={127.0.0.1}",
    ];
    let (first, second) = (run_helm(&helm, &args), run_helm(&helm, &args));
    assert!(first.ok, "{}", first.stderr);
    assert_eq!(first.stdout, second.stdout, "helm template twice");
    let rendered = documents(&first.stdout).unwrap();
    check_all(&rendered);
    assert!(!first.stdout.contains("PRIVATE KEY"));

    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    assert!(
        webhook
            .pointer("/webhooks/0/clientConfig/caBundle")
            .is_none()
    );
    let secret = find(
        &rendered,
        &format!("Secret {NAMESPACE}/finalizer-guard-certificates"),
    )
    .expect("the certificates Secret, empty");
    assert!(secret.get("data").is_none() && secret.get("stringData").is_none());
    assert!(find(&rendered, &format!("Secret {NAMESPACE}/{TLS_SECRET}")).is_none());

    let role: Role = serde_json::from_value(
        find(
            &rendered,
            &format!("Role {NAMESPACE}/finalizer-guard-certificates"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(role.rules.unwrap()).unwrap(),
        json!([{"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["finalizer-guard-certificates"], "verbs": ["get", "update"]}])
    );
    let cluster_role: ClusterRole = serde_json::from_value(
        find(&rendered, "ClusterRole finalizer-guard-certificates")
            .unwrap()
            .clone(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(cluster_role.rules.unwrap()).unwrap(),
        json!([{"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": ["finalizer-guard"], "verbs": ["get", "patch"]}])
    );
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        let id = match kind {
            "RoleBinding" => format!("{kind} {NAMESPACE}/finalizer-guard-certificates"),
            _ => format!("{kind} finalizer-guard-certificates"),
        };
        let binding = find(&rendered, &id).unwrap();
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "finalizer-guard", "namespace": NAMESPACE}])
        );
    }

    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let pod = deployment.spec.template.spec.unwrap();
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "the pods read their Secret through the API, Events or not"
    );
    assert!(
        pod.volumes.iter().flatten().all(|v| v.secret.is_none()),
        "no certificate Secret is mounted"
    );
    let args = pod.containers[0].args.clone().unwrap();
    let parsed = Cli::try_parse_from(
        std::iter::once("finalizer-guard").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("serve refuses the container's arguments: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("not serve");
    };
    let config = serve.into_config();
    assert!(config.tls.is_none());
    let settings = config.self_managed.expect("self-managed certificates");
    assert_eq!(
        (settings.namespace.as_str(), settings.secret.as_str()),
        (NAMESPACE, "finalizer-guard-certificates")
    );
    assert_eq!(settings.webhook_configuration, "finalizer-guard");
    assert_eq!(settings.webhook_names, [text(webhook, "/webhooks/0/name")]);
    let mut names = finalizer_guard::server::certs::service_names(SERVICE, NAMESPACE);
    names.sort();
    let mut dns = settings.names.dns.clone();
    dns.sort();
    assert_eq!(dns, names);
    assert_eq!(
        settings.names.ips,
        ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    settings.timing.check().unwrap();
}

/// The values say what they do, and the objects stay well-formed.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn values_change_what_they_name() {
    let helm = helm();
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        r#"
policy:
  mode: enforce
  builtinControllers: false
  builtinIdentities:
    - controller: service
      users: ["eks:cloud-controller-manager"]
  rules:
    - name: cleanup
      finalizers: ["example.com/cleanup"]
      serviceAccounts: ["ops:cleanup-controller"]
  override:
    annotation: example.com/break-glass
    reasons: [node-lost]
image:
  repository: registry.example.com/finalizer-guard
  tag: "9.9.9"
imagePullSecrets: [{name: pull}]
replicas: 1
resources:
  requests: {cpu: 10m, memory: 16Mi}
  limits: {memory: 64Mi}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]
priorityClassName: ""
podAnnotations: {prometheus.io/scrape: "true"}
logFormat: text
events:
  enabled: false
watch:
  enabled: false
policyCheck:
  enabled: false
# Certificates from a mounted Secret: the default (self) has a ClusterRole
# on its own webhook configuration.
certificates:
  source: generated
oncallRole:
  enabled: false
"#,
    )
    .unwrap();
    let rendered = template(&helm, &["-f", values.path().to_str().unwrap()]);
    check_all(&rendered);
    let kinds: BTreeSet<&str> = rendered.iter().map(|o| text(o, "/kind")).collect();
    for absent in [
        "ClusterRole",
        "ClusterRoleBinding",
        "PodDisruptionBudget",
        "ResourceQuota",
        "Job",
    ] {
        assert!(!kinds.contains(absent), "{absent} rendered: {kinds:?}");
    }

    let config_map = find(
        &rendered,
        &format!("ConfigMap {NAMESPACE}/finalizer-guard-policy"),
    )
    .unwrap();
    let policy = Policy::from_yaml(text(config_map, "/data/policy.yaml")).unwrap();
    assert_eq!(policy.mode, Mode::Enforce);
    assert!(!policy.builtin_controllers);
    assert_eq!(policy.builtin_identities.len(), 1);
    assert_eq!(policy.rules.len(), 1);
    assert_eq!(policy.rules[0].label, "cleanup");
    assert_eq!(
        policy.override_settings.annotation,
        "example.com/break-glass"
    );
    assert_eq!(policy.override_settings.reasons, ["node-lost"]);

    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    let conditions = webhook["webhooks"][0]["matchConditions"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = conditions.iter().map(|c| text(c, "/name")).collect();
    assert_eq!(
        names,
        ["removes-finalizer-or-writes-approval"],
        "builtinControllers false: the webhook judges Kubernetes' controllers too"
    );
    assert!(
        text(&conditions[0], "/expression").contains("'example.com/break-glass'"),
        "the matchConditions send writes of the policy's override annotation"
    );

    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(1));
    let template = spec.template;
    assert_eq!(
        template.metadata.unwrap().annotations.unwrap()["prometheus.io/scrape"],
        "true"
    );
    let pod = template.spec.unwrap();
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "no Events: no token"
    );
    assert_eq!(pod.priority_class_name, None);
    assert_eq!(pod.node_selector.unwrap()["kubernetes.io/os"], "linux");
    assert_eq!(
        pod.tolerations.unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert!(pod.affinity.unwrap().node_affinity.is_some());
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "pull");
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example.com/finalizer-guard:9.9.9")
    );
    let resources = container.resources.clone().unwrap();
    assert_eq!(resources.requests.unwrap()["cpu"].0, "10m");
    assert_eq!(resources.limits.unwrap()["memory"].0, "64Mi");

    // The environment is what `serve` reads.
    let env: BTreeMap<String, String> = container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap()))
        .collect();
    assert_eq!(
        env,
        BTreeMap::from([
            ("FINALIZER_GUARD_EVENTS".to_string(), "false".to_string()),
            ("FINALIZER_GUARD_LOG_FORMAT".to_string(), "text".to_string()),
        ])
    );
    // Each variable, given as the flag that reads it, is what `serve` takes.
    let command = Cli::command();
    let serve_command = command.find_subcommand("serve").unwrap();
    let mut args = vec!["finalizer-guard".to_string()];
    args.extend(container.args.clone().unwrap());
    for (name, value) in &env {
        let flag = serve_command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
            .and_then(|a| a.get_long())
            .unwrap_or_else(|| panic!("serve reads no {name}"));
        args.push(format!("--{flag}={value}"));
    }
    let parsed = Cli::try_parse_from(&args)
        .unwrap_or_else(|e| panic!("serve refuses the chart's settings {args:?}: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("not serve");
    };
    assert!(!serve.events);
    assert!(matches!(serve.log_format, cli::LogFormat::Text));
}

/// `clusterName` reaches the webhook and `watch` alike, as the environment
/// variable of the one `--cluster-name` both take: the audit records and
/// every Event of one cluster carry the same name. Unset, neither has it.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn cluster_name_reaches_the_webhook_and_watch() {
    let helm = helm();
    let named = |args: &[&str], deployment: &str| -> Option<String> {
        let rendered = template(&helm, args);
        let object = find(&rendered, &format!("Deployment {NAMESPACE}/{deployment}"))
            .unwrap_or_else(|| panic!("no Deployment {deployment}"));
        let parsed: Deployment = serde_json::from_value(object.clone()).unwrap();
        let container = parsed.spec.template.spec.unwrap().containers[0].clone();
        let env: Vec<(String, String)> = container
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        // The container's arguments, and each variable as the flag that reads it.
        let mut argv = vec!["finalizer-guard".to_string()];
        argv.extend(container.args.unwrap());
        let command = Cli::command();
        let subcommand = command.find_subcommand(&argv[1]).unwrap();
        for (name, value) in &env {
            if let Some(flag) = subcommand
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
                .and_then(|a| a.get_long())
            {
                argv.push(format!("--{flag}={value}"));
            }
        }
        let parsed = Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{deployment} refuses the chart's settings {argv:?}: {e}"));
        let from_env = env
            .iter()
            .find(|(name, _)| name == "FINALIZER_GUARD_CLUSTER_NAME")
            .map(|(_, value)| value.clone());
        let from_flag = match parsed.command {
            cli::Command::Serve(serve) => serve.into_config().cluster_name,
            cli::Command::Watch(watch) => watch.into_config().cluster_name,
            _ => panic!("{deployment}: neither serve nor watch"),
        };
        assert_eq!(from_env, from_flag, "{deployment}");
        from_flag
    };
    for deployment in ["finalizer-guard", "finalizer-guard-watch"] {
        assert_eq!(
            named(&["--set", "clusterName=prod-eu-1"], deployment).as_deref(),
            Some("prod-eu-1"),
            "{deployment}"
        );
        assert_eq!(named(&[], deployment), None, "{deployment}");
    }
}

/// The webhook's failurePolicy follows the policy's mode unless
/// `webhook.failurePolicy` says otherwise: fail open while it warns, closed
/// once it enforces.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn failure_policy_follows_the_mode_unless_set() {
    let helm = helm();
    let webhook = |args: &[&str]| -> (String, u64) {
        let rendered = template(&helm, args);
        let config = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard")
            .unwrap()
            .clone();
        check_all(&rendered);
        (
            text(&config, "/webhooks/0/failurePolicy").to_string(),
            config["webhooks"][0]["timeoutSeconds"].as_u64().unwrap(),
        )
    };
    for (args, failure_policy) in [
        (&[][..], "Ignore"),
        (&["--set", "policy.mode=enforce"][..], "Fail"),
        (&["--set", "policy.mode=null"][..], "Fail"),
        (&["--set", "webhook.failurePolicy=Fail"][..], "Fail"),
        (
            &["--set", "policy.mode=enforce,webhook.failurePolicy=Ignore"][..],
            "Ignore",
        ),
        (
            &["--set", "policy.mode=enforce,webhook.failurePolicy="][..],
            "Fail",
        ),
    ] {
        assert_eq!(webhook(args), (failure_policy.to_string(), 5), "{args:?}");
    }
    assert_eq!(
        webhook(&["--set", "webhook.timeoutSeconds=12"]),
        ("Ignore".to_string(), 12)
    );
}

/// `helm upgrade --reuse-values` from a release of a chart that had none of
/// the `webhook` and `extra*` values renders them as their defaults: Helm
/// then reuses the old chart's values, where they are absent.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn values_from_before_webhook_and_extras_still_render() {
    let helm = helm();
    let copy = copy_chart();
    let chart_copy = copy.path().join("finalizer-guard");
    let mut values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart_copy.join("values.yaml")).unwrap())
            .unwrap();
    for key in [
        "webhook",
        "extraArgs",
        "extraEnv",
        "extraVolumes",
        "extraVolumeMounts",
        "policyCheck",
        "oncallRole",
    ] {
        assert!(
            values.as_object_mut().unwrap().remove(key).is_some(),
            "{key}"
        );
    }
    assert!(
        values["certificates"]
            .as_object_mut()
            .unwrap()
            .remove("external")
            .is_some()
    );
    std::fs::write(
        chart_copy.join("values.yaml"),
        serde_yaml_ng::to_string(&values).unwrap(),
    )
    .unwrap();
    for (mode, failure_policy) in [("warn", "Ignore"), ("enforce", "Fail")] {
        let set = format!("policy.mode={mode}");
        let run = run_helm(
            &helm,
            &[
                "template",
                RELEASE,
                chart_copy.to_str().unwrap(),
                "--namespace",
                NAMESPACE,
                "--set",
                &set,
            ],
        );
        assert!(run.ok, "{}", run.stderr);
        let rendered = documents(&run.stdout).unwrap();
        check_all(&rendered);
        let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
        assert_eq!(text(webhook, "/webhooks/0/failurePolicy"), failure_policy);
        assert_eq!(webhook["webhooks"][0]["timeoutSeconds"], json!(5));
        let ours = template(&helm, &["--set", &set]);
        let deployment = |objects: &[Value]| {
            find(objects, &format!("Deployment {NAMESPACE}/finalizer-guard"))
                .unwrap()
                .clone()
        };
        assert_eq!(
            first_difference(&deployment(&ours), &deployment(&rendered), ""),
            None,
            "the Deployment is the one the current values render"
        );
    }
}

/// `extraArgs`, `extraEnv`, `extraVolumes` and `extraVolumeMounts` reach the
/// webhook container, and what they add is what `serve` takes: recordings on
/// a writable volume, client certificates from the mounted Secret's CA.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn extra_values_reach_the_webhook_container() {
    let helm = helm();
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        r#"
# The mounted Secret's CA (generated certificates; the default, self, mounts none).
certificates:
  source: generated
extraArgs:
  - --client-ca=/etc/finalizer-guard/tls/ca.crt
  - --record-dir=/var/lib/finalizer-guard/recordings
  - --record-max-files=500
extraEnv:
  - name: RUST_LOG
    value: info,finalizer_guard=debug
  - name: FINALIZER_GUARD_RECORD_MAX_BYTES
    value: "104857600"
extraVolumes:
  - name: recordings
    emptyDir: {sizeLimit: 300Mi}
extraVolumeMounts:
  - name: recordings
    mountPath: /var/lib/finalizer-guard/recordings
"#,
    )
    .unwrap();
    let rendered = template(&helm, &["-f", values.path().to_str().unwrap()]);
    check_all(&rendered);
    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let pod = deployment.spec.template.spec.unwrap();
    let container = &pod.containers[0];

    let volumes: Vec<String> = pod
        .volumes
        .unwrap()
        .into_iter()
        .map(|v| {
            if v.name == "recordings" {
                assert!(v.empty_dir.is_some(), "the volume as given");
            }
            v.name
        })
        .collect();
    assert_eq!(volumes, ["policy", "tls", "recordings"]);
    let mounts: Vec<(String, String)> = container
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| (m.name, m.mount_path))
        .collect();
    assert_eq!(
        mounts.last().unwrap(),
        &(
            "recordings".to_string(),
            "/var/lib/finalizer-guard/recordings".to_string()
        )
    );
    for (name, _) in &mounts {
        assert!(volumes.contains(name), "mount {name} has a volume");
    }

    let env: BTreeMap<String, String> = container
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap()))
        .collect();
    assert_eq!(env["RUST_LOG"], "info,finalizer_guard=debug");
    assert_eq!(
        env["FINALIZER_GUARD_LOG_FORMAT"], "json",
        "the chart's own stay"
    );

    // What the container runs, flags and the variables `serve` reads (each
    // given as the flag it stands for), is what `serve` takes.
    let command = Cli::command();
    let serve_command = command.find_subcommand("serve").unwrap();
    let mut args = vec!["finalizer-guard".to_string()];
    args.extend(container.args.clone().unwrap());
    for (name, value) in env
        .iter()
        .filter(|(n, _)| n.starts_with("FINALIZER_GUARD_"))
    {
        let flag = serve_command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
            .and_then(|a| a.get_long())
            .unwrap_or_else(|| panic!("serve reads no {name}"));
        args.push(format!("--{flag}={value}"));
    }
    let parsed = Cli::try_parse_from(&args)
        .unwrap_or_else(|e| panic!("serve refuses the chart's settings {args:?}: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("not serve: {args:?}");
    };
    let config = serve.into_config();
    assert_eq!(
        config.client_ca.as_deref(),
        Some(Path::new("/etc/finalizer-guard/tls/ca.crt"))
    );
    assert!(
        pod_mounts_path(&mounts, "/etc/finalizer-guard/tls/ca.crt"),
        "--client-ca names a mounted file"
    );
    let record = config.record.expect("--record-dir reaches serve");
    assert_eq!(record.dir, Path::new("/var/lib/finalizer-guard/recordings"));
    assert_eq!(record.max_files, 500);
    assert_eq!(record.max_bytes, 104_857_600);
}

/// Whether one of the container's mounts holds `path`.
fn pod_mounts_path(mounts: &[(String, String)], path: &str) -> bool {
    mounts.iter().any(|(_, at)| Path::new(path).starts_with(at))
}

/// A copy of the chart, in `DIR/finalizer-guard`, to render with changes.
fn copy_chart() -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let chart_copy = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(chart_copy.join("templates")).unwrap();
    for entry in ["Chart.yaml", "values.yaml", "values.schema.json"] {
        std::fs::copy(chart().join(entry), chart_copy.join(entry)).unwrap();
    }
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(
            &path,
            chart_copy.join("templates").join(path.file_name().unwrap()),
        )
        .unwrap();
    }
    copy
}

/// NOTES.txt as `helm install` prints it. `helm template` leaves NOTES.txt
/// out, so a copy of the chart gets one more template that carries it.
fn notes(helm: &Path, args: &[&str]) -> String {
    let copy = copy_chart();
    let chart_copy = copy.path().join("finalizer-guard");
    std::fs::write(
        chart_copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  \
         NOTES.txt: {{ include (printf \"%s/templates/NOTES.txt\" .Chart.Name) . | quote }}\n",
    )
    .unwrap();
    let mut full = vec![
        "template",
        RELEASE,
        chart_copy.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/zz-notes.yaml",
    ];
    full.extend_from_slice(args);
    let run = run_helm(helm, &full);
    assert!(run.ok, "helm {}: {}", full.join(" "), run.stderr);
    let docs = documents(&run.stdout).unwrap();
    text(&docs[0], "/data/NOTES.txt").to_string()
}

/// The install notes say where the image comes from, how the webhook fails,
/// and a path from warn to enforce whose commands work: the log command
/// selects the webhook's pods and prints lines `policy suggest` can read.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn install_notes_say_where_the_image_comes_from_and_how_to_enforce() {
    let helm = helm();
    let warn = notes(&helm, &[]);
    for said in [
        "The pods run the image finalizer-guard:0.1.0",
        "a name no registry\nserves",
        "Dockerfile",
        "docker build -t REGISTRY/finalizer-guard:0.1.0 .    # or: podman build",
        "--set image.repository=REGISTRY/finalizer-guard",
        "fails open (failurePolicy Ignore)",
        "WARN mode",
        "finalizer-guard policy suggest --merge policy.yaml finalizer-guard-audit.jsonl",
        "On a managed control plane (EKS, GKE, AKS), where kube-apiserver can be",
        "finalizer-guard doctor --cluster --policy merged.yaml",
        "kubectl -n finalizer-guard get configmap finalizer-guard-policy",
        "--set policy.mode=enforce",
    ] {
        assert!(warn.contains(said), "NOTES.txt lacks {said:?}:\n{warn}");
    }
    assert!(
        !warn.contains("fails closed (failurePolicy Fail)"),
        "{warn}"
    );
    // A release's chart names the published image: the notes say how to
    // verify and pin it, and build nothing.
    let released = notes(
        &helm,
        &[
            "--set",
            "image.repository=ghcr.io/finalizer-guard/finalizer-guard",
        ],
    );
    for said in [
        "The pods run the image ghcr.io/finalizer-guard/finalizer-guard:0.1.0.",
        "cosign verify ghcr.io/finalizer-guard/finalizer-guard:0.1.0",
        "--set image.digest=sha256:",
    ] {
        assert!(
            released.contains(said),
            "NOTES.txt lacks {said:?}:\n{released}"
        );
    }
    assert!(!released.contains("docker build"), "{released}");

    // The logs: every pod's, whole, unprefixed (a `[pod/...]` prefix makes
    // the lines unreadable to `policy suggest`).
    let logs = warn
        .lines()
        .skip_while(|l| !l.contains(" logs -l "))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!logs.is_empty(), "no kubectl logs command:\n{warn}");
    assert!(!logs.contains("--prefix"), "{logs}");
    assert!(!logs.contains("| grep"), "{logs}");
    assert!(
        logs.contains("--tail=-1"),
        "all lines, not the last 10: {logs}"
    );
    assert!(logs.contains("> finalizer-guard-audit.jsonl"), "{logs}");
    let selector = logs
        .split(" -l ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let rendered = template(&helm, &[]);
    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let labels = deployment.spec.template.metadata.unwrap().labels.unwrap();
    for pair in selector.split(',') {
        let (key, value) = pair.split_once('=').unwrap();
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "kubectl logs -l {selector} selects the webhook's pods"
        );
    }

    let enforce = notes(
        &helm,
        &[
            "--set",
            "policy.mode=enforce,image.repository=registry.example.com/fg,image.tag=1.2.3",
        ],
    );
    for said in [
        "The pods run the image registry.example.com/fg:1.2.3",
        "fails closed (failurePolicy Fail)",
        "ENFORCE mode",
        "finalizer-guard doctor --cluster",
    ] {
        assert!(
            enforce.contains(said),
            "NOTES.txt lacks {said:?}:\n{enforce}"
        );
    }
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn schema_refuses_a_misspelled_or_mistyped_value_and_names_it() {
    let helm = helm();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for (set, needle) in [
        ("replica=3", "replica"),
        ("replicas=two", "replicas"),
        ("replicas=0", "replicas"),
        ("policy.mode=block", "mode"),
        (
            "policy.rules[0].finalizers={a},policy.rules[0].usrs={alice}",
            "usrs",
        ),
        ("policy.override.annotation=not a key", "annotation"),
        ("certificates.source=vault", "source"),
        ("certificates.generated.days=soon", "days"),
        ("certificates.self.extraDNSNames={a b}", "extraDNSNames"),
        (
            "certificates.self.extraDNSNames={10.0.0.1}",
            "extraDNSNames",
        ),
        (
            "certificates.generated.extraDNSNames={Webhook.Example.com}",
            "extraDNSNames",
        ),
        ("events.enable=false", "enable"),
        ("policyCheck.enable=false", "enable"),
        ("oncallRole.enabled=yes", "enabled"),
        ("certificates.external.caBundle=not base64!", "caBundle"),
        ("certificates.external.bundle=x", "bundle"),
        ("logFormat=xml", "logFormat"),
        ("webhook.failurePolicy=Open", "failurePolicy"),
        ("webhook.timeoutSeconds=31", "timeoutSeconds"),
        ("webhook.timeoutSeconds=0", "timeoutSeconds"),
        ("webhook.timeout=3", "timeout"),
        ("extraArgs[0].flag=x", "extraArgs"),
        ("extraVolumeMounts[0].name=data", "mountPath"),
        ("extraEnv[0].value=x", "name"),
        (
            "policy.builtinIdentities[0].controller=nope,policy.builtinIdentities[0].users={x}",
            "controller",
        ),
    ] {
        for command in ["template", "lint"] {
            let args: Vec<&str> = match command {
                "template" => vec!["template", RELEASE, chart, "--set", set],
                _ => vec!["lint", chart, "--set", set],
            };
            let run = run_helm(&helm, &args);
            let said = format!("{}{}", run.stdout, run.stderr);
            assert!(!run.ok, "helm {command} --set {set} passed:\n{said}");
            assert!(
                said.contains("values don't meet the specifications of the schema"),
                "helm {command} --set {set}: not the schema:\n{said}"
            );
            assert!(
                said.contains(needle),
                "helm {command} --set {set}: {needle} not named:\n{said}"
            );
        }
    }
    let lint = run_helm(&helm, &["lint", "--strict", chart]);
    assert!(
        lint.ok,
        "helm lint --strict: {}{}",
        lint.stdout, lint.stderr
    );
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn chart_follows_the_crate_and_the_policy_schema() {
    let chart_yaml: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        chart_yaml["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "the chart installs this release"
    );

    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let policy = Policy::from_yaml(&serde_yaml_ng::to_string(&values["policy"]).unwrap()).unwrap();
    assert_eq!(policy.mode, Mode::Warn, "first install: warn");

    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let enumerated: Vec<&str> = schema
        .pointer("/properties/policy/properties/builtinIdentities/items/properties/controller/enum")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut known = vec!["kube-controller-manager"];
    known.extend(BUILTIN_CONTROLLERS.iter().map(|c| c.name));
    assert_eq!(
        enumerated, known,
        "the schema lists src/policy/builtin.rs's controllers"
    );
}

/// A release name YAML would read as something else (`y`, `on`, `1`) is
/// still a string in every label and name.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn any_release_name_renders_valid_objects() {
    let helm = helm();
    let chart = chart();
    for release in ["y", "on", "1"] {
        let run = run_helm(
            &helm,
            &[
                "template",
                release,
                chart.to_str().unwrap(),
                "--namespace",
                "guard",
            ],
        );
        assert!(run.ok, "helm template {release}: {}", run.stderr);
        let objects = documents(&run.stdout).unwrap();
        check_all(&objects);
        for object in &objects {
            assert_eq!(
                object["metadata"]["labels"]["app.kubernetes.io/instance"],
                json!(release),
                "{}",
                describe(object)
            );
            assert_eq!(
                text(object, "/metadata/name").split('-').next(),
                Some(release),
                "{}",
                describe(object)
            );
        }
    }
}

/// The fields the policy parser knows where `yaml` names an unknown one, as
/// its error lists them ("expected one of `a`, `b`").
fn policy_fields(yaml: &str) -> BTreeSet<String> {
    let error = Policy::from_yaml(yaml).unwrap_err().to_string();
    let expected = error
        .split_once("expected")
        .unwrap_or_else(|| panic!("{yaml:?}: {error}"))
        .1;
    let expected = expected.split(" at line").next().unwrap();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every policy field the server reads is one the schema lets through, and
/// the schema allows no field the server would refuse.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_schema_knows_every_policy_field() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let policy = &schema["properties"]["policy"];
    for (yaml, pointer) in [
        ("bogus: 1\n", ""),
        ("rules:\n  - bogus: 1\n", "/properties/rules/items"),
        (
            "builtinIdentities:\n  - bogus: 1\n",
            "/properties/builtinIdentities/items",
        ),
        ("override:\n  bogus: 1\n", "/properties/override"),
        (
            "override:\n  approval:\n    bogus: 1\n",
            "/properties/override/properties/approval",
        ),
    ] {
        let object = policy.pointer(pointer).unwrap();
        assert_eq!(
            object["additionalProperties"],
            json!(false),
            "policy{pointer}: closed"
        );
        let in_schema: BTreeSet<String> = object["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            in_schema,
            policy_fields(yaml),
            "values.schema.json policy{pointer} and the policy parser disagree"
        );
    }
}

/// `helm template` with `args`: the policy check's ConfigMap and Job, the
/// release's ConfigMap and Deployment.
struct Checked {
    check_policy: Option<String>,
    job: Option<Job>,
    policy: String,
    deployment: Deployment,
}

fn checked(helm: &Path, args: &[&str]) -> Checked {
    let rendered = template(helm, args);
    check_all(&rendered);
    let id = |kind: &str, suffix: &str| format!("{kind} {NAMESPACE}/finalizer-guard{suffix}");
    let policy_of = |object: &Value| text(object, "/data/policy.yaml").to_string();
    Checked {
        check_policy: find(&rendered, &id("ConfigMap", "-policy-check")).map(policy_of),
        job: find(&rendered, &id("Job", "-policy-check"))
            .map(|j| serde_json::from_value(j.clone()).unwrap()),
        policy: policy_of(find(&rendered, &id("ConfigMap", "-policy")).unwrap()),
        deployment: serde_json::from_value(find(&rendered, &id("Deployment", "")).unwrap().clone())
            .unwrap(),
    }
}

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The policy digest in the Deployment's pod template, if any.
fn policy_digest(deployment: &Deployment) -> Option<String> {
    deployment
        .spec
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get("finalizer-guard.io/policy-sha256")
        .cloned()
}

/// What the policy check's container runs, run here on the policy it would
/// read: the Job's arguments, parsed as the binary parses them, with the
/// file the Job mounts written where the arguments name it.
fn run_the_check(job: &Job, policy: &str) -> std::process::Output {
    run_the_check_on(
        job,
        &BTreeMap::from([("policy.yaml".to_string(), policy.to_string())]),
    )
}

/// The same with every file of the hook's ConfigMap: `policy.yaml`, and
/// `vap.yaml` with the backstop.
fn run_the_check_on(job: &Job, files: &BTreeMap<String, String>) -> std::process::Output {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap();
    let parsed = Cli::try_parse_from(
        std::iter::once("finalizer-guard").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("the binary refuses the Job's arguments {args:?}: {e}"));
    let cli::Command::Policy(cli::PolicyCommand::Validate(validate)) = parsed.command else {
        panic!("the Job runs something else than `policy validate`: {args:?}");
    };
    let mount = container
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| validate.file.starts_with(&m.mount_path))
        .unwrap_or_else(|| panic!("{} is in no mount", validate.file.display()));
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        volume.config_map.as_ref().map(|c| c.name.as_str()),
        Some("finalizer-guard-policy-check"),
        "the Job reads the hook's own copy of the policy"
    );
    let here = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(here.path().join(name), text).unwrap();
    }
    let local: Vec<String> = args
        .iter()
        .map(|a| match a.strip_prefix(&mount.mount_path) {
            Some(rest) => format!("{}{rest}", here.path().display()),
            None => a.clone(),
        })
        .collect();
    Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(&local)
        .output()
        .unwrap()
}

/// Before install and every upgrade, a Helm hook Job runs `finalizer-guard
/// policy validate` on the very text the pods will read, with the image the
/// pods will run, as the pods run (the same securityContext), before any
/// object of the release changes; only then does the policy's digest in
/// the pod template roll the pods.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_policy_check_validates_what_the_pods_will_read_before_anything_changes() {
    let helm = helm();
    let rendered = template(
        &helm,
        &["--set", "image.repository=registry.example.com/fg"],
    );
    let hooks: Vec<&Value> = rendered
        .iter()
        .filter(|o| !text(o, "/metadata/annotations/helm.sh~1hook").is_empty())
        .collect();
    let ids: Vec<String> = hooks.iter().map(|o| describe(o)).collect();
    assert_eq!(
        ids,
        [
            format!("ConfigMap {NAMESPACE}/finalizer-guard-policy-check"),
            format!("Job {NAMESPACE}/finalizer-guard-policy-check"),
        ],
        "the check's ConfigMap and Job are the only hooks"
    );
    let weight = |o: &Value| -> i32 {
        text(o, "/metadata/annotations/helm.sh~1hook-weight")
            .parse()
            .unwrap()
    };
    assert!(weight(hooks[0]) < weight(hooks[1]), "the ConfigMap first");
    for hook in &hooks {
        assert_eq!(
            text(hook, "/metadata/annotations/helm.sh~1hook"),
            "pre-install,pre-upgrade",
            "before anything of the release changes"
        );
        assert_eq!(
            text(hook, "/metadata/annotations/helm.sh~1hook-delete-policy"),
            "before-hook-creation,hook-succeeded",
            "kept when it fails, to read why; replaced by the next attempt"
        );
    }

    let c = checked(
        &helm,
        &["--set", "image.repository=registry.example.com/fg"],
    );
    assert_eq!(
        c.check_policy.as_deref(),
        Some(c.policy.as_str()),
        "the check reads the text the pods will read"
    );
    let job = c.job.unwrap();
    let spec = job.spec.clone().unwrap();
    assert_eq!(spec.backoff_limit, Some(0), "one run");
    assert!(spec.active_deadline_seconds.is_some_and(|s| s < 300));
    let pod = spec.template.spec.unwrap();
    let webhook_pod = c.deployment.spec.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.automount_service_account_token, Some(false), "no token");
    assert_eq!(
        pod.security_context, webhook_pod.security_context,
        "the pod runs as the webhook's pods"
    );
    let (container, webhook) = (&pod.containers[0], &webhook_pod.containers[0]);
    assert_eq!(container.image, webhook.image, "the binary the pods run");
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example.com/fg:0.1.0")
    );
    assert_eq!(container.image_pull_policy, webhook.image_pull_policy);
    assert_eq!(
        container.security_context, webhook.security_context,
        "non-root, read-only, no capabilities: as the webhook's container"
    );
    assert!(yes(container
        .security_context
        .as_ref()
        .unwrap()
        .run_as_non_root));
    assert_eq!(
        container.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError"),
        "the refusal in the pod's status"
    );

    // The check, run: the shipped policy passes.
    let run = run_the_check(&job, c.check_policy.as_deref().unwrap());
    assert!(run.status.success(), "{run:?}");
}

/// The backstop: the chart installs the export it is given, as given, with
/// the webhook failing open, and its policy check (the Job's own command, run
/// here on the files it mounts) takes the export of the release's policy and
/// refuses any other; without the export, or without the check, the chart
/// does not render.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_backstop_installs_the_export_its_policy_check_proves() {
    let helm = helm();
    let dir = tempfile::tempdir().unwrap();
    let export = |mode: &str| -> PathBuf {
        let policy = checked(&helm, &["--set", &format!("policy.mode={mode}")]).policy;
        let file = dir.path().join(format!("policy-{mode}.yaml"));
        std::fs::write(&file, &policy).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
            .args(["policy", "export", "--vap"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let vap = dir.path().join(format!("vap-{mode}.yaml"));
        std::fs::write(&vap, out.stdout).unwrap();
        vap
    };
    let (enforce, warn) = (export("enforce"), export("warn"));
    let args = |vap: &Path| -> Vec<String> {
        [
            "--set",
            "policy.mode=enforce",
            "--set",
            "backstop.enabled=true",
            "--set-file",
            &format!("backstop.validatingAdmissionPolicy={}", vap.display()),
        ]
        .map(String::from)
        .to_vec()
    };
    fn arg_refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    let full = args(&enforce);
    let rendered = template(&helm, &arg_refs(&full));
    check_all(&rendered);
    let policy = checked(&helm, &["--set", "policy.mode=enforce"]).policy;
    let policy = Policy::from_yaml(&policy).unwrap();
    let mut yaml = String::new();
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let object = rendered
            .iter()
            .find(|o| text(o, "/kind") == kind)
            .unwrap_or_else(|| panic!("no {kind}"));
        // The export, with the release's labels added (so that
        // `kubectl get -l app.kubernetes.io/instance=RELEASE` finds it):
        // without them, the export as given.
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/instance"], RELEASE, "{kind}");
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml_ng::to_string(&without_helm_labels(object)).unwrap());
    }
    finalizer_guard::offline::vap::verify(&policy, &yaml).expect("the export, as given");
    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    assert_eq!(
        text(webhook, "/webhooks/0/failurePolicy"),
        "Ignore",
        "enforcing, with the backstop: failing open"
    );
    let mut fail = full.clone();
    fail.extend(["--set", "webhook.failurePolicy=Fail"].map(String::from));
    let rendered_fail = template(&helm, &arg_refs(&fail));
    let webhook = find(
        &rendered_fail,
        "ValidatingWebhookConfiguration finalizer-guard",
    )
    .unwrap();
    assert_eq!(text(webhook, "/webhooks/0/failurePolicy"), "Fail", "as set");

    // The check, run as the Job runs it, on what its ConfigMap holds.
    let hook_files = |rendered: &[Value]| -> BTreeMap<String, String> {
        let cm = find(
            rendered,
            &format!("ConfigMap {NAMESPACE}/finalizer-guard-policy-check"),
        )
        .unwrap();
        serde_json::from_value(cm["data"].clone()).unwrap()
    };
    let job: Job = serde_json::from_value(
        find(
            &rendered,
            &format!("Job {NAMESPACE}/finalizer-guard-policy-check"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let files = hook_files(&rendered);
    assert_eq!(
        files.get("vap.yaml").map(String::as_str),
        Some(std::fs::read_to_string(&enforce).unwrap().as_str())
    );
    let run = run_the_check_on(&job, &files);
    assert!(run.status.success(), "{run:?}");

    // The export of another policy (warn mode): refused, and said why.
    let stale = args(&warn);
    let files = hook_files(&template(&helm, &arg_refs(&stale)));
    let run = run_the_check_on(&job, &files);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        said.contains("not `finalizer-guard policy export --vap")
            && said.contains("differs from the export of this policy"),
        "{said}"
    );

    // No export, or no check: not rendered.
    let chart = chart();
    for (extra, why) in [
        (
            vec!["--set", "backstop.enabled=true"],
            "backstop.enabled needs backstop.validatingAdmissionPolicy",
        ),
        (
            arg_refs(&full)
                .into_iter()
                .chain(["--set", "policyCheck.enabled=false"])
                .collect(),
            "backstop.enabled needs policyCheck.enabled",
        ),
        (
            // Before 1.30 there is no v1 ValidatingAdmissionPolicy: refused at
            // template time (helm install asks the cluster), not by the API
            // server halfway through an install.
            arg_refs(&full)
                .into_iter()
                .chain(["--kube-version", "1.29.8"])
                .collect(),
            "backstop.enabled needs Kubernetes 1.30 or later, which serves an admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy; this cluster is v1.29.8",
        ),
    ] {
        let mut cmd = vec!["template", RELEASE, chart.to_str().unwrap()];
        cmd.extend(extra);
        let run = run_helm(&helm, &cmd);
        assert!(!run.ok && run.stderr.contains(why), "{}", run.stderr);
    }
    let mut oldest = full.clone();
    oldest.extend(["--kube-version", "1.30.0"].map(String::from));
    assert!(
        template(&helm, &arg_refs(&oldest))
            .iter()
            .any(|o| text(o, "/kind") == "ValidatingAdmissionPolicy"),
        "1.30 serves it"
    );
    // Off by default.
    assert!(
        !template(&helm, &[])
            .iter()
            .any(|o| text(o, "/kind").starts_with("ValidatingAdmissionPolicy"))
    );
}

/// A policy `serve` would refuse fails the check, with the reason, and the
/// pods are rolled when the policy changes, and only then.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_policy_check_refuses_what_serve_refuses_and_the_pods_roll_on_a_policy_change() {
    let helm = helm();
    let shipped = checked(&helm, &[]);
    let digest = policy_digest(&shipped.deployment).expect("a policy digest");
    assert_eq!(digest, sha256_hex(&shipped.policy), "the ConfigMap's text");

    // Enforcing, with Kubernetes' own controllers judged by a policy that
    // lets none of them remove its finalizers: `serve` would not start.
    let refused = checked(
        &helm,
        &[
            "--set",
            "policy.mode=enforce,policy.builtinControllers=false",
        ],
    );
    let run = run_the_check(
        refused.job.as_ref().unwrap(),
        refused.check_policy.as_deref().unwrap(),
    );
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(said.contains("garbage-collector"), "{said}");
    // ... and one that does not parse.
    let bad_rule = checked(
        &helm,
        &[
            "--set-json",
            r#"policy.rules=[{"finalizers":["example.com/x"]}]"#,
        ],
    );
    let run = run_the_check(
        bad_rule.job.as_ref().unwrap(),
        bad_rule.check_policy.as_deref().unwrap(),
    );
    assert_eq!(
        run.status.code(),
        Some(1),
        "a rule that covers no one: {run:?}"
    );

    // The pods roll when the policy text changes, not on anything else.
    let other = checked(&helm, &["--set", "replicas=3,logFormat=text"]);
    assert_eq!(policy_digest(&other.deployment), Some(digest.clone()));
    let ruled = checked(
        &helm,
        &[
            "--set-json",
            r#"policy.rules=[{"name":"ops","finalizers":["example.com/x"],"groups":["ops"]}]"#,
        ],
    );
    let new_digest = policy_digest(&ruled.deployment).unwrap();
    assert_ne!(new_digest, digest);
    assert_eq!(new_digest, sha256_hex(&ruled.policy));

    // Without the check: no hook, and no rollout on a policy change (the
    // running pods pick it up by themselves).
    let off = checked(&helm, &["--set", "policyCheck.enabled=false"]);
    assert!(off.job.is_none() && off.check_policy.is_none());
    assert_eq!(policy_digest(&off.deployment), None);
}

/// `policyCheck.strict`: the hook runs `policy validate --strict`, so a
/// policy that locks a controller out (or lets everyone in) fails the
/// install or upgrade, while the same policy passes the default check; the
/// chart's default policy passes either.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_policy_check_fails_on_warnings_when_strict() {
    let helm = helm();
    let args = |job: &Job| -> Vec<String> {
        job.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap()
    };
    let shipped = checked(&helm, &[]);
    assert!(
        !args(shipped.job.as_ref().unwrap()).contains(&"--strict".to_string()),
        "not strict unless asked"
    );
    let strict = checked(&helm, &["--set", "policyCheck.strict=true"]);
    let job = strict.job.as_ref().unwrap();
    assert!(
        args(job).contains(&"--strict".to_string()),
        "{:?}",
        args(job)
    );
    let run = run_the_check(job, strict.check_policy.as_deref().unwrap());
    assert!(run.status.success(), "the default policy passes: {run:?}");

    let locked_out = r#"policy.rules=[{"name":"argocd","finalizers":["resources-finalizer.argocd.argoproj.io"],"serviceAccounts":["argocd:argocd-application-controller"],"resources":["applications"]}]"#;
    for (strict, code) in [("false", 0), ("true", 1)] {
        let set = format!("policyCheck.strict={strict}");
        let c = checked(&helm, &["--set", &set, "--set-json", locked_out]);
        let run = run_the_check(c.job.as_ref().unwrap(), c.check_policy.as_deref().unwrap());
        assert_eq!(run.status.code(), Some(code), "strict={strict}: {run:?}");
        let said = String::from_utf8_lossy(&run.stdout);
        assert!(
            said.contains(r#"write "applications.argoproj.io""#),
            "{said}"
        );
    }
    // The schema takes a boolean only.
    let run = run_helm(
        &helm,
        &[
            "template",
            RELEASE,
            chart().to_str().unwrap(),
            "--set",
            "policyCheck.strict=yes",
        ],
    );
    assert!(!run.ok, "{}", run.stdout);
    assert!(run.stderr.contains("strict"), "{}", run.stderr);
}

/// The paragraphs of NOTES.txt's "Off with these values" list, by their
/// first words (up to the first `:`).
fn off_list(notes: &str) -> BTreeMap<String, String> {
    let Some(list) = notes
        .split("Off with these values, and the value that turns each on:")
        .nth(1)
    else {
        return BTreeMap::new();
    };
    let list = list.split("\nBreak-glass of last resort").next().unwrap();
    list.split("\n\n- ")
        .skip(1)
        .map(|p| {
            let p = p.trim_start_matches("- ").replace("\n  ", " ");
            let (name, rest) = p.split_once(": ").unwrap();
            (name.to_string(), rest.trim().to_string())
        })
        .collect()
}

/// A default install leaves nothing off without saying so: NOTES.txt lists
/// each feature the values leave off, the value that turns it on (which
/// `helm template` then takes), and its cost; a feature turned on leaves the
/// list, and one turned off joins it.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn install_notes_say_what_the_values_leave_off_and_how_to_turn_it_on() {
    let helm = helm();
    let default = off_list(&notes(&helm, &[]));
    let expected = [
        ("Events", "events.unauthenticated=true"),
        (
            "Evidence for `policy suggest` from the webhook's own records",
            "--trust-unauthenticated",
        ),
        ("Alerts", "monitoring.prometheusRule.enabled=true"),
        ("A NetworkPolicy", "networkPolicy.enabled=true"),
        ("The backstop", "backstop.enabled=true"),
        ("Secrets for on-call", "oncallRole.secrets=true"),
        ("The two-person override", "policy.override.approval"),
    ];
    assert_eq!(
        default.keys().cloned().collect::<BTreeSet<_>>(),
        expected
            .iter()
            .map(|(k, _)| k.to_string())
            .collect::<BTreeSet<_>>(),
        "{default:#?}"
    );
    for (feature, value) in expected {
        let said = &default[feature];
        assert!(said.contains(value), "{feature}: {said}");
        assert!(
            said.contains(" On: ") || said.contains(". On:"),
            "{feature} says how to turn it on: {said}"
        );
    }
    assert!(
        default["Events"].contains("--client-ca"),
        "{}",
        default["Events"]
    );
    assert!(
        default["Events"].contains("'\"decision\":\"denied\"'"),
        "where denials are without Events"
    );
    // Each "On:" value turns its line off (and renders); --client-ca, two.
    for (args, gone) in [
        (vec!["--set", "events.unauthenticated=true"], vec!["Events"]),
        (
            vec![
                "--set-json",
                r#"extraArgs=["--client-ca=/etc/finalizer-guard/tls/ca.crt"]"#,
            ],
            vec![
                "Events",
                "Evidence for `policy suggest` from the webhook's own records",
            ],
        ),
        (
            vec![
                "--set",
                "monitoring.prometheusRule.enabled=true,monitoring.serviceMonitor.enabled=true",
            ],
            vec!["Alerts"],
        ),
        (
            vec!["--set", "networkPolicy.enabled=true"],
            vec!["A NetworkPolicy"],
        ),
        (
            vec!["--set", "oncallRole.secrets=true"],
            vec!["Secrets for on-call"],
        ),
        (
            vec![
                "--set-json",
                r#"policy.override.approval={"groups":["sre"],"maxAge":"2h"}"#,
            ],
            vec!["The two-person override"],
        ),
    ] {
        let list = off_list(&notes(&helm, &args));
        let left: BTreeSet<&String> = default
            .keys()
            .filter(|k| !gone.contains(&k.as_str()))
            .collect();
        assert_eq!(list.keys().collect::<BTreeSet<_>>(), left, "{args:?}");
    }
    // --client-ca turns Events on too.
    let verified = off_list(&notes(
        &helm,
        &[
            "--set-json",
            r#"extraEnv=[{"name":"FINALIZER_GUARD_CLIENT_CA","value":"/ca.crt"}]"#,
        ],
    ));
    assert!(
        !verified.contains_key("Events")
            && !verified
                .contains_key("Evidence for `policy suggest` from the webhook's own records"),
        "{verified:#?}"
    );
    // Turned off, listed.
    let off = off_list(&notes(
        &helm,
        &[
            "--set",
            "events.enabled=false,watch.enabled=false,policyCheck.enabled=false,oncallRole.enabled=false,monitoring.prometheusRule.enabled=true",
        ],
    ));
    for (feature, value) in [
        ("Events", "events.enabled=true"),
        ("watch", "watch.enabled=true"),
        ("The policy check", "policyCheck.enabled=true"),
        ("The on-call role", "oncallRole.enabled=true"),
        (
            "Scrapes for the alerts",
            "monitoring.serviceMonitor.enabled=true",
        ),
    ] {
        assert!(
            off.get(feature).is_some_and(|s| s.contains(value)),
            "{feature}: {off:#?}"
        );
    }
    assert!(
        !off.contains_key("Secrets for on-call"),
        "no role, no line about its Secrets"
    );
    let quiet = off_list(&notes(&helm, &["--set", "watch.events=false"]));
    assert!(
        quiet
            .get("FinalizerStuck Events")
            .is_some_and(|s| s.contains("watch.events=true")),
        "{quiet:#?}"
    );
    // The warn-mode path says what `policy suggest` makes of unverified records.
    let warn = notes(&helm, &[]);
    assert!(warn.contains("--trust-unauthenticated"), "{warn}");
}

/// The on-call ClusterRole is the chart's, on by default, named after the
/// release, bound to no one, and aggregated from its rules' role (and from
/// `view` while `oncallRole.aggregateToView`).
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_oncall_role_is_rendered_unbound_and_can_be_left_out() {
    let helm = helm();
    let rendered = template(&helm, &[]);
    let role = find(&rendered, "ClusterRole finalizer-guard-oncall").expect("the on-call role");
    assert!(role["metadata"]["namespace"].is_null());
    assert!(
        role.get("rules").is_none(),
        "the aggregation controller writes them"
    );
    assert_eq!(
        role["aggregationRule"]["clusterRoleSelectors"],
        json!([
            {"matchLabels": {"finalizer-guard.io/aggregate-to-oncall": "finalizer-guard-oncall"}},
            {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        ])
    );
    let rules = find(&rendered, "ClusterRole finalizer-guard-oncall-rules").expect("its rules");
    assert_eq!(
        rules["metadata"]["labels"]["finalizer-guard.io/aggregate-to-oncall"],
        "finalizer-guard-oncall"
    );
    assert!(
        rendered
            .iter()
            .filter(|o| text(o, "/kind").ends_with("Binding"))
            .all(|b| !text(b, "/roleRef/name").contains("-oncall")),
        "bound to no one by the chart"
    );
    let run = run_helm(
        &helm,
        &[
            "template",
            "other",
            chart().to_str().unwrap(),
            "--namespace",
            "guard",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    assert!(run.stdout.contains("name: other-finalizer-guard-oncall\n"));
    assert!(
        run.stdout
            .contains("finalizer-guard.io/aggregate-to-oncall: other-finalizer-guard-oncall\n")
    );
    let off = template(&helm, &["--set", "oncallRole.enabled=false"]);
    assert!(find(&off, "ClusterRole finalizer-guard-oncall").is_none());
    assert!(find(&off, "ClusterRole finalizer-guard-oncall-rules").is_none());
    assert!(find(&off, "ClusterRole finalizer-guard-events").is_some());
    let no_view = template(&helm, &["--set", "oncallRole.aggregateToView=false"]);
    assert_eq!(
        find(&no_view, "ClusterRole finalizer-guard-oncall").unwrap()["aggregationRule"]
            ["clusterRoleSelectors"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// `RESOURCE` or `RESOURCE.GROUP`, as RBAC's (group, resource).
fn rbac_type(name: &str) -> (String, String) {
    match name.split_once('.') {
        Some((resource, group)) => (group.to_string(), resource.to_string()),
        None => (String::new(), name.to_string()),
    }
}

/// What the on-call role's rules grant: (group, resource) by verb.
fn oncall_grants(objects: &[Value]) -> BTreeMap<String, BTreeSet<(String, String)>> {
    let rules = find(objects, "ClusterRole finalizer-guard-oncall-rules").expect("its rules");
    let mut grants: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for rule in rules["rules"].as_array().unwrap() {
        let Some(groups) = rule["apiGroups"].as_array() else {
            continue;
        };
        for verb in rule["verbs"].as_array().unwrap() {
            for group in groups {
                for resource in rule["resources"].as_array().unwrap() {
                    grants
                        .entry(verb.as_str().unwrap().to_string())
                        .or_default()
                        .insert((
                            group.as_str().unwrap().to_string(),
                            resource.as_str().unwrap().to_string(),
                        ));
                }
            }
        }
    }
    grants
}

/// The on-call role reads every type but Secrets and patches only the
/// types `oncallRole.releasableResources` lists: by default those
/// Kubernetes' own controllers finalize and those of every preset that
/// names them, but ConfigMaps, Secrets and CRDs; nothing on `*` but
/// Kubernetes' own groups' reads. `extraReleasableResources` adds to them,
/// `oncallRole.secrets` adds Secrets, and Secrets named as a type are
/// refused with the value to use.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_oncall_role_reads_all_but_secrets_and_releases_only_the_listed_types() {
    let helm = helm();
    let rendered = template(&helm, &[]);
    let grants = oncall_grants(&rendered);
    let reads =
        |grants: &BTreeMap<String, BTreeSet<(String, String)>>, group: &str, resource: &str| {
            ["get", "list"].iter().all(|verb| {
                grants.get(*verb).is_some_and(|g| {
                    g.contains(&(group.to_string(), resource.to_string()))
                        || g.contains(&(group.to_string(), "*".to_string()))
                })
            })
        };
    let patched = &grants["patch"];
    assert!(!reads(&grants, "", "secrets"), "{grants:#?}");
    for verb in ["get", "list", "patch", "update", "delete"] {
        for (group, resource) in grants.get(verb).into_iter().flatten() {
            assert_ne!(group, "*", "{verb} on every group");
            assert_ne!(resource, "secrets", "{verb} on Secrets");
            if resource == "*" {
                assert!(
                    verb == "get" || verb == "list",
                    "{verb} {resource} in {group}"
                );
            }
        }
    }
    for (group, resource) in [
        ("", "pods"),
        ("", "nodes"),
        ("apps", "deployments"),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
        ("coordination.k8s.io", "leases"),
        ("apiregistration.k8s.io", "apiservices"),
        ("", "configmaps"),
        ("", "services"),
    ] {
        assert!(
            reads(&grants, group, resource),
            "it reads {resource}.{group}"
        );
    }
    // What it patches is what the value lists, and nothing else.
    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let listed: BTreeSet<(String, String)> = values["oncallRole"]["releasableResources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| rbac_type(r.as_str().unwrap()))
        .collect();
    assert_eq!(patched, &listed);
    for forbidden in [
        ("", "configmaps"),
        ("", "secrets"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("apps", "deployments"),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
    ] {
        assert!(
            !patched.contains(&(forbidden.0.to_string(), forbidden.1.to_string())),
            "patches {forbidden:?}"
        );
    }
    // The default covers Kubernetes' own finalizer holders (but the
    // garbage collector's owners and kube-apiserver's CRDs, whose
    // finalizers go by themselves once their dependents are released) and
    // the preset catalog's types (but ConfigMaps, Secrets and CRDs).
    for controller in BUILTIN_CONTROLLERS {
        if matches!(
            controller.name,
            "garbage-collector" | "customresourcedefinition-finalizer"
        ) {
            continue;
        }
        let kind = rbac_type(controller.example_resource);
        assert!(
            patched.contains(&kind),
            "{}: {} is not releasable",
            controller.name,
            controller.example_resource
        );
    }
    let mut catalog = 0;
    for preset in finalizer_guard::policy::presets::catalog() {
        for component in &preset.components {
            for resource in component.resources.iter().flatten() {
                catalog += 1;
                if matches!(
                    resource.as_str(),
                    "configmaps" | "secrets" | "customresourcedefinitions.apiextensions.k8s.io"
                ) {
                    continue;
                }
                assert!(
                    patched.contains(&rbac_type(resource)),
                    "preset {}/{}: {resource} is not in oncallRole.releasableResources",
                    preset.name,
                    component.name
                );
            }
        }
    }
    assert!(catalog > 30, "{catalog}");
    assert_eq!(
        grants["update"],
        BTreeSet::from([(String::new(), "namespaces/finalize".to_string())])
    );
    assert_eq!(
        grants["delete"],
        BTreeSet::from([(String::new(), "pods".to_string())])
    );

    // More types, a whole group, and Secrets when asked.
    let more = template(
        &helm,
        &[
            "--set-json",
            r#"oncallRole.extraReleasableResources=["*.upbound.io","configmaps","pods"]"#,
            "--set",
            "oncallRole.secrets=true",
        ],
    );
    let grants = oncall_grants(&more);
    let patched = &grants["patch"];
    assert_eq!(patched.len(), listed.len() + 3, "pods once");
    for kind in [("upbound.io", "*"), ("", "configmaps"), ("", "secrets")] {
        assert!(
            patched.contains(&(kind.0.to_string(), kind.1.to_string())),
            "{kind:?}"
        );
    }
    assert!(reads(&grants, "", "secrets"));

    for (args, needle) in [
        (
            r#"oncallRole.extraReleasableResources=["secrets"]"#,
            "set oncallRole.secrets=true instead",
        ),
        (
            r#"oncallRole.releasableResources=["pods","secrets"]"#,
            "set oncallRole.secrets=true instead",
        ),
        (
            r#"oncallRole.extraReleasableResources=["*"]"#,
            "extraReleasableResources/0",
        ),
        (
            r#"oncallRole.extraReleasableResources=["Pods"]"#,
            "extraReleasableResources/0",
        ),
    ] {
        let run = run_helm(
            &helm,
            &[
                "template",
                RELEASE,
                chart().to_str().unwrap(),
                "--set-json",
                args,
            ],
        );
        assert!(!run.ok, "{args} rendered");
        assert!(run.stderr.contains(needle), "{args}: {}", run.stderr);
    }
}

/// The matchCondition `webhook.skipIdentities` renders, or `None`.
fn skip_condition(objects: &[Value]) -> Option<Value> {
    let webhook = objects
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .expect("a webhook configuration");
    webhook["webhooks"][0]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "not-skipped-identity")
        .cloned()
}

/// `webhook.skipIdentities`: a condition only when something is listed,
/// every name a CEL string literal whatever it holds, the approval writes
/// still sent; the schema refuses an identity too broad to trust
/// (docs/policy.md#identities-too-broad-to-trust).
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn skip_identities_render_a_condition_of_their_own() {
    let helm = helm();
    let off = ["--set", "policyCheck.enabled=false"];
    assert_eq!(skip_condition(&template(&helm, &off)), None);
    let mut args = off.to_vec();
    args.extend([
        "--set",
        r#"webhook.skipIdentities.users={ops-bot,o'brien "x" \\ y}"#,
        "--set",
        "webhook.skipIdentities.serviceAccounts={ops:cleanup-controller}",
        "--set",
        "policy.override.annotation=example.com/break-glass",
    ]);
    let objects = template(&helm, &args);
    check_all(&objects);
    let condition = skip_condition(&objects).expect("the not-skipped-identity condition");
    let expression = condition["expression"].as_str().unwrap();
    let (identities, approval) = expression.split_once("\n||\n").unwrap();
    // Each name is a JSON string: a CEL string literal, quotes and
    // backslashes escaped, so no name can end the list or the expression.
    for name in [
        r#""ops-bot""#,
        r#""o'brien \"x\" \\ y""#,
        r#""system:serviceaccount:ops:cleanup-controller""#,
    ] {
        assert!(identities.contains(name), "{name}: {expression}");
    }
    // No group listed: an empty list, never everyone.
    assert!(identities.contains("g in [\n  ])))"), "{expression}");
    assert!(approval.contains("'example.com/break-glass'"), "{approval}");
    // The built-in controllers' condition ends with the same approval part.
    let builtin = objects
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap()["webhooks"][0]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "not-builtin-controller")
        .unwrap()["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(builtin.ends_with(approval), "{builtin}\n{approval}");

    for (value, refused) in [
        (
            "webhook.skipIdentities.groups={system:authenticated}",
            "groups/0",
        ),
        (
            "webhook.skipIdentities.groups={system:serviceaccounts}",
            "groups/0",
        ),
        (
            "webhook.skipIdentities.groups={platform,system:serviceaccounts:team-a}",
            "groups/1",
        ),
        ("webhook.skipIdentities.users={system:anonymous}", "users/0"),
        (
            "webhook.skipIdentities.users={system:serviceaccount:team-a:default}",
            "users/0",
        ),
        (
            "webhook.skipIdentities.serviceAccounts={team-a:default}",
            "serviceAccounts/0",
        ),
        (
            "webhook.skipIdentities.serviceAccounts={cleanup-controller}",
            "serviceAccounts/0",
        ),
        ("webhook.skipIdentities.users={ }", "users/0"),
        (
            "webhook.skipIdentities.user={ops-bot}",
            "'user' not allowed",
        ),
    ] {
        let chart = chart();
        let run = run_helm(
            &helm,
            &["template", "x", chart.to_str().unwrap(), "--set", value],
        );
        assert!(!run.ok, "{value} rendered");
        assert!(run.stderr.contains(refused), "{value}: {}", run.stderr);
    }
}

/// examples/kustomize/skip-identities adds to manifests/ exactly what the
/// chart renders for the same identities.
#[test]
#[ignore = "needs helm (FG_HELM) and kubectl (FG_KUBECTL): see .ci/run"]
fn the_kustomize_example_skips_what_the_chart_skips() {
    let (helm, kubectl) = (helm(), kubectl());
    let chart = template(
        &helm,
        &[
            "--set",
            "policyCheck.enabled=false",
            "--set",
            "certificates.source=cert-manager",
            "--set",
            "webhook.skipIdentities.groups={platform-controllers}",
            "--set",
            "webhook.skipIdentities.serviceAccounts={storage-system:volume-cleaner}",
        ],
    );
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kustomize/skip-identities");
    let built = kustomize(&kubectl, &example);
    assert!(skip_condition(&built).is_some());
    assert_same_objects(&chart, &built, &[], "examples/kustomize/skip-identities");
}

/// `networkPolicy`: off by default (manifests/ has none); on, the webhook
/// port from `webhookFrom` alone and the admin port from `adminFrom` alone,
/// for the webhook pods; on without `webhookFrom`, the webhook port from
/// anywhere (where kube-apiserver calls from is not the chart's to know).
/// `events.unauthenticated` sets the server's flag.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_network_policy_admits_kube_apiserver_and_the_scraper_only() {
    let helm = helm();
    let off = ["--set", "policyCheck.enabled=false"];
    let default = template(&helm, &off);
    assert!(
        default.iter().all(|o| text(o, "/kind") != "NetworkPolicy"),
        "none by default"
    );
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        r#"
networkPolicy:
  enabled: true
  webhookFrom: [{ipBlock: {cidr: 10.0.0.0/24}}]
  adminFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
events:
  unauthenticated: true
"#,
    )
    .unwrap();
    let mut args = off.to_vec();
    args.extend(["-f", values.path().to_str().unwrap()]);
    let rendered = template(&helm, &args);
    check_all(&rendered);
    let policy =
        find(&rendered, "NetworkPolicy finalizer-guard/finalizer-guard").expect("a NetworkPolicy");
    let deployment = find(&rendered, "Deployment finalizer-guard/finalizer-guard").unwrap();
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy["spec"]["ingress"],
        json!([
            {"ports": [{"port": "webhook", "protocol": "TCP"}],
             "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]},
            {"ports": [{"port": "admin", "protocol": "TCP"}],
             "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
        ])
    );
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    for name in ["webhook", "admin"] {
        assert!(
            ports.as_array().unwrap().iter().any(|p| p["name"] == name),
            "the container names its port {name}: {ports}"
        );
    }
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "FINALIZER_GUARD_EVENTS_UNAUTHENTICATED" && e["value"] == "true"),
        "{env}"
    );

    // Enabled with no webhookFrom: the webhook port from anywhere (where
    // kube-apiserver calls from is not knowable), the admin port from
    // adminFrom alone.
    let rendered = template(
        &helm,
        &[
            "--set",
            "policyCheck.enabled=false",
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.adminFrom[0].podSelector.matchLabels.app=prometheus",
        ],
    );
    let policy =
        find(&rendered, "NetworkPolicy finalizer-guard/finalizer-guard").expect("a NetworkPolicy");
    assert_eq!(
        policy["spec"]["ingress"],
        json!([
            {"ports": [{"port": "webhook", "protocol": "TCP"}]},
            {"ports": [{"port": "admin", "protocol": "TCP"}],
             "from": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]},
        ])
    );
    let chart = chart();
    // A misspelled peer field: the schema names it.
    let run = run_helm(
        &helm,
        &[
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--set",
            "networkPolicy.webhookFrom[0].ipblock.cidr=10.0.0.0/8",
        ],
    );
    assert!(!run.ok, "{}", run.stdout);
    assert!(run.stderr.contains("ipblock"), "{}", run.stderr);
}
