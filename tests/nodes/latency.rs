//! A measurement (docs/performance.md): a guarded write through the
//! Service and through a `url:` to the same image on loopback.

use super::*;

/// Sequential writes through kube-apiserver, each timed: milliseconds, sorted.
fn timed_writes(n: &Nodes, url: &str, body: &str, count: usize, want: u16) -> Vec<f64> {
    let (_, token) = credentials(&n.dir, "alice");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = api_client(&n.dir);
    let mut times: Vec<f64> = rt.block_on(async {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let start = Instant::now();
            let response = client
                .patch(url)
                .bearer_auth(&token)
                .header("content-type", "application/merge-patch+json")
                .body(body.to_string())
                .send()
                .await
                .expect("kube-apiserver answers");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            assert_eq!(status, want, "{text}");
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        times
    });
    times.sort_by(f64::total_cmp);
    times
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes, the image and podman: a measurement (docs/performance.md)"]
fn a_guarded_write_through_the_service_and_through_a_url() {
    let ns = "nodes-latency";
    let n = enforcing_in(ns);
    n.held_configmap(ns, "held");
    let (server, _) = credentials(&n.dir, "alice");
    let url = format!("{server}/api/v1/namespaces/{ns}/configmaps/held");
    let count: usize = std::env::var("FG_NODES_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let label = json!({"metadata": {"labels": {"touched": "yes"}}}).to_string();

    // The same image on this machine's loopback, reached by a url: clientConfig.
    let work = n.dir.join("latency");
    std::fs::create_dir_all(&work).expect("a folder");
    let policy = n.get(&["configmap", &format!("{FULLNAME}-policy"), "-n", NAMESPACE]);
    std::fs::write(
        work.join("policy.yaml"),
        policy["data"]["policy.yaml"].as_str().expect("policy.yaml"),
    )
    .expect("policy written");
    let mut certs = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    certs
        .args(["certs", "--ip", "127.0.0.1", "--out"])
        .arg(work.join("certs"));
    let ca_b64 = run(certs, None).ok().stdout.trim().to_string();
    let port = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        socket.local_addr().expect("an address").port()
    };
    let admin = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        socket.local_addr().expect("an address").port()
    };
    let conf = std::env::var("CONTAINERS_CONF").unwrap_or_default();
    let name = format!("fg-latency-{}", std::process::id());
    let mut podman = Command::new("podman");
    podman
        .env("CONTAINERS_CONF", &conf)
        .args([
            "run",
            "-d",
            "--rm",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
        ])
        .arg("-v")
        .arg(format!("{}:/etc/fg:ro", work.display()))
        .arg(n.image_ref())
        .args([
            "serve",
            "--policy",
            "/etc/fg/policy.yaml",
            "--tls-cert",
            "/etc/fg/certs/tls.crt",
            "--tls-key",
            "/etc/fg/certs/tls.key",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--events=false",
        ]);
    // The container's user (65532) reads what this test's user wrote.
    for file in ["certs/tls.crt", "certs/tls.key", "policy.yaml"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.join(file), std::fs::Permissions::from_mode(0o644))
            .expect("readable");
    }
    run(podman, None).ok();
    wait_until("the url webhook ready", 30, || {
        use std::io::{Read, Write};
        let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", admin)) else {
            return false;
        };
        let _ = tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    });
    struct Stop(String, String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("podman")
                .env("CONTAINERS_CONF", &self.1)
                .args(["stop", "-t", "5", &self.0])
                .output();
        }
    }
    let _stop = Stop(name, conf);

    let service =
        n.get(&["validatingwebhookconfiguration", FULLNAME])["webhooks"][0]["clientConfig"].clone();
    // The url webhook's reviews answered, from its /metrics.
    let url_reviews = || -> u64 {
        http_get(("127.0.0.1", admin), "/metrics")
            .expect("the url webhook's /metrics")
            .lines()
            .filter(|l| l.starts_with("finalizer_guard_reviews_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let point = |client: &Value| {
        let to_url = client.get("url").is_some();
        let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": client}]);
        n.admin(&[
            "patch",
            "validatingwebhookconfiguration",
            FULLNAME,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ])
        .ok();
        // The API server's webhook configuration cache catches up: a
        // guarded write reaches the webhook pointed at (the url one counts
        // it), or no longer reaches the url one.
        wait_until(
            if to_url {
                "kube-apiserver calling the url webhook"
            } else {
                "kube-apiserver calling the Service's webhook again"
            },
            60,
            || {
                let before = url_reviews();
                timed_writes(&n, &url, STRIP, 1, 403);
                (url_reviews() > before) == to_url
            },
        );
    };
    /// The Service clientConfig back, however the measurement ends.
    struct Restore<'a>(&'a Nodes, Value);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let patch =
                json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": self.1}]);
            self.0.admin(&[
                "patch",
                "validatingwebhookconfiguration",
                FULLNAME,
                "--type",
                "json",
                "-p",
                &patch.to_string(),
            ]);
        }
    }
    let _restore = Restore(&n, service.clone());
    let mut rows = Vec::new();
    for round in 0..2 {
        point(&service);
        timed_writes(&n, &url, STRIP, 20, 403);
        rows.push((
            format!("Service (round {round})"),
            timed_writes(&n, &url, STRIP, count, 403),
        ));
        point(&json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_b64}));
        timed_writes(&n, &url, STRIP, 20, 403);
        rows.push((
            format!("url (round {round})"),
            timed_writes(&n, &url, STRIP, count, 403),
        ));
    }
    point(&service);
    rows.push((
        "label write, no webhook call".to_string(),
        timed_writes(&n, &url, &label, count, 200),
    ));
    for (what, times) in &rows {
        eprintln!(
            "nodes: latency {what}: {} writes, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms",
            times.len(),
            quantile(times, 0.5),
            quantile(times, 0.9),
            quantile(times, 0.99)
        );
    }
    n.release_namespace(ns);
}
