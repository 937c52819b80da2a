//! The docs say what the chart renders: docs/security.md's table of the
//! ClusterRoles and list of the approval annotations, docs/install.md's manual
//! uninstall, and every alert name the docs and values mention.
//! Needs helm, as `helm.rs` (`FG_HELM`).

use super::fleet::everything;
use super::helm::{chart, find, helm, template};
use super::*;

fn doc(path: &str) -> String {
    std::fs::read_to_string(repository::path(path)).unwrap()
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

/// A rule of a Role or ClusterRole, as docs/security.md's table has it:
/// kind, name (the release's full name as `NAME`), groups, resources,
/// resourceNames, verbs. An aggregated role is one row, `aggregated`; the
/// on-call role's rules on the types it may release are one row.
type RuleRow = (
    String,
    String,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

const RELEASABLE: &str = "(oncallRole.releasableResources)";

fn rendered_rules(objects: &[Value]) -> BTreeSet<RuleRow> {
    let named = |s: &str| s.replacen("finalizer-guard", "NAME", 1);
    let mut rendered = BTreeSet::new();
    for role in objects
        .iter()
        .filter(|o| matches!(text(o, "/kind"), "Role" | "ClusterRole"))
    {
        let kind = text(role, "/kind").to_string();
        let name = named(text(role, "/metadata/name"));
        if role.get("aggregationRule").is_some() {
            rendered.insert((
                kind,
                name,
                vec!["aggregated".to_string()],
                vec![],
                vec![],
                vec![],
            ));
            continue;
        }
        for rule in role["rules"].as_array().unwrap() {
            let verbs = strings(&rule["verbs"]);
            let (groups, resources) = match rule.get("nonResourceURLs") {
                Some(urls) => (vec!["(non-resource)".to_string()], strings(urls)),
                None => (strings(&rule["apiGroups"]), strings(&rule["resources"])),
            };
            if name == "NAME-oncall-rules" && verbs == ["get", "list", "patch"] {
                rendered.insert((
                    kind.clone(),
                    name.clone(),
                    vec![RELEASABLE.to_string()],
                    vec![],
                    vec![],
                    verbs,
                ));
                continue;
            }
            let resource_names = strings(&rule["resourceNames"])
                .iter()
                .map(|n| named(n))
                .collect();
            rendered.insert((
                kind.clone(),
                name.clone(),
                groups,
                resources,
                resource_names,
                verbs,
            ));
        }
    }
    rendered
}

fn documented_rules(rows: &[Vec<String>]) -> BTreeSet<RuleRow> {
    let documented: BTreeSet<RuleRow> = rows
        .iter()
        .map(|cells| {
            let kind = cells[0].clone();
            let name = ticked(&cells[1]).remove(0);
            let verbs = ticked(&cells[4]);
            match cells[2].as_str() {
                "aggregated" => (
                    kind,
                    name,
                    vec!["aggregated".to_string()],
                    vec![],
                    vec![],
                    vec![],
                ),
                "(non-resource)" => (
                    kind,
                    name,
                    vec!["(non-resource)".to_string()],
                    ticked(&cells[3]),
                    vec![],
                    verbs,
                ),
                groups if groups.contains("oncallRole.releasableResources") => (
                    kind,
                    name,
                    vec![RELEASABLE.to_string()],
                    vec![],
                    vec![],
                    verbs,
                ),
                groups => {
                    let (resources, names) = match cells[3].split_once(" named ") {
                        Some((resources, names)) => (ticked(resources), ticked(names)),
                        None => (ticked(&cells[3]), vec![]),
                    };
                    (kind, name, ticked(groups), resources, names, verbs)
                }
            }
        })
        .collect();
    assert_eq!(documented.len(), rows.len(), "a row twice");
    documented
}

fn assert_same_rules(rendered: &BTreeSet<RuleRow>, documented: &BTreeSet<RuleRow>, what: &str) {
    let missing: Vec<_> = rendered.difference(documented).collect();
    let extra: Vec<_> = documented.difference(rendered).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: rendered but not in docs/security.md: {missing:#?}\nin docs/security.md but not rendered: {extra:#?}"
    );
}

/// docs/security.md, "What the chart grants": a row for each rule of each
/// Role and ClusterRole the chart renders by default (groups, resources,
/// resourceNames and verbs exactly), one for each aggregated ClusterRole,
/// and no other; the certificates' Role and ClusterRole are `self`'s only.
/// Every binding binds a role of the table, and none the on-call role.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_security_guide_lists_every_rule_of_every_role_the_chart_renders() {
    let helm = helm();
    let security = doc("docs/security.md");
    let section = section(&security, "## What the chart grants");
    let rows = table(section);
    assert!(
        rows.iter().all(|r| r.len() == 6),
        "kind, name, apiGroups, resources, verbs, why: {rows:#?}"
    );
    let documented = documented_rules(&rows);
    let default = template(&helm, &[]);
    let rendered = rendered_rules(&default);
    assert!(rendered.len() >= 14, "{rendered:?}");
    assert!(
        rendered.iter().any(|r| r.0 == "Role"),
        "the default (certificates.source self) renders a Role"
    );
    assert_same_rules(&rendered, &documented, "the default values");
    let self_only: BTreeSet<RuleRow> = documented
        .iter()
        .filter(|r| r.1 == "NAME-certificates")
        .cloned()
        .collect();
    assert_eq!(self_only.len(), 2, "{self_only:#?}");
    let cert_manager = template(&helm, &["--set", "certificates.source=cert-manager"]);
    assert_same_rules(
        &rendered_rules(&cert_manager),
        &documented.difference(&self_only).cloned().collect(),
        "certificates.source cert-manager",
    );
    let names: BTreeSet<String> = documented.iter().map(|r| r.1.clone()).collect();
    for binding in default
        .iter()
        .filter(|o| matches!(text(o, "/kind"), "RoleBinding" | "ClusterRoleBinding"))
    {
        let bound = text(binding, "/roleRef/name").replacen("finalizer-guard", "NAME", 1);
        assert!(
            names.contains(&bound),
            "{}: binds {bound}",
            describe(binding)
        );
        assert!(!bound.contains("oncall"), "{}", describe(binding));
    }
    assert!(
        section.contains("No RoleBinding or ClusterRoleBinding but those named"),
        "the guide says which bindings there are"
    );
}

/// Every Markdown file of the docs, the READMEs and the chart's README.
fn all_docs() -> Vec<PathBuf> {
    let root = repository::root();
    let mut files = vec![
        root.join("README.md"),
        root.join("DEVELOPMENT.md"),
        chart().join("README.md"),
    ];
    files.extend(
        files_under(&root.join("docs"))
            .into_iter()
            .filter(|f| f.extension() == Some(OsStr::new("md"))),
    );
    files
}

/// What the docs name as the default `certificates.source`: "default
/// `certificates.source: X`", a table's default column, and "**`X`** (the
/// default)" among the sources.
fn default_source_claims(text: &str) -> Vec<String> {
    let mut claims = Vec::new();
    for (at, _) in text.match_indices("certificates.source: ") {
        let word: String = text[at + "certificates.source: ".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let before = &text[at.saturating_sub(40)..at];
        if before.contains("default") && !word.is_empty() {
            claims.push(word);
        }
    }
    for (at, _) in text.match_indices("** (the default)") {
        let before = &text[..at];
        let start = before.rfind("**`").expect("**`X`** (the default)") + 3;
        claims.push(before[start..].trim_end_matches('`').to_string());
    }
    let mut header: Option<usize> = None;
    for line in text.lines() {
        if !line.starts_with('|') {
            header = None;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        match header {
            None => {
                header = Some(
                    cells
                        .iter()
                        .position(|c| *c == "default")
                        .unwrap_or(usize::MAX),
                )
            }
            Some(column) => {
                if ticked(cells[0]).first().map(String::as_str) == Some("certificates.source")
                    && let Some(cell) = cells.get(column)
                {
                    claims.push(ticked(cell).remove(0).trim_matches('"').to_string());
                }
            }
        }
    }
    claims
}

/// Every doc that names the default certificate source names the one
/// values.yaml sets (the chart's `self`).
#[test]
fn the_docs_name_the_default_certificate_source_values_yaml_sets() {
    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let default = values["certificates"]["source"].as_str().unwrap();
    let mut claims = Vec::new();
    for file in all_docs() {
        for claim in default_source_claims(&std::fs::read_to_string(&file).unwrap()) {
            claims.push((file.clone(), claim));
        }
    }
    assert!(claims.len() >= 4, "{claims:#?}");
    let wrong: Vec<_> = claims.iter().filter(|(_, c)| c != default).collect();
    assert!(
        wrong.is_empty(),
        "the default is {default}, not: {wrong:#?}"
    );
    // The reader itself: each form is found.
    assert_eq!(
        default_source_claims(
            "the chart's default `certificates.source: self`\n- **`generated`** (the default): x\n\n| value | default | what |\n|---|---|---|\n| `certificates.source` | `generated` | x |\n"
        ),
        ["self", "generated", "generated"]
    );
}

/// What a doc says the Events ClusterRole grants is what it grants: a
/// sentence naming `finalizer-guard-events` (or `NAME-events`) lists its
/// verbs, and no doc says the chart grants one of them alone.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_docs_say_the_verbs_the_events_role_has() {
    let helm = helm();
    let objects = template(&helm, &[]);
    let role = find(&objects, "ClusterRole finalizer-guard-events").unwrap();
    let granted: BTreeSet<String> = strings(&role["rules"][0]["verbs"]).into_iter().collect();
    // Not `watch`: the docs tick it as the command's name too.
    const VERBS: [&str; 6] = ["get", "list", "create", "update", "patch", "delete"];
    let mut checked = 0;
    for file in all_docs() {
        // Prose only: a table's rows hold many roles' verbs.
        let text: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('|'))
            .collect::<Vec<_>>()
            .join(" ");
        for sentence in text.split(". ") {
            if sentence.contains("finalizer-guard-events`") || sentence.contains("NAME-events`") {
                let said: BTreeSet<String> = ticked(sentence)
                    .into_iter()
                    .filter(|w| VERBS.contains(&w.as_str()))
                    .collect();
                if !said.is_empty() {
                    checked += 1;
                    assert_eq!(said, granted, "{}: {sentence}", file.display());
                }
            }
            if let Some(at) = sentence.find(" alone, as ") {
                let after = &sentence[at..];
                if after.contains("chart grant") {
                    let before = &sentence[..at];
                    let clause = &before[before.rfind(['(', ',', ':']).map_or(0, |i| i + 1)..];
                    let said: BTreeSet<String> = ticked(clause).into_iter().collect();
                    assert_eq!(said, granted, "{}: {sentence}", file.display());
                }
            }
        }
    }
    assert!(checked >= 2, "{checked}");
}

/// Where the image comes from, said the same way everywhere: values.yaml
/// points at the release's signed image (docs/install.md), never says there
/// is none; a release's chart (scripts/release/chart.py) names it in
/// values.yaml and in the README's table, and its notes ask to verify it
/// rather than build one.
#[test]
#[ignore = "needs helm (FG_HELM) and python3: see .ci/run"]
fn the_image_is_described_the_same_in_values_docs_and_a_releases_chart() {
    let helm = helm();
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let image = values.find("\nimage:\n").unwrap();
    let comment = &values[values[..image].rfind("\n\n").unwrap()..image];
    let note = &values[image..values[image..].find("\n\n").unwrap() + image];
    for said in [comment, note] {
        assert!(
            !said.to_lowercase().contains("no published image"),
            "{said}"
        );
    }
    assert!(
        note.contains("docs/install.md") && note.contains("signed"),
        "{note}"
    );
    let install = doc("docs/install.md");
    assert!(install.contains("The packaged chart's default image is the published one"));

    let copy = tempfile::tempdir().unwrap();
    let released = copy.path().join("finalizer-guard");
    copy_dir(&chart(), &released);
    let run = Command::new("python3")
        .arg(repository::path("scripts/release/chart.py"))
        .args([
            released.to_str().unwrap(),
            "0.1.0",
            "ghcr.io/finalizer-guard/finalizer-guard",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "- kind: added\n  description: x",
            "",
            "https://github.com/finalizer-guard/finalizer-guard",
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let readme = std::fs::read_to_string(released.join("README.md")).unwrap();
    assert!(
        readme.contains(
            "| `image.repository` | string | `\"ghcr.io/finalizer-guard/finalizer-guard\"` |"
        ),
        "the README's table names the release's image"
    );
    let run = super::helm::run_helm(
        &helm,
        &[
            "template",
            "finalizer-guard",
            released.to_str().unwrap(),
            "--show-only",
            "templates/deployment.yaml",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("image: \"ghcr.io/finalizer-guard/finalizer-guard:0.1.0\""),
        "{}",
        run.stdout
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// A heading's anchor, as GitHub makes it: lower case, spaces to hyphens,
/// everything but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut in_code = false;
    markdown
        .lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            !in_code && l.starts_with('#')
        })
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// Every alert carries a runbook_url into docs/runbook.md, at the chart's
/// version by default or under `monitoring.prometheusRule.runbookUrl`,
/// whose anchor is a section of it; every link into the runbook from the
/// docs lands on a section too.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn every_alert_has_a_runbook_url_whose_section_exists() {
    let helm = helm();
    let runbook = anchors(&doc("docs/runbook.md"));
    assert!(runbook.contains("what-each-step-needs"), "{runbook:?}");
    let chart_yaml: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    let version = chart_yaml["appVersion"].as_str().unwrap();
    for (args, base) in [
        (
            vec![],
            format!(
                "https://github.com/finalizer-guard/finalizer-guard/blob/v{version}/docs/runbook.md"
            ),
        ),
        (
            vec![
                "--set",
                "monitoring.prometheusRule.runbookUrl=https://wiki.example.com/fg/runbook",
            ],
            "https://wiki.example.com/fg/runbook".to_string(),
        ),
    ] {
        let mut all = vec!["--set", "monitoring.prometheusRule.enabled=true"];
        all.extend(args);
        let objects = template(&helm, &all);
        let rule = objects
            .iter()
            .find(|o| text(o, "/kind") == "PrometheusRule")
            .unwrap();
        let mut alerts = 0;
        for alert in rule["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
        {
            alerts += 1;
            let name = alert["alert"].as_str().unwrap();
            let url = alert["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            let (page, section) = url.split_once('#').unwrap();
            assert_eq!(page, base, "{name}");
            assert_eq!(section, name.to_lowercase(), "{name}");
            assert!(
                runbook.contains(section),
                "docs/runbook.md has no section #{section} for {name}"
            );
        }
        assert_eq!(alerts, 14);
    }
    for file in all_docs() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("runbook.md#") {
            let section: String = text[at + "runbook.md#".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            assert!(
                runbook.contains(&section),
                "{} links to runbook.md#{section}",
                file.display()
            );
        }
    }
    let own = doc("docs/runbook.md");
    for (at, _) in own.match_indices("](#") {
        let section: String = own[at + 3..].chars().take_while(|c| *c != ')').collect();
        assert!(
            runbook.contains(&section),
            "docs/runbook.md links to #{section}"
        );
    }
}

/// The chart's README: its table of values is what scripts/chart-readme.py
/// writes from the schema and values.yaml, so a value added, removed,
/// described anew or given another default shows there.
#[test]
#[ignore = "needs helm (FG_HELM) and python3: see .ci/run"]
fn the_charts_readme_lists_every_value_as_the_schema_describes_it() {
    let helm = helm();
    let root = repository::root();
    let run = Command::new("python3")
        .arg(root.join("scripts/chart-readme.py"))
        .arg("--check")
        .env("FG_HELM", &helm)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    for value in [
        "global.imageRegistry",
        "podSecurityContext",
        "securityContext",
        "serviceAccount.annotations",
        "service.annotations",
        "extraObjects",
        "watch.priorityClassName",
        "watch.podLabels",
        "monitoring.serviceMonitor.namespace",
        "monitoring.serviceMonitor.relabelings",
        "monitoring.serviceMonitor.metricRelabelings",
        "monitoring.prometheusRule.namespace",
        "oncallRole.releasableResources",
        "certificates.source",
    ] {
        assert!(
            readme.contains(&format!("| `{value}` |")),
            "README.md lacks {value}"
        );
    }
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

/// docs/install.md, "Uninstalling": without a Helm release, the
/// commands delete every kind the chart renders (every optional object on,
/// hooks included), cluster-scoped kinds without a namespace, the others in
/// the release's namespace, by the label every object carries; from
/// `manifests/`, every cluster-scoped kind the base and the backstop create.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_manual_uninstall_deletes_every_kind_the_chart_creates() {
    let helm = helm();
    let guide = doc("docs/install.md");
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
                "docs/install.md's uninstall leaves {} behind: {commands:#?}",
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

/// docs/security.md's account of the matchConditions names the four
/// approval annotations the webhook configuration sends, as rendered.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn the_security_guide_names_every_approval_annotation_the_webhook_is_sent() {
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
    let guide = doc("docs/security.md");
    let bullet = guide
        .split("\n- ")
        .find(|b| b.starts_with("`removes-finalizer-or-writes-approval`"))
        .expect("the bullet on removes-finalizer-or-writes-approval");
    assert!(bullet.contains("four"), "{bullet}");
    for key in keys {
        assert!(
            bullet.contains(&format!("`{key}`")),
            "docs/security.md does not name {key}: {bullet}"
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
    let root = repository::root();
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
    let root = repository::root();
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
