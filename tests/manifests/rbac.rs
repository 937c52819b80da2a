//! RBAC: the webhook's Events only, the on-call Role granting what the
//! cluster commands call and no more, the runbook's commands as the binary
//! takes them.

use super::*;

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
    let runbook = std::fs::read_to_string(repository::path("docs/runbook.md")).unwrap();
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
