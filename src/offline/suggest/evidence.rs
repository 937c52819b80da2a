//! The evidence `policy suggest` reads, told apart by its content: the
//! webhook's audit records, recordings, and kube-apiserver's audit events
//! ([`parse_line`], [`parse_recording`]), gathered into [`Evidence`].

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::admission::WEBHOOK_NAME;
use crate::policy::{FinalizerField, Policy, Target};

/// The kinds of evidence: the webhook's own, and kube-apiserver's audit
/// events as a cluster you run writes them or as a managed control plane
/// delivers them ([`managed`](super::managed)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EvidenceSource {
    WebhookAudit,
    Recording,
    ApiserverAudit,
    /// EKS: CloudWatch Logs events (`aws logs filter-log-events`, or an
    /// export to S3), each message a whole audit event.
    CloudWatch,
    /// GKE: Cloud Audit Logs entries (`gcloud logging read --format=json`).
    CloudAuditLogs,
    /// AKS: the `kube-audit` category as Azure Monitor delivers it whole
    /// (`AzureDiagnostics.log_s`, a storage account, an Event Hub).
    AzureDiagnostics,
    /// AKS: rows of the resource-specific `AKSAudit` or `AKSAuditAdmin` table.
    AksAuditTable,
}

impl EvidenceSource {
    pub fn describe(self) -> &'static str {
        match self {
            EvidenceSource::WebhookAudit => "webhook audit records",
            EvidenceSource::Recording => "recordings",
            EvidenceSource::ApiserverAudit => "kube-apiserver audit events",
            EvidenceSource::CloudWatch => "kube-apiserver audit events from CloudWatch Logs (EKS)",
            EvidenceSource::CloudAuditLogs => "Cloud Audit Logs entries (GKE)",
            EvidenceSource::AzureDiagnostics => {
                "kube-apiserver audit events from Azure Monitor (AKS kube-audit)"
            }
            EvidenceSource::AksAuditTable => "AKSAudit rows (AKS)",
        }
    }

    /// kube-apiserver's own audit events, however delivered: the API
    /// server authenticated the user, so they are evidence by nature.
    pub fn is_apiserver(self) -> bool {
        !matches!(
            self,
            EvidenceSource::WebhookAudit | EvidenceSource::Recording
        )
    }
}

/// How kube-apiserver's audit events are given (`--format`): the webhook's
/// own records and recordings are read whatever it says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EvidenceFormat {
    /// Each line or document told by its content.
    #[default]
    Auto,
    /// audit.k8s.io Events, as kube-apiserver writes them (JSON lines).
    KubeApiserver,
    /// CloudWatch Logs: `aws logs filter-log-events --output json`, or an export to S3 (gunzipped).
    Eks,
    /// Cloud Audit Logs: `gcloud logging read --format=json`.
    Gke,
    /// Azure Monitor's kube-audit: AzureDiagnostics or AKSAudit rows, storage or Event Hub records.
    Aks,
}

impl EvidenceFormat {
    /// Whether evidence of `source` is read under this format.
    pub fn reads(self, source: EvidenceSource) -> bool {
        match self {
            _ if !source.is_apiserver() => true,
            EvidenceFormat::Auto => true,
            EvidenceFormat::KubeApiserver => source == EvidenceSource::ApiserverAudit,
            EvidenceFormat::Eks => source == EvidenceSource::CloudWatch,
            EvidenceFormat::Gke => source == EvidenceSource::CloudAuditLogs,
            EvidenceFormat::Aks => matches!(
                source,
                EvidenceSource::AzureDiagnostics | EvidenceSource::AksAuditTable
            ),
        }
    }
}

