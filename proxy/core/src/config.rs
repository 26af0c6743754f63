//! Configuration: flags and an optional YAML file, validated once into a [`Config`].
//!
//! Everything after [`ServeArgs::load`] takes the typed `Config` only. A bad value stops mvproxy
//! before any socket opens, with one line naming the field and what is wrong, and exit code 2.
//! Flags mirror kube-apiserver's names; the YAML file uses the same names (without `--`),
//! and a flag given on the command line wins over the file.
//!
//! Three steps, each in its own file: `args` is the raw shape (every value optional),
//! `validate` turns it into a `Config` without touching the file system (so
//! every rule is a table test), and `files` then checks that each file named can be read.
//! `Config` is grouped the way mvproxy uses it, and what cannot be combined has no shape:
//! skipping verification carries no CA file ([`Verify`]), cluster peers carry no static
//! list ([`Peers`]), plain-HTTP admin endpoints carry no authentication settings
//! ([`AdminSecurity`]), users' client certificates exist only on a TLS listener
//! ([`ProxyTls`]). Every default is named once, in [`defaults`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Uri;

use crate::identity::HeaderNames;
use crate::limits::Limits;
use crate::peers::Kind;
use crate::plumbing::ServerName;
use crate::target::TargetSource;

mod args;
pub mod defaults;
mod files;
mod validate;

pub use args::{IdentityMode, LogFormat, PeerScheme, PeerSource, ServeArgs};

/// Exit code for invalid configuration.
pub const EXIT_CONFIG: i32 = 2;

/// A configuration error: the field and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {field}: {why}")]
pub struct ConfigError {
    /// The flag (without `--`) or YAML key at fault; `config` for the file itself.
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

fn err(field: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        why: why.into(),
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where mvproxy listens.
    pub listeners: Listeners,
    /// The API server this proxy runs in front of.
    pub local: Uri,
    /// This server's name among its peers.
    pub server_id: ServerName,
    /// Where peers come from.
    pub peers: Peers,
    /// How mvproxy connects to the local server and to peers.
    pub upstream_tls: UpstreamTls,
    /// TLS on the proxy listener, and whose client certificates it accepts; `None`: plain HTTP.
    pub proxy_tls: Option<ProxyTls>,
    /// The front-proxy identity header names.
    pub header_names: HeaderNames,
    /// The admin listener's security.
    pub admin: AdminSecurity,
    /// Intervals and timeouts.
    pub timing: Timing,
    /// Request and connection limits.
    pub limits: Limits,
    /// Clients named by [`crate::skew`] before the rest count as `other`.
    pub max_tracked_clients: usize,
    /// The log line format.
    pub log_format: LogFormat,
    /// The release the upgrade heads for, if given ([`crate::target`]).
    pub target: Option<TargetSource>,
}

impl Config {
    /// The `--peer` list; empty when peers come from the cluster.
    pub fn static_peers(&self) -> &[PeerConfig] {
        match &self.peers {
            Peers::Static(peers) => peers,
            Peers::Cluster(_) => &[],
        }
    }
}

/// The two listeners' addresses (port 0: any free port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listeners {
    /// `--listen`.
    pub proxy: SocketAddr,
    /// `--admin-listen`.
    pub admin: SocketAddr,
}

/// A certificate and its key (PEM files), always given together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKey {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// A peer from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The peer's server name.
    pub name: ServerName,
    /// Its URL (`scheme://host:port`).
    pub url: Uri,
}

/// Where peers come from.
#[derive(Debug, Clone)]
pub enum Peers {
    /// The `--peer` list, fixed for the process' life.
    Static(Vec<PeerConfig>),
    /// Objects read from an API server, listed and watched.
    Cluster(ClusterPeers),
}

/// Peers read from the cluster (`--peer-source leases` or `endpointslices`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPeers {
    /// Which objects describe the peers.
    pub kind: Kind,
    /// Which API server they are read from, with which credentials.
    pub reader: PeerReader,
    /// Scheme of the addresses found.
    pub scheme: PeerScheme,
}

/// Where cluster peers are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerReader {
    /// The local API server, with this bearer token.
    LocalServer(TokenFile),
    /// The current context of this kubeconfig (`--kubeconfig`), read at start.
    Kubeconfig(PathBuf),
}

