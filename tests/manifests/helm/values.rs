//! The chart's values and what they change: presets, names, the cluster
//! name, the failure policy, values from earlier releases, extra values of
//! the webhook's container, any release name.

use super::*;

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
