//! `policy export --vap`: the policy as a ValidatingAdmissionPolicy and its
//! binding, so kube-apiserver itself decides what CEL can express of it,
//! with or without the webhook.
//!
//! Pure: a [`Policy`](crate::policy::Policy) in, YAML out. The decision is the one of
//! [`crate::policy::decide`], rule for rule: what a write removes
//! (`metadata.finalizers` on every UPDATE, a Namespace's `spec.finalizers`
//! through `namespaces/finalize`), the rules, the built-in controller table
//! and `builtinIdentities`, the override annotation and `requireDeletion`.
//! The built-in owners are computed by
//! [`Policy::builtin_owner`](crate::policy::Policy::builtin_owner) itself, so
//! the table in the YAML is the webhook's.
//!
//! What CEL cannot do is said in the YAML's comments ([`NOT_EXPRESSED`]),
//! and a policy that a ValidatingAdmissionPolicy cannot decide faithfully is
//! refused ([`ExportError`]) rather than exported weaker.
//!
//! `override.finalizers` is decided here as the webhook decides it (the
//! reasons that release each finalizer, `never`). The two-person override
//! is not: an approval proves something only by the webhook's seal and
//! clock, which CEL has neither of. So under `override.approval` the
//! policy takes no override at all (every finalizer needs an approval
//! there): it never allows a removal the webhook denies, and it denies the
//! approved overrides the webhook allows. The rest (rules, built-in
//! controllers, the finalizer lists) is decided as the webhook decides it.
//!
//! Every string from the policy reaches CEL through [`lit`] (a CEL string
//! literal of printable ASCII, everything else escaped) and the YAML through
//! serde_yaml_ng, so no name can end an expression or a YAML scalar early.
//!
//! Two jobs, two files: `cel` writes the CEL (the variables, the message,
//! the audit annotations, the literals) and the limits it keeps to;
//! `objects` builds the two objects from it, refuses what cannot be
//! exported faithfully, renders the YAML with its comments and verifies a
//! file against it.

mod cel;
mod objects;

pub use cel::{ALLOWED_CHARACTERS, MAX_FINALIZERS, NAME, VISIBLE_CHARACTER, lit};
pub use objects::{
    Cost, Export, ExportError, MAX_EXPRESSION_CODE_POINTS, NOT_EXPRESSED, PER_CALL_COST_LIMIT,
    VerifyError, estimated_cost, export, export_yaml, verify,
};
