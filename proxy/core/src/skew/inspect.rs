//! A response body that is forwarded frame by frame, as ever, and also copied, up to a bound,
//! for a look once it has ended.
//!
//! A `DELETE` response says which finalizers hold the object ([`super::deleted`]), but the
//! client must not wait for mvproxy to read it, and a body that could be long (a
//! `deletecollection`) must not be held in memory. So each data frame goes on to the client at
//! once; a copy is kept while the body stays within the bound, and the look runs when the body
//! ends. A body that outgrows the bound, fails or is dropped unread is not looked at.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::plumbing::{Body, BoxError};

/// What runs on the whole body once it has ended within the bound.
pub type Look = Box<dyn FnOnce(&[u8]) + Send + Sync>;

/// `inner`, with its first `limit` bytes handed to `look` when it ends.
pub struct Inspected {
    inner: Body,
    copy: Vec<u8>,
    limit: usize,
    look: Option<Look>,
}

impl std::fmt::Debug for Inspected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspected")
            .field("copied", &self.copy.len())
            .field("limit", &self.limit)
            .field("pending", &self.look.is_some())
            .finish_non_exhaustive()
    }
}

impl Inspected {
    /// Wraps `inner`.
    pub fn new(inner: Body, limit: usize, look: Look) -> Self {
        Self {
            inner,
            copy: Vec::new(),
            limit,
            look: Some(look),
        }
    }

    fn finish(&mut self) {
        if let Some(look) = self.look.take() {
            look(&self.copy);
        }
        self.copy = Vec::new();
    }

    fn give_up(&mut self) {
        self.look = None;
        self.copy = Vec::new();
    }
}

impl http_body::Body for Inspected {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && this.look.is_some()
                {
                    if this.copy.len() + data.len() <= this.limit {
                        this.copy.extend_from_slice(data);
                    } else {
                        this.give_up();
                    }
                }
                // A server may not poll a body again once it says it has ended.
                if this.inner.is_end_stream() {
                    this.finish();
                }
            }
            Poll::Ready(None) => this.finish(),
            Poll::Ready(Some(Err(_))) => this.give_up(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::{BodyExt, StreamBody};

    use super::*;
    use crate::plumbing::full;

    fn chunks(parts: &[&'static str]) -> Body {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames)).boxed()
    }

    fn looked() -> (Arc<Mutex<Option<Vec<u8>>>>, Look) {
        let seen = Arc::new(Mutex::new(None));
        let to = seen.clone();
        let look: Look = Box::new(move |b: &[u8]| {
            *to.lock().unwrap() = Some(b.to_vec());
        });
        (seen, look)
    }

    #[tokio::test]
    async fn the_client_gets_every_byte_and_the_look_gets_the_whole_body() {
        let (seen, look) = looked();
        let body = Inspected::new(chunks(&["{\"a\":", "1}"]), 64, look);
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"{\"a\":1}");
        assert_eq!(seen.lock().unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));

        // a body that ends with its only frame: looked at though never polled past it
        let (seen, look) = looked();
        let mut body = Inspected::new(full("{}"), 64, look);
        let frame = body.frame().await;
        assert!(frame.is_some());
        assert_eq!(seen.lock().unwrap().as_deref(), Some(&b"{}"[..]));
    }

    #[tokio::test]
    async fn a_body_past_the_bound_is_forwarded_whole_and_not_looked_at() {
        let (seen, look) = looked();
        let body = Inspected::new(chunks(&["0123456789", "0123456789"]), 15, look);
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(got.len(), 20);
        assert_eq!(*seen.lock().unwrap(), None);
    }
}
