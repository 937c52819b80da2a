//! A managed control plane (EKS, GKE, AKS): kube-apiserver presents no
//! client certificate to webhooks, so the webhook cannot authenticate it
//! (`FG_E2E_MANAGED=1 e2e/cluster.sh up DIR` starts one configured so).
//! The webhook runs there as the chart's managed mode runs it: no
//! `--client-ca`, and `FINALIZER_GUARD_EVENTS_UNAUTHENTICATED=true` where
//! `managed.platform` holds the port to kube-apiserver's sources. With it, a
//! denied strip leaves its Event for `kubectl get events`; without it (a
//! default install), the denial is answered and audited as ever, no Event
//! is written, and the server says so in its log and its metrics.
//!
//! On a control plane that does present a certificate (plain
//! `e2e/cluster.sh up`), a server without `--client-ca` asks for none and
//! is sent none: the same scenario holds there, which `.ci/run` runs.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::harness::{Env, bin, denied, env, free_port, http_get, wait_until};
use super::{STRIP, configmap, events};

/// A `finalizer-guard serve` of this scenario's, on the installed webhook's
/// address, killed when dropped (a failed assertion included).
struct Server {
    child: Child,
    admin_port: u16,
    log: PathBuf,
    audit: PathBuf,
}

impl Server {
    /// The server as the chart's Deployment runs it without `--client-ca`
    /// (its certificate, policy and ServiceAccount's credentials are the
    /// installed webhook's), with `env` added to its environment.
    fn start(env: &Env, name: &str, extra_env: &[(&str, &str)]) -> Server {
        let port = env
            .webhook_url()
            .trim_start_matches("https://127.0.0.1:")
            .trim_end_matches("/validate")
            .parse::<u16>()
            .unwrap();
        let admin_port = free_port();
        let log = env.work.join(format!("managed-{name}.log"));
        let audit = env.work.join(format!("managed-{name}.jsonl"));
        let certs = env.work.join("certs");
        let mut command = Command::new(bin());
        command
            .arg("serve")
            .arg("--policy")
            .arg(env.work.join("policy.yaml"))
            .arg("--tls-cert")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(certs.join("tls.key"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
            .args(["--shutdown-delay", "0s", "--log-format", "json"])
            .env("KUBECONFIG", env.work.join("webhook.kubeconfig"))
            .env_remove("FINALIZER_GUARD_CLIENT_CA")
            .env_remove("FINALIZER_GUARD_EVENTS_UNAUTHENTICATED")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&audit).unwrap())
            .stderr(fs::File::create(&log).unwrap());
        for (key, value) in extra_env {
            command.env(key, value);
        }
        let child = command.spawn().unwrap();
        // cluster.sh down stops it with the control plane, should the run
        // end without dropping it.
        fs::write(
            env.cluster.dir.join("run/finalizer-guard.pid"),
            child.id().to_string(),
        )
        .unwrap();
        let server = Server {
            child,
            admin_port,
            log,
            audit,
        };
        wait_until("the managed-mode server to be ready", 30, || {
            http_get(admin_port, "/readyz").is_some()
        });
        server
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn records(&self) -> Vec<serde_json::Value> {
        fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// A sample of `/metrics` (`name{labels}`), 0 when absent.
    fn metric(&self, series: &str) -> f64 {
        http_get(self.admin_port, "/metrics")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the control plane gives webhooks no client certificate
/// (`FG_E2E_MANAGED=1`): its webhook kubeconfig has no users.
fn managed_control_plane(env: &Env) -> bool {
    fs::read_to_string(env.cluster.dir.join("pki/webhook-client.kubeconfig"))
        .map(|k| !k.contains("client-certificate"))
        .unwrap_or(false)
}

/// A denied strip by alice of a ConfigMap holding a finalizer no rule
/// covers: refused with the policy's denial, as on any control plane.
fn strip_denied(env: &Env, ns: &str, name: &str) {
    let c = &env.cluster;
    c.apply(&configmap(ns, name, &["example.com/cleanup"]));
    let run = c
        .kubectl(
            "alice",
            &[
                "patch",
                "configmap",
                name,
                "-n",
                ns,
                "--type=merge",
                "-p",
                STRIP,
            ],
        )
        .refused(&denied());
    assert!(run.stderr.contains("example.com/cleanup"), "{run:#?}");
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn events_need_the_managed_mode_where_kube_apiserver_presents_no_certificate() {
    let mut env = env();
    let ns = "e2e-managed";
    env.cluster.namespace(ns);

    if managed_control_plane(&env) {
        // The harness's server asks for a client certificate
        // (`--client-ca`): kube-apiserver has none to give, the handshake
        // fails, and the webhook failing closed refuses the write.
        env.cluster
            .apply(&configmap(ns, "handshake", &["example.com/cleanup"]));
        env.cluster
            .kubectl(
                "alice",
                &[
                    "patch",
                    "configmap",
                    "handshake",
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    STRIP,
                ],
            )
            .refused("failed calling webhook");
    }
    env.stop();

    // A default install: no --client-ca, Events only for verified callers.
    {
        let server = Server::start(&env, "default", &[]);
        assert!(
            server.log().contains(
                "no Events are written for them (--client-ca, or --events-unauthenticated=true"
            ),
            "{}",
            server.log()
        );
        strip_denied(&env, ns, "quiet");
        wait_until("the denial's audit record", 30, || {
            server
                .records()
                .iter()
                .any(|r| r["name"] == "quiet" && r["decision"] == "denied")
        });
        for record in server.records() {
            assert_eq!(record["authenticated"], false, "{record}");
        }
        let skipped = "finalizer_guard_events_total{decision=\"unauthenticated\"}";
        wait_until("the Event skipped, counted", 10, || {
            server.metric(skipped) >= 1.0
        });
        // Given the writer time to write one, had it been asked to.
        std::thread::sleep(std::time::Duration::from_secs(3));
        assert_eq!(events(&env, ns, "quiet", "FinalizerRemovalDenied"), 0);
        let run = env
            .cluster
            .kubectl("alice", &["get", "events", "-n", ns])
            .ok();
        assert!(!run.stdout.contains("FinalizerRemovalDenied"), "{run:#?}");
    }

    // The managed mode: the chart's managed.platform sets this variable
    // with the NetworkPolicy holding the port to kube-apiserver's sources.
    {
        let server = Server::start(
            &env,
            "events",
            &[("FINALIZER_GUARD_EVENTS_UNAUTHENTICATED", "true")],
        );
        assert!(
            server
                .log()
                .contains("Events are written for them (--events-unauthenticated=true)"),
            "{}",
            server.log()
        );
        strip_denied(&env, ns, "told");
        wait_until("the denial's Event", 30, || {
            events(&env, ns, "told", "FinalizerRemovalDenied") == 1
        });
        let run = env
            .cluster
            .kubectl("alice", &["get", "events", "-n", ns])
            .ok();
        assert!(run.stdout.contains("FinalizerRemovalDenied"), "{run:#?}");
        assert!(run.stdout.contains("configmap/told"), "{run:#?}");
        // Still unauthenticated in its records: policy suggest says so.
        let records = server.records();
        assert!(!records.is_empty());
        for record in records {
            assert_eq!(record["authenticated"], false, "{record}");
        }
        assert_eq!(
            server.metric("finalizer_guard_events_total{decision=\"unauthenticated\"}"),
            0.0
        );
    }

    // The harness's server back, for the scenarios after this one.
    env.start();
}
