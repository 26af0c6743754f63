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

/// `impl AsyncWrite` for a connection wrapper that only watches what is read
/// (`limits::FirstBytesDeadline`, `limits::Detected`, the upstream HTTP/1.1 pool's read flag):
/// every write goes straight to the wrapped connection, field `$field`.
/// `write_through!(Wrapper, field)`, or `write_through!(impl<I> Wrapper<I>, field)` for a
/// wrapper generic over its connection.
macro_rules! write_through {
    (impl<$io:ident> $wrapper:ty, $field:ident) => {
        $crate::plumbing::write_through!(@[$io] $wrapper, $field);
    };
    ($wrapper:ty, $field:ident) => {
        $crate::plumbing::write_through!(@[] $wrapper, $field);
    };
    (@[$($io:ident)?] $wrapper:ty, $field:ident) => {
        impl$(<$io: ::tokio::io::AsyncWrite + Unpin>)? ::tokio::io::AsyncWrite for $wrapper {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().$field).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().$field).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.$field.is_write_vectored()
            }

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().$field).poll_flush(cx)
            }

            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().$field).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use write_through;
