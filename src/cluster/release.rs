//! Releasing one stuck object, as `unstick --reason` does.
//!
//! Each object gets one JSON patch that `test`s the uid it explained, the
//! resourceVersion and each finalizer's value at its index before removing
//! it, and carries the override annotation when the policy needs one; a
//! concurrent change makes it read the object again, never overwrite the
//! change, and an object deleted and created again under the same name (a
//! new uid) is left alone and reported as replaced. A namespace's
//! `spec.finalizers` go through `namespaces/finalize`, which takes only a
//! whole object: its uid and resourceVersion guard that write the same way.
//!
//! A finalizer whose owner looks alive (its controller holds its lease, its
//! node is Ready, a Ready pod runs as its ServiceAccount) is left in place
//! unless it is named with `--finalizer`.

use super::engine::{Engine, OverrideValue};
use super::explain::{self, FinalizerReport, Proposed, Removable};
use super::liveness::{Contents, Finish, Kubelet, Liveness, NAMESPACE_FINALIZER, Probe};
use super::object::{ObjectApi, ReadError};
use super::patch;
use super::report::{End, Left, ObjectReport, Orphaned};
use super::select::FoundObject;
use super::session::WriteRefusal;
use crate::output::{escape, shell_word};
use crate::policy::approval::{APPROVED_BY, OVERRIDE_EXPIRES};
use crate::policy::config::OverrideSettings;
use crate::policy::seal::APPROVAL_SEAL;
use crate::policy::{FinalizerField, Outcome};
use kube::api::DynamicObject;

/// How many times an object that keeps changing is read again.
const ATTEMPTS: usize = 5;

/// What authorizes a release: nothing more, the override this run writes
/// (single-person), or the approval on the object (two-person rule).
#[derive(Debug, Clone)]
enum ReleaseAuthority {
    /// Every removal is authorized by a rule or a built-in controller.
    Authorized,
    /// The override annotation this run writes, `REASON: DETAIL`.
    Write(OverrideValue),
    /// Two-person rule: the approval on the object, `REASON: DETAIL (approved by USER)`.
    Approval(String),
}

impl ReleaseAuthority {
    /// What the report names: the override written, or the approval used.
    fn shown(&self) -> Option<String> {
        match self {
            ReleaseAuthority::Authorized => None,
            ReleaseAuthority::Write(v) => Some(v.to_string()),
            ReleaseAuthority::Approval(v) => Some(v.clone()),
        }
    }

    /// The override annotation this run writes, if any.
    fn written(&self) -> Option<&str> {
        match self {
            ReleaseAuthority::Write(v) => Some(v.as_str()),
            _ => None,
        }
    }
}

/// The finalizers this run removes from each field, and those it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plans {
    metadata: Vec<String>,
    spec: Vec<String>,
    left: Vec<Left>,
}

impl Plans {
    /// `held`: why the namespace's own finalizer stays, unless `--orphan-contents`.
    fn of(finalizers: &[FinalizerReport], named: &[String], held: Option<&str>) -> Plans {
        let (metadata, mut left) = plan(finalizers, named, held, FinalizerField::Metadata);
        let (spec, spec_left) = plan(finalizers, named, held, FinalizerField::Spec);
        left.extend(spec_left);
        Plans {
            metadata,
            spec,
            left,
        }
    }

    /// `override.finalizers`: a finalizer that needs the override and does
    /// not accept its reason is not attempted (the webhook would deny the
    /// whole write); the report says why.
    fn leave_refused(
        &mut self,
        finalizers: &[FinalizerReport],
        settings: &OverrideSettings,
        reason: &str,
    ) {
        for f in finalizers {
            if matches!(f.removable, Removable::Authorized { .. }) || !self.contains(f) {
                continue;
            }
            let accepts = settings.accepts(&f.name);
            if accepts.reason(reason) {
                continue;
            }
            let plan = match f.field {
                FinalizerField::Metadata => &mut self.metadata,
                FinalizerField::Spec => &mut self.spec,
            };
            plan.retain(|n| n != &f.name);
            self.left.push(Left {
                name: f.name.clone(),
                field: f.field,
                why: explain::refused_reason(&accepts, reason),
            });
        }
    }

