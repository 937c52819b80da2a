//! The chart in a fleet: as a subchart of an umbrella chart, rendered by a
//! GitOps tool (`helm template`, no cluster to ask), with the names, labels,
//! ports and selectors a platform sets, and its objects found again by their
//! labels. Needs helm, as `helm.rs` (`FG_HELM`).

use super::helm::{HelmRun, RELEASE, chart, check_all, find, helm, run_helm, template};
use super::*;

/// `helm template RELEASE CHART --namespace finalizer-guard ARGS`, however it ends.
fn render(helm: &Path, release: &str, args: &[&str]) -> HelmRun {
    let chart = chart();
    let mut full = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    full.extend_from_slice(args);
    run_helm(helm, &full)
}

fn values_file(yaml: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    file
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn kinds<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| text(o, "/kind") == kind)
        .collect()
}

/// The webhook's Deployment and its one container.
fn webhook_deployment(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| {
            text(o, "/kind") == "Deployment"
                && text(o, "/metadata/labels/app.kubernetes.io~1component") == "webhook"
        })
        .expect("the webhook's Deployment")
}

/// An umbrella chart passes `global` (any keys) and `enabled`; a GitOps
/// values set names, labels, spreads and selects. Each value reaches the
/// objects it names, and the chart's own labels and selectors stay.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn umbrella_and_gitops_values_reach_the_objects_they_name() {
    let helm = helm();
    let values = values_file(
        r#"
global:
  imageRegistry: registry.example.com
  anything: {nested: [1, "two", {three: 3}]}
enabled: true
nameOverride: guard
commonLabels:
  team: platform
  app.kubernetes.io/instance: not-this
podLabels:
  sidecar.istio.io/inject: "false"
  team: webhooks
podAnnotations:
  example.com/note: "yes"
priorityClassName: platform-critical
topologySpreadConstraints:
  - maxSkew: 2
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
imagePullSecrets: [{name: regcred}]
webhook:
  port: 10250
  namespaceSelector:
    matchExpressions: [{key: finalizer-guard.io/skip, operator: DoesNotExist}]
  objectSelector:
    matchLabels: {guarded: "yes"}
"#,
    );
    let run = render(&helm, "fleet", &["-f", values.path().to_str().unwrap()]);
    assert!(run.ok, "{}", run.stderr);
    let objects = documents(&run.stdout).unwrap();
    check_all(&objects);
    for object in &objects {
        let labels = labels(object);
        let id = describe(object);
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("platform"),
            "{id}"
        );
        assert_eq!(
            labels.get("app.kubernetes.io/instance").map(String::as_str),
            Some("fleet"),
            "{id}: commonLabels never replace the chart's"
        );
        assert_eq!(
            labels.get("app.kubernetes.io/name").map(String::as_str),
            Some("guard"),
            "{id}"
        );
        let name = text(object, "/metadata/name");
        if !(text(object, "/kind").starts_with("ValidatingAdmissionPolicy")) {
            assert!(name.starts_with("fleet-guard"), "{id}: nameOverride");
        }
    }
    let deployment = webhook_deployment(&objects);
    let pod = &deployment["spec"]["template"];
    let pod_labels = labels(pod);
    assert_eq!(pod_labels["sidecar.istio.io/inject"], "false");
    assert_eq!(
        pod_labels["team"], "webhooks",
        "podLabels win over commonLabels"
    );
    assert_eq!(pod_labels["app.kubernetes.io/component"], "webhook");
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    assert!(
        selector
            .iter()
            .all(|(k, v)| pod_labels.get(k).map(String::as_str) == v.as_str()),
        "the selector still selects the pods"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/note"], "yes",
        "podAnnotations"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["priorityClassName"], "platform-critical");
    assert!(
        kinds(&objects, "ResourceQuota").is_empty(),
        "the quota is for system-cluster-critical only"
    );
    assert_eq!(
        spec["topologySpreadConstraints"],
        json!([{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}])
    );
    for object in &objects {
        let pod = match text(object, "/kind") {
            "Deployment" | "Job" => &object["spec"]["template"]["spec"],
            _ => continue,
        };
        assert_eq!(
            pod["imagePullSecrets"],
            json!([{"name": "regcred"}]),
            "{}",
            describe(object)
        );
    }
    // The port reaches the container, its name, and `serve --listen`.
    let container = &spec["containers"][0];
    let ports = container["ports"].as_array().unwrap();
    assert!(ports.contains(&json!({"name": "webhook", "containerPort": 10250, "protocol": "TCP"})));
    assert!(ports.contains(&json!({"name": "admin", "containerPort": 9090, "protocol": "TCP"})));
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let serve = serve_config(&args);
    assert_eq!(serve.listen.port(), 10250);
    assert_eq!(serve.admin_listen.port(), 9090);
    let service = objects
        .iter()
        .find(|o| text(o, "/kind") == "Service" && text(o, "/metadata/name") == "fleet-guard")
        .unwrap();
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    // The selectors: the chart's own (none) and the values' terms.
    let webhook = &kinds(&objects, "ValidatingWebhookConfiguration")[0]["webhooks"][0];
    assert_eq!(
        webhook["namespaceSelector"],
        json!({"matchExpressions": [{"key": "finalizer-guard.io/skip", "operator": "DoesNotExist"}]})
    );
    assert_eq!(
        webhook["objectSelector"],
        json!({"matchLabels": {"guarded": "yes"}})
    );

    // fullnameOverride is the whole name.
    let run = render(
        &helm,
        "fleet",
        &[
            "--set",
            "fullnameOverride=guard-eu-1",
            "--set",
            "policyCheck.enabled=false",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    let objects = documents(&run.stdout).unwrap();
    let names: BTreeSet<&str> = objects.iter().map(|o| text(o, "/metadata/name")).collect();
    assert!(
        names.contains("guard-eu-1") && names.contains("guard-eu-1-watch"),
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| n.starts_with("guard-eu-1")),
        "{names:?}"
    );
}

