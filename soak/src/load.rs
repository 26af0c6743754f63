//! The load: a steady mix of requests through the load balancer, each checked and counted.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::watch;

use crate::nodes::Rotation;
use crate::{ACCEPT_V2, CONFIGMAPS, PATIENCE, PODS};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A GVR the node's own API server serves.
    Local,
    /// A GVR only a peer serves.
    PeerOnly,
    /// `GET /apis`, merged by the proxy.
    Discovery,
    /// A short watch of a local GVR.
    Watch,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) sent: u64,
    /// (kind, code) → count; code 0: no answer.
    pub(crate) codes: BTreeMap<(Kind, u16), u64>,
    pub(crate) violations: Vec<String>,
}

impl Stats {
    pub(crate) fn record(&mut self, kind: Kind, code: u16, violation: Option<String>) {
        *self.codes.entry((kind, code)).or_default() += 1;
        if let Some(v) = violation
            && self.violations.len() < 20
        {
            self.violations.push(v);
        }
    }

    pub(crate) fn count(&self, kind: Kind, ok: impl Fn(u16) -> bool) -> u64 {
        self.codes
            .iter()
            .filter(|((k, c), _)| *k == kind && ok(*c))
            .map(|(_, n)| n)
            .sum()
    }
}

pub(crate) async fn get(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<(StatusCode, Bytes), String> {
    let (status, _, body) = send(client, Method::GET, url, headers, Bytes::new()).await?;
    Ok((status, body))
}

pub(crate) async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(StatusCode, http::HeaderMap, Bytes), String> {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    tokio::time::timeout(PATIENCE, fut)
        .await
        .map_err(|_| format!("no answer within {PATIENCE:?}"))?
}

/// One request to a node in rotation, checked.
pub(crate) async fn one(node: Arc<Rotation>, seq: u64, stats: Arc<Mutex<Stats>>) {
    let base = format!("http://{}", node.listen);
    let roll = fastrand::u32(..100);
    let json = ("content-type", "application/json");
    let (kind, method, url, headers, body) = match roll {
        0..30 => (
            Kind::Local,
            Method::GET,
            format!("{base}{CONFIGMAPS}"),
            vec![],
            Bytes::new(),
        ),
        30..40 => (
            Kind::Local,
            Method::GET,
            format!("{base}{PODS}"),
            vec![],
            Bytes::new(),
        ),
        40..50 => {
            let cm = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("soak-{seq}"), "namespace": "soak"},
                "data": {"seq": seq.to_string()},
            });
            let url = format!("{base}{CONFIGMAPS}");
            (
                Kind::Local,
                Method::POST,
                url,
                vec![json],
                Bytes::from(cm.to_string()),
            )
        }
        50..60 => {
            let url = format!("{base}{CONFIGMAPS}?watch=true&timeoutSeconds=1");
            (Kind::Watch, Method::GET, url, vec![], Bytes::new())
        }
        60..70 => {
            let url = format!("{base}/apis");
            (
                Kind::Discovery,
                Method::GET,
                url,
                vec![("accept", ACCEPT_V2)],
                Bytes::new(),
            )
        }
        _ => {
            let url = format!("{base}{}", node.peer_only);
            (Kind::PeerOnly, Method::GET, url, vec![], Bytes::new())
        }
    };
    let client = node.client.lock().expect("client lock").clone();
    let result = send(&client, method.clone(), &url, &headers, body).await;
    node.in_flight.fetch_sub(1, Ordering::SeqCst);
    let what = format!("{} {method} {url}", node.name);
    let (code, violation) = match result {
        Err(e) => (0, Some(format!("{what}: no answer: {e}"))),
        Ok((status, headers, body)) => {
            let code = status.as_u16();
            let retry_after = headers.contains_key(http::header::RETRY_AFTER);
            let ok = match kind {
                Kind::Local | Kind::Watch | Kind::Discovery => matches!(code, 200 | 201),
                Kind::PeerOnly => code == 200 || (matches!(code, 503 | 504) && retry_after),
            };
            let violation = (!ok).then(|| {
                let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                format!("{what}: {code} (Retry-After: {retry_after}): {text}")
            });
            (code, violation)
        }
    };
    stats
        .lock()
        .expect("stats lock")
        .record(kind, code, violation);
}

/// Sends `rate` requests per second over the nodes in rotation, round robin, until `stop`.
pub(crate) async fn load(
    nodes: Vec<Arc<Rotation>>,
    rate: u32,
    stats: Arc<Mutex<Stats>>,
    stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = tokio::task::JoinSet::new();
    let mut seq = 0u64;
    while !*stop.borrow() {
        tick.tick().await;
        seq += 1;
        let up: Vec<&Arc<Rotation>> = nodes
            .iter()
            .filter(|n| n.in_rotation.load(Ordering::SeqCst))
            .collect();
        if up.is_empty() {
            continue;
        }
        let node = up[(seq as usize) % up.len()].clone();
        node.in_flight.fetch_add(1, Ordering::SeqCst);
        // a node that left the rotation between the check and the count: not sent
        if !node.in_rotation.load(Ordering::SeqCst) {
            node.in_flight.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        stats.lock().expect("stats lock").sent += 1;
        tasks.spawn(one(node, seq, stats.clone()));
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}
