//! `policy suggest`: rules for the controllers seen in warn mode's `would-deny`
//! evidence and enforce mode's denials.
//!
//! Three kinds of evidence are told apart by their content, line by line or
//! file by file:
//! - the webhook's own audit records (`kind: FinalizerRemoval`, one JSON line each);
//! - recordings written by `serve --record-dir` (`kind: Recording`, one per file);
//! - kube-apiserver's audit log (`audit.k8s.io/v1` Events), whose
//!   `finalizers.finalizer-guard.io/*` annotations say what was decided,
//!   as a cluster writes it or as EKS, GKE and AKS deliver it ([`managed`]:
//!   what a delivery leaves out is said, never assumed).
//!
//! The identity is always the one the webhook judged: an event's
//! `impersonatedUser` (username and groups) when there is one, else its
//! `user`. A person working through an impersonating proxy (Rancher's
//! `cattle-impersonation-*` service accounts, say) is that person, never the
//! proxy. The webhook's own records and recordings hold that identity already.
//!
//! Only authenticated evidence counts ([`trusted`]): kube-apiserver's audit
//! events, and the webhook's records and recordings marked
//! `"authenticated": true` (their review came with a client certificate
//! verified against `serve --client-ca`). The webhook's others (marked
//! `false`, or written before the mark) count only where a kube-apiserver
//! audit event given alongside shows the same removal, or with
//! `--trust-unauthenticated`: without `--client-ca` anyone who reaches the
//! webhook port can post a review naming any identity and object.
//!
//! Only removals no rule allowed count: `would-deny` (warn mode) and
//! `denied` (enforce mode; in kube-apiserver's audit log the webhook's
//! denial is a 403 carrying its `decision: denied` annotation, not a
//! failure of another step). Each identity is either a controller or
//! not ([`Identity::classify`]): a controller gets rules, anyone else a
//! comment line, never a rule: overrides are how people remove finalizers.
//! Never a controller, whatever the username: unauthenticated requests
//! (`system:anonymous`, the `system:unauthenticated` group), cluster
//! administrators (`system:admin`, `kube:admin`, `kubernetes-admin`, and
//! every member of `system:masters`, `system:cluster-admins` or
//! `kubeadm:cluster-admins` but kube-apiserver's own `system:apiserver`), and
//! a username no rule can name.
//!
//! A rule names the resources the identity was seen removing those
//! finalizers from ([`Suggestions::rules`]), and reaches as far as [`reach`]
//! decides: every namespace for a controller that acts cluster-wide (a
//! ServiceAccount seen in two or more namespaces, outside its own, or bound
//! by a ClusterRoleBinding given with `--bindings`), its own namespace
//! otherwise, with a comment saying which and why. With `--merge`, a rule of
//! the policy for that identity alone that the evidence shows it outside of
//! is widened ([`Widening`]) rather than repeated, when
//! `reach::not_widened` finds no reason against it, and no
//! further than the evidence shows: the namespaces seen are added to its
//! own (its `namespaces` are never dropped), in place where the rule then
//! allows nothing there that was not seen (it names its resources, and
//! each of its finalizers was seen on each), else by a rule beside it
//! naming exactly the finalizers, resources and namespaces seen. Enforce
//! mode's denials, which anyone can produce, only ever widen such a rule:
//! they make no rule of their own. No finalizer of Kubernetes' own
//! controllers gets a rule, new or widened, nor does a name the webhook
//! cut to fit its audit annotation or record (it ends with `...`). Cluster-scoped
//! objects (a Namespace too) get rules of their own, without `namespaces`,
//! naming only their cluster-scoped resources. A removal without a namespace
//! on a resource seen in one is left out rather than made cluster-wide. Two
//! or more names under one DNS domain, seen in the same scope, become
//! `domain/*` there (never for `kubernetes.io`, `k8s.io` and their
//! subdomains); the comment above the rules lists the exact names seen.
//!
//! Every value read from the evidence is written escaped: YAML values as
//! double-quoted scalars (`\n`, `\u2028`), comments with the same escapes, so
//! nothing a username, finalizer, namespace or resource holds can end a line.
//! A value no rule can hold (whitespace, control or invisible characters) is
//! reported in a comment instead. What is printed is read back first: the
//! base policy (or an empty one) with exactly the suggested rules added.
//!
//! Parsing ([`parse_line`], [`parse_recording`]) and suggesting ([`suggest`],
//! [`render`]) are pure; only [`read_path`] touches files.
//!
//! One job per file: `evidence` (what a line or a file is), `managed`
//! (kube-apiserver's audit events as managed control planes deliver them),
//! `read` (files, folders and JSON documents, entry by entry), `trust` (which evidence counts), `identities` (controller
//! or not), `rules` (what each identity was seen doing, and its rules),
//! `reach` (how far a rule reaches, and which rule of `--merge` is
//! widened), `bindings` (`--bindings`), `render` (the YAML printed), `merge`
//! (the rules added to, and widened in, the `--merge` policy's text), `yaml`
//! (escaping, and the names a rule can hold).

mod bindings;
pub mod command;
mod evidence;
mod identities;
pub mod managed;
mod merge;
mod reach;
mod read;
mod render;
mod rules;
mod trust;
mod yaml;

pub use bindings::Bindings;
pub use evidence::EvidenceFormat;
pub use evidence::{Evidence, EvidenceSource, Parsed, Seen, Skip, parse_line, parse_recording};
pub use identities::Identity;
pub use reach::{Reach, reach};
pub use read::read_path;
pub use render::{people_comments, render};
pub use rules::{
    IdentityActivity, Place, Suggested, Suggestions, Widening, patterns, removals, suggest,
    suggest_with,
};
pub use trust::{SetAside, trusted};

#[cfg(test)]
mod fixtures;
