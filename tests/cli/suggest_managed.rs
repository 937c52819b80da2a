//! `policy suggest` over kube-apiserver's audit events as managed control
//! planes deliver them: the fixtures of `tests/fixtures/suggest/managed/`,
//! each in its provider's documented shape (the README there cites where),
//! through the binary as a user runs it.

use std::path::PathBuf;

use super::*;
use crate::common::assert::assert_contains_all;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/suggest/managed/{name}"))
}

fn suggest(args: &[&str], files: &[&str]) -> Output {
    bin()
        .args(["policy", "suggest"])
        .args(args)
        .args(files.iter().map(|f| fixture(f)))
        .output()
        .unwrap()
}

/// The rule every fixture's would-deny removals make: Flux's
/// source-controller, seen in team-a and team-b.
const FLUX_RULE: &[&str] = &[
    "  # seen in team-a, team-b: acts cluster-wide\n",
    "  - name: \"flux-system-source-controller\"\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n",
    "#   alice@example.com: stripped finalizers.fluxcd.io x1",
];

/// The fixtures that hold the whole audit event: the same rules as
/// kube-apiserver's own log, the impersonated person a comment line, the
/// dry run skipped, and no warning.
#[test]
fn whole_events_from_eks_and_aks_make_the_rules_kube_apiserver_log_would() {
    for (file, read) in [
        (
            "eks-filter-log-events.json",
            "read 6 kube-apiserver audit events from CloudWatch Logs (EKS); 4 would-deny removal(s)",
        ),
        (
            "eks-s3-export.log",
            "read 6 kube-apiserver audit events from CloudWatch Logs (EKS); 4 would-deny removal(s)",
        ),
        (
            "aks-azurediagnostics.json",
            "read 6 kube-apiserver audit events from Azure Monitor (AKS kube-audit); 4 would-deny removal(s)",
        ),
        (
            "aks-storage-PT1H.json",
            "read 6 kube-apiserver audit events from Azure Monitor (AKS kube-audit); 4 would-deny removal(s)",
        ),
        (
            "aks-event-hub.json",
            "read 6 kube-apiserver audit events from Azure Monitor (AKS kube-audit); 4 would-deny removal(s)",
        ),
    ] {
        let o = suggest(&[], &[file]);
        assert_eq!(o.status.code(), Some(0), "{file}: {o:?}");
        let (out, err) = (stdout(&o), stderr(&o));
        assert_contains_all(file, &out, FLUX_RULE);
        assert_contains_all(
            file,
            &out,
            &[
                "# finalizer-guard policy suggest: 1 rule(s) for controllers\n",
                "#   u-7x2k: stripped finalizers.fluxcd.io x1",
            ],
        );
        assert!(!out.contains("cattle-impersonation"), "{file}: {out}");
        assert!(!out.contains("ci:deployer"), "{file}: {out}");
        assert_contains_all(
            file,
            &err,
            &[read, "skipped 1 would-deny removal(s) of dry-run requests"],
        );
        assert!(!err.contains("warning:"), "{file}: {err}");
        // What is printed is a policy.
        let policy = finalizer_guard::policy::Policy::from_yaml(&out).unwrap();
        assert_eq!(policy.rules.len(), 1, "{file}");
    }
}

