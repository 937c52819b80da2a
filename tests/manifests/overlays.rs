//! The overlays, built with `kubectl kustomize`: cert-manager's,
//! self-managed, the documented enforce overlay failing closed, and the
//! backstop's export beside a webhook failing open.

use super::*;

/// The cert-manager overlay's output: a CA of its own issues the Secret the
/// pods mount, for the Service's names, and the CA injector is told which.
fn check_cert_manager_overlay(objects: &[Value]) {
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| text(o, "/kind") == kind && text(o, "/metadata/name") == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let serving = find("Certificate", "finalizer-guard-serving");
    assert_eq!(text(serving, "/spec/secretName"), TLS_SECRET);
    let names: Vec<String> = serde_json::from_value(serving["spec"]["dnsNames"].clone()).unwrap();
    assert_eq!(
        names,
        finalizer_guard::pki::certificates::service_names(SERVICE, NAMESPACE)
    );
    let issuer = text(serving, "/spec/issuerRef/name");
    let ca_issuer = find("Issuer", issuer);
    let ca_secret = text(ca_issuer, "/spec/ca/secretName");
    let ca = objects
        .iter()
        .find(|o| text(o, "/kind") == "Certificate" && text(o, "/spec/secretName") == ca_secret)
        .expect("a CA certificate");
    assert_eq!(ca["spec"]["isCA"], json!(true));
    assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
    find("Issuer", text(ca, "/spec/issuerRef/name"));

    let webhook = find("ValidatingWebhookConfiguration", "finalizer-guard");
    assert_eq!(
        text(
            webhook,
            "/metadata/annotations/cert-manager.io~1inject-ca-from"
        ),
        format!("{NAMESPACE}/finalizer-guard-serving")
    );
}

/// The self-managed overlay's output: the Secret holds the serving pair and
/// the CA, and the caBundle is the CA.
fn check_self_managed(objects: &[Value], bundle: &finalizer_guard::pki::certificates::Bundle) {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = objects
        .iter()
        .find(|o| text(o, "/kind") == "Secret")
        .expect("a Secret");
    assert_eq!(text(secret, "/metadata/name"), TLS_SECRET);
    assert_eq!(text(secret, "/metadata/namespace"), NAMESPACE);
    assert_eq!(text(secret, "/type"), "kubernetes.io/tls");
    let keys: BTreeSet<&str> = secret["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["ca.crt", "tls.crt", "tls.key"]));
    assert_eq!(text(secret, "/data/tls.crt"), b64(&bundle.cert_pem));
    assert_eq!(text(secret, "/data/tls.key"), b64(&bundle.key_pem));
    assert_eq!(text(secret, "/data/ca.crt"), b64(&bundle.ca_cert_pem));
    let webhook = objects
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(
        text(webhook, "/webhooks/0/clientConfig/caBundle"),
        finalizer_guard::pki::certificates::ca_bundle(&bundle.ca_cert_pem),
        "the caBundle `finalizer-guard certs` prints"
    );
    let all = serde_json::to_string(objects).unwrap();
    assert!(
        !all.contains(&b64(&bundle.ca_key_pem)),
        "ca.key never leaves certs/"
    );
}

fn sorted_ids(objects: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = objects.iter().map(describe).collect();
    ids.sort();
    ids
}

#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn kubectl_kustomize_builds_the_base_and_both_overlays() {
    let kubectl = kubectl();
    let copy = copy_manifests();
    let root = copy.path().join("manifests");
    let overlay = root.join("overlays/self-managed");

    // Without the certificate files, the self-managed overlay refuses to build:
    // nothing half-installed.
    let refused = Command::new(&kubectl)
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("tls.crt"), "{said}");

    let bundle = write_certs(&overlay);
    let base = Base::load();
    let base: Vec<Value> = base.objects.into_iter().chain(base.watch).collect();
    for dir in [
        root.clone(),
        root.join("base"),
        root.join("overlays/cert-manager"),
        overlay.clone(),
    ] {
        let built = kustomize(&kubectl, &dir);
        for object in &built {
            if let Err(e) = check_object(object) {
                panic!(
                    "kubectl kustomize {}: {}: {e}",
                    dir.display(),
                    describe(object)
                );
            }
        }
        // The base's objects, as committed, in every build: kustomize only
        // reorders keys and objects, and an overlay adds to them.
        for object in &base {
            let built = built
                .iter()
                .find(|o| describe(o) == describe(object))
                .unwrap_or_else(|| panic!("{}: lost {}", dir.display(), describe(object)));
            let changed_by_overlay = text(object, "/kind") == "ValidatingWebhookConfiguration"
                && dir.starts_with(root.join("overlays"));
            if !changed_by_overlay && let Some(d) = first_difference(object, built, "") {
                panic!("{}: {}: {d}", dir.display(), describe(object));
            }
        }
        if dir == root || dir == root.join("base") {
            assert_eq!(sorted_ids(&built), sorted_ids(&base), "{}", dir.display());
        }
        if dir == root.join("overlays/cert-manager") {
            check_cert_manager_overlay(&built);
        }
        if dir == overlay {
            check_self_managed(&built, &bundle);
        }
    }
    println!("kubectl kustomize built manifests/, base and both overlays");
}

