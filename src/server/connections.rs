//! The connections of a port: accepted within a cap (the one idle the
//! longest makes room), served HTTP/1.1 or HTTP/2 over TLS or plain, closed
//! when idle, and drained when the server stops.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
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

/// HTTP/2 flow-control windows, per stream and per connection: the most
/// body data a peer may send that the handler has not read yet, and so
/// that the body budget does not count.
pub const H2_WINDOW_BYTES: u32 = 64 * 1024;

/// Most bytes of header fields in an HTTP/2 request (an admission review's
/// are a few hundred).
const H2_MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// Most streams open at once on one HTTP/2 connection. An answer a peer
/// does not read (its window kept at 0) stays in memory with its stream,
/// which stays open: this bounds what one connection can make the server
/// hold to this many answers. kube-apiserver calls webhooks over
/// HTTP/1.1, one request per connection at a time; an HTTP/2 client with
/// more to send waits for a stream.
const H2_MAX_STREAMS: u32 = 8;

/// Most answer bytes buffered per HTTP/2 stream ahead of the peer's window.
const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// At the connection cap, how often a new connection looks again for an
/// idle one to take the place of, while every connection is busy.
const EVICT_RETRY: Duration = Duration::from_millis(50);

/// How long a connection asked to close while idle may take to close (send
/// its GOAWAY, flush) before it is dropped; one where a request raced in
/// has the close timeout to answer it.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Accepts connections (TLS ones when `tls` is set) and serves HTTP/1.1 and
/// HTTP/2 on them until stopped, then lets open connections finish (up to
/// `drain`) and closes those left. At most `limits.max_connections` are open
/// at once. A new connection that finds every slot taken makes the one idle
/// the longest close (see [`Registry`]); when every one has a request in
/// flight, it waits for a slot, and any further ones wait in the listen
/// backlog, not in memory.
pub(super) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: Limits,
    drain: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let builder = http_builder(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Registry::default();
    let mut connections = JoinSet::new();
    loop {
        // Reap the finished, so the set holds only open connections.
        while connections.try_join_next().is_some() {}
        let Some((tcp, peer)) = accept(&listener, &mut stopped).await else {
            break;
        };
        let Some(slot) = take_slot(&slots, &registry, &mut stopped).await else {
            break;
        };
        let activity = registry.register(limits.max_connections);
        let _ = tcp.set_nodelay(true);
        let connection = ServedConnection::new(
            builder.clone(),
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

/// hyper's HTTP/1.1 and HTTP/2 settings. What a connection holds that the
/// body budget does not count is bounded here: hyper's read buffer
/// (HTTP/1.1; bodies stream through it), and the data an HTTP/2 peer may
/// send before the handler reads it (the flow-control windows, fixed: an
/// adaptive window grows).
fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(READ_BUFFER_BYTES)
        .keep_alive(true);
    // Pings find a peer gone silent while a stream is open; an idle
    // connection, with none open, is closed by `ServedConnection::serve`.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_send_buf_size(H2_SEND_BUFFER_BYTES)
        .adaptive_window(false)
        .initial_stream_window_size(H2_WINDOW_BYTES)
        .initial_connection_window_size(H2_WINDOW_BYTES)
        .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .keep_alive_interval(Some(limits.header_timeout))
        .keep_alive_timeout(limits.write_timeout);
    builder
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
/// At the cap, the connection idle the longest makes room: idle clients
/// cannot keep the others out. One with a request in flight is never
/// asked; when all are busy, this one waits for a slot.
async fn take_slot(
    slots: &Arc<Semaphore>,
    registry: &Registry,
    stopped: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    loop {
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        registry.evict_longest_idle();
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
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    /// How long a connection with no request in flight stays open: before
    /// its first request, and between requests, whatever the protocol.
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

/// What a connection's requests are doing: whether one has begun, how many
/// are in flight, and since when none is.
struct Activity {
    started: AtomicBool,
    in_flight: AtomicUsize,
    since: Mutex<Instant>,
    /// Set once the port asked the connection to make room.
    evicted: AtomicBool,
    /// Close now, to make room for a new connection.
    close: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            since: Mutex::new(Instant::now()),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    /// A request begins; it ends when the guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.started.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// When the connection went idle; `None` while a request is in flight.
    fn idle_since(&self) -> Option<Instant> {
        let since = *self.since.lock().unwrap_or_else(PoisonError::into_inner);
        (self.in_flight.load(Ordering::Acquire) == 0).then_some(since)
    }
}

/// The open connections of a port, for the one to ask to close when a new
/// connection finds every slot taken.
#[derive(Default)]
struct Registry(Mutex<Vec<Weak<Activity>>>);

impl Registry {
    /// A new connection's activity, tracked while the connection lives.
    fn register(&self, max_connections: usize) -> Arc<Activity> {
        let activity = Arc::new(Activity::new());
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= max_connections.saturating_mul(2) {
            open.retain(|weak| weak.strong_count() > 0);
        }
        open.push(Arc::downgrade(&activity));
        activity
    }

    /// Asks the connection idle the longest (no request in flight; one that
    /// never began a request counts from its accept) to close, unless one
    /// asked before is still idle and closing. A connection with a request
    /// in flight is never asked.
    fn evict_longest_idle(&self) {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|weak| weak.strong_count() > 0);
        let live = open.iter().filter_map(Weak::upgrade);
        let mut longest: Option<(Instant, Arc<Activity>)> = None;
        for activity in live {
            let Some(since) = activity.idle_since() else {
                continue;
            };
            if activity.evicted.load(Ordering::Relaxed) {
                // Still closing: the slot it frees is on its way.
                return;
            }
            if longest.as_ref().is_none_or(|(oldest, _)| since < *oldest) {
                longest = Some((since, activity));
            }
        }
        if let Some((_, activity)) = longest {
            activity.evicted.store(true, Ordering::Relaxed);
            activity.close.notify_one();
        }
    }
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
        builder: auto::Builder<TokioExecutor>,
        router: Router,
        limits: &Limits,
        peer: SocketAddr,
        (stopped, activity): (watch::Receiver<bool>, Arc<Activity>),
    ) -> ServedConnection {
        ServedConnection {
            builder,
            router,
            idle_timeout: limits.header_timeout,
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
        slot: OwnedSemaphorePermit,
    ) {
        let _slot = slot;
        let Some(acceptor) = tls else {
            return self.serve(tcp).await;
        };
        let (peer, activity, mut stopping) =
            (self.peer, self.activity.clone(), self.stopped.clone());
        let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
        tokio::select! {
            shaken = handshake => match shaken {
                Ok(Ok(tls)) => {
                    let client = ClientCert::of(&tls);
                    ServedConnection { client, ..self }.serve(tls).await
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            },
            () = stopped_signal(&mut stopping) => {}
            () = activity.close.notified() => {
                tracing::debug!(%peer, "connection cap reached; dropping a connection still in its TLS handshake");
            }
        }
    }

    /// Serves HTTP on `io` until the client closes it, it stays idle for
    /// the idle timeout, or the server stops.
    ///
    /// hyper's header timeout starts only once it knows the protocol, which
    /// takes the client's first bytes, and covers only HTTP/1.1; HTTP/2 has
    /// no idle timeout at all. So a connection with no request in flight
    /// for the idle timeout is closed here ([`IdleWatch`]).
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ServedConnection {
            builder,
            router,
            idle_timeout,
            close_timeout,
            drain: (drain_bytes, drain_timeout),
            peer,
            client,
            mut stopped,
            activity,
        } = self;
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let busy = activity.begin();
                let mut request =
                    request.map(|body| Drained::new(body, drain_bytes, drain_timeout));
                request.extensions_mut().insert(client);
                let answer = router.clone().oneshot(request);
                async move {
                    let answer = answer.await;
                    drop(busy);
                    answer
                }
            })
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        tokio::pin!(connection);
        let check = tokio::time::sleep(idle_timeout);
        tokio::pin!(check);
        let mut watch = IdleWatch {
            peer,
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
                () = activity.close.notified(), if watch.closing.is_none() => watch.evicted(),
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

/// What a served connection does next, as its [`IdleWatch`] decides.
enum Step {
    /// Look again then.
    CheckAt(Instant),
    /// Close gracefully (HTTP/2: GOAWAY), looking again then, if at all.
    Close(Option<Instant>),
    /// Drop it now.
    Drop,
}

/// Closes a connection with no request in flight for the idle timeout: at
/// once when it never began a request (silent after the handshake, or
/// stopped inside the HTTP/2 preface), else gracefully (HTTP/2: GOAWAY, so
/// the client retries elsewhere what it sent meanwhile).
struct IdleWatch {
    peer: SocketAddr,
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
        match self.activity.idle_since() {
            None => Step::CheckAt(now + self.idle_timeout),
            Some(since) if now < since + self.idle_timeout => {
                Step::CheckAt(since + self.idle_timeout)
            }
            Some(_) if !self.activity.started.load(Ordering::Relaxed) => {
                tracing::debug!(%peer, "no request within the header timeout; closing");
                Step::Drop
            }
            Some(_) => {
                tracing::debug!(%peer, "idle connection; closing");
                self.closing = Some(now + self.close_timeout);
                Step::Close(Some(now + CLOSE_GRACE))
            }
        }
    }

    /// The port asked this connection to make room for a new one.
    fn evicted(&mut self) -> Step {
        let peer = self.peer;
        if !self.activity.started.load(Ordering::Relaxed) {
            tracing::debug!(%peer, "connection cap reached; dropping a connection that never began a request");
            return Step::Drop;
        }
        tracing::debug!(%peer, "connection cap reached; closing the connection idle the longest");
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