    fn fields(&self) -> [(FinalizerField, &[String]); 2] {
        [
            (FinalizerField::Metadata, &self.metadata),
            (FinalizerField::Spec, &self.spec),
        ]
    }

    fn contains(&self, f: &FinalizerReport) -> bool {
        match f.field {
            FinalizerField::Metadata => self.metadata.contains(&f.name),
            FinalizerField::Spec => self.spec.contains(&f.name),
        }
    }
}

/// The finalizers of `field` this run removes, in list order, and those it
/// leaves: because their owner looks alive and they were not named, or,
/// for a Namespace's own `kubernetes` finalizer, because removing it
/// orphans what is still inside and `--orphan-contents` was not given
/// (`held`: why).
fn plan(
    finalizers: &[FinalizerReport],
    named: &[String],
    held: Option<&str>,
    field: FinalizerField,
) -> (Vec<String>, Vec<Left>) {
    let mut remove = Vec::new();
    let mut left = Vec::new();
    for f in finalizers.iter().filter(|f| f.field == field) {
        // Named by --orphan-contents, whatever its owner's state: a namespace
        // controller that runs may still never empty the namespace.
        if f.is_namespace_finalizer() {
            match held {
                Some(why) => left.push(Left {
                    name: f.name.clone(),
                    field,
                    why: why.to_string(),
                }),
                None => remove.push(f.name.clone()),
            }
            continue;
        }
        match &f.owner_alive {
            Liveness::Alive(why) if f.held_back(named) => left.push(Left {
                name: f.name.clone(),
                field,
                why: format!("owner alive: {why}; name it with --finalizer to remove it"),
            }),
            _ => remove.push(f.name.clone()),
        }
    }
    (remove, left)
}

/// `unstick --reason`'s settings over the shared [`Engine`].
pub struct Releaser<'a> {
    pub engine: &'a Engine,
    pub probe: Probe,
    /// `--force-delete`: finish a released pod's deletion when its node is gone.
    pub force_delete: bool,
    /// The override this run writes where one is needed.
    pub override_value: Option<OverrideValue>,
    /// `--finalizer`: named, so removed even when its owner looks alive.
    pub named: Vec<String>,
    /// `--orphan-contents`: a Namespace's own `kubernetes` finalizer may go,
    /// orphaning what is still inside.
    pub orphan_contents: bool,
}

/// Why a Namespace's own `kubernetes` finalizer stays without `--orphan-contents`.
fn orphan_refusal(contents: Option<&Contents>) -> String {
    let inside = contents.map_or_else(|| "what is still inside".to_string(), Contents::summary);
    format!(
        "the namespace's own finalizer: removing it orphans what is still inside ({inside}), left in etcd with no namespace; release those objects first (each with its own command), or pass --orphan-contents to remove it anyway"
    )
}

/// Why the writes to one object stopped before its plan was done: the
/// report's `why`.
#[derive(Debug, thiserror::Error)]
enum Stopped {
    #[error("the API server sent it without a uid: nothing is written without one")]
    NoUid,
    /// What the policy needs first (an approval, a deletion), said by the explanation.
    #[error("{0}")]
    Needs(String),
    #[error("no --reason given")]
    NoReason,
    #[error("{0}")]
    Refused(WriteRefusal),
    #[error("it kept changing: {ATTEMPTS} attempts each met a newer resourceVersion")]
    KeptChanging,
    #[error("read again, it is no longer being deleted: left alone")]
    NoLongerDeleting,
    #[error("reading it again: {0}")]
    Reread(Box<ReadError>),
    #[error(
        "it is stored, but its namespace {} no longer exists (it was orphaned), and the API server refuses every write to it as not found: create the namespace again (kubectl create namespace {}), run this again, then delete the namespace",
        escape(.0),
        shell_word(.0)
    )]
    Orphaned(String),
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

