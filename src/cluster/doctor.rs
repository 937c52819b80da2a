//! `finalizer-guard doctor --cluster`: what `mode: enforce` would do to this
//! cluster.
//!
//! Every type the API server serves is listed, metadata only
//! (`PartialObjectMetadataList`), a page at a time; only per-finalizer
//! aggregates are kept, never the objects. Each finalizer found is judged by
//! the policy core (`crate::cluster::owner::owner_at`) for every type and namespace
//! it lives in: a built-in controller, a rule, or nobody but an override.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use serde::Serialize;
use serde_json::Value;

use super::install::PolicySource;
use super::owner::{Owner, RuleElsewhere, RuleOwner};
use super::read;
use super::select::Resolver;
use super::session::{ClusterError, Connection, SessionCluster, SessionUser};
use crate::output::{Format, Printer, chain};
use crate::policy::{Accepts, FinalizerField, Policy, Target};

/// Types listed at once.
const IN_FLIGHT: usize = 4;
/// Types named on a finalizer's text line.
const TYPES_SHOWN: usize = 5;

/// What `doctor --cluster` is asked.
#[derive(Debug, Clone, Default)]
pub struct DoctorCluster {
    /// `--policy`: judge under this file instead of the cluster's policy.
    pub policy: Option<PathBuf>,
    pub format: Format,
    pub connection: Connection,
}

/// A type that could not be listed.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    /// `widgets.example.com/v1`, or an APIService's group/version.
    #[serde(rename = "type")]
    pub type_name: String,
    pub why: String,
}

/// One finalizer living in the cluster.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerLine {
    pub name: String,
    pub field: FinalizerField,
    pub objects: u64,
    /// Objects per type (`pods`, `widgets.example.com`).
    pub types: BTreeMap<String, u64>,
    pub terminating: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_terminating_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_terminating_age: Option<String>,
    /// Who may remove it, where anyone may.
    pub owners: Vec<Owner>,
    /// How many of its objects nobody but an override may release under enforce.
    pub blocked_objects: u64,
    /// Where those are: `TYPE in namespace NS`, or `TYPE` (cluster-scoped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_in: Vec<String>,
    /// Rules that name it for other namespaces or resources than those
    /// blocked: the ones to widen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub elsewhere: Vec<RuleElsewhere>,
    /// The managedFields managers that added it, with how many objects each.
    pub added_by: BTreeMap<String, u64>,
    /// A rule that would let its controller remove it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// The catalog presets whose controllers own it where it is blocked
    /// (`presets: [NAME]` would cover it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub presets: Vec<String>,
    /// Who may release it where no rule or built-in controller may, when an
    /// `override.finalizers` entry matches it: an override with its
    /// reasons, or nobody.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<String>,
}

impl FinalizerLine {
    pub fn blocked(&self) -> bool {
        self.blocked_objects > 0
    }

