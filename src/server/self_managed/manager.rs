//! The Kubernetes calls: the Secret read, created or updated, the caBundle
//! patched, the serving pair swapped in; every `--reload-interval`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use super::error::{CertificatesError, CertificatesResult};
use super::pem::{Pair, ServingNames};
use super::rotation::Timing;
use super::stored::{Stored, ders};
use crate::pki::keys;
use crate::server::state::{AppState, stopped_signal};
use crate::server::tls::CertStore;

/// The one webhook the chart's configuration names.
pub const DEFAULT_WEBHOOK: &str = "finalizers.finalizer-guard.io";

/// The certificate to start serving with, and its seal key.
pub type Initial = (rustls::sign::CertifiedKey, crate::policy::seal::SealKey);

/// With settings: the first round done (the Secret read or made, the
/// caBundle written), the loop to run, and the certificate to start with.
pub async fn start(settings: Option<Settings>) -> crate::error::Result<Option<(Manager, Initial)>> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    let fail = |e: CertificatesError| crate::error::Error::Certificates(e.to_string());
    let mut manager = Manager::new(settings).await.map_err(fail)?;
    let first = manager.first().await.map_err(fail)?;
    Ok(Some((manager, first)))
}

/// Everything the loop needs, resolved from flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub secret: String,
    pub webhook_configuration: String,
    /// The webhooks of that configuration whose caBundle is kept current.
    pub webhook_names: Vec<String>,
    pub names: ServingNames,
    pub timing: Timing,
    /// How often the Secret is read.
    pub interval: Duration,
    /// `None`: in-cluster configuration, or a kubeconfig.
    pub api_server: Option<http::Uri>,
}