impl Releaser<'_> {
    /// Releases one stuck object, explained in `report`: what this run
    /// removed, what others had, what it left, and what became of it.
    pub async fn release(
        &mut self,
        mut found: FoundObject,
        mut report: ObjectReport,
    ) -> ObjectReport {
        let held = (!self.orphan_contents).then(|| orphan_refusal(report.contents.as_ref()));
        let mut plans = Plans::of(&report.finalizers, &self.named, held.as_deref());
        if let Some(value) = &self.override_value
            && self.engine.policy.override_settings.approval.is_none()
        {
            plans.leave_refused(
                &report.finalizers,
                &self.engine.policy.override_settings,
                value.reason(),
            );
        }
        report.left = plans.left.clone();
        if plans.metadata.is_empty() && plans.spec.is_empty() {
            return report.settle(End::Finished);
        }
        // The object explained, and no other, is what every write tests.
        let Some(uid) = found.object.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            return report.settle(End::Failed(Stopped::NoUid.to_string()));
        };
        let authority = match self.authority(&found, &plans, &report) {
            Ok(authority) => authority,
            Err(why) => return report.settle(End::Failed(why.to_string())),
        };
        report.r#override = authority.shown();
        let api = found.api(&self.engine.session.client);
        self.pause_before_write(&report).await;
        let end = self
            .write(&api, &uid, &mut found, &plans, &authority, &mut report)
            .await;
        let mut report = report.settle(end);
        let namespace_finalizer_removed = plans.spec.iter().any(|f| f == NAMESPACE_FINALIZER)
            && report.removed.iter().any(|f| f == NAMESPACE_FINALIZER);
        if namespace_finalizer_removed {
            report.orphaned = report.contents.clone().map(Orphaned::from);
        }
        if !report.still_ours() {
            return report;
        }
        self.afterwards(&api, &uid, &found, &authority, report)
            .await
    }

    /// What authorizes the removal: decided by the webhook's own core.
    fn authority(
        &self,
        found: &FoundObject,
        plans: &Plans,
        report: &ObjectReport,
    ) -> Result<ReleaseAuthority, Stopped> {
        let policy = &self.engine.policy;
        let settings = &policy.override_settings;
        let current = found.annotations();
        let authorized = plans.fields().iter().all(|(field, plan)| {
            let proposed = Proposed {
                found,
                field: *field,
                remove: plan,
                identity: &self.engine.session.identity,
                annotations: &current,
            };
            plan.is_empty() || proposed.decide(policy).outcome == Outcome::Authorized
        });
        if authorized {
            return Ok(ReleaseAuthority::Authorized);
        }
        if settings.approval.is_none() {
            return match &self.override_value {
                Some(v) => Ok(ReleaseAuthority::Write(v.clone())),
                None => Err(Stopped::NoReason),
            };
        }
        // Two-person rule: the approval must already be there.
        let planned = report.finalizers.iter().filter(|f| plans.contains(f));
        let blocked = planned.clone().find_map(|f| match &f.removable {
            Removable::NeedsApproval {
                why,
                approvers,
                reasons,
            } => {
                let reason = match reasons.as_slice() {
                    [only] => only.as_str(),
                    _ => "R",
                };
                Some(format!(
                    "{why}; an approver ({approvers}) runs: {} (the reasons that release it: {})",
                    report.command(
                        "approve",
                        &["--reason", reason, "--detail", "T", "--for", "1h"]
                    ),
                    reasons.join(", ")
                ))
            }
            Removable::NotDeleting => Some("the object is not being deleted".into()),
            Removable::No { why } => Some(why.clone()),
            _ => None,
        });
        if let Some(why) = blocked {
            return Err(Stopped::Needs(why));
        }
        let by = current.get(APPROVED_BY).cloned().unwrap_or_default();
        let value = current.get(&settings.annotation).cloned();
        Ok(ReleaseAuthority::Approval(format!(
            "{} (approved by {by})",
            value.unwrap_or_default()
        )))
    }

    /// `FINALIZER_GUARD_PAUSE_BEFORE_WRITE=DURATION` holds each object
    /// between its read and its first write, so that a test can change it
    /// in between and see the change survive.
    async fn pause_before_write(&self, report: &ObjectReport) {
        let Some(pause) = std::env::var("FINALIZER_GUARD_PAUSE_BEFORE_WRITE")
            .ok()
            .and_then(|v| crate::flags::parse_duration(&v).ok())
        else {
            return;
        };
        self.engine.out.note(format_args!(
            "pausing {} before writing {}",
            crate::cluster::liveness::age(pause),
            report.label()
        ));
        tokio::time::sleep(pause).await;
    }

    /// The writes: `metadata.finalizers` in one JSON patch; `spec.finalizers`
    /// through `namespaces/finalize`, after the override when one is needed.
    async fn write(
        &self,
        api: &ObjectApi,
        uid: &str,
        found: &mut FoundObject,
        plans: &Plans,
        authority: &ReleaseAuthority,
        report: &mut ObjectReport,
    ) -> End {
        let override_value = authority.written();
        if !plans.metadata.is_empty() {
            let wrote = self
                .patch_loop(api, uid, found, &plans.metadata, override_value)
                .await;
            if let Some(end) = absorb(wrote, report) {
                return end;
            }
        }
        if plans.spec.is_empty() {
            return End::Finished;
        }
        let key = &self.engine.policy.override_settings.annotation;
        let annotation_needed =
            override_value.filter(|v| found.annotations().get(key).is_none_or(|have| have != v));
        if let Some(value) = annotation_needed {
            // The override first, on the Namespace itself.
            let wrote = self.patch_loop(api, uid, found, &[], Some(value)).await;
            if let Some(end) = absorb(wrote, report) {
                return end;
            }
        }
        let wrote = self.finalize_loop(api, uid, found, &plans.spec).await;
        absorb(wrote, report).unwrap_or(End::Finished)
    }

    /// After the release: force-deletes a pod on a dead node, and removes
    /// the override (or the approval) this release used.
    async fn afterwards(
        &mut self,
        api: &ObjectApi,
        uid: &str,
        found: &FoundObject,
        authority: &ReleaseAuthority,
        mut report: ObjectReport,
    ) -> ObjectReport {
        report.kept = found
            .metadata_finalizers()
            .into_iter()
            .chain(found.spec_finalizers())
            .collect();
        // A pod on a dead node waits for a kubelet that will never come.
        if self.force_delete && found.is_pod() {
            match self.finish_pod(api, found).await {
                Ok(PodEnd::ForceDeleted) => report.force_deleted = true,
                Ok(PodEnd::Left(why)) => report.left_terminating = Some(why),
                Ok(PodEnd::KubeletFinishes) => {}
                Err(why) => {
                    return report
                        .not_released(format!("finalizers removed, but not force-deleted: {why}"));
                }
            }
        }
        // Override hygiene: an override left on an object that still exists is removed.
        let used = !matches!(authority, ReleaseAuthority::Authorized);
        if self.engine.dry_run || report.force_deleted || !used {
            return report;
        }
        match self.clear_override(api, uid, found.name(), authority).await {
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
        report
    }

    /// Patches until the plan is removed, reading the object again after a
    /// concurrent change.
    async fn patch_loop(
        &self,
        api: &ObjectApi,
        uid: &str,
        found: &mut FoundObject,
        plan: &[String],
        annotation: Option<&str>,
    ) -> Result<Wrote, Stopped> {
        let key = self.engine.policy.override_settings.annotation.as_str();
        let name = found.name().to_string();
        retry(api, &name, uid, plan, found, async |found: &FoundObject| {
            let present = distinct(
                found
                    .metadata_finalizers()
                    .into_iter()
                    .filter(|f| plan.contains(f)),
            );
            let needs_annotation =
                annotation.filter(|v| found.annotations().get(key).is_none_or(|have| have != v));
            let annotation = needs_annotation.map(|v| (key, v));
            let Some(patch) = patch::removal(uid, &found.object, plan, annotation) else {
                return (present, None);
            };
            (present, Some(self.engine.patch(api, &name, patch).await))
        })
        .await
    }

    /// `namespaces/NAME/finalize` with the plan removed from `spec.finalizers`:
    /// a whole Namespace, carrying the uid explained and the resourceVersion
    /// read, which the API server holds the write to.
    async fn finalize_loop(
        &self,
        api: &ObjectApi,
        uid: &str,
        found: &mut FoundObject,
        plan: &[String],
    ) -> Result<Wrote, Stopped> {
        let name = found.name().to_string();
        retry(api, &name, uid, plan, found, async |found: &FoundObject| {
            let (present, kept): (Vec<String>, Vec<String>) = found
                .spec_finalizers()
                .into_iter()
                .partition(|f| plan.contains(f));
            let present = distinct(present.into_iter());
            if present.is_empty() {
                return (present, None);
            }
            let body = patch::finalize_body(&found.object, uid, &kept);
            (present, Some(self.engine.finalize(api, &name, &body).await))
        })
        .await
    }

    /// A pod no finalizer holds, being deleted: deleted with grace period
    /// 0 when its node is dead and `--force-delete` was given, else why it
    /// is left Terminating, or nothing when its kubelet will finish it.
    pub async fn finish_pod(
        &mut self,
        api: &ObjectApi,
        found: &FoundObject,
    ) -> Result<PodEnd, WriteRefusal> {
        let Some(node) = found.node().filter(|_| found.awaits_kubelet()) else {
            return Ok(PodEnd::KubeletFinishes);
        };
        let kubelet = Kubelet::of(&self.probe.node(node).await);
        match kubelet.finish(self.force_delete) {
            None => Ok(PodEnd::KubeletFinishes),
            Some(Finish::Leave(why)) => Ok(PodEnd::Left(why)),
            Some(Finish::ForceDelete) => match self.engine.delete_now(api, found).await {
                Ok(()) | Err(WriteRefusal::NotFound) => Ok(PodEnd::ForceDeleted),
                Err(other) => Err(other),
            },
        }
    }

    /// Removes the override (or the approval) this release used from an
    /// object that still exists and is still the one released (`uid`).
    /// `Ok(false)`: it is gone or replaced, or the annotation changed.
    async fn clear_override(
        &self,
        api: &ObjectApi,
        uid: &str,
        name: &str,
        authority: &ReleaseAuthority,
    ) -> Result<bool, Stopped> {
        let object = match api.get_opt(name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(uid) => o,
            Ok(_) => return Ok(false),
            Err(e) => return Err(Stopped::Reread(Box::new(e))),
        };
        let key = self.engine.policy.override_settings.annotation.as_str();
        let keys: &[&str] = match authority {
            ReleaseAuthority::Write(value) => {
                let annotations = object.metadata.annotations.as_ref();
                if annotations.and_then(|a| a.get(key)).map(String::as_str) != Some(value.as_str())
                {
                    return Ok(false);
                }
                &[key]
            }
            ReleaseAuthority::Approval(_) => &[key, APPROVED_BY, OVERRIDE_EXPIRES, APPROVAL_SEAL],
            ReleaseAuthority::Authorized => return Ok(false),
        };
        let Some(patch) = patch::clearing(uid, &object, keys) else {
            return Ok(false);
        };
        match self.engine.patch(api, name, patch).await {
            Ok(_) => Ok(true),
            // Gone, changed or replaced since the read: left as it is.
            Err(
                WriteRefusal::NotFound | WriteRefusal::Conflict | WriteRefusal::Unprocessable(_),
            ) => Ok(false),
            Err(other) => Err(Stopped::Refused(other)),
        }
    }
}

