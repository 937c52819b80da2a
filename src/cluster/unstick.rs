//! `finalizer-guard unstick`: explain what holds stuck objects, and release
//! them through the webhook.
//!
//! Without `--reason` it only reads. With it, each object gets one JSON patch
//! that `test`s the resourceVersion and each finalizer's value at its index
//! before removing it, and carries the override annotation when the policy
//! needs one; a concurrent change makes it read the object again, never
//! overwrite the change. A namespace's `spec.finalizers` go through
//! `namespaces/finalize`, which takes only a whole object: its resourceVersion
//! guards that write the same way.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;
use serde_json::{Value, json};

use super::explain::{self, FinalizerReport, Liveness, Probe, Proposed, Removable};
use super::select::{Missing, Selection};
use super::{
    ClusterError, Connection, Found, PolicySource, Session, WEBHOOK_DOWN_HELP, WriteError,
};
use crate::ledger::Ledger;
use crate::policy::approval::{APPROVED_BY, OVERRIDE_EXPIRES};
use crate::policy::{FinalizerField, Outcome, Policy};

/// How many times an object that keeps changing is read again.
const ATTEMPTS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    /// Write for real.
    None,
    /// Send every write through the API server and the webhook without persisting it.
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A report for the incident ticket.
    Json,
}

#[derive(Debug, Args)]
pub struct UnstickArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Only this finalizer (repeatable). Default: every finalizer of each stuck object.
    #[arg(long = "finalizer", value_name = "NAME")]
    pub finalizers: Vec<String>,
    /// Release: the override's reason, one of the policy's approved reasons.
    #[arg(long, requires = "detail", value_name = "REASON")]
    pub reason: Option<String>,
    /// Release: what happened (an incident id, the node).
    #[arg(long, requires = "reason", value_name = "TEXT")]
    pub detail: Option<String>,
    /// After releasing a pod on a node that is gone (or NotReady past --not-ready-for),
    /// finish its deletion with grace period 0.
    #[arg(long, requires = "reason")]
    pub force_delete: bool,
    /// How long a node must be NotReady before its pods' owners count as gone.
    #[arg(long, default_value = "5m", value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub not_ready_for: Duration,
    /// `server`: every write goes through the API server and the webhook, and nothing is persisted.
    #[arg(long, value_enum, default_value = "none", value_name = "MODE")]
    pub dry_run: DryRun,
    /// Output format.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Judge under this policy file instead of the cluster's (its ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub connection: Connection,
}

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    Released,
    NotReleased,
    /// Gone before it was released: nothing holds it any more.
    Gone,
}

/// One object in the report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    /// `pod/web-0`
    pub object: String,
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_for: Option<String>,
    pub finalizers: Vec<FinalizerReport>,
    pub may_leak: Ledger,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Fate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Finalizers still on the object afterwards.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// The override written, or the approval used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#override: Option<String>,
    pub override_cleared: bool,
    pub force_deleted: bool,
}

impl ObjectReport {
    fn new(found: &Found) -> ObjectReport {
        let meta = &found.object.metadata;
        let deleted = meta.deletion_timestamp.as_ref().map(|t| t.0);
        ObjectReport {
            object: found.display_name(),
            api_version: found.resource.api_version.clone(),
            kind: found.resource.kind.clone(),
            namespace: found
                .namespace()
                .filter(|_| found.namespaced)
                .map(String::from),
            name: found.name().to_string(),
            uid: meta.uid.clone(),
            deletion_timestamp: deleted.map(|t| t.to_string()),
            stuck_for: deleted
                .map(|t| explain::age(Timestamp::now().duration_since(t).unsigned_abs())),
            finalizers: Vec::new(),
            may_leak: explain::may_leak(found),
            blocked_by: Vec::new(),
            result: None,
            why: None,
            removed: Vec::new(),
            kept: Vec::new(),
            r#override: None,
            override_cleared: false,
            force_deleted: false,
        }
    }

    /// `pod/web-0 -n team-a`: as a kubectl command names it.
    fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} -n {ns}", self.object),
            None => self.object.clone(),
        }
    }

    fn not_released(mut self, why: impl Into<String>) -> ObjectReport {
        self.result = Some(Fate::NotReleased);
        self.why = Some(why.into());
        self
    }
}

