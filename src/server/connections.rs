//! The connections of a port: accepted within a cap (when every slot is
//! taken, one makes room: see [`Registry::make_room`]), served HTTP/1.1 or
//! HTTP/2 over TLS or plain, closed when idle or once a request's body
//! timed out, and drained when the server stops.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::drain::{DRAIN_FACTOR, Drained};
use super::stall::WriteTimeout;
use super::state::{Limits, stopped_signal};
use super::tls::ClientCert;

/// hyper's HTTP/1.1 read buffer at most: a request's headers fit with room
/// to spare; bodies stream through it.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Most bytes of header fields in an HTTP/2 request (an admission review's
/// are a few hundred).
const H2_MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// The HTTP/2 bounds of one connection: how many streams it may have open
/// at once, and its flow-control windows, per stream and per connection
/// (the most body data the peer may send that the handler has not read
/// yet, and so that the body budget does not count; fixed: an adaptive
/// window grows). An answer a peer does not read (its window kept at 0)
/// stays in memory with its stream, which stays open: the streams bound
/// what one connection can make the server hold to that many answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Bounds {
    pub streams: u32,
    pub stream_window: u32,
    pub connection_window: u32,
}

/// The bounds of the first [`WIDE_CONNECTIONS`] HTTP/2 connections open at
/// once, and of every connection whose client presented a verified
/// certificate: hyper's defaults. kube-apiserver's HTTP/2 client opens a
/// connection only once every stream of those it has is taken, one dial at
/// a time, and the bodies of its streams share the connection's window:
/// with 8 streams, 500 writes at once came over 30 to 60 connections, each
/// call waiting on a handshake; with 128 and a 64 KiB window, over fewer,
/// each body waiting on window updates (docs/performance.md, "500
/// writers"). With these, over two or three.
pub const H2_WIDE: H2Bounds = H2Bounds {
    streams: 200,
    stream_window: 1024 * 1024,
    connection_window: 1024 * 1024,
};

/// The bounds of every other HTTP/2 connection: what the connection cap
/// multiplies. 256 connections (the chart's cap) holding 8 unread answers
/// each held 51 MiB in all, where hyper's defaults on every one held 630.
pub const H2_NARROW: H2Bounds = H2Bounds {
    streams: 8,
    stream_window: 64 * 1024,
    connection_window: 64 * 1024,
};

/// How many connections of unverified clients are served [`H2_WIDE`] at
/// once: one kube-apiserver's worth. kube-apiserver speaks HTTP/2 only to
/// a webhook at a loopback URL, so only to the instance on its own node,
/// and held 2 connections at 500 writes at once (over HTTP/1.1, to every
/// other webhook, these bounds play no part). Clients that take both and
/// hold them get no more memory than two connections can hold (200
/// unread answers and 1 MiB of unread body each); the others,
/// kube-apiserver among them, are served [`H2_NARROW`] until one closes.
pub const WIDE_CONNECTIONS: usize = 2;

/// Most answer bytes buffered per HTTP/2 stream ahead of the peer's window.
const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// At the connection cap, how often a new connection looks again for one
/// to take the place of, while none may be asked yet.
const EVICT_RETRY: Duration = Duration::from_millis(50);

/// At the connection cap, how long a new connection that has not begun a
/// request yet (in its TLS handshake, or about to send its first headers)
/// is left alone: the next newcomer must not take the place of one that
/// has just taken its own, before it could send anything. Long enough for
/// a handshake and a request's headers; short enough that connections
/// opened and left silent give up their slots at once.
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(250);

/// At the connection cap, an HTTP/1.1 connection idle for less than this is
/// taken to be in its client's rotation: closed now, it may be the one the
/// client is writing its next request to, which then fails (and a POST is
/// not retried). kube-apiserver calls a webhook over HTTP/1.1 with one
/// connection per call in flight, every one of them in use every few
/// milliseconds under load. Such a connection is asked instead to answer
/// its next request with `connection: close` ([`Room::AfterAnswer`]), so
/// its client stops using it knowing, and is closed as any idle one once
/// it has been idle this long.
const RECENTLY_USED: Duration = Duration::from_secs(1);

/// At the connection cap, how long a connection asked to make room holds
/// back the asking of the next: a client that closes when told has closed
/// by then, and one that does not is dropped only after [`CLOSE_GRACE`].
const EVICT_PATIENCE: Duration = Duration::from_millis(100);