/// What `serve` makes of the container's arguments.
fn serve_config(args: &[String]) -> cli::ServeArgs {
    let mut argv = vec!["finalizer-guard".to_string()];
    argv.extend(args.iter().cloned());
    let parsed = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("{args:?} is not serve");
    };
    *serve
}

/// `hostNetwork`: the pods in the node's network, DNS still the cluster's,
/// and the webhook port off the kubelet's 10250 (10260 by default). A port
/// that is the admin port is refused at template time naming both values;
/// 10250 in the host network too.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn host_network_moves_the_port_and_a_colliding_port_is_refused_naming_both() {
    let helm = helm();
    let objects = template(&helm, &["--set", "hostNetwork=true"]);
    let spec = &webhook_deployment(&objects)["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    let args: Vec<String> = serde_json::from_value(spec["containers"][0]["args"].clone()).unwrap();
    assert_eq!(serve_config(&args).listen.port(), 10260);
    assert_eq!(spec["containers"][0]["ports"][0]["containerPort"], 10260);
    // watch talks to the API server only: it stays in the pod network.
    let watch = objects
        .iter()
        .find(|o| text(o, "/kind") == "Deployment" && is_watch(o))
        .unwrap();
    assert!(watch["spec"]["template"]["spec"]["hostNetwork"].is_null());

    // The defaults: no flag, the ports serve's defaults.
    let objects = template(&helm, &[]);
    let spec = &webhook_deployment(&objects)["spec"]["template"]["spec"];
    assert!(spec["hostNetwork"].is_null());
    let args: Vec<String> = serde_json::from_value(spec["containers"][0]["args"].clone()).unwrap();
    assert!(!args.iter().any(|a| a.contains("listen")), "{args:?}");

    // Another admin port: the container, the flag and the Service follow.
    let objects = template(&helm, &["--set", "adminPort=9443"]);
    let spec = &webhook_deployment(&objects)["spec"]["template"]["spec"];
    let args: Vec<String> = serde_json::from_value(spec["containers"][0]["args"].clone()).unwrap();
    assert_eq!(serve_config(&args).admin_listen.port(), 9443);
    let service = find(&objects, "Service finalizer-guard/finalizer-guard").unwrap();
    assert_eq!(service["spec"]["ports"][1]["port"], 9443);

    for (sets, says) in [
        (
            vec!["webhook.port=9090"],
            "webhook.port (9090) is adminPort (9090)",
        ),
        (
            vec!["adminPort=8443"],
            "webhook.port (8443) is adminPort (8443)",
        ),
        (
            vec!["hostNetwork=true", "adminPort=10260"],
            "webhook.port (10260) is adminPort (10260)",
        ),
        (
            vec!["hostNetwork=true", "webhook.port=10250"],
            "webhook.port (10250) with hostNetwork is the kubelet's port",
        ),
    ] {
        let mut args = Vec::new();
        for set in &sets {
            args.extend(["--set", set]);
        }
        let run = render(&helm, RELEASE, &args);
        assert!(!run.ok, "{sets:?} rendered:\n{}", run.stdout);
        assert!(run.stderr.contains(says), "{sets:?}: {}", run.stderr);
    }
}

