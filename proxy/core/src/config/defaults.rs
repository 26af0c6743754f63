//! Every default of `mvproxy serve`, named once: validation reads them, `--help` shows them.
//!
//! The limits' defaults live beside the limits ([`crate::limits`]), the tracked clients'
//! beside the registry ([`crate::skew::clients`]) and the identity header names beside
//! the headers ([`crate::identity::HeaderNames`]); this module re-exports them, so the help
//! text and validation cannot disagree with the code that applies them.

use std::time::Duration;

pub use crate::limits::{
    DEFAULT_MAX_CONNECTIONS as MAX_CONNECTIONS,
    DEFAULT_MAX_DISCOVERY_DOCUMENT_BYTES as MAX_DISCOVERY_DOCUMENT_BYTES,
    DEFAULT_MAX_REQUEST_BODY_BYTES as MAX_REQUEST_BODY_BYTES,
    DEFAULT_MAX_REQUEST_HEADER_BYTES as MAX_REQUEST_HEADER_BYTES,
};
pub use crate::skew::clients::DEFAULT_MAX_CLIENTS as MAX_TRACKED_CLIENTS;

/// `--listen`: the port kube-apiserver serves on, on loopback.
pub const LISTEN: &str = "127.0.0.1:6443";
/// `--admin-listen`: loopback, where plain HTTP is allowed.
pub const ADMIN_LISTEN: &str = "127.0.0.1:9090";
/// `--server-id`.
pub const SERVER_ID: &str = "local";
/// `--peer-server-name`: the name in every kube-apiserver serving certificate (as upstream's
/// peer proxy verifies).
pub const PEER_SERVER_NAME: &str = "kubernetes.default.svc";
/// `--refresh-interval-seconds`.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// `--connect-timeout-seconds`: the TCP connect and the TLS handshake. One second, so that a
/// server whose address drops packets, or that accepts and then hangs, is given up (and the
/// request sent to another server that serves it) within a second; a connection between the
/// servers of one control plane takes milliseconds. A lost SYN is not sent again in that time
/// (Linux resends it after one second), so an attempt that meets one fails over too.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// `--response-header-timeout-seconds`: kube-apiserver's own request timeout.
pub const RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// `--tls-reload-interval-seconds`.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// `--admin-always-allow-paths`: the probes, as kube-apiserver's `--authorization-always-allow-paths`.
pub const ADMIN_ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez";
/// `--admin-auth-cache-ttl-seconds`.
pub const ADMIN_AUTH_CACHE_TTL: Duration = Duration::from_secs(10);
/// Where the in-cluster ServiceAccount token is mounted: the default of
/// `--peer-source-token-file` and `--admin-auth-token-file`, when present.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
