//! Who removed a finalizer: a controller, which gets rules, or anyone else,
//! who never does ([`Identity::classify`]).

use std::borrow::Cow;

use super::yaml::writable;

/// Usernames of cluster administrators: people, even where they look like
/// software. k3s, RKE2 and OpenShift's `system:admin`, OpenShift's
/// `kube:admin`, kubeadm's `kubernetes-admin`.
const ADMIN_USERS: [&str; 3] = ["system:admin", "kube:admin", "kubernetes-admin"];

/// Groups of cluster administrators. `system:masters` bypasses authorization
/// altogether (break-glass certificates: kubeadm's and k3s' admin, AKS'
/// `masterclient`); OpenShift's `system:cluster-admins`; kubeadm's
/// `kubeadm:cluster-admins`.
const ADMIN_GROUPS: [&str; 3] = [
    "system:masters",
    "system:cluster-admins",
    "kubeadm:cluster-admins",
];

/// kube-apiserver's loopback identity (its own controllers): in
/// `system:masters`, and software all the same.
const APISERVER: &str = "system:apiserver";

/// Who removed a finalizer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Identity {
    /// `system:serviceaccount:NS:NAME`, as `NS:NAME`.
    ServiceAccount(String),
    /// Another identity of software: `system:*` users (the control plane,
    /// nodes), and anyone in the `system:nodes` group.
    SystemUser(String),
    /// Anyone else: a person, who gets an override, never a rule.
    Person(String),
    /// A cluster administrator (`ADMIN_USERS`, `ADMIN_GROUPS`). Never a rule.
    Administrator(String),
    /// An unauthenticated request: `system:anonymous`, or anyone in
    /// `system:unauthenticated`. Never a rule.
    Anonymous(String),
    /// A username no rule can name: empty, or with whitespace or hidden
    /// characters in it. Never a rule.
    Unnamable(String),
}

impl Identity {
    /// Service accounts and `system:` identities are software; every other
    /// username (alice, alice@example.com, an OIDC subject) is taken for a
    /// person. A controller running under a personal-looking identity (a
    /// client certificate's CN, say) is reported as a person: give it a
    /// ServiceAccount, or write its rule by hand.
    ///
    /// Whatever the username, unauthenticated requests and cluster
    /// administrators are never software: anyone in `system:masters` is an
    /// administrator (but kube-apiserver's own `system:apiserver`), a service
    /// account impersonated into that group too.
    pub fn classify(username: &str, groups: &[String]) -> Identity {
        let member = |names: &[&str]| groups.iter().any(|g| names.contains(&g.as_str()));
        let anonymous = ["system:anonymous", "system:unauthenticated"];
        if anonymous.contains(&username) || member(&anonymous) {
            return Identity::Anonymous(username.to_string());
        }
        if ADMIN_USERS.contains(&username) || (member(&ADMIN_GROUPS) && username != APISERVER) {
            return Identity::Administrator(username.to_string());
        }
        if !writable(username) {
            return Identity::Unnamable(username.to_string());
        }
        if let Some(sa) = username.strip_prefix("system:serviceaccount:")
            && let Some((namespace, name)) = sa.split_once(':')
        {
            return if namespace.is_empty() || name.is_empty() || name.contains(':') {
                Identity::Unnamable(username.to_string())
            } else {
                Identity::ServiceAccount(sa.to_string())
            };
        }
        if username.starts_with("system:") || groups.iter().any(|g| g == "system:nodes") {
            return Identity::SystemUser(username.to_string());
        }
        Identity::Person(username.to_string())
    }

    /// Whether the identity is software, which gets rules.
    pub fn is_software(&self) -> bool {
        matches!(self, Identity::ServiceAccount(_) | Identity::SystemUser(_))
    }

