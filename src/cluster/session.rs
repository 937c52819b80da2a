//! A session with a cluster: kubeconfig, the requester's identity, and why
//! a command could not talk to it or write to it.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::admission::WEBHOOK_NAME;
pub use crate::error::ClusterError;
use crate::output::{api_status, quoted};

/// The policy's key in the ConfigMap the chart and `manifests/` install.
pub const POLICY_KEY: &str = "policy.yaml";
/// The field manager of every write these commands make.
pub const FIELD_MANAGER: &str = "finalizer-guard";

/// kubeconfig and context, read as kubectl reads them.
#[derive(Debug, Clone, Default, Args)]
pub struct Connection {
    /// Path to the kubeconfig file. Default: $KUBECONFIG, then ~/.kube/config, then in-cluster.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use. Default: the current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// `--dry-run=server`: as kubectl, every write goes through the API server
/// and the webhook and is not persisted.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct DryRunFlag {
    /// `server`: every write goes through the API server and the webhook, and nothing is persisted.
    #[arg(long, value_enum, default_value = "none", value_name = "MODE")]
    pub dry_run: DryRun,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    /// Write for real.
    #[default]
    None,
    /// Send every write through the API server and the webhook without persisting it.
    Server,
}

/// Who the commands act as: what `kubectl auth whoami` prints.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SessionUser {
    pub username: String,
    pub groups: Vec<String>,
}

/// Which cluster the commands talk to: what every report names, with the
/// user, so that an incident report says where it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionCluster {
    /// The kubeconfig context (`--context`, or the current one); absent
    /// with the in-cluster configuration of a pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The API server's URL.
    pub server: String,
}

impl SessionCluster {
    /// The report's line naming the cluster and `user`:
    /// `cluster: context "prod", API server https://...:6443, as "alice"`,
    /// each value from the kubeconfig or the API server quoted.
    pub fn describe(&self, user: &str) -> String {
        let context = match &self.context {
            Some(context) => format!("context {}", quoted(context)),
            None => "in-cluster configuration".to_string(),
        };
        format!(
            "cluster: {context}, API server {}, as {}",
            quoted(&self.server),
            quoted(user)
        )
    }
}

/// A connected client, the context's namespace and who we are.
pub struct Session {
    pub client: Client,
    /// The context's namespace, or `default`.
    pub namespace: String,
    pub identity: SessionUser,
    /// The context and API server.
    pub cluster: SessionCluster,
}

impl Connection {
    pub async fn connect(&self) -> Result<Session, ClusterError> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            cluster: None,
            user: None,
        };
        let path = self.kubeconfig.as_deref();
        // The context named, else the kubeconfig's current one (none in a pod).
        let mut context = self.context.clone();
        let config = match (path, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| ClusterError::kubeconfig(Some(path), e))?;
                context = context.or_else(|| file.current_context.clone());
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| ClusterError::kubeconfig(Some(path), e))?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| ClusterError::kubeconfig(None, e))?,
            (None, None) => {
                // As kube's inference: the kubeconfig when there is one.
                context = Kubeconfig::read().ok().and_then(|k| k.current_context);
                Config::infer()
                    .await
                    .map_err(|e| ClusterError::kubeconfig(None, e))?
            }
        };
        let namespace = config.default_namespace.clone();
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| ClusterError::kubeconfig(path, e))?;
        let identity = whoami(&client, server.clone()).await?;
        Ok(Session {
            client,
            namespace,
            identity,
            cluster: SessionCluster { context, server },
        })
    }
}

/// `kubectl auth whoami`: a SelfSubjectReview. Also proves the connection.
async fn whoami(client: &Client, server: String) -> Result<SessionUser, ClusterError> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| match e {
            kube::Error::Api(_) => ClusterError::api("who am I (SelfSubjectReview)", e),
            other => ClusterError::Connect {
                server,
                source: Box::new(other),
            },
        })?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok(SessionUser {
        username: user.username.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
    })
}

