//! Kubernetes' own controllers and the finalizers they own.
//!
//! A built-in controller may remove its own finalizers, whatever the rules say:
//! blocking one of them breaks the cluster (namespaces never finish deleting,
//! volumes never release, foreground deletion hangs). Usernames are matched
//! exactly, never by prefix, so `system:serviceaccount:kube-system:namespace-controller-x`
//! or a same-named service account in another namespace gets nothing.
//!
//! kube-controller-manager runs each controller under its own service account
//! when started with `--use-service-account-credentials` (kubeadm's default),
//! and as `system:kube-controller-manager` otherwise; the service controller
//! lives in cloud-controller-manager.
use super::field::FinalizerField;

/// The username kube-controller-manager uses without per-controller credentials.
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

/// A built-in controller, the usernames it acts under and the finalizers it removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinController {
    /// The controller's name, as kube-controller-manager's `--controllers` flag spells it.
    pub name: &'static str,
    /// Exact usernames, besides [`KUBE_CONTROLLER_MANAGER`].
    pub usernames: &'static [&'static str],
    pub finalizers: &'static [&'static str],
    /// `Spec` only for the namespace controller's `spec.finalizers`.
    pub field: FinalizerField,
    /// A resource (`resource` or `resource.group`) it removes them from, for `doctor`.
    pub example_resource: &'static str,
}

macro_rules! sa {
    ($name:literal) => {
        concat!("system:serviceaccount:kube-system:", $name)
    };
}

/// A ResourceClaim's finalizer, which the resource-claim controller and the
/// scheduler both remove. The second is its name in resource.k8s.io v1alpha2
/// and v1alpha3 (Kubernetes 1.26 to 1.31).
const RESOURCE_CLAIM_FINALIZERS: &[&str] = &[
    "resource.kubernetes.io/delete-protection",
    "dra.k8s.io/delete-protection",
];

/// The table. Keep `manifests/` matchConditions in step with it.
pub const BUILTIN_CONTROLLERS: &[BuiltinController] = &[
    BuiltinController {
        name: "garbage-collector",
        usernames: &[sa!("generic-garbage-collector")],
        finalizers: &["foregroundDeletion", "orphan"],
        field: FinalizerField::Metadata,
        example_resource: "deployments.apps",
    },
    BuiltinController {
        name: "pvc-protection",
        usernames: &[sa!("pvc-protection-controller")],
        finalizers: &["kubernetes.io/pvc-protection"],
        field: FinalizerField::Metadata,
        example_resource: "persistentvolumeclaims",
    },
    BuiltinController {
        name: "pv-protection",
        usernames: &[sa!("pv-protection-controller")],
        finalizers: &["kubernetes.io/pv-protection"],
        field: FinalizerField::Metadata,
        example_resource: "persistentvolumes",
    },
    BuiltinController {
        name: "persistentvolume-binder",
        usernames: &[sa!("persistent-volume-binder")],
        // The second only when CSI migration is rolled back for an in-tree volume.
        finalizers: &[
            "kubernetes.io/pv-controller",
            "external-provisioner.volume.kubernetes.io/finalizer",
        ],
        field: FinalizerField::Metadata,
        example_resource: "persistentvolumes",
    },
    BuiltinController {
        name: "namespace",
        usernames: &[sa!("namespace-controller")],
        finalizers: &["kubernetes"],
        field: FinalizerField::Spec,
        example_resource: "namespaces",
    },
    BuiltinController {
        name: "job",
        usernames: &[sa!("job-controller")],
        finalizers: &["batch.kubernetes.io/job-tracking"],
        field: FinalizerField::Metadata,
        example_resource: "pods",
    },
    BuiltinController {
        name: "service",
        // cloud-controller-manager runs the service controller as
        // `service-controller` with per-controller credentials, and most
        // cloud providers' manifests give it the `cloud-controller-manager`
        // ServiceAccount otherwise.
        usernames: &[
            sa!("service-controller"),
            "system:cloud-controller-manager",
            sa!("cloud-controller-manager"),
        ],
        finalizers: &["service.kubernetes.io/load-balancer-cleanup"],
        field: FinalizerField::Metadata,
        example_resource: "services",
    },
    BuiltinController {
        name: "resourceclaim",
        usernames: &[sa!("resource-claim-controller")],
        finalizers: RESOURCE_CLAIM_FINALIZERS,
        field: FinalizerField::Metadata,
        example_resource: "resourceclaims.resource.k8s.io",
    },
    BuiltinController {
        name: "kube-scheduler",
        // The scheduler sets the claim's finalizer before it allocates, and
        // removes it again when it gives an allocation up (the DRA plugin's
        // Unreserve, and the extended-resource claims of 1.34+).
        usernames: &["system:kube-scheduler"],
        finalizers: RESOURCE_CLAIM_FINALIZERS,
        field: FinalizerField::Metadata,
        example_resource: "resourceclaims.resource.k8s.io",
    },
    BuiltinController {
        name: "podgroup-protection",
        // Kubernetes 1.36, gang scheduling.
        usernames: &[sa!("podgroup-protection-controller")],
        finalizers: &["scheduling.k8s.io/podgroup-protection"],
        field: FinalizerField::Metadata,
        example_resource: "podgroups.scheduling.k8s.io",
    },
    BuiltinController {
        name: "service-cidr",
        usernames: &[sa!("service-cidrs-controller")],
        finalizers: &["networking.k8s.io/service-cidr-finalizer"],
        field: FinalizerField::Metadata,
        example_resource: "servicecidrs.networking.k8s.io",
    },
    BuiltinController {
        name: "volumeattributesclass-protection",
        usernames: &[sa!("volumeattributesclass-protection-controller")],
        finalizers: &["kubernetes.io/vac-protection"],
        field: FinalizerField::Metadata,
        example_resource: "volumeattributesclasses.storage.k8s.io",
    },
    BuiltinController {
        name: "customresourcedefinition-finalizer",
        // kube-apiserver's own controller, over its loopback client.
        usernames: &["system:apiserver"],
        finalizers: &["customresourcecleanup.apiextensions.k8s.io"],
        field: FinalizerField::Metadata,
        example_resource: "customresourcedefinitions.apiextensions.k8s.io",
    },
];