    fn text(&self) -> String {
        // The types holding most of them; `-o json` has them all.
        let mut by_count: Vec<(&String, &u64)> = self.types.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut types: Vec<String> = by_count
            .iter()
            .take(TYPES_SHOWN)
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        if by_count.len() > TYPES_SHOWN {
            types.push(format!("and {} more types", by_count.len() - TYPES_SHOWN));
        }
        // BLOCKED counts what no rule or built-in controller covers; the
        // objects a rule covers are said apart.
        let count = if self.blocked() && self.blocked_objects < self.objects {
            format!(
                "{} of {} object(s) no rule covers",
                self.blocked_objects, self.objects
            )
        } else {
            format!("{} object(s)", self.objects)
        };
        let mut line = format!(
            "{} {}{}: {count} ({})",
            if self.blocked() { "BLOCKED" } else { "ok     " },
            self.name,
            if self.field == FinalizerField::Spec {
                " (spec.finalizers)"
            } else {
                ""
            },
            types.join(", ")
        );
        if self.terminating > 0 {
            line.push_str(&format!(
                "; {} Terminating, oldest {}",
                self.terminating,
                self.oldest_terminating_age.as_deref().unwrap_or("?")
            ));
        }
        let mut who: Vec<String> = self.owners.iter().map(ToString::to_string).collect();
        if self.blocked() {
            let by = self
                .overrides
                .clone()
                .unwrap_or_else(|| "nobody but an override".into());
            who.push(if self.owners.is_empty() {
                by
            } else {
                format!(
                    "{by} in {} ({} object(s))",
                    self.blocked_in.join(", "),
                    self.blocked_objects
                )
            });
        }
        who.extend(self.elsewhere.iter().map(ToString::to_string));
        line.push_str(&format!("; may remove: {}", who.join("; ")));
        if !self.presets.is_empty() {
            line.push_str(&format!(
                "; preset {} covers it: add `presets: [{}]`",
                self.presets.join(", preset "),
                self.presets.join(", ")
            ));
        }
        if !self.added_by.is_empty() {
            let managers: Vec<String> = self
                .added_by
                .iter()
                .map(|(m, n)| format!("{m} ({n})"))
                .collect();
            line.push_str(&format!("; added by {}", managers.join(", ")));
        }
        line
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDoctorReport {
    /// The kubeconfig context and the API server.
    pub cluster: SessionCluster,
    pub user: SessionUser,
    pub policy: PolicySource,
    pub mode: &'static str,
    pub types_read: usize,
    pub objects_read: u64,
    pub unreadable: Vec<Unreadable>,
    /// Whether every type was read to the end: `false` when anything is
    /// `unreadable`, and then the exit code is never 0.
    pub complete: bool,
    pub finalizers: Vec<FinalizerLine>,
    /// How many finalizers enforce would leave to overrides alone.
    pub blocked: usize,
    pub seconds: f64,
}

impl ClusterDoctorReport {
    /// 0 when every type was read and enforce would block none of the
    /// finalizers in them; 1 when it would block one, or when the read is
    /// incomplete (what was not read was not judged). 2, usage and
    /// connection errors, never comes from a report.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.blocked > 0 || !self.complete)
    }
}

/// What is kept per finalizer while listing: counts, never objects.
#[derive(Debug, Default)]
struct Tally {
    objects: u64,
    types: BTreeMap<String, u64>,
    terminating: u64,
    oldest: Option<jiff::Timestamp>,
    /// (group, resource, namespace) -> objects: what the policy is asked about.
    places: BTreeMap<(String, String, Option<String>), u64>,
    added_by: BTreeMap<String, u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.objects += other.objects;
        for (k, v) in other.types {
            *self.types.entry(k).or_default() += v;
        }
        self.terminating += other.terminating;
        self.oldest = match (self.oldest, other.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (k, v) in other.places {
            *self.places.entry(k).or_default() += v;
        }
        for (k, v) in other.added_by {
            *self.added_by.entry(k).or_default() += v;
        }
    }
}

type Tallies = BTreeMap<(String, FinalizerField), Tally>;

/// One type's listing: its tallies and object count, or why it could not be read.
type Listed = Result<(Tallies, u64), Unreadable>;

/// Counts one object's finalizers of one list.
fn count(
    tallies: &mut Tallies,
    resource: &ApiResource,
    namespaced: bool,
    meta: &ObjectMeta,
    field: FinalizerField,
    finalizers: &[String],
) {
    let mut seen = BTreeSet::new();
    for finalizer in finalizers {
        if !seen.insert(finalizer) {
            continue;
        }
        let tally = tallies.entry((finalizer.clone(), field)).or_default();
        tally.objects += 1;
        *tally.types.entry(read::type_name(resource)).or_default() += 1;
        if let Some(t) = &meta.deletion_timestamp {
            tally.terminating += 1;
            let t = t.0;
            tally.oldest = Some(tally.oldest.map_or(t, |o| o.min(t)));
        }
        let is_namespace = resource.group.is_empty() && resource.plural == "namespaces";
        let namespace = if is_namespace {
            meta.name.clone()
        } else if namespaced {
            meta.namespace.clone()
        } else {
            None
        };
        *tally
            .places
            .entry((resource.group.clone(), resource.plural.clone(), namespace))
            .or_default() += 1;
        if field == FinalizerField::Metadata {
            for manager in added_by(meta, finalizer) {
                *tally.added_by.entry(manager).or_default() += 1;
            }
        }
    }
}

/// The managedFields managers whose fields hold `finalizer` in `metadata.finalizers`.
pub fn added_by(meta: &ObjectMeta, finalizer: &str) -> Vec<String> {
    let key = format!("v:{}", Value::String(finalizer.to_string()));
    let mut out: Vec<String> = Vec::new();
    for entry in meta.managed_fields.iter().flatten() {
        let Some(fields) = &entry.fields_v1 else {
            continue;
        };
        let holds = fields.0["f:metadata"]["f:finalizers"]
            .as_object()
            .is_some_and(|f| f.contains_key(&key));
        if let (true, Some(manager)) = (holds, &entry.manager)
            && !out.contains(manager)
        {
            out.push(manager.clone());
        }
    }
    out
}

/// Lists one type, a page at a time, metadata only.
async fn list_type(client: kube::Client, resource: ApiResource, namespaced: bool) -> Listed {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut tallies = Tallies::new();
    let mut objects = 0;
    let api = &api;
    let listed = read::pages(
        &ListParams::default(),
        |p| async move { api.list_metadata(&p).await },
        |item| {
            objects += 1;
            if let Some(finalizers) = &item.metadata.finalizers {
                let field = FinalizerField::Metadata;
                count(
                    &mut tallies,
                    &resource,
                    namespaced,
                    &item.metadata,
                    field,
                    finalizers,
                );
            }
        },
    )
    .await;
    match listed {
        Ok(()) => Ok((tallies, objects)),
        Err(e) => Err(Unreadable {
            type_name: format!("{} ({})", read::type_name(&resource), resource.api_version),
            why: chain(&e),
        }),
    }
}

/// Namespaces' `spec.finalizers`: a few objects, listed whole.
async fn namespace_spec(client: kube::Client) -> Listed {
    let api: Api<Namespace> = Api::all(client);
    let resource = ApiResource::erase::<Namespace>(&());
    let mut tallies = Tallies::new();
    let api = &api;
    let listed = read::pages(
        &ListParams::default(),
        |p| async move { api.list(&p).await },
        |ns| {
            let spec = ns.spec.as_ref().and_then(|s| s.finalizers.as_deref());
            let finalizers = spec.unwrap_or_default();
            let field = FinalizerField::Spec;
            count(
                &mut tallies,
                &resource,
                false,
                &ns.metadata,
                field,
                finalizers,
            );
        },
    )
    .await;
    match listed {
        Ok(()) => Ok((tallies, 0)),
        Err(e) => Err(Unreadable {
            type_name: "namespaces (spec.finalizers)".into(),
            why: chain(&e),
        }),
    }
}

/// The types to list: one version of each, once. `events.events.k8s.io`
/// serves the core `events` again and is left out.
fn listable(resolver: &Resolver) -> Vec<(ApiResource, ApiCapabilities)> {
    let mut out: Vec<(ApiResource, ApiCapabilities)> = resolver
        .served()
        .into_iter()
        .filter(|(_, caps)| caps.supports_operation(verbs::LIST))
        .filter(|(ar, _)| !(ar.group == "events.k8s.io" && ar.plural == "events"))
        .collect();
    out.sort_by(|a, b| (&a.0.group, &a.0.plural).cmp(&(&b.0.group, &b.0.plural)));
    out
}

/// Judges one finalizer's tally under the policy.
fn judge(policy: &Policy, name: String, field: FinalizerField, tally: Tally) -> FinalizerLine {
    let seen = places(policy, &name, field, &tally);
    let suggestion = (seen.blocked_objects > 0)
        .then(|| suggestion(&name, field, &tally, seen.elsewhere.first(), &seen.presets));
    let overrides = overrides(policy, &name);
    let now = jiff::Timestamp::now();
    FinalizerLine {
        name,
        field,
        objects: tally.objects,
        types: tally.types,
        terminating: tally.terminating,
        oldest_terminating_since: tally.oldest.map(|t| t.to_string()),
        oldest_terminating_age: tally.oldest.map(|t| {
            crate::cluster::liveness::age(
                Duration::try_from(now.duration_since(t)).unwrap_or_default(),
            )
        }),
        owners: seen.owners,
        blocked_objects: seen.blocked_objects,
        blocked_in: seen.blocked_in,
        elsewhere: seen.elsewhere,
        added_by: tally.added_by,
        suggestion,
        presets: seen.presets,
        overrides,
    }
}

/// Who may remove a finalizer where it was seen, and where nobody may.
#[derive(Default)]
struct Places {
    owners: Vec<Owner>,
    blocked_objects: u64,
    blocked_in: Vec<String>,
    presets: Vec<String>,
    elsewhere: Vec<RuleElsewhere>,
}

/// Each place a finalizer was seen, judged by the policy: its owners, and
/// the places nobody may remove it (with the presets and the rules named
/// elsewhere that would cover them).
fn places(policy: &Policy, name: &str, field: FinalizerField, tally: &Tally) -> Places {
    let mut out = Places::default();
    let Places {
        owners,
        blocked_objects,
        blocked_in,
        presets,
        elsewhere,
    } = &mut out;
    for ((group, resource, namespace), n) in &tally.places {
        let target = Target {
            group,
            resource,
            subresource: field.subresource(),
            namespace: namespace.as_deref(),
            name: "",
        };
        match crate::cluster::owner::owner_at(policy, &target, name, field) {
            owner @ (Owner::Unknown | Owner::Elsewhere { .. }) => {
                // Named elsewhere: the rule to widen, said once.
                if let Owner::Elsewhere { rules } = owner {
                    for rule in rules {
                        if !elsewhere.contains(&rule) {
                            elsewhere.push(rule);
                        }
                    }
                }
                *blocked_objects += n;
                if field == FinalizerField::Metadata {
                    for (preset, _) in crate::policy::presets::covering(name, group, resource) {
                        if !presets.contains(&preset.name) {
                            presets.push(preset.name.clone());
                        }
                    }
                }
                let type_name = if group.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}.{group}")
                };
                let place = match namespace {
                    Some(ns) if !(group.is_empty() && resource == "namespaces") => {
                        format!("{type_name} in namespace {ns}")
                    }
                    _ => type_name,
                };
                if !blocked_in.contains(&place) {
                    blocked_in.push(place);
                }
            }
            Owner::Rules { rules } => {
                for rule in rules {
                    merge_rule(owners, rule);
                }
            }
            builtin => {
                if !owners.contains(&builtin) {
                    owners.push(builtin);
                }
            }
        }
    }
    out
}

