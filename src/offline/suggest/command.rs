//! `policy suggest`: reads the evidence named, says on standard error what
//! it read, set aside and noticed, and prints the rules (or the merged
//! policy) on standard output.

use super::bindings::Bindings;
use super::evidence::EvidenceFormat;
use super::evidence::{Evidence, EvidenceSource};
use super::managed::lacks;
use super::read::read_path;
use super::render;
use super::rules::{removals, suggest_with};
use super::trust::trusted;
use crate::admission::WEBHOOK_NAME;
use crate::error::{Error, Result};
use crate::output::escape;
use crate::policy::{LoadError, Policy};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What `policy suggest` was given.
pub struct Suggest {
    /// The policy to merge into (`--merge`).
    pub merge: Option<PathBuf>,
    pub trust_unauthenticated: bool,
    /// ClusterRoles and ClusterRoleBindings (`--bindings`).
    pub bindings: Option<PathBuf>,
    /// How kube-apiserver's audit events are given (`--format`).
    pub format: EvidenceFormat,
    /// The evidence: files and folders.
    pub paths: Vec<PathBuf>,
}

/// `policy suggest`: exit 0, or 2 when an input cannot be read.
pub fn run(args: Suggest) -> Result<i32> {
    let Suggest {
        merge,
        trust_unauthenticated,
        bindings,
        format,
        paths,
    } = args;
    let base = match &merge {
        Some(path) => Some(read_base(path)?),
        None => None,
    };
    let bindings = match &bindings {
        Some(path) => match read_bindings(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {}", escape(&format!("{}: {e}", path.display())));
                return Ok(2);
            }
        },
        None => Bindings::default(),
    };
    for (binding, role) in bindings.unknown_roles() {
        eprintln!(
            "note: {}",
            escape(&format!(
                "ClusterRoleBinding {binding}: its ClusterRole {role} is not in --bindings, so what it grants is not known: give kubectl get clusterroles,clusterrolebindings -o json"
            ))
        );
    }
    let Some(evidence) = read_evidence(&paths, format) else {
        return Ok(2);
    };
    let (seen, aside) = trusted(evidence.seen, trust_unauthenticated);
    for line in aside.lines() {
        eprintln!("{line}");
    }
    if aside.confirmed > 0 {
        eprintln!(
            "used {} would-deny removal(s) of unauthenticated reviews that kube-apiserver's audit log confirms",
            aside.confirmed
        );
    }
    if aside.same > 0 {
        eprintln!(
            "counted {} webhook record(s) once, as the kube-apiserver audit event of the same request",
            aside.same
        );
    }
    let suggestions = suggest_with(&seen, base.as_ref().map(|(_, p)| p), bindings);
    for note in suggestions.notes() {
        eprintln!("note: {}", escape(&note));
    }
    let yaml = render(
        &suggestions,
        base.as_ref().map(|(text, policy)| (text.as_str(), policy)),
    );
    io::stdout()
        .write_all(yaml.as_bytes())
        .map_err(Error::stdout)?;
    Ok(0)
}

/// The policy to merge into: its text (comments kept) and its reading. A
/// regular file of a policy's size at most, as every policy file.
fn read_base(path: &Path) -> Result<(String, Policy)> {
    let bytes = crate::files::read_regular(path, crate::files::MAX_POLICY_BYTES)
        .map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::policy(
            path,
            LoadError::NotUtf8 {
                valid_up_to: e.utf8_error().valid_up_to(),
            },
        )
    })?;
    let policy =
        Policy::from_yaml(&text).map_err(|e| Error::policy(path, LoadError::Invalid(e)))?;
    Ok((text, policy))
}

/// Reads every path's evidence and says what was read and skipped; `None`
/// (after saying why) when one cannot be read.
fn read_evidence(paths: &[PathBuf], format: EvidenceFormat) -> Option<Evidence> {
    let mut evidence = Evidence::default();
    evidence.format = format;
    for path in paths {
        if let Err(e) = read_path(path, &mut evidence) {
            eprintln!("error: {}", escape(&e));
            return None;
        }
    }
    let read: Vec<String> = evidence
        .read
        .iter()
        .map(|(source, n)| format!("{n} {}", source.describe()))
        .collect();
    let denied = evidence.seen.iter().filter(|s| s.denied).count();
    eprintln!(
        "read {}; {}",
        read.join(", "),
        removals(evidence.seen.len() - denied, denied)
    );
    for (why, n) in &evidence.skipped {
        eprintln!("skipped {n} would-deny removal(s) {}", why.describe());
    }
    for line in incomplete(&evidence) {
        eprintln!("warning: {}", escape(&line));
    }
    Some(evidence)
}

/// What the evidence read does not hold that the rules rest on: per
/// delivery of kube-apiserver's audit events read, each thing it leaves
/// out and what that means ([`lacks`]), and Cloud Audit Logs entries none
/// of which carries the webhook's decision.
fn incomplete(evidence: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    for (&source, &n) in &evidence.read {
        let refused = evidence.refused.get(&source).copied().unwrap_or(0);
        for lack in lacks(source) {
            out.push(format!(
                "{} ({n} read, {refused} with a removal no rule allowed) are not whole audit events: {lack}",
                source.describe()
            ));
        }
        if source == EvidenceSource::CloudAuditLogs && refused == 0 {
            out.push(format!(
                "none of the {n} {} carries the webhook's decision (labels {WEBHOOK_NAME}/decision: would-deny or denied, where GKE puts kube-apiserver's audit annotations): no rule comes from them; check that the audit policy logs update and patch, and that the entries were read with their labels",
                source.describe()
            ));
        }
    }
    out
}

fn read_bindings(path: &Path) -> std::result::Result<Bindings, String> {
    let bytes = crate::files::read_regular(path, 64 * 1024 * 1024).map_err(|e| e.to_string())?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    Bindings::from_json(&value)
}
