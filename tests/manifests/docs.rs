//! The docs say what the chart renders: docs/security.md's table of the
//! ClusterRoles, docs/deployment.md's manual uninstall and its list of the
//! approval annotations, and every alert name the docs and values mention.
//! Needs helm, as `helm.rs` (`FG_HELM`).

use super::fleet::everything;
use super::helm::{chart, helm, template};
use super::*;

fn doc(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The text of the section under `heading` (a whole `## ...` line), up to
/// the next heading of its level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"))
        + 1;
    let level = heading.split(' ').next().unwrap();
    let body = &text[start + heading.len()..];
    let end = body
        .match_indices(&format!("\n{level} "))
        .next()
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

/// The `backticked` items of a table cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| {
            if s == "\"\"" {
                String::new()
            } else {
                s.to_string()
            }
        })
        .collect()
}

/// The rows of the first Markdown table in `text`, as cells.
fn table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

/// docs/security.md, "What the chart grants": a row for each rule of each
/// ClusterRole the chart renders by default (groups, resources and verbs
/// exactly), one for each aggregated ClusterRole, and no other; no Role.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_security_guide_lists_every_rule_of_every_role_the_chart_renders() {
    let helm = helm();
    let objects = template(&helm, &["--set", "certificates.source=cert-manager"]);
    assert!(
        !objects
            .iter()
            .any(|o| matches!(text(o, "/kind"), "Role" | "RoleBinding")),
        "the guide says the chart renders no Role"
    );
    let mut rendered = BTreeSet::new();
    for role in objects.iter().filter(|o| text(o, "/kind") == "ClusterRole") {
        let name = text(role, "/metadata/name").replacen("finalizer-guard", "NAME", 1);
        if role.get("aggregationRule").is_some() {
            rendered.insert((name, vec!["aggregated".to_string()], vec![], vec![]));
            continue;
        }
        for rule in role["rules"].as_array().unwrap() {
            let (groups, resources) = match rule.get("nonResourceURLs") {
                Some(urls) => (vec!["(non-resource)".to_string()], strings(urls)),
                None => (strings(&rule["apiGroups"]), strings(&rule["resources"])),
            };
            rendered.insert((name.clone(), groups, resources, strings(&rule["verbs"])));
        }
    }
    assert!(rendered.len() >= 10, "{rendered:?}");
    let security = doc("docs/security.md");
    let rows = table(section(&security, "## What the chart grants"));
    let documented: BTreeSet<_> = rows
        .iter()
        .map(|cells| {
            let name = ticked(&cells[0]).remove(0);
            match cells[1].as_str() {
                "aggregated" => (name, vec!["aggregated".to_string()], vec![], vec![]),
                "(non-resource)" => (
                    name,
                    vec!["(non-resource)".to_string()],
                    ticked(&cells[2]),
                    ticked(&cells[3]),
                ),
                groups => (name, ticked(groups), ticked(&cells[2]), ticked(&cells[3])),
            }
        })
        .collect();
    assert_eq!(documented.len(), rows.len(), "a row twice");
    let missing: Vec<_> = rendered.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&rendered).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "rendered but not in docs/security.md: {missing:#?}\nin docs/security.md but not rendered: {extra:#?}"
    );
}

/// The `kubectl ...` commands of the ```sh blocks in `text`, one string
/// each (continuation lines joined).
fn kubectl_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut current = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.split(" #").next().unwrap().trim();
        current.push_str(line.trim_end_matches('\\'));
        current.push(' ');
        if !line.ends_with('\\') {
            if current.trim_start().starts_with("kubectl ") {
                out.push(current.trim().to_string());
            }
            current.clear();
        }
    }
    out
}

/// What one `kubectl [-n NS] delete TYPES -l SELECTOR` deletes: its
/// namespace, types (lower case, singular) and selector.
struct Delete {
    namespace: Option<String>,
    types: BTreeSet<String>,
    selector: Option<String>,
}

fn deletes(commands: &[String]) -> Vec<Delete> {
    commands
        .iter()
        .filter_map(|c| {
            let words: Vec<&str> = c.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "delete")?;
            let flag = |name: &str| {
                words
                    .iter()
                    .position(|w| *w == name)
                    .map(|i| words[i + 1].to_string())
            };
            let types = words[at + 1]
                .split(',')
                .map(str::to_string)
                .collect::<BTreeSet<_>>();
            Some(Delete {
                namespace: flag("-n"),
                types,
                selector: flag("-l"),
            })
        })
        .collect()
}

