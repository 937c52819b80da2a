//! Identities too broad to trust: the one definition every identity list is
//! checked by (rules, presets, `builtinIdentities`, the two-person rule's
//! approvers; the chart's `webhook.skipIdentities` refuses the same names in
//! its values schema). docs/policy.md ("Identities too broad to trust") says
//! which list refuses which, and why.
//!
//! An identity is too broad when it is
//! - everyone, or nearly: every authenticated user (`system:authenticated`),
//!   every unauthenticated request (`system:unauthenticated`, whose user is
//!   `system:anonymous`), every ServiceAccount (`system:serviceaccounts`);
//! - a namespace's `default` ServiceAccount, which every pod of the namespace
//!   that names no ServiceAccount runs as;
//! - every ServiceAccount of a namespace (`system:serviceaccounts:NS`, which
//!   holds that `default` one) where the list grants every finalizer (a rule's
//!   `"*"`, an approver), or in a namespace no one project owns (`default`,
//!   `kube-system`, `kube-public`, `kube-node-lease`). Narrowed to a project's
//!   own finalizers in its own namespace, it is how a preset trusts
//!   ServiceAccounts whose names the installer generates;
//! - every node (`system:nodes`: any one node's credentials) or every
//!   bootstrap token (`system:bootstrappers`), whatever the list grants.

use std::fmt;

/// Whether a name is a user's (a ServiceAccount's too, as
/// `system:serviceaccount:NS:NAME`) or a group's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    User,
    Group,
}

/// What a list lets its identities do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Remove every finalizer (a rule's `"*"`), or approve an override of any.
    EveryFinalizer,
    /// Remove the finalizers it names.
    Named,
}

/// Who a too-broad identity stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broad {
    /// `system:authenticated`.
    Authenticated,
    /// `system:unauthenticated`, `system:anonymous`.
    Unauthenticated,
    /// `system:serviceaccounts`.
    EveryServiceAccount,
    /// `system:serviceaccount:NS:default`.
    DefaultAccount { namespace: String },
    /// `system:serviceaccounts:NS`.
    Namespace { namespace: String },
    /// `system:nodes`: every kubelet, so whoever holds one node's credentials.
    Nodes,
    /// `system:bootstrappers` (and `system:bootstrappers:*`): bootstrap tokens.
    Bootstrappers,
}

impl Broad {
    /// Everyone, or nearly: no list can mean it.
    pub fn is_everyone(&self) -> bool {
        matches!(
            self,
            Broad::Authenticated | Broad::Unauthenticated | Broad::EveryServiceAccount
        )
    }
}

/// `who`: what the identity stands for, in a sentence's middle.
impl fmt::Display for Broad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broad::Authenticated => f.write_str("every authenticated user"),
            Broad::Unauthenticated => f.write_str("every unauthenticated request"),
            Broad::EveryServiceAccount => f.write_str("every ServiceAccount of every namespace"),
            Broad::DefaultAccount { .. } => f.write_str(
                "a namespace's default ServiceAccount, which every pod of the namespace that names no ServiceAccount runs as",
            ),
            Broad::Nodes => f.write_str(
                "every node's kubelet, so whoever holds any one node's credentials",
            ),
            Broad::Bootstrappers => {
                f.write_str("every bootstrap token, meant only to join a node to the cluster")
            }
            Broad::Namespace { namespace } => match shared(namespace) {
                Some(why) => write!(f, "every ServiceAccount of namespace {namespace}, {why}"),
                None => write!(
                    f,
                    "every ServiceAccount of namespace {namespace}, so every pod there (its default ServiceAccount's too)"
                ),
            },
        }
    }
}

/// Namespaces no one project owns, and why trusting all of their
/// ServiceAccounts trusts too many.
fn shared(namespace: &str) -> Option<&'static str> {
    match namespace {
        "default" => Some("where everything that names no namespace runs"),
        "kube-system" => Some("each of Kubernetes' own components and add-ons there"),
        "kube-public" | "kube-node-lease" => Some("a namespace Kubernetes keeps for itself"),
        _ => None,
    }
}