/// What to add to the policy for a finalizer nobody may remove: widen the
/// rule that names it elsewhere, add the preset that covers it, or a rule.
fn suggestion(
    name: &str,
    field: FinalizerField,
    tally: &Tally,
    elsewhere: Option<&RuleElsewhere>,
    presets: &[String],
) -> String {
    match (elsewhere, presets) {
        // A rule names it elsewhere: widen that one rather than add another.
        (Some(rule), _) => format!(
            "  # {}: widen rule {} (`finalizer-guard policy suggest --merge` does, from the denials)",
            serde_json::to_string(name).unwrap_or_default(),
            rule.rule
        ),
        (None, []) => sketch(name, field, &tally.added_by),
        (None, names) => format!(
            "  # {}: preset {} covers it, add `presets: [{}]` (see `finalizer-guard policy presets`)",
            serde_json::to_string(name).unwrap_or_default(),
            names.join(", preset "),
            names.join(", ")
        ),
    }
}

/// Who the policy's overrides let remove it, when not everyone with a reason.
fn overrides(policy: &Policy, name: &str) -> Option<String> {
    match policy.override_settings.accepts(name) {
        Accepts::Every(_) => None,
        Accepts::Only { reasons, entry } => Some(format!(
            "nobody but an override with {} ({entry})",
            reasons.join(", ")
        )),
        Accepts::Never { entry } => Some(format!("nobody: no override releases it ({entry})")),
    }
}

