//! The chart's monitoring, proven by the tools its users run:
//!
//! - every dashboard query is PromQL that Prometheus's parser reads
//!   (`promtool promql format`);
//! - the PrometheusRule's alerts pass their unit tests under `promtool test
//!   rules` (`tests/monitoring/rules.test.yaml`), and every alert has one;
//! - every query of the Grafana dashboard names only metrics the binaries
//!   export, read from what `serve`'s and `watch`'s `/metrics` serve.
//!
//! That the API server takes the ServiceMonitors, PodMonitors and
//! PrometheusRule (the prometheus-operator CRDs applied to a real control
//! plane) is `tests/e2e/monitoring.rs`.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use super::helm::{helm, template};

use crate::common::repository::{self, chart};
use crate::common::tools::promtool;

/// The metric names a `/metrics` text exports, from its `# TYPE` lines: a
/// counter `x` as `x_total`, a histogram as `x_bucket`, `x_sum`, `x_count`.
fn exported(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The families registered in a source file's `registry.register("NAME",
/// "HELP", VALUE)` calls, named as `/metrics` names them: a family that has
/// seen nothing yet is not in the exposition, but is exported all the same.
fn registered(source: &str) -> BTreeSet<String> {
    let mut families = String::new();
    let mut rest = source;
    while let Some(at) = rest.find(".register(") {
        rest = &rest[at + ".register(".len()..];
        let mut literals = rest.split('"');
        let (Some(_), Some(name), Some(_), Some(_), Some(after)) = (
            literals.next(),
            literals.next(),
            literals.next(),
            literals.next(),
            literals.next(),
        ) else {
            continue;
        };
        let value = after
            .trim_start_matches([',', ' ', '\n'])
            .split(['.', ',', ')'])
            .next()
            .unwrap()
            .trim();
        let declared = source
            .split_once(&format!("let {value} = "))
            .map(|(_, d)| d.split(';').next().unwrap())
            .unwrap_or_else(|| panic!("no declaration of {value}, registered as {name}"));
        let kind = ["Histogram", "Counter", "Gauge"]
            .into_iter()
            .find(|k| declared.contains(k))
            .unwrap_or_else(|| panic!("{name}: no metric type in {declared}"));
        families.push_str(&format!(
            "# TYPE finalizer_guard_{name} {}\n",
            kind.to_lowercase()
        ));
    }
    exported(&families)
}

/// The metric names a PromQL query reads: its identifiers, without label
/// matchers, grouping clauses, ranges, strings, functions and keywords.
fn metrics_in(query: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 26] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "and",
        "or",
        "unless",
        "inf",
        "nan",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
        "limitk",
    ];
    let mut plain = String::new();
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = None;
    for c in query.chars() {
        match (in_string, c) {
            (Some(q), c) if c == q => in_string = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => in_string = Some(c),
            (None, '{') => depth_brace += 1,
            (None, '}') => depth_brace -= 1,
            (None, '[') => depth_bracket += 1,
            (None, ']') => depth_bracket -= 1,
            (None, c) if depth_brace == 0 && depth_bracket == 0 => plain.push(c),
            _ => plain.push(' '),
        }
    }
    // `by (a, b)`: the labels are no metrics.
    let mut names = BTreeSet::new();
    let mut grouping = false;
    let chars: Vec<char> = plain.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                // `group_left y`: without parentheses, no labels follow.
                grouping = next == Some(&'(');
            } else if !grouping
                && next != Some(&'(')
                && !KEYWORDS.contains(&word.to_lowercase().as_str())
            {
                names.insert(word);
            }
            continue;
        }
        if c == ')' {
            grouping = false;
        }
        i += 1;
    }
    names
}

/// Every `expr` and templating query in a dashboard.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            out.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = variable["query"]["query"].as_str() {
            // label_values(METRIC, LABEL): the metric is the first argument.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split_once(','))
                .map_or(q, |(m, _)| m);
            out.push(inner.to_string());
        }
    }
    out
}

#[test]
fn the_query_reader_finds_metrics_and_nothing_else() {
    assert_eq!(
        metrics_in(
            r#"histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b{"}[5m]))) / on (pod) group_left y"#
        ),
        BTreeSet::from(["x_bucket".to_string(), "y".to_string()])
    );
    assert_eq!(
        metrics_in("min(certificate_expiry{namespace=\"$namespace\"}) - time()"),
        BTreeSet::from(["certificate_expiry".to_string()])
    );
    let names = exported(
        "# TYPE finalizer_guard_a counter\n# TYPE finalizer_guard_b histogram\n# TYPE finalizer_guard_c gauge\n",
    );
    assert!(names.contains("finalizer_guard_a_total") && !names.contains("finalizer_guard_a"));
    assert!(names.contains("finalizer_guard_b_bucket") && names.contains("finalizer_guard_c"));
}

