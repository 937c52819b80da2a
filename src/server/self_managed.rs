//! Self-managed certificates (`serve --certificates-secret NS/NAME`): the
//! webhook keeps its own CA and serving certificate in one Secret, serves the
//! serving pair from it, and keeps the caBundle of its own
//! ValidatingWebhookConfiguration current. Nothing to install first (no
//! cert-manager), nothing rendered at install time (no `lookup`, no key in
//! the manifests): what GitOps tools apply is the same bytes every time.
//!
//! Every replica runs the same loop, every `--reload-interval`:
//!
//! 1. read the Secret; when there is none, create it (a new CA and serving
//!    certificate). Replicas race: the one whose `create` wins is served by
//!    all, the others read it back (409 AlreadyExists);
//! 2. decide, from the certificates it holds and the time ([`decide`], pure),
//!    what the Secret needs, and write that with the resourceVersion read
//!    (409 Conflict: another replica wrote first; read again next time);
//! 3. serve the Secret's serving pair (swapped in memory, as a reload of
//!    certificate files is);
//! 4. patch `webhooks[].clientConfig.caBundle` of the webhooks it is told
//!    (`--webhook-name`) to the CAs the Secret holds, when they differ.
//!
//! Rotation never refuses a write: a serving certificate is renewed from the
//! same CA well before it expires (the caBundle does not change); a CA is
//! rotated in three steps a grace period apart: the new CA joins the caBundle
//! (old and new trusted); once the webhook configuration carries it, the
//! serving certificate of the new CA is served; then the old CA leaves.
//!
//! A serving renewal keeps the serving key, so the approval seal derived
//! from it ([`crate::pki::keys::seal_key`]) and approvals sealed under it survive
//! the renewal; a new CA comes with a new serving key. Every replica serves
//! the Secret's one key, so every replica seals alike (within a reload
//! interval of a change).
//!
//! What it needs of the API, and no more: create Secrets in its namespace
//! (RBAC cannot limit `create` by name), get and update its own Secret, get
//! and patch its own ValidatingWebhookConfiguration. A refused call is
//! logged with the verb and the object, and the server keeps serving the
//! certificate it has.

mod error;
mod issue;
mod manager;
mod pem;
mod rotation;
mod secret;
mod stored;

pub use error::{CertificatesError, CertificatesResult};
pub use manager::{DEFAULT_WEBHOOK, Initial, Manager, Settings, start};
pub use pem::{Pair, ServingNames};
pub use rotation::{Facts, RotationStep, Timing, decide};
pub use stored::Stored;
