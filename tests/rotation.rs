//! Certificate rotation the way Kubernetes does it, under load.
//!
//! The serving pair sits in a folder laid out as kubelet lays out a mounted
//! Secret: a timestamped folder holding the files, a `..data` symlink to it,
//! and `tls.crt -> ..data/tls.crt`, `tls.key -> ..data/tls.key`. An update
//! writes a new timestamped folder and renames a `..data_tmp` symlink over
//! `..data`, atomically. While HTTPS clients send reviews (some on a new
//! connection per request, some on kept-alive HTTP/1.1 and HTTP/2
//! connections), the pair is swapped to a new CA's certificate, then to
//! broken pairs, then to a good one again:
//! - no request fails;
//! - every new connection made once the reload is counted presents the new
//!   certificate (each phase waits for the reload counter, never a fixed time);
//! - a mismatched pair and a truncated PEM are refused (counted in
//!   finalizer_guard_reloads_total{kind="certificate",outcome="failure"}),
//!   and the last good certificate stays in service.
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use finalizer_guard::pki::certificates::{self as certs, Bundle, CertificateAuthority};
use finalizer_guard::server;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How often the server re-reads the files here (2s by default in a cluster).
const RELOAD: Duration = Duration::from_millis(250);
/// How many requests on new connections each phase serves before the next change.
const PER_PHASE: usize = 20;
/// Not an assertion: only how long a wait for an event may hang before the
/// test gives up, far beyond any reload interval.
const HANG: Duration = Duration::from_secs(60);

