//! What `unstick` reports: per object, what holds it and what became of
//! it; for the run, a summary and an exit code. A typed value with a JSON
//! form (`-o json`) and a text form ([`crate::output::Report`]).

use std::io::{self, Write};

use jiff::Timestamp;
use serde::Serialize;

use super::explain::{self, FinalizerReport};
use super::install::PolicySource;
use super::liveness::{Contents, Kubelet};
use super::select::{self, FoundObject, Missing};
use super::session::{SessionCluster, SessionUser};
use crate::admission::ledger::Ledger;
use crate::output::{escape, quoted};
use crate::policy::FinalizerField;

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
    /// A pod no finalizer held, waiting for the kubelet of a dead node:
    /// this run deleted it with grace period 0.
    ForceDeleted,
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
    /// A pod no finalizer holds: whether its node's kubelet will finish it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    pub may_leak: Ledger,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
    /// A Namespace being deleted: what is still inside, and what holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<Contents>,
    /// This run removed the Namespace's own `kubernetes` finalizer
    /// (`--orphan-contents`): what it orphaned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned: Option<Orphaned>,
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
    /// A pod with no finalizer left that this run left Terminating, though
    /// asked to finish it (`--force-delete`), or that waits for a dead
    /// node's kubelet: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_terminating: Option<String>,
}

impl ObjectReport {
    pub fn new(found: &FoundObject) -> ObjectReport {
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
            stuck_for: deleted.map(|t| {
                crate::cluster::liveness::age(Timestamp::now().duration_since(t).unsigned_abs())
            }),
            finalizers: Vec::new(),
            kubelet: None,
            may_leak: explain::may_leak(found),
            blocked_by: Vec::new(),
            contents: None,
            orphaned: None,
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
            left_terminating: None,
        }
    }

    /// `pod/web-0 -n team-a`: as a kubectl command names it.
    pub fn label(&self) -> String {
        select::label(&self.object, self.namespace.as_deref())
    }

    /// `finalizer-guard VERB OBJECT [-n NS] ARGS...`, shell-quoted: a command to paste.
    pub fn command(&self, verb: &str, args: &[&str]) -> String {
        select::command(verb, &self.object, self.namespace.as_deref(), args)
    }

    pub fn not_released(mut self, why: impl Into<String>) -> ObjectReport {
        self.result = Some(Fate::NotReleased);
        self.why = Some(why.into());
        self
    }

    /// The result, from what the writes came to and what was removed,
    /// removed by others and left: never "released" for an object this
    /// run did not write to.
    pub fn settle(mut self, end: End) -> ObjectReport {
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
                let (alive, held): (Vec<&Left>, Vec<&Left>) = self
                    .left
                    .iter()
                    .partition(|l| l.why.starts_with("owner alive"));
                let mut whys = Vec::new();
                if !alive.is_empty() {
                    let names: Vec<&str> = alive.iter().map(|l| l.name.as_str()).collect();
                    whys.push(format!(
                        "left {}: the owner is alive (name it with --finalizer to remove it)",
                        names.join(", ")
                    ));
                }
                for l in held {
                    whys.push(format!("left {}: {}", l.name, l.why));
                }
                let why = whys.join("; ");
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
    pub fn still_ours(&self) -> bool {
        matches!(
            self.result,
            Some(Fate::Released | Fate::PartlyReleased | Fate::AlreadyReleased)
        )
    }

    /// What happened, a line each, as the run prints it.
    pub fn progress(&self, suffix: &str) -> Vec<String> {
        let label = self.label();
        let why = self.why.as_deref().unwrap_or_default();
        let how = match &self.r#override {
            Some(o) => format!(" with override {}", quoted(o)),
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
            Some(Fate::ForceDeleted) => format!("{label} force-deleted{suffix}: {why}"),
            Some(Fate::NotReleased) | None => format!("{label} not released: {why}"),
        }];
        for left in &self.left {
            lines.push(format!("{label} left: {} ({})", left.name, left.why));
        }
        let namespace_held = self.left.iter().any(|l| {
            l.field == FinalizerField::Spec
                && l.name == crate::cluster::liveness::NAMESPACE_FINALIZER
        });
        if let Some(contents) = self.contents.as_ref().filter(|_| namespace_held) {
            lines.extend(contents.lines());
        }
        if let Some(orphaned) = &self.orphaned {
            lines.push(format!("{label} orphaned{suffix}: {}", orphaned.summary));
        }
        if self.force_deleted && self.result != Some(Fate::ForceDeleted) {
            lines.push(format!("{label} force-deleted{suffix}"));
        }
        if let Some(why) = self
            .left_terminating
            .as_ref()
            .filter(|_| self.result != Some(Fate::NotReleased))
        {
            lines.push(format!("{label} left Terminating: {why}"));
        }
        lines
    }
}

