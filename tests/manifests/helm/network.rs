//! The NetworkPolicy: kube-apiserver and the scraper admitted, nothing else.

use super::*;

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