/// The whole run, as `-o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub command: &'static str,
    /// `explain` or `release`.
    pub mode: &'static str,
    pub dry_run: bool,
    pub at: String,
    pub user: super::Identity,
    pub policy: PolicySource,
    /// Whether a ValidatingWebhookConfiguration holds finalizer-guard's webhook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_installed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub objects: Vec<ObjectReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<MissingReport>,
    /// Listed objects left alone because they are not stuck.
    pub not_stuck: usize,
    pub summary: Summary,
}

#[derive(Debug, Serialize)]
pub struct MissingReport {
    pub target: String,
    pub why: String,
}

impl From<Missing> for MissingReport {
    fn from(m: Missing) -> Self {
        MissingReport {
            target: m.target,
            why: m.why,
        }
    }
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub objects: usize,
    pub released: usize,
    pub not_released: usize,
    pub gone: usize,
    pub force_deleted: usize,
}

/// What a release writes: the override (single-person), or the approval used.
#[derive(Debug, Clone)]
enum Authority {
    /// Every removal is authorized by a rule or a built-in controller.
    Authorized,
    /// The override annotation this run writes, `REASON: DETAIL`.
    Write(String),
    /// Two-person rule: the approval on the object, `REASON: DETAIL by USER`.
    Approval(String),
}

struct Ctx<'a> {
    session: &'a Session,
    policy: &'a Policy,
    params: PatchParams,
    dry_run: bool,
    force_delete: bool,
    override_value: Option<String>,
    probe: Probe,
}

/// Prints as it goes: one line per object, as `kubectl drain` does.
struct Out {
    json: bool,
}

impl Out {
    /// What happened to one object: on standard error under `-o json`, so
    /// the report stays clean while the operator still sees progress.
    fn progress(&self, text: impl AsRef<str>) {
        if self.json {
            eprintln!("{}", text.as_ref());
        } else {
            self.line(text);
        }
    }

    /// The explanation and the summary: only in text output.
    fn line(&self, text: impl AsRef<str>) {
        if !self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", text.as_ref());
        }
    }
}