/// What removing a Namespace's own `kubernetes` finalizer orphaned: the
/// objects still inside, counted by type, left in etcd with no namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Orphaned {
    pub objects: usize,
    pub by_type: std::collections::BTreeMap<String, usize>,
    /// What could not be listed, and so is not counted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
    /// The same, in words.
    pub summary: String,
}

impl From<Contents> for Orphaned {
    fn from(c: Contents) -> Orphaned {
        Orphaned {
            objects: c.total(),
            summary: c.summary(),
            by_type: c.remaining,
            unread: c.unread,
        }
    }
}

/// What the writes to one object came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
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
pub struct UnstickReport {
    pub command: &'static str,
    /// `explain` or `release`.
    pub mode: &'static str,
    pub dry_run: bool,
    pub at: String,
    pub user: SessionUser,
    /// The kubeconfig context and the API server.
    pub cluster: SessionCluster,
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
    /// Listed or named objects that could not be read as the object
    /// meant (an error reading one, another object in its place): each
    /// left alone, the rest done.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<MissingReport>,
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
    /// Pods left Terminating with no finalizer, their node dead or not
    /// known to be alive (`leftTerminating` on each).
    pub left_terminating: usize,
}

impl Summary {
    pub fn of(reports: &[ObjectReport]) -> Summary {
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
                Some(Fate::ForceDeleted) | None => {}
            }
            summary.force_deleted += usize::from(r.force_deleted);
            summary.left_terminating += usize::from(r.left_terminating.is_some());
        }
        summary
    }

    /// 0 when every object selected is released (by this run, already by
    /// someone else, or gone), 1 when any is not: still held, partly
    /// released, replaced by a new object, left Terminating, or not found.
    pub fn exit_code(&self, missing: usize) -> i32 {
        let failed = self.not_released
            + self.partly_released
            + self.replaced
            + self.left_terminating
            + missing
            > 0;
        i32::from(failed)
    }
}

impl ObjectReport {
    /// The explanation of a stuck object, a line each: what holds it, who
    /// owns each finalizer, whether the owner looks alive, whether you may
    /// remove it; `named` is `--finalizer`.
    pub fn explanation(&self, named: &[String]) -> Vec<String> {
        self.explanation_lines(named, true)
    }

    /// The explanation as one line, for someone other than the reader who
    /// ran the command (a `FinalizerStuck` Event): no "you" line, each
    /// finalizer's owner and liveness after its name.
    pub fn explanation_note(&self) -> String {
        let mut note = String::new();
        for line in self.explanation_lines(&[], false) {
            let depth = line.len() - line.trim_start_matches(' ').len();
            // The columns' padding goes; what the names hold stays, to be escaped.
            let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
            if !note.is_empty() {
                note.push_str(if depth > 2 { "; " } else { ". " });
            }
            note.push_str(&words.join(" "));
        }
        note
    }

