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
use crate::policy::{IdentityClass, Operation, Outcome, Policy, Verdict};

/// The `group` label of a group that is neither Kubernetes' own nor named in
/// the policy, once [`MAX_OTHER_GROUPS`] such groups have a label of their
/// own, or when it is not a valid group name.
pub const OTHER_GROUP: &str = "other";

/// Groups neither Kubernetes' own nor named in the policy that get a label
/// value of their own (first come): a review's group is whatever its body
/// says, and every distinct value would be a series kept for good.
pub const MAX_OTHER_GROUPS: usize = 32;

/// Finalizer names given a label value of their own in the denial counters
/// (first come), as `watch --max-finalizers` defaults to; past them `other`.
pub const MAX_FINALIZER_LABELS: usize = 100;

/// A finalizer name is a qualified name: a DNS subdomain prefix (253), `/`
/// and a name (63).
const MAX_FINALIZER_CHARS: usize = 317;

/// The decisions the denial counters count: what the policy refuses, in
/// `enforce` mode and in `warn` mode.
const DENIALS: [Verdict; 2] = [Verdict::Denied, Verdict::WouldDeny];

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

impl EncodeLabelValue for IdentityClass {
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

/// A denied or would-be-denied removal of one finalizer: its name (`other`
/// past [`MAX_FINALIZER_LABELS`] names, or when it is no finalizer name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinalizerDenialLabels {
    pub finalizer: String,
    pub decision: Verdict,
}

/// Denied or would-be-denied removals by the kind of identity that asked.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IdentityDenialLabels {
    pub class: IdentityClass,
    pub decision: Verdict,
}

/// A certificate the webhook port uses: `serving` or `client-ca`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    pub kind: &'static str,
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

/// The policy in service: `finalizer_guard_policy_info{mode,sha256,source}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub mode: &'static str,
    /// The sha256 of the policy file's bytes (of the embedded default's).
    pub sha256: String,
    /// `embedded`, or `file` (`--policy`).
    pub source: &'static str,
}

/// The HTTP statuses a request is refused with before a decision.
const REJECT_CODES: [u16; 5] = [400, 408, 413, 500, 503];

/// The `finalizer_guard_events_total` outcome of an Event not written
/// because its review came without a verified client certificate.
pub const SKIPPED_UNAUTHENTICATED: &str = "unauthenticated";

/// What becomes of an Event ([`EventLabels`]) wherever Events are written
/// (`serve` adds [`SKIPPED_UNAUTHENTICATED`]).
const EVENT_OUTCOMES: [&str; 4] = ["sent", "updated", "repeated", "failed"];

/// The files `serve` reloads ([`ReloadLabels`]).
const RELOAD_KINDS: [&str; 3] = ["policy", "certificate", "client-ca"];

