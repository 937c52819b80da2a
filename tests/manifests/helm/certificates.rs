//! The chart's certificates: generated ones naming the Service and filling
//! the caBundle, and the self-managed ones rendered byte for byte with the
//! least RBAC.

use super::*;

#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn generated_certificates_name_the_service_and_fill_the_ca_bundle() {
    let helm = helm();
    let rendered = template(
        &helm,
        &[
            "--set",
            "certificates.source=generated",
            "--set",
            "certificates.generated.extraIPAddresses={127.0.0.1}",
        ],
    );
    let secret = |name: &str| {
        find(&rendered, &format!("Secret {NAMESPACE}/{name}"))
            .unwrap_or_else(|| panic!("no Secret {name}"))
            .clone()
    };
    let decode = |value: &Value| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap();
        String::from_utf8(bytes).unwrap()
    };
    let pem_der = |pem: &str| {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    };
    let tls = secret(TLS_SECRET);
    let ca = secret("finalizer-guard-ca");
    assert_eq!(tls["type"], "kubernetes.io/tls");
    assert_eq!(tls["data"]["ca.crt"], ca["data"]["tls.crt"]);
    let ca_pem = decode(&ca["data"]["tls.crt"]);
    let cert_pem = decode(&tls["data"]["tls.crt"]);
    assert!(decode(&tls["data"]["tls.key"]).contains("PRIVATE KEY"));

    let ca_der = pem_der(&ca_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert!(ca_cert.is_ca());
    let cert_der = pem_der(&cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der).unwrap();
    assert_eq!(cert.issuer(), ca_cert.subject(), "issued by the CA");
    let san = cert
        .subject_alternative_name()
        .unwrap()
        .expect("a subjectAltName");
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &san.value.general_names {
        match name {
            x509_parser::extensions::GeneralName::DNSName(n) => dns.push(n.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(ip) => ips.push(ip.to_vec()),
            _ => {}
        }
    }
    assert_eq!(
        dns,
        finalizer_guard::pki::certificates::service_names(SERVICE, NAMESPACE)
    );
    assert_eq!(ips, [vec![127u8, 0, 0, 1]]);

    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    assert_eq!(
        text(webhook, "/webhooks/0/clientConfig/caBundle"),
        finalizer_guard::pki::certificates::ca_bundle(&ca_pem),
        "the caBundle is the CA that issued the serving certificate"
    );
    assert_eq!(
        text(
            &tls,
            "/metadata/annotations/finalizer-guard.io~1certificate-names"
        ),
        r#"{"dns":["finalizer-guard","finalizer-guard.finalizer-guard","finalizer-guard.finalizer-guard.svc","finalizer-guard.finalizer-guard.svc.cluster.local"],"ip":["127.0.0.1"]}"#
    );
}

/// The default certificates, `self`: what `helm template` renders is the
/// same bytes every time (no `lookup`, no generated key), the webhook
/// configuration carries no caBundle (the pods write it), the pods are told
/// their Secret and configuration in arguments `serve` takes, and the RBAC
/// is get and update on that Secret and get and patch on that
/// configuration, by name, and nothing else.
#[test]
#[ignore = "needs helm (FG_HELM): see .ci/run"]
fn self_managed_certificates_render_the_same_bytes_and_the_least_rbac() {
    let helm = helm();
    let chart = chart();
    let args = [
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--set",
        "events.enabled=false",
        "--set",
        "certificates.self.extraIPAddresses={127.0.0.1}",
    ];
    let (first, second) = (run_helm(&helm, &args), run_helm(&helm, &args));
    assert!(first.ok, "{}", first.stderr);
    assert_eq!(first.stdout, second.stdout, "helm template twice");
    let rendered = documents(&first.stdout).unwrap();
    check_all(&rendered);
    assert!(!first.stdout.contains("PRIVATE KEY"));

    let webhook = find(&rendered, "ValidatingWebhookConfiguration finalizer-guard").unwrap();
    assert!(
        webhook
            .pointer("/webhooks/0/clientConfig/caBundle")
            .is_none()
    );
    let secret = find(
        &rendered,
        &format!("Secret {NAMESPACE}/finalizer-guard-certificates"),
    )
    .expect("the certificates Secret, empty");
    assert!(secret.get("data").is_none() && secret.get("stringData").is_none());
    assert!(find(&rendered, &format!("Secret {NAMESPACE}/{TLS_SECRET}")).is_none());

    let role: Role = serde_json::from_value(
        find(
            &rendered,
            &format!("Role {NAMESPACE}/finalizer-guard-certificates"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(role.rules.unwrap()).unwrap(),
        json!([{"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["finalizer-guard-certificates"], "verbs": ["get", "update"]}])
    );
    let cluster_role: ClusterRole = serde_json::from_value(
        find(&rendered, "ClusterRole finalizer-guard-certificates")
            .unwrap()
            .clone(),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(cluster_role.rules.unwrap()).unwrap(),
        json!([{"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "resourceNames": ["finalizer-guard"], "verbs": ["get", "patch"]}])
    );
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        let id = match kind {
            "RoleBinding" => format!("{kind} {NAMESPACE}/finalizer-guard-certificates"),
            _ => format!("{kind} finalizer-guard-certificates"),
        };
        let binding = find(&rendered, &id).unwrap();
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "finalizer-guard", "namespace": NAMESPACE}])
        );
    }

    let deployment: Deployment = serde_json::from_value(
        find(
            &rendered,
            &format!("Deployment {NAMESPACE}/finalizer-guard"),
        )
        .unwrap()
        .clone(),
    )
    .unwrap();
    let pod = deployment.spec.template.spec.unwrap();
    assert_eq!(
        pod.automount_service_account_token,
        Some(true),
        "the pods read their Secret through the API, Events or not"
    );
    assert!(
        pod.volumes.iter().flatten().all(|v| v.secret.is_none()),
        "no certificate Secret is mounted"
    );
    let args = pod.containers[0].args.clone().unwrap();
    let parsed = Cli::try_parse_from(
        std::iter::once("finalizer-guard").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("serve refuses the container's arguments: {e}"));
    let cli::Command::Serve(serve) = parsed.command else {
        panic!("not serve");
    };
    let config = serve.into_config();
    assert!(config.tls.is_none());
    let settings = config.self_managed.expect("self-managed certificates");
    assert_eq!(
        (settings.namespace.as_str(), settings.secret.as_str()),
        (NAMESPACE, "finalizer-guard-certificates")
    );
    assert_eq!(settings.webhook_configuration, "finalizer-guard");
    assert_eq!(settings.webhook_names, [text(webhook, "/webhooks/0/name")]);
    let mut names = finalizer_guard::pki::certificates::service_names(SERVICE, NAMESPACE);
    names.sort();
    let mut dns = settings.names.dns.clone();
    dns.sort();
    assert_eq!(dns, names);
    assert_eq!(
        settings.names.ips,
        ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    settings.timing.check().unwrap();
}
