//! Which evidence counts: kube-apiserver's audit events, and the webhook's
//! records of authenticated reviews, or those an audit event confirms
//! ([`trusted`]).

use std::collections::{BTreeMap, BTreeSet};

use super::evidence::{EvidenceSource, Seen, object_namespace};

/// The would-deny removals set aside by [`trusted`], by source: those of
/// reviews marked unauthenticated, and those whose record does not say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Marked `"authenticated": false`.
    pub unauthenticated: BTreeMap<EvidenceSource, usize>,
    /// Not marked at all (written by a version before the mark).
    pub unmarked: BTreeMap<EvidenceSource, usize>,
    /// Unauthenticated or unmarked, kept: kube-apiserver's audit log shows the same removal.
    pub confirmed: usize,
    /// Authenticated records of a removal kube-apiserver's audit log shows
    /// too: the same request, counted once.
    pub same: usize,
}

impl SetAside {
    pub fn is_empty(&self) -> bool {
        self.unauthenticated.is_empty() && self.unmarked.is_empty()
    }

    /// One line per reason, for standard error.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let counts = |by: &BTreeMap<EvidenceSource, usize>| {
            let each: Vec<String> = by
                .iter()
                .map(|(source, n)| format!("{n} from {}", source.describe()))
                .collect();
            format!(
                "{} would-deny removal(s) ({})",
                by.values().sum::<usize>(),
                each.join(", ")
            )
        };
        let unconfirmed = "not confirmed by a kube-apiserver audit event given alongside";
        let how = "give kube-apiserver's audit log too, or pass --trust-unauthenticated if only kube-apiserver can reach the webhook port";
        if !self.unauthenticated.is_empty() {
            out.push(format!(
                "ignored {} of unauthenticated reviews (\"authenticated\": false: no client certificate verified against serve --client-ca, so anyone who reached the webhook port could have posted them), {unconfirmed}: {how}",
                counts(&self.unauthenticated)
            ));
        }
        if !self.unmarked.is_empty() {
            out.push(format!(
                "ignored {} whose record does not say whether the review was authenticated (written by an older finalizer-guard), {unconfirmed}: {how}",
                counts(&self.unmarked)
            ));
        }
        out
    }
}

/// How far apart kube-apiserver may receive a request and the webhook
/// record its review: the longest webhook timeout kube-apiserver allows is
/// 30 seconds; twice that leaves room for clocks apart.
const SAME_REQUEST: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// How far apart in time two pieces of evidence are (zero when one does not say).
fn apart(a: &Seen, b: &Seen) -> jiff::SignedDuration {
    match (a.time, b.time) {
        (Some(a), Some(b)) => a.duration_since(b).abs(),
        _ => jiff::SignedDuration::ZERO,
    }
}

/// Whether kube-apiserver's audit event `by` shows the removal `seen`: the
/// same identity (username and groups) removing the same finalizers from
/// the same object, at the same time. The webhook's record cannot name the
/// event: the AdmissionReview's `uid` is a fresh UUID per webhook call,
/// never kube-apiserver's `auditID`.
fn confirms(by: &Seen, seen: &Seen) -> bool {
    fn groups(s: &Seen) -> BTreeSet<&str> {
        s.groups.iter().map(String::as_str).collect()
    }
    by.source.is_apiserver()
        && by.username == seen.username
        && groups(by) == groups(seen)
        && by.group == seen.group
        && by.resource == seen.resource
        && by.subresource == seen.subresource
        && object_namespace(by) == object_namespace(seen)
        && by.name == seen.name
        && seen.finalizers.iter().all(|f| by.finalizers.contains(f))
        && by.denied == seen.denied
        && apart(by, seen) <= SAME_REQUEST
}

/// The evidence `policy suggest` makes rules from. kube-apiserver's audit
/// events are evidence by nature: the API server authenticated the user.
/// The webhook's records and recordings are evidence only when marked
/// authenticated (the caller presented a client certificate verified
/// against `serve --client-ca`): without it anyone who reached the webhook
/// port could have posted the review, naming any identity and object.
/// Those not marked so (marked unauthenticated, or written before the mark
/// existed) are kept only when a kube-apiserver audit event among `seen`
/// shows the same removal (`confirms`), or with `trust_unauthenticated`;
/// the rest are set aside, counted.
///
/// One request is one removal: each kube-apiserver event stands for one
/// webhook record at most (the nearest in time), and a record it stands
/// for is counted once, as the event. Fifty forged records of one real
/// removal are one confirmed removal and forty-nine set aside.
pub fn trusted(seen: Vec<Seen>, trust_unauthenticated: bool) -> (Vec<Seen>, SetAside) {
    let mut aside = SetAside::default();
    let (events, records): (Vec<Seen>, Vec<Seen>) =
        seen.into_iter().partition(|s| s.source.is_apiserver());
    // The authenticated records first: a forged one must not take their event.
    let (authenticated, others): (Vec<Seen>, Vec<Seen>) = records
        .into_iter()
        .partition(|s| s.authenticated == Some(true));
    let mut used = vec![false; events.len()];
    let mut kept = Vec::with_capacity(events.len() + authenticated.len() + others.len());
    for s in authenticated.into_iter().chain(others) {
        let same = events
            .iter()
            .enumerate()
            .filter(|(i, by)| !used[*i] && confirms(by, &s))
            .min_by_key(|(_, by)| apart(by, &s))
            .map(|(i, _)| i);
        let trusted = trust_unauthenticated || s.authenticated == Some(true);
        match same {
            Some(i) => {
                used[i] = true;
                if trusted {
                    aside.same += 1;
                } else {
                    aside.confirmed += 1;
                }
            }
            None if trusted => kept.push(s),
            None => {
                let by = match s.authenticated {
                    Some(_) => &mut aside.unauthenticated,
                    None => &mut aside.unmarked,
                };
                *by.entry(s.source).or_default() += 1;
            }
        }
    }
    kept.extend(events);
    (kept, aside)
}