    fn explanation_lines(&self, named: &[String], you: bool) -> Vec<String> {
        let stuck = self
            .stuck_for
            .as_deref()
            .map_or_else(String::new, |a| format!(": Terminating for {a}"));
        let mut lines = vec![format!("{}{stuck}", self.label())];
        for b in &self.blocked_by {
            lines.push(format!("  blocked by: {b}"));
        }
        if let Some(contents) = &self.contents {
            lines.extend(contents.lines());
        }
        lines.push(format!("  may leak:  {}", self.may_leak.summary()));
        if let Some(kubelet) = &self.kubelet {
            lines.push(
                "  no finalizer holds it: it waits for its node's kubelet to confirm the deletion"
                    .into(),
            );
            lines.push(match kubelet {
                Kubelet::Finishes(why) => format!("    node alive:  yes: {why}"),
                Kubelet::Dead(why) => format!("    node alive:  no: {why}"),
                Kubelet::CannotTell(why) => format!("    node alive:  cannot tell: {why}"),
            });
            lines.push(match kubelet {
                Kubelet::Finishes(_) => "    unstick:     leaves it: its kubelet finishes it".into(),
                Kubelet::Dead(_) => "    unstick:     --reason R --detail T --force-delete deletes it with grace period 0".into(),
                Kubelet::CannotTell(_) => "    unstick:     leaves it: force-deletes a pod only when its node is known to be dead".into(),
            });
        }
        for f in &self.finalizers {
            let field = if f.field == FinalizerField::Spec {
                " (spec.finalizers)"
            } else {
                ""
            };
            lines.push(format!("  {}{field}", f.name));
            lines.push(format!("    owner:       {}", f.owner));
            lines.push(format!("    owner alive: {}", f.owner_alive));
            if you {
                lines.push(format!("    you:         {}", f.removable));
            }
            if f.is_namespace_finalizer() {
                lines.push(
                    "    unstick:     removes it only with --orphan-contents: the namespace controller removes it once the namespace is empty; removed by hand, what is still inside is orphaned"
                        .into(),
                );
            } else if f.held_back(named) {
                lines.push(
                    "    unstick:     leaves it, its owner being alive: name it with --finalizer to remove it"
                        .into(),
                );
            }
        }
        lines
    }
}

impl UnstickReport {
    /// 0 when every object selected is released (or gone), 1 when any is not.
    pub fn exit_code(&self) -> i32 {
        self.summary
            .exit_code(self.not_found.len() + self.unread.len())
    }

    fn release(&self) -> bool {
        self.mode == "release"
    }

    /// The closing line: how many, and what became of them.
    fn summary_line(&self) -> String {
        let (summary, not_stuck) = (&self.summary, self.not_stuck);
        let left_alone = if not_stuck > 0 {
            format!(" ({not_stuck} listed objects are not stuck and were left alone)")
        } else {
            String::new()
        };
        if self.objects.is_empty() {
            return format!("no stuck objects found{left_alone}");
        }
        if !self.release() {
            return format!(
                "{} stuck object(s){left_alone}. To release: the same command with --reason REASON --detail TEXT (try --dry-run=server first)",
                summary.objects
            );
        }
        let dry = if self.dry_run {
            " (server dry run: nothing changed)"
        } else {
            ""
        };
        let mut more = String::new();
        for (n, what) in [
            (summary.left_terminating, "left Terminating"),
            (summary.partly_released, "partly released"),
            (summary.already_released, "already released by someone else"),
            (summary.replaced, "replaced by a new object (left alone)"),
        ] {
            if n > 0 {
                more.push_str(&format!(", {n} {what}"));
            }
        }
        format!(
            "released {} of {} object(s), {} already gone, {} force-deleted{more}{dry}{left_alone}",
            summary.released,
            summary.objects + self.not_found.len() + self.unread.len(),
            summary.gone,
            summary.force_deleted
        )
    }
}