/// A bearer token file mvproxy presents to the local API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFile {
    /// Given by a flag.
    Given(PathBuf),
    /// The in-cluster ServiceAccount token ([`defaults::SERVICE_ACCOUNT_TOKEN`]), if mounted.
    InCluster,
}

impl TokenFile {
    /// The file to read, if any: a given one always, the in-cluster one when it exists.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Self::Given(path) => Some(path.clone()),
            Self::InCluster => {
                Some(PathBuf::from(defaults::SERVICE_ACCOUNT_TOKEN)).filter(|p| p.exists())
            }
        }
    }
}

/// How mvproxy connects to the local server and to peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// How their certificates are verified.
    pub verify: Verify,
    /// Name verified in peers' certificates, and sent as SNI.
    pub peer_server_name: String,
    /// The client certificate presented to both (`--proxy-client-cert-file`).
    pub client_cert: Option<CertKey>,
}

/// How upstream certificates are verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// Against these CAs (an `https://` upstream without one is refused by validation).
    Cas {
        /// `--local-ca-file`.
        local: Option<PathBuf>,
        /// `--peer-ca-file`.
        peers: Option<PathBuf>,
    },
    /// Not at all (`--insecure-skip-tls-verify`: testing only).
    InsecureSkip,
}

impl Verify {
    /// The CA that verifies the local server: its own, else the peers'.
    pub fn local_ca(&self) -> Option<&Path> {
        match self {
            Self::Cas { local, peers } => local.as_deref().or(peers.as_deref()),
            Self::InsecureSkip => None,
        }
    }

    /// The CA that verifies peers.
    pub fn peer_ca(&self) -> Option<&Path> {
        match self {
            Self::Cas { peers, .. } => peers.as_deref(),
            Self::InsecureSkip => None,
        }
    }

    /// Whether certificates go unverified.
    pub fn is_insecure(&self) -> bool {
        matches!(self, Self::InsecureSkip)
    }
}

/// TLS on the proxy listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTls {
    /// The serving certificate (`--tls-cert-file`, `--tls-key-file`).
    pub serving: CertKey,
    /// How a client's identity reaches the API servers.
    pub identity: Identity,
    /// Front proxies trusted to send identity headers (`--requestheader-*`).
    pub requestheader: Option<RequestHeaderTrust>,
}

impl ProxyTls {
    /// Every CA whose client certificates the handshake accepts.
    pub fn client_cas(&self) -> Vec<&Path> {
        let users = match &self.identity {
            Identity::FrontProxy { users_ca } => Some(users_ca.as_path()),
            Identity::Passthrough => None,
        };
        users
            .into_iter()
            .chain(self.requestheader.as_ref().map(|r| r.ca.as_path()))
            .collect()
    }
}

/// How a client's identity reaches the API servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// `Authorization` and `Impersonate-*` forwarded as sent.
    Passthrough,
    /// Client certificates verified against `users_ca` and forwarded as `X-Remote-*` headers
    /// over the proxy client certificate's connection.
    FrontProxy {
        /// `--client-ca-file`.
        users_ca: PathBuf,
    },
}

/// Front proxies whose `X-Remote-*` headers pass (kube-apiserver's requestheader rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeaderTrust {
    /// `--requestheader-client-ca-file`.
    pub ca: PathBuf,
    /// `--requestheader-allowed-names` (empty: any name).
    pub allowed_names: Vec<String>,
}

/// The admin listener's security (see `crate::admin::auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminSecurity {
    /// Plain HTTP, no authentication: loopback, or asked for by name.
    PlainHttp,
    /// TLS, every request reviewed by the local API server.
    Tls(AdminTls),
}

/// The TLS admin listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminTls {
    /// The serving certificate.
    pub serving: CertKey,
    /// CA of accepted client certificates.
    pub client_ca: Option<PathBuf>,
    /// Paths anyone may get (exact, or a prefix when ending in `*`).
    pub always_allow: Vec<String>,
    /// mvproxy's own token for the reviews.
    pub token: TokenFile,
    /// How long a decision is reused.
    pub cache_ttl: Duration,
}

/// Intervals and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Between discovery refreshes of each server.
    pub refresh_interval: Duration,
    /// For a TCP connection to an upstream.
    pub connect_timeout: Duration,
    /// For an upstream's response headers.
    pub response_header_timeout: Duration,
    /// Between checks of the TLS files.
    pub tls_reload_interval: Duration,
}

#[cfg(test)]
mod tests;