/// One `would-deny` removal: who removed which unauthorized finalizers, where, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub username: String,
    pub groups: Vec<String>,
    pub finalizers: Vec<(String, FinalizerField)>,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: Option<String>,
    pub name: String,
    pub time: Option<jiff::Timestamp>,
    /// kube-apiserver's audit ID: its events repeat per stage.
    pub audit_id: Option<String>,
    /// Which kind of evidence this came from.
    pub source: EvidenceSource,
    /// The webhook's records and recordings: whether the review's caller
    /// presented a client certificate verified against `serve --client-ca`
    /// (`None`: the record does not say, as older versions wrote them).
    /// kube-apiserver's audit events: `Some(true)`, the API server
    /// authenticated the user itself.
    pub authenticated: Option<bool>,
    /// Enforce mode denied it (`denied`), rather than warn mode letting it
    /// through (`would-deny`): the controller tried, and its object stayed.
    pub denied: bool,
}

/// What one line (or file) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Evidence of a kind this command reads, `Some` when it is a `would-deny`.
    Evidence(EvidenceSource, Option<Box<Seen>>),
    /// A `would-deny` removal that never happened ([`Skip`]): evidence read,
    /// no rule made from it. kube-apiserver's audit ID, when it has one: its
    /// other stages are the same request.
    Skipped(EvidenceSource, Skip, Option<String>),
    /// Not evidence.
    Other,
}

/// Why a `would-deny` removal is not evidence: nothing was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// A dry run (`?dryRun=All`, `"dryRun": true`): the webhook judged it, nothing was stored.
    DryRun,
    /// kube-apiserver answered with a failure (`responseStatus.code` not
    /// 2xx): another admission step, or the API server, refused it.
    Failed,
}

impl Skip {
    pub fn describe(self) -> &'static str {
        match self {
            Skip::DryRun => "of dry-run requests (dryRun: nothing was changed)",
            Skip::Failed => {
                "that kube-apiserver answered with a failure (responseStatus.code not 2xx: another admission step or the API server refused them, nothing was removed)"
            }
        }
    }
}

/// `seen`, unless its request was a dry run or failed.
fn judged(source: EvidenceSource, seen: Option<Seen>, skip: Option<Skip>) -> Parsed {
    match (seen, skip) {
        (Some(seen), Some(why)) => Parsed::Skipped(source, why, seen.audit_id),
        (seen, _) => Parsed::Evidence(source, seen.map(Box::new)),
    }
}

/// Whether a request URI asks for a dry run: a `dryRun` query parameter,
/// whatever its value (kube-apiserver refuses any but `All`).
fn dry_run_uri(uri: &str) -> bool {
    let Some((_, query)) = uri.split_once('?') else {
        return false;
    };
    query.split(['&', ';']).any(|pair| {
        let key = pair.split('=').next().unwrap_or_default().replace('+', " ");
        percent_encoding::percent_decode_str(&key).decode_utf8_lossy() == "dryRun"
    })
}

pub(super) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

pub(super) fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn time(value: &Value) -> Option<jiff::Timestamp> {
    value.as_str()?.parse().ok()
}

fn split_list(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// One line of a log: a webhook audit record, a kube-apiserver audit event, or neither.
pub fn parse_line(line: &str) -> Parsed {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return Parsed::Other;
    };
    parse_value(&value)
}

/// One JSON value: a webhook audit record, a kube-apiserver audit event, or neither.
pub(super) fn parse_value(value: &Value) -> Parsed {
    if value["kind"] == "FinalizerRemoval" && value.get("decision").is_some() {
        let dry = (value["dryRun"] == true).then_some(Skip::DryRun);
        return judged(EvidenceSource::WebhookAudit, webhook_record(value), dry);
    }
    if value["kind"] == "Event"
        && value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("audit.k8s.io/"))
    {
        let seen = apiserver_event(value);
        // The webhook's denial is kube-apiserver's 403, with the webhook's
        // audit annotations: what enforce refused, not a failure of its own.
        let denial = seen.as_ref().is_some_and(|s| s.denied);
        let answered = |code: u64| (200..300).contains(&code) || (denial && code == 403);
        let failed = value["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|code| !answered(code));
        let skip = if value["requestURI"].as_str().is_some_and(dry_run_uri) {
            Some(Skip::DryRun)
        } else {
            failed.then_some(Skip::Failed)
        };
        return judged(EvidenceSource::ApiserverAudit, seen, skip);
    }
    Parsed::Other
}

