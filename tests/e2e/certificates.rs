//! Self-managed certificates (`serve --certificates-secret`) on the real
//! control plane: two replicas, no Secret to start with, the least RBAC the
//! chart grants (plus `create`, as there is no chart here to render the
//! Secret), and a write loop through kube-apiserver across serving
//! certificate renewals and a CA rotation, with no write refused for a
//! reason other than the webhook's denial.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{Env, Policy, bin, env, free_port, http_get, to_create_again, wait_until};
use crate::{STRIP, denied};

const NS: &str = "e2e-certs";
const ACCOUNT: &str = "fg-certs";
const SECRET: &str = "fg-certs-certificates";
const CONFIG: &str = "finalizer-guard-certs";
/// The shipped configuration of the harness, out of the way while this runs.
const SHIPPED: &str = crate::harness::CONFIG;

/// Short lifetimes, so that the loop sees renewals and a CA rotation: a
/// serving certificate every 20 s; a new CA 60 s after the first, served
/// 10 s later, the old one dropped 10 s after that.
const TIMING: [&str; 10] = [
    "--certificate-validity",
    "40s",
    "--certificate-renew-before",
    "20s",
    "--ca-validity",
    "120s",
    "--ca-renew-before",
    "60s",
    "--ca-grace",
    "10s",
];
const LOOP_SECONDS: u64 = 100;

/// One `serve` replica.
struct Replica {
    child: Child,
    port: u16,
    admin: u16,
    log: std::path::PathBuf,
}

impl Replica {
    fn start(env: &Env, name: &str, kubeconfig: &Path, policy: &Path, port: u16) -> Replica {
        Replica::draining_for(env, name, kubeconfig, policy, port, "0s")
    }

    /// A replica whose drain (`--shutdown-delay`) lasts `delay`.
    fn draining_for(
        env: &Env,
        name: &str,
        kubeconfig: &Path,
        policy: &Path,
        port: u16,
        delay: &str,
    ) -> Replica {
        let admin = free_port();
        let log = env.work.join(format!("certs-{name}.log"));
        let out = fs::File::create(env.work.join(format!("certs-{name}.audit.jsonl"))).unwrap();
        let child = Command::new(bin())
            .arg("serve")
            .arg("--policy")
            .arg(policy)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--events", "false"])
            .args(["--certificates-secret", &format!("{NS}/{SECRET}")])
            .args(["--webhook-configuration", CONFIG])
            .args(["--certificate-ip", "127.0.0.1"])
            .args(TIMING)
            .args(["--reload-interval", "500ms", "--shutdown-delay", delay])
            .args(["--log-format", "json"])
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let replica = Replica {
            child,
            port,
            admin,
            log,
        };
        wait_until(&format!("replica {name} to be ready"), 30, || {
            http_get(replica.admin, "/readyz").is_some()
        });
        replica
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The harness's own webhook configuration, put back however this ends.
struct Shipped<'a>(&'a crate::harness::Cluster, Value);

impl Drop for Shipped<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .admin(&["delete", "validatingwebhookconfiguration", CONFIG]);
        self.0
            .kubectl_in("admin", &["create", "-f", "-"], Some(&self.1.to_string()));
    }
}

/// A TCP proxy that hands connections to the replicas in turn, as a
/// Service would: kube-apiserver's calls reach both.
fn round_robin(ports: [u16; 2]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let turn = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let backend = ports[turn.fetch_add(1, Ordering::Relaxed) % 2];
            let Ok(server) = TcpStream::connect(("127.0.0.1", backend)) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
            pipe(server, client);
        }
    });
    port
}

/// The certificate the webhook port serves (DER), verified against `bundle`
/// (PEM) for 127.0.0.1: `Err` when the handshake fails.
fn served(port: u16, bundle: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while connection.is_handshaking() {
        connection
            .complete_io(&mut tcp)
            .map_err(|e| e.to_string())?;
    }
    Ok(connection.peer_certificates().ok_or("no certificate")?[0]
        .as_ref()
        .to_vec())
}

fn der(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem)
        .unwrap()
        .as_ref()
        .to_vec()
}

