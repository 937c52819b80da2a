//! Record in the server, replay with `test`: the shadow-replay workflow.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use finalizer_guard::server::RecordConfig;
use serde_json::{Value, json};

const WARN_POLICY: &str = "mode: warn\nrules:\n  - name: shop-oncall\n    finalizers: [example.com/cleanup]\n    groups: [shop-oncall]\n";

fn test_command(policy: &Path, dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args([
            "test",
            "--policy",
            policy.to_str().unwrap(),
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn example(name: &str) -> Value {
    let path = common::repository::path("examples/reviews").join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn secret_strip() -> Value {
    let secret = |finalizers: Value| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-password", "namespace": "shop", "uid": "s-1", "finalizers": finalizers,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"stringData\":{\"password\":\"hunter2\"}}"}},
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"password": "hunter2"},
        })
    };
    let mut review = common::update(
        "jane@example.com",
        secret(json!(["vault.example.com/lease"])),
        secret(json!([])),
    );
    review["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "secrets"});
    review["request"]["name"] = json!("db-password");
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_then_replay_under_the_same_a_looser_and_a_stricter_policy() {
    let server = common::start_with(Some(WARN_POLICY), |config, dir| {
        config.record = Some(RecordConfig {
            dir: dir.join("recordings"),
            max_files: 100,
            max_bytes: 10 * 1024 * 1024,
        });
    })
    .await;
    let mut oncall_strip = example("pod-strip-finalizers.json");
    oncall_strip["request"]["userInfo"]["groups"] = json!(["shop-oncall", "system:authenticated"]);
    let reviews = [
        example("pod-strip-finalizers.json"),              // would-deny
        example("pod-strip-finalizers-override.json"),     // override
        example("deployment-foreground-deletion-gc.json"), // authorized (built-in)
        example("namespace-finalize-stuck.json"),          // would-deny
        oncall_strip,                                      // authorized (rule)
        secret_strip(),                                    // would-deny
        common::update(
            "jane",
            common::pod(json!(["a"]), Value::Null),
            common::pod(json!(["a"]), Value::Null),
        ), // nothing removed
    ];
    for review in &reviews {
        server.review(review).await;
    }
    let recordings = server.dir.path().join("recordings");
    let count = || {
        std::fs::read_dir(&recordings)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count()
    };
    common::wait::wait_until("six recordings", Duration::from_secs(5), async || {
        count() >= 6
    })
    .await;
    assert_eq!(
        count(),
        6,
        "one recording per judged removal, none for the no-op"
    );

    // No Secret data, no last-applied-configuration, on disk.
    for entry in std::fs::read_dir(&recordings).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for secret in [
            "hunter2",
            "aHVudGVyMg",
            "last-applied-configuration",
            "stringData",
            "\"data\"",
        ] {
            assert!(!text.contains(secret), "{secret} reached the disk: {text}");
        }
    }

    let policies = server.dir.path();
    let same = policies.join("policy.yaml");
    let (code, out) = test_command(&same, &recordings);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("6 passed, 0 failed\n"), "{out}");

    // Looser: jane may remove the cleanup finalizer. Her denied strip and her
    // override both become plainly authorized.
    let looser = policies.join("looser.yaml");
    std::fs::write(
        &looser,
        format!("{WARN_POLICY}  - name: jane\n    finalizers: [example.com/cleanup]\n    users: [jane@example.com]\n"),
    )
    .unwrap();
    let (code, out) = test_command(&looser, &recordings);
    assert_eq!(code, 1, "{out}");
    assert!(out.ends_with("4 passed, 2 failed\n"), "{out}");
    assert!(
        out.contains("changed: recorded would-deny, now authorized"),
        "{out}"
    );
    assert!(
        out.contains("changed: recorded override, now authorized"),
        "{out}"
    );

    // Stricter: enforce. Every would-deny becomes a denial.
    let stricter = policies.join("stricter.yaml");
    std::fs::write(
        &stricter,
        WARN_POLICY.replace("mode: warn", "mode: enforce"),
    )
    .unwrap();
    let (code, out) = test_command(&stricter, &recordings);
    assert_eq!(code, 1, "{out}");
    assert!(out.ends_with("3 passed, 3 failed\n"), "{out}");
    assert_eq!(
        out.matches("changed: recorded would-deny, now denied")
            .count(),
        3,
        "{out}"
    );
    server.handle.shutdown().await;
}

