//! What `unstick` and `approve` share, as kubectl drain's `Helper` is what
//! `kubectl drain` builds on: the session and the policy, how a write is
//! made (field manager, dry run) and what a refusal means, the output and
//! the progress. The command layer ([`crate::cli`]) only turns flags into
//! [`Targets`] and each command's own settings.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};

use super::install::PolicySource;
use super::object::ObjectApi;
use super::select::{FoundObject, Selected, Selection};
use super::session::{ClusterError, Connection, DryRun, Session, WEBHOOK_DOWN_HELP, WriteRefusal};
use crate::output::{Format, Printer, quoted};
use crate::policy::Policy;
use crate::policy::config::OverrideSettings;
use crate::policy::overrides::{self, OverrideProblem};

/// What both commands are asked, whatever else each is: which objects, in
/// which cluster, under which policy, for real or not, printed how.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    pub selection: Selection,
    pub connection: Connection,
    /// `--policy`: judge under this file instead of the cluster's policy.
    pub policy: Option<PathBuf>,
    pub dry_run: DryRun,
    pub format: Format,
}

/// A connected run: who, under which policy, writing how, printing where.
pub struct Engine {
    pub session: Session,
    pub policy: Policy,
    pub source: PolicySource,
    /// `--dry-run=server`.
    pub dry_run: bool,
    pub out: Printer,
    selection: Selection,
    /// Set by the first write the webhook could not be called for.
    webhook_down: AtomicBool,
    /// Whether the operator was told what to do about it.
    told: AtomicBool,
}

impl Engine {
    /// Connects, reads the policy (the cluster's, or `--policy`) and says
    /// what the operator should know about it.
    pub async fn start(targets: Targets) -> Result<Engine, ClusterError> {
        let Targets {
            selection,
            connection,
            policy,
            dry_run,
            format,
        } = targets;
        selection.check()?;
        let session = connection.connect().await?;
        let (policy, source) =
            super::install::cluster_policy(&session.client, policy.as_deref()).await?;
        let out = Printer::stdio(format);
        if let Some(note) = &source.note {
            out.note(format_args!("note: {note}"));
        }
        Ok(Engine {
            session,
            policy,
            source,
            dry_run: dry_run == DryRun::Server,
            out,
            selection,
            webhook_down: AtomicBool::new(false),
            told: AtomicBool::new(false),
        })
    }

    /// The selected objects.
    pub async fn select(&self) -> Result<Selected, ClusterError> {
        self.selection.run(&self.session).await
    }

    /// Whether objects were named (`TYPE/NAME`), not only listed by type or node.
    pub fn names_objects(&self) -> bool {
        self.selection.targets.iter().any(|t| t.contains('/'))
    }

    /// What each line of a server dry run ends with.
    pub fn suffix(&self) -> &'static str {
        if self.dry_run {
            " (server dry run)"
        } else {
            ""
        }
    }

    /// The override `--reason` and `--detail` make, refused here exactly
    /// where the webhook would refuse it.
    pub fn override_value(
        &self,
        reason: &str,
        detail: &str,
    ) -> Result<OverrideValue, ClusterError> {
        OverrideValue::new(reason, detail, &self.policy.override_settings)
    }

    fn patch_params(&self) -> PatchParams {
        let params = PatchParams {
            field_manager: Some(super::session::FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        if self.dry_run {
            params.dry_run()
        } else {
            params
        }
    }

    /// A JSON patch, through the API server and the webhook.
    pub async fn patch(
        &self,
        api: &ObjectApi,
        name: &str,
        patch: json_patch::Patch,
    ) -> Result<DynamicObject, WriteRefusal> {
        let params = self.patch_params();
        let written = api.patch(name, &params, &Patch::Json::<()>(patch)).await;
        written.map_err(|e| self.refused(&e))
    }

    /// A Namespace through `namespaces/NAME/finalize`, which takes a whole object.
    pub async fn finalize(
        &self,
        api: &ObjectApi,
        name: &str,
        body: &DynamicObject,
    ) -> Result<DynamicObject, WriteRefusal> {
        let params = PostParams {
            dry_run: self.dry_run,
            field_manager: Some(super::session::FIELD_MANAGER.into()),
        };
        let written = api
            .replace_subresource("finalize", name, &params, body)
            .await;
        written.map_err(|e| self.refused(&e))
    }

    /// Deletes `found` with grace period 0, only if it is still the object
    /// read (its uid): never a pod of the same name created since.
    pub async fn delete_now(
        &self,
        api: &ObjectApi,
        found: &FoundObject,
    ) -> Result<(), WriteRefusal> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            dry_run: self.dry_run,
            preconditions: Some(Preconditions {
                uid: found.object.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(found.name(), &params).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.refused(&e)),
        }
    }

    /// What a refusal means; the first that says the webhook cannot be
    /// called stops every later write.
    fn refused(&self, e: &kube::Error) -> WriteRefusal {
        let refusal = WriteRefusal::from_kube(e);
        if let WriteRefusal::WebhookUnreachable(_) = refusal {
            self.webhook_down.store(true, Ordering::Relaxed);
        }
        refusal
    }

    /// Whether a write found the webhook unreachable: nothing guarded can
    /// be written until it answers, so nothing more is attempted.
    pub fn webhook_down(&self) -> bool {
        self.webhook_down.load(Ordering::Relaxed)
    }

    /// Once the webhook was found unreachable, says (once) why and what to do.
    pub fn tell_if_webhook_down(&self, why: &str) {
        if self.webhook_down() && !self.told.swap(true, Ordering::Relaxed) {
            self.out.note(format_args!("{why}\n{WEBHOOK_DOWN_HELP}"));
        }
    }
}

