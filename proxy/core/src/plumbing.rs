//! What every layer of the request path passes around: the body type on both sides of the
//! proxy and its constructors, the boxed error a body fails with and its causes in words, an
//! upstream's name and port. Depends on no other module of the crate, so any module can use it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::Uri;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Boxed error of a streamed body.
pub type BoxError = Box<dyn StdError + Send + Sync>;
/// The body type on both sides of the proxy.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body holding `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// An error and its sources in words, deduplicated ("tcp connect error: Connection refused").
pub fn causes(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// The port of an upstream URL, or its scheme's default.
pub fn port_of(url: &Uri) -> u16 {
    url.port_u16().unwrap_or_else(|| port_of_scheme(url))
}

/// The default port of an upstream URL's scheme.
pub fn port_of_scheme(url: &Uri) -> u16 {
    if url.scheme_str() == Some("https") {
        443
    } else {
        80
    }
}

/// The name of a server (the local one or a peer), as given by `--server-id` and `--peer`.
/// Cheap to clone; ordered, because the merge processes servers in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerName(Arc<str>);

impl ServerName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name, shared (a span attribute holds it without a copy).
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }
}

impl From<&str> for ServerName {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