/// The built-in controller that `username` is and that owns `finalizer`, if any.
pub fn owner(
    username: &str,
    finalizer: &str,
    field: FinalizerField,
) -> Option<&'static BuiltinController> {
    BUILTIN_CONTROLLERS.iter().find(|c| {
        c.field == field
            && c.finalizers.contains(&finalizer)
            && (username == KUBE_CONTROLLER_MANAGER || c.usernames.contains(&username))
    })
}

/// The built-in controllers that own `finalizer`, whoever asks.
pub fn owners_of(
    finalizer: &str,
    field: FinalizerField,
) -> impl Iterator<Item = &'static BuiltinController> {
    BUILTIN_CONTROLLERS
        .iter()
        .filter(move |c| c.field == field && c.finalizers.contains(&finalizer))
}

/// Whether `username` is one a built-in controller acts under (exactly).
pub fn is_builtin_username(username: &str) -> bool {
    username == KUBE_CONTROLLER_MANAGER
        || BUILTIN_CONTROLLERS
            .iter()
            .any(|c| c.usernames.contains(&username))
}

/// Every username in the table, for the webhook configuration's matchConditions.
pub fn all_usernames() -> Vec<&'static str> {
    let mut names = vec![KUBE_CONTROLLER_MANAGER];
    for c in BUILTIN_CONTROLLERS {
        for u in c.usernames {
            if !names.contains(u) {
                names.push(u);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use FinalizerField::{Metadata, Spec};

    #[test]
    fn each_controller_owns_only_its_finalizers() {
        let gc = sa!("generic-garbage-collector");
        assert_eq!(
            owner(gc, "foregroundDeletion", Metadata).unwrap().name,
            "garbage-collector"
        );
        assert_eq!(
            owner(gc, "orphan", Metadata).unwrap().name,
            "garbage-collector"
        );
        assert!(owner(gc, "kubernetes.io/pvc-protection", Metadata).is_none());
        assert!(
            owner(
                sa!("pvc-protection-controller"),
                "foregroundDeletion",
                Metadata
            )
            .is_none()
        );
    }

    #[test]
    fn kube_controller_manager_owns_every_builtin_finalizer() {
        for c in BUILTIN_CONTROLLERS {
            for f in c.finalizers {
                // The first controller in the table that owns it: the
                // scheduler shares the resource claims' finalizer.
                let owner = owner(KUBE_CONTROLLER_MANAGER, f, c.field).unwrap();
                assert!(owner.finalizers.contains(f) && owner.field == c.field);
            }
        }
        assert!(owner(KUBE_CONTROLLER_MANAGER, "example.com/cleanup", Metadata).is_none());
    }

    #[test]
    fn namespace_controller_owns_the_spec_finalizer_only() {
        let ns = sa!("namespace-controller");
        assert!(owner(ns, "kubernetes", Spec).is_some());
        assert!(owner(ns, "kubernetes", Metadata).is_none());
        assert!(owner(sa!("generic-garbage-collector"), "kubernetes", Spec).is_none());
    }

    #[test]
    fn usernames_match_exactly() {
        for spoof in [
            "system:serviceaccount:kube-system:generic-garbage-collector-x",
            "system:serviceaccount:kube-system:generic-garbage-collector ",
            "system:serviceaccount:default:generic-garbage-collector",
            "System:Kube-Controller-Manager",
            "system:kube-controller-manager:evil",
            "generic-garbage-collector",
        ] {
            assert!(
                owner(spoof, "foregroundDeletion", Metadata).is_none(),
                "{spoof}"
            );
        }
    }

    #[test]
    fn all_usernames_is_deduplicated() {
        let names = all_usernames();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(names.contains(&KUBE_CONTROLLER_MANAGER));
    }
}