pub async fn run(args: UnstickArgs) -> Result<i32, ClusterError> {
    let UnstickArgs {
        selection,
        finalizers,
        reason,
        detail,
        force_delete,
        not_ready_for,
        dry_run,
        output,
        policy,
        connection,
    } = args;
    selection.check()?;
    let session = connection.connect().await?;
    let (policy, source) = super::cluster_policy(&session.client, policy.as_deref()).await?;
    let release = reason.is_some();
    let settings = &policy.override_settings;
    let override_value = match (&reason, &detail) {
        (Some(reason), Some(detail)) => {
            if !settings.reasons.contains(reason) {
                return Err(ClusterError::Usage(format!(
                    "--reason {reason:?} is not an approved reason; the policy approves: {}",
                    settings.reasons.join(", ")
                )));
            }
            if detail.trim().is_empty() {
                return Err(ClusterError::Usage(
                    "--detail is empty: say what happened, e.g. an incident id and the node".into(),
                ));
            }
            Some(format!("{reason}: {}", detail.trim()))
        }
        _ => None,
    };
    let out = Out {
        json: output.is_some(),
    };
    let webhook_installed = super::webhook_installed(&session.client).await;
    let dry = dry_run == DryRun::Server;
    let suffix = if dry { " (server dry run)" } else { "" };

    if let Some(note) = &source.note {
        eprintln!("note: {note}");
    }
    if webhook_installed == Some(false) {
        eprintln!(
            "note: finalizer-guard's webhook ({}) is not installed: writes here are not guarded",
            super::WEBHOOK_NAME
        );
    }
    let selected = selection.run(&session).await?;
    if !release {
        out.line(format!(
            "as {} under {} (mode {}):",
            session.identity.username,
            source.name,
            policy.mode.as_str()
        ));
    }
    let mut params = PatchParams {
        field_manager: Some(super::FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    if dry {
        params = params.dry_run();
    }
    let mut ctx = Ctx {
        session: &session,
        policy: &policy,
        params,
        dry_run: dry,
        force_delete,
        override_value,
        probe: Probe::new(session.client.clone(), not_ready_for),
    };

    let named = !selection.targets.iter().all(|t| !t.contains('/'));
    let mut reports = Vec::new();
    let mut webhook_down: Option<String> = None;
    for found in selected.objects {
        let mut report = ObjectReport::new(&found);
        let carries = |name: &String| {
            found.metadata_finalizers().contains(name) || found.spec_finalizers().contains(name)
        };
        if !found.is_stuck() {
            let why = if found.object.metadata.deletion_timestamp.is_none() {
                "not stuck: it is not being deleted (delete it first: kubectl delete --wait=false; an override releases only a Terminating object)"
            } else {
                "not stuck: no finalizers remain"
            };
            report = report.not_released(why);
            out.progress(format!("{} {why}", report.label()));
            reports.push(report);
            continue;
        }
        if !finalizers.is_empty() && !finalizers.iter().any(carries) {
            if named {
                let why = format!("has none of the finalizers {}", finalizers.join(", "));
                report = report.not_released(&why);
                out.progress(format!("{} {why}", report.label()));
                reports.push(report);
            }
            continue;
        }
        report.finalizers = explain::explain(
            &mut ctx.probe,
            &policy,
            &found,
            &finalizers,
            &session.identity,
        )
        .await;
        report.blocked_by = explain::namespace_blockers(&mut ctx.probe, &found).await;
        if !release {
            print_explanation(&out, &report);
            reports.push(report);
            continue;
        }
        if let Some(why) = &webhook_down {
            report = report.not_released(format!("not attempted: {why}"));
            out.progress(format!(
                "{} not released: the webhook is unreachable",
                report.label()
            ));
            reports.push(report);
            continue;
        }
        let report = release_one(&mut ctx, found, report).await;
        match (&report.result, &report.why) {
            (Some(Fate::Released), _) => {
                let how = match &report.r#override {
                    Some(o) => format!(" with override {o:?}"),
                    None => String::new(),
                };
                out.progress(format!(
                    "{} released{suffix}: removed {}{how}",
                    report.label(),
                    report.removed.join(", ")
                ));
                if report.force_deleted {
                    out.progress(format!("{} force-deleted{suffix}", report.label()));
                }
            }
            (Some(Fate::Gone), _) => out.progress(format!("{} gone{suffix}", report.label())),
            (_, why) => {
                let why = why.clone().unwrap_or_default();
                out.progress(format!("{} not released: {why}", report.label()));
                if why.starts_with("the webhook is unreachable") {
                    webhook_down = Some("the webhook is unreachable".into());
                    eprintln!("{why}\n{WEBHOOK_DOWN_HELP}");
                }
            }
        }
        reports.push(report);
    }

    let mut summary = Summary {
        objects: reports.len(),
        ..Summary::default()
    };
    for r in &reports {
        match r.result {
            Some(Fate::Released) => summary.released += 1,
            Some(Fate::Gone) => summary.gone += 1,
            Some(Fate::NotReleased) => summary.not_released += 1,
            None => {}
        }
        summary.force_deleted += usize::from(r.force_deleted);
    }
    let missing = selected.missing;
    let failed = summary.not_released > 0 || !missing.is_empty();
    if output.is_some() {
        let report = Report {
            command: "unstick",
            mode: if release { "release" } else { "explain" },
            dry_run: dry,
            at: Timestamp::now().to_string(),
            user: session.identity.clone(),
            policy: source,
            webhook_installed,
            reason,
            detail,
            objects: reports,
            not_found: missing.into_iter().map(MissingReport::from).collect(),
            not_stuck: selected.not_stuck,
            summary,
        };
        let text = serde_json::to_string_pretty(&report).expect("a report serializes");
        println!("{text}");
    } else {
        for m in &missing {
            out.line(format!("{} {}", m.target, m.why));
        }
        print_summary(
            &out,
            release,
            dry,
            &summary,
            &reports,
            &missing,
            selected.not_stuck,
        );
    }
    Ok(i32::from(failed))
}

fn print_explanation(out: &Out, report: &ObjectReport) {
    let stuck = report
        .stuck_for
        .as_deref()
        .map_or_else(String::new, |a| format!(": Terminating for {a}"));
    out.line(format!("{}{stuck}", report.label()));
    for b in &report.blocked_by {
        out.line(format!("  blocked by: {b}"));
    }
    out.line(format!("  may leak:  {}", report.may_leak.summary()));
    for f in &report.finalizers {
        let field = if f.field == FinalizerField::Spec {
            " (spec.finalizers)"
        } else {
            ""
        };
        out.line(format!("  {}{field}", f.name));
        out.line(format!("    owner:       {}", f.owner));
        out.line(format!("    owner alive: {}", f.owner_alive));
        out.line(format!("    you:         {}", f.removable));
    }
}

fn print_summary(
    out: &Out,
    release: bool,
    dry: bool,
    summary: &Summary,
    reports: &[ObjectReport],
    missing: &[Missing],
    not_stuck: usize,
) {
    let left_alone = if not_stuck > 0 {
        format!(" ({not_stuck} listed objects are not stuck and were left alone)")
    } else {
        String::new()
    };
    if reports.is_empty() {
        out.line(format!("no stuck objects found{left_alone}"));
        return;
    }
    if !release {
        out.line(format!(
            "{} stuck object(s){left_alone}. To release: the same command with --reason REASON --detail TEXT (try --dry-run=server first)",
            summary.objects
        ));
        return;
    }
    let dry = if dry {
        " (server dry run: nothing changed)"
    } else {
        ""
    };
    out.line(format!(
        "released {} of {} object(s), {} already gone, {} force-deleted{dry}{left_alone}",
        summary.released,
        summary.objects + missing.len(),
        summary.gone,
        summary.force_deleted
    ));
    let failed: Vec<&ObjectReport> = reports
        .iter()
        .filter(|r| r.result == Some(Fate::NotReleased))
        .collect();
    if !failed.is_empty() || !missing.is_empty() {
        out.line("not released:");
        for r in failed {
            out.line(format!(
                "  {}: {}",
                r.label(),
                r.why.as_deref().unwrap_or_default()
            ));
        }
        for m in missing {
            out.line(format!("  {}: {}", m.target, m.why));
        }
    }
}

/// The finalizers this run removes from `found`, by field, in list order.
fn planned(report: &ObjectReport, field: FinalizerField) -> Vec<String> {
    report
        .finalizers
        .iter()
        .filter(|f| f.field == field)
        .map(|f| f.name.clone())
        .collect()
}

async fn release_one(
    ctx: &mut Ctx<'_>,
    mut found: Found,
    mut report: ObjectReport,
) -> ObjectReport {
    let meta_plan = planned(&report, FinalizerField::Metadata);
    let spec_plan = planned(&report, FinalizerField::Spec);
    let settings = &ctx.policy.override_settings;

    // What authorizes the removal: decided by the webhook's own core.
    let current = found.annotations();
    let authorized = [
        (FinalizerField::Metadata, &meta_plan),
        (FinalizerField::Spec, &spec_plan),
    ]
    .iter()
    .all(|(field, plan)| {
        plan.is_empty()
            || Proposed {
                found: &found,
                field: *field,
                remove: plan,
                identity: &ctx.session.identity,
                annotations: &current,
            }
            .decide(ctx.policy)
            .outcome
                == Outcome::Authorized
    });
    let authority = if authorized {
        Authority::Authorized
    } else if settings.approval.is_some() {
        // Two-person rule: the approval must already be there.
        let blocked = report.finalizers.iter().find_map(|f| match &f.removable {
            Removable::NeedsApproval { why, approvers } => Some(format!(
                "{why}; an approver ({approvers}) runs: finalizer-guard approve {} --reason R --detail T --for 1h",
                report.label()
            )),
            Removable::NotDeleting => Some("the object is not being deleted".into()),
            Removable::No { why } => Some(why.clone()),
            _ => None,
        });
        if let Some(why) = blocked {
            return report.not_released(why);
        }
        let by = current.get(APPROVED_BY).cloned().unwrap_or_default();
        let value = current
            .get(&settings.annotation)
            .cloned()
            .unwrap_or_default();
        Authority::Approval(format!("{value} (approved by {by})"))
    } else {
        match &ctx.override_value {
            Some(v) => Authority::Write(v.clone()),
            None => return report.not_released("no --reason given"),
        }
    };
    report.r#override = match &authority {
        Authority::Authorized => None,
        Authority::Write(v) | Authority::Approval(v) => Some(v.clone()),
    };
    let write_override = match &authority {
        Authority::Write(v) => Some(v.as_str()),
        _ => None,
    };

    let api = found.api(&ctx.session.client);
    let name = found.name().to_string();
    let mut removed = Vec::new();
    pause_before_write(&report).await;

    // metadata.finalizers: one JSON patch, tested at every index.
    if !meta_plan.is_empty() {
        match patch_loop(ctx, &api, &name, &mut found, &meta_plan, write_override).await {
            Ok(Some(done)) => removed.extend(done),
            Ok(None) => {
                report.result = Some(Fate::Gone);
                return report;
            }
            Err(why) => return report.not_released(why),
        }
    }
    // spec.finalizers: namespaces/finalize, guarded by the resourceVersion.
    if !spec_plan.is_empty() {
        let annotation_needed = write_override.filter(|v| {
            found
                .object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&settings.annotation))
                .is_none_or(|have| have != v)
        });
        if let Some(value) = annotation_needed {
            // The override first, on the Namespace itself.
            match patch_loop(ctx, &api, &name, &mut found, &[], Some(value)).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    report.result = Some(Fate::Gone);
                    return report;
                }
                Err(why) => return report.not_released(why),
            }
        }
        match finalize_loop(ctx, &api, &name, &mut found, &spec_plan).await {
            Ok(Some(done)) => removed.extend(done),
            Ok(None) => {
                report.result = Some(Fate::Gone);
                return report;
            }
            Err(why) => return report.not_released(why),
        }
    }
    report.removed = removed;
    report.result = Some(Fate::Released);
    report.kept = found
        .metadata_finalizers()
        .into_iter()
        .chain(found.spec_finalizers())
        .collect();

    // A pod on a dead node waits for a kubelet that will never come.
    if ctx.force_delete && is_pod(&found) {
        match force_delete(ctx, &api, &found).await {
            Ok(true) => report.force_deleted = true,
            Ok(false) => {}
            Err(why) => {
                return report
                    .not_released(format!("finalizers removed, but not force-deleted: {why}"));
            }
        }
    }
    // Override hygiene: an override left on an object that still exists is removed.
    if !ctx.dry_run && !report.force_deleted && write_or_approval(&authority) {
        match clear_override(ctx, &api, &name, &authority).await {
            Ok(cleared) => report.override_cleared = cleared,
            Err(why) => {
                report.why = Some(format!("released, but the override was not removed: {why}"));
            }
        }
    }
    report
}