impl crate::output::Report for UnstickReport {
    /// What was not found, the summary, and in a release what was not
    /// released: the objects themselves were printed as the run went.
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        for m in &self.not_found {
            writeln!(out, "{} {}", escape(&m.target), m.why)?;
        }
        for m in &self.unread {
            writeln!(out, "{} error: {}", escape(&m.target), m.why)?;
        }
        writeln!(out, "{}", self.summary_line())?;
        if !self.release() || self.objects.is_empty() {
            return Ok(());
        }
        let failed: Vec<&ObjectReport> = self
            .objects
            .iter()
            .filter(|r| {
                matches!(
                    r.result,
                    Some(Fate::NotReleased | Fate::PartlyReleased | Fate::Replaced)
                )
            })
            .collect();
        if !failed.is_empty() || !self.not_found.is_empty() || !self.unread.is_empty() {
            writeln!(out, "not released:")?;
            for r in &failed {
                let why = r.why.as_deref().unwrap_or_default();
                writeln!(out, "  {}: {why}", r.label())?;
            }
            for m in self.not_found.iter().chain(&self.unread) {
                writeln!(out, "  {}: {}", escape(&m.target), m.why)?;
            }
        }
        // Released, but still Terminating: what the operator must still see to.
        let terminating = self
            .objects
            .iter()
            .filter(|r| r.left_terminating.is_some() && r.result != Some(Fate::NotReleased));
        let mut said = false;
        for r in terminating {
            if !std::mem::replace(&mut said, true) {
                writeln!(out, "left Terminating:")?;
            }
            let why = r.left_terminating.as_deref().unwrap_or_default();
            writeln!(out, "  {}: {why}", r.label())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn report() -> ObjectReport {
        let found = FoundObject {
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
    fn a_gone_or_replaced_object_is_never_reported_released() {
        for (end, suffix, result, line, exit) in [
            (
                End::Replaced("uid-2".into()),
                "",
                "replaced",
                "configmap/cache -n shop replaced: a new object (uid uid-2) took the name; left alone",
                1,
            ),
            // Nothing holds it any more: what the operator asked for.
            (
                End::Gone,
                " (server dry run)",
                "gone",
                "configmap/cache -n shop gone (server dry run): deleted before this run wrote to it; nothing written",
                0,
            ),
        ] {
            let r = report().settle(end);
            let j = json_of(&r);
            assert_eq!(j["result"], result);
            assert_eq!(j["uid"], "uid-1");
            assert!(j.get("removed").is_none(), "{j:#}");
            assert_eq!(r.progress(suffix), [line]);
            assert!(!r.still_ours());
            let summary = Summary::of(&[r]);
            assert_eq!(summary.released, 0);
            assert_eq!(summary.replaced + summary.gone, 1);
            assert_eq!(summary.exit_code(0), exit, "{result}");
        }
        let replaced = report().settle(End::Replaced("uid-2".into()));
        assert_eq!(json_of(&replaced)["replacedByUid"], "uid-2");
    }

    fn run(
        mode: &'static str,
        objects: Vec<ObjectReport>,
        not_found: Vec<MissingReport>,
    ) -> UnstickReport {
        UnstickReport {
            command: "unstick",
            mode,
            dry_run: false,
            at: "2026-11-21T08:00:00Z".into(),
            user: SessionUser::default(),
            cluster: SessionCluster::default(),
            policy: PolicySource {
                name: "embedded default".into(),
                served_by: Vec::new(),
                note: None,
            },
            webhook_installed: Some(true),
            reason: None,
            detail: None,
            summary: Summary::of(&objects),
            objects,
            not_found,
            unread: Vec::new(),
            not_stuck: 2,
        }
    }

    fn text(r: &UnstickReport) -> String {
        let mut out = Vec::new();
        crate::output::Report::write_text(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_text_report_closes_with_what_was_not_released() {
        let missing = || MissingReport {
            target: "pod/web-9".into(),
            why: "not found in namespace shop".into(),
        };
        let held = report().settle(End::Failed("denied: no".into()));
        let r = run("release", vec![held], vec![missing()]);
        assert_eq!(
            text(&r),
            "pod/web-9 not found in namespace shop\n\
             released 0 of 2 object(s), 0 already gone, 0 force-deleted (2 listed objects are not stuck and were left alone)\n\
             not released:\n  \
             configmap/cache -n shop: denied: no\n  \
             pod/web-9: not found in namespace shop\n"
        );
        assert_eq!(r.exit_code(), 1);
        let explained = run("explain", vec![report()], Vec::new());
        assert!(text(&explained).starts_with("1 stuck object(s) (2 listed objects"));
        assert_eq!(
            text(&run("explain", Vec::new(), Vec::new())),
            "no stuck objects found (2 listed objects are not stuck and were left alone)\n"
        );
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
    fn a_pod_left_terminating_is_counted_and_fails_the_run() {
        let mut r = report();
        r.removed = vec!["example.com/cleanup".into()];
        r.left_terminating = Some("no finalizer holds it, and whether its node is dead cannot be told (you may not read node n1): not force-deleted".into());
        let r = r.settle(End::Finished);
        assert_eq!(r.result, Some(Fate::Released));
        let lines = r.progress("");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].starts_with("configmap/cache -n shop left Terminating: no finalizer holds it"),
            "{lines:?}"
        );
        let run = run("release", vec![r], Vec::new());
        assert_eq!(run.summary.left_terminating, 1);
        assert_eq!(run.exit_code(), 1);
        let t = text(&run);
        assert!(t.contains(", 1 left Terminating"), "{t}");
        assert!(
            t.contains("left Terminating:\n  configmap/cache -n shop: no finalizer holds it"),
            "{t}"
        );
        // Force-deleted: counted, and the run succeeds.
        let mut r = report();
        r.result = Some(Fate::ForceDeleted);
        r.force_deleted = true;
        r.why = Some("no finalizer held it; its node is dead (node n1 does not exist)".into());
        assert_eq!(
            r.progress(""),
            [
                "configmap/cache -n shop force-deleted: no finalizer held it; its node is dead (node n1 does not exist)"
            ]
        );
        let summary = Summary::of(&[r]);
        assert_eq!((summary.force_deleted, summary.exit_code(0)), (1, 0));
    }

    #[test]
    fn what_removing_the_namespace_finalizer_orphans_is_said_by_type() {
        let contents = Contents {
            remaining: [("widgets.example.com".to_string(), 1), ("configmaps".to_string(), 2)]
                .into_iter()
                .collect(),
            holding: vec![crate::cluster::liveness::Holding {
                object: "widgets.example.com/w1".into(),
                finalizers: vec!["example.com/cleanup".into()],
                deleting: true,
                command: "finalizer-guard unstick widgets.example.com/w1 -n shop --reason REASON --detail TEXT".into(),
            }],
            unread: Vec::new(),
        };
        let mut r = report();
        r.removed = vec!["kubernetes".into()];
        r.orphaned = Some(Orphaned::from(contents.clone()));
        let r = r.settle(End::Finished);
        let j = json_of(&r);
        assert_eq!(j["orphaned"]["objects"], 3);
        assert_eq!(j["orphaned"]["byType"]["configmaps"], 2);
        assert_eq!(
            r.progress("")[1],
            "configmap/cache -n shop orphaned: 3 object(s) (configmaps 2, widgets.example.com 1)"
        );
        let lines = contents.lines();
        assert_eq!(
            lines[0],
            "  still inside: 3 object(s) (configmaps 2, widgets.example.com 1)"
        );
        assert_eq!(
            lines[2],
            "    widgets.example.com/w1 (example.com/cleanup): finalizer-guard unstick widgets.example.com/w1 -n shop --reason REASON --detail TEXT"
        );
        let mut unread = Contents::default();
        unread.unread.push("metrics.k8s.io: 503".into());
        assert_eq!(
            unread.summary(),
            "no object, and what could not be listed: metrics.k8s.io: 503"
        );
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
