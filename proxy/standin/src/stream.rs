//! The two kinds of long-lived response: watch streams and upgraded tunnels.
//!
//! Both outlive the request handler in a task of their own, which holds a [`TaskGuard`] so
//! that [`super::Running::shutdown`] waits for it, and which ends on shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, UPGRADE};
use http::{HeaderValue, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc, watch};

use super::TaskGuard;
use super::catalog::Target;
use super::respond::Body;
use super::store::{Event, EventType, Selector};

/// Watch events a slow client may have in flight before the watch waits for it.
const WATCH_CHUNKS: usize = 64;

/// One watch event on the wire.
#[derive(Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    kind: EventType,
    object: &'a Value,
}

/// Starts streaming `initial`, then what `receiver` brings that `selector` selects, until
/// the client goes away, `timeout` passes or the server stops. Events are written one JSON
/// object per line and flushed as they come; without a length the body is chunked.
pub(super) fn watch(
    target: Target,
    selector: Selector,
    timeout: Option<Duration>,
    (initial, receiver): (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>),
    stopping: watch::Receiver<bool>,
    guard: TaskGuard,
) -> Response<Body> {
    let (chunks, body) = mpsc::channel(WATCH_CHUNKS);
    let stream = WatchStream {
        target,
        selector,
        chunks,
        timeout,
    };
    tokio::spawn(async move {
        stream.run(initial, receiver, stopping).await;
        drop(guard);
    });
    let mut response = Response::new(Body::Stream(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The sending half of one watch.
struct WatchStream {
    target: Target,
    selector: Selector,
    chunks: mpsc::Sender<Bytes>,
    timeout: Option<Duration>,
}

impl WatchStream {
    async fn run(
        self,
        initial: Vec<Arc<Event>>,
        mut receiver: broadcast::Receiver<Arc<Event>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let deadline = async {
            match self.timeout {
                Some(timeout) => tokio::time::sleep(timeout).await,
                None => std::future::pending().await,
            }
        };
        let events = async {
            for event in initial {
                if !self.send(&event).await {
                    return;
                }
            }
            loop {
                match receiver.recv().await {
                    Ok(event) if self.selector.selects(&event) => {
                        if !self.send(&event).await {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // A watcher that fell behind is closed, as kube does; clients re-list.
                    Err(
                        broadcast::error::RecvError::Lagged(_)
                        | broadcast::error::RecvError::Closed,
                    ) => return,
                }
            }
        };
        tokio::select! {
            () = events => {}
            () = deadline => {}
            () = self.chunks.closed() => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    }

    /// Sends one event line; `false` once the client is gone.
    async fn send(&self, event: &Event) -> bool {
        let object = self.target.present(event.object.clone());
        let line = WatchEvent {
            kind: event.kind,
            object: &object,
        };
        let Ok(mut chunk) = serde_json::to_vec(&line) else {
            return false;
        };
        chunk.push(b'\n');
        self.chunks.send(chunk.into()).await.is_ok()
    }
}

/// Whether the request asks to switch protocols (HTTP/1.1 `Connection: Upgrade`).
pub(super) fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(UPGRADE)
        && req
            .headers()
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Answers `101` with the requested protocol, then echoes the tunnel. For SPDY the first
/// offered `X-Stream-Protocol-Version` is accepted, as the kubelet would; WebSocket's
/// `Sec-WebSocket-Accept` is not computed, so a real WebSocket client would refuse.
pub(super) fn upgrade(
    stopping: watch::Receiver<bool>,
    guard: TaskGuard,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let protocol = req.headers().get(UPGRADE).cloned();
    let stream_protocol = first_token(&req, "x-stream-protocol-version");
    let websocket_protocol = first_token(&req, "sec-websocket-protocol");
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        echo(on_upgrade, stopping).await;
        drop(guard);
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Some(protocol) = protocol {
        headers.insert(UPGRADE, protocol);
    }
    if let Some(value) = stream_protocol {
        headers.insert("x-stream-protocol-version", value);
    }
    if let Some(value) = websocket_protocol {
        headers.insert("sec-websocket-protocol", value);
    }
    response
}

async fn echo(on_upgrade: hyper::upgrade::OnUpgrade, mut stopping: watch::Receiver<bool>) {
    let upgraded = match on_upgrade.await {
        Ok(upgraded) => upgraded,
        Err(error) => {
            tracing::debug!(%error, "stand-in upgrade did not complete");
            return;
        }
    };
    let (mut reader, mut writer) = tokio::io::split(TokioIo::new(upgraded));
    tokio::select! {
        copied = tokio::io::copy(&mut reader, &mut writer) => {
            if let Err(error) = copied {
                tracing::debug!(%error, "stand-in tunnel ended with an error");
            }
        }
        _ = stopping.wait_for(|stop| *stop) => {}
    }
    if let Err(error) = writer.shutdown().await {
        tracing::debug!(%error, "stand-in tunnel shutdown failed");
    }
}

/// The first comma-separated value of a (possibly repeated) header.
fn first_token<B>(req: &Request<B>, name: &str) -> Option<HeaderValue> {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find(|token| !token.is_empty())
        .and_then(|token| HeaderValue::from_str(token).ok())
}