/// The schema takes what a parent chart passes and refuses a mistyped new
/// value, naming it.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_schema_takes_a_parents_values_and_names_a_bad_new_one() {
    let helm = helm();
    let run = render(
        &helm,
        RELEASE,
        &[
            "--set",
            "global.imageRegistry=x,global.a.b.c=1,enabled=false",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    for (set, needle) in [
        ("nameOverride=Not_A_Name", "nameOverride"),
        ("fullnameOverride=-x", "fullnameOverride"),
        ("commonLabels.a.b=c", "commonLabels"),
        ("podLabels.x.y=1", "podLabels"),
        ("hostNetwork=maybe", "hostNetwork"),
        ("adminPort=0", "adminPort"),
        ("webhook.port=70000", "port"),
        (
            "webhook.namespaceSelector.matchExpressions[0].key=a,webhook.namespaceSelector.matchExpressions[0].operator=Maybe",
            "operator",
        ),
        ("webhook.objectSelector.matchLabel.a=b", "matchLabel"),
        ("topologySpreadConstraints[0].maxSkew=0", "maxSkew"),
        ("enabled=yes", "enabled"),
        ("watch.secrets=no", "secrets"),
        ("watch.apiGroups[0]=*", "apiGroups"),
        ("watch.aggregateToView=1", "aggregateToView"),
        (
            "monitoring.prometheusRule.certificateExpiryDays=0",
            "certificateExpiryDays",
        ),
    ] {
        let run = render(&helm, RELEASE, &["--set", set]);
        assert!(!run.ok, "--set {set} rendered");
        assert!(
            run.stderr
                .contains("values don't meet the specifications of the schema"),
            "--set {set}: not the schema: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(needle),
            "--set {set}: {needle} not named: {}",
            run.stderr
        );
    }
}

/// What a GitOps tool diffs: `helm template` twice in a row renders the
/// same bytes in the modes that need no cluster (self, cert-manager, external),
/// every optional object on. Only `generated` certificates call `lookup`
/// and generate keys (`genCA`, `genSignedCert`), and only in webhook.yaml:
/// no other template calls anything that reads a cluster, a clock or chance.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn helm_template_renders_the_same_bytes_twice_without_lookup() {
    let helm = helm();
    let vap =
        std::fs::read_to_string(manifests().join("vap/validatingadmissionpolicy.yaml")).unwrap();
    let vap_file = values_file(&vap);
    let everything = [
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true",
        "--set",
        "backstop.enabled=true",
        "--set-file",
    ];
    let vap_arg = format!(
        "backstop.validatingAdmissionPolicy={}",
        vap_file.path().display()
    );
    for mode in ["self", "cert-manager", "external"] {
        let source = format!("certificates.source={mode}");
        let mut args = everything.to_vec();
        args.push(&vap_arg);
        args.extend(["--set", &source]);
        let first = render(&helm, RELEASE, &args);
        assert!(first.ok, "{mode}: {}", first.stderr);
        let second = render(&helm, RELEASE, &args);
        assert_eq!(first.stdout, second.stdout, "{mode}: two renders differ");
        assert!(first.stdout.len() > 10_000);
    }
    // generated: a new CA each time, as docs/install.md says.
    let generated = ["--set", "certificates.source=generated"];
    let first = render(&helm, RELEASE, &generated);
    let second = render(&helm, RELEASE, &generated);
    assert_ne!(first.stdout, second.stdout);

    const UNSTABLE: [&str; 12] = [
        "lookup",
        "genCA",
        "genSignedCert",
        "genSelfSignedCert",
        "genPrivateKey",
        "randAlphaNum",
        "randAlpha",
        "randNumeric",
        "randAscii",
        "randBytes",
        "uuidv4",
        "now",
    ];
    let mut using = BTreeSet::new();
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let source = std::fs::read_to_string(&path).unwrap();
        // Template actions only, not the YAML comments around them.
        let mut rest = source.as_str();
        while let Some(at) = rest.find("{{") {
            let end = rest[at..].find("}}").map_or(rest.len(), |e| at + e);
            let action = &rest[at..end];
            let action = action.split("/*").next().unwrap();
            for word in action.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if UNSTABLE.contains(&word) {
                    using.insert((
                        path.file_name().unwrap().to_string_lossy().into_owned(),
                        word.to_string(),
                    ));
                }
            }
            rest = &rest[end..];
        }
    }
    let files: BTreeSet<&str> = using.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, BTreeSet::from(["webhook.yaml"]), "{using:?}");
}

