//! kube-apiserver's audit events as managed control planes deliver them,
//! told apart by their shape (`entries`, `line`), or chosen with
//! `--format` ([`EvidenceFormat`](super::EvidenceFormat)):
//! - EKS: CloudWatch Logs events (`aws logs filter-log-events` or
//!   `get-log-events` output, `{"events": [{"message": EVENT}]}`), and the
//!   lines of an export to S3 (`TIMESTAMP EVENT`): each message the whole
//!   audit event.
//! - GKE: Cloud Audit Logs entries (`gcloud logging read --format=json`, a
//!   JSON array of LogEntry): the user, the object and the status in the
//!   `protoPayload` (an AuditLog), kube-apiserver's audit annotations in the
//!   entry's `labels`. No groups, and no request URI (so no dry run).
//! - AKS: the `kube-audit` and `kube-audit-admin` categories: records of a
//!   storage account or an Event Hub (`properties.log`) and rows of the
//!   `AzureDiagnostics` table (`log_s`), each the whole audit event; and
//!   rows of the resource-specific `AKSAudit` and `AKSAuditAdmin` tables,
//!   a column per field, with no impersonated user.
//!
//! Each is read as kube-apiserver's audit event it stands for, through the
//! same reading (`evidence::parse_value`); what a delivery leaves out is said by
//! [`lacks`], never assumed.

use serde_json::{Value, json};

use super::evidence::{EvidenceSource, Parsed, parse_line, parse_recording, parse_value};

/// What a delivery leaves out of kube-apiserver's audit event that `policy
/// suggest` uses, and what that means for the rules suggested: one
/// sentence each, none for a delivery of the whole event.
pub fn lacks(source: EvidenceSource) -> &'static [&'static str] {
    match source {
        EvidenceSource::CloudAuditLogs => &[
            "no groups: an entry names the user (authenticationInfo.principalEmail, or authoritySelector when impersonating) and none of its groups, so a member of system:masters (a cluster administrator) or of system:unauthenticated is told by its username alone and a rule may be suggested for it when that username looks like software (system:...): read each rule's identity before enforcing; and no entry confirms a webhook record that names groups",
            "no dry run: an entry has no request URI, so a server-side dry run (kubectl --dry-run=server), which removed nothing, counts as a removal and can make a rule",
        ],
        EvidenceSource::AksAuditTable => &[
            "no impersonated user: the table has no impersonatedUser column, so a request made through impersonation (kubectl --as, a proxy such as Rancher's) names the impersonator, not the identity the webhook judged, and a rule may be suggested for the proxy's identity, letting it remove finalizers for everyone it acts for: query AzureDiagnostics (log_s) or read a storage account's records instead, which hold the whole audit event",
        ],
        _ => &[],
    }
}

/// Every entry one JSON value holds: a CloudWatch or Azure wrapper's
/// events, an array's elements, or the value itself.
pub(super) fn entries(value: &Value, out: &mut dyn FnMut(Parsed)) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| out(entry(item))),
        Value::Object(map) => {
            let wrapped = ["events", "records"]
                .iter()
                .find_map(|key| map.get(*key).and_then(Value::as_array));
            match wrapped {
                Some(items) => items.iter().for_each(|item| out(entry(item))),
                None => out(entry(value)),
            }
        }
        _ => {}
    }
}

/// One line of a log: JSON ([`entries`]), or a line of a CloudWatch
/// export to S3, `TIMESTAMP EVENT`. False for a line that is neither, whose
/// evidence, if it held any, cannot be read.
pub(super) fn line(text: &str, out: &mut dyn FnMut(Parsed)) -> bool {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => {
            entries(&value, out);
            true
        }
        Err(_) => match exported(text).map(serde_json::from_str::<Value>) {
            Some(Ok(event)) => {
                out(retag(parse_value(&event), EvidenceSource::CloudWatch));
                true
            }
            _ => false,
        },
    }
}

/// The message of a line of a CloudWatch Logs export to S3: an RFC 3339
/// timestamp, a space, the message.
fn exported(line: &str) -> Option<&str> {
    let (stamp, message) = line.split_once(' ')?;
    stamp.parse::<jiff::Timestamp>().ok()?;
    message.trim_start().starts_with('{').then_some(message)
}

