//! Disruptions under writes: an upgrade, a drain, a SIGKILLed container;
//! no write refused but for the SIGKILL's own, timed by the endpoints.

use super::*;

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn upgrade_drain_and_a_killed_container_refuse_no_write() {
    let n = nodes();
    let next = split_image(&std::env::var("FG_IMAGE_NEXT").expect(
        "FG_IMAGE_NEXT is not set: the same image under another tag, in the registry or imported into the nodes",
    ));
    n.enforcing();
    let ns = "nodes-disruptions";
    n.namespace(ns);
    let mut report = Vec::new();
    let mut kills: Vec<KillTimes> = Vec::new();
    for round in 0..repeats() {
        // helm upgrade to another image tag: a rolling update of both pods.
        let tag = if round % 2 == 0 { &next.1 } else { &n.image.1 };
        let upgrade = under_writes(&n, ns, 4, || n.upgrade(&format!("image.tag={tag}")));
        n.wait_spread();
        report.push(("helm upgrade", upgrade));

        // kubectl drain of the node of one webhook pod: evicted through the PDB.
        let drain = under_writes(&n, ns, 4, || {
            n.admin(&[
                "drain",
                "node-b",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout",
                "180s",
            ])
            .ok();
            wait_until("both webhook pods ready again", 180, || {
                n.webhook_pods().iter().filter(|p| p.2).count() == 2
            });
        });
        n.admin(&["uncordon", "node-b"]).ok();
        // Back to one pod per node for what follows.
        n.admin(&[
            "rollout",
            "restart",
            "deployment",
            FULLNAME,
            "-n",
            NAMESPACE,
        ])
        .ok();
        n.admin(&[
            "rollout",
            "status",
            "deployment",
            FULLNAME,
            "-n",
            NAMESPACE,
            "--timeout",
            "180s",
        ])
        .ok();
        n.wait_spread();
        report.push(("kubectl drain", drain));

        // A webhook container killed (SIGKILL): the kubelet restarts it.
        let mut times = None;
        let tally = under_writes(&n, ns, 4, || {
            let pods = n.webhook_pods();
            let (name, node, _, id) = pods
                .iter()
                .find(|p| p.1 == "node-b")
                .expect("a pod on node-b");
            let pod = n.get(&["pod", name, "-n", NAMESPACE]);
            let ip = pod["status"]["podIP"]
                .as_str()
                .expect("a pod IP")
                .to_string();
            let endpoints = EndpointWatch::start(&n, &ip);
            // containerd's runc shim keeps a runc root per containerd namespace.
            let root = n.dir.join(format!("nodes/{node}/runc/k8s.io"));
            let mut cmd = Command::new("runc");
            cmd.arg("--root").arg(&root).args(["kill", id, "KILL"]);
            let at = Instant::now();
            let killed = run(cmd, None);
            assert_eq!(
                killed.code, 0,
                "runc kill of {name}'s container: {killed:#?}"
            );
            wait_until("the killed container restarted and ready", 120, || {
                let pods = n.webhook_pods();
                pods.iter().any(|p| &p.0 == name && p.2 && &p.3 != id)
            });
            times = Some(endpoints.stop(ip, at));
        });
        let mut times: KillTimes = times.expect("the kill ran");
        times.classes = tally
            .refusals
            .iter()
            .map(|(when, message)| {
                let after = when.saturating_duration_since(times.killed);
                (
                    sigkill_class(message, &times, after),
                    after,
                    message.clone(),
                )
            })
            .collect();
        kills.push(times);
        report.push(("container SIGKILL", tally));
    }
    for (what, t) in &report {
        eprintln!(
            "nodes: {what}: {} of {} guarded writes and {} ordinary ones failed with the webhook unavailable, {} otherwise; {}",
            t.unavailable,
            t.guarded,
            t.ordinary,
            t.other,
            t.examples.join(" | ")
        );
    }
    for (round, k) in kills.iter().enumerate() {
        let ms = |d: Option<Duration>| {
            d.map_or("never seen".to_string(), |d| {
                format!("{} ms", d.as_millis())
            })
        };
        let of = |class: SigkillClass| {
            let at: Vec<String> = k
                .classes
                .iter()
                .filter(|c| c.0 == class)
                .map(|c| format!("{} ms", c.1.as_millis()))
                .collect();
            format!("{} [{}]", at.len(), at.join(", "))
        };
        eprintln!(
            "nodes: SIGKILL round {round}: {} listed not ready {} after the kill, ready again {}; refused in flight (reset, broken pipe, EOF, closed): {}; refused at connect: {}",
            k.address,
            ms(k.not_ready),
            ms(k.ready_again),
            of(SigkillClass::InFlight),
            of(SigkillClass::AtConnect),
        );
    }
    n.release_namespace(ns);
    for (what, t) in &report {
        assert!(
            t.guarded > 0 && t.ordinary > 0,
            "{what}: no writes ran: {t:?}"
        );
        assert_eq!(t.other, 0, "{what}: writes refused otherwise: {t:?}");
        if *what != "container SIGKILL" {
            assert_eq!(t.unavailable, 0, "{what}: refused writes: {t:?}");
        }
    }
    // A SIGKILLed process drains nothing: the calls it was answering, and
    // those written to its kept-alive connections, are reset (in flight);
    // and until the kubelet has seen it die and the endpoints drop it, a
    // call kube-apiserver sends to its address is refused at connect.
    // kube-apiserver retries no admission call (docs/performance.md). Those,
    // and only those, are allowed here; they are counted above.
    for k in &kills {
        for (class, after, message) in &k.classes {
            assert_ne!(
                *class,
                SigkillClass::Other,
                "a write refused other than by the killed container ({}), {} ms after the kill: {message}",
                k.address,
                after.as_millis()
            );
        }
    }
}

