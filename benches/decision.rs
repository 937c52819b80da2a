//! Decision cost of `admission::review`, measured against the floor of the
//! stack on the same bytes in the same run: serde_json's `IgnoredAny` scan of
//! the whole body (what any JSON webhook must at least pay) and a full
//! `serde_json::Value` parse (what a naive webhook pays). `parse` is the
//! review's own parse alone (`admission::parse`: the request borrowed from
//! the body), so `review - parse` is what deciding, answering and the audit
//! record cost.
//!
//! ```sh
//! cargo bench --bench decision               # runs everything, then prints the ratios
//! cargo bench --bench decision -- --report   # prints the ratios of the last run only
//! cargo bench --bench decision -- 3MiB       # a criterion filter, as usual
//! ```
//!
//! `cargo test` does not build this; `cargo test --benches` runs each
//! benchmark once, as a smoke test, and prints no report.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput};
use finalizer_guard::admission::{self, ReviewBuilder};
use finalizer_guard::policy::{Policy, Verdict};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

#[path = "../tests/common/reviews.rs"]
mod reviews;

/// Object (and oldObject) sizes, as named in the report.
const SIZES: [(&str, usize); 5] = [
    ("1KiB", 1024),
    ("16KiB", 16 * 1024),
    ("256KiB", 256 * 1024),
    ("1.5MiB", 1536 * 1024),
    ("3MiB", 3 * 1024 * 1024),
];
const FINALIZERS: [usize; 4] = [1, 8, 64, 1024];
/// The three measurements of one body.
const FUNCTIONS: [&str; 4] = ["review", "scan", "value", "parse"];
/// The load script's review, decided under the embedded default policy (denied).
const EXAMPLE: &str = "pod-strip-3KiB";
/// 1 KiB objects, 1024 finalizers, all removed.
const ALL_REMOVED: &str = "1KiB-f1024-all-removed";
/// A pod's finalizer removed by override: the one path that reads the leak ledger.
const OVERRIDE: &str = "pod-override";

fn group_name(size: &str, finalizers: usize) -> String {
    format!("{size}-f{finalizers}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--report") {
        report();
        return;
    }
    let benchmarking =
        args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test" || a == "--list");
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    decision(&mut criterion);
    criterion.final_summary();
    if benchmarking {
        report();
    }
}

fn decision(c: &mut Criterion) {
    let example = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/reviews/pod-strip-finalizers.json"
    ))
    .expect("the example review");
    // Compacted, as apiserver-sim (and kube-apiserver) send it.
    let example = serde_json::to_vec(
        &serde_json::from_slice::<serde_json::Value>(&example).expect("the example is JSON"),
    )
    .expect("JSON");
    let default_policy = Policy::embedded_default();
    measure_as(c, EXAMPLE, &default_policy, &example, Verdict::Denied);
    measure_as(
        c,
        OVERRIDE,
        &default_policy,
        &override_review(),
        Verdict::Override,
    );

    let policy = Policy::from_yaml(reviews::POLICY).expect("the bench policy is valid");
    for (label, object_bytes) in SIZES {
        for finalizers in FINALIZERS {
            let generated = reviews::update_review(reviews::Shape {
                object_bytes,
                finalizers,
                remove_all: false,
            });
            let body = generated.body;
            let reviewed = admission::review(&policy, &body).expect("a generated review parses");
            assert_eq!(
                reviewed.verdict(),
                Verdict::Authorized,
                "{label} f{finalizers}"
            );
            eprintln!(
                "{label} f{finalizers}: body {} bytes, object {} bytes, managedFields {:.0}%",
                body.len(),
                generated.object_len,
                100.0 * generated.managed_fields_len as f64 / generated.object_len as f64
            );

            measure(c, group_name(label, finalizers), &policy, &body);
        }
    }

    // The worst case beside the matrix: all 1024 removed at once
    // (`finalizers: null`), every one judged and named in the answer.
    let body = reviews::update_review(reviews::Shape {
        object_bytes: 1024,
        finalizers: 1024,
        remove_all: true,
    })
    .body;
    measure_as(c, ALL_REMOVED, &policy, &body, Verdict::Authorized);
}

/// A node-lost override of a pod on a lost node, with the volumes and IPs
/// the ledger reports.
fn override_review() -> Vec<u8> {
    ReviewBuilder::pod_update("jane@example.com")
        .finalizers(json!(["example.com/cleanup"]), Value::Null)
        .annotate(
            "finalizer-guard.io/override",
            "node-lost: INC-4711 worker-3 powered off",
        )
        .edit_both(|pod| {
            pod["spec"] = json!({
                "nodeName": "worker-3",
                "containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io"}},
                    {"name": "config", "configMap": {"name": "web"}}
                ]
            });
            pod["status"] = json!({
                "phase": "Running",
                "podIP": "10.244.3.17",
                "podIPs": [{"ip": "10.244.3.17"}, {"ip": "fd00::17"}]
            });
        })
        .to_vec()
}

/// [`measure`], once the body is known to be decided as `want`.
fn measure_as(c: &mut Criterion, name: &str, policy: &Policy, body: &[u8], want: Verdict) {
    let got = admission::review(policy, body).expect("decided").verdict();
    assert_eq!(got, want, "{name}");
    measure(c, name.to_string(), policy, body);
}

/// The four measurements of one body, in one criterion group.
fn measure(c: &mut Criterion, name: String, policy: &Policy, body: &[u8]) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(body.len() as u64));
    if body.len() > 128 * 1024 {
        // Milliseconds per iteration: flat sampling keeps the run short.
        group.sampling_mode(SamplingMode::Flat).sample_size(20);
    }
    group.bench_function("review", |b| {
        b.iter(|| admission::review(policy, black_box(body)).expect("decided"))
    });
    group.bench_function("scan", |b| {
        b.iter(|| serde_json::from_slice::<IgnoredAny>(black_box(body)).expect("JSON"))
    });
    group.bench_function("value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(body)).expect("JSON"))
    });
    group.bench_function("parse", |b| {
        b.iter(|| admission::parse(black_box(body)).expect("parsed"))
    });
    group.finish();
}

