//! Which HTTP a client connection speaks, told from its first bytes, and the bytes read handed
//! back to hyper together with what follows them.
//!
//! hyper-util's automatic detection (`server::conn::auto`, its `ReadVersion` and `Rewind`) does
//! the same test but hands the 24 bytes back alone: hyper's HTTP/1.1 reader sees a 24-byte
//! partial head first, and to read the rest it grows its 8 KiB read buffer to 16 KiB, which the
//! connection keeps for life: 8 KiB more per open watch, and a copy per connection
//! (bench/PERF_NOTES.md, twenty-third round). Here hyper's first read returns those bytes and
//! whatever the socket already holds after them, so a head sent in one segment arrives whole.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio_util::sync::CancellationToken;

/// What an HTTP/2 client sends first (RFC 9113, section 3.4); no HTTP/1.1 request starts so.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol of a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Anything else: HTTP/1.1 (or HTTP/1.0) in practice, and hyper refuses what is not.
    Http1,
    /// With prior knowledge (h2c), or over TLS (ALPN `h2`, or none and the preface).
    Http2,
}

/// A connection's first bytes, read to tell its protocol.
pub struct FirstBytes {
    /// What they say the connection speaks.
    pub protocol: Protocol,
    bytes: [u8; H2_PREFACE.len()],
    len: usize,
}

/// Reads `io`'s first bytes until they are HTTP/2's preface or cannot be. Fails with
/// [`io::ErrorKind::Interrupted`] when `drain` fires first: a connection that has not sent a
/// request is not kept through a shutdown. `io` bounds the wait (a [`super::FirstBytesDeadline`]).
///
/// It borrows `io` rather than owning it so that the connection's future holds the
/// connection once (a TLS stream is over 1 KB; each future that owns it as an argument keeps a
/// copy for its whole life).
pub async fn detect<I>(io: &mut I, drain: &CancellationToken) -> io::Result<FirstBytes>
where
    I: AsyncRead + Unpin,
{
    let mut bytes = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    let protocol = loop {
        let n = tokio::select! {
            read = io.read(&mut bytes[len..]) => read?,
            () = drain.cancelled() => {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "shutting down"));
            }
        };
        let end = len + n;
        let matches = n > 0 && bytes[len..end] == H2_PREFACE[len..end];
        len = end;
        // End of stream before the preface is complete: hyper's HTTP/1.1 side closes it.
        if !matches {
            break Protocol::Http1;
        }
        if len == H2_PREFACE.len() {
            break Protocol::Http2;
        }
    };
    Ok(FirstBytes {
        protocol,
        bytes,
        len,
    })
}

/// A connection whose first bytes were read by [`detect`], and are read again first.
pub struct Detected<I> {
    inner: I,
    first: [u8; H2_PREFACE.len()],
    /// `first[next..len]` is still to be read.
    next: usize,
    len: usize,
    /// An error of the read that followed the first bytes, returned by the next read.
    failed: Option<io::Error>,
}

impl<I> Detected<I> {
    /// `io`, its `first` bytes given back.
    pub fn new(first: FirstBytes, io: I) -> Self {
        Self {
            inner: io,
            first: first.bytes,
            next: 0,
            len: first.len,
            failed: None,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Detected<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        if this.next == this.len {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = (this.len - this.next).min(buf.remaining());
        buf.put_slice(&this.first[this.next..this.next + n]);
        this.next += n;
        if this.next == this.len && buf.remaining() > 0 {
            // The rest of what the socket holds, if it holds any; if not, the bytes above are
            // this read's and the inner reader has registered the wake-up for the next.
            if let Poll::Ready(Err(e)) = Pin::new(&mut this.inner).poll_read(cx, buf) {
                this.failed = Some(e);
            }
        }
        Poll::Ready(Ok(()))
    }
}

crate::plumbing::write_through!(impl<I> Detected<I>, inner);