/// docs/deployment.md, "Uninstalling": without a Helm release, the
/// commands delete every kind the chart renders (every optional object on,
/// hooks included), cluster-scoped kinds without a namespace, the others in
/// the release's namespace, by the label every object carries; from
/// `manifests/`, every cluster-scoped kind the base and the backstop create.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_manual_uninstall_deletes_every_kind_the_chart_creates() {
    let helm = helm();
    let guide = doc("docs/deployment.md");
    let commands = kubectl_commands(section(&guide, "## Uninstalling"));
    let all = deletes(&commands);
    let by_release: Vec<&Delete> = all
        .iter()
        .filter(|d| d.selector.as_deref() == Some("app.kubernetes.io/instance=finalizer-guard"))
        .collect();
    assert!(by_release.len() >= 2, "{commands:#?}");
    for mode in ["generated", "cert-manager"] {
        for object in everything(&helm, mode) {
            let kind = text(&object, "/kind").to_lowercase();
            let cluster_scoped = is_cluster_scoped(text(&object, "/kind"));
            let namespace = text(&object, "/metadata/namespace");
            assert!(
                cluster_scoped || namespace == NAMESPACE || text(&object, "/kind") == "ConfigMap",
                "{}",
                describe(&object)
            );
            assert!(
                by_release.iter().any(|d| d.types.contains(&kind)
                    && (if cluster_scoped {
                        d.namespace.is_none()
                    } else {
                        d.namespace.as_deref() == Some(NAMESPACE)
                    })),
                "docs/deployment.md's uninstall leaves {} behind: {commands:#?}",
                describe(&object)
            );
        }
    }
    let by_name: Vec<&Delete> = all
        .iter()
        .filter(|d| d.selector.as_deref() == Some("app.kubernetes.io/name=finalizer-guard"))
        .collect();
    assert!(
        commands
            .iter()
            .any(|c| c == "kubectl delete namespace finalizer-guard"),
        "{commands:#?}"
    );
    let base = Base::load();
    let mut shipped: Vec<Value> = base.objects.iter().chain(&base.watch).cloned().collect();
    shipped.extend(read_documents(
        &manifests().join("vap/validatingadmissionpolicy.yaml"),
    ));
    for object in shipped
        .iter()
        .filter(|o| is_cluster_scoped(text(o, "/kind")) && text(o, "/kind") != "Namespace")
    {
        assert_eq!(
            text(object, "/metadata/labels/app.kubernetes.io~1name"),
            "finalizer-guard",
            "{}",
            describe(object)
        );
        let kind = text(object, "/kind").to_lowercase();
        assert!(
            by_name.iter().any(|d| d.types.contains(&kind)),
            "the uninstall of manifests/ leaves {} behind",
            describe(object)
        );
    }
}

/// docs/deployment.md's account of the matchConditions names the four
/// approval annotations the webhook configuration sends, as rendered.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_deployment_guide_names_every_approval_annotation_the_webhook_is_sent() {
    let helm = helm();
    let objects = template(&helm, &["--set", "certificates.source=cert-manager"]);
    let webhook = objects
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap();
    let expression = webhook["webhooks"][0]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    let list = &expression[expression.rfind("[\n").unwrap()..];
    let list = &list[..list.find(']').unwrap()];
    let keys: Vec<&str> = list.split('\'').skip(1).step_by(2).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    let guide = doc("docs/deployment.md");
    let bullet = guide
        .split("\n- ")
        .find(|b| b.starts_with("`removes-finalizer-or-writes-approval`"))
        .expect("the bullet on removes-finalizer-or-writes-approval");
    assert!(bullet.contains("four"), "{bullet}");
    for key in keys {
        assert!(
            bullet.contains(&format!("`{key}`")),
            "docs/deployment.md does not name {key}: {bullet}"
        );
    }
}

/// Every alert name the docs, the README and the chart's values and
/// templates mention is an alert the chart renders; the README's and
/// docs/troubleshooting.md's tables list exactly those.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn every_alert_the_docs_name_is_one_the_chart_renders() {
    let helm = helm();
    let objects = template(&helm, &["--set", "monitoring.prometheusRule.enabled=true"]);
    let rule = objects
        .iter()
        .find(|o| text(o, "/kind") == "PrometheusRule")
        .unwrap();
    let alerts: BTreeSet<String> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![
        root.join("README.md"),
        root.join("CHANGELOG.md"),
        chart().join("values.yaml"),
        chart().join("values.schema.json"),
    ];
    files.extend(files_under(&root.join("docs")));
    files.extend(files_under(&chart().join("templates")));
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices("FinalizerGuard") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(
                alerts.contains(&name),
                "{} names {name}, which is no alert the chart renders: {alerts:?}",
                file.display()
            );
        }
    }
    for (file, heading) in [
        ("docs/metrics.md", "## Monitoring in the chart"),
        ("docs/troubleshooting.md", "## Alerts"),
    ] {
        let text = doc(file);
        let body = section(&text, heading);
        let tables: Vec<&str> = body
            .split("\n\n")
            .filter(|p| p.starts_with("| alert"))
            .collect();
        assert_eq!(tables.len(), 1, "{file}: one table of alerts");
        let listed: BTreeSet<String> = table(tables[0])
            .iter()
            .map(|cells| ticked(&cells[0]).remove(0))
            .collect();
        assert_eq!(listed, alerts, "{file}'s table of alerts");
    }
}

/// The webhook's role creates and patches Events: no doc says "create
/// Events, nothing else" of it.
#[test]
fn no_doc_says_the_webhook_only_creates_events() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("DEVELOPMENT.md")];
    files.extend(files_under(&root.join("docs")));
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap().replace('\n', " ");
        assert!(
            !text.contains("(create Events, nothing else)"),
            "{}",
            file.display()
        );
    }
}

/// Every file under `dir`, in its folders too.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
