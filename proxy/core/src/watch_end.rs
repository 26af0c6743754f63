//! A watch whose upstream stream breaks ends cleanly for its client, at an event boundary.
//!
//! A watch may end at any time by design: kube-apiserver ends every watch at its timeout, and
//! clients (client-go's reflector, `kubectl get -w`) then resume from the last
//! `resourceVersion` they saw. When the upstream's stream breaks instead (the API server or
//! the peer's mvproxy restarts), handing the error on resets the client's stream: HTTP/2
//! `RST_STREAM` `INTERNAL_ERROR`, on HTTP/1.1 a connection closed in the middle of the chunked
//! body. client-go reports that as an `ERROR` event ("unable to decode an event from the watch
//! stream: stream error: stream ID 9; INTERNAL_ERROR; received from peer"), which kubectl
//! prints, as seen against real kube-apiservers (scripts/conformance/control-plane.sh, the
//! restart checks). Ending the body instead gives the client the end a server timeout gives.
//!
//! Only where the bytes sent so far end an event: a truncated event must stay an error, or the
//! client would take a half event for a whole one. Event boundaries are known for the two
//! framings kube-apiserver writes watches in:
//! - JSON: one JSON document per event, each followed by `\n` (encoding/json's `Encoder`, used by
//!   k8s.io/apimachinery `pkg/runtime/serializer/json/json.go`, appends it);
//! - protobuf (`application/vnd.kubernetes.protobuf;stream=watch`): each event preceded by its
//!   length as 4 bytes big-endian (k8s.io/apimachinery `pkg/util/framer/framer.go`,
//!   `NewLengthDelimitedFrameWriter`).
//!
//! Any other framing (CBOR sequences, YAML) keeps the error as it is.
//!
//! The same boundaries count the events relayed, for the watch's span
//! ([`WatchBody::with_span`]): it lasts as long as the watch and says how many events went
//! through and why the watch ended. The server span ends with the response headers, as the
//! request-latency metric does, so a watch of minutes does not read as a slow request.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderValue;
use http_body::{Body as HttpBody, Frame, SizeHint};
use mvproxy_telemetry::trace::{KeyValue, RequestSpan};

/// How a watch's events are delimited in its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Newline after each JSON event.
    JsonLines,
    /// A 4-byte big-endian length before each event.
    LengthPrefixed,
}

impl Framing {
    /// The framing of a watch response with this `Content-Type`; `None` when its event
    /// boundaries cannot be told.
    pub(crate) fn of(content_type: Option<&HeaderValue>) -> Option<Self> {
        let value = content_type?.to_str().ok()?;
        let media = value.split(';').next()?.trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json" => Some(Self::JsonLines),
            "application/vnd.kubernetes.protobuf" => Some(Self::LengthPrefixed),
            _ => None,
        }
    }
}

/// Where the bytes forwarded so far stand relative to the events.
#[derive(Debug, Clone)]
struct Boundary {
    framing: Framing,
    /// JSON: the last byte forwarded was a newline (or none was forwarded).
    after_newline: bool,
    /// Protobuf: length bytes of the next event read so far.
    header: [u8; 4],
    header_len: usize,
    /// Protobuf: bytes of the current event still to come.
    remaining: u64,
    /// Whether to count events (only for a sampled watch span: counting reads every byte of
    /// a JSON watch).
    counting: bool,
    /// Events whole so far (when `counting`).
    events: u64,
}

impl Boundary {
    fn new(framing: Framing) -> Self {
        Self {
            framing,
            after_newline: true,
            header: [0; 4],
            header_len: 0,
            remaining: 0,
            counting: false,
            events: 0,
        }
    }

