//! The admin port's metrics: the stuck gauges, computed from the tracker at
//! each scrape, and the counters of the watches, discoveries and Events.

use std::sync::Arc;

use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::tracker::Shared;
use crate::output::escape;
use crate::trail::metrics::{EventLabels, QueueLabels, register_build_info, register_event_writer};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StuckLabels {
    pub(super) finalizer: String,
    pub(super) resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FinalizerLabels {
    pub(super) finalizer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResourceLabels {
    pub(super) resource: String,
}

/// The gauges are computed from the tracker at each scrape: always what is
/// stuck now, with no timer to keep them up to date.
#[derive(Debug)]
pub(super) struct StuckCollector(Arc<Shared>);

impl Collector for StuckCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges = self.0.gauges(Timestamp::now());
        let mut family = encoder.encode_descriptor(
            "stuck_objects",
            "Objects deleting with finalizers for longer than --stuck-after, by finalizer (past --max-finalizers names: other) and resource",
            None,
            MetricType::Gauge,
        )?;
        for ((finalizer, resource), n) in &gauges.stuck {
            let labels = StuckLabels {
                finalizer: escape(finalizer).into_owned(),
                resource: escape(resource).into_owned(),
            };
            ConstGauge::new(*n).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "stuck_oldest_seconds",
            "How long the oldest stuck object holding the finalizer has been deleting, in seconds (0: none stuck now)",
            None,
            MetricType::Gauge,
        )?;
        for (finalizer, seconds) in &gauges.oldest {
            let labels = FinalizerLabels {
                finalizer: escape(finalizer).into_owned(),
            };
            ConstGauge::new(seconds.floor()).encode(family.encode_family(&labels)?)?;
        }
        for (name, help, value) in [
            (
                "terminating_objects",
                "Objects being deleted that still hold finalizers, stuck or not yet",
                gauges.terminating,
            ),
            ("watched_types", "Types watched", gauges.watched),
            (
                "unwatchable_types",
                "Types whose watch failed its last attempt (retried with backoff)",
                gauges.unwatchable,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        Ok(())
    }
}

/// The admin port's metrics.
pub(super) struct WatchMetrics {
    pub(super) registry: Registry,
    pub(super) events: Family<EventLabels, Counter>,
    pub(super) dropped_events: Counter,
    pub(super) watch_errors: Family<ResourceLabels, Counter>,
    pub(super) discoveries: Family<OutcomeLabels, Counter>,
}

impl WatchMetrics {
    pub(super) fn new(shared: Arc<Shared>) -> WatchMetrics {
        let mut registry = Registry::with_prefix("finalizer_guard");
        registry.register_collector(Box::new(StuckCollector(shared)));
        // The webhook's names: one Event writer, one set of series.
        let (events, dropped) = register_event_writer(&mut registry);
        let dropped_events = dropped
            .get_or_create(&QueueLabels { queue: "events" })
            .clone();
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Failed lists and watches, by resource (each retried with backoff)",
            watch_errors.clone(),
        );
        let discoveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "discoveries",
            "Discoveries of the API server's types, by outcome: success, failure",
            discoveries.clone(),
        );
        register_build_info(&mut registry);
        WatchMetrics {
            registry,
            events,
            dropped_events,
            watch_errors,
            discoveries,
        }
    }

    pub(super) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::watch::fixtures::*;
    use std::time::Duration;
    #[test]
    fn the_exposition_names_no_object() {
        let shared = Arc::new(Shared::new(Duration::ZERO, 10));
        let w = widgets();
        let mut m = meta("secret-name", "u-1", Some(T0), &["x.io/f\n# HELP evil"]);
        m.namespace = Some("secret-namespace".into());
        shared.observe(&w, &m, vec![]);
        let metrics = WatchMetrics::new(shared.clone());
        metrics
            .events
            .get_or_create(&EventLabels { decision: "sent" })
            .inc();
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                "finalizer_guard_stuck_objects{finalizer=\"x.io/f\\\\u{a}# HELP evil\",resource=\"widgets.example.com\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_stuck_oldest_seconds{finalizer="),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_terminating_objects 1\n"),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_events_total{decision=\"sent\"} 1\n"),
            "{text}"
        );
        assert!(
            !text.contains("secret-name") && !text.contains("secret-namespace"),
            "{text}"
        );
        assert!(!text.contains("\n# HELP evil"), "{text}");
    }
}
