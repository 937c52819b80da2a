//! The change a review asks for: who, what, which finalizers.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::field::FinalizerField;
use super::seal::SealKey;

/// The admission operation. Only `Update` can remove a finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl serde::Serialize for Operation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Operation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const ALL: [Operation; 4] = [
            Operation::Create,
            Operation::Update,
            Operation::Delete,
            Operation::Connect,
        ];
        let name = String::deserialize(deserializer)?;
        ALL.into_iter().find(|o| o.as_str() == name).ok_or_else(|| {
            serde::de::Error::unknown_variant(&name, &["CREATE", "UPDATE", "DELETE", "CONNECT"])
        })
    }
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// Names held as `String`s, lent the way a [`Change`] reads them.
pub fn borrowed(names: &[String]) -> Vec<Cow<'_, str>> {
    names.iter().map(|n| Cow::Borrowed(n.as_str())).collect()
}

/// Who asks: `request.userInfo`.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub username: &'a str,
    /// Borrowed from the request body where it holds the names unescaped.
    pub groups: &'a [Cow<'a, str>],
}

impl Requester<'_> {
    /// What kind of identity asks, told from the username and groups the
    /// API server authenticated, as the policy reads them: a built-in
    /// controller's exact username first, then a node or a ServiceAccount
    /// by username or group; anyone else is a person.
    pub fn class(&self) -> IdentityClass {
        let in_group = |name: &str| self.groups.iter().any(|g| g == name);
        if super::builtin::is_builtin_username(self.username) {
            IdentityClass::Builtin
        } else if self.username.starts_with("system:node:") || in_group("system:nodes") {
            IdentityClass::Node
        } else if self.username.starts_with("system:serviceaccount:")
            || in_group("system:serviceaccounts")
        {
            IdentityClass::ServiceAccount
        } else {
            IdentityClass::Person
        }
    }
}

/// The kind of identity a requester is ([`Requester::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdentityClass {
    Person,
    ServiceAccount,
    Node,
    Builtin,
}

impl IdentityClass {
    pub const ALL: [IdentityClass; 4] = [
        IdentityClass::Person,
        IdentityClass::ServiceAccount,
        IdentityClass::Node,
        IdentityClass::Builtin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IdentityClass::Person => "person",
            IdentityClass::ServiceAccount => "serviceaccount",
            IdentityClass::Node => "node",
            IdentityClass::Builtin => "builtin",
        }
    }
}

/// What is written: `request.resource`, `subResource`, `namespace`, `name`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl Target<'_> {
    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }

    /// `namespaces/finalize`: the subresource that writes a Namespace's `spec.finalizers`.
    pub fn is_namespace_finalize(&self) -> bool {
        self.is_namespace() && self.subresource == "finalize"
    }

    /// The namespace the object lives in; `None` for cluster-scoped objects.
    /// The apiserver reports a Namespace's own name as its namespace, but a
    /// Namespace is cluster-scoped.
    pub fn object_namespace(&self) -> Option<&str> {
        if self.is_namespace() {
            return None;
        }
        self.namespace.filter(|ns| !ns.is_empty())
    }
}

/// A finalizer list before and after the write. Absent, `null` and `[]` are all empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct FinalizerLists<'a> {
    pub old: &'a [Cow<'a, str>],
    pub new: &'a [Cow<'a, str>],
}

/// One admission request, as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub operation: Operation,
    pub target: Target<'a>,
    pub requester: Requester<'a>,
    pub metadata_finalizers: FinalizerLists<'a>,
    /// Judged only for `namespaces/finalize`.
    pub spec_finalizers: FinalizerLists<'a>,
    /// The annotations of `object`: the object as it will be stored.
    pub annotations: &'a BTreeMap<String, String>,
    /// The annotations of `oldObject` (empty for CREATE).
    pub old_annotations: &'a BTreeMap<String, String>,
    /// `oldObject` has a `deletionTimestamp`: the object is being deleted.
    pub deleting: bool,
    /// The object's `metadata.uid` (of `oldObject` for an UPDATE): what a
    /// two-person approval's seal binds to.
    pub uid: Option<&'a str>,
    /// The webhook's clock, for the two-person rule's expiry. Passed in: the core reads no clock.
    pub now: jiff::Timestamp,
    /// The webhook's key for sealing approvals. Passed in: the core reads no files.
    pub seal_key: Option<&'a SealKey>,
}

/// The most names a review reads in one finalizer list: past it, what an
/// UPDATE removes cannot be told (`Outcome::TooManyNames`).
pub const MAX_LIST_NAMES: usize = 16_384;