/// What a refused write means, in words an operator can act on: the one
/// describer of refusals for `unstick` and `approve` (its Display).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// The webhook denied it: its message.
    Denied(String),
    /// The webhook could not be called: nothing guarded can be written now.
    WebhookUnreachable(String),
    /// The object changed since it was read (a `test` failed, or a conflict).
    Conflict,
    /// It is gone.
    NotFound,
    /// 422: a JSON patch `test` failed, or the object is not valid. Which
    /// one, only a second read can tell.
    Unprocessable(String),
    /// Anything else the API server said (RBAC, validation, ...), or why it
    /// could not be asked.
    Other(String),
}

impl WriteRefusal {
    pub fn from_kube(e: &kube::Error) -> WriteRefusal {
        let kube::Error::Api(status) = e else {
            return WriteRefusal::Other(crate::output::chain(e));
        };
        let message = status.message.as_str();
        if message.contains("failed calling webhook") && message.contains(WEBHOOK_NAME) {
            WriteRefusal::WebhookUnreachable(message.to_string())
        } else if message.contains("admission webhook") && message.contains("denied") {
            WriteRefusal::Denied(message.to_string())
        } else if status.code == 409 {
            WriteRefusal::Conflict
        } else if status.code == 422 {
            WriteRefusal::Unprocessable(message.to_string())
        } else if status.code == 404 {
            WriteRefusal::NotFound
        } else {
            WriteRefusal::Other(api_status(status))
        }
    }
}

impl std::fmt::Display for WriteRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteRefusal::Denied(m) => write!(f, "denied: {m}"),
            WriteRefusal::WebhookUnreachable(m) => write!(f, "the webhook is unreachable: {m}"),
            WriteRefusal::Conflict => f.write_str("a conflicting change"),
            WriteRefusal::NotFound => f.write_str("gone"),
            WriteRefusal::Unprocessable(m) => write!(f, "{m} (422)"),
            WriteRefusal::Other(m) => f.write_str(m),
        }
    }
}

/// What the operator can do while the webhook is unreachable.
pub const WEBHOOK_DOWN_HELP: &str = "The webhook's failurePolicy is Fail, so no finalizer can be removed until it answers again. \
Bring it back: the message above names the address it calls (for a Service, NAME.NAMESPACE.svc); \
kubectl -n NAMESPACE get pods,endpoints -l app.kubernetes.io/name=finalizer-guard,app.kubernetes.io/component=webhook; \
kubectl -n NAMESPACE rollout restart deployment -l app.kubernetes.io/name=finalizer-guard,app.kubernetes.io/component=webhook. \
This command never deletes or disables the ValidatingWebhookConfiguration: if the webhook cannot come back, that is a decision for a cluster admin, on the record.";

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, message: &str) -> WriteRefusal {
        let status = kube::core::Status::failure(message, "").with_code(code);
        WriteRefusal::from_kube(&kube::Error::Api(status.boxed()))
    }

    #[test]
    fn refusals_are_told_apart_and_said_plainly() {
        let denied = refused(
            400,
            "admission webhook \"finalizers.finalizer-guard.io\" denied the request: no",
        );
        assert!(matches!(denied, WriteRefusal::Denied(_)));
        assert!(denied.to_string().starts_with("denied: admission webhook"));
        let down = refused(
            500,
            "Internal error occurred: failed calling webhook \"finalizers.finalizer-guard.io\": connection refused",
        );
        assert!(
            down.to_string()
                .starts_with("the webhook is unreachable: Internal error"),
            "{down}"
        );
        assert_eq!(refused(409, "conflict"), WriteRefusal::Conflict);
        assert_eq!(refused(404, "not found").to_string(), "gone");
        assert_eq!(refused(422, "test failed").to_string(), "test failed (422)");
        assert_eq!(
            refused(403, "pods \"a\" is forbidden").to_string(),
            "pods \"a\" is forbidden (403)"
        );
    }
}
