//! A deadline on a connection's first bytes, which hyper's protocol detection would wait for
//! forever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

/// Bytes after which hyper has told HTTP/2's preface from an HTTP/1.1 request.
const PREFACE_BYTES: usize = 24;

/// A connection that fails its reads once `timeout` passes before its first
/// `PREFACE_BYTES` arrive. hyper's automatic protocol detection reads them with no time
/// limit, and its HTTP/1.1 header timeout only starts after it; this closes the gap.
pub struct FirstBytesDeadline<I> {
    inner: I,
    read: usize,
    timeout: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> FirstBytesDeadline<I> {
    /// `inner`, whose first bytes must arrive within `timeout` (counted from the first read).
    pub fn new(inner: I, timeout: Duration) -> Self {
        Self {
            inner,
            read: 0,
            timeout,
            deadline: None,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstBytesDeadline<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.read >= PREFACE_BYTES {
            return polled;
        }
        this.read += buf.filled().len() - before;
        if polled.is_ready() || this.read >= PREFACE_BYTES {
            if this.read >= PREFACE_BYTES {
                this.deadline = None;
            }
            return polled;
        }
        let timeout = this.timeout;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no request within {timeout:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

crate::plumbing::write_through!(impl<I> FirstBytesDeadline<I>, inner);