/// The Secret's keys, decoded.
fn secret_data(c: &crate::harness::Cluster) -> Option<std::collections::BTreeMap<String, Vec<u8>>> {
    use base64::Engine;
    let secret = c.get(&["secret", SECRET, "-n", NS])?;
    Some(
        secret["data"]
            .as_object()?
            .iter()
            .map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap())
                    .unwrap();
                (k.clone(), bytes)
            })
            .collect(),
    )
}

/// The caBundle of the webhook configuration, decoded.
fn ca_bundle(c: &crate::harness::Cluster) -> Vec<u8> {
    use base64::Engine;
    let config = c.get(&["validatingwebhookconfiguration", CONFIG]).unwrap();
    config["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn self_managed_certificates_rotate_under_load_with_no_refused_write() {
    let env = env();
    let c = &env.cluster;
    // Only this test's configuration judges: the shipped one, set aside,
    // comes back however the test ends.
    let mut shipped = c.get(&["validatingwebhookconfiguration", SHIPPED]).unwrap();
    to_create_again(&mut shipped);
    let mut config = shipped.clone();
    config["metadata"] = json!({"name": CONFIG});
    let _restore = Shipped(c, shipped);
    c.admin(&["delete", "validatingwebhookconfiguration", SHIPPED])
        .ok();

    clean(c);
    c.namespace(NS);

    // The least RBAC, as the chart grants it, plus create (no chart renders
    // the Secret here).
    c.admin(&["create", "serviceaccount", ACCOUNT, "-n", NS])
        .ok();
    let role = |verbs: &[&str]| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "fg-certs", "namespace": NS},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": verbs},
            ],
        })
    };
    let cluster_role = |verbs: &[&str]| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "fg-certs"},
            "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "resourceNames": [CONFIG], "verbs": verbs}],
        })
    };
    c.apply(&role(&["get", "update"]));
    c.apply(&cluster_role(&["get", "patch"]));
    let subject = json!([{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}]);
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "fg-certs", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fg-certs"},
        "subjects": subject,
    }));
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "fg-certs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fg-certs"},
        "subjects": subject,
    }));
    let kubeconfig = c.token_kubeconfig(ACCOUNT, NS, &env.work.join("certs-sa.kubeconfig"));

    // The objects the loop writes: one finalizer alice may remove, one she may not.
    let policy_path = env.work.join("certs-policy.yaml");
    fs::write(
        &policy_path,
        env.policy(Policy {
            rules: vec![
                json!({"name": "certs-e2e", "finalizers": ["example.com/free"],
                "users": ["alice"], "namespaces": [NS]}),
            ],
            ..Policy::default()
        }),
    )
    .unwrap();
    for (name, finalizer) in [("held", "example.com/held"), ("free", "example.com/free")] {
        c.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "finalizers": [finalizer]},
        }));
    }

    // Replica a starts with no Secret: it creates it, and the caBundle.
    assert!(secret_data(c).is_none());
    let a_port = free_port();
    let b_port = free_port();
    let proxy_port = round_robin([a_port, b_port]);
    config["webhooks"][0]["clientConfig"] =
        json!({"url": format!("https://127.0.0.1:{proxy_port}/validate")});
    config["webhooks"][0]["failurePolicy"] = json!("Fail");
    c.apply(&config);
    assert!(ca_bundle(c).is_empty());
    let a = Replica::start(&env, "a", &kubeconfig, &policy_path, a_port);
    let data = secret_data(c).expect("replica a created the Secret");
    assert_eq!(
        ca_bundle(c),
        data["ca.crt"],
        "the caBundle is the Secret's CA"
    );
    let b = Replica::start(&env, "b", &kubeconfig, &policy_path, b_port);
    for r in [&a, &b] {
        assert_eq!(
            served(r.port, &data["ca.crt"]).unwrap(),
            der(&data["tls.crt"])
        );
    }
    let strip = c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ],
    );
    strip.refused(&denied());

    // The loop: allowed and denied writes through kube-apiserver, while
    // both replicas renew and rotate.
    let alice = c.kubeconfig("alice");
    let admin = c.kubeconfig("admin");
    let outcome = write_loop(&alice, &admin, [a.port, b.port]);
    eprintln!(
        "certificates: {} allowed, {} denied, {} serving certificates, {} CAs, {} samples where the replicas differed",
        outcome.allowed,
        outcome.denied,
        outcome.serving.len(),
        outcome.cas.len(),
        outcome.differed
    );
    assert!(outcome.unexpected.is_empty(), "{:#?}", outcome.unexpected);
    assert!(
        outcome.allowed >= 100 && outcome.denied >= 100,
        "{outcome:?}"
    );
    assert!(
        outcome.serving.len() >= 3,
        "two renewals at least: {outcome:?}"
    );
    assert!(outcome.cas.len() >= 2, "a CA rotation: {outcome:?}");
    assert!(outcome.steps.contains(&"switched"), "{outcome:?}");
    assert!(outcome.steps.contains(&"dropped"), "{outcome:?}");
    assert!(
        outcome.differed * 10 <= outcome.samples,
        "the replicas serve the Secret's certificate: {outcome:?}"
    );
    for r in [&a, &b] {
        let log = r.log();
        assert!(!log.contains("\"level\":\"ERROR\""), "{log}");
    }

    // Bad input: the Role loses `update`. The next renewal is refused; the
    // error names the verb and the Secret; both keep serving.
    c.apply(&role(&["get"]));
    wait_until("replica a to say it may not update the Secret", 60, || {
        a.log().contains(&format!(
            "forbidden: the webhook's ServiceAccount may not update secret {NS}/{SECRET}"
        ))
    });
    let data = secret_data(c).unwrap();
    for r in [&a, &b] {
        assert_eq!(
            served(r.port, &ca_bundle(c)).unwrap(),
            der(&data["tls.crt"])
        );
    }
    c.kubectl(
        "alice",
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ],
    )
    .refused(&denied());
    // And the ClusterRole loses `patch`, with the caBundle gone.
    c.apply(&cluster_role(&["get"]));
    c.admin(&[
        "patch",
        "validatingwebhookconfiguration",
        CONFIG,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]"#,
    ])
    .ok();
    wait_until(
        "replica b to say it may not patch the configuration",
        30,
        || {
            b.log().contains(&format!(
            "forbidden: the webhook's ServiceAccount may not patch validatingwebhookconfiguration {CONFIG}"
        ))
        },
    );
    // Granted again, it recovers by itself.
    c.apply(&role(&["get", "update"]));
    c.apply(&cluster_role(&["get", "patch"]));
    wait_until("the caBundle written again", 30, || {
        !ca_bundle(c).is_empty()
    });

    // A draining replica leaves the Secret to the replicas that stay: told
    // to stop, it serves through its delay, but re-creates no Secret
    // deleted under it (a pod of an uninstalled release would otherwise
    // fill the next install's).
    drop(b);
    let d = Replica::draining_for(&env, "d", &kubeconfig, &policy_path, free_port(), "20s");
    let bundle = ca_bundle(c);
    let status = Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until("replica d to drain (unready)", 10, || {
        http_get(d.admin, "/readyz").is_none()
    });
    drop(a);
    c.admin(&["delete", "secret", SECRET, "-n", NS]).ok();
    // Six of its reload intervals: the window in which nothing may
    // re-create the Secret is what is checked, not a wait for a condition.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        secret_data(c).is_none(),
        "a draining replica re-created the Secret: {}",
        d.log()
    );
    assert!(served(d.port, &bundle).is_ok(), "it serves while it drains");
    assert!(
        d.log()
            .contains("draining: the certificates Secret is left to the pods that stay"),
        "{}",
        d.log()
    );

    drop(d);
    clean(c);
}