    fn feed(&mut self, mut data: &[u8]) {
        match self.framing {
            Framing::JsonLines => {
                if let Some(last) = data.last() {
                    self.after_newline = *last == b'\n';
                }
                if self.counting {
                    self.events += data.iter().filter(|&&b| b == b'\n').count() as u64;
                }
            }
            Framing::LengthPrefixed => {
                while !data.is_empty() {
                    if self.remaining > 0 {
                        let take = usize::try_from(self.remaining)
                            .unwrap_or(usize::MAX)
                            .min(data.len());
                        // `take` ≤ data.len(), which fits in u64
                        self.remaining -= take as u64;
                        data = &data[take..];
                        if self.remaining == 0 {
                            self.events += 1;
                        }
                    } else {
                        self.header[self.header_len] = data[0];
                        self.header_len += 1;
                        data = &data[1..];
                        if self.header_len == 4 {
                            self.remaining = u64::from(u32::from_be_bytes(self.header));
                            self.header_len = 0;
                            if self.remaining == 0 {
                                self.events += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    fn at_event_boundary(&self) -> bool {
        match self.framing {
            Framing::JsonLines => self.after_newline,
            Framing::LengthPrefixed => self.header_len == 0 && self.remaining == 0,
        }
    }
}

/// A watch response body that ends, instead of failing, when its upstream breaks between
/// two events.
pub(crate) struct WatchBody<B> {
    inner: B,
    boundary: Boundary,
    ended: bool,
    /// The watch's span, ended with the watch ([`WatchBody::with_span`]).
    span: RequestSpan,
}

/// `mvproxy.watch.end`: the upstream ended the watch (its timeout, or it closed the stream).
pub(crate) const END_UPSTREAM_CLOSED: &str = "upstream_closed";
/// The upstream's stream broke (ended cleanly for the client between two events, or passed
/// on as an error inside one).
pub(crate) const END_UPSTREAM_BROKE: &str = "upstream_broke";
/// The client went away (or mvproxy shut down) first.
pub(crate) const END_CLIENT_GONE: &str = "client_gone";

impl<B> WatchBody<B> {
    pub(crate) fn new(inner: B, framing: Framing) -> Self {
        Self {
            inner,
            boundary: Boundary::new(framing),
            ended: false,
            span: RequestSpan::none(),
        }
    }

    /// Ends `span` when the watch ends, with `mvproxy.watch.events` (events relayed) and
    /// `mvproxy.watch.end` (why). Events are counted only when the span records.
    pub(crate) fn with_span(mut self, span: RequestSpan) -> Self {
        self.boundary.counting = span.is_recording();
        self.span = span;
        self
    }

    fn end_span(&mut self, why: &'static str) {
        if self.span.is_recording() {
            self.span.set_attributes([
                KeyValue::new(
                    "mvproxy.watch.events",
                    i64::try_from(self.boundary.events).unwrap_or(i64::MAX),
                ),
                KeyValue::new("mvproxy.watch.end", why),
            ]);
        }
        self.span.end();
    }
}

impl<B> Drop for WatchBody<B> {
    fn drop(&mut self) {
        // A span already ended ignores this.
        if self.span.is_recording() {
            self.end_span(END_CLIENT_GONE);
        }
    }
}

impl<B> HttpBody for WatchBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.boundary.feed(data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) if self.boundary.at_event_boundary() => {
                tracing::info!(error = %e, "a watch's upstream stream broke between two events: ended for the client, which resumes from its last resourceVersion");
                self.ended = true;
                self.end_span(END_UPSTREAM_BROKE);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.end_span(END_UPSTREAM_BROKE);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.end_span(END_UPSTREAM_CLOSED);
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use http_body_util::BodyExt;

    use super::*;

    /// A body that yields the given chunks, then fails (the upstream's connection broke).
    struct Breaks(VecDeque<&'static [u8]>);

    impl HttpBody for Breaks {
        type Data = Bytes;
        type Error = String;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, String>>> {
            Poll::Ready(Some(match self.0.pop_front() {
                Some(chunk) => Ok(Frame::data(Bytes::from_static(chunk))),
                None => Err("connection reset".to_owned()),
            }))
        }
    }

    /// What the client gets: the bytes, and whether the body ended cleanly.
    async fn client_gets(chunks: &[&'static [u8]], framing: Framing) -> (Vec<u8>, bool) {
        let mut body = WatchBody::new(Breaks(chunks.iter().copied().collect()), framing);
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => got.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                Err(_) => return (got, false),
            }
        }
        (got, true)
    }

    #[tokio::test]
    async fn a_json_watch_broken_after_a_whole_event_ends_cleanly() {
        let (got, clean) = client_gets(
            &[b"{\"type\":\"ADDED\"}\n", b"{\"type\":\"MODIFIED\"}\n"],
            Framing::JsonLines,
        )
        .await;
        assert!(clean, "the client sees the end of the watch, not a reset");
        assert_eq!(got, b"{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n");
        // nothing sent yet: an empty watch that ends
        assert_eq!(client_gets(&[], Framing::JsonLines).await, (vec![], true));
    }

    #[tokio::test]
    async fn a_json_watch_broken_inside_an_event_stays_an_error() {
        let (got, clean) = client_gets(
            &[b"{\"type\":\"ADDED\"}\n{\"type\":", b"\"MOD"],
            Framing::JsonLines,
        )
        .await;
        assert!(!clean, "a truncated event must not look like a whole one");
        assert_eq!(got, b"{\"type\":\"ADDED\"}\n{\"type\":\"MOD");
    }

    #[tokio::test]
    async fn a_protobuf_watch_is_cut_by_its_length_prefixes() {
        // two events, the second split across chunks, its length split too
        let whole: &[&'static [u8]] = &[b"\x00\x00\x00\x03abc\x00", b"\x00\x00\x02x", b"y"];
        assert!(client_gets(whole, Framing::LengthPrefixed).await.1);
        // a newline inside an event means nothing to this framing
        let cut: &[&'static [u8]] = &[b"\x00\x00\x00\x04ab\n"];
        assert!(!client_gets(cut, Framing::LengthPrefixed).await.1);
        // a length read only in part
        let cut: &[&'static [u8]] = &[b"\x00\x00\x00\x01a\x00\x00"];
        assert!(!client_gets(cut, Framing::LengthPrefixed).await.1);
        // an empty event is whole
        let empty: &[&'static [u8]] = &[b"\x00\x00\x00\x00"];
        assert!(client_gets(empty, Framing::LengthPrefixed).await.1);
    }

    /// What a watch's span reports as events relayed: whole events, in either framing,
    /// however the chunks cut them.
    #[test]
    fn whole_events_are_counted_across_chunks() {
        let mut json = Boundary::new(Framing::JsonLines);
        json.counting = true;
        for chunk in [
            &b"{\"type\":\"ADDED\"}\n{\"ty"[..],
            b"pe\":\"MODIFIED\"}",
            b"\n",
        ] {
            json.feed(chunk);
        }
        assert_eq!(json.events, 2);
        let mut proto = Boundary::new(Framing::LengthPrefixed);
        proto.counting = true;
        // events of 3 and 0 bytes, then half of one of 2
        for chunk in [
            &[0, 0, 0][..],
            &[3, b'a', b'b'],
            &[b'c', 0, 0, 0, 0],
            &[0, 0, 0, 2, b'x'],
        ] {
            proto.feed(chunk);
        }
        assert_eq!(proto.events, 2);
        let mut off = Boundary::new(Framing::JsonLines);
        off.feed(b"{}\n{}\n");
        assert_eq!(off.events, 0, "not counted without a recording span");
    }

    #[test]
    fn framing_follows_the_content_type() {
        let of = |v: &'static str| Framing::of(Some(&HeaderValue::from_static(v)));
        assert_eq!(of("application/json"), Some(Framing::JsonLines));
        assert_eq!(
            of("Application/JSON; charset=utf-8"),
            Some(Framing::JsonLines)
        );
        assert_eq!(
            of("application/vnd.kubernetes.protobuf;stream=watch"),
            Some(Framing::LengthPrefixed)
        );
        assert_eq!(of("application/cbor-seq"), None);
        assert_eq!(of("application/yaml"), None);
        assert_eq!(Framing::of(None), None);
    }
}
