//! `finalizer-guard approve`: the two-person override's approval.
//!
//! The approver writes the override (`REASON: DETAIL`), `approved-by` (their
//! own username) and `override-expires` in one request; the webhook checks
//! that they are an approver and refuses the write with the seal it gives
//! that approval on that object, which is then written with the other
//! three. Another person's `unstick` then uses it.

use std::io::{self, Write};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::engine::{Engine, OverrideValue, Targets};
use super::explain::refused_reason;
use super::patch;
use super::select::FoundObject;
use super::session::{ClusterError, SessionCluster, WriteRefusal};
use crate::output::{escape, quoted};
use crate::policy::Approval;
use crate::policy::approval::{self, APPROVED_BY, OVERRIDE_EXPIRES};
use crate::policy::config::OverrideSettings;
use crate::policy::seal::APPROVAL_SEAL;

/// What `approve` is asked.
#[derive(Debug, Clone, Default)]
pub struct Approve {
    pub targets: Targets,
    pub reason: String,
    pub detail: String,
    /// `--for`: how long the approval stands.
    pub for_: Duration,
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
struct ApproveReport {
    command: &'static str,
    dry_run: bool,
    approved_by: String,
    /// The kubeconfig context and the API server.
    cluster: SessionCluster,
    r#override: String,
    expires: String,
    objects: Vec<Approved>,
}

impl crate::output::Report for ApproveReport {
    /// Each object was printed as it was approved; only an empty run is said here.
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        if self.objects.is_empty() {
            writeln!(out, "nothing selected")?;
        }
        Ok(())
    }
}

/// Approves each selected object: exit 0 when every one is approved, 1
/// when any is not, 2 on usage or connection errors.
pub async fn run(config: Approve) -> Result<i32, ClusterError> {
    let engine = Engine::start(config.targets).await?;
    let Some(approval) = engine.policy.override_settings.approval.clone() else {
        return Err(ClusterError::Usage(format!(
            "the policy ({}) has no override.approval: there is no two-person rule to approve for; `unstick --reason R --detail T` writes the override itself",
            engine.source.name
        )));
    };
    let value = engine.override_value(&config.reason, &config.detail)?;
    let expires = expiry(config.for_, &approval)?;
    let me = &engine.session.identity;
    engine
        .out
        .text(engine.session.cluster.describe(&me.username));
    if !approval.is_approver(&me.username, &crate::policy::borrowed(&me.groups)) {
        engine.out.note(format_args!(
            "note: {} is not an approver under {} ({}): the webhook will refuse the approval",
            me.username,
            engine.source.name,
            approval.describe_approvers()
        ));
    }
    let selected = engine.select().await?;
    let mut objects = Vec::new();
    for found in &selected.objects {
        objects.push(approve_found(&engine, found, &value, &expires).await);
    }
    for m in selected.missing.into_iter().chain(selected.unread) {
        engine
            .out
            .progress(format_args!("{} {}", escape(&m.target), m.why));
        objects.push(Approved {
            object: m.target,
            namespace: None,
            approved: false,
            why: Some(m.why),
        });
    }
    let failed = objects.iter().any(|r| !r.approved);
    let report = ApproveReport {
        command: "approve",
        dry_run: engine.dry_run,
        approved_by: me.username.clone(),
        cluster: engine.session.cluster.clone(),
        r#override: value.to_string(),
        expires,
        objects,
    };
    engine.out.report(&report).map_err(ClusterError::Output)?;
    Ok(i32::from(failed))
}

/// Approves one object read, when the reason releases any of its finalizers,
/// and says so.
async fn approve_found(
    engine: &Engine,
    found: &FoundObject,
    value: &OverrideValue,
    expires: &str,
) -> Approved {
    let names: Vec<String> = found
        .metadata_finalizers()
        .into_iter()
        .chain(found.spec_finalizers())
        .collect();
    let reach = ApprovalReach::of(&engine.policy.override_settings, &names, value.reason());
    let why = if !names.is_empty() && reach.releases.is_empty() {
        Some(format!(
            "not attempted: the reason {} releases none of its finalizers: {}",
            value.reason(),
            reach.refused.join("; ")
        ))
    } else {
        if !reach.refused.is_empty() {
            engine.out.note(format_args!(
                "note: on {}, the approval releases {} only, not: {}",
                found.label(),
                reach.releases.join(", "),
                reach.refused.join("; ")
            ));
        }
        approve_one(engine, found, value, expires).await.err()
    };
    match &why {
        None => engine.out.progress(format_args!(
            "{} approved{} until {expires}: {}",
            found.label(),
            engine.suffix(),
            quoted(value.as_str())
        )),
        Some(why) => engine
            .out
            .progress(format_args!("{} not approved: {why}", found.label())),
    }
    Approved {
        object: found.display_name(),
        namespace: found
            .namespace()
            .filter(|_| found.namespaced)
            .map(String::from),
        approved: why.is_none(),
        why,
    }
}

/// Which of an object's finalizers an approval with `reason` can release
/// (`override.finalizers`), and why not the others, escaped for a terminal.
#[derive(Debug, Default, PartialEq, Eq)]
struct ApprovalReach {
    releases: Vec<String>,
    refused: Vec<String>,
}