/// How long a connection asked to close while idle may take to close (send
/// its GOAWAY, flush) before it is dropped; one where a request raced in
/// has the close timeout to answer it.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Accepts connections (TLS ones when `tls` is set) and serves HTTP/1.1 and
/// HTTP/2 on them until stopped, then lets open connections finish (up to
/// `drain`) and closes those left. At most `limits.max_connections` are open
/// at once. A new connection that finds every slot taken makes another one
/// close ([`Registry::make_room`]); until one may be asked, it waits for a
/// slot, and any further ones wait in the listen backlog, not in memory.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: Limits,
    drain: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let builders = Builders::new(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Registry::default();
    let mut connections = JoinSet::new();
    loop {
        // Reap the finished, so the set holds only open connections.
        while connections.try_join_next().is_some() {}
        let Some((tcp, peer)) = accept(&listener, &mut stopped).await else {
            break;
        };
        let Some(slot) = take_slot(&slots, &registry, limits.body_timeout, &mut stopped).await
        else {
            break;
        };
        let activity = registry.register(limits.max_connections);
        let slot = Slot {
            permit: Some(slot),
            activity: activity.clone(),
        };
        let _ = tcp.set_nodelay(true);
        let connection = ServedConnection::new(
            builders.clone(),
            router.clone(),
            &limits,
            peer,
            (stopped.clone(), activity),
        );
        let tcp = WriteTimeout::new(tcp, limits.write_timeout);
        connections.spawn(connection.handshake_and_serve(
            tcp,
            tls.clone(),
            limits.handshake_timeout,
            slot,
        ));
    }
    drop(listener);
    close_all(connections, drain).await;
}

/// hyper's HTTP/1.1 and HTTP/2 settings, with HTTP/2's `bounds`. What a
/// connection holds that the body budget does not count is bounded here:
/// hyper's read buffer (HTTP/1.1; bodies stream through it), and the data
/// an HTTP/2 peer may send before the handler reads it (the flow-control
/// windows).
fn http_builder(limits: &Limits, bounds: H2Bounds) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // hyper times a next request's headers from the last answer, so
        // this is only a backstop to `IdleWatch`, which times them from
        // their first byte and closes an idle connection first.
        .header_read_timeout(limits.idle_timeout.saturating_add(limits.header_timeout))
        .max_buf_size(READ_BUFFER_BYTES)
        .keep_alive(true);
    // Pings find a peer gone silent while a stream is open; an idle
    // connection, with none open, is closed by `ServedConnection::serve`.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(bounds.streams)
        .max_send_buf_size(H2_SEND_BUFFER_BYTES)
        .adaptive_window(false)
        .initial_stream_window_size(bounds.stream_window)
        .initial_connection_window_size(bounds.connection_window)
        .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .keep_alive_interval(Some(limits.header_timeout))
        .keep_alive_timeout(limits.write_timeout);
    builder
}

/// The connection builders of a port. Over TLS a connection speaks the
/// protocol ALPN chose and no other: HTTP/2 only after `h2`, HTTP/1.1 only
/// otherwise (RFC 9113 section 3.2), so what the server knows of a
/// connection's protocol (its idle and cap rules) is what it serves. A
/// plain port learns it from the first bytes. HTTP/2 gets [`H2_WIDE`] for
/// the first [`WIDE_CONNECTIONS`] and for verified clients, [`H2_NARROW`]
/// for the rest.
#[derive(Clone)]
struct Builders {
    http1: Arc<auto::Builder<TokioExecutor>>,
    http2: Widths,
    either: Widths,
    wide_slots: Arc<Semaphore>,
}

/// A builder for each HTTP/2 width.
#[derive(Clone)]
struct Widths {
    wide: Arc<auto::Builder<TokioExecutor>>,
    narrow: Arc<auto::Builder<TokioExecutor>>,
}

impl Builders {
    fn new(limits: &Limits) -> Builders {
        Builders {
            http1: Arc::new(http_builder(limits, H2_NARROW).http1_only()),
            http2: Widths {
                wide: Arc::new(http_builder(limits, H2_WIDE).http2_only()),
                narrow: Arc::new(http_builder(limits, H2_NARROW).http2_only()),
            },
            either: Widths {
                wide: Arc::new(http_builder(limits, H2_WIDE)),
                narrow: Arc::new(http_builder(limits, H2_NARROW)),
            },
            wide_slots: Arc::new(Semaphore::new(WIDE_CONNECTIONS)),
        }
    }

    /// The builder for a connection, and the wide slot it holds until it
    /// closes. `h2`: whether ALPN chose HTTP/2 (`None`: no TLS to ask); an
    /// HTTP/1.1 connection takes no wide slot.
    fn pick(
        &self,
        client: ClientCert,
        h2: Option<bool>,
    ) -> (
        Arc<auto::Builder<TokioExecutor>>,
        Option<OwnedSemaphorePermit>,
    ) {
        let widths = match h2 {
            Some(false) => return (self.http1.clone(), None),
            Some(true) => &self.http2,
            None => &self.either,
        };
        if client.verified() {
            return (widths.wide.clone(), None);
        }
        if let Ok(slot) = self.wide_slots.clone().try_acquire_owned() {
            return (widths.wide.clone(), Some(slot));
        }
        (widths.narrow.clone(), None)
    }
}

/// The next connection; `None` once the server is told to stop.
async fn accept(
    listener: &TcpListener,
    stopped: &mut watch::Receiver<bool>,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stopped_signal(stopped) => return None,
        }
    }
}