/// The Secret and webhook configuration, through the API.
pub struct Manager {
    settings: Settings,
    secrets: Api<Secret>,
    configs: Api<ValidatingWebhookConfiguration>,
    /// The serving pair in service, to swap only on a change.
    serving: Option<Pair>,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Names a refused call by its verb and object.
fn api_error(verb: &'static str, object: String) -> impl FnOnce(kube::Error) -> CertificatesError {
    move |source| match source {
        kube::Error::Api(status) if status.code == 403 => CertificatesError::Forbidden {
            verb,
            object,
            message: status.message,
        },
        source => CertificatesError::Api {
            verb,
            object,
            source,
        },
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

impl Manager {
    pub async fn new(settings: Settings) -> CertificatesResult<Manager> {
        settings.timing.check()?;
        let client = match &settings.api_server {
            None => kube::Client::try_default().await,
            Some(url) => kube::Client::try_from(kube::Config::new(url.clone())),
        }
        .map_err(|e| CertificatesError::Client(e.to_string()))?;
        Ok(Manager {
            secrets: Api::namespaced(client.clone(), &settings.namespace),
            configs: Api::all(client),
            settings,
            serving: None,
        })
    }

    fn secret_name(&self) -> String {
        format!(
            "secret {}/{}",
            self.settings.namespace, self.settings.secret
        )
    }

    fn config_name(&self) -> String {
        format!(
            "validatingwebhookconfiguration {}",
            self.settings.webhook_configuration
        )
    }

    /// One round: the Secret read (made, or brought up to date), the
    /// caBundle patched when it differs. The serving pair to serve, and what
    /// failed without keeping it from being served: a refused update of the
    /// Secret (its pair as read is served), a refused caBundle patch.
    pub async fn reconcile(&self) -> CertificatesResult<(Pair, Vec<CertificatesError>)> {
        let config = self
            .configs
            .get_opt(&self.settings.webhook_configuration)
            .await
            .map_err(api_error("get", self.config_name()));
        let bundles = match &config {
            Ok(Some(config)) => self.bundles(config).ok(),
            _ => None,
        };
        let (stored, written) = self.secret(bundles.as_deref()).await?;
        let serving = stored.serving.clone().ok_or_else(|| {
            CertificatesError::Other("the Secret holds no serving certificate".into())
        })?;
        let mut failed: Vec<CertificatesError> = written.into_iter().collect();
        match config {
            Ok(Some(config)) => {
                failed.extend(self.patch_bundle(&config, &stored.bundle()).await.err())
            }
            Ok(None) => failed.push(CertificatesError::NoConfiguration(self.config_name())),
            Err(e) => failed.push(e),
        }
        Ok((serving, failed))
    }

    /// The Secret this replica creates when there is none: labelled as the
    /// chart labels its own, of type kubernetes.io/tls.
    fn new_secret(&self) -> Secret {
        let settings = &self.settings;
        Secret {
            metadata: ObjectMeta {
                name: Some(settings.secret.clone()),
                namespace: Some(settings.namespace.clone()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".into(), "finalizer-guard".into()),
                    ("app.kubernetes.io/component".into(), "certificates".into()),
                    (
                        "app.kubernetes.io/managed-by".into(),
                        "finalizer-guard".into(),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            ..Secret::default()
        }
    }

    /// The Secret as it is once up to date: read, created, or updated; or,
    /// when the update is refused, as read, with the refusal.
    async fn secret(
        &self,
        bundles: Option<&[Vec<u8>]>,
    ) -> CertificatesResult<(Stored, Option<CertificatesError>)> {
        let (settings, name) = (&self.settings, self.secret_name());
        for _ in 0..3 {
            let existing = self
                .secrets
                .get_opt(&settings.secret)
                .await
                .map_err(api_error("get", name.clone()))?;
            let mut secret = existing.clone().unwrap_or_else(|| self.new_secret());
            let mut stored = Stored::from_secret(&secret);
            let taken = stored.settle(now(), &settings.timing, &settings.names, bundles)?;
            if taken.is_empty() {
                return Ok((stored, None));
            }
            stored.to_secret(&mut secret);
            let written = match existing {
                None => self
                    .secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "create")),
                // The resourceVersion read goes with it: a replica that wrote
                // meanwhile makes this one fail with 409, and read again.
                Some(_) => self
                    .secrets
                    .replace(&settings.secret, &PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "update")),
            };
            match written {
                Ok(_) => {
                    tracing::info!(object = %name, steps = ?taken, "certificates Secret written");
                    return Ok((stored, None));
                }
                Err((e, _)) if is_status(&e, 409) => {
                    tracing::debug!(object = %name, "another replica wrote the Secret first; reading it again");
                }
                Err((e, "create")) => {
                    return Err(api_error(
                        "create",
                        format!("secrets in namespace {}", settings.namespace),
                    )(e));
                }
                Err((e, verb)) => {
                    let refused = api_error(verb, name)(e);
                    // What it holds may still be good to serve (a renewal
                    // is due well before the end).
                    let read = Stored::from_secret(existing.as_ref().unwrap_or(&secret));
                    let serving = read.serving.as_ref().filter(|s| {
                        keys::certified_key(s.cert.as_bytes(), s.key.as_bytes()).is_ok()
                    });
                    return match serving {
                        Some(_) => Ok((read, Some(refused))),
                        None => Err(refused),
                    };
                }
            }
        }
        Err(CertificatesError::Other(format!(
            "{name}: written by others three times in a row while updating it; trying again later"
        )))
    }

    /// The caBundle of each webhook kept current.
    fn bundles(&self, config: &ValidatingWebhookConfiguration) -> CertificatesResult<Vec<Vec<u8>>> {
        let bundles: Vec<Vec<u8>> = config
            .webhooks
            .iter()
            .flatten()
            .filter(|w| self.settings.webhook_names.contains(&w.name))
            .map(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .map(|b| b.0.clone())
                    .unwrap_or_default()
            })
            .collect();
        if bundles.is_empty() {
            return Err(CertificatesError::NoWebhook {
                config: self.settings.webhook_configuration.clone(),
                names: self.settings.webhook_names.clone(),
            });
        }
        Ok(bundles)
    }

    /// Patches the caBundle of each webhook kept current that differs from
    /// `bundle`: a JSON patch that tests the object's uid and each
    /// webhook's name at its index, so it writes what was read or nothing.
    async fn patch_bundle(
        &self,
        config: &ValidatingWebhookConfiguration,
        bundle: &str,
    ) -> CertificatesResult<()> {
        self.bundles(config)?;
        let uid = config.metadata.uid.clone().unwrap_or_default();
        let mut ops = vec![json!({"op": "test", "path": "/metadata/uid", "value": uid})];
        for (index, webhook) in config.webhooks.iter().flatten().enumerate() {
            let current = webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice());
            if !self.settings.webhook_names.contains(&webhook.name)
                || current == Some(bundle.as_bytes())
            {
                continue;
            }
            ops.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}));
            ops.push(json!({
                "op": "add",
                "path": format!("/webhooks/{index}/clientConfig/caBundle"),
                "value": crate::pki::certificates::ca_bundle(bundle),
            }));
        }
        if ops.len() == 1 {
            return Ok(());
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(|e| CertificatesError::Other(format!("caBundle patch: {e}")))?;
        self.configs
            .patch(
                &self.settings.webhook_configuration,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(api_error("patch", self.config_name()))?;
        tracing::info!(config = %self.settings.webhook_configuration, cas = ders(bundle.as_bytes()).len(), "caBundle written");
        Ok(())
    }

    /// Serves `pair` unless it is in service already.
    fn serve(
        &mut self,
        pair: Pair,
        store: &CertStore,
        state: Option<&AppState>,
    ) -> CertificatesResult<bool> {
        if self.serving.as_ref() == Some(&pair) {
            return Ok(false);
        }
        let certified = keys::certified_key(pair.cert.as_bytes(), pair.key.as_bytes())?;
        let seal = keys::seal_key(pair.key.as_bytes())?;
        store.replace(certified, seal);
        if let (Some(state), Some(expiry)) = (state, store.expiry()) {
            state.metrics.certificate_expires("serving", expiry);
        }
        self.serving = Some(pair);
        Ok(true)
    }

    /// The first round, before the server serves: the certificate to start with.
    pub async fn first(&mut self) -> CertificatesResult<Initial> {
        let (pair, failed) = self.reconcile().await?;
        for e in failed {
            tracing::error!(error = %e, "certificates not kept current; serving the Secret's certificate, trying again every interval");
        }
        let certified = keys::certified_key(pair.cert.as_bytes(), pair.key.as_bytes())?;
        let seal = keys::seal_key(pair.key.as_bytes())?;
        tracing::info!(object = %self.secret_name(), "serving the certificate of the certificates Secret");
        self.serving = Some(pair);
        Ok((certified, seal))
    }

    /// Every interval, a round; a changed serving pair is swapped in. A
    /// failed round is logged and counted, and the certificate in service
    /// stays. Returns once the server is told it drains: a round under way
    /// finishes, none starts, and the certificate in service stays.
    pub async fn run(
        mut self,
        store: Arc<CertStore>,
        state: Arc<AppState>,
        mut draining: watch::Receiver<bool>,
    ) {
        let mut last_error: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.interval) => {}
                () = stopped_signal(&mut draining) => {
                    if *draining.borrow() {
                        tracing::info!(object = %self.secret_name(), "draining: the certificates Secret is left to the pods that stay");
                    }
                    return;
                }
            }
            let failed = match self.reconcile().await {
                Ok((pair, failed)) => {
                    match self.serve(pair, &store, Some(&state)) {
                        Ok(true) => {
                            state.metrics.reload("certificate", true);
                            tracing::info!("serving certificate swapped for the Secret's new one");
                        }
                        Ok(false) => {}
                        Err(e) => {
                            state.metrics.reload("certificate", false);
                            tracing::error!(error = %e, "refused the Secret's serving certificate; keeping the current one");
                        }
                    }
                    failed
                }
                Err(e) => vec![e],
            };
            // Logged when it starts and when it changes, not every interval.
            let text: Vec<String> = failed.iter().map(ToString::to_string).collect();
            if text != last_error {
                for error in text.iter().filter(|e| !last_error.contains(e)) {
                    tracing::error!(%error, "certificates not kept current; serving the current certificate");
                }
                if text.is_empty() {
                    tracing::info!("certificates kept current again");
                }
                last_error = text;
            }
        }
    }
}
