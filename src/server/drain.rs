//! Request bodies that are read to their end even when nobody wants them.
//!
//! A handler may answer before reading the body: a 404 or 405 from the
//! router, a 413 past the size limit. Over HTTP/2, hyper then drops the
//! request stream while the client is still sending it, and h2 resets the
//! stream: depending on how the frames interleave, the client sees the reset
//! instead of the answer. So a body dropped before its end is handed to a
//! task that reads the rest and throws it away (at most `max_bytes`, within
//! `timeout`), and the stream closes as a finished exchange. Over HTTP/1.1
//! the same reading keeps the connection usable for the next request.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// How much of an oversized body is read and discarded, as a multiple of
/// the limit: before answering 413, or after an answer given unread.
pub(super) const DRAIN_FACTOR: usize = 4;

/// A request body that is drained in the background if dropped unfinished.
pub struct Drained {
    inner: Option<Incoming>,
    max_bytes: usize,
    timeout: Duration,
}

impl Drained {
    pub fn new(inner: Incoming, max_bytes: usize, timeout: Duration) -> Drained {
        Drained {
            inner: Some(inner),
            max_bytes,
            timeout,
        }
    }
}

impl Body for Drained {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = frame {
            // Finished, or broken: nothing left to drain.
            self.inner = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        // Outside a runtime (never, in the server) the body is simply dropped.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body, self.max_bytes, self.timeout));
        }
    }
}

/// Reads and discards what is left of `body`: at most `max_bytes`, within `timeout`.
async fn drain(mut body: Incoming, max_bytes: usize, timeout: Duration) {
    let read = async {
        let mut seen: usize = 0;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                seen = seen.saturating_add(data.len());
                if seen > max_bytes {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
}