/// A slot for a new connection; `None` once the server is told to stop.
/// At the cap, another connection makes room ([`Registry::make_room`]):
/// neither idle clients nor clients that always keep a slow request in
/// flight can keep the others out. While none may be asked, this one
/// waits for a slot.
async fn take_slot(
    slots: &Arc<Semaphore>,
    registry: &Registry,
    body_timeout: Duration,
    stopped: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        registry.make_room(body_timeout);
        tokio::select! {
            slot = slots.clone().acquire_owned() => return slot.ok(),
            () = tokio::time::sleep(EVICT_RETRY) => {}
            () = stopped_signal(stopped) => return None,
        }
    }
}

/// After the stop: each connection closes once its requests are answered;
/// those still open after `drain` are closed.
async fn close_all(mut connections: JoinSet<()>, drain: Duration) {
    let closed = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, closed).await.is_err() {
        tracing::warn!(
            ?drain,
            open = connections.len(),
            "connections still open after the drain timeout; closing them"
        );
        connections.shutdown().await;
    }
}

/// One accepted connection of a port, ready to be served.
struct ServedConnection {
    builders: Builders,
    router: Router,
    /// How long a connection may take to begin its first request, and an
    /// HTTP/1.1 one to send a next request's headers from their first byte.
    header_timeout: Duration,
    /// How long a connection with no request in flight stays open between
    /// requests, whatever the protocol.
    idle_timeout: Duration,
    /// How long a connection asked to close while idle may take to answer
    /// a request that raced in.
    close_timeout: Duration,
    /// How much of a body nobody read is still read, and for how long.
    drain: (usize, Duration),
    peer: SocketAddr,
    /// Whether the TLS client presented a verified certificate; every
    /// request on the connection carries it.
    client: ClientCert,
    /// The server stops: close once the requests in flight are answered.
    stopped: watch::Receiver<bool>,
    /// What its requests are doing, as the port's [`Registry`] sees it.
    activity: Arc<Activity>,
}

/// An answer's mark, set by the routes: its request's body did not arrive
/// within the body timeout (408, or 503 when the body budget had no room
/// for it in that time). The connection that carried it is closed, as an
/// HTTP/1.1 one is by the answer's `connection: close`: an HTTP/2 one is
/// sent GOAWAY, its other streams given the close timeout to finish. So a
/// client cannot hold a connection with slow streams, one after the other,
/// for longer than about twice the body timeout; and at the connection cap
/// such a connection is the first to go ([`Registry::make_room`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyTimedOut;

/// What a connection's requests are doing: whether one has begun, how many
/// are in flight, since when none is, and whether one timed out.
struct Activity {
    accepted: Instant,
    /// Served HTTP/1.1 (ALPN chose it).
    http1: AtomicBool,
    started: AtomicBool,
    in_flight: AtomicUsize,
    /// When its last request was answered (its accept, before any was).
    since: Mutex<Instant>,
    /// HTTP/1.1: when the first bytes of a next request arrived, as
    /// nanoseconds after `accepted`, plus one; 0 while none has, or one is
    /// in flight.
    reading: AtomicU64,
    /// When a request's body first timed out ([`BodyTimedOut`]).
    timed_out: Mutex<Option<Instant>>,
    /// How, and when, the port asked the connection to make room.
    asked: Mutex<Option<(Room, Instant)>>,
    /// Set once the connection has closed and given its slot back.
    closed: AtomicBool,
    /// Close gracefully: to make room, or because a request timed out.
    close: Notify,
    /// Drop now, to make room.
    cut: Notify,
}

/// How a connection was asked to make room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// Idle: closed gracefully, and dropped if still open and idle
    /// [`CLOSE_GRACE`] later.
    Idle,
    /// Busy, its slot held for longer than the body timeout: closed
    /// gracefully, its requests in flight given the close timeout to finish.
    Busy,
    /// A request of it timed out: dropped at once.
    Cut,
    /// HTTP/1.1, idle but used within [`RECENTLY_USED`]: its next answer
    /// carries `connection: close`; closed as [`Room::Idle`] if it stays
    /// idle that long.
    AfterAnswer,
}

impl Activity {
    fn new() -> Activity {
        let now = Instant::now();
        Activity {
            accepted: now,
            http1: AtomicBool::new(false),
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            since: Mutex::new(now),
            reading: AtomicU64::new(0),
            timed_out: Mutex::new(None),
            asked: Mutex::new(None),
            closed: AtomicBool::new(false),
            close: Notify::new(),
            cut: Notify::new(),
        }
    }

    /// A request begins; it ends when the guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.started.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.reading.store(0, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Bytes arrived: on an HTTP/1.1 connection that has served a request
    /// and has none in flight, a next one begins.
    fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.reading.load(Ordering::Relaxed) == 0
            && self.http1.load(Ordering::Relaxed)
            && self.started.load(Ordering::Relaxed)
        {
            let after = u64::try_from(self.accepted.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            self.reading.store(after + 1, Ordering::Relaxed);
        }
    }