/// Where criterion writes its results, found the way criterion finds it.
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    let metadata = std::env::var_os("CARGO").and_then(|cargo| {
        std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()
    });
    metadata
        .and_then(|out| serde_json::from_slice::<serde_json::Value>(&out.stdout).ok())
        .and_then(|v| v["target_directory"].as_str().map(PathBuf::from))
        .map_or_else(
            || PathBuf::from("target/criterion"),
            |t| t.join("criterion"),
        )
}

/// The median time (ns) and throughput size of one benchmark of the last run.
fn estimate(home: &std::path::Path, group: &str, function: &str) -> Option<(f64, u64)> {
    let dir = home.join(group).join(function);
    let read = |file: &str| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(dir.join("new").join(file)).ok()?).ok()
    };
    let median = read("estimates.json")?["median"]["point_estimate"].as_f64()?;
    let bytes = read("benchmark.json")?["throughput"]["Bytes"].as_u64()?;
    Some((median, bytes))
}

fn human_time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn human_bytes(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// One group's medians (ns) and body size.
struct Row {
    review: f64,
    scan: f64,
    value: f64,
    parse: f64,
    bytes: u64,
}

fn row(home: &std::path::Path, group: &str) -> Option<Row> {
    let found: Vec<(f64, u64)> = FUNCTIONS
        .iter()
        .map(|f| estimate(home, group, f))
        .collect::<Option<_>>()?;
    Some(Row {
        review: found[0].0,
        scan: found[1].0,
        value: found[2].0,
        parse: found[3].0,
        bytes: found[0].1,
    })
}

/// Prints the ratios of the last run as markdown tables, and writes them to
/// `decision-report.md` beside criterion's results.
fn report() {
    let home = criterion_home();
    let mut out = String::new();
    out.push_str(
        "| object | finalizers | body | review | scan (floor) | Value | review/scan (<= 2 at 1 KiB, <= 1.3 from 16 KiB) | review/Value (<= 0.5) | of review: parse | review MiB/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut worst_scan: Option<(f64, String)> = None;
    let mut worst_value: Option<(f64, String)> = None;
    let mut missing = Vec::new();
    let mut scaling = String::new();
    let groups = std::iter::once((EXAMPLE, None))
        .chain(
            SIZES
                .iter()
                .flat_map(|&(label, _)| FINALIZERS.iter().map(move |&n| (label, Some(n)))),
        )
        .chain([(ALL_REMOVED, None), (OVERRIDE, None)]);
    let mut ones: Option<Row> = None;
    for (label, finalizers) in groups {
        let group = finalizers.map_or_else(|| label.to_string(), |n| group_name(label, n));
        let Some(r) = row(&home, &group) else {
            missing.push(group);
            continue;
        };
        let (to_scan, to_value) = (r.review / r.scan, r.review / r.value);
        if finalizers.is_some() {
            if worst_scan.as_ref().is_none_or(|(w, _)| to_scan > *w) {
                worst_scan = Some((to_scan, group.clone()));
            }
            if worst_value.as_ref().is_none_or(|(w, _)| to_value > *w) {
                worst_value = Some((to_value, group.clone()));
            }
        }
        let mib_s = r.bytes as f64 / (r.review / 1e9) / f64::from(1 << 20);
        writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {to_scan:.2}x | {to_value:.2}x | {:.0}% | {mib_s:.0} |",
            match finalizers {
                Some(n) => n.to_string(),
                None if label == EXAMPLE => "1 (example)".to_string(),
                None if label == OVERRIDE => "1 (override)".to_string(),
                None => "1024, all removed".to_string(),
            },
            human_bytes(r.bytes),
            human_time(r.review),
            human_time(r.scan),
            human_time(r.value),
            100.0 * r.parse / r.review,
        )
        .unwrap();
        match finalizers {
            Some(1) => ones = Some(r),
            Some(1024) => {
                if let Some(one) = ones.take() {
                    writeln!(
                        scaling,
                        "| {label} | {} | {} | {:.2}x | {:.2}x | {:.2}x |",
                        human_time(one.review),
                        human_time(r.review),
                        r.review / one.review,
                        r.scan / one.scan,
                        (r.review / r.scan) / (one.review / one.scan),
                    )
                    .unwrap();
                }
            }
            _ => {}
        }
    }
    if !scaling.is_empty() {
        out.push_str(
            "\n| object | review, 1 finalizer | review, 1024 finalizers | 1024 vs 1 (<= 2) | scan, 1024 vs 1 | 1024 vs 1, each over its scan |\n\
             |---|---:|---:|---:|---:|---:|\n",
        );
        out.push_str(&scaling);
    }
    if let (Some((s, sg)), Some((v, vg))) = (&worst_scan, &worst_value) {
        writeln!(
            out,
            "\nWorst review/scan: {s:.2}x ({sg}); worst review/Value: {v:.2}x ({vg})."
        )
        .unwrap();
    }
    if !missing.is_empty() {
        writeln!(
            out,
            "\nNo results in {} for: {}. Run `cargo bench --bench decision` first.",
            home.display(),
            missing.join(", ")
        )
        .unwrap();
    }
    println!("\n{out}");
    let file = home.join("decision-report.md");
    if std::fs::create_dir_all(&home).is_ok() && std::fs::write(&file, &out).is_ok() {
        println!("(written to {})", file.display());
    }
}
