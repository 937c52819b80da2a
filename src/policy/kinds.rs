//! Well-known types: Kubernetes' own, and the custom resources of the
//! controllers platform teams run, as kube-apiserver names them in a review
//! (group, version, kind, resource, scope).
//!
//! Two readers: `policy validate`, which warns of a resource written without
//! the group it has ([`known_groups`]), and `test`, which expands a short
//! suite case into the review kube-apiserver would send ([`by_kind`]). The
//! version only names the type in the review: no decision reads it.

/// A type kube-apiserver serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownType {
    /// `""`: the core group.
    pub group: &'static str,
    /// The version a review names it by (the group's preferred one).
    pub version: &'static str,
    pub kind: &'static str,
    /// The plural resource, as a policy's `resources` writes it.
    pub resource: &'static str,
    pub namespaced: bool,
}

const fn t(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    resource: &'static str,
    namespaced: bool,
) -> KnownType {
    KnownType {
        group,
        version,
        kind,
        resource,
        namespaced,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;

/// The table. Every resource of the core group is here (so a resource written
/// with no group that is not here is no resource at all); of the other
/// groups, the types that carry finalizers in practice. Where two groups
/// serve one kind (`Event`), the first is the one a case without
/// `apiVersion` means.
pub const KNOWN_TYPES: &[KnownType] = &[
    // The core group: all of it.
    t("", "v1", "Binding", "bindings", NS),
    t("", "v1", "ComponentStatus", "componentstatuses", CLUSTER),
    t("", "v1", "ConfigMap", "configmaps", NS),
    t("", "v1", "Endpoints", "endpoints", NS),
    t("", "v1", "Event", "events", NS),
    t("", "v1", "LimitRange", "limitranges", NS),
    t("", "v1", "Namespace", "namespaces", CLUSTER),
    t("", "v1", "Node", "nodes", CLUSTER),
    t("", "v1", "PersistentVolume", "persistentvolumes", CLUSTER),
    t(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        NS,
    ),
    t("", "v1", "Pod", "pods", NS),
    t("", "v1", "PodTemplate", "podtemplates", NS),
    t(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        NS,
    ),
    t("", "v1", "ResourceQuota", "resourcequotas", NS),
    t("", "v1", "Secret", "secrets", NS),
    t("", "v1", "Service", "services", NS),
    t("", "v1", "ServiceAccount", "serviceaccounts", NS),
    // Kubernetes' other groups.
    t(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        CLUSTER,
    ),
    t(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        CLUSTER,
    ),
    t(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        CLUSTER,
    ),
    t(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        CLUSTER,
    ),
    t(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        CLUSTER,
    ),
    t(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        CLUSTER,
    ),
    t(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        NS,
    ),
    t("apps", "v1", "DaemonSet", "daemonsets", NS),
    t("apps", "v1", "Deployment", "deployments", NS),
    t("apps", "v1", "ReplicaSet", "replicasets", NS),
    t("apps", "v1", "StatefulSet", "statefulsets", NS),
    t(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        NS,
    ),
    t("batch", "v1", "CronJob", "cronjobs", NS),
    t("batch", "v1", "Job", "jobs", NS),
    t(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        CLUSTER,
    ),
    t("coordination.k8s.io", "v1", "Lease", "leases", NS),
    t(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        NS,
    ),
    t("events.k8s.io", "v1", "Event", "events", NS),
    t(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
        CLUSTER,
    ),
    t(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        CLUSTER,
    ),
    t(
        "networking.k8s.io",
        "v1",
        "IPAddress",
        "ipaddresses",
        CLUSTER,
    ),
    t("networking.k8s.io", "v1", "Ingress", "ingresses", NS),
    t(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        CLUSTER,
    ),
    t(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        NS,
    ),
    t(
        "networking.k8s.io",
        "v1",
        "ServiceCIDR",
        "servicecidrs",
        CLUSTER,
    ),
    t(
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        CLUSTER,
    ),
    t(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        NS,
    ),
    t(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        CLUSTER,
    ),
    t(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        CLUSTER,
    ),
    t("rbac.authorization.k8s.io", "v1", "Role", "roles", NS),
    t(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        NS,
    ),
    t(
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "deviceclasses",
        CLUSTER,
    ),
    t(
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        NS,
    ),
    t(
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        NS,
    ),
    t(
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        CLUSTER,
    ),
    t(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        CLUSTER,
    ),
    t("storage.k8s.io", "v1", "CSIDriver", "csidrivers", CLUSTER),
    t("storage.k8s.io", "v1", "CSINode", "csinodes", CLUSTER),
    t(
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        NS,
    ),
    t(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        CLUSTER,
    ),
    t(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        CLUSTER,
    ),
    t(
        "storage.k8s.io",
        "v1",
        "VolumeAttributesClass",
        "volumeattributesclasses",
        CLUSTER,
    ),
    // Kubernetes SIGs' custom resources.
    t(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshot",
        "volumesnapshots",
        NS,
    ),
    t(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshotClass",
        "volumesnapshotclasses",
        CLUSTER,
    ),
    t(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshotContent",
        "volumesnapshotcontents",
        CLUSTER,
    ),
    t("gateway.networking.k8s.io", "v1", "Gateway", "gateways", NS),
    t(
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
        "gatewayclasses",
        CLUSTER,
    ),
    t(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        NS,
    ),
    // Argo CD.
    t("argoproj.io", "v1alpha1", "Application", "applications", NS),
    t(
        "argoproj.io",
        "v1alpha1",
        "ApplicationSet",
        "applicationsets",
        NS,
    ),
    t("argoproj.io", "v1alpha1", "AppProject", "appprojects", NS),
    // Flux.
    t("source.toolkit.fluxcd.io", "v1", "Bucket", "buckets", NS),
    t(
        "source.toolkit.fluxcd.io",
        "v1",
        "ExternalArtifact",
        "externalartifacts",
        NS,
    ),
    t(
        "source.toolkit.fluxcd.io",
        "v1",
        "GitRepository",
        "gitrepositories",
        NS,
    ),
    t(
        "source.toolkit.fluxcd.io",
        "v1",
        "HelmChart",
        "helmcharts",
        NS,
    ),
    t(
        "source.toolkit.fluxcd.io",
        "v1",
        "HelmRepository",
        "helmrepositories",
        NS,
    ),
    t(
        "source.toolkit.fluxcd.io",
        "v1",
        "OCIRepository",
        "ocirepositories",
        NS,
    ),
    t(
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
        "kustomizations",
        NS,
    ),
    t(
        "helm.toolkit.fluxcd.io",
        "v2",
        "HelmRelease",
        "helmreleases",
        NS,
    ),
    t(
        "notification.toolkit.fluxcd.io",
        "v1beta3",
        "Alert",
        "alerts",
        NS,
    ),
    t(
        "notification.toolkit.fluxcd.io",
        "v1beta3",
        "Provider",
        "providers",
        NS,
    ),
    t(
        "notification.toolkit.fluxcd.io",
        "v1",
        "Receiver",
        "receivers",
        NS,
    ),
    t(
        "image.toolkit.fluxcd.io",
        "v1beta2",
        "ImagePolicy",
        "imagepolicies",
        NS,
    ),
    t(
        "image.toolkit.fluxcd.io",
        "v1beta2",
        "ImageRepository",
        "imagerepositories",
        NS,
    ),
    t(
        "image.toolkit.fluxcd.io",
        "v1beta2",
        "ImageUpdateAutomation",
        "imageupdateautomations",
        NS,
    ),
    // Crossplane.
    t(
        "apiextensions.crossplane.io",
        "v1",
        "CompositeResourceDefinition",
        "compositeresourcedefinitions",
        CLUSTER,
    ),
    t(
        "apiextensions.crossplane.io",
        "v1",
        "Composition",
        "compositions",
        CLUSTER,
    ),
    t(
        "pkg.crossplane.io",
        "v1",
        "Configuration",
        "configurations",
        CLUSTER,
    ),
    t("pkg.crossplane.io", "v1", "Function", "functions", CLUSTER),
    t("pkg.crossplane.io", "v1", "Provider", "providers", CLUSTER),
    t(
        "pkg.crossplane.io",
        "v1",
        "ProviderRevision",
        "providerrevisions",
        CLUSTER,
    ),
    // cert-manager.
    t("cert-manager.io", "v1", "Certificate", "certificates", NS),
    t(
        "cert-manager.io",
        "v1",
        "CertificateRequest",
        "certificaterequests",
        NS,
    ),
    t(
        "cert-manager.io",
        "v1",
        "ClusterIssuer",
        "clusterissuers",
        CLUSTER,
    ),
    t("cert-manager.io", "v1", "Issuer", "issuers", NS),
    t("acme.cert-manager.io", "v1", "Challenge", "challenges", NS),
    t("acme.cert-manager.io", "v1", "Order", "orders", NS),
    // Cluster API.
    t("cluster.x-k8s.io", "v1beta1", "Cluster", "clusters", NS),
    t(
        "cluster.x-k8s.io",
        "v1beta1",
        "ClusterClass",
        "clusterclasses",
        NS,
    ),
    t("cluster.x-k8s.io", "v1beta1", "Machine", "machines", NS),
    t(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachineDeployment",
        "machinedeployments",
        NS,
    ),
    t(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachineHealthCheck",
        "machinehealthchecks",
        NS,
    ),
    t(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachinePool",
        "machinepools",
        NS,
    ),
    t(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachineSet",
        "machinesets",
        NS,
    ),
    // Velero.
    t("velero.io", "v1", "Backup", "backups", NS),
    t(
        "velero.io",
        "v1",
        "BackupRepository",
        "backuprepositories",
        NS,
    ),
    t(
        "velero.io",
        "v1",
        "BackupStorageLocation",
        "backupstoragelocations",
        NS,
    ),
    t(
        "velero.io",
        "v1",
        "DeleteBackupRequest",
        "deletebackuprequests",
        NS,
    ),
    t("velero.io", "v1", "PodVolumeBackup", "podvolumebackups", NS),
    t(
        "velero.io",
        "v1",
        "PodVolumeRestore",
        "podvolumerestores",
        NS,
    ),
    t("velero.io", "v1", "Restore", "restores", NS),
    t("velero.io", "v1", "Schedule", "schedules", NS),
    t("velero.io", "v2alpha1", "DataDownload", "datadownloads", NS),
    t("velero.io", "v2alpha1", "DataUpload", "datauploads", NS),
    // Karpenter.
    t("karpenter.sh", "v1", "NodeClaim", "nodeclaims", CLUSTER),
    t("karpenter.sh", "v1", "NodePool", "nodepools", CLUSTER),
    t(
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
        "ec2nodeclasses",
        CLUSTER,
    ),
    // AWS Load Balancer Controller.
    t(
        "elbv2.k8s.aws",
        "v1beta1",
        "IngressClassParams",
        "ingressclassparams",
        CLUSTER,
    ),
    t(
        "elbv2.k8s.aws",
        "v1beta1",
        "TargetGroupBinding",
        "targetgroupbindings",
        NS,
    ),
    // Rook.
    t("ceph.rook.io", "v1", "CephBlockPool", "cephblockpools", NS),
    t("ceph.rook.io", "v1", "CephCluster", "cephclusters", NS),
    t(
        "ceph.rook.io",
        "v1",
        "CephFilesystem",
        "cephfilesystems",
        NS,
    ),
    t("ceph.rook.io", "v1", "CephNFS", "cephnfses", NS),
    t(
        "ceph.rook.io",
        "v1",
        "CephObjectStore",
        "cephobjectstores",
        NS,
    ),
    t(
        "ceph.rook.io",
        "v1",
        "CephObjectStoreUser",
        "cephobjectstoreusers",
        NS,
    ),
    t(
        "objectbucket.io",
        "v1alpha1",
        "ObjectBucket",
        "objectbuckets",
        CLUSTER,
    ),
    t(
        "objectbucket.io",
        "v1alpha1",
        "ObjectBucketClaim",
        "objectbucketclaims",
        NS,
    ),
    // Longhorn.
    t(
        "longhorn.io",
        "v1beta2",
        "BackingImage",
        "backingimages",
        NS,
    ),
    t("longhorn.io", "v1beta2", "Backup", "backups", NS),
    t(
        "longhorn.io",
        "v1beta2",
        "BackupVolume",
        "backupvolumes",
        NS,
    ),
    t("longhorn.io", "v1beta2", "Engine", "engines", NS),
    t("longhorn.io", "v1beta2", "EngineImage", "engineimages", NS),
    t(
        "longhorn.io",
        "v1beta2",
        "InstanceManager",
        "instancemanagers",
        NS,
    ),
    t("longhorn.io", "v1beta2", "Node", "nodes", NS),
    t("longhorn.io", "v1beta2", "Replica", "replicas", NS),
    t(
        "longhorn.io",
        "v1beta2",
        "ShareManager",
        "sharemanagers",
        NS,
    ),
    t("longhorn.io", "v1beta2", "Snapshot", "snapshots", NS),
    t("longhorn.io", "v1beta2", "Volume", "volumes", NS),
    // Istio's Sail operator.
    t("sailoperator.io", "v1", "Istio", "istios", CLUSTER),
    t("sailoperator.io", "v1", "IstioCNI", "istiocnis", CLUSTER),
    t(
        "sailoperator.io",
        "v1",
        "IstioRevision",
        "istiorevisions",
        CLUSTER,
    ),
    t("sailoperator.io", "v1", "ZTunnel", "ztunnels", CLUSTER),
    // KubeVirt.
    t("kubevirt.io", "v1", "VirtualMachine", "virtualmachines", NS),
    t(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        NS,
    ),
    t(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
        NS,
    ),
    t(
        "cdi.kubevirt.io",
        "v1beta1",
        "DataVolume",
        "datavolumes",
        NS,
    ),
    // external-secrets.
    t(
        "external-secrets.io",
        "v1",
        "ClusterExternalSecret",
        "clusterexternalsecrets",
        CLUSTER,
    ),
    t(
        "external-secrets.io",
        "v1",
        "ClusterSecretStore",
        "clustersecretstores",
        CLUSTER,
    ),
    t(
        "external-secrets.io",
        "v1",
        "ExternalSecret",
        "externalsecrets",
        NS,
    ),
    t(
        "external-secrets.io",
        "v1alpha1",
        "PushSecret",
        "pushsecrets",
        NS,
    ),
    t(
        "external-secrets.io",
        "v1",
        "SecretStore",
        "secretstores",
        NS,
    ),
];

/// The groups that serve a resource of this plural name (`""`: the core
/// group), in the table's order. A resource written with no group means
/// the core group only: where that is not among these, the author forgot
/// the group.
pub fn known_groups(resource: &str) -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for t in KNOWN_TYPES.iter().filter(|t| t.resource == resource) {
        if !groups.contains(&t.group) {
            groups.push(t.group);
        }
    }
    groups
}

/// The type a kind names: in `group` when given (`Some("")`: the core
/// group), else the table's first of that kind.
pub fn by_kind(group: Option<&str>, kind: &str) -> Option<&'static KnownType> {
    KNOWN_TYPES
        .iter()
        .find(|t| t.kind == kind && group.is_none_or(|g| g == t.group))
}