/// What an earlier run left, gone: with no webhook configuration judging
/// (this test's deleted, the shipped one set aside), the finalizers
/// stripped, the namespace and the ClusterRole deleted.
fn clean(c: &crate::harness::Cluster) {
    c.admin(&[
        "delete",
        "validatingwebhookconfiguration",
        CONFIG,
        "--ignore-not-found",
    ])
    .ok();
    for name in ["held", "free"] {
        let _ = c.admin(&[
            "patch",
            "configmap",
            name,
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ]);
    }
    c.admin(&[
        "delete",
        "namespace",
        NS,
        "--ignore-not-found",
        "--timeout=120s",
    ])
    .ok();
    c.admin(&[
        "delete",
        "clusterrolebinding,clusterrole",
        "fg-certs",
        "--ignore-not-found",
    ])
    .ok();
}

#[derive(Debug, Default)]
struct Outcome {
    allowed: usize,
    denied: usize,
    unexpected: Vec<String>,
    /// Distinct serving certificates and CAs the Secret held.
    serving: std::collections::BTreeSet<Vec<u8>>,
    cas: std::collections::BTreeSet<Vec<u8>>,
    /// CA rotation steps seen in the Secret.
    steps: Vec<&'static str>,
    /// Samples where a replica served other than the Secret's certificate
    /// (it reads the Secret every 500 ms), of all samples.
    differed: usize,
    samples: usize,
}