/// One entry, of whichever kind its shape says.
pub(super) fn entry(value: &Value) -> Parsed {
    let Value::Object(map) = value else {
        return Parsed::Other;
    };
    for parsed in [parse_value(value), parse_recording(value)] {
        if parsed != Parsed::Other {
            return parsed;
        }
    }
    if map.contains_key("protoPayload") {
        return gke(value);
    }
    let text = |key: &str| map.get(key).and_then(Value::as_str);
    if let Some(message) = text("message")
        && ["logStreamName", "eventId", "ingestionTime"]
            .iter()
            .any(|k| map.contains_key(*k))
    {
        return retag(parse_line(message), EvidenceSource::CloudWatch);
    }
    if let Some(category) = text("category").or_else(|| text("Category")) {
        if !matches!(category, "kube-audit" | "kube-audit-admin") {
            return Parsed::Other;
        }
        let log = value["properties"]["log"]
            .as_str()
            .or_else(|| text("log_s"));
        return match log {
            Some(log) => retag(parse_line(log), EvidenceSource::AzureDiagnostics),
            None => Parsed::Other,
        };
    }
    if map.contains_key("AuditId") && map.contains_key("ObjectRef") {
        return aks_row(value);
    }
    Parsed::Other
}

/// kube-apiserver's audit event, read as delivered by `source`.
fn retag(parsed: Parsed, source: EvidenceSource) -> Parsed {
    match parsed {
        Parsed::Evidence(EvidenceSource::ApiserverAudit, seen) => Parsed::Evidence(
            source,
            seen.map(|mut s| {
                s.source = source;
                s
            }),
        ),
        Parsed::Skipped(EvidenceSource::ApiserverAudit, why, id) => {
            Parsed::Skipped(source, why, id)
        }
        other => other,
    }
}

/// A row of `AKSAudit` or `AKSAuditAdmin`: its columns are the event's
/// fields; the dynamic ones are objects, or JSON text as `az monitor
/// log-analytics query` prints them.
fn aks_row(row: &Value) -> Parsed {
    let dynamic = |key: &str| match &row[key] {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        other => other.clone(),
    };
    let event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "auditID": row["AuditId"],
        "stage": row["Stage"],
        "requestURI": row["RequestUri"],
        "verb": row["Verb"],
        "user": dynamic("User"),
        "objectRef": dynamic("ObjectRef"),
        "annotations": dynamic("Annotations"),
        "responseStatus": dynamic("ResponseStatus"),
        "requestReceivedTimestamp": row["RequestReceivedTime"],
    });
    retag(parse_value(&event), EvidenceSource::AksAuditTable)
}

/// A Cloud Audit Logs entry of GKE's kube-apiserver (`serviceName:
/// k8s.io`), as the audit event it stands for.
fn gke(entry: &Value) -> Parsed {
    let payload = &entry["protoPayload"];
    if payload["serviceName"] != "k8s.io" {
        // GKE's own API (container.googleapis.com), not kube-apiserver.
        return Parsed::Other;
    }
    let Some(object) = payload["resourceName"].as_str().and_then(gke_object) else {
        return Parsed::Evidence(EvidenceSource::CloudAuditLogs, None);
    };
    let auth = &payload["authenticationInfo"];
    // Impersonating (kubectl --as), the impersonated user is the one judged.
    let username = auth["authoritySelector"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| auth["principalEmail"].as_str());
    let event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "auditID": entry["operation"]["id"].as_str().or_else(|| entry["insertId"].as_str()),
        "stage": "ResponseComplete",
        "user": {"username": username},
        "objectRef": object,
        "annotations": entry["labels"],
        "requestReceivedTimestamp": entry["timestamp"],
        "responseStatus": {"code": gke_code(payload)},
    });
    retag(parse_value(&event), EvidenceSource::CloudAuditLogs)
}

/// The HTTP status kube-apiserver answered: a failed request's `response`
/// is the Kubernetes Status (with its code); otherwise the AuditLog's
/// `status`, a google.rpc code (0 OK, 7 PERMISSION_DENIED: 403).
fn gke_code(payload: &Value) -> u64 {
    let response = &payload["response"];
    if response["status"] == "Failure"
        && let Some(code) = response["code"].as_u64()
    {
        return code;
    }
    match payload["status"]["code"].as_u64().unwrap_or(0) {
        0 => 200,
        7 => 403,
        16 => 401,
        5 => 404,
        6 | 10 => 409,
        _ => 500,
    }
}