/// Whether a decision is a removal no rule allowed: `would-deny` (warn
/// mode), or `denied` (enforce mode); `None` for any other decision.
fn refused(decision: &Value) -> Option<bool> {
    match decision.as_str()? {
        "would-deny" => Some(false),
        "denied" => Some(true),
        _ => None,
    }
}

fn webhook_record(value: &Value) -> Option<Seen> {
    let denied = refused(&value["decision"])?;
    let finalizers: Vec<(String, FinalizerField)> = value["removedFinalizers"]
        .as_array()?
        .iter()
        .filter(|r| r.get("authorizedBy").is_none_or(Value::is_null))
        .filter_map(|r| {
            let field = if r["field"] == "spec.finalizers" {
                FinalizerField::Spec
            } else {
                FinalizerField::Metadata
            };
            Some((r["finalizer"].as_str()?.to_string(), field))
        })
        .collect();
    if finalizers.is_empty() {
        return None;
    }
    let resource = text(&value["resource"]);
    let (resource, group) = match resource.split_once('.') {
        Some((r, g)) => (r.to_string(), g.to_string()),
        None => (resource, String::new()),
    };
    Some(Seen {
        username: text(&value["user"]),
        groups: strings(&value["groups"]),
        finalizers,
        group,
        resource,
        subresource: text(&value["subresource"]),
        namespace: value["namespace"].as_str().map(String::from),
        name: text(&value["name"]),
        time: time(&value["time"]),
        audit_id: None,
        source: EvidenceSource::WebhookAudit,
        authenticated: value["authenticated"].as_bool(),
        denied,
    })
}

fn apiserver_event(value: &Value) -> Option<Seen> {
    let annotations = value["annotations"].as_object()?;
    let annotation = |key: &str| {
        annotations
            .get(&format!("{WEBHOOK_NAME}/{key}"))
            .and_then(Value::as_str)
    };
    let denied = refused(&Value::from(annotation("decision")?))?;
    let finalizers: Vec<(String, FinalizerField)> =
        split_list(annotation("unauthorized-finalizers"))
            .into_iter()
            .map(|f| (f, FinalizerField::Metadata))
            .chain(
                split_list(annotation("unauthorized-spec-finalizers"))
                    .into_iter()
                    .map(|f| (f, FinalizerField::Spec)),
            )
            .collect();
    if finalizers.is_empty() {
        return None;
    }
    let object = &value["objectRef"];
    // The webhook judged the impersonated identity, when there is one.
    let user = match &value["impersonatedUser"] {
        Value::Object(_) => &value["impersonatedUser"],
        _ => &value["user"],
    };
    Some(Seen {
        username: text(&user["username"]),
        groups: strings(&user["groups"]),
        finalizers,
        group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: object["namespace"].as_str().map(String::from),
        name: text(&object["name"]),
        time: time(&value["requestReceivedTimestamp"]),
        audit_id: value["auditID"].as_str().map(String::from),
        source: EvidenceSource::ApiserverAudit,
        authenticated: Some(true),
        denied,
    })
}

/// A recording file's content, parsed; `Other` unless it is a recording.
pub fn parse_recording(value: &Value) -> Parsed {
    if value["kind"] != crate::trail::recording::KIND
        || value["apiVersion"] != crate::trail::recording::API_VERSION
    {
        return Parsed::Other;
    }
    let dry = (value["review"]["request"]["dryRun"] == true).then_some(Skip::DryRun);
    judged(EvidenceSource::Recording, recording(value), dry)
}