    /// When the first bytes of a next request arrived, while its headers
    /// are still on their way.
    fn reading_since(&self) -> Option<Instant> {
        match self.reading.load(Ordering::Relaxed) {
            0 => None,
            after => Some(self.accepted + Duration::from_nanos(after - 1)),
        }
    }

    /// When the connection went idle; `None` while a request is in flight.
    fn idle_since(&self) -> Option<Instant> {
        let since = self.answered();
        (self.in_flight.load(Ordering::Acquire) == 0).then_some(since)
    }

    /// When its last request was answered, or it was accepted.
    fn answered(&self) -> Instant {
        *self.since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request's body timed out: the connection closes.
    fn body_timed_out(&self) {
        let mut timed_out = self
            .timed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if timed_out.is_none() {
            *timed_out = Some(Instant::now());
            self.close.notify_one();
        }
    }

    fn timed_out(&self) -> Option<Instant> {
        *self
            .timed_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn asked(&self) -> Option<Room> {
        self.asked_at().map(|(room, _)| room)
    }

    fn asked_at(&self) -> Option<(Room, Instant)> {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the connection to make room, as `room` says.
    fn ask(&self, room: Room) {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some((room, Instant::now()));
        match room {
            Room::Idle | Room::Busy => self.close.notify_one(),
            Room::Cut => self.cut.notify_one(),
            // Its next answer says so; nothing to do until then.
            Room::AfterAnswer => {}
        }
    }
}

/// A connection's slot, given back when the connection closes; its
/// activity then no longer counts as open, whatever its requests' tasks
/// still hold.
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    activity: Arc<Activity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.activity.closed.store(true, Ordering::Release);
    }
}

/// The open connections of a port, for the one to ask to make room when a
/// new connection finds every slot taken.
#[derive(Default)]
struct Registry(Mutex<Vec<Weak<Activity>>>);

/// The connections that may make room, each the first of its kind (see
/// [`Registry::make_room`]).
#[derive(Default)]
struct Candidates {
    timed_out: Option<(Instant, Arc<Activity>)>,
    idle: Option<(Instant, Arc<Activity>)>,
    busy: Option<(Instant, Arc<Activity>)>,
    /// A busy one was asked and is still finishing its requests.
    busy_closing: bool,
}

/// Keeps in `slot` the one with the earliest instant.
fn earliest(slot: &mut Option<(Instant, Arc<Activity>)>, at: Instant, activity: Arc<Activity>) {
    if slot.as_ref().is_none_or(|(first, _)| at < *first) {
        *slot = Some((at, activity));
    }
}

impl Registry {
    /// A new connection's activity, tracked while the connection lives.
    fn register(&self, max_connections: usize) -> Arc<Activity> {
        let activity = Arc::new(Activity::new());
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= max_connections.saturating_mul(2) {
            open.retain(is_open);
        }
        open.push(Arc::downgrade(&activity));
        activity
    }