/// A folder laid out as kubelet lays out a Secret volume.
struct SecretVolume {
    dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    fn new(dir: &Path, files: &[(&str, &str)]) -> SecretVolume {
        let mut volume = SecretVolume {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        volume.update(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
        }
        volume
    }

    /// What kubelet's atomic writer does: a new timestamped folder, a
    /// `..data_tmp` symlink to it renamed over `..data`, the old folder removed.
    fn update(&mut self, files: &[(&str, &str)]) {
        self.generation += 1;
        let folder = format!(
            "..2026_11_21_08_{:02}_00.{}",
            self.generation,
            100 + self.generation
        );
        let path = self.dir.join(&folder);
        std::fs::create_dir(&path).unwrap();
        for (name, content) in files {
            std::fs::write(path.join(name), content).unwrap();
        }
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&folder, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }

    /// Overwrites a file inside the current folder in place: what a writer
    /// that is not kubelet might do, and be caught halfway through.
    fn overwrite_in_place(&self, name: &str, content: &str) {
        std::fs::write(self.dir.join("..data").join(name), content).unwrap();
    }
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// An HTTPS client trusting the CAs in `ca_pem`, reaching the server under
/// the Service name; `fresh`: a new connection for every request.
fn client(ca_pem: &str, addr: std::net::SocketAddr, fresh: bool, alpn: &[u8]) -> reqwest::Client {
    let mut tls = common::tls_config(ca_pem.as_bytes(), &[alpn]);
    // kube-apiserver does not resume TLS sessions either: every new
    // connection is a full handshake that asks for the current certificate.
    tls.resumption = rustls::client::Resumption::disabled();
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .tls_info(true)
        .resolve(common::SERVICE_NAME, addr)
        .timeout(Duration::from_secs(10));
    if fresh {
        builder = builder.pool_max_idle_per_host(0);
    }
    builder.build().unwrap()
}

/// One request's outcome.
struct Sample {
    started: Instant,
    ok: bool,
    fresh: bool,
    /// The server certificate the connection presented.
    peer: Option<Vec<u8>>,
}

async fn send(client: &reqwest::Client, url: &str, body: &[u8]) -> (bool, Option<Vec<u8>>) {
    let response = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
    {
        Ok(response) => response,
        Err(e) => {
            eprintln!("request failed: {e:?}");
            return (false, None);
        }
    };
    let peer = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .map(<[u8]>::to_vec);
    let status = response.status();
    let answer: Option<Value> = response.json().await.ok();
    let ok = status == 200
        && answer
            .as_ref()
            .is_some_and(|a| a["response"]["allowed"].is_boolean());
    if !ok {
        eprintln!("request failed: HTTP {status}, {answer:?}");
    }
    (ok, peer)
}

async fn metric(admin: &str, name: &str, labels: &[&str]) -> u64 {
    let text = reqwest::get(format!("{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn reload_count(admin: &str, outcome: &str) -> u64 {
    let outcome = format!("outcome=\"{outcome}\"");
    metric(
        admin,
        "finalizer_guard_reloads_total{",
        &["kind=\"certificate\"", &outcome],
    )
    .await
}

/// Waits until the reload counter for `outcome` passes `before`; returns
/// the count and when it was seen. From then on the change is in service.
async fn reloaded(admin: &str, outcome: &str, before: u64) -> (u64, Instant) {
    let what = format!("a {outcome} reload counted");
    common::wait::wait_for(&what, HANG, async || {
        let count = reload_count(admin, outcome).await;
        (count > before).then(|| (count, Instant::now()))
    })
    .await
}

/// Waits until `PER_PHASE` more requests on new connections have completed.
async fn serve_a_phase(fresh_done: &AtomicUsize) {
    let want = fresh_done.load(Ordering::Relaxed) + PER_PHASE;
    common::wait::wait_until(
        "the clients to complete a phase's requests",
        HANG,
        async || fresh_done.load(Ordering::Relaxed) >= want,
    )
    .await;
}

/// Requests on new connections that started within `window`.
fn fresh_within(samples: &[Sample], window: std::ops::Range<Instant>) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| s.fresh && window.contains(&s.started))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volume_swap_under_load_keeps_serving_and_refuses_broken_pairs() {
    common::install_provider();
    let names = certs::service_names("finalizer-guard", "finalizer-guard");
    let loopback = ["127.0.0.1".parse().unwrap()];
    let old_ca = CertificateAuthority::generate(1).unwrap();
    let new_ca = CertificateAuthority::generate(1).unwrap();
    let old: Bundle = old_ca.issue(&names, &loopback, 1).unwrap();
    let new: Bundle = new_ca.issue(&names, &loopback, 1).unwrap();
    let third: Bundle = new_ca.issue(&names, &loopback, 1).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let secret_dir = tmp.path().join("tls");
    std::fs::create_dir(&secret_dir).unwrap();
    let mut volume = SecretVolume::new(
        &secret_dir,
        &[("tls.crt", &old.cert_pem), ("tls.key", &old.key_pem)],
    );
    let mut config = common::config(tmp.path());
    config.tls = Some((secret_dir.join("tls.crt"), secret_dir.join("tls.key")));
    config.reload_interval = RELOAD;
    let handle = server::start(config).await.unwrap();
    let url = format!(
        "https://{}:{}/validate?timeout=5s",
        common::SERVICE_NAME,
        handle.addr.port()
    );
    let admin = format!("http://{}", handle.admin_addr);
    let failures_before = reload_count(&admin, "failure").await;
    let successes_before = reload_count(&admin, "success").await;

    // During a CA rotation the caBundle holds both CAs: the clients trust both.
    let both = format!("{}{}", old.ca_cert_pem, new.ca_cert_pem);
    let body = serde_json::to_vec(&common::strip("alice@example.com", json!({}))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let fresh_done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (fresh, alpn) in [
        (true, &b"http/1.1"[..]),
        (true, b"http/1.1"),
        (true, b"http/1.1"),
        (true, b"http/1.1"),
        (false, b"http/1.1"),
        (false, b"http/1.1"),
        (false, b"h2"),
    ] {
        let client = client(&both, handle.addr, fresh, alpn);
        let (url, body, stop) = (url.clone(), body.clone(), stop.clone());
        let fresh_done = fresh_done.clone();
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let (ok, peer) = send(&client, &url, &body).await;
                if fresh {
                    fresh_done.fetch_add(1, Ordering::Relaxed);
                }
                samples.push(Sample {
                    started,
                    ok,
                    fresh,
                    peer,
                });
            }
            samples
        }));
    }