fn write_loop(alice: &Path, admin: &Path, replicas: [u16; 2]) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = |path: &Path| {
            let path = path.to_path_buf();
            async move {
                let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
                let config = kube::Config::from_custom_kubeconfig(
                    kubeconfig,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .unwrap();
                kube::Client::try_from(config).unwrap()
            }
        };
        let maps: Api<ConfigMap> = Api::namespaced(client(alice).await, NS);
        let secrets: Api<Secret> = Api::namespaced(client(admin).await, NS);
        let strip: Value = serde_json::from_str(STRIP).unwrap();
        let add = json!({"metadata": {"finalizers": ["example.com/free"]}});
        let params = PatchParams::default();
        let mut out = Outcome::default();
        let started = Instant::now();
        let mut had_next = false;
        let mut had_previous = false;
        while started.elapsed() < Duration::from_secs(LOOP_SECONDS) {
            let at = started.elapsed().as_secs_f32();
            match maps.patch("held", &params, &Patch::Merge(&strip)).await {
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(&denied()) => {
                    out.denied += 1;
                }
                other => out
                    .unexpected
                    .push(format!("{at:.1}s strip held: {other:?}")),
            }
            if let Err(e) = maps.patch("free", &params, &Patch::Merge(&add)).await {
                out.unexpected.push(format!("{at:.1}s add free: {e:?}"));
            }
            match maps.patch("free", &params, &Patch::Merge(&strip)).await {
                Ok(_) => out.allowed += 1,
                Err(e) => out.unexpected.push(format!("{at:.1}s strip free: {e:?}")),
            }
            let secret = secrets.get(SECRET).await.unwrap();
            let data = secret.data.unwrap_or_default();
            let key = |k: &str| data.get(k).map(|b| b.0.clone());
            out.serving.insert(key("tls.crt").unwrap());
            out.cas.insert(key("ca.crt").unwrap());
            let has_next = key("next-ca.crt").is_some();
            let has_previous = key("previous-ca.crt").is_some();
            if had_next && !has_next && !out.steps.contains(&"switched") {
                out.steps.push("switched");
            }
            if had_previous && !has_previous && !out.steps.contains(&"dropped") {
                out.steps.push("dropped");
            }
            (had_next, had_previous) = (has_next, has_previous);
            let mut bundle = Vec::new();
            for k in ["previous-ca.crt", "ca.crt", "next-ca.crt"] {
                bundle.extend(key(k).unwrap_or_default());
            }
            let want = der(&key("tls.crt").unwrap());
            for port in replicas {
                out.samples += 1;
                let bundle = bundle.clone();
                let got = tokio::task::spawn_blocking(move || served(port, &bundle))
                    .await
                    .unwrap();
                match got {
                    Ok(got) if got == want => {}
                    Ok(_) => out.differed += 1,
                    Err(e) => out.unexpected.push(format!("{at:.1}s replica {port}: {e}")),
                }
            }
        }
        out
    })
}