/// Every object `helm template` renders, hook Jobs and cluster-scoped
/// objects included, carries the release's labels: `kubectl get -l
/// app.kubernetes.io/instance=RELEASE` finds them all, and the manual
/// uninstall of docs/install.md deletes them by it (`docs.rs`).
pub(crate) fn everything(helm: &Path, mode: &str) -> Vec<Value> {
    let vap =
        std::fs::read_to_string(manifests().join("vap/validatingadmissionpolicy.yaml")).unwrap();
    let vap_file = values_file(&vap);
    let source = format!("certificates.source={mode}");
    let vap_arg = format!(
        "backstop.validatingAdmissionPolicy={}",
        vap_file.path().display()
    );
    let run = render(
        helm,
        RELEASE,
        &[
            "--set",
            &source,
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true",
            "--set",
            "backstop.enabled=true",
            "--set-file",
            &vap_arg,
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    documents(&run.stdout).unwrap()
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn every_object_carries_the_release_labels() {
    let helm = helm();
    for mode in ["generated", "cert-manager"] {
        let objects = everything(&helm, mode);
        let kinds: BTreeSet<&str> = objects.iter().map(|o| text(o, "/kind")).collect();
        for kind in [
            "Job",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "NetworkPolicy",
            "PrometheusRule",
        ] {
            assert!(
                kinds.contains(kind),
                "{mode}: no {kind} rendered: {kinds:?}"
            );
        }
        for object in &objects {
            let labels = labels(object);
            for (key, value) in [
                ("app.kubernetes.io/instance", RELEASE),
                ("app.kubernetes.io/name", "finalizer-guard"),
                ("app.kubernetes.io/managed-by", "Helm"),
            ] {
                assert_eq!(
                    labels.get(key).map(String::as_str),
                    Some(value),
                    "{mode}: {} lacks {key}={value}",
                    describe(object)
                );
            }
            // A pod template's labels too: `kubectl get pods -l` finds them.
            if let Some(template) = object.pointer("/spec/template/metadata") {
                assert_eq!(
                    template["labels"]["app.kubernetes.io/instance"],
                    RELEASE,
                    "{}",
                    describe(object)
                );
            }
        }
    }
}

/// `watch` reads no Secrets unless asked: by default no rule of its
/// ClusterRoles names Secrets or reads the core group whole; with
/// `watch.secrets=true` one rule reads every type; `watch.apiGroups` adds
/// groups; `watch.aggregateToView=false` drops the aggregated role.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn watch_reads_secrets_only_when_asked() {
    let helm = helm();
    let rules_of = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| text(o, "/kind") == "ClusterRole" && is_watch(o))
            .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let reads_secrets = |rules: &[Value]| {
        rules.iter().any(|r| {
            let groups = r["apiGroups"].as_array().unwrap();
            let resources = r["resources"].as_array().unwrap();
            let verbs = r["verbs"].as_array().unwrap();
            (groups.contains(&json!("")) || groups.contains(&json!("*")))
                && (resources.contains(&json!("secrets")) || resources.contains(&json!("*")))
                && verbs.iter().any(|v| v == "list" || v == "get" || v == "*")
        })
    };
    let default = template(&helm, &[]);
    assert!(!reads_secrets(&rules_of(&default)));
    assert!(find(&default, "ClusterRole finalizer-guard-watch-view").is_some());

    let secrets = template(&helm, &["--set", "watch.secrets=true"]);
    let rules = rules_of(&secrets);
    assert!(reads_secrets(&rules));
    assert_eq!(
        rules[0],
        json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]})
    );
    assert!(
        find(&secrets, "ClusterRole finalizer-guard-watch-view").is_none(),
        "nothing to aggregate when it reads everything"
    );

    let groups = template(
        &helm,
        &[
            "--set",
            "watch.apiGroups={argoproj.io,external-secrets.io}",
            "--set",
            "watch.aggregateToView=false",
        ],
    );
    let rules = rules_of(&groups);
    assert!(!reads_secrets(&rules));
    let whole = rules[1]["apiGroups"].as_array().unwrap();
    assert!(whole.contains(&json!("argoproj.io")) && whole.contains(&json!("external-secrets.io")));
    assert!(find(&groups, "ClusterRole finalizer-guard-watch-view").is_none());
    assert!(find(&groups, "ClusterRoleBinding finalizer-guard-watch-view").is_none());
}

