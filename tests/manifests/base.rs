//! The base: every object parses into its type without losing a field, the
//! kustomization lists every file, the selectors and labels as shipped, no
//! key material.

use super::*;

#[test]
fn every_object_parses_into_its_type_without_losing_a_field() {
    let mut problems = Vec::new();
    let mut count = 0;
    for path in yaml_files(&manifests()) {
        if is_kustomization(&path) {
            continue;
        }
        let docs = read_documents(&path);
        assert!(!docs.is_empty(), "{}: no object", path.display());
        for doc in docs {
            count += 1;
            if let Err(e) = check_object(&doc) {
                problems.push(format!("{}: {}: {e}", path.display(), describe(&doc)));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(count >= 14, "only {count} objects found");
}

#[test]
fn round_trip_catches_a_misspelled_field() {
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {"containers": [{"name": "c", "readOnlyRootFileSystem": true}]}},
        },
    });
    let e = check_object(&deployment).unwrap_err();
    assert!(e.contains("readOnlyRootFileSystem is dropped"), "{e}");
    let certificate = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "x"},
        "spec": {"dnsName": ["a"]},
    });
    assert!(
        check_cert_manager(&certificate)
            .unwrap_err()
            .contains("dnsName")
    );
}

/// The base lists every file in its folder, and each object is where the
/// overlays expect it: namespaced ones in the namespace, the rest cluster-wide.
#[test]
fn the_base_lists_every_file_and_names_its_namespace() {
    let dir = manifests().join("base");
    let listed: BTreeSet<String> = kustomization(&dir)["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let files: BTreeSet<String> = yaml_files(&dir)
        .iter()
        .filter(|p| !is_kustomization(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed, files,
        "manifests/base/kustomization.yaml lists every file"
    );
    for object in &Base::load().objects {
        let kind = text(object, "/kind");
        let namespace = text(object, "/metadata/namespace");
        if is_cluster_scoped(kind) {
            assert_eq!(namespace, "", "{} is cluster-scoped", describe(object));
        } else {
            assert_eq!(namespace, NAMESPACE, "{}", describe(object));
        }
    }
    for overlay in ["cert-manager", "self-managed"] {
        let k = kustomization(&manifests().join("overlays").join(overlay));
        assert_eq!(k["namespace"], NAMESPACE, "{overlay}");
        assert!(
            k["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "../../base"),
            "overlay {overlay} builds on the base"
        );
    }
}

/// `kubectl apply -k` over the manifests of 0.1.0 must not change what it
/// cannot: a Deployment's selector is immutable, and the Service and the
/// PodDisruptionBudget select the same pods. So the rendered objects carry
/// none of Helm's bookkeeping labels, and select as 0.1.0 did.
#[test]
fn the_selectors_are_those_of_0_1_0_and_no_helm_labels_are_shipped() {
    let base = Base::load();
    let selector = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "finalizer-guard".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "webhook".to_string(),
        ),
    ]);
    let (deployment, _, _) = base.pod();
    assert_eq!(
        deployment.spec.selector.match_labels.as_ref(),
        Some(&selector),
        "the Deployment's selector of 0.1.0"
    );
    let service: Service = base.one("Service");
    assert_eq!(service.spec.unwrap().selector.as_ref(), Some(&selector));
    let pdb: PodDisruptionBudget = base.one("PodDisruptionBudget");
    assert_eq!(
        pdb.spec.unwrap().selector.unwrap().match_labels.as_ref(),
        Some(&selector)
    );
    for path in yaml_files(&manifests()) {
        let text = std::fs::read_to_string(&path).unwrap();
        for label in [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ] {
            assert!(
                !text.contains(label),
                "{}: {label}: these objects are no Helm release",
                path.display()
            );
        }
    }
}

#[test]
fn no_key_material_is_shipped() {
    for path in yaml_files(&manifests()) {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains("BEGIN CERTIFICATE"),
            "{} holds PEM material",
            path.display()
        );
        for doc in documents(&text).unwrap() {
            assert_ne!(
                api_kind(&doc),
                "v1/Secret",
                "{}: the base and overlays ship no Secret object",
                path.display()
            );
        }
    }
    let sm = kustomization(&manifests().join("overlays/self-managed"));
    let files: Vec<&str> = sm["secretGenerator"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files, ["tls.crt", "tls.key", "ca.crt"], "never ca.key");
}

fn api_kind(object: &Value) -> String {
    format!("{}/{}", text(object, "/apiVersion"), text(object, "/kind"))
}
