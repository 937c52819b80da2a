//! HTTP routes: the webhook port and the admin port.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::connections::BodyTimedOut;
use super::drain::DRAIN_FACTOR;
use super::state::{AppState, kib};
use crate::admission::cut::cut;
use crate::admission::{self, Reviewed, audit};
use crate::policy::Policy;
use crate::trail::audit_log;
use crate::trail::events::Judgment;
use crate::trail::metrics::RejectLabels;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument, field};

/// Bodies larger than this are decided on the blocking pool, so a few huge
/// reviews cannot stall the small ones sharing a worker thread.
pub(super) const OFFLOAD_BYTES: usize = 256 * 1024;

/// The TLS port: `POST /validate`, and the probes.
pub fn webhook(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<AppState>))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            close_while_draining,
        ))
        .with_state(state)
}

/// While the server drains (unready, still answering), every HTTP/1.1
/// answer ends its connection (`connection: close`), so the client closes
/// it after reading the answer. kube-apiserver keeps its HTTP/1.1
/// connections to a webhook Service in one pool, whichever pod each was
/// dialed to: an idle one the server closed itself could be taken from that
/// pool and written to at that moment ("write: broken pipe"), refusing the
/// write, while one the client closes never is. Those left idle through the
/// delay are closed when the server stops.
async fn close_while_draining(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let http1 = request.version() <= http::Version::HTTP_11;
    let mut response = next.run(request).await;
    if http1 && !state.ready.load(Ordering::Relaxed) {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// The plain-HTTP admin port: `/metrics`, and the probes.
pub fn admin(state: Arc<AppState>) -> Router {
    admin_port(state)
}

/// What an admin port answers, the server's and `watch`'s alike: whether it
/// is ready, and its metrics.
pub(crate) trait AdminPort: Send + Sync + 'static {
    /// `Err(line)`: not ready, and the line `/readyz` answers with its 503.
    fn ready(&self) -> Result<(), String>;
    /// The metrics, text exposition; `None` when they cannot be encoded (a 500).
    fn metrics(&self) -> Option<String>;
}

/// An admin port (plain HTTP): `/metrics`, `/healthz`, `/readyz`.
pub(crate) fn admin_port<P: AdminPort>(port: Arc<P>) -> Router {
    Router::new()
        .route("/metrics", get(metrics::<P>))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<P>))
        .with_state(port)
}

impl AdminPort for AppState {
    /// Ready while serving and not draining, and while the audit writer keeps
    /// up: one that has held records without writing any for longer than
    /// [`audit_log::STALL`] (standard output not read), or whose writes fail (for
    /// [`audit_log::FAILED_UNREADY`] after each failure), makes it unready, so
    /// kube-apiserver turns to another replica; ready again once it writes.
    fn ready(&self) -> Result<(), String> {
        if !self.ready.load(Ordering::Relaxed) {
            return Err("not ready".into());
        }
        match self.audit.unready() {
            None => Ok(()),
            Some(reason) => Err(admission::one_line(format!("not ready: {reason}"))),
        }
    }