/// The object a GKE `resourceName` names: `GROUP/VERSION/namespaces/NS/RESOURCE/NAME[/SUB]`
/// (`core` for the core group), `GROUP/VERSION/RESOURCE/NAME[/SUB]` for a
/// cluster-scoped one (a Namespace: `core/v1/namespaces/NAME[/finalize]`);
/// `None` for a collection or anything else.
fn gke_object(resource_name: &str) -> Option<Value> {
    let parts: Vec<&str> = resource_name.split('/').collect();
    let [group, version, rest @ ..] = parts.as_slice() else {
        return None;
    };
    let group = if *group == "core" { "" } else { *group };
    let (namespace, resource, name, sub) = match rest {
        ["namespaces", ns, resource, name, sub @ ..] => (Some(*ns), *resource, *name, sub),
        ["namespaces", name, sub @ ..]
            if sub.iter().all(|s| matches!(*s, "status" | "finalize")) =>
        {
            (Some(*name), "namespaces", *name, sub)
        }
        [resource, name, sub @ ..] if *resource != "namespaces" => (None, *resource, *name, sub),
        _ => return None,
    };
    if [group, *version, resource, name]
        .iter()
        .any(|s| s.contains(char::is_whitespace))
        || resource.is_empty()
        || name.is_empty()
        || sub.len() > 1
    {
        return None;
    }
    Some(json!({
        "apiGroup": group,
        "apiVersion": version,
        "resource": resource,
        "namespace": namespace,
        "name": name,
        "subresource": sub.first(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::evidence::{Evidence, EvidenceFormat, Skip};
    use super::super::fixtures::{CONTROLLER, apiserver, denial};
    use super::*;
    use crate::policy::FinalizerField;

    fn read(values: &[Value]) -> Evidence {
        let mut e = Evidence::default();
        for v in values {
            entries(v, &mut |p| {
                e.add(p);
            });
        }
        e
    }

    fn event(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn cloudwatch_events_and_the_s3_export() {
        let doc = json!({"events": [
            {"logStreamName": "kube-apiserver-audit-0a1b", "timestamp": 1_795_000_000_000u64,
             "message": apiserver("1", CONTROLLER, "would-deny", "example.com/a"), "ingestionTime": 1, "eventId": "e1"},
            {"logStreamName": "authenticator-0a1b", "timestamp": 1, "message": "time=... level=info msg=\"access granted\"", "eventId": "e2"},
            {"logStreamName": "kube-apiserver-audit-0a1b", "timestamp": 1, "message": denial("2", CONTROLLER, "team-c", 403), "eventId": "e3"},
        ], "searchedLogStreams": []});
        let e = read(&[doc]);
        assert_eq!(e.read.get(&EvidenceSource::CloudWatch), Some(&2));
        assert_eq!(e.seen.len(), 2);
        assert!(
            e.seen
                .iter()
                .all(|s| s.source == EvidenceSource::CloudWatch)
        );
        assert_eq!(e.seen.iter().filter(|s| s.denied).count(), 1);

        let mut e = Evidence::default();
        let export = format!(
            "2026-11-23T19:00:00.512Z {}",
            apiserver("3", CONTROLLER, "would-deny", "example.com/a")
        );
        line(&export, &mut |p| {
            e.add(p);
        });
        line("2026-11-23T19:00:00.512Z not an event", &mut |p| {
            e.add(p);
        });
        line("yesterday {\"kind\":\"Event\"}", &mut |p| {
            e.add(p);
        });
        assert_eq!(e.read.get(&EvidenceSource::CloudWatch), Some(&1));
        assert_eq!(e.seen[0].username, CONTROLLER);
        assert_eq!(e.seen[0].source, EvidenceSource::CloudWatch);
    }

    fn gke_entry(labels: Value, resource: &str, status: Value) -> Value {
        json!({
            "insertId": "abc", "logName": "projects/p/logs/cloudaudit.googleapis.com%2Factivity",
            "operation": {"id": "7f3c", "producer": "k8s.io", "first": true, "last": true},
            "protoPayload": {
                "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
                "authenticationInfo": {"principalEmail": CONTROLLER},
                "methodName": "com.example.v1.widgets.update",
                "resourceName": resource, "serviceName": "k8s.io", "status": status,
            },
            "resource": {"type": "k8s_cluster", "labels": {"cluster_name": "c", "location": "l", "project_id": "p"}},
            "timestamp": "2026-11-23T19:00:00.5Z", "labels": labels,
        })
    }

    #[test]
    fn gke_entries() {
        let labels = json!({
            "authorization.k8s.io/decision": "allow",
            "finalizers.finalizer-guard.io/decision": "would-deny",
            "finalizers.finalizer-guard.io/unauthorized-finalizers": "example.com/a",
        });
        let e = read(&[json!([
            gke_entry(
                labels.clone(),
                "example.com/v1/namespaces/team-a/widgets/w1",
                json!({})
            ),
            gke_entry(
                json!({"authorization.k8s.io/decision": "allow"}),
                "core/v1/namespaces/team-a/configmaps/c",
                json!({})
            ),
        ])]);
        assert_eq!(e.read.get(&EvidenceSource::CloudAuditLogs), Some(&2));
        assert_eq!(e.seen.len(), 1);
        let s = &e.seen[0];
        assert_eq!(
            (
                s.group.as_str(),
                s.resource.as_str(),
                s.namespace.as_deref(),
                s.name.as_str()
            ),
            ("example.com", "widgets", Some("team-a"), "w1")
        );
        assert_eq!(s.username, CONTROLLER);
        assert!(s.groups.is_empty());
        assert_eq!(
            s.finalizers,
            [("example.com/a".to_string(), FinalizerField::Metadata)]
        );

        // The webhook's denial: PERMISSION_DENIED; another failure is skipped.
        let mut denied = labels.clone();
        denied["finalizers.finalizer-guard.io/decision"] = "denied".into();
        let mut failed = gke_entry(
            labels.clone(),
            "example.com/v1/namespaces/team-a/widgets/w2",
            json!({"code": 6}),
        );
        failed["operation"]["id"] = "other".into();
        let e = read(&[json!([
            gke_entry(
                denied.clone(),
                "example.com/v1/namespaces/team-c/widgets/w1",
                json!({"code": 7})
            ),
            failed,
        ])]);
        assert_eq!(e.seen.len(), 1, "{:?}", e.seen);
        assert!(e.seen[0].denied);
        assert_eq!(e.skipped.get(&Skip::Failed), Some(&1));

        // Impersonating: the impersonated user.
        let mut v = gke_entry(
            labels.clone(),
            "example.com/v1/namespaces/team-a/widgets/w1",
            json!({}),
        );
        v["protoPayload"]["authenticationInfo"]["authoritySelector"] = "alice".into();
        assert_eq!(read(&[v]).seen[0].username, "alice");

        // GKE's own API is not kube-apiserver.
        let mut v = gke_entry(labels, "x", json!({}));
        v["protoPayload"]["serviceName"] = "container.googleapis.com".into();
        assert_eq!(entry(&v), Parsed::Other);
    }

    #[test]
    fn gke_resource_names() {
        let object = |name: &str| {
            gke_object(name).map(|o| {
                (
                    o["apiGroup"].as_str().unwrap().to_string(),
                    o["resource"].as_str().unwrap().to_string(),
                    o["namespace"].as_str().map(String::from),
                    o["name"].as_str().unwrap().to_string(),
                    o["subresource"].as_str().map(String::from),
                )
            })
        };
        let s = |v: &str| v.to_string();
        assert_eq!(
            object("core/v1/namespaces/team-a/pods/web-0"),
            Some((s(""), s("pods"), Some(s("team-a")), s("web-0"), None))
        );
        assert_eq!(
            object("apps/v1/namespaces/team-a/deployments/web/status"),
            Some((
                s("apps"),
                s("deployments"),
                Some(s("team-a")),
                s("web"),
                Some(s("status"))
            ))
        );
        assert_eq!(
            object("core/v1/namespaces/team-a/finalize"),
            Some((
                s(""),
                s("namespaces"),
                Some(s("team-a")),
                s("team-a"),
                Some(s("finalize"))
            ))
        );
        assert_eq!(
            object("core/v1/namespaces/team-a"),
            Some((s(""), s("namespaces"), Some(s("team-a")), s("team-a"), None))
        );
        assert_eq!(
            object("storage.k8s.io/v1/volumeattachments/csi-1"),
            Some((
                s("storage.k8s.io"),
                s("volumeattachments"),
                None,
                s("csi-1"),
                None
            ))
        );
        for collection in [
            "core/v1/namespaces/team-a/pods",
            "core/v1/namespaces",
            "core/v1/pods",
            "core",
            "",
            "core/v1/namespaces/a/pods/b/c/d",
        ] {
            assert_eq!(object(collection), None, "{collection}");
        }
    }

    #[test]
    fn azure_records_and_rows() {
        let log = apiserver("1", CONTROLLER, "would-deny", "example.com/a");
        let e = read(&[json!({"records": [
            {"time": "2026-11-23T19:00:01Z", "resourceId": "/SUBSCRIPTIONS/S/RESOURCEGROUPS/G/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/C",
             "category": "kube-audit", "operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
             "properties": {"log": log, "stream": "stdout", "pod": "kube-apiserver-6d5d"}},
            {"category": "kube-apiserver", "properties": {"log": "I1123 started"}},
        ]})]);
        assert_eq!(e.read.get(&EvidenceSource::AzureDiagnostics), Some(&1));
        assert_eq!(e.seen[0].source, EvidenceSource::AzureDiagnostics);
        assert_eq!(e.seen[0].groups, ["system:authenticated"]);

        // AzureDiagnostics rows, as az monitor log-analytics query prints them.
        let e = read(&[
            json!([{"Category": "kube-audit-admin", "log_s": denial("2", CONTROLLER, "team-c", 403), "TableName": "PrimaryResult"}]),
        ]);
        assert!(e.seen[0].denied);

        // AKSAudit rows: dynamic columns as JSON text, or as objects.
        let ev = event(&log);
        let row = |as_text: bool| {
            let dynamic = |v: &Value| {
                if as_text {
                    Value::from(v.to_string())
                } else {
                    v.clone()
                }
            };
            json!({"AuditId": "9", "Stage": "ResponseComplete", "Verb": "update",
                "RequestUri": "/apis/example.com/v1/namespaces/team-a/widgets/w1",
                "User": dynamic(&ev["user"]), "ObjectRef": dynamic(&ev["objectRef"]),
                "Annotations": dynamic(&ev["annotations"]), "ResponseStatus": dynamic(&json!({"code": 200})),
                "RequestReceivedTime": "2026-11-23T19:00:00.5Z", "Type": "AKSAuditAdmin"})
        };
        for as_text in [true, false] {
            let e = read(&[json!([row(as_text)])]);
            assert_eq!(e.seen.len(), 1, "{as_text}");
            assert_eq!(e.seen[0].source, EvidenceSource::AksAuditTable);
            assert_eq!(e.seen[0].resource, "widgets");
        }
        // A dry run is still told by the request URI.
        let mut dry = row(false);
        dry["RequestUri"] = "/apis/example.com/v1/namespaces/team-a/widgets/w1?dryRun=All".into();
        assert_eq!(read(&[json!([dry])]).skipped.get(&Skip::DryRun), Some(&1));
    }

    #[test]
    fn a_format_reads_its_own_delivery_only() {
        let cloudwatch = json!({"events": [{"logStreamName": "kube-apiserver-audit-1", "eventId": "1",
            "message": apiserver("1", CONTROLLER, "would-deny", "example.com/a")}]});
        let plain = event(&apiserver("2", CONTROLLER, "would-deny", "example.com/a"));
        for (format, seen) in [
            (EvidenceFormat::Auto, 2),
            (EvidenceFormat::Eks, 1),
            (EvidenceFormat::KubeApiserver, 1),
            (EvidenceFormat::Gke, 0),
            (EvidenceFormat::Aks, 0),
        ] {
            let mut e = Evidence::default();
            e.format = format;
            for v in [&cloudwatch, &plain] {
                entries(v, &mut |p| {
                    e.add(p);
                });
            }
            assert_eq!(e.seen.len(), seen, "{format:?}");
        }
        assert!(EvidenceFormat::Gke.reads(EvidenceSource::WebhookAudit));
        assert!(!lacks(EvidenceSource::CloudAuditLogs).is_empty());
        assert!(!lacks(EvidenceSource::AksAuditTable).is_empty());
        assert!(
            lacks(EvidenceSource::CloudWatch).is_empty()
                && lacks(EvidenceSource::AzureDiagnostics).is_empty()
        );
    }
}
