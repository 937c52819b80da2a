//! `policy export --static DIR`: tamper-proof mode. What kube-apiserver
//! (1.37 or later: manifest-based admission control, KEP-5793, the
//! `ManifestBasedAdmissionControlConfig` feature, beta and on by default)
//! loads from files named in its AdmissionConfiguration rather than from the
//! API, so no API request can delete or weaken it:
//!
//! - `policies/backstop.yaml`: the backstop ValidatingAdmissionPolicy and
//!   binding of [`crate::offline::vap::export`], renamed to end in `.static.k8s.io`;
//! - `policies/protect.yaml`: a ValidatingAdmissionPolicy and binding that
//!   refuse the UPDATE and DELETE of finalizer-guard's own API objects (its
//!   ValidatingWebhookConfiguration, its backstop policy and binding, its
//!   policy ConfigMap) to everyone but the operators named;
//! - `webhooks/webhook.yaml` (with `--webhook-url`): the webhook's
//!   registration, called by URL (static manifests take no `service`);
//! - `admission-config.yaml`: the AdmissionConfiguration that loads them.
//!
//! What kube-apiserver 1.37 (k8s.io/apiserver v0.37) does with these, read
//! from its source: `staticManifestsDir` is a field of the
//! ValidatingAdmissionPolicy plugin's `ValidatingAdmissionPolicyConfiguration`
//! and of the ValidatingAdmissionWebhook plugin's
//! `WebhookAdmissionConfiguration` (both `apiserver.config.k8s.io/v1`), an
//! absolute path to an existing directory; it reads the `.yaml`, `.yml` and
//! `.json` files there (not below), and any object of a kind that plugin does
//! not load is an error, so the policies and the webhook go in two folders
//! and the AdmissionConfiguration beside them. Every object's name must end
//! in `.static.k8s.io` (names the API refuses), a binding must name a policy
//! in the same folder, and neither `paramKind` nor `paramRef` nor a webhook's
//! `service` is allowed. The files must load at start-up or kube-apiserver
//! does not start; after that they are re-read on a change (fsnotify, and a
//! poll each minute), and a set that does not load is logged and counted
//! (`apiserver_manifest_admission_config_controller_automatic_reloads_total`)
//! while the last good one stays in force. Static policies and webhooks are
//! also called for admission configuration objects (webhook configurations,
//! policies, bindings), which API-registered ones never are: that is what
//! lets `protect.yaml` guard the webhook configuration.
//!
//! Two jobs, two files: `render` makes the files, pure (a policy and
//! [`Options`] in, the files out: [`render()`]); `folder` writes them into
//! DIR (`write`), reads a DIR back ([`read_dir`]) and compares it with
//! them ([`verify`]).

mod folder;
mod render;

pub use folder::{StaticVerifyError, StaticWriteError, read_dir, verify, write};
pub use render::{
    ADMISSION_CONFIG, BACKSTOP, File, KNOWN_FILES, Options, POLICIES, PROTECT, SUFFIX, StaticError,
    WEBHOOK, WEBHOOKS, Webhook, render,
};