/// GKE's entries name no groups and no request URI: the rules come, and
/// so do two warnings saying what is missing and what it means; the dry
/// run, which the entry cannot show, made a rule of its own.
#[test]
fn gke_entries_make_rules_and_say_what_they_lack() {
    let o = suggest(&[], &["gke-logging-read.json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let (out, err) = (stdout(&o), stderr(&o));
    assert_contains_all("gke", &out, FLUX_RULE);
    // Impersonating: the impersonated user (authoritySelector), a person.
    assert_contains_all(
        "gke",
        &out,
        &["#   u-7x2k: stripped finalizers.fluxcd.io x1"],
    );
    assert!(!out.contains("cattle-impersonation"), "{out}");
    assert_contains_all(
        "gke",
        &out,
        &["  - name: \"ci-deployer\"\n    finalizers: [\"example.com/hold\"]\n"],
    );
    assert_contains_all(
        "gke",
        &err,
        &[
            "read 6 Cloud Audit Logs entries (GKE); 5 would-deny removal(s)\n",
            "warning: Cloud Audit Logs entries (GKE) (6 read, 5 with a removal no rule allowed) are not whole audit events: no groups: ",
            "a member of system:masters (a cluster administrator) or of system:unauthenticated is told by its username alone",
            "warning: Cloud Audit Logs entries (GKE) (6 read, 5 with a removal no rule allowed) are not whole audit events: no dry run: ",
            "counts as a removal and can make a rule",
        ],
    );
}

/// AKSAudit rows have no impersonated user: the proxy that impersonated a
/// person gets a rule, and the warning says so and where the whole event is.
#[test]
fn aksaudit_rows_say_they_lack_the_impersonated_user() {
    let o = suggest(&[], &["aks-auditadmin.json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let (out, err) = (stdout(&o), stderr(&o));
    assert_contains_all("aksaudit", &out, FLUX_RULE);
    assert_contains_all(
        "aksaudit",
        &out,
        &["serviceAccounts: [\"cattle-impersonation-system:cattle-impersonation-u-7x2k\"]"],
    );
    assert_contains_all(
        "aksaudit",
        &err,
        &[
            "read 6 AKSAudit rows (AKS); 4 would-deny removal(s)\n",
            "skipped 1 would-deny removal(s) of dry-run requests",
            "warning: AKSAudit rows (AKS) (6 read, 5 with a removal no rule allowed) are not whole audit events: no impersonated user: ",
            "names the impersonator, not the identity the webhook judged",
            "query AzureDiagnostics (log_s) or read a storage account's records instead",
        ],
    );
}

/// `--format` reads the audit events of the delivery named, and no other:
/// a file of another delivery holds no evidence then.
#[test]
fn format_names_the_delivery_read() {
    let o = suggest(
        &["--format", "eks"],
        &["eks-s3-export.log", "eks-filter-log-events.json"],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_contains_all(
        "eks",
        &stderr(&o),
        &[
            "read 12 kube-apiserver audit events from CloudWatch Logs (EKS); 4 would-deny removal(s)",
        ],
    );
    for (format, file) in [
        ("gke", "eks-filter-log-events.json"),
        ("eks", "gke-logging-read.json"),
        ("aks", "eks-s3-export.log"),
        ("kube-apiserver", "aks-storage-PT1H.json"),
    ] {
        let o = suggest(&["--format", format], &[file]);
        assert_eq!(o.status.code(), Some(2), "{format} {file}: {o:?}");
        assert!(
            stderr(&o).contains("neither webhook audit records"),
            "{o:?}"
        );
    }
    for format in ["gke", "aks", "auto"] {
        let file = match format {
            "gke" => "gke-logging-read.json",
            _ => "aks-event-hub.json",
        };
        assert_eq!(
            suggest(&["--format", format], &[file]).status.code(),
            Some(0)
        );
    }
    let o = suggest(&["--format", "openshift"], &["eks-s3-export.log"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// A CloudWatch Logs export to S3 comes gzip-compressed: named, not read as text.
#[test]
fn a_compressed_export_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000000.gz");
    std::fs::write(&path, [0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00]).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(["policy", "suggest"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o)
            .contains("gzip-compressed (as a CloudWatch Logs export to S3 is): gunzip it first"),
        "{o:?}"
    );
}

/// GKE entries none of which carries the webhook's decision (labels
/// stripped on the way, or an audit policy that drops them): said, not an
/// empty suggestion passed off as a week with nothing refused.
#[test]
fn gke_entries_without_the_webhooks_labels_are_said_to_be() {
    let text = std::fs::read_to_string(fixture("gke-logging-read.json")).unwrap();
    let mut entries: serde_json::Value = serde_json::from_str(&text).unwrap();
    for entry in entries.as_array_mut().unwrap() {
        entry["labels"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k.starts_with("authorization.k8s.io/"));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gke.json");
    std::fs::write(&path, serde_json::to_string_pretty(&entries).unwrap()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args(["policy", "suggest"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_contains_all(
        "gke without labels",
        &stderr(&o),
        &[
            "read 6 Cloud Audit Logs entries (GKE); 0 would-deny removal(s)\n",
            "warning: none of the 6 Cloud Audit Logs entries (GKE) carries the webhook's decision (labels finalizers.finalizer-guard.io/decision: would-deny or denied",
        ],
    );
    assert!(stdout(&o).contains("0 rule(s) for controllers"), "{o:?}");
}

/// A line neither JSON nor an export line is skipped and said to be: a
/// garbled export must not lose a controller's removal unseen.
#[test]
fn lines_that_cannot_be_read_are_counted_not_dropped_unseen() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("export.log");
    let lines = std::fs::read_to_string(fixture("eks-s3-export.log")).unwrap();
    let mut lines: Vec<&str> = lines.lines().collect();
    lines[1] = "garbage";
    lines.push("2026-11-20T10:00:00Z {cut short");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let o = bin()
        .args(["policy", "suggest"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = stderr(&o);
    assert!(
        err.contains("skipped 2 line(s) neither JSON nor a CloudWatch Logs export line (the first: line 2); a removal in them is not counted"),
        "{err}"
    );

    // Every line read: no such note.
    let o = suggest(&[], &["eks-s3-export.log"]);
    assert!(!stderr(&o).contains("neither JSON"), "{}", stderr(&o));
}