/// The first YAML block of `page` (docs/install.md, docs/security.md) holding `needle`.
fn guide_example(page: &str, needle: &str) -> String {
    let guide = std::fs::read_to_string(repository::path(page)).unwrap();
    guide
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .find(|block| block.contains(needle))
        .unwrap_or_else(|| panic!("{page} shows no overlay with {needle:?}"))
}

/// The overlay docs/install.md shows for enforcing builds, over a copy of
/// `manifests/` where its `resources:` line expects it: the policy it is
/// given, and a webhook that fails closed.
#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn the_documented_enforce_overlay_fails_closed() {
    let example = guide_example("docs/install.md", "path: /webhooks/0/failurePolicy");
    let documents = documents(&example).unwrap();
    assert_eq!(documents[0]["kind"], "Kustomization", "{example}");
    assert_eq!(
        documents[0]["resources"][0],
        "../finalizer-guard/manifests/overlays/cert-manager"
    );
    let kubectl = kubectl();
    let copy = copy_manifests();
    let checkout = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::rename(copy.path().join("manifests"), checkout.join("manifests")).unwrap();
    let overlay = copy.path().join("my-finalizer-guard");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), &example).unwrap();
    std::fs::write(
        overlay.join("policy.yaml"),
        "mode: enforce\nrules:\n  - name: cleanup\n    finalizers: [example.com/cleanup]\n    serviceAccounts: [ops:cleanup]\n",
    )
    .unwrap();
    let built = kustomize(&kubectl, &overlay);
    let webhook = built
        .iter()
        .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(text(webhook, "/webhooks/0/failurePolicy"), "Fail");
    let config_maps: Vec<&Value> = built
        .iter()
        .filter(|o| text(o, "/kind") == "ConfigMap")
        .collect();
    assert_eq!(config_maps.len(), 1, "the policy replaces the shipped one");
    assert_eq!(
        describe(config_maps[0]),
        format!("ConfigMap {NAMESPACE}/finalizer-guard-policy"),
        "the name the Deployment mounts"
    );
    let policy = Policy::from_yaml(text(config_maps[0], "/data/policy.yaml")).unwrap();
    assert_eq!(policy.mode, Mode::Enforce);
    for object in &built {
        check_object(object).unwrap_or_else(|e| panic!("{}: {e}", describe(object)));
    }
}

/// The shipped policy, as the base's ConfigMap holds it.
fn shipped_policy() -> Policy {
    let config_map: ConfigMap = Base::load().named("ConfigMap", "finalizer-guard-policy");
    Policy::from_yaml(&config_map.data.unwrap()["policy.yaml"]).unwrap()
}

/// The ValidatingAdmissionPolicy and binding of a build, as one YAML stream,
/// without the namespace an overlay's `namespace:` gives every object
/// (kube-apiserver drops it from a cluster-scoped one).
fn backstop_of(built: &[Value]) -> String {
    let mut yaml = String::new();
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let mut object = built
            .iter()
            .find(|o| text(o, "/kind") == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
            .clone();
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml_ng::to_string(&object).unwrap());
    }
    yaml
}

