//! The on-call Role: rendered unbound and optional, reading all but
//! Secrets, releasing only the listed types.

use super::*;

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
