//! `finalizer-guard unstick`: explain what holds stuck objects, and release
//! them through the webhook.
//!
//! Without `--reason` it only reads. With it, each stuck object is released
//! by `super::release`: one patch held to the object explained, a concurrent
//! change read again and never overwritten. Objects are printed one line
//! each as they are done, as `kubectl drain` prints them; the report
//! (`super::report`) closes the run.

use std::time::Duration;

use jiff::Timestamp;

use super::engine::{Engine, Targets};
use super::explain::{self};
use super::liveness::{Kubelet, Probe};
use super::release::{PodEnd, Releaser};
use super::report::{Fate, MissingReport, ObjectReport, Summary, UnstickReport};
use super::select::FoundObject;
use super::session::ClusterError;
use crate::admission::WEBHOOK_NAME;

/// What `unstick` is asked.
#[derive(Debug, Clone, Default)]
pub struct Unstick {
    pub targets: Targets,
    /// `--finalizer`: only these, and these even when their owner looks alive.
    pub finalizers: Vec<String>,
    /// `--reason`: release, not only explain.
    pub release: Option<Release>,
    /// `--not-ready-for`: how long a node must be NotReady before its pods' owners count as gone.
    pub not_ready_for: Duration,
}

/// How to release: the override (written where one is needed) and whether
/// to finish a released pod's deletion when its node is gone.
#[derive(Debug, Clone, Default)]
pub struct Release {
    pub reason: String,
    pub detail: String,
    pub force_delete: bool,
    /// `--orphan-contents`: a Namespace's own `kubernetes` finalizer may go.
    pub orphan_contents: bool,
}

/// Explains, or releases, each selected object: exit 0 when every one is
/// released (or gone), 1 when any is not, 2 on usage or connection errors.
pub async fn run(config: Unstick) -> Result<i32, ClusterError> {
    let Unstick {
        targets,
        finalizers,
        release,
        not_ready_for,
    } = config;
    let engine = Engine::start(targets).await?;
    let override_value = match &release {
        Some(r) => Some(engine.override_value(&r.reason, &r.detail)?),
        None => None,
    };
    let webhook_installed = super::install::webhook_installed(&engine.session.client).await;
    if webhook_installed == Some(false) {
        engine.out.note(format_args!(
            "note: finalizer-guard's webhook ({WEBHOOK_NAME}) is not installed: writes here are not guarded"
        ));
    }
    let selected = engine.select().await?;
    let (user, cluster) = (&engine.session.identity, &engine.session.cluster);
    engine.out.text(cluster.describe(&user.username));
    if release.is_none() {
        engine.out.text(format_args!(
            "as {} under {} (mode {}):",
            engine.session.identity.username,
            engine.source.name,
            engine.policy.mode.as_str()
        ));
    }
    let mut run = Run {
        releaser: Releaser {
            engine: &engine,
            probe: Probe::new(engine.session.client.clone(), not_ready_for),
            force_delete: release.as_ref().is_some_and(|r| r.force_delete),
            override_value,
            named: finalizers,
            orphan_contents: release.as_ref().is_some_and(|r| r.orphan_contents),
        },
        releasing: release.is_some(),
        not_stuck: 0,
    };
    let mut objects = Vec::new();
    for found in selected.objects {
        objects.extend(run.one(found).await);
    }
    let (reason, detail) = release.map(|r| (r.reason, r.detail)).unzip();
    let report = UnstickReport {
        command: "unstick",
        mode: if reason.is_some() {
            "release"
        } else {
            "explain"
        },
        dry_run: engine.dry_run,
        at: Timestamp::now().to_string(),
        user: engine.session.identity.clone(),
        cluster: engine.session.cluster.clone(),
        policy: engine.source.clone(),
        webhook_installed,
        reason,
        detail,
        summary: Summary::of(&objects),
        objects,
        not_found: selected
            .missing
            .into_iter()
            .map(MissingReport::from)
            .collect(),
        unread: selected
            .unread
            .into_iter()
            .map(MissingReport::from)
            .collect(),
        not_stuck: selected.not_stuck + run.not_stuck,
    };
    engine.out.report(&report).map_err(ClusterError::Output)?;
    Ok(report.exit_code())
}

/// One run over the selected objects.
struct Run<'a> {
    releaser: Releaser<'a>,
    /// `--reason` given: release, not only explain.
    releasing: bool,
    /// Listed pods found not stuck on a closer look: their kubelet finishes them.
    not_stuck: usize,
}