/// What became of a pod no finalizer holds any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEnd {
    /// Its node looks alive: its kubelet finishes the deletion.
    KubeletFinishes,
    /// Deleted with grace period 0 (or gone meanwhile).
    ForceDeleted,
    /// Left Terminating: why.
    Left(String),
}

/// Folds a write loop's result into the report: `Some` when the writes end there.
fn absorb(wrote: Result<Wrote, Stopped>, report: &mut ObjectReport) -> Option<End> {
    match wrote {
        Ok(Wrote::Done { removed, absent }) => {
            report.removed.extend(removed);
            report.removed_by_others.extend(absent);
            None
        }
        Ok(Wrote::Gone) => Some(End::Gone),
        Ok(Wrote::Replaced(other)) => Some(End::Replaced(other)),
        Err(why) => Some(End::Failed(why.to_string())),
    }
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
    api: &ObjectApi,
    name: &str,
    uid: &str,
    plan: &[String],
    found: &mut FoundObject,
    mut write: impl AsyncFnMut(
        &FoundObject,
    ) -> (Vec<String>, Option<Result<DynamicObject, WriteRefusal>>),
) -> Result<Wrote, Stopped> {
    for _ in 0..ATTEMPTS {
        let (present, written) = write(found).await;
        let absent = distinct(plan.iter().filter(|f| !present.contains(f)).cloned());
        let removed = match written {
            None => Vec::new(),
            Some(Ok(object)) => {
                found.object = object;
                present
            }
            Some(Err(e)) => match read_again(api, name, uid, found, e).await? {
                Reread::Again => continue,
                Reread::Gone => return Ok(Wrote::Gone),
                Reread::Replaced(other) => return Ok(Wrote::Replaced(other)),
            },
        };
        return Ok(Wrote::Done { removed, absent });
    }
    Err(Stopped::KeptChanging)
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
fn same_and_deleting(uid: &str, object: &DynamicObject) -> Result<Reread, Stopped> {
    let now = object.metadata.uid.as_deref().unwrap_or_default();
    if now != uid {
        return Ok(Reread::Replaced(now.to_string()));
    }
    if object.metadata.deletion_timestamp.is_none() {
        return Err(Stopped::NoLongerDeleting);
    }
    Ok(Reread::Again)
}

/// After a refused write: reads the object again when the refusal may be
/// a concurrent change (a conflict, or a 422 from a failed `test`), checks
/// that it is still the object explained and still being deleted, and says
/// whether to try again.
async fn read_again(
    api: &ObjectApi,
    name: &str,
    uid: &str,
    found: &mut FoundObject,
    error: WriteRefusal,
) -> Result<Reread, Stopped> {
    match error {
        WriteRefusal::Conflict | WriteRefusal::Unprocessable(_) => {}
        // Not found, yet perhaps still stored: an object whose namespace
        // is gone (orphaned) is refused as not found. Read it to tell.
        WriteRefusal::NotFound => {
            return match api.get_opt(name).await {
                Ok(Some(o)) if o.metadata.uid.as_deref() == Some(uid) => {
                    Err(Stopped::Orphaned(o.metadata.namespace.unwrap_or_default()))
                }
                _ => Ok(Reread::Gone),
            };
        }
        other => return Err(Stopped::Refused(other)),
    }
    let seen = found.object.metadata.resource_version.clone();
    let object = match api.get_opt(name).await {
        Ok(Some(object)) => object,
        Ok(None) => return Ok(Reread::Gone),
        Err(e) => return Err(Stopped::Reread(Box::new(e))),
    };
    match same_and_deleting(uid, &object)? {
        Reread::Again => {}
        other => return Ok(other),
    }
    found.object = object;
    // Unchanged: the 422 was about the write itself.
    if found.object.metadata.resource_version == seen {
        return Err(Stopped::Refused(error));
    }
    Ok(Reread::Again)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let reread = |uid: &str, deleting: bool| same_and_deleting("uid-1", &read(uid, deleting));
        assert!(matches!(reread("uid-1", true), Ok(Reread::Again)));
        for deleting in [true, false] {
            assert!(
                matches!(reread("uid-2", deleting), Ok(Reread::Replaced(uid)) if uid == "uid-2"),
                "{deleting}"
            );
        }
        let stopped = reread("uid-1", false).unwrap_err();
        assert!(matches!(stopped, Stopped::NoLongerDeleting));
        assert_eq!(
            stopped.to_string(),
            "read again, it is no longer being deleted: left alone"
        );
    }

    fn explained(name: &str, alive: Liveness) -> FinalizerReport {
        FinalizerReport {
            name: name.into(),
            field: FinalizerField::Metadata,
            owner: crate::cluster::owner::Owner::Unknown,
            owner_alive: alive,
            removable: Removable::No { why: "-".into() },
        }
    }

    #[test]
    fn the_namespace_finalizer_goes_only_with_orphan_contents() {
        let mut kubernetes = explained(
            "kubernetes",
            Liveness::Alive("kube-controller-manager holds its lease (renewed 3s ago)".into()),
        );
        kubernetes.field = FinalizerField::Spec;
        let finalizers = [
            kubernetes,
            explained(
                "example.com/x",
                Liveness::Unknown("no owner is known".into()),
            ),
        ];
        let contents = Contents {
            remaining: [
                ("widgets.example.com".to_string(), 1),
                ("configmaps".to_string(), 2),
            ]
            .into_iter()
            .collect(),
            ..Contents::default()
        };
        let why = orphan_refusal(Some(&contents));
        assert!(
            why.contains("(3 object(s) (configmaps 2, widgets.example.com 1))"),
            "{why}"
        );
        assert!(why.contains("pass --orphan-contents"), "{why}");
        let held = Plans::of(&finalizers, &[], Some(&why));
        assert_eq!(held.metadata, ["example.com/x"]);
        assert!(held.spec.is_empty());
        assert_eq!(held.left.len(), 1);
        assert_eq!(held.left[0].name, "kubernetes");
        assert_eq!(held.left[0].why, why);
        // With --orphan-contents it goes, though its controller holds its lease.
        let orphaning = Plans::of(&finalizers, &[], None);
        assert_eq!(orphaning.spec, ["kubernetes"]);
        assert!(orphaning.left.is_empty());
    }

    #[test]
    fn a_finalizer_that_refuses_the_reason_is_not_attempted() {
        let policy = crate::policy::Policy::from_yaml(
            "rules:\n  - finalizers: [example.com/mine]\n    users: [me]\noverride:\n  finalizers:\n    - finalizers: [kubernetes.io/pvc-protection]\n      reasons: [node-lost]\n    - finalizers: [\"vault.io/*\"]\n      never: true\n",
        )
        .unwrap();
        let gone = || Liveness::Gone("-".into());
        let mut authorized = explained("example.com/mine", gone());
        authorized.removable = Removable::Authorized {
            by: "rule rules[0]".into(),
        };
        let finalizers = [
            explained("kubernetes.io/pvc-protection", gone()),
            explained("example.com/snapshot", gone()),
            explained("vault.io/lease", gone()),
            authorized,
        ];
        let mut plans = Plans::of(&finalizers, &[], None);
        plans.leave_refused(
            &finalizers,
            &policy.override_settings,
            "controller-unavailable",
        );
        assert_eq!(plans.metadata, ["example.com/snapshot", "example.com/mine"]);
        let why: Vec<(&str, &str)> = plans
            .left
            .iter()
            .map(|l| (l.name.as_str(), l.why.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                (
                    "kubernetes.io/pvc-protection",
                    "it accepts only node-lost (override.finalizers[0]): not attempted with --reason controller-unavailable"
                ),
                (
                    "vault.io/lease",
                    "no override releases it: only its rule or controller (override.finalizers[1])"
                ),
            ]
        );
        // With a reason it accepts, only the never-entry stays.
        let mut plans = Plans::of(&finalizers, &[], None);
        plans.leave_refused(&finalizers, &policy.override_settings, "node-lost");
        assert_eq!(plans.left.len(), 1);
        assert_eq!(plans.left[0].name, "vault.io/lease");
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
        let (remove, left) = plan(&finalizers, &[], None, FinalizerField::Metadata);
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
            None,
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
            plan(&finalizers, &[], None, FinalizerField::Spec),
            (vec![], vec![])
        );
        let plans = Plans::of(&finalizers, &[], None);
        assert_eq!(plans.left.len(), 1);
        assert!(plans.contains(&finalizers[0]) && !plans.contains(&finalizers[1]));
    }
}