#[test]
fn the_dashboard_queries_only_metrics_the_binaries_export() {
    let root = repository::root();
    let source = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    let mut names = exported(&finalizer_guard::trail::metrics::Metrics::new().encode());
    names.extend(registered(&source("src/trail/metrics.rs")));
    let webhook = names.len();
    names.extend(exported(&finalizer_guard::cluster::watch::exposition()));
    names.extend(registered(&source("src/cluster/watch/metrics.rs")));
    assert!(
        webhook > 5 && names.len() > webhook + 5,
        "both binaries' families: {names:?}"
    );
    for name in [
        "finalizer_guard_reviews_total",
        "finalizer_guard_review_duration_seconds_bucket",
        "finalizer_guard_stuck_objects",
        "finalizer_guard_stuck_oldest_seconds",
    ] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
    let text = std::fs::read_to_string(chart().join("dashboards/finalizer-guard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let queries = queries(&dashboard);
    assert!(queries.len() > 10, "{queries:?}");
    let mut used = BTreeSet::new();
    for query in &queries {
        for metric in metrics_in(query) {
            assert!(
                names.contains(&metric),
                "the dashboard's query {query:?} names {metric}, which neither `serve` nor `watch` exports: {names:?}"
            );
            used.insert(metric);
        }
    }
    for shown in [
        "finalizer_guard_stuck_objects",
        "finalizer_guard_unauthorized_removals_total",
        "finalizer_guard_dropped_total",
    ] {
        assert!(used.contains(shown), "the dashboard shows {shown}");
    }
}

/// Grafana's variables, as Grafana puts them in a query before Prometheus
/// reads it.
fn interpolated(query: &str) -> String {
    query
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "30s")
        .replace("$__range", "1h")
        .replace("$namespace", "finalizer-guard")
        .replace("$cluster", ".*")
}

/// One dashboard for a fleet: a `cluster` variable (All when Prometheus
/// adds no such label), and every panel and the namespace list narrowed by it.
#[test]
fn the_dashboard_has_a_cluster_variable_every_query_follows() {
    let text = std::fs::read_to_string(chart().join("dashboards/finalizer-guard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let names: Vec<&str> = variables
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["datasource", "cluster", "namespace"]);
    let cluster = &variables[1];
    assert_eq!(
        cluster["query"]["query"],
        "label_values(finalizer_guard_build_info, cluster)"
    );
    assert_eq!(cluster["includeAll"], true);
    assert_eq!(
        cluster["allValue"], ".*",
        "All matches series without the label too"
    );
    for query in queries(&dashboard) {
        if query == "finalizer_guard_build_info" {
            continue;
        }
        assert!(
            query.contains(r#"cluster=~"$cluster""#),
            "{query} ignores the cluster variable"
        );
    }
}

#[test]
#[ignore = "needs promtool (FG_PROMTOOL or e2e/monitoring/build.sh): see .ci/run"]
fn every_dashboard_query_is_promql_prometheus_parses() {
    let text = std::fs::read_to_string(chart().join("dashboards/finalizer-guard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let promtool = promtool();
    let queries = queries(&dashboard);
    assert!(queries.len() > 10, "{queries:?}");
    for query in queries {
        let query = interpolated(&query);
        assert!(
            !query.contains('$'),
            "a variable Grafana would fill in: {query}"
        );
        // Prometheus's own parser (`promtool promql format` parses, then prints).
        let out = Command::new(&promtool)
            .args(["--experimental", "promql", "format", &query])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{query}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // And it would refuse a broken one.
    let out = Command::new(&promtool)
        .args(["--experimental", "promql", "format", "sum(rate(x[5m]) by"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_dashboard_ships_in_a_configmap_the_grafana_sidecar_picks_up() {
    let helm = helm();
    let objects = template(
        &helm,
        &["--set", "monitoring.grafanaDashboard.enabled=true"],
    );
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "finalizer-guard-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(cm["data"]["finalizer-guard.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/finalizer-guard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
    let objects = template(&helm, &[]);
    assert!(
        !objects.iter().any(|o| o["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("monitoring.coreos.com"))
            || o["metadata"]["name"] == "finalizer-guard-dashboard"),
        "monitoring is off unless asked for"
    );
}

#[test]
#[ignore = "needs helm (FG_HELM) and promtool (FG_PROMTOOL or e2e/monitoring/build.sh): see .ci/run"]
fn every_alert_passes_its_promtool_unit_tests() {
    let helm = helm();
    let objects = template(&helm, &["--set", "monitoring.prometheusRule.enabled=true"]);
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("the PrometheusRule");
    let groups = &rule["spec"]["groups"];
    let alerts: BTreeSet<String> = groups
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    let tests_file = repository::path("tests/monitoring/rules.test.yaml");
    let tests: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&tests_file).unwrap()).unwrap();
    let tested: BTreeSet<String> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|t| !t["exp_alerts"].as_array().unwrap().is_empty())
        .map(|t| t["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        alerts, tested,
        "every alert fires in a unit test, and only alerts the chart has"
    );

    let dir = tempfile::tempdir().unwrap();
    let rules = serde_json::json!({ "groups": groups });
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::copy(&tests_file, dir.path().join("rules.test.yaml")).unwrap();
    let promtool = promtool();
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "rules.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
