//! `finalizer-guard unstick`: explain what holds stuck objects, and release
//! them through the webhook.
//!
//! Without `--reason` it only reads. With it, each object gets one JSON patch
//! that `test`s the uid it explained, the resourceVersion and each
//! finalizer's value at its index before removing it, and carries the
//! override annotation when the policy needs one; a concurrent change makes
//! it read the object again, never overwrite the change, and an object
//! deleted and created again under the same name (a new uid) is left alone
//! and reported as replaced. A namespace's `spec.finalizers` go through
//! `namespaces/finalize`, which takes only a whole object: its uid and
//! resourceVersion guard that write the same way.
//!
//! A finalizer whose owner looks alive (its controller holds its lease, its
//! node is Ready, a Ready pod runs as its ServiceAccount) is left in place
//! unless it is named with `--finalizer`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;
use serde_json::json;

use super::explain::{self, FinalizerReport, Liveness, Probe, Proposed, Removable};
use super::patch;
use super::select::{Missing, Selection};
use super::{
    ClusterError, Connection, Found, PolicySource, Session, WEBHOOK_DOWN_HELP, WriteError,
};
use crate::ledger::Ledger;
use crate::policy::approval::{APPROVED_BY, OVERRIDE_EXPIRES};
use crate::policy::{FinalizerField, Outcome, Policy};
use json_patch::jsonptr::Token;

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
    /// Only this finalizer (repeatable). Default: every finalizer of each stuck object,
    /// except that one whose owner looks alive is removed only when named here.
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

/// What happened to one object (`result` in the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    /// This run removed every finalizer it was to remove (`removed`).
    Released,
    /// This run removed some (`removed`); others are still on it (`left`, or
    /// a write that failed: `why`).
    PartlyReleased,
    /// This run wrote nothing: someone else had removed the finalizers
    /// first (`removedByOthers`).
    AlreadyReleased,
    /// This run removed nothing, and the object is still held (`why`).
    NotReleased,
    /// The object was deleted before this run's write: nothing holds it
    /// any more, and nothing was written to it.
    Gone,
    /// The object was deleted and a new one (`replacedByUid`) took its
    /// name before this run's write: the new one was left alone.
    Replaced,
}

