//! The binary as a user runs it, one file a command or concern: `check`,
//! `certs`, `policy` (validate, export), `suite` (`test`), `cluster` (the
//! commands that talk to a cluster), `suggest` (`policy suggest`), `usage`
//! (help, version, flags, JSON, output) and `input` (hostile input). The
//! helpers they share are here.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::assert::assert_contains_all;
use common::wait::{LOCAL_POLL, exits_within, poll_blocking, poll_for};

mod certs;
mod check;
mod cluster;
mod input;
mod policy;
mod suggest;
mod suggest_managed;
mod suite;
mod usage;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .env_remove("FINALIZER_GUARD_POLICY")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A policy file with `text`, in a folder that lives as long as the guard.
fn policy_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// `serve` with this policy must refuse to start: exit 1, and why on stderr.
fn serve_refusal(policy: &Path) -> String {
    let serve = bin()
        .args(["serve", "--policy", policy.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(1));
    stderr(&serve)
}

/// A kubeconfig whose API server refuses every connection.
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    kubeconfig
}

/// One of the webhook's own audit records, a `would-deny`, of a review
/// whose caller was authenticated (`serve --client-ca`).
fn webhook_record(user: &str, groups: &[&str], namespace: &str, finalizers: &[&str]) -> String {
    let removed: Vec<serde_json::Value> = finalizers
        .iter()
        .map(|f| serde_json::json!({"finalizer": f, "field": "metadata.finalizers"}))
        .collect();
    serde_json::json!({
        "time": "2026-11-23T19:00:01Z", "kind": "FinalizerRemoval", "user": user, "groups": groups,
        "operation": "UPDATE", "resource": "widgets.example.com", "namespace": namespace, "name": "w",
        "removedFinalizers": removed, "decision": "would-deny", "mode": "warn", "dryRun": false,
        "authenticated": true,
    })
    .to_string()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
