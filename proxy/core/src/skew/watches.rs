//! The watches each client holds open through this proxy (`mvproxy_client_watches_open`).
//!
//! A watch's response stays open for minutes. It is counted from its `200` until hyper drops
//! its body, by a guard inside the body rather than a decrement on some end event, so that
//! every way a watch ends is counted: the server ends it at its timeout, the client goes away,
//! its connection or the upstream's breaks, the proxy drains on shutdown.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use prometheus_client::metrics::gauge::Gauge;

use crate::plumbing::{Body, BoxError};

/// A watch's body, counted in `gauge` while it exists.
pub struct Open {
    inner: Body,
    gauge: Gauge,
}

impl Open {
    /// `inner`, counted in `gauge` from now until it is dropped.
    pub fn new(inner: Body, gauge: Gauge) -> Self {
        gauge.inc();
        Self { inner, gauge }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl HttpBody for Open {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
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
    use std::sync::Arc;

    use http::header::USER_AGENT;
    use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};
    use http_body_util::BodyExt;
    use mvproxy_telemetry::metrics::Metrics;
    use prometheus_client::registry::Registry;

    use crate::classify::RequestInfo;
    use crate::classify::classify;
    use crate::route::{LocalReason, Route};
    use crate::skew::SkewClients;
    use crate::testkit::snapshot;

    const CMS: &str = "/api/v1/namespaces/default/configmaps";

    fn open_lines(registry: &Registry) -> Vec<String> {
        let (text, _) = mvproxy_telemetry::metrics::encode(registry, false).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("mvproxy_client_watches_open{"))
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    fn answer(
        r: &SkewClients,
        info: &RequestInfo,
        agent: &str,
        status: StatusCode,
    ) -> crate::plumbing::Body {
        let snap = snapshot(&[("", "v1", "configmaps")]);
        let mut headers = HeaderMap::new();
        headers.insert(USER_AGENT, HeaderValue::from_str(agent).unwrap());
        let route = Route::Local(LocalReason::ServedLocally);
        let requester = r.observe(&snap, info, &route, &headers).unwrap();
        let resp = Response::builder()
            .status(status)
            .body(crate::plumbing::full(bytes::Bytes::from_static(b"{}\n")))
            .unwrap();
        r.watch_open(&requester, resp).into_body()
    }

    #[tokio::test]
    async fn a_watch_is_open_from_its_200_until_its_body_is_gone() {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let r = SkewClients::new(8, metrics, HeaderName::from_static("x-remote-user"));
        let watch = classify(&Method::GET, CMS, Some("watch=true"));
        let list = classify(&Method::GET, CMS, None);
        let kubectl = "kubectl/v1.36.3 (linux/amd64) kubernetes/5a0f4d1";
        let scheduler = "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abc";

        let first = answer(&r, &watch, kubectl, StatusCode::OK);
        let second = answer(&r, &watch, kubectl, StatusCode::OK);
        let other = answer(&r, &watch, scheduler, StatusCode::OK);
        // neither a list nor a watch the server refused holds anything open
        drop(answer(&r, &list, kubectl, StatusCode::OK));
        drop(answer(&r, &watch, kubectl, StatusCode::GONE));
        assert_eq!(
            open_lines(&registry),
            [
                "mvproxy_client_watches_open{client=\"kube-scheduler\"} 1",
                "mvproxy_client_watches_open{client=\"kubectl\"} 2",
            ]
        );

        // read to its end by hyper, then dropped: closed
        let bytes = first.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{}\n");
        // dropped unread, as when the client goes away
        drop(other);
        assert_eq!(
            open_lines(&registry),
            [
                "mvproxy_client_watches_open{client=\"kube-scheduler\"} 0",
                "mvproxy_client_watches_open{client=\"kubectl\"} 1",
            ]
        );
        drop(second);
        assert_eq!(
            open_lines(&registry),
            [
                "mvproxy_client_watches_open{client=\"kube-scheduler\"} 0",
                "mvproxy_client_watches_open{client=\"kubectl\"} 0",
            ]
        );
    }
}