/// A finalizer this run left in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Left {
    pub name: String,
    pub field: FinalizerField,
    /// `owner alive: ...; name it with --finalizer to remove it`
    pub why: String,
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
    /// The uid explained: every write `test`s it.
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
    /// Finalizers this run's writes removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Finalizers to remove that were already gone when this run wrote:
    /// someone else removed them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_by_others: Vec<String>,
    /// Finalizers left in place because their owner looks alive.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<Left>,
    /// `replaced`: the uid of the object that holds the name now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by_uid: Option<String>,
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
            removed_by_others: Vec::new(),
            left: Vec::new(),
            replaced_by_uid: None,
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

    /// The result, from what the writes came to and what was removed,
    /// removed by others and left: never "released" for an object this
    /// run did not write to.
    fn settle(mut self, end: End) -> ObjectReport {
        let (result, why) = match end {
            End::Gone => (
                Fate::Gone,
                Some(if self.removed.is_empty() {
                    "deleted before this run wrote to it; nothing written".to_string()
                } else {
                    format!(
                        "deleted while this run released it (after it removed {})",
                        self.removed.join(", ")
                    )
                }),
            ),
            End::Replaced(uid) => {
                let why = format!("a new object (uid {uid}) took the name; left alone");
                self.replaced_by_uid = Some(uid);
                (Fate::Replaced, Some(why))
            }
            End::Failed(why) if self.removed.is_empty() => (Fate::NotReleased, Some(why)),
            End::Failed(why) => (Fate::PartlyReleased, Some(why)),
            End::Finished if !self.left.is_empty() => {
                let names: Vec<&str> = self.left.iter().map(|l| l.name.as_str()).collect();
                let why = format!(
                    "left {}: the owner is alive (name it with --finalizer to remove it)",
                    names.join(", ")
                );
                if self.removed.is_empty() {
                    (Fate::NotReleased, Some(why))
                } else {
                    (Fate::PartlyReleased, Some(why))
                }
            }
            End::Finished if !self.removed.is_empty() => (Fate::Released, None),
            End::Finished if !self.removed_by_others.is_empty() => (
                Fate::AlreadyReleased,
                Some(format!(
                    "someone else removed {} before this run wrote; nothing removed by this run",
                    self.removed_by_others.join(", ")
                )),
            ),
            End::Finished => (Fate::NotReleased, Some("nothing to remove".to_string())),
        };
        self.result = Some(result);
        self.why = why;
        self
    }

    /// Whether the object still holds this run's uid and was written to,
    /// or could be: what force-delete and override hygiene act on.
    fn still_ours(&self) -> bool {
        matches!(
            self.result,
            Some(Fate::Released | Fate::PartlyReleased | Fate::AlreadyReleased)
        )
    }

    /// What happened, a line each, as the run prints it.
    fn progress(&self, suffix: &str) -> Vec<String> {
        let label = self.label();
        let why = self.why.as_deref().unwrap_or_default();
        let how = match &self.r#override {
            Some(o) => format!(" with override {o:?}"),
            None => String::new(),
        };
        let others = if self.removed_by_others.is_empty() {
            String::new()
        } else {
            format!(
                "; already removed by someone else: {}",
                self.removed_by_others.join(", ")
            )
        };
        let removed = self.removed.join(", ");
        let mut lines = vec![match self.result {
            Some(Fate::Released) => {
                format!("{label} released{suffix}: removed {removed}{how}{others}")
            }
            Some(Fate::PartlyReleased) => {
                format!("{label} partly released{suffix}: removed {removed}{how}{others}; {why}")
            }
            Some(Fate::AlreadyReleased) => format!("{label} already released{suffix}: {why}"),
            Some(Fate::Gone) => format!("{label} gone{suffix}: {why}"),
            Some(Fate::Replaced) => format!("{label} replaced: {why}"),
            Some(Fate::NotReleased) | None => format!("{label} not released: {why}"),
        }];
        for left in &self.left {
            lines.push(format!("{label} left: {} ({})", left.name, left.why));
        }
        if self.force_deleted {
            lines.push(format!("{label} force-deleted{suffix}"));
        }
        lines
    }
}

/// What the writes to one object came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// Every write went through, or had nothing left to do.
    Finished,
    /// No object holds the name any more.
    Gone,
    /// Another object (this uid) holds the name now.
    Replaced(String),
    /// A write was refused, or could not be made: why.
    Failed(String),
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
    pub partly_released: usize,
    pub already_released: usize,
    pub not_released: usize,
    pub gone: usize,
    pub replaced: usize,
    pub force_deleted: usize,
}

impl Summary {
    fn of(reports: &[ObjectReport]) -> Summary {
        let mut summary = Summary {
            objects: reports.len(),
            ..Summary::default()
        };
        for r in reports {
            match r.result {
                Some(Fate::Released) => summary.released += 1,
                Some(Fate::PartlyReleased) => summary.partly_released += 1,
                Some(Fate::AlreadyReleased) => summary.already_released += 1,
                Some(Fate::NotReleased) => summary.not_released += 1,
                Some(Fate::Gone) => summary.gone += 1,
                Some(Fate::Replaced) => summary.replaced += 1,
                None => {}
            }
            summary.force_deleted += usize::from(r.force_deleted);
        }
        summary
    }

    /// 0 when every object selected is released (by this run, already by
    /// someone else, or gone), 1 when any is not: still held, partly
    /// released, replaced by a new object, or not found.
    fn exit_code(&self, missing: usize) -> i32 {
        let failed = self.not_released + self.partly_released + self.replaced + missing > 0;
        i32::from(failed)
    }
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
    /// `--finalizer`: named, so removed even when its owner looks alive.
    named: Vec<String>,
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
        named: finalizers.clone(),
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
            print_explanation(&out, &report, &finalizers);
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
        for line in report.progress(suffix) {
            out.progress(line);
        }
        if let (Some(Fate::NotReleased | Fate::PartlyReleased), Some(why)) =
            (&report.result, &report.why)
            && why.starts_with("the webhook is unreachable")
        {
            webhook_down = Some("the webhook is unreachable".into());
            eprintln!("{why}\n{WEBHOOK_DOWN_HELP}");
        }
        reports.push(report);
    }

    let summary = Summary::of(&reports);
    let missing = selected.missing;
    let code = summary.exit_code(missing.len());
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
    Ok(code)
}