/// An override annotation's value, `REASON: DETAIL`, as the webhook will
/// take it: checked by the webhook's own parser against the policy's
/// approved reasons, so that the command refuses exactly what the webhook
/// refuses (an unapproved reason, a DETAIL with no visible character, a
/// control or format character anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideValue(String);

impl OverrideValue {
    pub fn new(
        reason: &str,
        detail: &str,
        settings: &OverrideSettings,
    ) -> Result<OverrideValue, ClusterError> {
        let usage = |why: String| Err(ClusterError::Usage(why));
        // Exactly a listed reason: the parser trims, a flag is taken as typed.
        if !settings.reasons.iter().any(|r| r == reason) {
            return usage(format!(
                "--reason {} is not an approved reason; the policy approves: {}",
                quoted(reason),
                settings.reasons.join(", ")
            ));
        }
        let value = format!("{reason}: {}", detail.trim());
        match overrides::parse(&value, &settings.reasons) {
            Ok(parsed) if parsed.reason == reason => Ok(OverrideValue(value)),
            Ok(_) => usage(format!(
                "--reason {}: the webhook would read the override {} as another reason",
                quoted(reason),
                quoted(&value)
            )),
            Err(OverrideProblem::EmptyDetail) => usage(
                "--detail is empty or has no visible character: say what happened, e.g. an incident id and the node".into(),
            ),
            Err(OverrideProblem::ControlCharacter(c)) => usage(format!(
                "{} holds the control or format character U+{:04X}: write it as plain text on one line",
                if reason.contains(c) { "--reason" } else { "--detail" },
                u32::from(c)
            )),
            Err(problem) => usage(format!(
                "the webhook would refuse the override {}: {problem}",
                quoted(&value)
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl OverrideValue {
    /// REASON, as `--reason` gave it.
    pub fn reason(&self) -> &str {
        self.0.split_once(':').map_or("", |(r, _)| r)
    }
}

impl std::fmt::Display for OverrideValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(reason: &str, detail: &str) -> Result<String, String> {
        let settings = Policy::embedded_default().override_settings;
        OverrideValue::new(reason, detail, &settings)
            .map(|v| v.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_override_is_refused_where_the_webhook_refuses_it() {
        assert_eq!(
            value("node-lost", "  INC-1 server-1 powered off "),
            Ok("node-lost: INC-1 server-1 powered off".into())
        );
        let refused = |reason: &str, detail: &str| value(reason, detail).unwrap_err();
        assert!(
            refused("lost", "INC-1").starts_with(
                "--reason \"lost\" is not an approved reason; the policy approves: node-lost"
            ),
            "{}",
            refused("lost", "INC-1")
        );
        // Taken as typed: the webhook would trim it, the flag does not.
        assert!(refused(" node-lost", "INC-1").contains("is not an approved reason"));
        for detail in ["", "   ", "\u{3164}", "\u{2800} \u{115f}"] {
            assert!(
                refused("node-lost", detail).starts_with("--detail is empty or has no visible"),
                "{detail:?}"
            );
        }
        assert_eq!(
            refused("node-lost", "INC-1\nnode-lost: forged"),
            "--detail holds the control or format character U+000A: write it as plain text on one line"
        );
        assert!(refused("node-lost", "INC\u{202e}1").contains("U+202E"));
        assert!(
            refused("node-lost", "\u{200b}")
                .starts_with("--detail holds the control or format character U+200B")
        );
        assert!(refused("node-lost\t", "INC-1").contains("is not an approved reason"));
    }

    #[test]
    fn what_the_command_refuses_the_webhook_refuses_and_the_other_way_round() {
        let settings = Policy::embedded_default().override_settings;
        for (reason, detail) in [
            ("node-lost", "INC-1"),
            ("node-lost", ""),
            ("node-lost", "a\u{0}b"),
            ("node-lost", "\u{2800}"),
            ("node-lost", "ok: with a colon"),
            ("controller-unavailable", "x"),
        ] {
            let ours = OverrideValue::new(reason, detail, &settings);
            let value = format!("{reason}: {}", detail.trim());
            let webhook = overrides::parse(&value, &settings.reasons);
            assert_eq!(ours.is_ok(), webhook.is_ok(), "{value:?}");
        }
    }
}
