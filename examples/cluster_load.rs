//! Writes through a real API server and times each one, for
//! `scripts/cluster-cost.sh`: what finalizer-guard costs a cluster.
//!
//! Each client owns one ConfigMap and patches it `--writes` times (or for
//! `--seconds`), one write after the other; clients run at once, each with
//! its own connection, and start their timed writes together, once every
//! client has made its object and its warm-up writes. A `guarded` write replaces the
//! object's one finalizer with a new name (a merge patch of
//! `metadata.finalizers`): every write removes a finalizer, so with the
//! webhook installed every write is sent to it and judged. An `override`
//! write swaps the object's finalizer between two names no rule covers, on an
//! object carrying the override annotation: every write is an override, and
//! from the third on each repeats an earlier one (same removal, same Event
//! note). `override-new` removes a new name each time: every override, and
//! every Event, is new. A `label` write changes a label and keeps the
//! finalizers: an ordinary UPDATE, which the webhook configuration's
//! matchConditions keep from the webhook.
//!
//! Prints one JSON object: writes, errors, seconds, writes/s and latency
//! percentiles in milliseconds, as the client saw them.
//!
//!   cargo run --release --example cluster_load -- \
//!     --kubeconfig DIR/admin.kubeconfig --namespace cost --write guarded --writes 1000 --clients 1
//!   cargo run --release --example cluster_load -- \
//!     --kubeconfig DIR/admin.kubeconfig --write override --seconds 20 --clients 500

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use tokio::sync::{Barrier, watch};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Write {
    /// Replace the one finalizer with a new name: a finalizer removed per write.
    Guarded,
    /// Swap the finalizer between two names no rule covers, by override.
    Override,
    /// Replace the finalizer with a new name no rule covers, by override.
    OverrideNew,
    /// Change a label, keep the finalizers.
    Label,
}

/// The override every `override` write carries: requireDeletion must be off
/// in the policy, as the object is not being deleted.
const OVERRIDE: &str = "controller-uninstalled: cost measurement";

#[derive(Parser, Debug)]
struct Args {
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    #[arg(long, default_value = "cost")]
    namespace: String,
    #[arg(long, value_enum)]
    write: Write,
    /// Writes per client, timed.
    #[arg(long, default_value_t = 1000)]
    writes: usize,
    /// Write for this long instead, each client as many times as it can.
    #[arg(long)]
    seconds: Option<f64>,
    /// Untimed writes per client first.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// ConfigMaps are named PREFIX-N, one per client.
    #[arg(long, default_value = "cost")]
    prefix: String,
    /// Number of the first write, in the finalizer names written: a run
    /// continuing another on the same objects must not repeat its last name.
    #[arg(long, default_value_t = 0)]
    first: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        kubeconfig,
        namespace,
        write,
        writes,
        seconds,
        warmup,
        clients,
        prefix,
        first,
    } = Args::parse();
    let kubeconfig = Kubeconfig::read_from(&kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    // Every client readies its object at once; the timed writes start
    // together when all are ready, with the deadline of a timed run.
    let ready = Arc::new(Barrier::new(clients + 1));
    let (start, started_rx) = watch::channel(None::<Option<Instant>>);
    let mut handles = Vec::new();
    for client in 0..clients {
        let api: Api<ConfigMap> =
            Api::namespaced(kube::Client::try_from(config.clone())?, &namespace);
        let name = format!("{prefix}-{client}");
        let ready = ready.clone();
        let mut started_rx = started_rx.clone();
        handles.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(writes);
            let mut errors = Vec::new();
            let mut prepared = ensure(&api, &name).await;
            for i in first..first + warmup {
                if prepared.is_err() {
                    break;
                }
                prepared = patch(&api, &name, write, client, i).await;
            }
            ready.wait().await;
            let deadline = match started_rx.wait_for(Option::is_some).await {
                Ok(start) => start.flatten(),
                Err(_) => return (times, errors),
            };
            if let Err(e) = prepared {
                errors.push(format!("before the timed writes: {e}"));
                return (times, errors);
            }
            let mut i = first + warmup;
            while match deadline {
                Some(at) => Instant::now() < at,
                None => i < first + warmup + writes,
            } {
                let t = Instant::now();
                match patch(&api, &name, write, client, i).await {
                    Ok(()) => times.push(t.elapsed()),
                    Err(e) => errors.push(e.to_string()),
                }
                i += 1;
            }
            (times, errors)
        }));
    }
    ready.wait().await;
    let started = Instant::now();
    let _ = start.send(Some(
        seconds.map(|s| started + Duration::from_secs_f64(s.max(0.0))),
    ));
    let mut times: Vec<Duration> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for handle in handles {
        let (t, e) = handle.await?;
        times.extend(t);
        errors.extend(e);
    }
    let seconds = started.elapsed().as_secs_f64();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| {
        times
            .get(((times.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .map_or(0.0, ms)
    };
    let mean = if times.is_empty() {
        0.0
    } else {
        times.iter().copied().map(ms).sum::<f64>() / times.len() as f64
    };
    println!(
        "{}",
        json!({
            "write": write.to_possible_value().map(|v| v.get_name().to_string()),
            "clients": clients,
            "warmup": warmup,
            "writes": times.len(),
            "errors": errors.len(),
            "first_error": errors.first(),
            "seconds": seconds,
            "writes_per_second": times.len() as f64 / seconds,
            "mean_ms": mean,
            "p50_ms": at(0.50),
            "p90_ms": at(0.90),
            "p99_ms": at(0.99),
            "max_ms": times.last().copied().map_or(0.0, ms),
            "over_1s": times.iter().filter(|t| **t > Duration::from_secs(1)).count(),
        })
    );
    if !errors.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// The ConfigMap `name`, created with one finalizer unless it exists.
async fn ensure(api: &Api<ConfigMap>, name: &str) -> Result<(), kube::Error> {
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": ["example.com/cost-start"]},
        "data": {"purpose": "finalizer-guard cost measurement"},
    }))
    .expect("a ConfigMap");
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

async fn patch(
    api: &Api<ConfigMap>,
    name: &str,
    write: Write,
    client: usize,
    i: usize,
) -> Result<(), kube::Error> {
    let body = match write {
        Write::Guarded => {
            json!({"metadata": {"finalizers": [format!("example.com/cost-{client}-{i}")]}})
        }
        Write::Override => json!({"metadata": {
            "annotations": {"finalizer-guard.io/override": OVERRIDE},
            "finalizers": [format!("override.example.org/cost-{client}-{}", i % 2)],
        }}),
        Write::OverrideNew => json!({"metadata": {
            "annotations": {"finalizer-guard.io/override": OVERRIDE},
            "finalizers": [format!("override.example.org/cost-{client}-{i}")],
        }}),
        Write::Label => json!({"metadata": {"labels": {"cost": format!("{client}-{i}")}}}),
    };
    api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    Ok(())
}
