//! Prometheus metrics, served as text on the admin port's `/metrics`.

use std::fmt::Write as _;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Review latency buckets, in seconds: most of them well below the 5 ms that is
/// kube-apiserver's own smallest webhook-latency bucket.
const LATENCY_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
    1.0,
];

use crate::admission::Reviewed;
use crate::policy::{Operation, Policy, Verdict};

/// The `group` label of a group that is neither Kubernetes' own nor named in
/// the policy, once [`MAX_OTHER_GROUPS`] such groups have a label of their
/// own, or when it is not a valid group name.
pub const OTHER_GROUP: &str = "other";

/// Groups neither Kubernetes' own nor named in the policy that get a label
/// value of their own (first come): a review's group is whatever its body
/// says, and every distinct value would be a series kept for good.
pub const MAX_OTHER_GROUPS: usize = 32;

/// A valid API group is a DNS subdomain: at most 253 characters.
const MAX_GROUP_CHARS: usize = 253;

/// The API groups Kubernetes itself serves (`core` aside), sorted.
const KUBERNETES_GROUPS: [&str; 22] = [
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
];

impl EncodeLabelValue for Verdict {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Operation {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub operation: Operation,
    pub decision: Verdict,
    /// The resource's API group; `core` for the core group; `other` past
    /// the groups that get a value of their own ([`Metrics::group_label`]).
    pub group: Cow<'static, str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub decision: Verdict,
}

/// What became of an Event: `sent` (created), `updated` (its series
/// written), `repeated` (an occurrence counted in an existing Event's series)
/// `failed` (a write refused or timed out) or `unauthenticated` (not
/// written: the review came without a verified client certificate).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub decision: &'static str,
}

