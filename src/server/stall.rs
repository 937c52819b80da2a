//! A write timeout for connections: hyper has none.
//!
//! A client that never reads its answer leaves the server's writes pending
//! forever once the socket's buffers are full, holding its connection slot
//! and whatever the answer holds. [`WriteTimeout`] fails a write, flush or
//! shutdown that makes no progress for the timeout, which ends the
//! connection. A write that keeps making progress, however slowly, is left
//! alone: the timer restarts whenever bytes go out.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// An IO whose writes fail after `timeout` without progress.
pub struct WriteTimeout<I> {
    inner: I,
    timeout: Duration,
    /// Running while a write is pending: since the last progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> WriteTimeout<I> {
    pub fn new(inner: I, timeout: Duration) -> WriteTimeout<I> {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// `poll` of the inner IO, timed: progress restarts the timer, a
    /// pending write starts it, and once it fires the write fails.
    fn timed<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match stalled.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {timeout:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteTimeout<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_write_nobody_reads_fails_after_the_timeout() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut io = WriteTimeout::new(ours, TIMEOUT);
        let started = std::time::Instant::now();
        let error = io.write_all(&[0; 64 * 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(took >= TIMEOUT && took < TIMEOUT * 10, "{took:?}");
        // What fitted was written.
        let mut buf = vec![0; 2048];
        assert_eq!(theirs.read(&mut buf).await.unwrap(), 1024);
    }

    #[tokio::test]
    async fn a_slow_reader_keeps_its_connection() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut io = WriteTimeout::new(ours, TIMEOUT);
        let reader = tokio::spawn(async move {
            let mut buf = vec![0; 1024];
            let mut total = 0;
            // A KiB every 100 ms: the whole write takes longer than the
            // timeout, but never stalls for it.
            while total < 8 * 1024 {
                tokio::time::sleep(TIMEOUT / 3).await;
                total += theirs.read(&mut buf).await.unwrap();
            }
            total
        });
        io.write_all(&[0; 8 * 1024]).await.unwrap();
        drop(io);
        assert_eq!(reader.await.unwrap(), 8 * 1024);
    }
}
