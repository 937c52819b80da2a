//! The chart's monitoring objects on the real control plane: the
//! prometheus-operator CRDs (ServiceMonitor, PodMonitor, PrometheusRule),
//! from the prometheus-operator Go module pinned in e2e/monitoring/go.mod,
//! are applied to kube-apiserver, and the chart's ServiceMonitors,
//! PodMonitors and PrometheusRule pass `kubectl apply --dry-run=server`
//! (the CRDs' schemas, as kube-apiserver validates them), then are applied
//! and read back; the dashboard's ConfigMap too. An object the schema
//! refuses is refused, so the check can fail.

use serde_json::Value;

use super::harness::{NAMESPACE, env, wait_until};

use crate::common::tools::prometheus_crds as crds;

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and helm: see .ci/run"]
fn monitoring_objects_pass_the_api_servers_validation() {
    let env = env();
    let c = &env.cluster;
    let dir = crds();
    for crd in ["servicemonitors", "podmonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{crd}.yaml"));
        c.admin(&["apply", "--server-side", "-f", file.to_str().unwrap()])
            .ok();
        // Polled: `kubectl wait` fails on a CRD whose status is not written yet.
        wait_until(&format!("CRD {crd} to be established"), 60, || {
            c.get(&["crd", &format!("{crd}.monitoring.coreos.com")])
                .and_then(|crd| crd["status"]["conditions"].as_array().cloned())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|k| k["type"] == "Established" && k["status"] == "True")
                })
        });
    }
    let objects = super::helm::render(
        &env.work,
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "monitoring.grafanaDashboard.enabled=true",
            "--set",
            "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
            // A fleet's relabelings, as the CRDs' schemas take them.
            "--set-json",
            r#"monitoring.serviceMonitor.relabelings=[{"targetLabel":"cluster","replacement":"prod-eu-1"}]"#,
            "--set-json",
            r#"monitoring.serviceMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"go_.*","action":"drop"}]"#,
            "--set-json",
            r#"monitoring.podMonitor.relabelings=[{"targetLabel":"cluster","replacement":"prod-eu-1"}]"#,
            "--show-only",
            "templates/monitoring.yaml",
        ],
    );
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "PodMonitor",
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor",
            "ServiceMonitor"
        ]
    );
    let manifest = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let file = env.work.join("monitoring.json");
    std::fs::write(&file, &manifest).unwrap();
    let dry = c
        .admin(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()])
        .ok();
    assert_eq!(
        dry.stdout.matches("(server dry run)").count(),
        6,
        "{dry:#?}"
    );
    c.admin(&["apply", "-f", file.to_str().unwrap()]).ok();
    let rule = c
        .get(&["prometheusrule", "finalizer-guard", "-n", NAMESPACE])
        .unwrap();
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert!(alerts.contains(&"FinalizerStuck"), "{alerts:?}");
    let monitor = c
        .get(&["servicemonitor", "finalizer-guard-watch", "-n", NAMESPACE])
        .unwrap();
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["metricRelabelings"][0]["action"], "drop",
        "kept by the CRD's schema: {monitor:#}"
    );
    assert_eq!(
        monitor["spec"]["endpoints"][0]["relabelings"][0]["targetLabel"],
        "cluster"
    );
    let alert = &rule["spec"]["groups"][0]["rules"][0];
    assert!(
        alert["annotations"]["runbook_url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/docs/runbook.md#finalizerguardwebhookdown")),
        "{alert:#}"
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );

    // What the schema refuses is refused: a PodMonitor endpoint's interval
    // that is no duration.
    let mut bad: Value = objects
        .iter()
        .find(|o| o["kind"] == "PodMonitor")
        .unwrap()
        .clone();
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = "every minute".into();
    let refused = c.kubectl_in(
        "admin",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&serde_json::to_string(&bad).unwrap()),
    );
    assert_ne!(refused.code, 0, "{refused:#?}");
    assert!(refused.stderr.contains("interval"), "{refused:#?}");

    for object in objects.iter().rev() {
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        let name = object["metadata"]["name"].as_str().unwrap();
        c.admin(&["delete", &kind, name, "-n", NAMESPACE, "--wait=false"])
            .ok();
    }
    wait_until("the monitoring objects to go", 30, || {
        c.get(&["prometheusrule", "finalizer-guard", "-n", NAMESPACE])
            .is_none()
    });
}
