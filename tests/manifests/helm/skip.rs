//! Skipped identities: a matchCondition of their own, and the kustomize
//! example skipping what the chart skips.

use super::*;

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
    let example = repository::path("examples/kustomize/skip-identities");
    let built = kustomize(&kubectl, &example);
    assert!(skip_condition(&built).is_some());
    assert_same_objects(&chart, &built, &[], "examples/kustomize/skip-identities");
}