/// Folds one more covering rule into the owners.
fn merge_rule(owners: &mut Vec<Owner>, rule: RuleOwner) {
    for owner in owners.iter_mut() {
        if let Owner::Rules { rules } = owner {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
            return;
        }
    }
    owners.push(Owner::Rules { rules: vec![rule] });
}

/// A rule sketch for a blocked finalizer: the controller's ServiceAccount is
/// left for the operator to name (`policy suggest` finds it in warn mode's
/// audit); the managers that added it say whose it is.
fn sketch(name: &str, field: FinalizerField, added_by: &BTreeMap<String, u64>) -> String {
    let hint = if added_by.is_empty() {
        String::new()
    } else {
        let managers: Vec<&str> = added_by.keys().map(String::as_str).collect();
        format!(" # added by {}", managers.join(", "))
    };
    let resources = if field == FinalizerField::Spec {
        "\n    resources: [namespaces]"
    } else {
        ""
    };
    format!(
        "  - name: {}\n    finalizers: [{}]\n    serviceAccounts: [\"NAMESPACE:SERVICEACCOUNT\"]{hint}{resources}",
        rule_name(name),
        serde_json::to_string(name).unwrap_or_default()
    )
}

/// A rule name from a finalizer: `example.com/cleanup` -> `example-com-cleanup`.
pub fn rule_name(finalizer: &str) -> String {
    let mut out = String::new();
    for c in finalizer.trim_end_matches('*').chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// APIServices that are not Available: their groups cannot be read.
async fn unavailable_apiservices(client: &kube::Client) -> Vec<Unreadable> {
    match read::unavailable_apiservices(client).await {
        Ok(down) => down
            .into_iter()
            .map(|d| Unreadable {
                type_name: format!("{} (APIService {})", d.group_version, d.name),
                why: d.to_string(),
            })
            .collect(),
        Err(e) => vec![Unreadable {
            type_name: "apiservices.apiregistration.k8s.io".into(),
            why: format!("cannot tell which aggregated APIs are down: {}", chain(&e)),
        }],
    }
}

/// Reads the cluster and judges every finalizer in it.
pub async fn survey(
    session: &super::session::Session,
    policy: &Policy,
    source: PolicySource,
) -> ClusterDoctorReport {
    let started = Instant::now();
    let client = &session.client;
    let mut unreadable = unavailable_apiservices(client).await;
    let types = match Resolver::new(client).await {
        Ok(resolver) => listable(&resolver),
        Err(e) => {
            unreadable.push(Unreadable {
                type_name: "(discovery)".into(),
                why: chain(&e),
            });
            Vec::new()
        }
    };
    let types_read = types.len();
    let mut tallies = Tallies::new();
    let mut objects_read = 0;
    let mut failed = 0;
    let mut tasks = tokio::task::JoinSet::new();
    let mut queue = types.into_iter();
    let mut absorb = |listed: Listed, tallies: &mut Tallies| match listed {
        Ok((more, n)) => {
            objects_read += n;
            for (k, v) in more {
                tallies.entry(k).or_default().merge(v);
            }
        }
        Err(u) => {
            failed += 1;
            unreadable.push(u);
        }
    };
    tasks.spawn(namespace_spec(client.clone()));
    loop {
        while tasks.len() < IN_FLIGHT {
            let Some((ar, caps)) = queue.next() else {
                break;
            };
            let namespaced = caps.scope == Scope::Namespaced;
            tasks.spawn(list_type(client.clone(), ar, namespaced));
        }
        match tasks.join_next().await {
            Some(Ok(listed)) => absorb(listed, &mut tallies),
            Some(Err(e)) => absorb(
                Err(Unreadable {
                    type_name: "(a list)".into(),
                    why: chain(&e),
                }),
                &mut tallies,
            ),
            None => break,
        }
    }
    // Types listed to the end; the spec.finalizers pass is not a type of its own.
    let types_read = types_read.saturating_sub(failed);
    let finalizers: Vec<FinalizerLine> = tallies
        .into_iter()
        .map(|((name, field), tally)| judge(policy, name, field, tally))
        .collect();
    let blocked = finalizers.iter().filter(|f| f.blocked()).count();
    ClusterDoctorReport {
        cluster: session.cluster.clone(),
        user: session.identity.clone(),
        policy: source,
        mode: policy.mode.as_str(),
        types_read,
        objects_read,
        complete: unreadable.is_empty(),
        unreadable,
        finalizers,
        blocked,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// `doctor --cluster`: exit 0 when every type was read and enforce would
/// block no finalizer living in the cluster, 1 when it would or when the
/// read is incomplete, 2 on usage or connection errors.
pub async fn run(args: DoctorCluster) -> Result<i32, ClusterError> {
    let DoctorCluster {
        policy,
        format,
        connection,
    } = args;
    let out = Printer::stdio(format);
    if policy.is_none() && crate::flags::policy_env_is_set() {
        out.note(format_args!(
            "note: {} is set, and doctor --cluster does not read it: the cluster's policy is judged (pass --policy FILE to judge another)",
            crate::flags::POLICY_ENV
        ));
    }
    let session = connection.connect().await?;
    let (policy, source) =
        super::install::cluster_policy(&session.client, policy.as_deref()).await?;
    let report = survey(&session, &policy, source).await;
    out.report(&report).map_err(ClusterError::Output)?;
    Ok(report.exit_code())
}

impl crate::output::Report for ClusterDoctorReport {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{}", render(self))
    }
}

/// The text report, its lines joined ([`crate::output::Report`]'s text form).
fn render(report: &ClusterDoctorReport) -> String {
    let mut lines = Vec::new();
    let note = report
        .policy
        .note
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    lines.push(report.cluster.describe(&report.user.username));
    lines.push(format!(
        "policy: {}{note}, judged as if mode were enforce (it is {})",
        report.policy.name, report.mode
    ));
    lines.push(format!(
        "read {} object(s) of {} type(s) in {:.1}s; {} finalizer(s) live in the cluster",
        report.objects_read,
        report.types_read,
        report.seconds,
        report.finalizers.len()
    ));
    for u in &report.unreadable {
        lines.push(format!("UNREADABLE {}: {}", u.type_name, u.why));
    }
    for f in &report.finalizers {
        lines.push(f.text());
    }
    if report.blocked > 0 {
        lines.push(format!(
            "enforce would block {} of {} finalizer(s): only an override could remove them. Add a rule for each controller (sketches below; `finalizer-guard policy suggest` writes them from warn mode's audit):",
            report.blocked,
            report.finalizers.len()
        ));
        for f in report.finalizers.iter().filter(|f| f.blocked()) {
            if let Some(s) = &f.suggestion {
                lines.push(s.clone());
            }
        }
    } else if report.complete {
        lines.push(format!(
            "ok: enforce would block none of the {} finalizer(s) living in the cluster",
            report.finalizers.len()
        ));
    } else {
        lines.push(format!(
            "enforce would block none of the {} finalizer(s) read; the rest of the cluster was not read",
            report.finalizers.len()
        ));
    }
    if !report.complete {
        lines.push(format!(
            "incomplete: {} type(s) could not be read (UNREADABLE above); their finalizers were not judged, so this is not an ok (exit 1)",
            report.unreadable.len()
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `judge` of a finalizer of `metadata.finalizers`.
    fn judge_metadata(policy: &Policy, name: &str, tally: Tally) -> FinalizerLine {
        judge(policy, name.into(), FinalizerField::Metadata, tally)
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn meta(entries: Vec<(&str, Value)>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(
                entries
                    .into_iter()
                    .map(|(m, f)| ManagedFieldsEntry {
                        manager: Some(m.into()),
                        fields_v1: Some(FieldsV1(f)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn the_manager_that_added_a_finalizer() {
        let m = meta(vec![
            (
                "kubectl-client-side-apply",
                json!({"f:data": {".": {}, "f:k": {}}}),
            ),
            (
                "widget-controller",
                json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"widgets.example.com/cleanup\"": {}}}}),
            ),
        ]);
        assert_eq!(
            added_by(&m, "widgets.example.com/cleanup"),
            ["widget-controller"]
        );
        assert!(added_by(&m, "other").is_empty());
    }

    #[test]
    fn rule_names_from_finalizers() {
        assert_eq!(
            rule_name("widgets.example.com/cleanup"),
            "widgets-example-com-cleanup"
        );
        assert_eq!(rule_name("example.com/*"), "example-com");
    }

    fn tally(places: &[(&str, &str, Option<&str>, u64)]) -> Tally {
        let mut t = Tally::default();
        for (g, r, ns, n) in places {
            t.objects += n;
            t.places
                .insert((g.to_string(), r.to_string(), ns.map(String::from)), *n);
        }
        t
    }

    fn report(blocked: usize, unreadable: Vec<Unreadable>) -> ClusterDoctorReport {
        ClusterDoctorReport {
            cluster: SessionCluster::default(),
            user: SessionUser::default(),
            policy: PolicySource {
                name: "configmap finalizer-guard/finalizer-guard-policy".into(),
                served_by: Vec::new(),
                note: None,
            },
            mode: "warn",
            types_read: 3,
            objects_read: 10,
            complete: unreadable.is_empty(),
            unreadable,
            finalizers: Vec::new(),
            blocked,
            seconds: 0.1,
        }
    }

    fn down() -> Unreadable {
        Unreadable {
            type_name: "metrics.k8s.io/v1beta1 (APIService v1beta1.metrics.k8s.io)".into(),
            why: "not Available (MissingEndpoints: no endpoints)".into(),
        }
    }

    #[test]
    fn an_incomplete_read_never_exits_0() {
        assert_eq!(report(0, Vec::new()).exit_code(), 0);
        assert_eq!(report(2, Vec::new()).exit_code(), 1);
        let incomplete = report(0, vec![down()]);
        assert!(!incomplete.complete);
        assert_eq!(incomplete.exit_code(), 1);
        assert_eq!(report(2, vec![down()]).exit_code(), 1);

        let text = render(&incomplete);
        assert!(!text.contains("ok:"), "{text}");
        assert!(text.contains("UNREADABLE metrics.k8s.io/v1beta1"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("incomplete: 1 type(s) could not be read"),
            "{text}"
        );
        assert!(last.ends_with("(exit 1)"), "{text}");
        let json = serde_json::to_value(&incomplete).unwrap();
        assert_eq!(json["complete"], false);

        let ok = render(&report(0, Vec::new()));
        assert!(
            ok.lines()
                .last()
                .unwrap()
                .starts_with("ok: enforce would block none"),
            "{ok}"
        );
        assert!(!ok.contains("incomplete"), "{ok}");
    }

    #[test]
    fn judged_where_it_lives() {
        let policy = Policy::from_yaml(
            "rules:\n  - name: widgets\n    finalizers: [\"example.com/*\"]\n    serviceAccounts: [ops:widgets]\n    namespaces: [team-a]\n",
        )
        .unwrap();
        let line = judge_metadata(
            &policy,
            "example.com/cleanup",
            tally(&[
                ("example.com", "widgets", Some("team-a"), 3),
                ("example.com", "widgets", Some("team-b"), 2),
            ]),
        );
        assert_eq!(line.blocked_objects, 2);
        assert_eq!(line.blocked_in, ["widgets.example.com in namespace team-b"]);
        assert_eq!(
            line.owners[0].to_string(),
            "rule widgets (serviceaccount:ops:widgets)"
        );
        assert!(
            line.suggestion
                .as_ref()
                .unwrap()
                .contains("example.com/cleanup")
        );

        let builtin = judge_metadata(
            &policy,
            "kubernetes.io/pvc-protection",
            tally(&[("", "persistentvolumeclaims", Some("team-b"), 1)]),
        );
        assert!(!builtin.blocked());
        assert!(matches!(builtin.owners[0], Owner::Builtin { .. }));

        let spec = judge(
            &policy,
            "kubernetes".into(),
            FinalizerField::Spec,
            tally(&[("", "namespaces", Some("team-b"), 1)]),
        );
        assert!(!spec.blocked(), "{spec:?}");
        assert!(line.presets.is_empty(), "{line:?}");
    }

    /// A finalizer nobody may remove that a catalog preset owns: doctor names the preset.
    #[test]
    fn a_blocked_finalizer_a_preset_owns_names_the_preset() {
        let policy = Policy::from_yaml("mode: warn\n").unwrap();
        let line = judge_metadata(
            &policy,
            "finalizers.fluxcd.io",
            tally(&[
                (
                    "source.toolkit.fluxcd.io",
                    "gitrepositories",
                    Some("team-c"),
                    2,
                ),
                (
                    "kustomize.toolkit.fluxcd.io",
                    "kustomizations",
                    Some("team-a"),
                    1,
                ),
            ]),
        );
        assert!(line.blocked());
        assert_eq!(line.presets, ["flux"]);
        let text = line.text();
        assert!(
            text.contains("; preset flux covers it: add `presets: [flux]`"),
            "{text}"
        );
        assert!(line.suggestion.unwrap().contains("add `presets: [flux]`"));

        // Covered once the policy names the preset.
        let policy = Policy::from_yaml("presets: [flux]\n").unwrap();
        let covered = judge_metadata(
            &policy,
            "finalizers.fluxcd.io",
            tally(&[(
                "source.toolkit.fluxcd.io",
                "gitrepositories",
                Some("team-c"),
                2,
            )]),
        );
        assert!(!covered.blocked(), "{covered:?}");
        assert!(covered.presets.is_empty());

        // Not on a resource the preset's controllers own: no preset is named.
        let elsewhere = judge_metadata(
            &Policy::from_yaml("mode: warn\n").unwrap(),
            "finalizers.fluxcd.io",
            tally(&[("example.com", "widgets", Some("team-c"), 1)]),
        );
        assert!(
            elsewhere.blocked() && elsewhere.presets.is_empty(),
            "{elsewhere:?}"
        );
    }

    /// The case: Flux's rule covers team-a and team-b, and a
    /// GitRepository in team-c is held. BLOCKED counts the one no rule
    /// covers, not the two the rule does, and names the rule to widen.
    #[test]
    fn blocked_counts_only_what_no_rule_covers() {
        let policy = Policy::from_yaml(
            "rules:\n  - name: flux-system-source-controller\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    namespaces: [\"team-a\", \"team-b\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n",
        )
        .unwrap();
        let places = [
            (
                "source.toolkit.fluxcd.io",
                "gitrepositories",
                Some("team-a"),
                1,
            ),
            (
                "source.toolkit.fluxcd.io",
                "gitrepositories",
                Some("team-b"),
                1,
            ),
            (
                "source.toolkit.fluxcd.io",
                "gitrepositories",
                Some("team-c"),
                1,
            ),
        ];
        let mut t = tally(&places);
        t.types
            .insert("gitrepositories.source.toolkit.fluxcd.io".into(), 3);
        let line = judge_metadata(&policy, "finalizers.fluxcd.io", t);
        assert_eq!(line.blocked_objects, 1);
        assert_eq!(
            line.blocked_in,
            ["gitrepositories.source.toolkit.fluxcd.io in namespace team-c"]
        );
        assert_eq!(
            line.text(),
            "BLOCKED finalizers.fluxcd.io: 1 of 3 object(s) no rule covers (gitrepositories.source.toolkit.fluxcd.io 3); may remove: rule flux-system-source-controller (serviceaccount:flux-system:source-controller); nobody but an override in gitrepositories.source.toolkit.fluxcd.io in namespace team-c (1 object(s)); rule flux-system-source-controller lets ServiceAccount flux-system:source-controller remove it in team-a, team-b but not here: widen the rule (namespaces) rather than override; preset flux covers it: add `presets: [flux]`"
        );
        assert_eq!(
            line.suggestion.as_deref(),
            Some(
                "  # \"finalizers.fluxcd.io\": widen rule flux-system-source-controller (`finalizer-guard policy suggest --merge` does, from the denials)"
            )
        );
        let json = serde_json::to_value(&line).unwrap();
        assert_eq!(json["blockedObjects"], 1);
        assert_eq!(
            json["elsewhere"][0]["rule"],
            "flux-system-source-controller"
        );

        // Widened, nothing is blocked; every object blocked reads as before.
        let widened = Policy::from_yaml(
            "rules:\n  - finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n",
        )
        .unwrap();
        let line = judge_metadata(&widened, "finalizers.fluxcd.io", tally(&places));
        assert!(!line.blocked(), "{line:?}");
        let line = judge_metadata(
            &Policy::from_yaml("rules: []\n").unwrap(),
            "finalizers.fluxcd.io",
            tally(&places),
        );
        assert_eq!(line.blocked_objects, 3);
        assert!(
            line.text()
                .starts_with("BLOCKED finalizers.fluxcd.io: 3 object(s) ("),
            "{}",
            line.text()
        );
    }

    #[test]
    fn what_releases_a_blocked_finalizer_is_said() {
        let policy = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [example.com/a]\n      reasons: [node-lost]\n    - finalizers: [\"vault.io/*\"]\n      never: true\n",
        )
        .unwrap();
        let line = |name: &str| {
            judge(
                &policy,
                name.into(),
                FinalizerField::Metadata,
                tally(&[("", "configmaps", Some("team-a"), 1)]),
            )
            .text()
        };
        assert!(
            line("example.com/a").contains(
                "may remove: nobody but an override with node-lost (override.finalizers[0])"
            ),
            "{}",
            line("example.com/a")
        );
        assert!(
            line("vault.io/x")
                .contains("may remove: nobody: no override releases it (override.finalizers[1])")
        );
        assert!(line("other.io/x").contains("may remove: nobody but an override"));
    }
}
