//! Recordings: judged finalizer removals written by `serve --record-dir`,
//! replayed by `test`.
//!
//! A recording keeps the AdmissionReview reduced to what a decision reads
//! (finalizer lists, the override annotations) and what identifies the object
//! (kind, name, namespace, uid, resourceVersion, labels, deletionTimestamp),
//! plus the decision it got. Everything else — `data`, `stringData`, `spec`,
//! `status`, other annotations such as `last-applied-configuration`, which
//! repeats a Secret's data — is never written.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use kube_core::TypeMeta;
use kube_core::admission::{AdmissionRequest, AdmissionReview};
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};

use crate::admission::{self, LeanObject, Reviewed};
use crate::error::{Error, Result};
use crate::policy::{Policy, Verdict};
use crate::queue::{self, Queue, WhenFull};

pub const API_VERSION: &str = "finalizer-guard.io/v1alpha1";
pub const KIND: &str = "Recording";

/// Annotation keys under this prefix are the webhook's own; they are kept.
const OWN_ANNOTATION_PREFIX: &str = "finalizer-guard.io/";

/// One recorded decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recording {
    pub api_version: String,
    pub kind: String,
    pub recorded_at: String,
    /// The policy mode when recorded.
    pub mode: String,
    pub decision: Verdict,
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether the review's caller presented a client certificate verified
    /// against `--client-ca`, as the audit record's `authenticated` says.
    /// Absent from recordings of older versions: read as unauthenticated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    /// The reduced AdmissionReview, replayable by `check` and `test`.
    pub review: serde_json::Value,
}

/// The recording of a judged removal, from the review's body read again
/// (the same reading, into kube-core's owned types); `None` when nothing
/// was removed. `authenticated`: whether the caller presented a verified
/// client certificate.
pub fn from_reviewed(
    reviewed: &Reviewed,
    body: &[u8],
    policy: &Policy,
    authenticated: bool,
) -> Option<Recording> {
    if !reviewed.decision.audited() {
        return None;
    }
    let request = admission::parse_owned(body).ok()?;
    let review = reduce(&request, &policy.override_settings.annotation);
    Some(Recording {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        recorded_at: jiff::Timestamp::now().to_string(),
        mode: policy.mode.as_str().into(),
        decision: reviewed.verdict(),
        allowed: reviewed.allowed(),
        message: reviewed.message.clone(),
        authenticated: Some(authenticated),
        review: serde_json::to_value(&review).expect("a review always serializes"),
    })
}

fn reduce(
    request: &AdmissionRequest<LeanObject>,
    override_annotation: &str,
) -> AdmissionReview<LeanObject> {
    let mut request = request.clone();
    for object in [request.object.as_mut(), request.old_object.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(annotations) = object.metadata.annotations.as_mut() {
            annotations
                .retain(|k, _| k == override_annotation || k.starts_with(OWN_ANNOTATION_PREFIX));
        }
    }
    // The request's options can carry a field manager, nothing secret; the
    // user's extra attributes can carry tokens' claims: keep only their keys.
    if let Some(extra) = request.user_info.extra.as_mut() {
        let keys: BTreeMap<String, Vec<String>> = extra
            .keys()
            .map(|k| (k.clone(), vec!["(redacted)".to_string()]))
            .collect();
        *extra = keys;
    }
    AdmissionReview {
        types: TypeMeta {
            api_version: request.types.api_version.clone(),
            kind: request.types.kind.clone(),
        },
        request: Some(request),
        response: None,
    }
}

/// Writes recordings into a folder, keeping at most `max_files` files and
/// `max_bytes` bytes (oldest dropped first). Writing happens on its own
/// thread; a full queue drops the recording (counted), never delays a review.
pub struct Recorder {
    queue: Queue<Recording>,
}

impl Recorder {
    pub fn start(
        dir: PathBuf,
        max_files: usize,
        max_bytes: u64,
        dropped: Counter,
    ) -> Result<Recorder> {
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let mut kept = existing(&dir).map_err(|e| Error::io(&dir, e))?;
        evict(&mut kept, max_files, max_bytes);
        let (queue, mut incoming) = queue::bounded("recorder", 1024, WhenFull::Drop, dropped);
        std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                while let Some(recording) = incoming.blocking_recv() {
                    match write(&dir, &recording) {
                        Ok(entry) => {
                            kept.push(entry);
                            evict(&mut kept, max_files, max_bytes);
                        }
                        Err(e) => tracing::error!(dir = %dir.display(), error = %e, "cannot write recording"),
                    }
                }
            })
            .map_err(|e| Error::io("recorder thread", e))?;
        Ok(Recorder { queue })
    }

    pub fn record(&self, recording: Recording) {
        // A dropping queue never hands the recording back.
        let _ = self.queue.send(recording);
    }
}

