//! The workloads: the Deployment locked down and highly available, `watch`
//! alone under its own read-only account, container arguments `serve`
//! accepts, the Service and PodDisruptionBudget, the policy's ConfigMap.

use super::*;

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