/// Why a write failed while a webhook container was SIGKILLed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigkillClass {
    /// On a connection the killed process held: reset, broken pipe, EOF
    /// (the connection closed before an answer), a connection closed under
    /// the call.
    InFlight,
    /// A new connection to the dead address, refused: the endpoints still
    /// listed it.
    AtConnect,
    /// Anything else: not allowed.
    Other,
}

/// `message`'s class, `after` the kill. Go's client names no address when
/// the connection closed before an answer (`EOF`; on a kept-alive HTTP/1.1
/// connection taken from the pool, `server closed idle connection`: the
/// killed process's sockets closed as the call was written) or was closed
/// under the call (`use of closed network connection`): those are counted
/// in flight while the killed pod was still listed ready, and not after.
fn sigkill_class(message: &str, times: &KillTimes, after: Duration) -> SigkillClass {
    let ours = message.contains(&times.address);
    let listed = times.not_ready.is_none_or(|d| after <= d);
    let in_flight = (ours
        && (message.contains("connection reset by peer")
            || message.contains("write: broken pipe")))
        || ((message.contains(": EOF")
            || message.contains(": use of closed network connection")
            || message.contains(": http: server closed idle connection"))
            && (ours || listed));
    if ours && message.contains("connect: connection refused") {
        SigkillClass::AtConnect
    } else if in_flight {
        SigkillClass::InFlight
    } else {
        SigkillClass::Other
    }
}

/// When a killed webhook pod's address left the Service's EndpointSlices'
/// ready endpoints, and came back, counted from the kill; and the refused
/// writes of that round, by class.
struct KillTimes {
    address: String,
    killed: Instant,
    not_ready: Option<Duration>,
    ready_again: Option<Duration>,
    classes: Vec<(SigkillClass, Duration, String)>,
}

/// Polls the webhook Service's EndpointSlices (every 20 ms, through
/// kube-apiserver) for one pod IP's `ready` condition.
struct EndpointWatch {
    stop: Arc<AtomicBool>,
    polled: std::thread::JoinHandle<Vec<(Instant, bool)>>,
}

impl EndpointWatch {
    fn start(n: &Nodes, ip: &str) -> EndpointWatch {
        let (server, token) = credentials(&n.dir, "admin");
        let url = format!(
            "{server}/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices?labelSelector=kubernetes.io/service-name={FULLNAME}"
        );
        let client = api_client(&n.dir);
        let stop = Arc::new(AtomicBool::new(false));
        let (ip, done) = (ip.to_string(), stop.clone());
        let polled = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let mut seen: Vec<(Instant, bool)> = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let slices: Option<Value> =
                        match client.get(&url).bearer_auth(&token).send().await {
                            Ok(r) => r.json().await.ok(),
                            Err(_) => None,
                        };
                    if let Some(slices) = slices {
                        let ready = slices["items"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
                            .any(|e| {
                                e["addresses"]
                                    .as_array()
                                    .is_some_and(|a| a.iter().any(|a| a == ip.as_str()))
                                    && e["conditions"]["ready"] == true
                            });
                        if seen.last().is_none_or(|l| l.1 != ready) {
                            seen.push((Instant::now(), ready));
                        }
                    }
                    // The sampling pace of a record of changes, kept until stopped: not
                    // a wait for a condition.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                seen
            })
        });
        EndpointWatch { stop, polled }
    }

    fn stop(self, ip: String, killed: Instant) -> KillTimes {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.polled.join().expect("the EndpointSlice poller");
        let after = |ready: bool| {
            seen.iter()
                .find(|(at, r)| *r == ready && *at > killed)
                .map(|(at, _)| at.duration_since(killed))
        };
        let not_ready = after(false);
        KillTimes {
            address: format!("{ip}:8443"),
            killed,
            not_ready,
            ready_again: not_ready.and_then(|_| {
                seen.iter()
                    .skip_while(|(_, r)| *r)
                    .find(|(at, r)| *r && *at > killed)
                    .map(|(at, _)| at.duration_since(killed))
            }),
            classes: Vec::new(),
        }
    }
}