/// A recording names the removed finalizers, not which were unauthorized:
/// those a built-in controller owns are left out, and `--merge`'s rules
/// drop the ones it already covers.
fn recording(value: &Value) -> Option<Seen> {
    let denied = refused(&value["decision"])?;
    let request = &value["review"]["request"];
    let username = text(&request["userInfo"]["username"]);
    let builtins = Policy::embedded_default();
    let removed = |field: FinalizerField, old: &Value, new: &Value| {
        let new = strings(new);
        strings(old)
            .into_iter()
            .filter(|f| !new.contains(f))
            .filter(|f| builtins.builtin_owner(&username, f, field).is_none())
            .map(|f| (f, field))
            .collect::<Vec<_>>()
    };
    let mut finalizers = removed(
        FinalizerField::Metadata,
        &request["oldObject"]["metadata"]["finalizers"],
        &request["object"]["metadata"]["finalizers"],
    );
    if request["subResource"] == "finalize" {
        finalizers.extend(removed(
            FinalizerField::Spec,
            &request["oldObject"]["spec"]["finalizers"],
            &request["object"]["spec"]["finalizers"],
        ));
    }
    if finalizers.is_empty() {
        return None;
    }
    Some(Seen {
        username: username.clone(),
        groups: strings(&request["userInfo"]["groups"]),
        finalizers,
        group: text(&request["resource"]["group"]),
        resource: text(&request["resource"]["resource"]),
        subresource: text(&request["subResource"]),
        namespace: request["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(String::from),
        name: text(&request["name"]),
        time: time(&value["recordedAt"]),
        audit_id: None,
        source: EvidenceSource::Recording,
        authenticated: value["authenticated"].as_bool(),
        denied,
    })
}

/// What was read from the paths.
#[derive(Debug, Default)]
pub struct Evidence {
    /// How kube-apiserver's audit events are expected (`--format`): those
    /// delivered otherwise are not read.
    pub format: EvidenceFormat,
    pub seen: Vec<Seen>,
    /// Evidence entries read, per kind (would-deny or not).
    pub read: BTreeMap<EvidenceSource, usize>,
    /// Entries carrying a removal no rule allowed (counted or skipped), per kind.
    pub refused: BTreeMap<EvidenceSource, usize>,
    /// Would-deny removals that never happened, by why.
    pub skipped: BTreeMap<Skip, usize>,
    audit_ids: HashSet<String>,
    /// Audit IDs of requests that never happened: their other stages are skipped too.
    skipped_ids: HashSet<String>,
}

impl Evidence {
    /// Adds one parsed line or file; `false` when it was not evidence.
    pub fn add(&mut self, parsed: Parsed) -> bool {
        match parsed {
            Parsed::Other => false,
            Parsed::Skipped(source, ..) | Parsed::Evidence(source, _)
                if !self.format.reads(source) =>
            {
                false
            }
            Parsed::Skipped(source, why, audit_id) => {
                *self.read.entry(source).or_default() += 1;
                *self.refused.entry(source).or_default() += 1;
                let first = match audit_id {
                    // A stage read before (RequestReceived) counted the request: no longer.
                    Some(id) => {
                        self.seen.retain(|s| s.audit_id.as_ref() != Some(&id));
                        self.audit_ids.insert(id.clone());
                        self.skipped_ids.insert(id)
                    }
                    None => true,
                };
                if first {
                    *self.skipped.entry(why).or_default() += 1;
                }
                true
            }
            Parsed::Evidence(source, seen) => {
                *self.read.entry(source).or_default() += 1;
                if seen.is_some() {
                    *self.refused.entry(source).or_default() += 1;
                }
                if let Some(seen) = seen.filter(|s| {
                    s.audit_id
                        .as_ref()
                        .is_none_or(|id| !self.skipped_ids.contains(id))
                }) {
                    // kube-apiserver writes an event per stage of one request.
                    let fresh = match &seen.audit_id {
                        Some(id) => self.audit_ids.insert(id.clone()),
                        None => true,
                    };
                    if fresh {
                        self.seen.push(*seen);
                    }
                }
                true
            }
        }
    }
}

/// The namespace of `seen`'s object, as the policy reads it: `None` for
/// cluster-scoped objects, Namespaces included.
pub(super) fn object_namespace(seen: &Seen) -> Option<String> {
    target(seen).object_namespace().map(String::from)
}

/// What `seen`'s write was written to.
pub(super) fn target(seen: &Seen) -> Target<'_> {
    Target {
        group: &seen.group,
        resource: &seen.resource,
        subresource: &seen.subresource,
        namespace: seen.namespace.as_deref(),
        name: &seen.name,
    }
}