/// `FINALIZER_GUARD_PAUSE_BEFORE_WRITE=DURATION` holds each object between
/// its read and its first write, so that a test can change it in between
/// and see the change survive.
async fn pause_before_write(report: &ObjectReport) {
    let Some(pause) = std::env::var("FINALIZER_GUARD_PAUSE_BEFORE_WRITE")
        .ok()
        .and_then(|v| crate::cli::parse_duration(&v).ok())
    else {
        return;
    };
    eprintln!(
        "pausing {} before writing {}",
        explain::age(pause),
        report.label()
    );
    tokio::time::sleep(pause).await;
}

fn write_or_approval(a: &Authority) -> bool {
    !matches!(a, Authority::Authorized)
}

fn is_pod(found: &Found) -> bool {
    found.resource.group.is_empty() && found.resource.plural == "pods"
}

/// A JSON patch that removes exactly `plan` from `metadata.finalizers` of
/// `object`, testing the resourceVersion and each value at its index first,
/// and writes the override annotation when given.
pub fn removal_patch(
    object: &DynamicObject,
    plan: &[String],
    annotation: Option<(&str, &str)>,
) -> Option<json_patch::Patch> {
    let meta = &object.metadata;
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let indexes: Vec<usize> = finalizers
        .iter()
        .enumerate()
        .filter(|(_, f)| plan.contains(f))
        .map(|(i, _)| i)
        .collect();
    if indexes.is_empty() && (annotation.is_none() || !plan.is_empty()) {
        return None;
    }
    let mut ops = vec![json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": meta.resource_version.clone().unwrap_or_default(),
    })];
    if let Some(pair) = annotation {
        ops.extend(add_annotations(object, &[pair]));
    }
    // From the end, so each index still points at the name tested.
    for &i in indexes.iter().rev() {
        ops.push(json!({"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizers[i]}));
        ops.push(json!({"op": "remove", "path": format!("/metadata/finalizers/{i}")}));
    }
    Some(
        serde_json::from_value(Value::Array(ops))
            .expect("a JSON patch of test, add and remove ops"),
    )
}

/// JSON patch ops that set `annotations` on `object`: the whole map when it
/// has none yet (a path into a missing map is an error), else key by key.
pub(super) fn add_annotations(object: &DynamicObject, annotations: &[(&str, &str)]) -> Vec<Value> {
    match &object.metadata.annotations {
        None => {
            let map: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            vec![json!({"op": "add", "path": "/metadata/annotations", "value": map})]
        }
        Some(_) => annotations
            .iter()
            .map(|(k, v)| {
                json!({
                    "op": "add",
                    "path": format!("/metadata/annotations/{}", pointer_token(k)),
                    "value": v,
                })
            })
            .collect(),
    }
}

/// RFC 6901: `~` and `/` escaped in one reference token.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Patches until the plan is removed, reading the object again after a
/// concurrent change. `Ok(None)`: the object is gone.
async fn patch_loop(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    found: &mut Found,
    plan: &[String],
    annotation: Option<&str>,
) -> Result<Option<Vec<String>>, String> {
    let key = ctx.policy.override_settings.annotation.as_str();
    retry(api, name, found, async |found: &Found| {
        let present: Vec<String> = found
            .metadata_finalizers()
            .into_iter()
            .filter(|f| plan.contains(f))
            .collect();
        let needs_annotation =
            annotation.filter(|v| found.annotations().get(key).is_none_or(|have| have != v));
        let patch = removal_patch(&found.object, plan, needs_annotation.map(|v| (key, v)))?;
        let written = api
            .patch(name, &ctx.params, &Patch::Json::<()>(patch))
            .await;
        Some((present, written))
    })
    .await
}

/// `namespaces/NAME/finalize` with the plan removed from `spec.finalizers`.
async fn finalize_loop(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    found: &mut Found,
    plan: &[String],
) -> Result<Option<Vec<String>>, String> {
    let params = PostParams {
        dry_run: ctx.dry_run,
        field_manager: Some(super::FIELD_MANAGER.into()),
    };
    retry(api, name, found, async |found: &Found| {
        let (present, kept): (Vec<String>, Vec<String>) = found
            .spec_finalizers()
            .into_iter()
            .partition(|f| plan.contains(f));
        if present.is_empty() {
            return None;
        }
        let mut body = found.object.clone();
        body.data["spec"]["finalizers"] = json!(kept);
        let written = api
            .replace_subresource("finalize", name, &params, &body)
            .await;
        Some((present, written))
    })
    .await
}

/// Writes until `write` has nothing left to do (`None`) or a write goes
/// through, reading the object again after a concurrent change, at most
/// [`ATTEMPTS`] times. `write` returns what it removes and the API server's
/// answer. `Ok(None)`: the object is gone.
async fn retry(
    api: &Api<DynamicObject>,
    name: &str,
    found: &mut Found,
    mut write: impl AsyncFnMut(&Found) -> Option<(Vec<String>, kube::Result<DynamicObject>)>,
) -> Result<Option<Vec<String>>, String> {
    for _ in 0..ATTEMPTS {
        match write(found).await {
            None => return Ok(Some(Vec::new())),
            Some((removed, Ok(object))) => {
                found.object = object;
                return Ok(Some(removed));
            }
            Some((_, Err(e))) => {
                if !read_again(api, name, found, WriteError::from_kube(&e)).await? {
                    return Ok(None);
                }
            }
        }
    }
    Err(format!(
        "it kept changing: {ATTEMPTS} attempts each met a newer resourceVersion"
    ))
}

/// After a refused write: reads the object again when the refusal may be
/// a concurrent change (a conflict, or a 422 from a failed `test`), and
/// says whether to try again. `Ok(false)`: the object is gone.
async fn read_again(
    api: &Api<DynamicObject>,
    name: &str,
    found: &mut Found,
    error: WriteError,
) -> Result<bool, String> {
    match error {
        WriteError::Conflict | WriteError::Unprocessable(_) => {}
        WriteError::NotFound => return Ok(false),
        other => return Err(describe(other)),
    }
    let seen = found.object.metadata.resource_version.clone();
    match api.get_opt(name).await {
        Ok(Some(object)) => found.object = object,
        Ok(None) => return Ok(false),
        Err(e) => return Err(format!("reading it again: {e}")),
    }
    // Unchanged: the 422 was about the write itself.
    if found.object.metadata.resource_version == seen {
        return Err(describe(error));
    }
    Ok(true)
}

fn describe(e: WriteError) -> String {
    match e {
        WriteError::Denied(m) => format!("denied: {m}"),
        WriteError::WebhookUnreachable(m) => format!("the webhook is unreachable: {m}"),
        WriteError::Conflict => "a conflicting change".into(),
        WriteError::NotFound => "gone".into(),
        WriteError::Unprocessable(m) => format!("{m} (422)"),
        WriteError::Other(m) => m,
    }
}

/// Grace period 0 for a pod whose node is gone; `Ok(false)` when its node lives.
async fn force_delete(
    ctx: &mut Ctx<'_>,
    api: &Api<DynamicObject>,
    found: &Found,
) -> Result<bool, String> {
    let gone = found.object.metadata.deletion_timestamp.is_some()
        && found.metadata_finalizers().is_empty();
    if !gone {
        return Ok(false);
    }
    let Some(node) = found.object.data["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
    else {
        return Ok(false);
    };
    match ctx.probe.node(node).await {
        Liveness::Gone(_) => {}
        _ => return Ok(false),
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        dry_run: ctx.dry_run,
        // Never a pod of the same name created since (a StatefulSet's).
        preconditions: Some(Preconditions {
            uid: found.object.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(found.name(), &params).await {
        Ok(_) => Ok(true),
        Err(e) => match WriteError::from_kube(&e) {
            WriteError::NotFound => Ok(true),
            other => Err(describe(other)),
        },
    }
}

/// Removes the override (or the approval) this release used from an object
/// that still exists. `Ok(false)`: it is gone, or the annotation changed.
async fn clear_override(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    authority: &Authority,
) -> Result<bool, String> {
    let object = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let annotations: BTreeMap<String, String> = object.metadata.annotations.unwrap_or_default();
    let settings = &ctx.policy.override_settings;
    let keys: Vec<&str> = match authority {
        Authority::Write(_) => vec![settings.annotation.as_str()],
        Authority::Approval(_) => vec![settings.annotation.as_str(), APPROVED_BY, OVERRIDE_EXPIRES],
        Authority::Authorized => return Ok(false),
    };
    if let Authority::Write(value) = authority
        && annotations.get(&settings.annotation) != Some(value)
    {
        return Ok(false);
    }
    let mut ops = Vec::new();
    for key in keys {
        if let Some(value) = annotations.get(key) {
            let path = format!("/metadata/annotations/{}", pointer_token(key));
            ops.push(json!({"op": "test", "path": path, "value": value}));
            ops.push(json!({"op": "remove", "path": path}));
        }
    }
    if ops.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("a JSON patch of test and remove ops");
    match api
        .patch(name, &ctx.params, &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) => match WriteError::from_kube(&e) {
            WriteError::NotFound | WriteError::Conflict => Ok(false),
            other => Err(describe(other)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(finalizers: &[&str], annotations: Option<&[(&str, &str)]>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "team-a", "resourceVersion": "42",
                "finalizers": finalizers,
                "annotations": annotations.map(|a| a.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()),
            },
        }))
        .unwrap()
    }

    fn ops(patch: json_patch::Patch) -> Value {
        serde_json::to_value(patch).unwrap()
    }

    #[test]
    fn removes_exactly_the_plan_testing_each_index_from_the_end() {
        let o = object(&["a", "keep", "b", "a"], None);
        let patch = removal_patch(&o, &["a".into(), "b".into()], None).unwrap();
        assert_eq!(
            ops(patch),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "test", "path": "/metadata/finalizers/3", "value": "a"},
                {"op": "remove", "path": "/metadata/finalizers/3"},
                {"op": "test", "path": "/metadata/finalizers/2", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/2"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": "a"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[test]
    fn writes_the_override_in_the_same_patch() {
        let key = "finalizer-guard.io/override";
        let bare = object(&["x"], None);
        let with_map = object(&["x"], Some(&[("team", "a")]));
        let value = "node-lost: INC-1";
        assert_eq!(
            ops(removal_patch(&bare, &["x".into()], Some((key, value))).unwrap())[1],
            json!({"op": "add", "path": "/metadata/annotations", "value": {key: value}})
        );
        assert_eq!(
            ops(removal_patch(&with_map, &["x".into()], Some((key, value))).unwrap())[1],
            json!({"op": "add", "path": "/metadata/annotations/finalizer-guard.io~1override", "value": value})
        );
    }

    #[test]
    fn nothing_to_do_is_no_patch() {
        let o = object(&["other"], None);
        assert!(removal_patch(&o, &["gone".into()], None).is_none());
        assert!(removal_patch(&o, &["gone".into()], Some(("k", "v"))).is_none());
        // The override alone (a Namespace before its finalize write).
        assert!(removal_patch(&o, &[], Some(("k", "v"))).is_some());
    }
}
