//! `finalizer-guard approve`: the two-person override's approval.
//!
//! The approver writes the override (`REASON: DETAIL`), `approved-by` (their
//! own username) and `override-expires` in one request; the webhook checks
//! that they are an approver and refuses the write with the seal it gives
//! that approval on that object, which is then written with the other
//! three. Another person's `unstick` then uses it.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use jiff::{SignedDuration, Timestamp};
use kube::api::{DynamicObject, Patch, PatchParams};
use serde::Serialize;

use super::select::Selection;
use super::unstick::{DryRun, OutputFormat};
use super::{ClusterError, Connection, WriteError};
use crate::policy::approval::{self, APPROVED_BY, OVERRIDE_EXPIRES};
use crate::policy::seal::APPROVAL_SEAL;

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// The override's reason, one of the policy's approved reasons.
    #[arg(long, value_name = "REASON")]
    pub reason: String,
    /// What happened (an incident id, the node).
    #[arg(long, value_name = "TEXT")]
    pub detail: String,
    /// How long the approval stands; at most the policy's override.approval.maxAge.
    #[arg(long = "for", value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub for_: Duration,
    /// `server`: the write goes through the API server and the webhook, and is not persisted.
    #[arg(long, value_enum, default_value = "none", value_name = "MODE")]
    pub dry_run: DryRun,
    /// Output format.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Check against this policy file instead of the cluster's (its ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Approved {
    object: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    approved: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    command: &'static str,
    dry_run: bool,
    approved_by: String,
    r#override: String,
    expires: String,
    objects: Vec<Approved>,
}