/// `resource` or `resource.group`.
pub(super) fn resource_name(seen: &Seen) -> String {
    if seen.group.is_empty() {
        seen.resource.clone()
    } else {
        format!("{}.{}", seen.resource, seen.group)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{CONTROLLER, apiserver, denial, evidence};
    use super::super::identities::Identity;
    use super::super::render::render;
    use super::super::rules::suggest;
    use super::*;

    #[test]
    fn lines_are_told_apart_by_content() {
        let table: Vec<(String, Option<EvidenceSource>, bool)> = vec![
            (
                apiserver("1", CONTROLLER, "would-deny", "example.com/a"),
                Some(EvidenceSource::ApiserverAudit),
                true,
            ),
            (
                apiserver("2", CONTROLLER, "authorized", ""),
                Some(EvidenceSource::ApiserverAudit),
                false,
            ),
            (
                json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "annotations": {"authorization.k8s.io/decision": "allow"}}).to_string(),
                Some(EvidenceSource::ApiserverAudit),
                false,
            ),
            (
                json!({"time": "2026-11-23T19:00:00Z", "kind": "FinalizerRemoval", "user": "alice", "groups": ["developers"],
                    "operation": "UPDATE", "resource": "configmaps", "namespace": "team-a", "name": "c",
                    "removedFinalizers": [{"finalizer": "example.com/x", "field": "metadata.finalizers"},
                                          {"finalizer": "example.com/y", "field": "metadata.finalizers", "authorizedBy": "rule r"}],
                    "decision": "would-deny", "mode": "warn", "dryRun": false}).to_string(),
                Some(EvidenceSource::WebhookAudit),
                true,
            ),
            (
                json!({"kind": "FinalizerRemoval", "decision": "override", "removedFinalizers": []}).to_string(),
                Some(EvidenceSource::WebhookAudit),
                false,
            ),
            ("not json".into(), None, false),
            (json!({"level": "info", "msg": "started"}).to_string(), None, false),
        ];
        for (line, source, would_deny) in table {
            match parse_line(&line) {
                Parsed::Evidence(s, seen) => {
                    assert_eq!(Some(s), source, "{line}");
                    assert_eq!(seen.is_some(), would_deny, "{line}");
                }
                Parsed::Skipped(..) => panic!("{line}"),
                Parsed::Other => assert_eq!(source, None, "{line}"),
            }
        }
        let Parsed::Evidence(_, Some(seen)) = parse_line(&json!({"kind": "FinalizerRemoval", "user": "alice", "resource": "widgets.example.com",
            "removedFinalizers": [{"finalizer": "example.com/x", "field": "metadata.finalizers"},
                                  {"finalizer": "example.com/y", "field": "metadata.finalizers", "authorizedBy": "rule r"}],
            "decision": "would-deny"}).to_string()) else { panic!() };
        assert_eq!(
            seen.finalizers,
            [("example.com/x".to_string(), FinalizerField::Metadata)]
        );
        assert_eq!(
            (seen.group.as_str(), seen.resource.as_str()),
            ("example.com", "widgets")
        );
    }

    #[test]
    fn a_recording() {
        let value = json!({
            "apiVersion": "finalizer-guard.io/v1alpha1", "kind": "Recording",
            "recordedAt": "2026-11-23T19:00:00Z", "mode": "warn", "decision": "would-deny", "allowed": true,
            "review": {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
                "resource": {"group": "", "version": "v1", "resource": "namespaces"},
                "subResource": "finalize", "name": "team-a", "namespace": "team-a", "operation": "UPDATE",
                "userInfo": {"username": CONTROLLER, "groups": ["system:serviceaccounts"]},
                "object": {"metadata": {"name": "team-a", "finalizers": ["a.example.com/x"]}, "spec": {"finalizers": []}},
                "oldObject": {"metadata": {"name": "team-a", "finalizers": ["a.example.com/x"]}, "spec": {"finalizers": ["kubernetes", "example.com/ns"]}},
            }},
        });
        let Parsed::Evidence(EvidenceSource::Recording, Some(seen)) = parse_recording(&value)
        else {
            panic!()
        };
        assert_eq!(
            seen.finalizers,
            [
                ("kubernetes".to_string(), FinalizerField::Spec),
                ("example.com/ns".to_string(), FinalizerField::Spec)
            ]
        );
        assert_eq!(parse_recording(&json!({"kind": "Other"})), Parsed::Other);
    }

    #[test]
    fn the_impersonated_identity_is_the_one_judged() {
        let proxy = "system:serviceaccount:cattle-impersonation-system:cattle-impersonation-u-7x2k";
        let event = |id: &str, impersonated: Value| {
            let mut v: Value =
                serde_json::from_str(&apiserver(id, proxy, "would-deny", "example.com/a")).unwrap();
            v["impersonatedUser"] = impersonated;
            v.to_string()
        };
        let e = evidence(&[
            // A person, through the proxy: a comment, no rule for anyone.
            event(
                "1",
                json!({"username": "u-7x2k", "groups": ["team-a-admins", "system:authenticated"]}),
            ),
            // A controller, through the proxy: its rule, not the proxy's.
            event(
                "2",
                json!({"username": CONTROLLER, "groups": ["system:serviceaccounts"]}),
            ),
        ]);
        assert_eq!(e.seen[0].username, "u-7x2k");
        assert_eq!(e.seen[0].groups, ["team-a-admins", "system:authenticated"]);
        let s = suggest(&e.seen, None);
        assert_eq!(
            s.controllers.keys().collect::<Vec<_>>(),
            [&Identity::ServiceAccount(
                "widgets:widget-controller".into()
            )]
        );
        assert_eq!(
            s.people.keys().collect::<Vec<_>>(),
            [&Identity::Person("u-7x2k".into())]
        );
        let yaml = render(&s, None);
        assert!(!yaml.contains("cattle-impersonation"), "{yaml}");
        assert_eq!(Policy::from_yaml(&yaml).unwrap().rules.len(), 1, "{yaml}");
        // No impersonation: the user.
        let e = evidence(&[event("3", Value::Null)]);
        assert_eq!(e.seen[0].username, proxy);
    }

    /// A dry run, or a request kube-apiserver answered with a failure,
    /// removed nothing: read, counted as skipped, no rule made from it.
    #[test]
    fn dry_runs_and_failed_requests_are_not_evidence() {
        let event = |id: &str, uri: &str, code: Option<u16>, stage: &str| {
            let mut e: Value =
                serde_json::from_str(&apiserver(id, CONTROLLER, "would-deny", "example.com/a"))
                    .unwrap();
            e["requestURI"] = json!(uri);
            e["stage"] = json!(stage);
            if let Some(code) = code {
                e["responseStatus"] = json!({"code": code});
            }
            e.to_string()
        };
        let record = |dry: bool| {
            json!({"time": "2026-11-23T19:00:00Z", "kind": "FinalizerRemoval", "uid": "u1",
                "user": CONTROLLER, "groups": [], "operation": "UPDATE", "resource": "widgets.example.com",
                "subresource": "", "namespace": "team-a", "name": "w1",
                "removedFinalizers": [{"finalizer": "example.com/a", "field": "metadata.finalizers"}],
                "decision": "would-deny", "mode": "warn", "dryRun": dry, "authenticated": true})
            .to_string()
        };
        let uri = "/apis/example.com/v1/namespaces/team-a/widgets/w1";
        let e = evidence(&[
            event(
                "1",
                &format!("{uri}?dryRun=All"),
                Some(200),
                "ResponseComplete",
            ),
            event(
                "2",
                &format!("{uri}?fieldManager=x&dry%52un=All"),
                None,
                "ResponseComplete",
            ),
            // Its first stage has no status yet; the last says it failed.
            event("3", uri, None, "RequestReceived"),
            event("3", uri, Some(403), "ResponseComplete"),
            event("4", uri, Some(500), "ResponseComplete"),
            event("4", uri, None, "RequestReceived"),
            record(true),
        ]);
        assert_eq!(e.seen, [], "{:#?}", e.seen);
        assert_eq!(
            e.skipped,
            BTreeMap::from([(Skip::DryRun, 3), (Skip::Failed, 2)])
        );
        assert!(suggest(&e.seen, None).rules().is_empty());
        // A request that succeeded, and a record that is no dry run, are evidence.
        let e = evidence(&[
            event(
                "5",
                &format!("{uri}?fieldManager=dryRunner"),
                Some(200),
                "ResponseComplete",
            ),
            record(false),
        ]);
        assert_eq!(e.seen.len(), 2);
        assert!(e.skipped.is_empty());
        let value: Value = json!({"kind": crate::trail::recording::KIND, "apiVersion": crate::trail::recording::API_VERSION,
            "decision": "would-deny", "review": {"request": {"dryRun": true, "userInfo": {"username": CONTROLLER},
            "resource": {"group": "example.com", "resource": "widgets"}, "namespace": "team-a", "name": "w1",
            "oldObject": {"metadata": {"finalizers": ["example.com/a"]}}, "object": {"metadata": {}}}}});
        assert!(matches!(
            parse_recording(&value),
            Parsed::Skipped(EvidenceSource::Recording, Skip::DryRun, None)
        ));
    }

    /// Enforce mode's denials are evidence: kube-apiserver's 403 carrying
    /// the webhook's `denied` annotations, the webhook's `denied` records,
    /// and recordings of denials. A `would-deny` answered with a failure is
    /// still a request that failed for another reason.
    #[test]
    fn denials_are_evidence_of_what_enforce_refused() {
        let e = evidence(&[
            denial("1", CONTROLLER, "team-c", 403),
            denial("2", CONTROLLER, "team-c", 403),
            apiserver("3", CONTROLLER, "would-deny", "example.com/a"),
        ]);
        assert_eq!(e.seen.len(), 3);
        assert_eq!(e.seen.iter().filter(|s| s.denied).count(), 2);
        assert!(e.skipped.is_empty(), "{:?}", e.skipped);
        // A would-deny that failed, and a denial answered otherwise than by the webhook.
        let mut failed: Value =
            serde_json::from_str(&apiserver("4", CONTROLLER, "would-deny", "example.com/a"))
                .unwrap();
        failed["responseStatus"] = json!({"code": 409});
        let e = evidence(&[failed.to_string(), denial("5", CONTROLLER, "team-c", 500)]);
        assert!(e.seen.is_empty());
        assert_eq!(e.skipped.get(&Skip::Failed), Some(&2));
        // The webhook's own record of a denial.
        let record = json!({"kind": "FinalizerRemoval", "user": CONTROLLER, "resource": "widgets.example.com", "namespace": "team-c",
            "removedFinalizers": [{"finalizer": "example.com/a", "field": "metadata.finalizers"}],
            "decision": "denied", "mode": "enforce", "dryRun": false, "authenticated": true});
        let Parsed::Evidence(EvidenceSource::WebhookAudit, Some(seen)) =
            parse_line(&record.to_string())
        else {
            panic!()
        };
        assert!(seen.denied);
        // Other decisions are not removals no rule allowed.
        for decision in ["approval-denied", "override", "authorized"] {
            let mut r = record.clone();
            r["decision"] = decision.into();
            assert!(
                matches!(parse_line(&r.to_string()), Parsed::Evidence(_, None)),
                "{decision}"
            );
        }
        // Denials make no rule of their own: the rule is the would-deny's,
        // and the denial is a note.
        let e = evidence(&[
            denial("1", CONTROLLER, "team-c", 403),
            apiserver("3", CONTROLLER, "would-deny", "example.com/a"),
        ]);
        let yaml = render(&suggest(&e.seen, None), None);
        assert!(
            yaml.contains("# suggested from 1 would-deny removal(s)"),
            "{yaml}"
        );
        assert!(
            yaml.contains(
                "# seen in team-a, outside its own namespace widgets: acts cluster-wide\n"
            ),
            "{yaml}"
        );
        assert!(
            yaml.contains("#   1 denied removal(s) by system:serviceaccount:widgets:widget-controller: no rule suggested: "),
            "{yaml}"
        );
    }
}