/// `policy suggest ARGS`: exit code, standard output, standard error.
fn suggest(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(["policy", "suggest"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// team-b's database operator removing team-a's backup finalizer: what a
/// forged post claims, or what kube-apiserver sends when it happens.
fn backup_strip() -> Value {
    let db = |finalizers: Value| {
        json!({
            "apiVersion": "db.example.com/v1", "kind": "Database",
            "metadata": {"name": "orders", "namespace": "team-a", "uid": "d-1", "finalizers": finalizers},
        })
    };
    let mut review = common::update(
        "system:serviceaccount:team-b:db-operator",
        db(json!(["db.example.com/backup"])),
        db(json!([])),
    );
    let request = &mut review["request"];
    request["kind"] = json!({"group": "db.example.com", "version": "v1", "kind": "Database"});
    request["resource"] =
        json!({"group": "db.example.com", "version": "v1", "resource": "databases"});
    request["name"] = json!("orders");
    request["namespace"] = json!("team-a");
    request["userInfo"]["groups"] = json!([
        "system:serviceaccounts",
        "system:serviceaccounts:team-b",
        "system:authenticated"
    ]);
    review
}

/// The recordings in `dir`, once there are `n` of them (5 s at most).
async fn recordings(dir: &Path, n: usize) -> Vec<Value> {
    let what = format!("{n} recordings in {}", dir.display());
    common::wait::wait_for(&what, Duration::from_secs(30), async || {
        let read: Vec<Value> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
                    .collect()
            })
            .unwrap_or_default();
        (read.len() >= n).then_some(read)
    })
    .await
}

fn record_into(config: &mut finalizer_guard::server::ServeConfig, dir: &Path) {
    config.record = Some(RecordConfig {
        dir: dir.join("recordings"),
        max_files: 100,
        max_bytes: 10 * 1024 * 1024,
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_review_is_recorded_unauthenticated_and_suggests_no_rule() {
    // Warn mode, no --client-ca: the default install.
    let server = common::start_with(Some("mode: warn\n"), record_into).await;
    let answer = server.review(&backup_strip()).await;
    assert_eq!(answer["response"]["allowed"], true, "warn mode allows");
    let dir = server.dir.path().join("recordings");
    let recorded = recordings(&dir, 1).await;
    assert_eq!(recorded[0]["authenticated"], false, "{:#}", recorded[0]);
    assert_eq!(recorded[0]["decision"], "would-deny");

    // Not evidence by itself: no rule, and standard error says why.
    let (code, yaml, err) = suggest(&[dir.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(yaml.contains("0 rule(s) for controllers"), "{yaml}");
    assert!(!yaml.contains("team-b"), "{yaml}");
    assert!(
        err.contains(
            "ignored 1 would-deny removal(s) (1 from recordings) of unauthenticated reviews"
        ),
        "{err}"
    );
    assert!(err.contains("--trust-unauthenticated"), "{err}");

    // The operator trusts it: the rule.
    let trust = std::ffi::OsStr::new("--trust-unauthenticated");
    let (code, yaml, err) = suggest(&[trust, dir.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        yaml.contains("serviceAccounts: [\"team-b:db-operator\"]"),
        "{yaml}"
    );
    assert!(!err.contains("ignored"), "{err}");

    // kube-apiserver's audit log shows the same removal: the rule.
    // Of the same time: an event of another time is another request.
    let audit = server.dir.path().join("kube-apiserver-audit.log");
    let received = recorded[0]["recordedAt"].clone();
    let event = |user: &str, finalizers: &str| {
        json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": "a-1",
            "stage": "ResponseComplete", "verb": "update",
            "user": {"username": user, "groups": ["system:serviceaccounts", "system:serviceaccounts:team-b", "system:authenticated"]},
            "objectRef": {"resource": "databases", "apiGroup": "db.example.com", "apiVersion": "v1", "namespace": "team-a", "name": "orders"},
            "requestReceivedTimestamp": received,
            "annotations": {
                "finalizers.finalizer-guard.io/decision": "would-deny",
                "finalizers.finalizer-guard.io/unauthorized-finalizers": finalizers,
            },
        })
        .to_string()
    };
    std::fs::write(
        &audit,
        event(
            "system:serviceaccount:team-b:db-operator",
            "db.example.com/backup",
        ),
    )
    .unwrap();
    let (code, yaml, err) = suggest(&[dir.as_os_str(), audit.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        yaml.contains("serviceAccounts: [\"team-b:db-operator\"]"),
        "{yaml}"
    );
    assert!(
        err.contains("used 1 would-deny removal(s) of unauthenticated reviews"),
        "{err}"
    );

    // One that shows someone else's removal confirms nothing.
    std::fs::write(
        &audit,
        event(
            "system:serviceaccount:team-a:db-operator",
            "db.example.com/backup",
        ),
    )
    .unwrap();
    let (_, yaml, err) = suggest(&[dir.as_os_str(), audit.as_os_str()]);
    assert!(!yaml.contains("team-b"), "{yaml}");
    assert!(
        err.contains("ignored 1 would-deny removal(s) (1 from recordings)"),
        "{err}"
    );
    server.handle.shutdown().await;

    // Called as kube-apiserver is with --client-ca: authenticated, a rule as before.
    let server = common::start_mtls(|config, dir| {
        record_into(config, dir);
        config.policy = Some(dir.join("policy.yaml"));
        std::fs::write(dir.join("policy.yaml"), "mode: warn\n").unwrap();
    })
    .await;
    server.review(&backup_strip()).await;
    let dir = server.dir.path().join("recordings");
    let recorded = recordings(&dir, 1).await;
    assert_eq!(recorded[0]["authenticated"], true, "{:#}", recorded[0]);
    let (code, yaml, err) = suggest(&[dir.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        yaml.contains("serviceAccounts: [\"team-b:db-operator\"]"),
        "{yaml}"
    );
    server.handle.shutdown().await;
}