impl Run<'_> {
    /// A pod being deleted that no finalizer holds: stuck when its node is
    /// dead (no kubelet will confirm the deletion), and then finished with
    /// `--force-delete`; left, and counted, when whether the node is dead
    /// cannot be told.
    async fn waiting_pod(
        &mut self,
        found: FoundObject,
        mut report: ObjectReport,
    ) -> Option<ObjectReport> {
        let engine = self.releaser.engine;
        let node = found.node().unwrap_or_default().to_string();
        let kubelet = Kubelet::of(&self.releaser.probe.node(&node).await);
        report.kubelet = Some(kubelet.clone());
        if let Kubelet::Finishes(why) = &kubelet {
            if !engine.names_objects() {
                self.not_stuck += 1;
                return None;
            }
            let report = report.not_released(format!(
                "not stuck: no finalizer holds it, and its kubelet finishes the deletion ({why})"
            ));
            engine.out.progress(format_args!(
                "{} {}",
                report.label(),
                report.why.as_deref().unwrap_or_default()
            ));
            return Some(report);
        }
        if !self.releasing {
            for line in report.explanation(&[]) {
                engine.out.text(line);
            }
            return Some(report);
        }
        let api = found.api(&engine.session.client);
        let report = match self.releaser.finish_pod(&api, &found).await {
            Ok(PodEnd::ForceDeleted) => {
                report.force_deleted = true;
                report.result = Some(Fate::ForceDeleted);
                let why = match &kubelet {
                    Kubelet::Dead(why) => why.as_str(),
                    _ => "",
                };
                report.why = Some(format!("no finalizer held it; its node is dead ({why})"));
                report
            }
            Ok(PodEnd::Left(why)) => {
                report.left_terminating = Some(why.clone());
                report.not_released(why)
            }
            Ok(PodEnd::KubeletFinishes) => report.not_released("its kubelet finishes it"),
            Err(e) => report.not_released(format!("not force-deleted: {e}")),
        };
        for line in report.progress(engine.suffix()) {
            engine.out.progress(line);
        }
        Some(report)
    }

    /// Explains one object and, when releasing, releases it; `None` for a
    /// listed object that holds none of the `--finalizer`s (not its business).
    async fn one(&mut self, found: FoundObject) -> Option<ObjectReport> {
        let engine = self.releaser.engine;
        let named = &self.releaser.named;
        let mut report = ObjectReport::new(&found);
        if found.awaits_kubelet() {
            return self.waiting_pod(found, report).await;
        }
        let carries = |name: &String| {
            found.metadata_finalizers().contains(name) || found.spec_finalizers().contains(name)
        };
        let why = if !found.is_stuck() {
            Some(if found.object.metadata.deletion_timestamp.is_none() {
                "not stuck: it is not being deleted (delete it first: kubectl delete --wait=false; an override releases only a Terminating object)".to_string()
            } else {
                "not stuck: no finalizers remain".to_string()
            })
        } else if !named.is_empty() && !named.iter().any(carries) {
            if !engine.names_objects() {
                return None;
            }
            Some(format!("has none of the finalizers {}", named.join(", ")))
        } else {
            None
        };
        if let Some(why) = why {
            engine
                .out
                .progress(format_args!("{} {why}", report.label()));
            return Some(report.not_released(why));
        }
        let (policy, identity) = (&engine.policy, &engine.session.identity);
        let probe = &mut self.releaser.probe;
        report.finalizers = explain::explain(probe, policy, &found, named, identity).await;
        report.blocked_by = crate::cluster::liveness::namespace_blockers(probe, &found).await;
        if found.is_namespace() {
            report.contents = Some(probe.contents(found.name()).await);
        }
        if !self.releasing {
            for line in report.explanation(named) {
                engine.out.text(line);
            }
            return Some(report);
        }
        if engine.webhook_down() {
            let report = report.not_released("not attempted: the webhook is unreachable");
            let label = report.label();
            engine.out.progress(format_args!(
                "{label} not released: the webhook is unreachable"
            ));
            return Some(report);
        }
        let report = self.releaser.release(found, report).await;
        for line in report.progress(engine.suffix()) {
            engine.out.progress(line);
        }
        engine.tell_if_webhook_down(report.why.as_deref().unwrap_or_default());
        Some(report)
    }
}