    /// The username, as Kubernetes writes it.
    pub fn username(&self) -> Cow<'_, str> {
        match self {
            Identity::ServiceAccount(sa) => Cow::Owned(format!("system:serviceaccount:{sa}")),
            Identity::SystemUser(u)
            | Identity::Person(u)
            | Identity::Administrator(u)
            | Identity::Anonymous(u)
            | Identity::Unnamable(u) => Cow::Borrowed(u),
        }
    }

    /// Why the identity gets no rule, for its comment line.
    pub(super) fn why_not(&self) -> &'static str {
        match self {
            Identity::Administrator(_) => " (a cluster administrator)",
            Identity::Anonymous(_) => " (unauthenticated)",
            Identity::Unnamable(_) => " (not a username a rule can name)",
            _ => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::Policy;
    use serde_json::Value;
    use serde_json::json;

    use super::super::fixtures::{CONTROLLER, apiserver, evidence};
    use super::super::render::render;
    use super::super::rules::suggest;
    use super::*;

    #[test]
    fn who_is_a_person() {
        let g = |groups: &[&str]| groups.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Identity::classify(CONTROLLER, &g(&["system:serviceaccounts"])),
            Identity::ServiceAccount("widgets:widget-controller".into())
        );
        assert_eq!(
            Identity::classify("system:kube-scheduler", &[]),
            Identity::SystemUser("system:kube-scheduler".into())
        );
        assert_eq!(
            Identity::classify("node-7", &g(&["system:nodes"])),
            Identity::SystemUser("node-7".into())
        );
        for person in ["alice", "alice@example.com", "https://idp#1234"] {
            assert_eq!(
                Identity::classify(person, &g(&["system:authenticated", "developers"])),
                Identity::Person(person.into())
            );
        }
    }

    #[test]
    fn administrators_and_anonymous_requests_are_never_software() {
        let g = |groups: &[&str]| groups.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let admin = |u: &str| Identity::Administrator(u.into());
        let anonymous = |u: &str| Identity::Anonymous(u.into());
        let table = [
            (
                "system:admin",
                g(&["system:masters", "system:authenticated"]),
                admin("system:admin"),
            ),
            ("system:admin", g(&[]), admin("system:admin")),
            (
                "kube:admin",
                g(&["system:cluster-admins"]),
                admin("kube:admin"),
            ),
            (
                "kubernetes-admin",
                g(&["kubeadm:cluster-admins"]),
                admin("kubernetes-admin"),
            ),
            (
                "masterclient",
                g(&["system:masters"]),
                admin("masterclient"),
            ),
            (
                "system:kube-scheduler",
                g(&["system:masters"]),
                admin("system:kube-scheduler"),
            ),
            (
                CONTROLLER,
                g(&["system:serviceaccounts", "system:masters"]),
                admin(CONTROLLER),
            ),
            ("bob", g(&["system:cluster-admins"]), admin("bob")),
            (
                "system:anonymous",
                g(&["system:unauthenticated"]),
                anonymous("system:anonymous"),
            ),
            ("system:anonymous", g(&[]), anonymous("system:anonymous")),
            (
                "system:unauthenticated",
                g(&[]),
                anonymous("system:unauthenticated"),
            ),
            (
                "system:node:n1",
                g(&["system:unauthenticated"]),
                anonymous("system:node:n1"),
            ),
            (
                CONTROLLER,
                g(&["system:unauthenticated"]),
                anonymous(CONTROLLER),
            ),
            // kube-apiserver's own loopback identity is software.
            (
                "system:apiserver",
                g(&["system:masters"]),
                Identity::SystemUser("system:apiserver".into()),
            ),
        ];
        for (username, groups, want) in table {
            assert_eq!(
                Identity::classify(username, &groups),
                want,
                "{username} {groups:?}"
            );
        }
        let with_groups = |id: &str, user: &str, groups: &[&str]| {
            let mut v: Value =
                serde_json::from_str(&apiserver(id, user, "would-deny", "example.com/a")).unwrap();
            v["user"]["groups"] = json!(groups);
            v.to_string()
        };
        let e = evidence(&[
            with_groups("1", "system:admin", &["system:masters"]),
            with_groups("2", "system:anonymous", &["system:unauthenticated"]),
            with_groups("3", "kube:admin", &["system:cluster-admins"]),
            with_groups("4", CONTROLLER, &["system:masters"]),
        ]);
        let s = suggest(&e.seen, None);
        assert!(s.controllers.is_empty(), "{s:?}");
        let yaml = render(&s, None);
        assert!(Policy::from_yaml(&yaml).unwrap().rules.is_empty(), "{yaml}");
        assert!(
            yaml.contains("#   system:admin (a cluster administrator): stripped example.com/a x1"),
            "{yaml}"
        );
        assert!(
            yaml.contains("#   system:anonymous (unauthenticated): stripped"),
            "{yaml}"
        );
    }
}
