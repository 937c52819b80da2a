//! Prometheus metrics, served as text on the admin port's `/metrics`.

use std::fmt::Write as _;

use std::borrow::Cow;

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
use crate::policy::{Operation, Verdict};

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
    /// The resource's API group; `core` for the core group.
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
            "AdmissionReviews answered, by operation and decision",
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

    /// Counts one answered review.
    pub fn review(&self, reviewed: &Reviewed) {
        let group = if reviewed.group.is_empty() {
            Cow::Borrowed("core")
        } else {
            Cow::Owned(reviewed.group.clone())
        };
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

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
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