/// No annotations: what a [`Change::removing`] carries unless told otherwise.
static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

impl<'a> Change<'a> {
    /// The UPDATE by `requester` of `target` whose `field` list goes from
    /// `lists.old` to `lists.new`, the other list untouched: a write that
    /// removes one finalizer, or some. It carries no annotations, on an object
    /// being deleted, without uid, clock (the epoch) or seal key: set what
    /// differs with `Change { .., ..Change::removing(..) }`.
    pub fn removing(
        target: Target<'a>,
        requester: Requester<'a>,
        field: FinalizerField,
        lists: FinalizerLists<'a>,
    ) -> Change<'a> {
        let (metadata_finalizers, spec_finalizers) = match field {
            FinalizerField::Metadata => (lists, FinalizerLists::default()),
            FinalizerField::Spec => (FinalizerLists::default(), lists),
        };
        Change {
            operation: Operation::Update,
            target,
            requester,
            metadata_finalizers,
            spec_finalizers,
            annotations: &NO_ANNOTATIONS,
            old_annotations: &NO_ANNOTATIONS,
            deleting: true,
            uid: None,
            now: jiff::Timestamp::UNIX_EPOCH,
            seal_key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::Policy;
    use crate::policy::decide;

    const TARGET: Target<'static> = Target {
        group: "",
        resource: "namespaces",
        subresource: "finalize",
        namespace: Some("team-a"),
        name: "team-a",
    };

    #[test]
    fn removing_fills_the_one_list_it_is_given_and_nothing_else() {
        let old = [Cow::Borrowed("a"), Cow::Borrowed("b")];
        let new = [Cow::Borrowed("b")];
        let lists = FinalizerLists {
            old: &old,
            new: &new,
        };
        let requester = Requester {
            username: "alice",
            groups: &[],
        };
        for field in [FinalizerField::Metadata, FinalizerField::Spec] {
            let change = Change::removing(TARGET, requester, field, lists);
            assert_eq!(change.operation, Operation::Update);
            let (given, other) = match field {
                FinalizerField::Metadata => (change.metadata_finalizers, change.spec_finalizers),
                FinalizerField::Spec => (change.spec_finalizers, change.metadata_finalizers),
            };
            assert_eq!((given.old, given.new), (&old[..], &new[..]));
            assert!(other.old.is_empty() && other.new.is_empty());
            assert!(change.annotations.is_empty() && change.old_annotations.is_empty());
            assert!(change.deleting);
            assert_eq!(
                (change.uid, change.now),
                (None, jiff::Timestamp::UNIX_EPOCH)
            );
            assert!(change.seal_key.is_none());

            // Decided, it removes exactly that finalizer, from that list.
            let decision = decide(&change, &Policy::embedded_default());
            let removed: Vec<_> = decision
                .removed
                .iter()
                .map(|r| (r.finalizer.as_str(), r.field))
                .collect();
            assert_eq!(removed, [("a", field)]);
        }
    }

    #[test]
    fn a_namespace_s_spec_finalizers_are_written_through_finalize() {
        assert_eq!(FinalizerField::Spec.subresource(), "finalize");
        assert_eq!(FinalizerField::Metadata.subresource(), "");
        assert!(TARGET.is_namespace_finalize());
    }

    #[test]
    fn requesters_are_classed_as_the_api_server_authenticated_them() {
        let class = |username: &str, groups: &[&str]| {
            let groups: Vec<Cow<'_, str>> = groups.iter().map(|g| Cow::Borrowed(*g)).collect();
            Requester {
                username,
                groups: &groups,
            }
            .class()
        };
        use IdentityClass::*;
        assert_eq!(
            class("alice@example.com", &["system:authenticated"]),
            Person
        );
        assert_eq!(class("system:serviceaccount:ops:bot", &[]), ServiceAccount);
        assert_eq!(class("bot", &["system:serviceaccounts"]), ServiceAccount);
        assert_eq!(class("system:node:worker-1", &[]), Node);
        assert_eq!(class("kubelet", &["system:nodes"]), Node);
        assert_eq!(class("system:kube-controller-manager", &[]), Builtin);
        assert_eq!(
            class(
                "system:serviceaccount:kube-system:generic-garbage-collector",
                &[]
            ),
            Builtin
        );
        // Exact names only: a look-alike is a ServiceAccount like any other.
        assert_eq!(
            class("system:serviceaccount:team:generic-garbage-collector", &[]),
            ServiceAccount
        );
        assert_eq!(class("", &[]), Person);
    }
}