    /// Asks one connection to make room for a new one, the first found of:
    ///
    /// 1. one a request of which timed out ([`BodyTimedOut`]), the earliest:
    ///    already closing, and holding only what is slow; dropped at once;
    /// 2. the one idle the longest (no request in flight), closed
    ///    gracefully; one that never began a request counts from its accept,
    ///    once [`FIRST_REQUEST_GRACE`] has passed, and is dropped; an
    ///    HTTP/1.1 one used within [`RECENTLY_USED`] closes after its next
    ///    answer instead ([`Room::AfterAnswer`]), or now once idle that long;
    /// 3. one with requests in flight that has held its slot for longer
    ///    than `body_timeout` (the most any request may take to arrive),
    ///    the one whose last answer is the oldest: closed gracefully (an
    ///    HTTP/1.1 one after its answer, an HTTP/2 one with GOAWAY), its
    ///    requests given the close timeout to finish. kube-apiserver's
    ///    connections answer all the time and reconnect on GOAWAY; a client
    ///    that always keeps a slow request in flight, finishing each just
    ///    in time, is one of these.
    ///
    /// None is asked while one to close after its next answer is idle, nor
    /// while one asked within [`EVICT_PATIENCE`] is still on its way out
    /// (one dropped, or one asked while idle and still idle, closing): one
    /// that takes longer (its client does not close, and it is dropped
    /// [`CLOSE_GRACE`] after it was asked) no longer holds the next one
    /// back, so clients that never close cannot make each new connection
    /// wait a grace per connection ahead of it. No busy one is asked while
    /// one asked is still finishing a request.
    fn make_room(&self, body_timeout: Duration) {
        let now = Instant::now();
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(is_open);
        let mut candidates = Candidates::default();
        for activity in open.iter().filter_map(Weak::upgrade) {
            if activity.closed.load(Ordering::Acquire) {
                continue;
            }
            let asked_at = activity.asked_at();
            let asked = asked_at.map(|(room, _)| room);
            let patient = asked_at.is_some_and(|(_, at)| now < at + EVICT_PATIENCE);
            if asked == Some(Room::Cut) {
                if patient {
                    // Its slot is on its way.
                    return;
                }
                continue;
            }
            if let Some((Room::AfterAnswer, at)) = asked_at {
                let Some(since) = activity.idle_since() else {
                    // Answering: its answer closes it, but a slow request
                    // must not keep the others from being asked.
                    candidates.busy_closing = true;
                    continue;
                };
                // Its slot is on its way with its next answer, which its
                // client, using it, sends within the second: no other is
                // asked meanwhile (each would be a connection of that
                // client too). If its client has stopped using it, or has
                // not sent that request a second after it was asked, it is
                // closed now.
                drop(open);
                if now >= since + RECENTLY_USED || now >= at + RECENTLY_USED {
                    activity.ask(Room::Idle);
                }
                return;
            }
            if let Some(at) = activity.timed_out() {
                earliest(&mut candidates.timed_out, at, activity);
            } else if let Some(since) = activity.idle_since() {
                if asked.is_some() {
                    // Idle and closing: its slot is on its way.
                    if patient {
                        return;
                    }
                    continue;
                }
                let started = activity.started.load(Ordering::Relaxed);
                if started || now >= activity.accepted + FIRST_REQUEST_GRACE {
                    earliest(&mut candidates.idle, since, activity);
                }
            } else if asked.is_some() {
                candidates.busy_closing = true;
            } else if now >= activity.accepted + body_timeout {
                earliest(&mut candidates.busy, activity.answered(), activity);
            }
        }
        drop(open);
        let Candidates {
            timed_out,
            idle,
            busy,
            busy_closing,
        } = candidates;
        if let Some((_, activity)) = timed_out {
            activity.ask(Room::Cut);
        } else if let Some((since, activity)) = idle {
            let in_rotation = activity.http1.load(Ordering::Relaxed)
                && activity.started.load(Ordering::Relaxed)
                && now < since + RECENTLY_USED;
            activity.ask(if in_rotation {
                Room::AfterAnswer
            } else {
                Room::Idle
            });
        } else if let Some((_, activity)) = busy.filter(|_| !busy_closing) {
            activity.ask(Room::Busy);
        }
    }
}

/// Whether a tracked connection is still open.
fn is_open(weak: &Weak<Activity>) -> bool {
    weak.upgrade()
        .is_some_and(|activity| !activity.closed.load(Ordering::Acquire))
}

/// A request in flight on its connection.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.since.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ServedConnection {
    fn new(
        builders: Builders,
        router: Router,
        limits: &Limits,
        peer: SocketAddr,
        (stopped, activity): (watch::Receiver<bool>, Arc<Activity>),
    ) -> ServedConnection {
        ServedConnection {
            builders,
            router,
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            // Once asked to close, an idle connection has this long to
            // finish what raced in.
            close_timeout: limits.header_timeout.max(limits.body_timeout),
            drain: (
                limits.max_body_bytes.saturating_mul(DRAIN_FACTOR),
                limits.body_timeout,
            ),
            peer,
            client: ClientCert::Unverified,
            stopped,
            activity,
        }
    }

    /// The TLS handshake (with `tls`), within `handshake_timeout`, then the
    /// connection served; `slot` is held until it closes.
    async fn handshake_and_serve(
        self,
        tcp: WriteTimeout<TcpStream>,
        tls: Option<TlsAcceptor>,
        handshake_timeout: Duration,
        slot: Slot,
    ) {
        let _slot = slot;
        // Each part boxed: the task tokio allocates, and moves, is the
        // few hundred bytes of this function's own state, not the
        // kilobytes of a TLS session and an HTTP connection.
        let Some(acceptor) = tls else {
            return Box::pin(self.serve(tcp, None)).await;
        };
        let serving = {
            let (peer, activity, mut stopping) =
                (self.peer, self.activity.clone(), self.stopped.clone());
            let handshake = Box::pin(tokio::time::timeout(
                handshake_timeout,
                acceptor.accept(tcp),
            ));
            let tls = tokio::select! {
                shaken = handshake => match shaken {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                },
                () = stopped_signal(&mut stopping) => return,
                () = activity.close.notified() => {
                    return tracing::debug!(%peer, "connection cap reached; dropping a connection still in its TLS handshake");
                }
            };
            let client = ClientCert::of(&tls);
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            Box::pin(ServedConnection { client, ..self }.serve(tls, Some(h2)))
        };
        serving.await;
    }

