//! `helm template | kubectl apply`, as Argo CD installs: serving, and its
//! own certificates rotating under writes, with lifetimes of seconds.

use super::*;

/// Short lifetimes for `certificates.self` (tests/e2e/certificates.rs'
/// timing, which the schema and `serve` take): a serving certificate every
/// 20 s; a new CA 60 s after the first, served 10 s later, the old one
/// dropped 10 s after that.
const SHORT_CERTIFICATES: [&str; 5] = [
    "certificates.self.validity=40s",
    "certificates.self.renewBefore=20s",
    "certificates.self.caValidity=120s",
    "certificates.self.caRenewBefore=60s",
    "certificates.self.caGrace=10s",
];
/// How long the writes run while the certificates rotate, seconds.
const ROTATION_SECONDS: u64 = 100;

/// What the pods' certificates Secret and the caBundle were, sampled while
/// writes ran.
#[derive(Debug, Default)]
struct Rotation {
    samples: u64,
    serving: std::collections::BTreeSet<String>,
    cas: std::collections::BTreeSet<String>,
    /// `next` (a new CA in the caBundle), `switched` (served), `dropped`
    /// (the previous CA out of it), in the order first seen.
    steps: Vec<&'static str>,
    had_next: bool,
    had_previous: bool,
    /// Removals the policy allows, judged by the webhook and let through.
    allowed: u64,
    unexpected: Vec<String>,
}

impl Rotation {
    /// One sample: the Secret, then the webhook configuration's caBundle,
    /// which must hold the Secret's CA (the pods add a CA to the caBundle
    /// before they serve a certificate of it, and drop it only once it is
    /// the previous one).
    fn sample(&mut self, at: Duration, secret: &Value, config: &Value) {
        self.samples += 1;
        let at = at.as_secs_f64();
        let data = &secret["data"];
        let (Some(tls), Some(ca)) = (data["tls.crt"].as_str(), data["ca.crt"].as_str()) else {
            self.unexpected.push(format!(
                "{at:.1} s: the Secret has no tls.crt or ca.crt: {data}"
            ));
            return;
        };
        self.serving.insert(tls.to_string());
        self.cas.insert(ca.to_string());
        let has_next = !data["next-ca.crt"].is_null();
        let has_previous = !data["previous-ca.crt"].is_null();
        for (step, seen) in [
            ("next", has_next && !self.had_next),
            ("switched", self.had_next && !has_next),
            ("dropped", self.had_previous && !has_previous),
        ] {
            if seen && !self.steps.contains(&step) {
                self.steps.push(step);
            }
        }
        (self.had_next, self.had_previous) = (has_next, has_previous);
        let pem = |b64: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        let bundle = config["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .map(pem)
            .unwrap_or_default();
        if !bundle.contains(pem(ca).trim()) {
            self.unexpected
                .push(format!("{at:.1} s: the caBundle lacks the Secret's CA"));
        }
    }
}

/// Seconds from now to the end of a certificate given base64-encoded PEM,
/// as a Secret's data holds it; 0 when it does not parse.
fn seconds_left(b64: &str) -> i64 {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_default();
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(&pem) else {
        return 0;
    };
    let Ok(cert) = pem.parse_x509() else {
        return 0;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    cert.validity().not_after.timestamp() - now
}

/// The release rendered and deleted by its manifest: should the scenario
/// fail half-way, `kubectl delete -f` of it, so that the next scenario's
/// `helm install` finds none of its objects.
struct DeleteOnPanic<'a>(&'a Nodes, &'a str);

impl Drop for DeleteOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.kubectl(
                "admin",
                &["delete", "-f", "-", "--ignore-not-found"],
                Some(self.1),
            );
        }
    }
}

