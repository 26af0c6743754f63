//! What does not cross the hop: hop-by-hop headers are dropped (RFC 9110 §7.6.1), and an
//! HTTP/1.1 upgrade turns both connections into one byte tunnel.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;

/// Splices the client's and the upstream's upgraded connections together.
pub(super) async fn tunnel(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(upstream));
    if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
        tracing::debug!(error = %e, "upgraded connection closed");
    }
}

/// Whether the request asks for a protocol upgrade (`Connection: upgrade` with `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_tokens(headers).any(|t| t == "upgrade")
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1): those named by `Connection` and the
/// standard set. For an upgrade, `Connection: upgrade` and `Upgrade` must reach the upstream.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    // Most messages have none of these: one pass over the names (no hashing) says so.
    if !keep_upgrade && !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<String> = connection_tokens(headers).collect();
    for name in named {
        if keep_upgrade && name == "upgrade" {
            continue;
        }
        if let Ok(h) = HeaderName::from_bytes(name.as_bytes()) {
            headers.remove(h);
        }
    }
    for h in [
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(h);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
}

/// Whether `name` is `Connection`, `Upgrade` or one of the standard hop-by-hop headers
/// (any header `Connection` names needs `Connection` itself).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::UPGRADE
        || name == header::TE
        || name == header::TRAILER
        || name == header::TRANSFER_ENCODING
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}