/// A recording on disk: its path and size.
type Entry = (PathBuf, u64);

fn existing(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json") {
            entries.push((path, entry.metadata()?.len()));
        }
    }
    // Names start with the time recorded: name order is age order.
    entries.sort();
    Ok(entries)
}

fn evict(kept: &mut Vec<Entry>, max_files: usize, max_bytes: u64) {
    let mut total: u64 = kept.iter().map(|(_, size)| size).sum();
    let mut drop = 0;
    while drop < kept.len() && (kept.len() - drop > max_files || total > max_bytes) {
        let (path, size) = &kept[drop];
        if let Err(e) = fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove old recording");
        }
        total -= size;
        drop += 1;
    }
    kept.drain(..drop);
}

/// Writes one recording atomically (a temporary file renamed into place).
fn write(dir: &Path, recording: &Recording) -> std::io::Result<Entry> {
    let uid: String = recording.review["request"]["uid"]
        .as_str()
        .unwrap_or("no-uid")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%S%.6fZ")
        .to_string();
    let name = format!("{stamp}-{uid}.json");
    let mut bytes = serde_json::to_vec_pretty(recording).expect("a recording always serializes");
    bytes.push(b'\n');
    let path = dir.join(name);
    crate::files::replace(&path, &bytes, crate::files::Access::Everyone)?;
    Ok((path, bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::ReviewBuilder;
    use serde_json::json;

    fn secret_strip() -> Vec<u8> {
        let secret = |finalizers: serde_json::Value| {
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": "db-password", "namespace": "team-a", "uid": "s-1", "resourceVersion": "42",
                    "deletionTimestamp": "2026-11-21T07:00:00Z",
                    "labels": {"app": "db"},
                    "finalizers": finalizers,
                    "annotations": {
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"password\":\"aHVudGVyMg==\"}}",
                        "finalizer-guard.io/override": "controller-uninstalled: vault-operator removed in CHG-12"
                    },
                    "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {"f:password": {}}}}]
                },
                "data": {"password": "aHVudGVyMg=="},
                "stringData": {"token": "hunter2"},
                "type": "Opaque"
            })
        };
        ReviewBuilder::pod_update("jane")
            .uid("r-1")
            .resource("", "v1", "secrets", "Secret")
            .name("db-password")
            .groups(&["oncall"])
            .extra("token-claim", &["sensitive"])
            .object(Some(secret(json!(null))))
            .old_object(Some(secret(json!(["vault.example.com/lease"]))))
            .to_vec()
    }

    #[test]
    fn a_recording_keeps_what_decides_and_identifies_and_nothing_secret() {
        let policy = Policy::embedded_default();
        let body = secret_strip();
        let reviewed = admission::review(&policy, &body).unwrap();
        let recording = from_reviewed(&reviewed, &body, &policy, false).unwrap();
        assert_eq!(recording.authenticated, Some(false));
        assert_eq!(recording.decision, Verdict::Override);
        let text = serde_json::to_string(&recording).unwrap();
        for secret in [
            "aHVudGVyMg",
            "hunter2",
            "last-applied",
            "managedFields",
            "stringData",
            "sensitive",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        for kept in [
            "db-password",
            "vault.example.com/lease",
            "controller-uninstalled: vault-operator",
            "\"42\"",
            "token-claim",
        ] {
            assert!(text.contains(kept), "{kept} missing: {text}");
        }
        // Replaying the reduced review gives the same decision.
        let replay =
            admission::review(&policy, &serde_json::to_vec(&recording.review).unwrap()).unwrap();
        assert_eq!(replay.verdict(), recording.decision);
    }

    #[test]
    fn the_folder_is_bounded_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let policy = Policy::embedded_default();
        let body = secret_strip();
        let reviewed = admission::review(&policy, &body).unwrap();
        let mut kept = Vec::new();
        for _ in 0..5 {
            kept.push(
                write(
                    dir.path(),
                    &from_reviewed(&reviewed, &body, &policy, true).unwrap(),
                )
                .unwrap(),
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let newest = kept.last().unwrap().0.clone();
        evict(&mut kept, 3, u64::MAX);
        assert_eq!(existing(dir.path()).unwrap().len(), 3);
        // Room for the newest file alone (sizes differ by a byte or two: timestamps).
        let newest_size = kept.last().unwrap().1;
        evict(&mut kept, 100, newest_size);
        let left = existing(dir.path()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, newest);
    }
}