    fn metrics(&self) -> Option<String> {
        self.body_budget_on_record();
        Some(self.metrics.encode())
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz<P: AdminPort>(State(port): State<Arc<P>>) -> Response {
    match port.ready() {
        Ok(()) => "ok\n".into_response(),
        Err(line) => (StatusCode::SERVICE_UNAVAILABLE, line + "\n").into_response(),
    }
}

async fn metrics<P: AdminPort>(State(port): State<Arc<P>>, headers: HeaderMap) -> Response {
    let Some(text) = port.metrics() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, body) = crate::trail::metrics::exposition(accept, text);
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn validate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    // At debug level: a span with its fields formatted on every review costs
    // as much as the review's parse. The audit line carries the same facts.
    let span = tracing::debug_span!(
        "review",
        uid = field::Empty,
        user = field::Empty,
        resource = field::Empty,
        namespace = field::Empty,
        name = field::Empty,
        decision = field::Empty,
        authenticated = field::Empty,
    );
    answer(state, request).instrument(span).await
}

/// Reads the body, decides it, leaves its trail, answers.
async fn answer(state: Arc<AppState>, request: Request) -> Response {
    // Set per connection: a verified client certificate (`--client-ca`), or none.
    let authenticated = request
        .extensions()
        .get::<super::tls::ClientCert>()
        .copied()
        .unwrap_or_default()
        .verified();
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let (body, _budget) = match read_body(&state, request.into_body(), announced).await {
        Ok(read) => read,
        Err((code, reason)) => return reject(&state, code, reason),
    };
    let started = Instant::now();
    let (mut reviewed, policy) = match decide(&state, &body).await {
        Ok(decided) => decided,
        Err(refused) => return refused,
    };
    if let Err(unwritten) = leave_trail(&state, &mut reviewed, &body, &policy, authenticated).await
    {
        // Never an answer without its audit record: refused as a server
        // error is, kube-apiserver applying the webhook's failurePolicy.
        // Counted (in the refused reviews only) and logged (at most every
        // 10 s) by the audit log.
        return refusal(StatusCode::SERVICE_UNAVAILABLE, unwritten.to_string());
    }
    // Counted and timed once answered: its record queued, or none needed.
    state.metrics.review(&reviewed, &policy);
    state
        .metrics
        .latency
        .observe(started.elapsed().as_secs_f64());
    let mut response = Response::new(Body::from(reviewed.body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Decides the body under the policy in service (a large one on the
/// blocking pool, one at a time: [`super::state::LARGE_REVIEWS`]). Counted
/// and timed by the caller, once answered.
async fn decide(state: &AppState, body: &Bytes) -> Result<(Reviewed, Arc<Policy>), Response> {
    let policy = state.policy.load_full();
    let seal_key = state.certificates.as_ref().map(|c| c.seal_key());
    let review = move |policy: &Policy, body: &[u8]| {
        admission::review_with(policy, body, jiff::Timestamp::now(), seal_key.as_deref())
    };
    let result = if body.len() > OFFLOAD_BYTES {
        let internal = || {
            reject(
                state,
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error".into(),
            )
        };
        let Ok(deciding) = state.large_reviews.clone().acquire_owned().await else {
            return Err(internal());
        };
        let (policy, body) = (policy.clone(), body.clone());
        // The permit goes with the task: it is held until the review
        // is done, even if the client has gone.
        let decide = move || {
            let _deciding = deciding;
            review(&policy, &body)
        };
        match tokio::task::spawn_blocking(decide).await {
            Ok(result) => result,
            Err(e) => {
                tracing::error!(error = %e, "review task failed");
                return Err(internal());
            }
        }
    } else {
        review(&policy, body)
    };
    let reviewed = match result {
        Ok(reviewed) => reviewed,
        Err(e) => return Err(reject(state, StatusCode::BAD_REQUEST, e.to_string())),
    };
    Ok((reviewed, policy))
}

/// What a review leaves behind: its span's fields, its audit record, its
/// Event and its recording, each from the review itself. The audit record
/// first: a review whose record cannot be queued ([`audit_log::Unwritten`]) is
/// refused, and leaves no Event or recording of a decision never answered.
async fn leave_trail(
    state: &AppState,
    reviewed: &mut Reviewed,
    body: &[u8],
    policy: &Policy,
    authenticated: bool,
) -> Result<(), audit_log::Unwritten> {
    let span = tracing::Span::current();
    span.record("decision", reviewed.verdict().as_str());
    span.record("authenticated", authenticated);
    let Some(mut entry) = reviewed.audit.take() else {
        tracing::debug!("nothing to judge");
        return Ok(());
    };
    entry.set_authenticated(authenticated);
    if let Some(cluster) = &state.cluster_name {
        entry.set_cluster(cluster);
    }
    let judgment = Judgment {
        judged: entry.judged(),
        decision: &reviewed.decision,
        ledger: reviewed.ledger.as_ref(),
    };
    let sink = state.events.as_ref().filter(|_| {
        crate::trail::events::calls_for_event(reviewed.verdict(), entry.dry_run())
            && events_allowed(state, authenticated)
    });
    if sink.is_some() || !span.is_disabled() {
        describe(&span, judgment);
    }
    let event = sink.and_then(|sink| {
        crate::trail::events::event_for(judgment, &state.instance).map(|event| (sink, event))
    });
    state.audit.emit(entry).await?;
    if let Some((sink, event)) = event {
        sink.send(event);
    }
    if let Some(recorder) = &state.recorder
        && let Some(recording) =
            crate::trail::recording::from_reviewed(reviewed, body, policy, authenticated)
    {
        recorder.record(recording);
    }
    Ok(())
}

/// The review's span fields, and a debug line naming the finalizers, as
/// the audit record names them.
fn describe(span: &tracing::Span, judgment: Judgment<'_>) {
    let judged = judgment.judged;
    span.record("uid", judged.uid.as_str());
    span.record("user", judged.user.as_str());
    span.record("resource", judged.resource.as_str());
    span.record("namespace", judged.namespace.as_deref().unwrap_or_default());
    span.record("name", judged.name.as_str());
    tracing::debug!(
        finalizers = ?audit::listed(judgment.decision).map(|r| cut(&r.finalizer)).collect::<Vec<_>>(),
        dry_run = judged.dry_run,
        "judged finalizer removal"
    );
}

/// Whether a review's Event may be written: always for an authenticated
/// caller; for one without a verified client certificate only when the
/// operator allowed it. A skipped Event is counted and logged (at debug
/// level: a flood of forged reviews must not flood the log too).
fn events_allowed(state: &AppState, authenticated: bool) -> bool {
    if authenticated || state.events_unauthenticated {
        return true;
    }
    state
        .metrics
        .events
        .get_or_create(&crate::trail::metrics::EventLabels {
            decision: crate::trail::metrics::SKIPPED_UNAUTHENTICATED,
        })
        .inc();
    tracing::debug!("no Event: the review came without a verified client certificate");
    false
}

/// The most a body takes of the budget ahead of its next frame: hyper's
/// HTTP/1.1 read buffer at most; an HTTP/2 DATA frame is 16 KiB at most.
const READ_AHEAD: usize = 64 * 1024;

/// Reads the whole body within the size limit, the in-flight budget and the
/// body timeout. The permit returned (none for an empty body) holds the
/// body's share of the budget: keep it until the body is no longer needed.
///
/// A body announced larger than the limit is refused at once. One found
/// larger while read is still read, up to [`DRAIN_FACTOR`] times the limit
/// and within the timeout, and thrown away: a client that is still writing
/// when the 413 is sent would otherwise see a broken pipe instead of the
/// answer. (What is left of an unread body is drained after the answer:
/// `server::drain`.)
async fn read_body(
    state: &AppState,
    mut body: Body,
    announced: Option<usize>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), (StatusCode, String)> {
    let limit = state.limits.max_body_bytes;
    if announced.is_some_and(|length| length > limit) {
        return Err(too_large(limit));
    }
    let deadline = tokio::time::Instant::now() + state.limits.body_timeout;
    // The budget pays for bytes received, not announced: a client that
    // announces 8 MiB and sends nothing holds nothing. Once a body has
    // begun, room for its next frame is taken before the frame is read (as
    // much as it has sent so far, up to [`READ_AHEAD`]): a frame read leaves
    // the client's flow-control window, and one held while its body waits
    // for room would count nowhere. Only a body's first frame can wait in
    // hand, and those are bounded across requests (`take_budget`).
    let cap = announced.map_or(limit, |length| length.min(limit));
    let mut held: Option<OwnedSemaphorePermit> = None;
    let read = async {
        let mut buf = bytes::BytesMut::new();
        let mut seen: usize = 0;
        let mut reserve = announced.map(|length| length.min(limit));
        loop {
            if seen > 0 && seen < cap {
                let ahead = seen.saturating_add(seen.min(READ_AHEAD)).min(cap);
                if kib(ahead) > held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits) {
                    held = Some(take_budget(state, deadline, held.take(), kib(ahead), 0).await?);
                }
            }
            let Some(frame) = body.frame().await else {
                break;
            };
            let frame = frame.map_err(|e| {
                (
                    StatusCode::BAD_REQUEST,
                    format!("cannot read request body: {e}"),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            // One buffer of the announced size, once the body starts to
            // arrive, rather than doubling and copying: a 2.6 MB body would
            // otherwise pass through 4 MiB of buffers.
            if let Some(length) = reserve.take() {
                buf.reserve(length);
            }
            seen = seen.saturating_add(data.len());
            if seen <= limit {
                let needed = kib(seen);
                if needed > held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits) {
                    held =
                        Some(take_budget(state, deadline, held.take(), needed, data.len()).await?);
                }
                buf.extend_from_slice(&data);
            } else if seen > limit.saturating_mul(DRAIN_FACTOR) {
                break;
            }
        }
        if seen > limit {
            return Err(too_large(limit));
        }
        // What was taken ahead and not read goes back.
        let read = kib(seen);
        if let Some(permit) = held.as_mut()
            && permit.num_permits() > read
        {
            drop(permit.split(permit.num_permits() - read));
        }
        Ok((buf.freeze(), held))
    };
    match tokio::time::timeout_at(deadline, read).await {
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            "timed out reading the request body".into(),
        )),
        Ok(result) => result,
    }
}

fn too_large(limit: usize) -> (StatusCode, String) {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body exceeds {limit} bytes"),
    )
}

/// Grows `held` (or a new, empty permit) to `kib` permits of the body budget,
/// waiting for room until `deadline`, with a frame of `in_hand` bytes read
/// and held meanwhile: such frames are bounded across requests
/// (`max_waiting_frame_bytes`), and past that the body is refused at once.
async fn take_budget(
    state: &AppState,
    deadline: tokio::time::Instant,
    held: Option<OwnedSemaphorePermit>,
    kib: usize,
    in_hand: usize,
) -> Result<OwnedSemaphorePermit, (StatusCode, String)> {
    let budget = &state.body_budget;
    let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
    // Never more than the whole budget: a start-up check keeps the largest
    // accepted body within it.
    let more = u32::try_from(kib.saturating_sub(have)).unwrap_or(u32::MAX);
    let busy = || {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many request bodies in flight (more than {} bytes); try again",
                state.limits.max_inflight_body_bytes
            ),
        )
    };
    let extra = match budget.clone().try_acquire_many_owned(more) {
        Ok(permit) => permit,
        Err(_) => {
            // A frame in hand waits only while there is room for it there.
            let _waiting = match u32::try_from(super::state::kib(in_hand)) {
                Ok(0) => None,
                Ok(in_hand) => Some(
                    state
                        .body_waiting
                        .clone()
                        .try_acquire_many_owned(in_hand)
                        .map_err(|_| busy())?,
                ),
                Err(_) => return Err(busy()),
            };
            match tokio::time::timeout_at(deadline, budget.clone().acquire_many_owned(more)).await {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) | Err(_) => return Err(busy()),
            }
        }
    };
    Ok(match held {
        Some(mut held) => {
            held.merge(extra);
            held
        }
        None => extra,
    })
}

fn reject(state: &AppState, code: StatusCode, reason: String) -> Response {
    tracing::warn!(code = code.as_u16(), %reason, "refused a request");
    state
        .metrics
        .rejected
        .get_or_create(&RejectLabels {
            code: code.as_u16(),
        })
        .inc();
    let mut response = refusal(code, reason);
    if matches!(
        code,
        StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::SERVICE_UNAVAILABLE
    ) {
        // The rest of the body is still on the wire: this connection cannot
        // carry another request, and the client must not reuse it.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if matches!(
        code,
        StatusCode::REQUEST_TIMEOUT | StatusCode::SERVICE_UNAVAILABLE
    ) {
        // The body did not arrive within the body timeout (late, or no room
        // in the budget for it): an HTTP/2 connection is closed too (GOAWAY),
        // so one client cannot hold it with slow streams, one after another.
        response.extensions_mut().insert(BodyTimedOut);
    }
    response
}

/// A refused request's answer: its status and the reason, on one line.
fn refusal(code: StatusCode, reason: String) -> Response {
    let mut line = admission::one_line(reason);
    line.push('\n');
    (code, line).into_response()
}