/// The type a resource names in a group.
pub fn by_resource(group: &str, resource: &str) -> Option<&'static KnownType> {
    KNOWN_TYPES
        .iter()
        .find(|t| t.group == group && t.resource == resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_is_listed_once_and_named_as_kube_apiserver_names_it() {
        for (i, a) in KNOWN_TYPES.iter().enumerate() {
            for b in &KNOWN_TYPES[i + 1..] {
                assert!(
                    !(a.group == b.group && (a.kind == b.kind || a.resource == b.resource)),
                    "{a:?} and {b:?}"
                );
            }
            // The plural is the lowercase kind, pluralised (English, so
            // only its ending differs).
            let stem = a.kind.to_lowercase();
            let stem = stem.trim_end_matches(['s', 'y']);
            assert!(a.resource.starts_with(stem), "{a:?}");
            assert!(
                a.resource
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                "{a:?}"
            );
        }
    }

    #[test]
    fn groups_of_resources() {
        assert_eq!(known_groups("applications"), ["argoproj.io"]);
        assert_eq!(known_groups("deployments"), ["apps"]);
        assert_eq!(known_groups("events"), ["", "events.k8s.io"]);
        assert_eq!(known_groups("nodes"), ["", "longhorn.io"]);
        assert_eq!(
            known_groups("providers"),
            ["notification.toolkit.fluxcd.io", "pkg.crossplane.io"]
        );
        assert!(known_groups("widgets").is_empty());
        assert_eq!(by_kind(None, "Event").unwrap().group, "");
        assert_eq!(
            by_kind(Some("events.k8s.io"), "Event").unwrap().group,
            "events.k8s.io"
        );
        assert_eq!(by_kind(None, "Pod").unwrap().resource, "pods");
        assert!(by_kind(Some("apps"), "Pod").is_none());
    }
}