pub async fn run(args: ApproveArgs) -> Result<i32, ClusterError> {
    let ApproveArgs {
        selection,
        reason,
        detail,
        for_,
        dry_run,
        output,
        policy,
        connection,
    } = args;
    selection.check()?;
    let session = connection.connect().await?;
    let (policy, source) = super::cluster_policy(&session.client, policy.as_deref()).await?;
    let settings = &policy.override_settings;
    let Some(approval) = &settings.approval else {
        return Err(ClusterError::Usage(format!(
            "the policy ({}) has no override.approval: there is no two-person rule to approve for; `unstick --reason R --detail T` writes the override itself",
            source.name
        )));
    };
    if !settings.reasons.contains(&reason) {
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
    let for_ = SignedDuration::try_from(for_)
        .map_err(|_| ClusterError::Usage("--for is too long".into()))?;
    if for_ > approval.max_age {
        return Err(ClusterError::Usage(format!(
            "--for {for_:#} is more than the policy's override.approval.maxAge {:#}",
            approval.max_age
        )));
    }
    let me = &session.identity;
    if !approval.is_approver(&me.username, &crate::policy::borrowed(&me.groups)) {
        eprintln!(
            "note: {} is not an approver under {} ({}): the webhook will refuse the approval",
            me.username,
            source.name,
            approval.describe_approvers()
        );
    }
    // Whole seconds: what people read and type.
    let expires = Timestamp::from_second((Timestamp::now() + for_).as_second())
        .expect("now plus at most maxAge is a valid time")
        .to_string();
    let value = format!("{reason}: {}", detail.trim());
    let dry = dry_run == DryRun::Server;
    let mut params = PatchParams {
        field_manager: Some(super::FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    if dry {
        params = params.dry_run();
    }
    let suffix = if dry { " (server dry run)" } else { "" };

    let selected = selection.run(&session).await?;
    let mut results = Vec::new();
    for found in &selected.objects {
        let label = match found.namespace().filter(|_| found.namespaced) {
            Some(ns) => format!("{} -n {ns}", found.display_name()),
            None => found.display_name(),
        };
        let mut annotations = vec![
            (settings.annotation.as_str(), value.as_str()),
            (APPROVED_BY, me.username.as_str()),
            (OVERRIDE_EXPIRES, expires.as_str()),
        ];
        let api = found.api(&session.client);
        let write = |annotations: &[(&str, &str)]| {
            let patch = approval_patch(&found.object, annotations);
            let (api, params) = (&api, &params);
            async move {
                match patch {
                    Some(patch) => Some(
                        api.patch(found.name(), params, &Patch::Json::<()>(patch))
                            .await,
                    ),
                    None => None,
                }
            }
        };
        let mut result = write(&annotations).await;
        // The webhook refuses an approver's approval without its seal, and
        // says the seal: write the same approval again, sealed. The refused
        // write changed nothing, so the object is still as read.
        let told = match &result {
            Some(Err(e)) => match WriteError::from_kube(e) {
                WriteError::Denied(m) => approval::told_seal(&m).map(String::from),
                _ => None,
            },
            _ => None,
        };
        if let Some(seal) = &told {
            annotations.push((APPROVAL_SEAL, seal));
            result = write(&annotations).await;
        }
        let (approved, why) = match result {
            None => (
                false,
                Some(
                    "the API server sent it without a uid or resourceVersion: nothing is written without them"
                        .into(),
                ),
            ),
            Some(Ok(_)) => (true, None),
            Some(Err(e)) => (
                false,
                Some(match WriteError::from_kube(&e) {
                    WriteError::Denied(m) => format!("denied: {m}"),
                    WriteError::WebhookUnreachable(m) => {
                        format!(
                            "the webhook is unreachable: {m}\n{}",
                            super::WEBHOOK_DOWN_HELP
                        )
                    }
                    WriteError::NotFound => "gone".into(),
                    WriteError::Conflict => "a conflicting change; run again".into(),
                    WriteError::Unprocessable(m) => format!(
                        "{m} (nothing written: the object changed, or another took its name, since it was read; run again)"
                    ),
                    WriteError::Other(m) => m,
                }),
            ),
        };
        if output.is_none() {
            match &why {
                None => println!("{label} approved{suffix} until {expires}: {value:?}"),
                Some(why) => println!("{label} not approved: {why}"),
            }
        }
        results.push(Approved {
            object: found.display_name(),
            namespace: found
                .namespace()
                .filter(|_| found.namespaced)
                .map(String::from),
            approved,
            why,
        });
    }
    for m in &selected.missing {
        if output.is_none() {
            println!("{} {}", m.target, m.why);
        }
        results.push(Approved {
            object: m.target.clone(),
            namespace: None,
            approved: false,
            why: Some(m.why.clone()),
        });
    }
    let failed = results.iter().any(|r| !r.approved);
    if output.is_some() {
        let report = Report {
            command: "approve",
            dry_run: dry,
            approved_by: me.username.clone(),
            r#override: value,
            expires,
            objects: results,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("a report serializes")
        );
    } else if results.is_empty() {
        println!("nothing selected");
    }
    Ok(i32::from(failed))
}

/// The approval's annotations as one JSON patch that first `test`s the uid
/// and resourceVersion read: it never lands on an object created since under
/// the same name, nor on one changed since it was read. `None` when the
/// object came without a uid or resourceVersion.
pub fn approval_patch(
    object: &DynamicObject,
    annotations: &[(&str, &str)],
) -> Option<json_patch::Patch> {
    let mut ops = Vec::from(super::patch::as_read(object)?);
    ops.extend(super::patch::add_annotations(object, annotations));
    Some(json_patch::Patch(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(uid: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "uid": uid, "resourceVersion": "42"},
        })
    }

    #[test]
    fn the_approval_lands_only_on_the_object_read() {
        let read: DynamicObject = serde_json::from_value(pod("uid-1")).unwrap();
        let patch = approval_patch(&read, &[(APPROVED_BY, "sec-lead")]).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/metadata/annotations", "value": {APPROVED_BY: "sec-lead"}},
            ])
        );
        // The object it was read from takes it.
        let mut same = pod("uid-1");
        json_patch::patch(&mut same, &patch).unwrap();
        assert_eq!(same["metadata"]["annotations"][APPROVED_BY], "sec-lead");
        // A pod created since under the same name does not, even at the same resourceVersion.
        let mut recreated = pod("uid-2");
        assert!(json_patch::patch(&mut recreated, &patch).is_err());
        assert!(recreated["metadata"].get("annotations").is_none());
        // Nor the same pod changed since.
        let mut changed = pod("uid-1");
        changed["metadata"]["resourceVersion"] = json!("43");
        assert!(json_patch::patch(&mut changed, &patch).is_err());
        // No uid, no write.
        let mut bare = pod("uid-1");
        bare["metadata"].as_object_mut().unwrap().remove("uid");
        let bare: DynamicObject = serde_json::from_value(bare).unwrap();
        assert!(approval_patch(&bare, &[(APPROVED_BY, "sec-lead")]).is_none());
    }
}
