//! The ValidatingWebhookConfiguration: the contract's rules, matched as
//! kube-apiserver matches them, and matchConditions skipping exactly the
//! built-in controllers and naming the approval annotations.

use super::*;

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

/// The deployment guide names every identity the shipped matchConditions
/// let past the webhook: what an operator reads is what is skipped.
#[test]
fn the_security_guide_names_every_skipped_identity() {
    let guide = std::fs::read_to_string(repository::path("docs/security.md")).unwrap();
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