#[cfg(test)]
mod tests {
    use crate::policy::FinalizerField;

    use super::super::fixtures::seen_at;
    use super::*;

    #[test]
    fn unauthenticated_evidence_counts_only_when_confirmed_or_trusted() {
        let webhook = |authenticated: Option<bool>, finalizer: &str| Seen {
            source: EvidenceSource::WebhookAudit,
            authenticated,
            namespace: Some("team-a".into()),
            ..seen_at("widgets.example.com", Some("team-a"), finalizer)
        };
        let seen = vec![
            webhook(Some(true), "example.com/a"),
            webhook(Some(false), "example.com/b"),
            webhook(None, "example.com/c"),
            Seen {
                source: EvidenceSource::Recording,
                ..webhook(Some(false), "example.com/d")
            },
        ];
        let (kept, aside) = trusted(seen.clone(), false);
        assert_eq!(kept, seen[..1]);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([
                (EvidenceSource::WebhookAudit, 1),
                (EvidenceSource::Recording, 1)
            ])
        );
        assert_eq!(
            aside.unmarked,
            BTreeMap::from([(EvidenceSource::WebhookAudit, 1)])
        );
        assert_eq!(aside.lines().len(), 2);
        assert!(
            aside.lines()[0].starts_with(
                "ignored 2 would-deny removal(s) (1 from webhook audit records, 1 from recordings) of unauthenticated reviews"
            ),
            "{:?}",
            aside.lines()
        );

        // Trusted: all of it.
        let (kept, aside) = trusted(seen.clone(), true);
        assert_eq!(kept, seen);
        assert!(aside.is_empty());

        // kube-apiserver shows the removal of b (and c): those are confirmed.
        let apiserver = Seen {
            finalizers: vec![
                ("example.com/b".into(), FinalizerField::Metadata),
                ("example.com/c".into(), FinalizerField::Metadata),
            ],
            ..seen_at("widgets.example.com", Some("team-a"), "x")
        };
        let mut with_log = seen.clone();
        with_log.push(apiserver.clone());
        // One event is one request: it confirms b, and c (another request) stays aside.
        let (kept, aside) = trusted(with_log, false);
        assert_eq!(kept, [seen[0].clone(), apiserver.clone()], "{kept:#?}");
        assert_eq!(aside.confirmed, 1);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(EvidenceSource::Recording, 1)])
        );
        assert_eq!(
            aside.unmarked,
            BTreeMap::from([(EvidenceSource::WebhookAudit, 1)])
        );

        // What differs confirms nothing: the user, a group, the object, the finalizer.
        let differing = [
            Seen {
                username: "system:serviceaccount:team-b:other".into(),
                ..apiserver.clone()
            },
            Seen {
                groups: vec!["system:masters".into()],
                ..apiserver.clone()
            },
            Seen {
                name: "other".into(),
                ..apiserver.clone()
            },
            Seen {
                namespace: Some("team-b".into()),
                ..apiserver.clone()
            },
            Seen {
                finalizers: vec![("example.com/c".into(), FinalizerField::Metadata)],
                ..apiserver.clone()
            },
        ];
        for other in differing {
            let (_, aside) = trusted(
                vec![webhook(Some(false), "example.com/b"), other.clone()],
                false,
            );
            assert_eq!(aside.confirmed, 0, "{other:?}");
        }
    }

    /// One kube-apiserver event confirms one webhook record, of its time:
    /// fifty forged records of one real removal are not fifty removals, and
    /// the webhook's record of a request and kube-apiserver's event of it
    /// are one removal.
    #[test]
    fn one_request_is_one_removal() {
        let at = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        let event = Seen {
            time: at("2026-11-23T19:00:00Z"),
            audit_id: Some("a-1".into()),
            ..seen_at("widgets.example.com", Some("team-a"), "example.com/a")
        };
        let record = |authenticated: Option<bool>, time: &str| Seen {
            source: EvidenceSource::WebhookAudit,
            authenticated,
            time: at(time),
            ..event.clone()
        };
        let mut forged: Vec<Seen> = (0..50)
            .map(|_| record(Some(false), "2026-11-23T19:00:01Z"))
            .collect();
        forged.push(event.clone());
        let (kept, aside) = trusted(forged, false);
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!(aside.confirmed, 1);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(EvidenceSource::WebhookAudit, 49)])
        );

        // The record and the event of one request: counted once; the
        // authenticated record takes it before an unauthenticated one.
        let (kept, aside) = trusted(
            vec![
                record(Some(false), "2026-11-23T19:00:00Z"),
                record(Some(true), "2026-11-23T19:00:01Z"),
                event.clone(),
            ],
            false,
        );
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!((aside.same, aside.confirmed), (1, 0));
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(EvidenceSource::WebhookAudit, 1)])
        );
        let (kept, aside) = trusted(
            vec![record(None, "2026-11-23T19:00:00Z"), event.clone()],
            true,
        );
        assert_eq!((kept.len(), aside.same), (1, 1));

        // An hour apart: another request, confirmed by nothing.
        let (kept, aside) = trusted(
            vec![record(Some(false), "2026-11-23T20:00:00Z"), event.clone()],
            false,
        );
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!(aside.confirmed, 0);
        let (kept, aside) = trusted(
            vec![record(Some(true), "2026-11-23T20:00:00Z"), event.clone()],
            false,
        );
        assert_eq!((kept.len(), aside.same), (2, 0));
    }
}
