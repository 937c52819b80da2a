//! Writes through kube-apiserver as the scenarios make them: alice's
//! credentials, a client trusting the cluster's CA, writers running while a
//! disruption does, and the API server's clock.

use super::*;

/// What the writers saw during one disruption.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) guarded: u64,
    pub(crate) ordinary: u64,
    pub(crate) unavailable: u64,
    pub(crate) other: u64,
    pub(crate) examples: Vec<String>,
    /// Every write refused with the webhook unavailable: when, and what
    /// kube-apiserver said.
    pub(crate) refusals: Vec<(Instant, String)>,
}

/// A token and the API server's address, from a kubeconfig cluster.sh wrote.
pub(crate) fn credentials(dir: &Path, user: &str) -> (String, String) {
    let text = std::fs::read_to_string(dir.join(format!("{user}.kubeconfig"))).expect("kubeconfig");
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("{user}.kubeconfig has no {key}"))
            .trim()
            .to_string()
    };
    (field("server:"), field("token:"))
}

pub(crate) fn api_client(dir: &Path) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(dir.join("ca.crt")).expect("ca.crt");
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client")
}

/// Writers through kube-apiserver while `disrupt` runs: each repeats alice's
/// strip of its own held ConfigMap (guarded: the webhook must deny it) and
/// a label change (ordinary: the webhook is not called). A write that
/// failed because the webhook could not be reached counts as unavailable.
pub(crate) fn under_writes(n: &Nodes, ns: &str, writers: usize, disrupt: impl FnOnce()) -> Tally {
    let (server, token) = credentials(&n.dir, "alice");
    for w in 0..writers {
        n.held_configmap(ns, &format!("w{w}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let client = api_client(&n.dir);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (client, stop) = (client.clone(), stop.clone());
            let url = format!("{server}/api/v1/namespaces/{ns}/configmaps/w{w}");
            let token = token.clone();
            rt.spawn(async move {
                let mut tally = Tally::default();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let guarded = i % 2 == 1;
                    let body = if guarded {
                        STRIP.to_string()
                    } else {
                        json!({"metadata": {"labels": {"seq": i.to_string()}}}).to_string()
                    };
                    let sent = client
                        .patch(&url)
                        .bearer_auth(&token)
                        .header("content-type", "application/merge-patch+json")
                        .body(body)
                        .send()
                        .await;
                    let (status, text) = match sent {
                        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                        Err(e) => (0, e.to_string()),
                    };
                    let expected = if guarded {
                        status == 403 && text.contains("denied the request")
                    } else {
                        status == 200
                    };
                    if guarded {
                        tally.guarded += 1;
                    } else {
                        tally.ordinary += 1;
                    }
                    if !expected {
                        if text.contains("failed calling webhook") {
                            tally.unavailable += 1;
                            tally.refusals.push((Instant::now(), text.clone()));
                        } else {
                            tally.other += 1;
                        }
                        if tally.examples.len() < 3 {
                            tally.examples.push(format!("{status}: {text}"));
                        }
                    }
                }
                tally
            })
        })
        .collect();
    // Let the writers run before and after the disruption: the windows of
    // writes are what is tested, not waits for a condition.
    std::thread::sleep(Duration::from_secs(3));
    disrupt();
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    for task in tasks {
        let t = rt.block_on(task).expect("a writer");
        all.guarded += t.guarded;
        all.ordinary += t.ordinary;
        all.unavailable += t.unavailable;
        all.other += t.other;
        all.examples.extend(t.examples);
        all.refusals.extend(t.refusals);
    }
    all
}

pub(crate) fn repeats() -> usize {
    std::env::var("FG_NODES_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Seconds since the Unix epoch of an API server's timestamp
/// (`2026-11-27T12:00:00Z`).
pub(crate) fn server_seconds(at: &Value) -> i64 {
    let text = at.as_str().unwrap_or_else(|| panic!("no timestamp: {at}"));
    text.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .as_second()
}