/// The chart as Argo CD applies it: `helm template` with no cluster to ask
/// (so no `lookup`; nothing is random either: two renders are the same
/// bytes), piped to `kubectl apply -f -` (client-side, Argo CD's default)
/// into the namespace the README makes; no Helm release, no hook run as a
/// hook. Enforcing, the developers' rule, and certificate lifetimes short
/// enough to renew and rotate within the writes. The pods fill the empty
/// Secret and the caBundle; the policy check's Job, an ordinary Job under
/// `kubectl apply`, runs once beside them and never again (a render that
/// changes its pod is refused: a Job's template is immutable). Then 100 s
/// of writes through
/// kube-apiserver and the Service (guarded strips denied, ordinary writes
/// and removals the rule allows let through) while the serving certificate
/// renews and the CA rotates, and a GitOps tool syncs the same manifest
/// again, server-side: no write refused, the caBundle always holding the
/// Secret's CA. `kubectl delete -f` of the manifest leaves nothing with the
/// release's label, the Secret the pods filled included.
#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn helm_template_piped_to_kubectl_apply_serves_and_rotates_its_own_certificates_under_writes() {
    let n = nodes();
    n.uninstalled();
    // The namespace as the README makes it: helm template creates none.
    let install = n.readme_namespace_and_install_args();
    let rule = developers_rule();
    let mut args: Vec<&str> = install[1..].iter().map(String::as_str).collect();
    args.extend(["--set", "policy.mode=enforce", "--set-json", &rule]);
    for value in SHORT_CERTIFICATES {
        args.extend(["--set", value]);
    }
    let manifest = n.render(&args);
    assert_eq!(
        n.render(&args),
        manifest,
        "helm template renders the same bytes"
    );
    let objects = manifest_objects(&manifest);
    // Helm's hooks are only annotations to kubectl: the policy check is all
    // that has any, and applied, it is an ordinary ConfigMap and Job.
    let check = format!("{FULLNAME}-policy-check");
    let hooks: Vec<(&str, &str)> = objects
        .iter()
        .filter(|o| !o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(hooks, [("ConfigMap", check.as_str()), ("Job", &check)]);
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == FULLNAME)
        .expect("the webhook's Deployment");
    let serve = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    for flag in [
        "--certificate-validity",
        "--ca-grace",
        "--certificates-secret",
    ] {
        assert!(serve.contains(flag), "{serve}");
    }

    let start = Instant::now();
    n.kubectl("admin", &["apply", "-f", "-"], Some(&manifest))
        .ok();
    let _delete = DeleteOnPanic(&n, &manifest);
    n.wait_spread();
    let secret_name = format!("{FULLNAME}-certificates");
    let secret = || n.get(&["secret", &secret_name, "-n", NAMESPACE]);
    let config = || n.get(&["validatingwebhookconfiguration", FULLNAME]);
    wait_until("the pods' CA in the caBundle", 60, || {
        let ca = secret()["data"]["ca.crt"].clone();
        ca.is_string() && config()["webhooks"][0]["clientConfig"]["caBundle"] == ca
    });
    eprintln!(
        "nodes: helm template | kubectl apply: {:.1} s to two ready pods and the caBundle filled",
        start.elapsed().as_secs_f64()
    );
    // The CA is the pods' own, of the lifetimes rendered (120 s), not one
    // left by an earlier install's pods.
    let ca_ends_in = seconds_left(secret()["data"]["ca.crt"].as_str().unwrap_or(""));
    assert!(
        (1..=120).contains(&ca_ends_in),
        "the CA ends in {ca_ends_in} s, not within certificates.self.caValidity (120 s)"
    );
    let job = format!("job/{check}");
    wait_until("the policy check's Job complete", 180, || {
        n.get(&[&job, "-n", NAMESPACE])["status"]["succeeded"] == 1
    });
    // It ran once, with the first apply, and runs no more: a render that
    // changes its pod (here `policyCheck.strict`; an image tag does too) is
    // refused by kubectl apply, a Job's template being immutable.
    let mut strict = args.clone();
    strict.extend(["--set", "policyCheck.strict=true"]);
    let refused = n.kubectl(
        "admin",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&n.render(&strict)),
    );
    assert!(
        refused.code != 0
            && refused
                .stderr
                .contains(&format!("Job \"{check}\" is invalid"))
            && refused.stderr.contains("field is immutable"),
        "{refused:#?}"
    );

    let ns = "nodes-gitops";
    n.namespace(ns);
    let mut rotation = Rotation::default();
    let mut synced = None;
    let writes = under_writes(&n, ns, 4, || {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(ROTATION_SECONDS) {
            let (s, c) = (secret(), config());
            rotation.sample(started.elapsed(), &s, &c);
            // alice, a developer, removes the CNI finalizer: judged by the
            // webhook, allowed by the rule.
            n.held(ns, "free", CNI);
            let run = n.strip("configmap", "free", ns);
            if run.code == 0 && !run.stderr.contains("Warning:") {
                rotation.allowed += 1;
            } else {
                rotation.unexpected.push(format!(
                    "{:.1} s: alice's allowed removal: {run:?}",
                    started.elapsed().as_secs_f64()
                ));
            }
            // A GitOps tool's sync, half-way: the same manifest, server-side.
            let at = started.elapsed();
            if synced.is_none() && at > Duration::from_secs(ROTATION_SECONDS / 2) {
                let run = n
                    .kubectl(
                        "admin",
                        &["apply", "--server-side", "-f", "-"],
                        Some(&manifest),
                    )
                    .ok();
                synced = Some(((at, started.elapsed() - at), run.stdout));
            }
        }
    });
    let ((synced_at, synced_in), synced) = synced.expect("the sync ran");
    let trail = n.audit_trail();
    let authorized = trail
        .records
        .iter()
        .filter(|r| r["name"] == "free" && r["namespace"] == ns && r["decision"] == "authorized")
        .count();
    eprintln!(
        "nodes: certificates rotating under writes for {ROTATION_SECONDS} s: {} guarded writes ({} refused with the webhook unavailable, {} otherwise), {} ordinary, {} removals allowed by the webhook ({authorized} audit records; {} records in all, {} bytes, read from {} log files); {} serving certificates, {} CAs, steps {:?}, in {} samples; synced again at {:.1} s (for {:.1} s); {}",
        writes.guarded,
        writes.unavailable,
        writes.other,
        writes.ordinary,
        rotation.allowed,
        trail.records.len(),
        trail.bytes,
        trail.files,
        rotation.serving.len(),
        rotation.cas.len(),
        rotation.steps,
        rotation.samples,
        synced_at.as_secs_f64(),
        synced_in.as_secs_f64(),
        writes.examples.join(" | ")
    );
    assert!(
        writes.guarded >= 100 && writes.ordinary >= 100,
        "the writes ran: {writes:?}"
    );
    assert_eq!(writes.unavailable, 0, "refused writes: {writes:?}");
    assert_eq!(writes.other, 0, "writes refused otherwise: {writes:?}");
    assert!(rotation.unexpected.is_empty(), "{:#?}", rotation.unexpected);
    assert!(rotation.allowed >= 20, "{rotation:?}");
    assert!(authorized as u64 >= rotation.allowed, "{rotation:?}");
    // The nodes' kubelets rotate at 1Mi (e2e/nodes.sh): the records above
    // were read across rotated files, not from one file per pod.
    assert!(
        trail.files > 2,
        "{} log files for two pods: the kubelet rotated none",
        trail.files
    );
    assert!(
        rotation.serving.len() >= 3,
        "two renewals at least: {rotation:?}"
    );
    assert!(rotation.cas.len() >= 2, "a CA rotation: {rotation:?}");
    for step in ["next", "switched", "dropped"] {
        assert!(rotation.steps.contains(&step), "{step}: {rotation:?}");
    }
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or("");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            synced.contains(&format!("/{name} serverside-applied"))
                || !["Secret", "ValidatingWebhookConfiguration"].contains(&kind),
            "{synced}"
        );
    }
    n.release_namespace(ns);

    // kubectl delete -f of the same manifest: nothing with the release's
    // label is left, the Secret the pods filled least of all.
    n.kubectl("admin", &["delete", "-f", "-", "--wait"], Some(&manifest))
        .ok();
    wait_until("nothing of the release left", 120, || {
        release_leftovers(&n, &objects).is_empty()
    });
    assert_ne!(
        n.admin(&["get", "secret", &secret_name, "-n", NAMESPACE])
            .code,
        0,
        "the certificates Secret is gone"
    );
}