    /// Serves HTTP on `io` until the client closes it, it stays idle for
    /// the idle timeout, or the server stops.
    ///
    /// hyper's header timeout starts only once it knows the protocol, which
    /// takes the client's first bytes, covers only HTTP/1.1, and runs from
    /// the last answer, not from a next request's first byte; HTTP/2 has
    /// no idle timeout at all. So the header timeout and the idle timeout
    /// are kept here ([`IdleWatch`]).
    /// `h2`: whether ALPN chose HTTP/2 (`None`: no TLS to ask, a plain port
    /// learns the protocol from the first bytes).
    async fn serve<I>(self, io: I, h2: Option<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ServedConnection {
            builders,
            router,
            header_timeout,
            idle_timeout,
            close_timeout,
            drain: (drain_bytes, drain_timeout),
            peer,
            client,
            mut stopped,
            activity,
        } = self;
        let (builder, _wide) = builders.pick(client, h2);
        activity.http1.store(h2 == Some(false), Ordering::Relaxed);
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                if h2.is_none() && request.version() < http::Version::HTTP_2 {
                    // A plain port learns the protocol from the request.
                    activity.http1.store(true, Ordering::Relaxed);
                }
                let busy = activity.begin();
                let mut request =
                    request.map(|body| Drained::new(body, drain_bytes, drain_timeout));
                request.extensions_mut().insert(client);
                let answer = router.clone().oneshot(request);
                async move {
                    let mut answer = answer.await;
                    if let Ok(response) = &mut answer {
                        if response.extensions().get::<BodyTimedOut>().is_some() {
                            busy.0.body_timed_out();
                        }
                        if busy.0.asked() == Some(Room::AfterAnswer) {
                            // Asked to make room while in its client's
                            // rotation: this answer closes it.
                            response.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                    }
                    drop(busy);
                    answer
                }
            })
        };
        let connection = builder
            .serve_connection(
                TokioIo::new(Arrivals {
                    io,
                    activity: activity.clone(),
                }),
                service,
            )
            .into_owned();
        tokio::pin!(connection);
        let check = tokio::time::sleep(header_timeout.min(idle_timeout));
        tokio::pin!(check);
        let mut watch = IdleWatch {
            peer,
            header_timeout,
            idle_timeout,
            close_timeout,
            activity: activity.clone(),
            closing: None,
            stopping: false,
        };
        let ended = loop {
            let step = tokio::select! {
                ended = connection.as_mut() => break ended,
                () = check.as_mut(), if !watch.stopping => watch.checked(),
                () = activity.close.notified(), if watch.closing.is_none() => watch.asked_to_close(),
                () = activity.cut.notified() => {
                    tracing::debug!(%peer, "connection cap reached; dropping a connection whose request timed out");
                    return;
                }
                () = stopped_signal(&mut stopped), if watch.closing.is_none() => watch.stopped(),
            };
            match step {
                Step::CheckAt(at) => check.as_mut().reset(at),
                Step::Close(at) => {
                    connection.as_mut().graceful_shutdown();
                    if let Some(at) = at {
                        check.as_mut().reset(at);
                    }
                }
                Step::Drop => return,
            }
        };
        if let Err(e) = ended {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// `at` plus `wait`, or far in the future if that cannot be told.
fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .unwrap_or_else(|| at + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// A connection's bytes on their way in, noted ([`Activity::bytes_arrived`]):
/// over HTTP/1.1 the first ones of a request, before its headers are
/// complete, start its header timeout.
struct Arrivals<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Arrivals<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Arrivals<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What a served connection does next, as its [`IdleWatch`] decides.
enum Step {
    /// Look again then.
    CheckAt(Instant),
    /// Close gracefully (HTTP/2: GOAWAY), looking again then, if at all.
    Close(Option<Instant>),
    /// Drop it now.
    Drop,
}

/// Drops a connection that has not begun a request within the header
/// timeout (silent after the handshake, or stopped inside a header line or
/// the HTTP/2 preface), and an HTTP/1.1 one whose next request's headers
/// are not complete within the header timeout of their first byte. Closes
/// gracefully one with no request in flight for the idle timeout (HTTP/2:
/// GOAWAY, so the client retries elsewhere what it sent meanwhile). Closes
/// it too, gracefully, when asked: to make room, or because a request's
/// body timed out.
struct IdleWatch {
    peer: SocketAddr,
    header_timeout: Duration,
    idle_timeout: Duration,
    close_timeout: Duration,
    activity: Arc<Activity>,
    /// Once asked to close: until when a request that raced in may finish.
    closing: Option<Instant>,
    /// The server stops: the drain timeout, not this watch, bounds it.
    stopping: bool,
}

impl IdleWatch {
    /// The check timer fired.
    fn checked(&mut self) -> Step {
        let peer = self.peer;
        let now = Instant::now();
        if let Some(deadline) = self.closing {
            // Idle, it has nothing left to finish.
            if self.activity.idle_since().is_none() && now < deadline {
                return Step::CheckAt(deadline);
            }
            tracing::debug!(%peer, "connection not closed in time; dropping it");
            return Step::Drop;
        }
        // HTTP/1.1 says nothing when a next request begins: whether one
        // has is looked at this often.
        let every = if self.activity.http1.load(Ordering::Relaxed) {
            self.header_timeout.min(self.idle_timeout)
        } else {
            self.idle_timeout
        };
        let Some(since) = self.activity.idle_since() else {
            return Step::CheckAt(later(now, every));
        };
        if !self.activity.started.load(Ordering::Relaxed) {
            let deadline = later(since, self.header_timeout);
            if now < deadline {
                return Step::CheckAt(deadline);
            }
            tracing::debug!(%peer, "no request within the header timeout; closing");
            return Step::Drop;
        }
        if let Some(reading) = self.activity.reading_since() {
            let deadline = later(reading, self.header_timeout);
            if now < deadline {
                return Step::CheckAt(deadline);
            }
            tracing::debug!(%peer, "a request's headers not complete within the header timeout; closing");
            return Step::Drop;
        }
        let deadline = later(since, self.idle_timeout);
        if now < deadline {
            return Step::CheckAt(deadline.min(later(now, every)));
        }
        tracing::debug!(%peer, "idle connection; closing");
        self.closing = Some(now + self.close_timeout);
        Step::Close(Some(now + CLOSE_GRACE))
    }

    /// Asked to close: a request's body timed out, or the port needs room
    /// for a new connection.
    fn asked_to_close(&mut self) -> Step {
        let peer = self.peer;
        if !self.activity.started.load(Ordering::Relaxed) {
            tracing::debug!(%peer, "connection cap reached; dropping a connection that never began a request");
            return Step::Drop;
        }
        if self.activity.timed_out().is_some() {
            tracing::debug!(%peer, "a request's body timed out; closing its connection");
        } else if self.activity.asked() == Some(Room::Busy) {
            tracing::debug!(%peer, "connection cap reached; closing a connection busy for longer than the body timeout");
        } else {
            tracing::debug!(%peer, "connection cap reached; closing the connection idle the longest");
        }
        let now = Instant::now();
        self.closing = Some(now + self.close_timeout);
        Step::Close(Some(now + CLOSE_GRACE))
    }

    /// The server stops: the requests in flight finish, within the drain
    /// timeout (`serve` closes what is left after it).
    fn stopped(&mut self) -> Step {
        self.closing = Some(Instant::now());
        self.stopping = true;
        Step::Close(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY_TIMEOUT: Duration = Duration::from_secs(10);

    /// A tracked connection: accepted `age` ago, its last answer
    /// `answered` ago (none: never began a request), `in_flight` requests.
    fn connection(
        registry: &Registry,
        age: Duration,
        answered: Option<Duration>,
        in_flight: usize,
    ) -> Arc<Activity> {
        let now = Instant::now();
        let activity = Arc::new(Activity {
            accepted: now - age,
            started: AtomicBool::new(answered.is_some() || in_flight > 0),
            in_flight: AtomicUsize::new(in_flight),
            since: Mutex::new(now - answered.unwrap_or(age)),
            ..Activity::new()
        });
        registry.0.lock().unwrap().push(Arc::downgrade(&activity));
        activity
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// What tokio allocates and moves for every connection accepted: the
    /// TLS session and the HTTP connection it serves are boxed apart (they
    /// were 11 KiB inline, copied several times over per connection).
    #[tokio::test]
    async fn the_task_of_a_connection_is_small() {
        let limits = Limits {
            max_body_bytes: 1 << 20,
            handshake_timeout: secs(10),
            header_timeout: secs(10),
            idle_timeout: secs(120),
            body_timeout: secs(10),
            write_timeout: secs(10),
            max_connections: 8,
            max_inflight_body_bytes: 8 << 20,
            max_waiting_frame_bytes: 8 << 20,
        };
        let builders = Builders::new(&limits);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap();
        let tcp = TcpStream::connect(peer).await.unwrap();
        let (_stop, stopped) = watch::channel(false);
        let activity = Arc::new(Activity::new());
        let connection = ServedConnection::new(
            builders,
            Router::new(),
            &limits,
            peer,
            (stopped, activity.clone()),
        );
        // The future's size is its type's, whichever acceptor it is given.
        let task = connection.handshake_and_serve(
            WriteTimeout::new(tcp, limits.write_timeout),
            None,
            limits.handshake_timeout,
            Slot {
                permit: None,
                activity,
            },
        );
        let size = std::mem::size_of_val(&task);
        assert!(size <= 1024, "{size} bytes");
    }

    #[tokio::test]
    async fn a_connection_whose_request_timed_out_goes_first_and_at_once() {
        let registry = Registry::default();
        let idle = connection(&registry, secs(60), Some(secs(30)), 0);
        let busy = connection(&registry, secs(60), Some(secs(50)), 1);
        let slow = connection(&registry, secs(20), None, 2);
        slow.body_timed_out();
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(slow.asked(), Some(Room::Cut));
        assert_eq!((idle.asked(), busy.asked()), (None, None));
        // Until it has closed, none other is asked.
        registry.make_room(BODY_TIMEOUT);
        assert_eq!((idle.asked(), busy.asked()), (None, None));
        slow.closed.store(true, Ordering::Release);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(idle.asked(), Some(Room::Idle));
    }

    #[tokio::test]
    async fn the_one_idle_the_longest_goes_before_a_busy_one() {
        let registry = Registry::default();
        let busy = connection(&registry, secs(60), Some(secs(50)), 1);
        let recent = connection(&registry, secs(60), Some(secs(1)), 0);
        let longest = connection(&registry, secs(60), Some(secs(5)), 0);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(longest.asked(), Some(Room::Idle));
        assert_eq!((recent.asked(), busy.asked()), (None, None));
        // While it is still idle and closing, none other is asked.
        registry.make_room(BODY_TIMEOUT);
        assert_eq!((recent.asked(), busy.asked()), (None, None));
    }

    /// A client that does not close when asked (it ignores a GOAWAY, and
    /// is dropped a grace later) holds back the asking of the next one for
    /// the patience only: new connections behind many such are not made to
    /// wait a grace each.
    #[tokio::test]
    async fn one_that_does_not_close_when_asked_holds_back_the_next_only_so_long() {
        let registry = Registry::default();
        let first = connection(&registry, secs(60), Some(secs(20)), 0);
        let second = connection(&registry, secs(60), Some(secs(10)), 0);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(first.asked(), Some(Room::Idle));
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(second.asked(), None);
        *first.asked.lock().unwrap() = Some((Room::Idle, Instant::now() - EVICT_PATIENCE));
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(second.asked(), Some(Room::Idle));
        // One to close after its next answer, whose client keeps it busy
        // just under the rotation's second but never sends that request,
        // is closed once asked that long ago.
        let registry = Registry::default();
        let rotating = connection(&registry, secs(60), Some(Duration::from_millis(5)), 0);
        rotating.http1.store(true, Ordering::Relaxed);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(rotating.asked(), Some(Room::AfterAnswer));
        *rotating.asked.lock().unwrap() = Some((Room::AfterAnswer, Instant::now() - RECENTLY_USED));
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(rotating.asked(), Some(Room::Idle));
    }

    #[tokio::test]
    async fn an_http1_connection_in_its_clients_rotation_closes_after_its_next_answer() {
        let registry = Registry::default();
        let busy = connection(&registry, secs(60), Some(secs(50)), 1);
        let rotating = connection(&registry, secs(60), Some(Duration::from_millis(5)), 0);
        rotating.http1.store(true, Ordering::Relaxed);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(rotating.asked(), Some(Room::AfterAnswer));
        // On its way with its next answer: none other is asked meanwhile.
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(rotating.asked(), Some(Room::AfterAnswer));
        assert_eq!(busy.asked(), None);
        // Its client stopped using it: closed now.
        *rotating.since.lock().unwrap() = Instant::now() - RECENTLY_USED;
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(rotating.asked(), Some(Room::Idle));
        assert_eq!(busy.asked(), None);
        // Asked, then answering a request: the others may still be asked,
        // the idle before the busy, so a slow request cannot hold them off.
        let registry = Registry::default();
        let slow = connection(&registry, secs(60), Some(Duration::from_millis(5)), 0);
        slow.http1.store(true, Ordering::Relaxed);
        let busy = connection(&registry, secs(60), Some(secs(50)), 1);
        let idle = connection(&registry, secs(60), Some(secs(5)), 0);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(idle.asked(), Some(Room::Idle));
        idle.closed.store(true, Ordering::Release);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(slow.asked(), Some(Room::AfterAnswer));
        slow.in_flight.store(1, Ordering::Release);
        let other = connection(&registry, secs(60), Some(secs(3)), 0);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(other.asked(), Some(Room::Idle));
        assert_eq!(busy.asked(), None);
        // One unused for as long is closed at once, as over HTTP/2.
        let registry = Registry::default();
        let unused = connection(&registry, secs(60), Some(secs(2)), 0);
        unused.http1.store(true, Ordering::Relaxed);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(unused.asked(), Some(Room::Idle));
    }

    #[tokio::test]
    async fn a_new_connection_is_left_to_begin_its_first_request() {
        let registry = Registry::default();
        let new = connection(&registry, Duration::ZERO, None, 0);
        let busy = connection(&registry, secs(1), Some(secs(1)), 1);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!((new.asked(), busy.asked()), (None, None));
        // Silent past the grace: it makes room.
        let silent = connection(&registry, FIRST_REQUEST_GRACE * 2, None, 0);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(silent.asked(), Some(Room::Idle));
        assert_eq!((new.asked(), busy.asked()), (None, None));
    }

    #[tokio::test]
    async fn a_busy_one_goes_once_it_held_its_slot_past_the_body_timeout() {
        let registry = Registry::default();
        // Busy, but within the time its first request may take.
        let young = connection(&registry, BODY_TIMEOUT / 2, None, 1);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(young.asked(), None);
        // Of those past it, the one answered the longest ago.
        let answering = connection(&registry, secs(60), Some(Duration::ZERO), 3);
        let stalled = connection(&registry, secs(30), Some(secs(9)), 2);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(stalled.asked(), Some(Room::Busy));
        assert_eq!((young.asked(), answering.asked()), (None, None));
        // One at a time: while it finishes its requests, no other busy one.
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(answering.asked(), None);
        // Gone: the next.
        stalled.closed.store(true, Ordering::Release);
        registry.make_room(BODY_TIMEOUT);
        assert_eq!(answering.asked(), Some(Room::Busy));
    }
}