/// A background writer: `audit`, `recorder` or `events`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    /// The HTTP status the body was refused with.
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub latency: Histogram,
    pub reloads: Family<ReloadLabels, Counter>,
    pub unauthorized_removals: Family<VerdictLabels, Counter>,
    pub overrides: Family<ReasonLabels, Counter>,
    pub certificate_expiry: Gauge,
    pub events: Family<EventLabels, Counter>,
    pub dropped: Family<QueueLabels, Counter>,
    /// Groups neither Kubernetes' own nor the policy's given a label of
    /// their own so far, at most [`MAX_OTHER_GROUPS`].
    other_groups: Mutex<HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("finalizer_guard");
        let reviews = Family::<ReviewLabels, Counter>::default();
        registry.register(
            "reviews",
            "AdmissionReviews answered, by operation, decision and API group (core; Kubernetes' own groups and those the policy names; the first 32 others; past them other)",
            reviews.clone(),
        );
        let rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "rejected_requests",
            "Requests refused before a decision (malformed or oversized bodies), by HTTP status",
            rejected.clone(),
        );
        let latency = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "review_duration_seconds",
            "Time from the full body to the encoded answer",
            latency.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "reloads",
            "Policy and certificate reloads, by outcome",
            reloads.clone(),
        );
        let unauthorized_removals = Family::<VerdictLabels, Counter>::default();
        registry.register(
            "unauthorized_removals",
            "Finalizers removed without a rule or built-in controller, by what was decided: denied, would-deny (warn mode) or override",
            unauthorized_removals.clone(),
        );
        let overrides = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "overrides",
            "Removals allowed by an override annotation, by reason",
            overrides.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the serving certificate expires, in seconds since the Unix epoch",
            certificate_expiry.clone(),
        );
        let (events, dropped) = register_event_writer(&mut registry);
        register_build_info(&mut registry);
        Metrics {
            registry,
            reviews,
            rejected,
            latency,
            reloads,
            unauthorized_removals,
            overrides,
            certificate_expiry,
            events,
            dropped,
            other_groups: Mutex::new(HashSet::new()),
        }
    }

    pub fn reload(&self, kind: &'static str, ok: bool) {
        let outcome = if ok { "success" } else { "failure" };
        self.reloads
            .get_or_create(&ReloadLabels { kind, outcome })
            .inc();
    }

    /// The drop counter of one background writer's queue.
    pub fn dropped_in(&self, queue: &'static str) -> Counter {
        self.dropped.get_or_create(&QueueLabels { queue }).clone()
    }

    /// Counts one answered review, decided under `policy`.
    pub fn review(&self, reviewed: &Reviewed, policy: &Policy) {
        let group = self.group_label(&reviewed.group, policy);
        let decision = reviewed.verdict();
        self.reviews
            .get_or_create(&ReviewLabels {
                operation: reviewed.operation,
                decision,
                group,
            })
            .inc();
        let unauthorized = reviewed.unauthorized();
        if unauthorized > 0 {
            self.unauthorized_removals
                .get_or_create(&VerdictLabels { decision })
                .inc_by(unauthorized as u64);
        }
        if let Some(used) = reviewed.decision.override_used() {
            self.overrides
                .get_or_create(&ReasonLabels {
                    reason: used.reason.clone(),
                })
                .inc();
        }
    }

    /// The `group` label of a review of a resource in `group`: `core`,
    /// Kubernetes' own groups and those named in the policy's rules as they
    /// are; other valid group names as they are while fewer than
    /// [`MAX_OTHER_GROUPS`] have been seen; `other` for the rest. No label
    /// value is taken from a request unbounded.
    pub fn group_label(&self, group: &str, policy: &Policy) -> Cow<'static, str> {
        if group.is_empty() {
            return Cow::Borrowed("core");
        }
        if let Ok(i) = KUBERNETES_GROUPS.binary_search(&group) {
            return Cow::Borrowed(KUBERNETES_GROUPS[i]);
        }
        let in_policy = policy
            .rules
            .iter()
            .filter_map(|rule| rule.resources.as_deref())
            .flatten()
            .any(|r| r.group == group);
        if in_policy {
            return Cow::Owned(group.to_string());
        }
        if !is_group_name(group) {
            return Cow::Borrowed(OTHER_GROUP);
        }
        let mut named = self
            .other_groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if named.contains(group) {
            Cow::Owned(group.to_string())
        } else if named.len() < MAX_OTHER_GROUPS {
            named.insert(group.to_string());
            Cow::Owned(group.to_string())
        } else {
            Cow::Borrowed(OTHER_GROUP)
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
/// Whether `group` could be an API group: a DNS subdomain (lowercase
/// letters, digits, `-` and `.`, at most 253 characters), never `other`.
fn is_group_name(group: &str) -> bool {
    group.len() <= MAX_GROUP_CHARS
        && group != OTHER_GROUP
        && group.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// The Event writer's counters ([`crate::events::EventSink`]): every
/// command that writes Events (`serve`, `watch`) registers them so.
pub fn register_event_writer(
    registry: &mut Registry,
) -> (Family<EventLabels, Counter>, Family<QueueLabels, Counter>) {
    let events = Family::<EventLabels, Counter>::default();
    registry.register(
        "events",
        "Kubernetes Events (the webhook's for denials and overrides, watch's FinalizerStuck), by outcome: sent (created), updated (a series written), repeated (counted in an existing Event's series), failed (a write refused or timed out), unauthenticated (not written: the review came without a verified client certificate)",
        events.clone(),
    );
    let dropped = Family::<QueueLabels, Counter>::default();
    registry.register(
        "dropped",
        "Items a background writer dropped because its queue was full or it had stopped, by queue: audit, recorder, events (with the unwritten repeats of an Event series forgotten to bound memory)",
        dropped.clone(),
    );
    (events, dropped)
}

/// `finalizer_guard_build_info{version}`, 1.
pub fn register_build_info(registry: &mut Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register("build_info", "The running version", build);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_labels_are_bounded() {
        let metrics = Metrics::new();
        let policy = Policy::from_yaml(
            "rules:\n  - finalizers: [\"example.com/a\"]\n    users: [ops]\n    resources: [widgets.example.com]\n",
        )
        .unwrap();
        let label = |group: &str| metrics.group_label(group, &policy);
        assert_eq!(label(""), "core");
        assert_eq!(label("apps"), "apps");
        assert_eq!(label("example.com"), "example.com");
        for bad in [
            "x".repeat(100_000).as_str(),
            "Upper.example.com",
            "quote\".example.com",
            "new\nline",
            "a..b",
            "-a.b",
            "other",
        ] {
            assert_eq!(label(bad), OTHER_GROUP, "{bad:?}");
        }
        for i in 0..MAX_OTHER_GROUPS {
            assert_eq!(
                label(&format!("g{i}.example.org")),
                format!("g{i}.example.org")
            );
        }
        assert_eq!(label("late.example.org"), OTHER_GROUP);
        // Those named stay named, as do Kubernetes' and the policy's.
        assert_eq!(label("g0.example.org"), "g0.example.org");
        assert_eq!(label("batch"), "batch");
        assert_eq!(label("example.com"), "example.com");
    }

    #[test]
    fn kubernetes_groups_are_sorted() {
        assert!(KUBERNETES_GROUPS.windows(2).all(|w| w[0] < w[1]));
    }
}