fn print_explanation(out: &Out, report: &ObjectReport, named: &[String]) {
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
        if held_back(f, named) {
            out.line(
                "    unstick:     leaves it, its owner being alive: name it with --finalizer to remove it",
            );
        }
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
    let mut more = String::new();
    for (n, what) in [
        (summary.partly_released, "partly released"),
        (summary.already_released, "already released by someone else"),
        (summary.replaced, "replaced by a new object (left alone)"),
    ] {
        if n > 0 {
            more.push_str(&format!(", {n} {what}"));
        }
    }
    out.line(format!(
        "released {} of {} object(s), {} already gone, {} force-deleted{more}{dry}{left_alone}",
        summary.released,
        summary.objects + missing.len(),
        summary.gone,
        summary.force_deleted
    ));
    let failed: Vec<&ObjectReport> = reports
        .iter()
        .filter(|r| {
            matches!(
                r.result,
                Some(Fate::NotReleased | Fate::PartlyReleased | Fate::Replaced)
            )
        })
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

/// Whether this run leaves `f` in place: its owner looks alive and it was
/// not named with `--finalizer`.
fn held_back(f: &FinalizerReport, named: &[String]) -> bool {
    matches!(f.owner_alive, Liveness::Alive(_)) && !named.contains(&f.name)
}

/// The finalizers of `field` this run removes, in list order, and those it
/// leaves because their owner looks alive and they were not named.
fn plan(
    finalizers: &[FinalizerReport],
    named: &[String],
    field: FinalizerField,
) -> (Vec<String>, Vec<Left>) {
    let mut remove = Vec::new();
    let mut left = Vec::new();
    for f in finalizers.iter().filter(|f| f.field == field) {
        match &f.owner_alive {
            Liveness::Alive(why) if held_back(f, named) => left.push(Left {
                name: f.name.clone(),
                field,
                why: format!("owner alive: {why}; name it with --finalizer to remove it"),
            }),
            _ => remove.push(f.name.clone()),
        }
    }
    (remove, left)
}

async fn release_one(
    ctx: &mut Ctx<'_>,
    mut found: Found,
    mut report: ObjectReport,
) -> ObjectReport {
    let (meta_plan, mut left) = plan(&report.finalizers, &ctx.named, FinalizerField::Metadata);
    let (spec_plan, spec_left) = plan(&report.finalizers, &ctx.named, FinalizerField::Spec);
    left.extend(spec_left);
    report.left = left;
    if meta_plan.is_empty() && spec_plan.is_empty() {
        return report.settle(End::Finished);
    }
    // The object explained, and no other, is what every write tests.
    let Some(uid) = found.object.metadata.uid.clone().filter(|u| !u.is_empty()) else {
        return report.settle(End::Failed(
            "the API server sent it without a uid: nothing is written without one".into(),
        ));
    };
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
        let planned = |f: &&FinalizerReport| match f.field {
            FinalizerField::Metadata => meta_plan.contains(&f.name),
            FinalizerField::Spec => spec_plan.contains(&f.name),
        };
        let blocked = report.finalizers.iter().filter(planned).find_map(|f| match &f.removable {
            Removable::NeedsApproval { why, approvers } => Some(format!(
                "{why}; an approver ({approvers}) runs: finalizer-guard approve {} --reason R --detail T --for 1h",
                report.label()
            )),
            Removable::NotDeleting => Some("the object is not being deleted".into()),
            Removable::No { why } => Some(why.clone()),
            _ => None,
        });
        if let Some(why) = blocked {
            return report.settle(End::Failed(why));
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
            None => return report.settle(End::Failed("no --reason given".into())),
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
    pause_before_write(&report).await;

    let end = 'writes: {
        // metadata.finalizers: one JSON patch, tested at every index.
        if !meta_plan.is_empty() {
            match patch_loop(
                ctx,
                &api,
                &name,
                &uid,
                &mut found,
                &meta_plan,
                write_override,
            )
            .await
            {
                Ok(Wrote::Done { removed, absent }) => {
                    report.removed.extend(removed);
                    report.removed_by_others.extend(absent);
                }
                Ok(Wrote::Gone) => break 'writes End::Gone,
                Ok(Wrote::Replaced(other)) => break 'writes End::Replaced(other),
                Err(why) => break 'writes End::Failed(why),
            }
        }
        // spec.finalizers: namespaces/finalize, guarded by the uid and resourceVersion.
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
                match patch_loop(ctx, &api, &name, &uid, &mut found, &[], Some(value)).await {
                    Ok(Wrote::Done { .. }) => {}
                    Ok(Wrote::Gone) => break 'writes End::Gone,
                    Ok(Wrote::Replaced(other)) => break 'writes End::Replaced(other),
                    Err(why) => break 'writes End::Failed(why),
                }
            }
            match finalize_loop(ctx, &api, &name, &uid, &mut found, &spec_plan).await {
                Ok(Wrote::Done { removed, absent }) => {
                    report.removed.extend(removed);
                    report.removed_by_others.extend(absent);
                }
                Ok(Wrote::Gone) => break 'writes End::Gone,
                Ok(Wrote::Replaced(other)) => break 'writes End::Replaced(other),
                Err(why) => break 'writes End::Failed(why),
            }
        }
        End::Finished
    };
    let mut report = report.settle(end);
    if !report.still_ours() {
        return report;
    }
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
        match clear_override(ctx, &api, &name, &uid, &authority).await {
            Ok(cleared) => report.override_cleared = cleared,
            Err(why) => {
                let also = report
                    .why
                    .take()
                    .map(|w| format!("{w}; "))
                    .unwrap_or_default();
                report.why = Some(format!(
                    "{also}released, but the override was not removed: {why}"
                ));
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
/// `object`, testing first that it is the object with `uid` (the one
/// explained) at the resourceVersion read, and each value at its index; it
/// writes the override annotation when given. `None`: nothing to do.
pub fn removal_patch(
    uid: &str,
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
    let mut ops = Vec::from(patch::same_object(
        uid,
        meta.resource_version.as_deref().unwrap_or_default(),
    ));
    if let Some(pair) = annotation {
        ops.extend(patch::add_annotations(object, &[pair]));
    }
    // From the end, so each index still points at the name tested.
    for &i in indexes.iter().rev() {
        let at = || patch::metadata([Token::new("finalizers"), Token::from(i)]);
        ops.push(patch::test(at(), finalizers[i].as_str()));
        ops.push(patch::remove(at()));
    }
    Some(json_patch::Patch(ops))
}

/// What a write loop came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wrote {
    /// The write went through, or there was nothing left to write:
    /// `removed` by it, and the planned names already `absent`.
    Done {
        removed: Vec<String>,
        absent: Vec<String>,
    },
    /// No object holds the name any more.
    Gone,
    /// Another object (this uid) holds the name now.
    Replaced(String),
}

/// Patches until the plan is removed, reading the object again after a
/// concurrent change.
async fn patch_loop(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    found: &mut Found,
    plan: &[String],
    annotation: Option<&str>,
) -> Result<Wrote, String> {
    let key = ctx.policy.override_settings.annotation.as_str();
    retry(api, name, uid, plan, found, async |found: &Found| {
        let present = distinct(
            found
                .metadata_finalizers()
                .into_iter()
                .filter(|f| plan.contains(f)),
        );
        let needs_annotation =
            annotation.filter(|v| found.annotations().get(key).is_none_or(|have| have != v));
        let Some(patch) =
            removal_patch(uid, &found.object, plan, needs_annotation.map(|v| (key, v)))
        else {
            return (present, None);
        };
        let written = api
            .patch(name, &ctx.params, &Patch::Json::<()>(patch))
            .await;
        (present, Some(written))
    })
    .await
}

/// `namespaces/NAME/finalize` with the plan removed from `spec.finalizers`:
/// a whole Namespace, carrying the uid explained and the resourceVersion
/// read, which the API server holds the write to.
async fn finalize_loop(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    found: &mut Found,
    plan: &[String],
) -> Result<Wrote, String> {
    let params = PostParams {
        dry_run: ctx.dry_run,
        field_manager: Some(super::FIELD_MANAGER.into()),
    };
    retry(api, name, uid, plan, found, async |found: &Found| {
        let (present, kept): (Vec<String>, Vec<String>) = found
            .spec_finalizers()
            .into_iter()
            .partition(|f| plan.contains(f));
        let present = distinct(present.into_iter());
        if present.is_empty() {
            return (present, None);
        }
        let body = finalize_body(&found.object, uid, &kept);
        let written = api
            .replace_subresource("finalize", name, &params, &body)
            .await;
        (present, Some(written))
    })
    .await
}

/// The Namespace `namespaces/finalize` is sent: `object` with `kept` as its
/// `spec.finalizers`, and the uid explained and the resourceVersion read as
/// the API server's preconditions.
fn finalize_body(object: &DynamicObject, uid: &str, kept: &[String]) -> DynamicObject {
    let mut body = object.clone();
    body.metadata.uid = Some(uid.to_string());
    body.data["spec"]["finalizers"] = json!(kept);
    body
}

fn distinct(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Writes until `write` has nothing left to do or a write goes through,
/// reading the object again after a concurrent change, at most
/// [`ATTEMPTS`] times. `write` returns the planned names it finds on the
/// object and the API server's answer, `None` when it wrote nothing.
async fn retry(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    plan: &[String],
    found: &mut Found,
    mut write: impl AsyncFnMut(&Found) -> (Vec<String>, Option<kube::Result<DynamicObject>>),
) -> Result<Wrote, String> {
    for _ in 0..ATTEMPTS {
        let (present, written) = write(found).await;
        let absent = distinct(plan.iter().filter(|f| !present.contains(f)).cloned());
        match written {
            None => {
                return Ok(Wrote::Done {
                    removed: Vec::new(),
                    absent,
                });
            }
            Some(Ok(object)) => {
                found.object = object;
                return Ok(Wrote::Done {
                    removed: present,
                    absent,
                });
            }
            Some(Err(e)) => {
                match read_again(api, name, uid, found, WriteError::from_kube(&e)).await? {
                    Reread::Again => {}
                    Reread::Gone => return Ok(Wrote::Gone),
                    Reread::Replaced(other) => return Ok(Wrote::Replaced(other)),
                }
            }
        }
    }
    Err(format!(
        "it kept changing: {ATTEMPTS} attempts each met a newer resourceVersion"
    ))
}

/// What a second read found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reread {
    /// The same object, still being deleted, changed: try again.
    Again,
    Gone,
    /// Another object (this uid) holds the name.
    Replaced(String),
}

/// Whether `object`, read again by name, is still the one explained (`uid`)
/// and still being deleted.
fn same_and_deleting(uid: &str, object: &DynamicObject) -> Result<Reread, String> {
    let now = object.metadata.uid.as_deref().unwrap_or_default();
    if now != uid {
        return Ok(Reread::Replaced(now.to_string()));
    }
    if object.metadata.deletion_timestamp.is_none() {
        return Err("read again, it is no longer being deleted: left alone".into());
    }
    Ok(Reread::Again)
}

/// After a refused write: reads the object again when the refusal may be
/// a concurrent change (a conflict, or a 422 from a failed `test`), checks
/// that it is still the object explained and still being deleted, and says
/// whether to try again.
async fn read_again(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    found: &mut Found,
    error: WriteError,
) -> Result<Reread, String> {
    match error {
        WriteError::Conflict | WriteError::Unprocessable(_) => {}
        WriteError::NotFound => return Ok(Reread::Gone),
        other => return Err(describe(other)),
    }
    let seen = found.object.metadata.resource_version.clone();
    let object = match api.get_opt(name).await {
        Ok(Some(object)) => object,
        Ok(None) => return Ok(Reread::Gone),
        Err(e) => return Err(format!("reading it again: {e}")),
    };
    match same_and_deleting(uid, &object)? {
        Reread::Again => {}
        other => return Ok(other),
    }
    found.object = object;
    // Unchanged: the 422 was about the write itself.
    if found.object.metadata.resource_version == seen {
        return Err(describe(error));
    }
    Ok(Reread::Again)
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
/// that still exists and is still the one released (`uid`). `Ok(false)`:
/// it is gone or replaced, or the annotation changed.
async fn clear_override(
    ctx: &Ctx<'_>,
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    authority: &Authority,
) -> Result<bool, String> {
    let object = match api.get_opt(name).await {
        Ok(Some(o)) if o.metadata.uid.as_deref() == Some(uid) => o,
        Ok(_) => return Ok(false),
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
            let at = || patch::metadata([Token::new("annotations"), Token::new(key)]);
            ops.push(patch::test(at(), value.as_str()));
            ops.push(patch::remove(at()));
        }
    }
    if ops.is_empty() {
        return Ok(false);
    }
    ops.insert(0, patch::test(patch::metadata([Token::new("uid")]), uid));
    match api
        .patch(
            name,
            &ctx.params,
            &Patch::Json::<()>(json_patch::Patch(ops)),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) => match WriteError::from_kube(&e) {
            // Gone, changed or replaced since the read: left as it is.
            WriteError::NotFound | WriteError::Conflict | WriteError::Unprocessable(_) => Ok(false),
            other => Err(describe(other)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn object(finalizers: &[&str], annotations: Option<&[(&str, &str)]>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "team-a", "uid": "uid-1", "resourceVersion": "42",
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
    fn removes_exactly_the_plan_testing_the_uid_and_each_index_from_the_end() {
        let o = object(&["a", "keep", "b", "a"], None);
        let patch = removal_patch("uid-1", &o, &["a".into(), "b".into()], None).unwrap();
        assert_eq!(
            ops(patch),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
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
    fn the_patch_tests_the_uid_explained_not_the_one_read_again() {
        // Read again after a refused write, the name holds another object
        // with the same finalizer: a patch built from it still tests the
        // uid that was explained, and the API server refuses it.
        let new = object(&["a"], None);
        let patch = removal_patch("uid-explained", &new, &["a".into()], None).unwrap();
        assert_eq!(
            ops(patch.clone())[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "uid-explained"})
        );
        let mut stored = serde_json::to_value(&new).unwrap();
        assert!(json_patch::patch(&mut stored, &patch).is_err());
        assert_eq!(stored["metadata"]["finalizers"], json!(["a"]));
        // On the object explained it removes the finalizer.
        let patch = removal_patch("uid-1", &new, &["a".into()], None).unwrap();
        json_patch::patch(&mut stored, &patch).unwrap();
        assert_eq!(stored["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn writes_the_override_in_the_same_patch() {
        let key = "finalizer-guard.io/override";
        let bare = object(&["x"], None);
        let with_map = object(&["x"], Some(&[("team", "a")]));
        let value = "node-lost: INC-1";
        assert_eq!(
            ops(removal_patch("uid-1", &bare, &["x".into()], Some((key, value))).unwrap())[2],
            json!({"op": "add", "path": "/metadata/annotations", "value": {key: value}})
        );
        assert_eq!(
            ops(removal_patch("uid-1", &with_map, &["x".into()], Some((key, value))).unwrap())[2],
            json!({"op": "add", "path": "/metadata/annotations/finalizer-guard.io~1override", "value": value})
        );
    }

    #[test]
    fn nothing_to_do_is_no_patch() {
        let o = object(&["other"], None);
        assert!(removal_patch("uid-1", &o, &["gone".into()], None).is_none());
        assert!(removal_patch("uid-1", &o, &["gone".into()], Some(("k", "v"))).is_none());
        // The override alone (a Namespace before its finalize write), still held to the uid.
        let alone = removal_patch("uid-1", &o, &[], Some(("k", "v"))).unwrap();
        assert_eq!(ops(alone)[0]["path"], "/metadata/uid");
    }

    #[test]
    fn the_finalize_body_carries_the_uid_explained_and_the_resource_version_read() {
        let ns: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "legacy", "uid": "uid-1", "resourceVersion": "9"},
            "spec": {"finalizers": ["kubernetes", "example.com/x"]},
        }))
        .unwrap();
        let body = finalize_body(&ns, "uid-1", &["example.com/x".into()]);
        assert_eq!(body.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(body.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(body.data["spec"]["finalizers"], json!(["example.com/x"]));
    }

    #[test]
    fn read_again_only_the_object_explained_and_still_being_deleted_is_written() {
        let read = |uid: &str, deleting: bool| -> DynamicObject {
            let mut meta = json!({"name": "web-0", "uid": uid, "resourceVersion": "43"});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-11-21T07:00:00Z");
            }
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta}))
                .unwrap()
        };
        assert_eq!(
            same_and_deleting("uid-1", &read("uid-1", true)),
            Ok(Reread::Again)
        );
        assert_eq!(
            same_and_deleting("uid-1", &read("uid-2", true)),
            Ok(Reread::Replaced("uid-2".into()))
        );
        assert_eq!(
            same_and_deleting("uid-1", &read("uid-2", false)),
            Ok(Reread::Replaced("uid-2".into()))
        );
        assert!(same_and_deleting("uid-1", &read("uid-1", false)).is_err());
    }

    fn explained(name: &str, alive: Liveness) -> FinalizerReport {
        FinalizerReport {
            name: name.into(),
            field: FinalizerField::Metadata,
            owner: explain::Owner::Unknown,
            owner_alive: alive,
            removable: Removable::No { why: "-".into() },
        }
    }

    #[test]
    fn a_finalizer_whose_owner_is_alive_goes_only_when_named() {
        let finalizers = [
            explained(
                "example.com/snapshot",
                Liveness::Unknown("no owner is known".into()),
            ),
            explained(
                "kubernetes.io/pvc-protection",
                Liveness::Alive("kube-controller-manager holds its lease (renewed 3s ago)".into()),
            ),
            explained("cni", Liveness::Gone("node lost-1 does not exist".into())),
        ];
        let (remove, left) = plan(&finalizers, &[], FinalizerField::Metadata);
        assert_eq!(remove, ["example.com/snapshot", "cni"]);
        assert_eq!(
            left,
            [Left {
                name: "kubernetes.io/pvc-protection".into(),
                field: FinalizerField::Metadata,
                why: "owner alive: kube-controller-manager holds its lease (renewed 3s ago); name it with --finalizer to remove it".into(),
            }]
        );
        let (remove, left) = plan(
            &finalizers,
            &["kubernetes.io/pvc-protection".into()],
            FinalizerField::Metadata,
        );
        assert_eq!(
            remove,
            [
                "example.com/snapshot",
                "kubernetes.io/pvc-protection",
                "cni"
            ]
        );
        assert!(left.is_empty());
        // Another field's finalizers are another plan.
        assert_eq!(
            plan(&finalizers, &[], FinalizerField::Spec),
            (vec![], vec![])
        );
    }

    fn report() -> ObjectReport {
        let found = Found {
            resource: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            object: serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": "cache", "namespace": "shop", "uid": "uid-1", "resourceVersion": "5",
                    "deletionTimestamp": "2026-11-21T07:00:00Z", "finalizers": ["example.com/cleanup"],
                },
            }))
            .unwrap(),
        };
        ObjectReport::new(&found)
    }

    fn json_of(r: &ObjectReport) -> Value {
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn a_replaced_object_is_reported_replaced_never_released() {
        let r = report().settle(End::Replaced("uid-2".into()));
        assert_eq!(r.result, Some(Fate::Replaced));
        let j = json_of(&r);
        assert_eq!(j["result"], "replaced");
        assert_eq!(j["uid"], "uid-1");
        assert_eq!(j["replacedByUid"], "uid-2");
        assert!(j.get("removed").is_none(), "{j:#}");
        assert_eq!(
            r.progress(""),
            [
                "configmap/cache -n shop replaced: a new object (uid uid-2) took the name; left alone"
            ]
        );
        assert!(!r.still_ours());
        let summary = Summary::of(&[r]);
        assert_eq!((summary.replaced, summary.released), (1, 0));
        assert_eq!(summary.exit_code(0), 1);
    }

    #[test]
    fn a_gone_object_is_reported_gone_never_released() {
        let r = report().settle(End::Gone);
        assert_eq!(json_of(&r)["result"], "gone");
        assert_eq!(
            r.progress(" (server dry run)"),
            [
                "configmap/cache -n shop gone (server dry run): deleted before this run wrote to it; nothing written"
            ]
        );
        assert!(!r.still_ours());
        let summary = Summary::of(&[r]);
        assert_eq!((summary.gone, summary.released), (1, 0));
        // Nothing holds it any more: what the operator asked for.
        assert_eq!(summary.exit_code(0), 0);
    }

    #[test]
    fn finalizers_someone_else_removed_are_not_counted_as_this_runs() {
        let mut r = report();
        r.removed_by_others = vec!["example.com/cleanup".into()];
        let r = r.settle(End::Finished);
        let j = json_of(&r);
        assert_eq!(j["result"], "already-released");
        assert_eq!(j["removedByOthers"], json!(["example.com/cleanup"]));
        assert!(j.get("removed").is_none(), "{j:#}");
        assert_eq!(
            r.progress(""),
            [
                "configmap/cache -n shop already released: someone else removed example.com/cleanup before this run wrote; nothing removed by this run"
            ]
        );
        assert_eq!(Summary::of(&[r]).exit_code(0), 0);

        let mut r = report();
        r.removed = vec!["a".into()];
        r.removed_by_others = vec!["b".into()];
        r.r#override = Some("node-lost: INC-1".into());
        let r = r.settle(End::Finished);
        assert_eq!(r.result, Some(Fate::Released));
        assert_eq!(
            r.progress(""),
            [
                "configmap/cache -n shop released: removed a with override \"node-lost: INC-1\"; already removed by someone else: b"
            ]
        );
    }

    #[test]
    fn left_finalizers_are_said_per_object_and_fail_the_run() {
        let left = Left {
            name: "kubernetes.io/pvc-protection".into(),
            field: FinalizerField::Metadata,
            why: "owner alive: kube-controller-manager holds its lease (renewed 3s ago); name it with --finalizer to remove it".into(),
        };
        let mut r = report();
        r.removed = vec!["example.com/snapshot".into()];
        r.left = vec![left.clone()];
        let r = r.settle(End::Finished);
        let j = json_of(&r);
        assert_eq!(j["result"], "partly-released");
        assert_eq!(j["left"][0]["name"], "kubernetes.io/pvc-protection");
        let lines = r.progress("");
        assert!(
            lines[0].starts_with("configmap/cache -n shop partly released: removed example.com/snapshot; left kubernetes.io/pvc-protection"),
            "{lines:?}"
        );
        assert_eq!(
            lines[1],
            "configmap/cache -n shop left: kubernetes.io/pvc-protection (owner alive: kube-controller-manager holds its lease (renewed 3s ago); name it with --finalizer to remove it)"
        );
        assert!(r.still_ours());
        assert_eq!(Summary::of(&[r]).exit_code(0), 1);

        // Every owner alive: nothing written, not released.
        let mut r = report();
        r.left = vec![left];
        let r = r.settle(End::Finished);
        assert_eq!(r.result, Some(Fate::NotReleased));
        assert_eq!(Summary::of(&[r]).exit_code(0), 1);
    }

    #[test]
    fn released_is_only_what_this_run_removed() {
        let mut r = report();
        r.removed = vec!["example.com/cleanup".into()];
        let r = r.settle(End::Finished);
        assert_eq!(json_of(&r)["result"], "released");
        assert_eq!(json_of(&r)["removed"], json!(["example.com/cleanup"]));
        let summary = Summary::of(&[r]);
        assert_eq!(summary.released, 1);
        assert_eq!(summary.exit_code(0), 0);
        // A name that led to no object fails the run.
        assert_eq!(summary.exit_code(1), 1);
        // A failed write after a removal is partly released, with why.
        let mut r = report();
        r.removed = vec!["a".into()];
        let r = r.settle(End::Failed("denied: no".into()));
        assert_eq!(r.result, Some(Fate::PartlyReleased));
        assert_eq!(r.why.as_deref(), Some("denied: no"));
        assert_eq!(
            report().settle(End::Failed("denied: no".into())).result,
            Some(Fate::NotReleased)
        );
    }
}