/// Who `name` stands for, whatever it is granted: everyone, a default
/// ServiceAccount, or every ServiceAccount of a namespace.
fn who(kind: Kind, name: &str) -> Option<Broad> {
    match kind {
        Kind::Group => match name {
            "system:authenticated" => Some(Broad::Authenticated),
            "system:unauthenticated" => Some(Broad::Unauthenticated),
            "system:serviceaccounts" => Some(Broad::EveryServiceAccount),
            "system:nodes" => Some(Broad::Nodes),
            _ if name == "system:bootstrappers" || name.starts_with("system:bootstrappers:") => {
                Some(Broad::Bootstrappers)
            }
            _ => name
                .strip_prefix("system:serviceaccounts:")
                .filter(|ns| !ns.is_empty() && !ns.contains(':'))
                .map(|ns| Broad::Namespace {
                    namespace: ns.to_string(),
                }),
        },
        Kind::User if name == "system:anonymous" => Some(Broad::Unauthenticated),
        Kind::User => name
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.strip_suffix(":default"))
            .filter(|ns| !ns.is_empty() && !ns.contains(':'))
            .map(|ns| Broad::DefaultAccount {
                namespace: ns.to_string(),
            }),
    }
}

/// Whether `name`, granted `grant`, is too broad to trust, and who it stands for.
pub fn too_broad(kind: Kind, name: &str, grant: Grant) -> Option<Broad> {
    let broad = who(kind, name)?;
    match &broad {
        Broad::Namespace { namespace } if grant == Grant::Named && shared(namespace).is_none() => {
            None
        }
        _ => Some(broad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everyone_default_accounts_and_namespaces_are_told_apart() {
        use Grant::*;
        use Kind::*;
        let broad = |kind, name: &str, grant| too_broad(kind, name, grant);
        for grant in [EveryFinalizer, Named] {
            assert_eq!(
                broad(Group, "system:authenticated", grant),
                Some(Broad::Authenticated)
            );
            assert_eq!(
                broad(Group, "system:unauthenticated", grant),
                Some(Broad::Unauthenticated)
            );
            assert_eq!(
                broad(User, "system:anonymous", grant),
                Some(Broad::Unauthenticated)
            );
            assert_eq!(
                broad(Group, "system:serviceaccounts", grant),
                Some(Broad::EveryServiceAccount)
            );
            assert_eq!(broad(Group, "system:nodes", grant), Some(Broad::Nodes));
            assert_eq!(
                broad(
                    Group,
                    "system:bootstrappers:kubeadm:default-node-token",
                    grant
                ),
                Some(Broad::Bootstrappers)
            );
            assert_eq!(broad(User, "system:node:worker-7", grant), None);
            assert!(matches!(
                broad(User, "system:serviceaccount:team-a:default", grant),
                Some(Broad::DefaultAccount { namespace }) if namespace == "team-a"
            ));
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let group = format!("system:serviceaccounts:{ns}");
                assert!(
                    matches!(broad(Group, &group, grant), Some(Broad::Namespace { .. })),
                    "{group}"
                );
            }
            // Names, not patterns: the same text as a user is no one.
            assert_eq!(broad(User, "system:authenticated", grant), None);
            assert_eq!(broad(Group, "system:anonymous", grant), None);
            for name in [
                "system:serviceaccount:team-a:builder",
                "system:serviceaccount:default:crossplane",
                "system:masters",
                "alice",
                "system:serviceaccount:team-a:default:x",
            ] {
                assert_eq!(broad(User, name, grant), None, "{name}");
                assert_eq!(broad(Group, name, grant), None, "{name}");
            }
        }
        // A project's namespace, for the finalizers a list names: trusted.
        assert_eq!(
            broad(Group, "system:serviceaccounts:crossplane-system", Named),
            None
        );
        assert!(matches!(
            broad(Group, "system:serviceaccounts:team-a", EveryFinalizer),
            Some(Broad::Namespace { namespace }) if namespace == "team-a"
        ));
        assert!(Broad::Authenticated.is_everyone());
        assert!(
            !Broad::Namespace {
                namespace: "x".into()
            }
            .is_everyone()
        );
    }
}