/// The values a fleet's charts take (Kyverno's, cert-manager's) reach the
/// objects a user expects them on: a registry mirror on every image, the
/// security contexts of every pod and container (a key set to null left
/// out, as on OpenShift), the webhook's ServiceAccount's and Service's
/// annotations, objects of the user's templated with the release's names,
/// watch's priority class and labels, and the monitoring objects in the
/// monitoring namespace with their relabelings.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn a_fleets_values_reach_the_objects_they_name() {
    let helm = helm();
    let values = values_file(
        r#"
global:
  imageRegistry: mirror.example.com:5000/cache
image:
  repository: ghcr.io/finalizer-guard/finalizer-guard
  tag: 1.2.3
podSecurityContext:
  runAsUser: null
  runAsGroup: null
  fsGroup: null
  supplementalGroups: [4000]
securityContext:
  runAsUser: null
  runAsGroup: null
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::111122223333:role/guard
service:
  annotations:
    example.com/mesh: skip
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: '{{ include "finalizer-guard.fullname" . }}-extra'
      namespace: '{{ .Release.Namespace }}'
    data:
      release: '{{ .Release.Name }}'
  - |
    apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata:
      name: {{ include "finalizer-guard.fullname" . }}-oncall-crossplane
      labels:
        finalizer-guard.io/aggregate-to-oncall: {{ include "finalizer-guard.fullname" . }}-oncall
    rules:
      - apiGroups: [aws.upbound.io]
        resources: ["*"]
        verbs: [get, list, patch]
podLabels:
  team: platform
watch:
  priorityClassName: platform-low
  podLabels:
    team: watchers
    tier: observe
monitoring:
  serviceMonitor:
    enabled: true
    namespace: monitoring
    relabelings: [{targetLabel: cluster, replacement: prod-eu-1}]
    metricRelabelings: [{sourceLabels: [__name__], regex: "go_.*", action: drop}]
  podMonitor:
    enabled: true
    namespace: monitoring
    relabelings: [{targetLabel: cluster, replacement: prod-eu-1}]
  prometheusRule:
    enabled: true
    namespace: monitoring
"#,
    );
    let run = render(&helm, RELEASE, &["-f", values.path().to_str().unwrap()]);
    assert!(run.ok, "{}", run.stderr);
    let objects = documents(&run.stdout).unwrap();
    check_all(
        &objects
            .iter()
            .filter(|o| !text(o, "/apiVersion").starts_with("monitoring.coreos.com"))
            .cloned()
            .collect::<Vec<_>>(),
    );

    // Every pod: the mirror's image, and the platform's user and group.
    let mut pods = 0;
    for object in &objects {
        let pod = match text(object, "/kind") {
            "Deployment" | "Job" => &object["spec"]["template"]["spec"],
            _ => continue,
        };
        pods += 1;
        let id = describe(object);
        assert_eq!(
            pod["securityContext"],
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}, "supplementalGroups": [4000]}),
            "{id}"
        );
        for container in pod["containers"].as_array().unwrap() {
            assert_eq!(
                container["image"],
                "mirror.example.com:5000/cache/finalizer-guard/finalizer-guard:1.2.3",
                "{id}: the registry replaced, the path kept"
            );
            assert_eq!(
                container["securityContext"],
                json!({"runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                       "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}),
                "{id}"
            );
        }
    }
    assert_eq!(pods, 3, "the webhook, watch and the policy check");

    let sa = find(
        &objects,
        &format!("ServiceAccount {NAMESPACE}/finalizer-guard"),
    )
    .unwrap();
    assert_eq!(
        sa["metadata"]["annotations"],
        json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/guard"})
    );
    let watch_sa = find(
        &objects,
        &format!("ServiceAccount {NAMESPACE}/finalizer-guard-watch"),
    )
    .unwrap();
    assert!(
        watch_sa["metadata"]["annotations"].is_null(),
        "the webhook's only"
    );
    let service = find(&objects, &format!("Service {NAMESPACE}/finalizer-guard")).unwrap();
    assert_eq!(
        service["metadata"]["annotations"],
        json!({"example.com/mesh": "skip"})
    );

    let extra = find(
        &objects,
        &format!("ConfigMap {NAMESPACE}/finalizer-guard-extra"),
    )
    .expect("an extraObjects map, its names templated");
    assert_eq!(extra["data"]["release"], RELEASE);
    let crossplane = find(&objects, "ClusterRole finalizer-guard-oncall-crossplane")
        .expect("an extraObjects string, templated");
    let oncall = find(&objects, "ClusterRole finalizer-guard-oncall").unwrap();
    let selects = &oncall["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"];
    assert_eq!(
        crossplane["metadata"]["labels"]["finalizer-guard.io/aggregate-to-oncall"],
        selects["finalizer-guard.io/aggregate-to-oncall"],
        "a ClusterRole of the user's adds to the on-call role by its label"
    );

    let watch = objects
        .iter()
        .find(|o| text(o, "/kind") == "Deployment" && is_watch(o))
        .unwrap();
    let template = &watch["spec"]["template"];
    assert_eq!(template["spec"]["priorityClassName"], "platform-low");
    let watch_labels = labels(template);
    assert_eq!(
        watch_labels["team"], "watchers",
        "watch.podLabels win over podLabels"
    );
    assert_eq!(watch_labels["tier"], "observe");
    assert_eq!(watch_labels["app.kubernetes.io/component"], "watch");
    let webhook = webhook_deployment(&objects);
    assert_eq!(labels(&webhook["spec"]["template"])["team"], "platform");
    assert!(!labels(&webhook["spec"]["template"]).contains_key("tier"));
    assert!(webhook["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical");

    // The monitoring objects where the Prometheus looks, selecting the release's namespace.
    let monitors: Vec<&Value> = objects
        .iter()
        .filter(|o| text(o, "/apiVersion").starts_with("monitoring.coreos.com"))
        .collect();
    assert_eq!(
        monitors.len(),
        5,
        "two ServiceMonitors, two PodMonitors, the rule"
    );
    for monitor in monitors {
        let id = describe(monitor);
        assert_eq!(text(monitor, "/metadata/namespace"), "monitoring", "{id}");
        let endpoint = match text(monitor, "/kind") {
            "ServiceMonitor" => &monitor["spec"]["endpoints"][0],
            "PodMonitor" => &monitor["spec"]["podMetricsEndpoints"][0],
            _ => continue,
        };
        assert_eq!(
            monitor["spec"]["namespaceSelector"],
            json!({"matchNames": [NAMESPACE]}),
            "{id}"
        );
        assert_eq!(
            endpoint["relabelings"],
            json!([{"targetLabel": "cluster", "replacement": "prod-eu-1"}]),
            "{id}"
        );
        if text(monitor, "/kind") == "ServiceMonitor" {
            assert_eq!(
                endpoint["metricRelabelings"],
                json!([{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}]),
                "{id}"
            );
        } else {
            assert!(endpoint.get("metricRelabelings").is_none(), "{id}");
        }
    }
    let rule = objects
        .iter()
        .find(|o| text(o, "/kind") == "PrometheusRule")
        .unwrap();
    let expr = rule["spec"]["groups"][0]["rules"][0]["expr"]
        .as_str()
        .unwrap();
    assert!(
        expr.contains(&format!("namespace=\"{NAMESPACE}\"")),
        "the alerts select the release's namespace: {expr}"
    );

    // A repository without a registry gets the mirror in front.
    let run = render(
        &helm,
        RELEASE,
        &[
            "--set",
            "global.imageRegistry=mirror.example.com",
            "--show-only",
            "templates/deployment.yaml",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    let deployment = &documents(&run.stdout).unwrap()[0];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "mirror.example.com/finalizer-guard:0.1.0"
    );
}

/// The defaults of the new values render what the chart rendered before
/// them: the security contexts field by field (the restricted Pod Security
/// Standard) and no annotations, objects or relabelings of their own.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_fleets_values_default_to_what_the_chart_rendered_before() {
    let helm = helm();
    let objects = template(
        &helm,
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
        ],
    );
    for object in &objects {
        let pod = match text(object, "/kind") {
            "Deployment" | "Job" => &object["spec"]["template"]["spec"],
            _ => continue,
        };
        let id = describe(object);
        assert_eq!(
            pod["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                   "seccompProfile": {"type": "RuntimeDefault"}}),
            "{id}"
        );
        assert_eq!(
            pod["containers"][0]["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                   "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}),
            "{id}"
        );
        assert_eq!(
            pod["containers"][0]["image"], "finalizer-guard:0.1.0",
            "{id}"
        );
        if is_watch(object) {
            assert!(pod.get("priorityClassName").is_none(), "{id}");
        }
    }
    for object in &objects {
        let id = describe(object);
        if matches!(text(object, "/kind"), "ServiceAccount" | "Service") {
            assert!(object["metadata"].get("annotations").is_none(), "{id}");
        }
        if text(object, "/apiVersion").starts_with("monitoring.coreos.com") {
            assert_eq!(text(object, "/metadata/namespace"), NAMESPACE, "{id}");
            let endpoints = object["spec"]
                .get("endpoints")
                .or_else(|| object["spec"].get("podMetricsEndpoints"));
            if let Some(endpoints) = endpoints {
                assert!(endpoints[0].get("relabelings").is_none(), "{id}");
                assert!(endpoints[0].get("metricRelabelings").is_none(), "{id}");
            }
        }
    }
}