    let began = Instant::now();
    serve_a_phase(&fresh_done).await;
    // 1. A new CA's certificate, as a Secret update writes it.
    let new_written = Instant::now();
    volume.update(&[("tls.crt", &new.cert_pem), ("tls.key", &new.key_pem)]);
    let (successes, new_in_service) = reloaded(&admin, "success", successes_before).await;
    serve_a_phase(&fresh_done).await;
    // 2. A mismatched pair: one certificate, another's key.
    volume.update(&[("tls.crt", &third.cert_pem), ("tls.key", &new.key_pem)]);
    let (failures, _) = reloaded(&admin, "failure", failures_before).await;
    serve_a_phase(&fresh_done).await;
    // 3. A half-written certificate, overwritten in place.
    let half = &third.cert_pem[..third.cert_pem.len() / 2];
    // The certificate first: no moment shows a valid pair.
    volume.overwrite_in_place("tls.crt", half);
    volume.overwrite_in_place("tls.key", &third.key_pem);
    reloaded(&admin, "failure", failures).await;
    serve_a_phase(&fresh_done).await;
    // 4. A good pair again.
    let third_written = Instant::now();
    volume.update(&[("tls.crt", &third.cert_pem), ("tls.key", &third.key_pem)]);
    let (_, third_in_service) = reloaded(&admin, "success", successes).await;
    serve_a_phase(&fresh_done).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for worker in workers {
        samples.extend(worker.await.unwrap());
    }
    let ended = Instant::now();

    let (old_der, new_der, third_der) =
        (der(&old.cert_pem), der(&new.cert_pem), der(&third.cert_pem));
    let failed = samples.iter().filter(|s| !s.ok).count();
    let fresh = samples.iter().filter(|s| s.fresh).count();
    let failures = reload_count(&admin, "failure").await - failures_before;
    let successes = reload_count(&admin, "success").await - successes_before;
    // Once a reload is counted, every new connection presents what it put
    // in service: the new certificate through the broken pairs (the last
    // good one stays), then the third.
    let on_new = fresh_within(&samples, new_in_service..third_written);
    let on_third = fresh_within(&samples, third_in_service..ended);
    let presenting = |set: &[&Sample], der: &[u8]| {
        set.iter()
            .filter(|s| s.peer.as_deref() == Some(der))
            .count()
    };
    let stale_old = samples
        .iter()
        .filter(|s| {
            s.fresh && s.started >= new_in_service && s.peer.as_deref() == Some(&old_der[..])
        })
        .count();
    let kept_alive_on_old = samples
        .iter()
        .filter(|s| {
            !s.fresh && s.started >= new_in_service && s.peer.as_deref() == Some(&old_der[..])
        })
        .count();

    println!(
        "rotation under load, reload interval {RELOAD:?}, {:.1}s:",
        began.elapsed().as_secs_f64()
    );
    println!(
        "  requests: {} ({} on a new connection each, {} on kept-alive HTTP/1.1 and HTTP/2), failed: {failed}",
        samples.len(),
        fresh,
        samples.len() - fresh
    );
    println!(
        "  the new pair counted as reloaded {:?} after the ..data swap, the third {:?} after its swap",
        new_in_service - new_written,
        third_in_service - third_written
    );
    println!(
        "  new connections after the new pair's reload, through the broken pairs: {}/{} presented it",
        presenting(&on_new, &new_der),
        on_new.len()
    );
    println!(
        "  new connections after the third pair's reload: {}/{} presented it",
        presenting(&on_third, &third_der),
        on_third.len()
    );
    println!("  reloads: {successes} successful, {failures} refused");
    println!(
        "  requests on connections opened before the swap, still served with the old certificate: {kept_alive_on_old}"
    );

    assert_eq!(failed, 0, "no request may fail during a rotation");
    assert!(samples.len() > 100, "too few requests to mean anything");
    assert!(on_new.len() >= 3 * PER_PHASE && on_third.len() >= PER_PHASE);
    assert_eq!(
        presenting(&on_new, &new_der),
        on_new.len(),
        "after the reload, new connections present the new certificate, and broken pairs leave it in service"
    );
    assert_eq!(
        presenting(&on_third, &third_der),
        on_third.len(),
        "after the reload, new connections present the third certificate"
    );
    assert_eq!(
        stale_old, 0,
        "a new connection got the old certificate after the swap"
    );
    assert!(
        failures >= 2,
        "the mismatched and the truncated pair are counted as failed reloads"
    );
    assert_eq!(successes, 2, "the new pair and the third pair");

    // A client that trusts only the new CA connects; one trusting only the
    // retired CA no longer can.
    let only_new = client(&new.ca_cert_pem, handle.addr, true, b"http/1.1");
    let (ok, peer) = send(&only_new, &url, &body).await;
    assert!(ok);
    assert_eq!(peer.as_deref(), Some(&third_der[..]));
    let only_old = client(&old.ca_cert_pem, handle.addr, true, b"http/1.1");
    assert!(only_old.post(&url).body(body.clone()).send().await.is_err());

    handle.shutdown().await;
}