/// manifests/vap is the export of the shipped policy: a policy changed in
/// the chart without the manifests rendered again fails here.
#[test]
fn the_shipped_validating_admission_policy_is_the_export_of_the_shipped_policy() {
    let dir = manifests().join("vap");
    assert_eq!(
        kustomization(&dir)["resources"],
        json!(["validatingadmissionpolicy.yaml"])
    );
    let file = dir.join("validatingadmissionpolicy.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    finalizer_guard::offline::vap::verify(&shipped_policy(), &yaml)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // And the check tells a policy that changed.
    let mut changed = shipped_policy();
    changed.mode = Mode::Enforce;
    assert!(finalizer_guard::offline::vap::verify(&changed, &yaml).is_err());
    for object in read_documents(&file) {
        check_object(&object).unwrap_or_else(|e| panic!("{}: {e}", describe(&object)));
    }
}

/// An overlay with the backstop component builds the webhook failing open
/// beside the export of the very policy its ConfigMap holds; docs/security.md's
/// overlay for a policy of your own does the same with yours, and the check
/// it shows (`policy validate --vap`) refuses an export left stale.
#[test]
#[ignore = "needs kubectl (FG_KUBECTL): see .ci/run"]
fn backstop_overlays_install_the_export_of_their_policy_beside_a_webhook_failing_open() {
    let kubectl = kubectl();
    let copy = copy_manifests();
    let root = copy.path().join("manifests");
    write_certs(&root.join("overlays/self-managed"));
    let check = |built: &[Value], what: &str| -> Policy {
        let webhook = built
            .iter()
            .find(|o| text(o, "/kind") == "ValidatingWebhookConfiguration")
            .unwrap();
        assert_eq!(
            text(webhook, "/webhooks/0/failurePolicy"),
            "Ignore",
            "{what}"
        );
        let config_map = built
            .iter()
            .find(|o| text(o, "/kind") == "ConfigMap")
            .unwrap();
        let policy = Policy::from_yaml(text(config_map, "/data/policy.yaml")).unwrap();
        finalizer_guard::offline::vap::verify(&policy, &backstop_of(built))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        for object in built {
            check_object(object).unwrap_or_else(|e| panic!("{what}: {}: {e}", describe(object)));
        }
        policy
    };

    // The shipped policy: the component.
    let overlay = root.join("overlays/backstop");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [../self-managed]\ncomponents: [../../components/backstop]\n",
    )
    .unwrap();
    assert_eq!(
        check(&kustomize(&kubectl, &overlay), "the component"),
        shipped_policy()
    );

    // A policy of your own: docs/security.md's overlay, with the export
    // made as it says.
    let example = guide_example("docs/security.md", "- validatingadmissionpolicy.yaml");
    let checkout = copy.path().join("finalizer-guard");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::rename(&root, checkout.join("manifests")).unwrap();
    let mine = copy.path().join("my-finalizer-guard");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), &example).unwrap();
    let policy_yaml = "mode: enforce\nrules:\n  - name: cleanup\n    finalizers: [example.com/cleanup]\n    serviceAccounts: [ops:cleanup]\n";
    std::fs::write(mine.join("policy.yaml"), policy_yaml).unwrap();
    let export = |policy: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
            .args(["policy", "export", "--vap"])
            .arg(mine.join(policy))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::write(mine.join("validatingadmissionpolicy.yaml"), out.stdout).unwrap();
    };
    export("policy.yaml");
    let policy = check(&kustomize(&kubectl, &mine), "docs/security.md's overlay");
    assert_eq!(policy.mode, Mode::Enforce);
    assert_eq!(policy.rules.len(), 1);
    let validate = || {
        Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
            .args(["policy", "validate", "--vap"])
            .arg(mine.join("validatingadmissionpolicy.yaml"))
            .arg(mine.join("policy.yaml"))
            .output()
            .unwrap()
    };
    assert!(validate().status.success());
    // The policy changes; the export does not: refused, and said why.
    std::fs::write(
        mine.join("policy.yaml"),
        policy_yaml.replace("ops:cleanup", "ops:cleanup-v2"),
    )
    .unwrap();
    let stale = validate();
    assert_eq!(stale.status.code(), Some(1));
    let said = String::from_utf8_lossy(&stale.stdout);
    assert!(
        said.contains("not `finalizer-guard policy export --vap"),
        "{said}"
    );
    assert!(
        said.contains("differs from the export of this policy at spec.variables"),
        "{said}"
    );
}