impl ApprovalReach {
    fn of(settings: &OverrideSettings, names: &[String], reason: &str) -> ApprovalReach {
        let mut reach = ApprovalReach::default();
        for name in names {
            let accepts = settings.accepts(name);
            if accepts.reason(reason) {
                reach.releases.push(escape(name).into_owned());
            } else {
                reach.refused.push(format!(
                    "{}: {}",
                    escape(name),
                    refused_reason(&accepts, reason)
                ));
            }
        }
        reach
    }
}

/// When an approval for `for_` expires, in whole seconds (what people read
/// and type); at most the policy's `maxAge` ahead.
fn expiry(for_: Duration, approval: &Approval) -> Result<String, ClusterError> {
    let usage = |why: String| ClusterError::Usage(why);
    let for_ = SignedDuration::try_from(for_).map_err(|_| usage("--for is too long".into()))?;
    if for_ > approval.max_age {
        return Err(usage(format!(
            "--for {for_:#} is more than the policy's override.approval.maxAge {:#}",
            approval.max_age
        )));
    }
    Timestamp::now()
        .checked_add(for_)
        .and_then(|at| Timestamp::from_second(at.as_second()))
        .map(|at| at.to_string())
        .map_err(|_| usage(format!("--for {for_:#} ends after the last time there is")))
}

/// Writes the approval on one object; why not, when it is not written.
async fn approve_one(
    engine: &Engine,
    found: &FoundObject,
    value: &OverrideValue,
    expires: &str,
) -> Result<(), String> {
    if engine.webhook_down() {
        return Err("not attempted: the webhook is unreachable".into());
    }
    let key = engine.policy.override_settings.annotation.as_str();
    let me = engine.session.identity.username.as_str();
    let mut annotations = vec![
        (key, value.as_str()),
        (APPROVED_BY, me),
        (OVERRIDE_EXPIRES, expires),
    ];
    let api = found.api(&engine.session.client);
    let write = async |annotations: &[(&str, &str)]| {
        let Some(patch) = patch::approval(&found.object, annotations) else {
            return Err(
                "the API server sent it without a uid or resourceVersion: nothing is written without them".to_string(),
            );
        };
        Ok(engine.patch(&api, found.name(), patch).await)
    };
    let mut written = write(&annotations).await?;
    // The webhook refuses an approver's approval without its seal, and
    // says the seal: write the same approval again, sealed. The refused
    // write changed nothing, so the object is still as read.
    let told = match &written {
        Err(WriteRefusal::Denied(m)) => approval::told_seal(m).map(String::from),
        _ => None,
    };
    if let Some(seal) = &told {
        annotations.push((APPROVAL_SEAL, seal));
        written = write(&annotations).await?;
    }
    let refusal = match written {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let why = match &refusal {
        WriteRefusal::Conflict | WriteRefusal::Unprocessable(_) => format!(
            "{refusal}: nothing written, the object changed or another took its name since it was read; run again"
        ),
        _ => refusal.to_string(),
    };
    engine.tell_if_webhook_down(&why);
    Err(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(max_age: &str) -> Approval {
        Approval {
            users: vec!["sec-lead".into()],
            groups: Vec::new(),
            max_age: max_age.parse().unwrap(),
        }
    }

    #[test]
    fn an_approval_reaches_only_the_finalizers_that_accept_its_reason() {
        let p = crate::policy::Policy::from_yaml(
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n  finalizers:\n    - finalizers: [kubernetes.io/pvc-protection]\n      reasons: [node-lost]\n      approval: required\n    - finalizers: [\"vault.io/*\"]\n      never: true\n",
        )
        .unwrap();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let s = &p.override_settings;
        let r = ApprovalReach::of(
            s,
            &names(&[
                "kubernetes.io/pvc-protection",
                "example.com/x",
                "vault.io/a",
            ]),
            "controller-unavailable",
        );
        assert_eq!(r.releases, ["example.com/x"]);
        assert_eq!(
            r.refused,
            [
                "kubernetes.io/pvc-protection: it accepts only node-lost (override.finalizers[0]): not attempted with --reason controller-unavailable",
                "vault.io/a: no override releases it: only its rule or controller (override.finalizers[1])"
            ]
        );
        let r = ApprovalReach::of(s, &names(&["kubernetes.io/pvc-protection"]), "node-lost");
        assert!(r.refused.is_empty());
    }

    #[test]
    fn an_approval_expires_within_max_age_in_whole_seconds() {
        let at = expiry(Duration::from_secs(3600), &approval("2h")).unwrap();
        let at: Timestamp = at.parse().unwrap();
        assert_eq!(at.subsec_nanosecond(), 0);
        let ahead = at.duration_since(Timestamp::now());
        assert!(ahead <= SignedDuration::from_hours(1), "{ahead:#}");
        assert!(ahead > SignedDuration::from_mins(59), "{ahead:#}");
        let e = expiry(Duration::from_secs(3 * 3600), &approval("2h")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--for 3h is more than the policy's override.approval.maxAge 2h"
        );
        // A policy that allows more than there is time left is refused, not a panic.
        let far = SignedDuration::from_hours(24 * 365 * 20_000);
        let e = expiry(
            Duration::try_from(far).unwrap(),
            &Approval {
                max_age: far,
                ..approval("2h")
            },
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("ends after the last time there is"),
            "{e}"
        );
    }
}