pub struct Metrics {
    registry: Registry,
    pub reviews: Family<ReviewLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub latency: Histogram,
    pub reloads: Family<ReloadLabels, Counter>,
    pub unauthorized_removals: Family<VerdictLabels, Counter>,
    pub overrides: Family<ReasonLabels, Counter>,
    pub certificate_expiry: Family<CertificateLabels, Gauge>,
    pub denials_by_finalizer: Family<FinalizerDenialLabels, Counter>,
    pub denials_by_identity: Family<IdentityDenialLabels, Counter>,
    pub events: Family<EventLabels, Counter>,
    pub dropped: Family<QueueLabels, Counter>,
    pub policy_info: Family<PolicyLabels, Gauge>,
    /// Reviews refused because their audit record could not be queued in time.
    pub audit_refused: Counter,
    /// Request body bytes held at the scrape, against `body_budget_bytes`:
    /// set by whoever serves the scrape (`serve`: its in-flight budget).
    pub body_bytes_in_flight: Gauge,
    pub body_budget_bytes: Gauge,
    /// Groups neither Kubernetes' own nor the policy's given a label of
    /// their own so far, at most [`MAX_OTHER_GROUPS`].
    other_groups: Mutex<HashSet<String>>,
    /// Finalizers given a label value of their own so far, at most
    /// [`MAX_FINALIZER_LABELS`].
    named_finalizers: Mutex<HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("finalizer_guard");
        let (reviews, rejected, latency) = register_reviews(&mut registry);
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
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When a certificate expires, in seconds since the Unix epoch, by kind: serving (the webhook's certificate), client-ca (the earliest of the CA bundle client certificates are verified against)",
            certificate_expiry.clone(),
        );
        let (denials_by_finalizer, denials_by_identity) = register_denials(&mut registry);
        let (events, dropped) = register_event_writer(&mut registry);
        register_build_info(&mut registry);
        let policy_info = Family::<PolicyLabels, Gauge>::default();
        registry.register(
            "policy_info",
            "The policy in service (1): its mode, the sha256 of its file's bytes, and where it came from (embedded, file)",
            policy_info.clone(),
        );
        let (audit_refused, body_bytes_in_flight, body_budget_bytes) =
            register_held_back(&mut registry);
        let metrics = Metrics {
            registry,
            reviews,
            rejected,
            latency,
            reloads,
            unauthorized_removals,
            overrides,
            certificate_expiry,
            denials_by_finalizer,
            denials_by_identity,
            events,
            dropped,
            policy_info,
            audit_refused,
            body_bytes_in_flight,
            body_budget_bytes,
            other_groups: Mutex::new(HashSet::new()),
            named_finalizers: Mutex::new(HashSet::new()),
        };
        metrics.seed();
        metrics
    }

    /// The series that read 0 before anything happened, so a dashboard
    /// sees them from the first scrape.
    fn seed(&self) {
        for code in REJECT_CODES {
            let _ = self.rejected.get_or_create(&RejectLabels { code });
        }
        for kind in RELOAD_KINDS {
            for outcome in ["success", "failure"] {
                let _ = self.reloads.get_or_create(&ReloadLabels { kind, outcome });
            }
        }
        for decision in [Verdict::Denied, Verdict::WouldDeny, Verdict::Override] {
            let _ = self
                .unauthorized_removals
                .get_or_create(&VerdictLabels { decision });
        }
        for decision in DENIALS {
            for class in IdentityClass::ALL {
                let _ = self
                    .denials_by_identity
                    .get_or_create(&IdentityDenialLabels { class, decision });
            }
        }
        let _ = self.events.get_or_create(&EventLabels {
            decision: SKIPPED_UNAUTHENTICATED,
        });
        for queue in ["audit", "recorder"] {
            let _ = self.dropped.get_or_create(&QueueLabels { queue });
        }
        for decision in Verdict::ALL {
            let _ = self.reviews.get_or_create(&ReviewLabels {
                operation: Operation::Update,
                decision,
                group: Cow::Borrowed("core"),
            });
        }
    }

    /// Puts `policy` on record as the one in service: the info series says
    /// its mode, the sha256 of `bytes` (its file, or the embedded default's
    /// text) and `source`; each of its override reasons gets its counter at 0.
    pub fn policy_in_service(&self, policy: &Policy, bytes: &[u8], source: &'static str) {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        let sha256 = digest
            .as_ref()
            .iter()
            .fold(String::with_capacity(64), |mut hex, b| {
                let _ = write!(hex, "{b:02x}");
                hex
            });
        self.policy_info.clear();
        self.policy_info
            .get_or_create(&PolicyLabels {
                mode: policy.mode.as_str(),
                sha256,
                source,
            })
            .set(1);
        for reason in &policy.override_settings.reasons {
            let _ = self.overrides.get_or_create(&ReasonLabels {
                reason: reason.clone(),
            });
        }
    }

    /// Puts on record when the `kind` certificate (`serving`, `client-ca`)
    /// in service expires, in seconds since the Unix epoch.
    pub fn certificate_expires(&self, kind: &'static str, at: i64) {
        self.certificate_expiry
            .get_or_create(&CertificateLabels { kind })
            .set(at);
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
        // A list too long to read names no removal: its denial counts once,
        // so that a controller locked out by one is still seen by its class.
        let unreadable = matches!(reviewed.decision.outcome, Outcome::TooManyNames { .. });
        if DENIALS.contains(&decision) && (unauthorized > 0 || unreadable) {
            self.denials(reviewed, decision, unauthorized.max(1));
        }
    }

    /// Counts the unauthorized removals of a denied (or would-be-denied)
    /// review by finalizer and by the requester's class.
    fn denials(&self, reviewed: &Reviewed, decision: Verdict, unauthorized: usize) {
        self.denials_by_identity
            .get_or_create(&IdentityDenialLabels {
                class: reviewed.identity,
                decision,
            })
            .inc_by(unauthorized as u64);
        for removal in reviewed.decision.unauthorized() {
            let finalizer = self.finalizer_label(&removal.finalizer);
            self.denials_by_finalizer
                .get_or_create(&FinalizerDenialLabels {
                    finalizer,
                    decision,
                })
                .inc();
        }
    }

    /// The `finalizer` label of a denied removal: the name while fewer than
    /// [`MAX_FINALIZER_LABELS`] have been seen, [`OTHER_GROUP`] (`other`)
    /// past them or for what is no finalizer name. No label value is taken
    /// from a request unbounded.
    pub fn finalizer_label(&self, finalizer: &str) -> String {
        if !is_finalizer_name(finalizer) {
            return OTHER_GROUP.to_string();
        }
        let mut named = self
            .named_finalizers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if named.contains(finalizer) || named.len() < MAX_FINALIZER_LABELS {
            named.insert(finalizer.to_string());
            finalizer.to_string()
        } else {
            OTHER_GROUP.to_string()
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
/// The exposition a scrape asked for by its `Accept` header: OpenMetrics
/// when `application/openmetrics-text` is accepted at least as much as the
/// text format (`text/plain`, `text/*`, `*/*`; q-values compared, as
/// Prometheus weighs them), otherwise the Prometheus text format 0.0.4.
/// Returns the content type and the body; `openmetrics` is the registry's
/// encoding. Only OpenMetrics 1.0.0 is served, whatever version is asked.
pub fn exposition(accept: Option<&str>, openmetrics: String) -> (&'static str, String) {
    let (mut om, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.unwrap_or_default().split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .find_map(|p| p.strip_prefix("q="))
            .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok())
            .unwrap_or(0.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    if om > 0.0 && om >= text {
        (OPENMETRICS, openmetrics)
    } else {
        (PROMETHEUS_TEXT, prometheus_text(&openmetrics))
    }
}

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition: no
/// `# EOF` or `# UNIT` lines; a counter family named as its samples
/// (`NAME_total`); `info` families as gauges named `NAME_info`; `unknown` as
/// `untyped`. Samples and their escaping are the same in both formats.
fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            if let Some(text) = help.take() {
                let text = text.split_once(' ').map_or("", |(_, text)| text);
                // 0.0.4 escapes only `\\` and `\n` in help text.
                let text = text.replace("\\\"", "\"");
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
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

/// Whether `finalizer` could be a finalizer name (a qualified name: ASCII
/// letters, digits, `-`, `_`, `.` and `/`, at most 317 characters), never
/// `other`.
fn is_finalizer_name(finalizer: &str) -> bool {
    !finalizer.is_empty()
        && finalizer.len() <= MAX_FINALIZER_CHARS
        && finalizer != OTHER_GROUP
        && finalizer
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

/// The reviews answered, the requests refused before a decision, and how
/// long a review took.
fn register_reviews(
    registry: &mut Registry,
) -> (
    Family<ReviewLabels, Counter>,
    Family<RejectLabels, Counter>,
    Histogram,
) {
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
    (reviews, rejected, latency)
}

/// What holds a review back: the reviews refused for want of a written
/// audit record, and the request body bytes held against their budget.
fn register_held_back(registry: &mut Registry) -> (Counter, Gauge, Gauge) {
    let audit_refused = Counter::default();
    registry.register(
        "audit_refused_reviews",
        "Reviews answered with an error (HTTP 503), undecided, because their audit record could not be written: no room in its queue within 1s, the writer stalled, or standard output failing",
        audit_refused.clone(),
    );
    let body_bytes_in_flight = Gauge::default();
    registry.register(
        "request_body_bytes_in_flight",
        "Request body bytes held in memory at the scrape, received and not yet answered; at request_body_budget_bytes a body waits for room, and is refused (503) if none frees within the body timeout",
        body_bytes_in_flight.clone(),
    );
    let body_budget_bytes = Gauge::default();
    registry.register(
        "request_body_budget_bytes",
        "Most request body bytes held at once (--max-inflight-body-bytes)",
        body_budget_bytes.clone(),
    );
    (audit_refused, body_bytes_in_flight, body_budget_bytes)
}

/// The counters of denied and would-be-denied removals, by finalizer and
/// by the requester's class.
fn register_denials(
    registry: &mut Registry,
) -> (
    Family<FinalizerDenialLabels, Counter>,
    Family<IdentityDenialLabels, Counter>,
) {
    let denials_by_finalizer = Family::<FinalizerDenialLabels, Counter>::default();
    registry.register(
        "denials_by_finalizer",
        "Finalizer removals denied (denied) or denied in warn mode only (would-deny), by finalizer (the first 100 names; past them other)",
        denials_by_finalizer.clone(),
    );
    let denials_by_identity = Family::<IdentityDenialLabels, Counter>::default();
    registry.register(
        "denials_by_identity",
        "Finalizer removals denied (denied) or denied in warn mode only (would-deny), by the requester's class: person, serviceaccount, node, builtin (a built-in controller's username)",
        denials_by_identity.clone(),
    );
    (denials_by_finalizer, denials_by_identity)
}

/// The Event writer's counters ([`crate::trail::events::EventSink`]): every
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
    for decision in EVENT_OUTCOMES {
        let _ = events.get_or_create(&EventLabels { decision });
    }
    let _ = dropped.get_or_create(&QueueLabels { queue: "events" });
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
    fn the_classic_text_format_names_counters_as_their_samples() {
        let metrics = Metrics::new();
        metrics.policy_in_service(&Policy::embedded_default(), b"", "embedded");
        let (content_type, text) = exposition(Some("text/plain;version=0.0.4"), metrics.encode());
        assert_eq!(content_type, PROMETHEUS_TEXT);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = line.split(' ').nth(2).unwrap();
            assert!(
                text.lines()
                    .any(|l| !l.starts_with('#') && l.starts_with(name)),
                "no sample of {line}:\n{text}"
            );
        }
        assert!(text.contains("# TYPE finalizer_guard_overrides_total counter\n"));
        assert!(text.contains("# HELP finalizer_guard_overrides_total "));
    }

    #[test]
    fn openmetrics_only_when_asked_and_not_refused() {
        let om = |accept| exposition(Some(accept), String::new()).0;
        assert_eq!(om("application/openmetrics-text"), OPENMETRICS);
        assert_eq!(
            om("text/plain;q=0.4, Application/OpenMetrics-Text; version=1.0.0; q=0.5"),
            OPENMETRICS
        );
        assert_eq!(om("application/openmetrics-text;q=0"), PROMETHEUS_TEXT);
        assert_eq!(
            om("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"),
            PROMETHEUS_TEXT
        );
        assert_eq!(
            om(
                "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"
            ),
            OPENMETRICS
        );
        assert_eq!(
            om("application/openmetrics-text;q=nonsense"),
            PROMETHEUS_TEXT
        );
        assert_eq!(om("*/*"), PROMETHEUS_TEXT);
        assert_eq!(exposition(None, String::new()).0, PROMETHEUS_TEXT);
    }

    #[test]
    fn every_counter_has_a_series_at_0_from_start() {
        let metrics = Metrics::new();
        metrics.policy_in_service(&Policy::embedded_default(), b"", "embedded");
        let text = metrics.encode();
        for family in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = family.rsplit_once(' ').unwrap();
            if kind == "counter" {
                // A family's labelled series, or a counter without labels.
                assert!(
                    text.contains(&format!("{name}_total{{"))
                        || text.contains(&format!("\n{name}_total 0\n")),
                    "{name} has no series at start:\n{text}"
                );
            }
        }
        assert!(
            text.contains("\nfinalizer_guard_audit_refused_reviews_total 0\n"),
            "{text}"
        );
        assert!(text.contains(
            "finalizer_guard_policy_info{mode=\"enforce\",sha256=\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",source=\"embedded\"} 1"
        ), "{text}");
    }

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
    fn denials_by_identity_read_0_from_start_for_every_class() {
        let text = Metrics::new().encode();
        for class in IdentityClass::ALL {
            for decision in DENIALS {
                let series = format!(
                    "finalizer_guard_denials_by_identity_total{{class=\"{}\",decision=\"{}\"}} 0\n",
                    class.as_str(),
                    decision.as_str()
                );
                assert!(text.contains(&series), "no {series}in:\n{text}");
            }
        }
    }

    #[test]
    fn a_denial_of_a_list_too_long_to_read_counts_once_for_its_class() {
        let metrics = Metrics::new();
        let enforce = Policy::embedded_default();
        let names: Vec<String> = (0..=crate::policy::MAX_LIST_NAMES)
            .map(|i| format!("\"example.com/f{i}\""))
            .collect();
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"namespace":"ns","name":"cm","operation":"UPDATE","userInfo":{{"username":"system:serviceaccount:ops:bot"}},"object":{{"metadata":{{"finalizers":[]}}}},"oldObject":{{"metadata":{{"finalizers":[{}]}}}}}}}}"#,
            names.join(",")
        );
        let reviewed = crate::admission::review_with(
            &enforce,
            body.as_bytes(),
            jiff::Timestamp::UNIX_EPOCH,
            None,
        )
        .unwrap();
        assert_eq!(reviewed.verdict(), Verdict::Denied);
        metrics.review(&reviewed, &enforce);
        let text = metrics.encode();
        let series = "finalizer_guard_denials_by_identity_total{class=\"serviceaccount\",decision=\"denied\"} 1\n";
        assert!(text.contains(series), "no {series}in:\n{text}");
    }

    #[test]
    fn denials_are_counted_by_finalizer_and_identity_class() {
        let metrics = Metrics::new();
        let warn = Policy::from_yaml("mode: warn\n").unwrap();
        let enforce = Policy::embedded_default();
        let body = |user: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"namespace":"ns","name":"cm","operation":"UPDATE","userInfo":{{"username":"{user}"}},"object":{{"metadata":{{"finalizers":[]}}}},"oldObject":{{"metadata":{{"finalizers":["example.com/a","example.com/b"]}}}}}}}}"#
            )
        };
        let now = jiff::Timestamp::UNIX_EPOCH;
        for (policy, user) in [
            (&enforce, "system:serviceaccount:ops:bot"),
            (&warn, "alice"),
        ] {
            let reviewed =
                crate::admission::review_with(policy, body(user).as_bytes(), now, None).unwrap();
            metrics.review(&reviewed, policy);
        }
        let text = metrics.encode();
        for series in [
            "finalizer_guard_denials_by_identity_total{class=\"serviceaccount\",decision=\"denied\"} 2\n",
            "finalizer_guard_denials_by_identity_total{class=\"person\",decision=\"would-deny\"} 2\n",
            "finalizer_guard_denials_by_identity_total{class=\"person\",decision=\"denied\"} 0\n",
            "finalizer_guard_denials_by_finalizer_total{finalizer=\"example.com/a\",decision=\"denied\"} 1\n",
            "finalizer_guard_denials_by_finalizer_total{finalizer=\"example.com/b\",decision=\"would-deny\"} 1\n",
        ] {
            assert!(text.contains(series), "no {series}in:\n{text}");
        }
    }

    #[test]
    fn finalizer_labels_are_bounded() {
        let metrics = Metrics::new();
        for bad in ["", "other", "quote\"x", "new\nline", &"x".repeat(400)] {
            assert_eq!(metrics.finalizer_label(bad), OTHER_GROUP, "{bad:?}");
        }
        for i in 0..MAX_FINALIZER_LABELS {
            let name = format!("example.com/f{i}");
            assert_eq!(metrics.finalizer_label(&name), name);
        }
        assert_eq!(metrics.finalizer_label("example.com/late"), OTHER_GROUP);
        assert_eq!(metrics.finalizer_label("example.com/f0"), "example.com/f0");
    }

    #[test]
    fn kubernetes_groups_are_sorted() {
        assert!(KUBERNETES_GROUPS.windows(2).all(|w| w[0] < w[1]));
    }
}
