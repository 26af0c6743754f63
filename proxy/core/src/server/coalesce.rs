//! An HTTP/2 client connection's writes of one poll, sent to the client together.
//!
//! The `h2` crate under hyper's server writes a `DATA` frame of 256 bytes or more as its own
//! write and flushes the connection before it queues the next frame
//! (`h2/src/codec/framed_write.rs`: `CHAIN_THRESHOLD`, `poll_ready`), and tokio-rustls turns
//! each write into a TLS record and a system call of its own (`tokio-rustls/src/common/mod.rs`,
//! `Stream::poll_write`). So when the answers of several streams of one connection are ready
//! together (a client's burst, a controller's lists in parallel), each went out as its own
//! record and its own `writev`: on loopback every `writev` is the kernel's whole send and
//! receive path and a wake-up of the client. HAProxy fills one buffer per connection: for
//! HTTP/2 clients in bursts it made 0.75 writes per request, mvproxy 1.17, and 0.50 with this
//! (bench/PERF_NOTES.md, twenty-eighth round).
//!
//! [`serve`] puts [`Coalesced`] between the connection and hyper: a write of less than
//! [`RECORD`] is copied into the connection's pending bytes, hyper's flushes are taken as done,
//! and when hyper's poll of the connection returns, the pending bytes go to the connection in
//! one write (one TLS record up to 16 KiB). Nothing waits for a timer or for more bytes: what
//! one poll wrote leaves before the task sleeps, as it did before. A write of a record's size or
//! more goes through as it came (after what is pending), so large answers are not copied.
//!
//! HTTP/1.1 connections are not wrapped: hyper's HTTP/1.1 server already writes an answer's
//! head and body in one `writev`, and one connection carries one request at a time.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most plaintext one TLS record carries (RFC 8446, section 5.1): coalescing beyond it
/// saves no record, and a write this large is sent without a copy.
pub(crate) const RECORD: usize = 16 * 1024;

/// Serves `io` with `serve_connection` (hyper's HTTP/2 server, given the [`Coalesced`] `io`),
/// sending what each poll of it wrote when the poll returns.
pub(crate) async fn serve<I, F, Fut, T>(io: I, serve_connection: F) -> T
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(Coalesced<I>) -> Fut,
    Fut: Future<Output = T>,
{
    let shared = Arc::new(Mutex::new(Shared {
        io,
        pending: Vec::new(),
        sent: 0,
        failed: None,
    }));
    let mut conn = pin!(serve_connection(Coalesced(shared.clone())));
    std::future::poll_fn(|cx| {
        let done = conn.as_mut().poll(cx);
        let mut shared = lock(&shared);
        if let Poll::Ready(Err(e)) = shared.poll_send(cx) {
            // hyper reads the error at its next read or write of the connection.
            shared.failed = Some(e);
            cx.waker().wake_by_ref();
        }
        done
    })
    .await
}

/// The connection as hyper sees it: reads pass through, writes wait for the end of the poll.
pub(crate) struct Coalesced<I>(Arc<Mutex<Shared<I>>>);

struct Shared<I> {
    io: I,
    /// Bytes written by hyper and not yet sent: `pending[sent..]`.
    pending: Vec<u8>,
    sent: usize,
    /// A failed send, handed to hyper at its next read or write.
    failed: Option<io::Error>,
}

fn lock<I>(shared: &Mutex<Shared<I>>) -> MutexGuard<'_, Shared<I>> {
    // Nothing that can panic runs under the lock but the connection's own I/O.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<I> Shared<I> {
    fn take_failure(&mut self) -> io::Result<()> {
        self.failed.take().map_or(Ok(()), Err)
    }
}

impl<I: AsyncWrite + Unpin> Shared<I> {
    /// Sends the pending bytes; `Ready(Ok)` once none remain and the connection is flushed.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        if !self.pending.is_empty() {
            // Released rather than kept: an idle connection (a kubelet's, for hours) holds none.
            self.pending = Vec::new();
            self.sent = 0;
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Takes `len` bytes of hyper's: copies `bufs` when they are small, or sends them as they
    /// are once nothing is pending.
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.take_failure()?;
        if self.pending.len() - self.sent + len > RECORD {
            ready!(self.poll_send(cx))?;
        }
        if len >= RECORD {
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            self.pending.extend_from_slice(buf);
        }
        Poll::Ready(Ok(len))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Coalesced<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.0);
        shared.take_failure()?;
        Pin::new(&mut shared.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Coalesced<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_take(cx, &[IoSlice::new(buf)], buf.len())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        lock(&self.0).poll_take(cx, bufs, len)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Done at once: [`serve`] sends what is pending when hyper's poll returns.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(lock(&self.0).take_failure())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.0);
        shared.take_failure()?;
        ready!(shared.poll_send(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
