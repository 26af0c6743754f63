//! Configuration: flags and an optional YAML file, validated once into a [`Config`].
//!
//! Everything after [`ServeArgs::load`] takes the typed `Config` only. A bad value stops mvproxy
//! before any socket opens, with one line naming the field and what is wrong, and exit code 2.
//! Flags mirror kube-apiserver's names; the YAML file uses the same names (without `--`),
//! and a flag given on the command line wins over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use http::Uri;
use http::header::HeaderName;
use serde::Deserialize;

use crate::discovery::ServerName;
use crate::identity::HeaderNames;
use crate::limits::{self, Limits};

/// Exit code for invalid configuration.
pub const EXIT_CONFIG: i32 = 2;

/// A configuration error: the field and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {field}: {why}")]
pub struct ConfigError {
    pub field: String,
    pub why: String,
}

fn err(field: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        why: why.into(),
    }
}

/// How client identity reaches the API servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityMode {
    /// `Authorization` and `Impersonate-*` forwarded as sent.
    #[default]
    Passthrough,
    /// Client certificates verified and forwarded as `X-Remote-*` headers.
    FrontProxy,
}

/// Where peers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PeerSource {
    #[default]
    Static,
    Leases,
    Endpointslices,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `mvproxy serve` flags; also the shape of the YAML file (same names without `--`).
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeArgs {
    /// Address of the proxy listener [default: 127.0.0.1:6443]
    #[arg(long)]
    pub listen: Option<String>,
    /// Address of the admin listener (/healthz, /readyz, /metrics, /debug/discovery) [default: 127.0.0.1:9090]
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// URL of the local API server, e.g. https://127.0.0.1:6443
    #[arg(long)]
    pub local: Option<String>,
    /// A peer, as NAME=URL (repeatable)
    #[arg(long = "peer", value_name = "NAME=URL")]
    #[serde(default)]
    pub peers: Vec<String>,
    /// This server's name among its peers (the merge orders servers by name) [default: local]
    #[arg(long)]
    pub server_id: Option<String>,
    /// YAML file with any of these settings; flags win
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Serving certificate for --listen (PEM)
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key for --listen (PEM)
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// CA for client certificates (front-proxy identity)
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// CA that verifies the local API server [default: --peer-ca-file]
    #[arg(long)]
    pub local_ca_file: Option<PathBuf>,
    /// CA that verifies peers
    #[arg(long)]
    pub peer_ca_file: Option<PathBuf>,
    /// Name verified in peers' certificates and sent as SNI [default: kubernetes.default.svc]
    #[arg(long)]
    pub peer_server_name: Option<String>,
    /// Client certificate presented to the local server and to peers
    #[arg(long)]
    pub proxy_client_cert_file: Option<PathBuf>,
    /// Key of --proxy-client-cert-file
    #[arg(long)]
    pub proxy_client_key_file: Option<PathBuf>,
    /// How client identity reaches the API servers
    #[arg(long, value_enum)]
    pub identity: Option<IdentityMode>,
    /// Where peers come from
    #[arg(long, value_enum)]
    pub peer_source: Option<PeerSource>,
    /// CA of client certificates allowed to send X-Remote-* identity headers
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Common names allowed to send X-Remote-* identity headers
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub requestheader_allowed_names: Vec<String>,
    /// Log format
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Seconds between discovery refreshes of each server [default: 30]
    #[arg(long)]
    pub refresh_interval_seconds: Option<u64>,
    /// Seconds to wait for a TCP connection to an upstream [default: 5]
    #[arg(long)]
    pub connect_timeout_seconds: Option<u64>,
    /// Seconds to wait for an upstream's response headers [default: 60]
    #[arg(long)]
    pub response_header_timeout_seconds: Option<u64>,
    /// Header carrying the user name on a front-proxy request [default: X-Remote-User]
    #[arg(long)]
    pub requestheader_username_headers: Option<String>,
    /// Header carrying the user's UID [default: X-Remote-Uid]
    #[arg(long)]
    pub requestheader_uid_headers: Option<String>,
    /// Header carrying each group [default: X-Remote-Group]
    #[arg(long)]
    pub requestheader_group_headers: Option<String>,
    /// Prefix of the headers carrying extra user attributes [default: X-Remote-Extra-]
    #[arg(long)]
    pub requestheader_extra_headers_prefix: Option<String>,
    /// Bearer token for reading Leases or EndpointSlices from the local API server
    /// [default: the in-cluster ServiceAccount token, if present]
    #[arg(long)]
    pub peer_source_token_file: Option<PathBuf>,
    /// kubeconfig whose current context reads Leases or EndpointSlices (instead of the local
    /// API server with --peer-source-token-file)
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Scheme of peer addresses found in the cluster (http only for test stand-ins) [default: https]
    #[arg(long, value_enum)]
    pub peer_scheme: Option<PeerScheme>,
    /// Seconds between checks of the TLS files (certificates, keys, CAs) for changes [default: 10]
    #[arg(long)]
    pub tls_reload_interval_seconds: Option<u64>,
    /// Do not verify the local server's and peers' certificates (testing only; logged)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// Largest request line and headers in bytes; a larger request gets 431 [default: 1048576]
    #[arg(long)]
    pub max_request_header_bytes: Option<u64>,
    /// Largest request body in bytes; a larger one gets 413 [default: 3145728]
    #[arg(long)]
    pub max_request_body_bytes: Option<u64>,
    /// Largest discovery document read from a server, in bytes [default: 16777216]
    #[arg(long)]
    pub max_discovery_document_bytes: Option<u64>,
    /// Most client connections open at once; a new one over it gets 503 [default: 4096]
    #[arg(long)]
    pub max_connections: Option<u64>,
    /// Most distinct clients named in mvproxy_skew_requests_total and /debug/clients; later
    /// ones count as "other" [default: 100]
    #[arg(long)]
    pub max_tracked_clients: Option<u64>,
    /// Serve the admin listener over TLS with this certificate (PEM); every request is then
    /// authenticated and authorized by the local API server (TokenReview, SubjectAccessReview)
    #[arg(long)]
    pub admin_tls_cert_file: Option<PathBuf>,
    /// Key of --admin-tls-cert-file
    #[arg(long)]
    pub admin_tls_key_file: Option<PathBuf>,
    /// CA of client certificates accepted on the admin listener (user = CN, groups = O)
    #[arg(long)]
    pub admin_client_ca_file: Option<PathBuf>,
    /// Admin paths anyone may get, comma-separated, a trailing * for a prefix; "" for none [default: /healthz,/readyz,/livez]
    #[arg(long)]
    pub admin_always_allow_paths: Option<String>,
    /// Bearer token mvproxy presents to the local API server for its reviews [default: the in-cluster ServiceAccount token, if present]
    #[arg(long)]
    pub admin_auth_token_file: Option<PathBuf>,
    /// Seconds an admin authentication or authorization decision is cached [default: 10]
    #[arg(long)]
    pub admin_auth_cache_ttl_seconds: Option<u64>,
}

/// The admin listener's security (see [`crate::delegated`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSecurity {
    /// `None`: plain HTTP, loopback only, no authentication.
    pub tls: Option<ServingTls>,
    pub client_ca_file: Option<PathBuf>,
    pub always_allow: Vec<String>,
    pub token_file: Option<PathBuf>,
    pub cache_ttl: Duration,
}

/// Scheme of peer addresses read from Leases or EndpointSlices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PeerScheme {
    #[default]
    Https,
    Http,
}

impl PeerScheme {
    /// The URL scheme.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Https => "https",
            Self::Http => "http",
        }
    }
}

/// The in-cluster ServiceAccount token.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A peer from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub name: ServerName,
    pub url: Uri,
}

/// Serving TLS files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub local: Uri,
    pub server_id: ServerName,
    pub peers: Vec<PeerConfig>,
    pub identity: IdentityMode,
    pub client_ca_file: Option<PathBuf>,
    pub requestheader_client_ca_file: Option<PathBuf>,
    pub requestheader_allowed_names: Vec<String>,
    pub header_names: HeaderNames,
    pub peer_source: PeerSource,
    pub peer_source_token_file: Option<PathBuf>,
    /// Where cluster peer sources read from, when not the local API server.
    pub kubeconfig: Option<crate::kubeconfig::KubeConfig>,
    pub peer_scheme: PeerScheme,
    pub serving_tls: Option<ServingTls>,
    pub local_ca_file: Option<PathBuf>,
    pub peer_ca_file: Option<PathBuf>,
    pub peer_server_name: String,
    pub proxy_client_cert: Option<(PathBuf, PathBuf)>,
    pub log_format: LogFormat,
    pub refresh_interval: Duration,
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
    pub tls_reload_interval: Duration,
    pub insecure_skip_tls_verify: bool,
    pub limits: Limits,
    /// Clients named by `crate::readiness` before the rest count as `other`.
    pub max_tracked_clients: usize,
    pub admin: AdminSecurity,
}

impl ServeArgs {
    /// Reads `--config` if given, lets flags win, and validates.
    pub fn load(self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(path) => Some(read_file(path)?),
            None => None,
        };
        match file {
            Some(file) => self.over(file).validate(),
            None => self.validate(),
        }
    }

    /// `self` (flags) over `file`.
    fn over(self, file: ServeArgs) -> ServeArgs {
        ServeArgs {
            listen: self.listen.or(file.listen),
            admin_listen: self.admin_listen.or(file.admin_listen),
            local: self.local.or(file.local),
            peers: if self.peers.is_empty() {
                file.peers
            } else {
                self.peers
            },
            server_id: self.server_id.or(file.server_id),
            config: self.config,
            tls_cert_file: self.tls_cert_file.or(file.tls_cert_file),
            tls_key_file: self.tls_key_file.or(file.tls_key_file),
            client_ca_file: self.client_ca_file.or(file.client_ca_file),
            local_ca_file: self.local_ca_file.or(file.local_ca_file),
            peer_ca_file: self.peer_ca_file.or(file.peer_ca_file),
            peer_server_name: self.peer_server_name.or(file.peer_server_name),
            proxy_client_cert_file: self.proxy_client_cert_file.or(file.proxy_client_cert_file),
            proxy_client_key_file: self.proxy_client_key_file.or(file.proxy_client_key_file),
            identity: self.identity.or(file.identity),
            peer_source: self.peer_source.or(file.peer_source),
            requestheader_client_ca_file: self
                .requestheader_client_ca_file
                .or(file.requestheader_client_ca_file),
            requestheader_allowed_names: if self.requestheader_allowed_names.is_empty() {
                file.requestheader_allowed_names
            } else {
                self.requestheader_allowed_names
            },
            log_format: self.log_format.or(file.log_format),
            refresh_interval_seconds: self
                .refresh_interval_seconds
                .or(file.refresh_interval_seconds),
            connect_timeout_seconds: self
                .connect_timeout_seconds
                .or(file.connect_timeout_seconds),
            response_header_timeout_seconds: self
                .response_header_timeout_seconds
                .or(file.response_header_timeout_seconds),
            requestheader_username_headers: self
                .requestheader_username_headers
                .or(file.requestheader_username_headers),
            requestheader_uid_headers: self
                .requestheader_uid_headers
                .or(file.requestheader_uid_headers),
            requestheader_group_headers: self
                .requestheader_group_headers
                .or(file.requestheader_group_headers),
            requestheader_extra_headers_prefix: self
                .requestheader_extra_headers_prefix
                .or(file.requestheader_extra_headers_prefix),
            peer_source_token_file: self.peer_source_token_file.or(file.peer_source_token_file),
            peer_scheme: self.peer_scheme.or(file.peer_scheme),
            kubeconfig: self.kubeconfig.or(file.kubeconfig),
            tls_reload_interval_seconds: self
                .tls_reload_interval_seconds
                .or(file.tls_reload_interval_seconds),
            insecure_skip_tls_verify: self
                .insecure_skip_tls_verify
                .or(file.insecure_skip_tls_verify),
            max_request_header_bytes: self
                .max_request_header_bytes
                .or(file.max_request_header_bytes),
            max_request_body_bytes: self.max_request_body_bytes.or(file.max_request_body_bytes),
            max_discovery_document_bytes: self
                .max_discovery_document_bytes
                .or(file.max_discovery_document_bytes),
            max_connections: self.max_connections.or(file.max_connections),
            max_tracked_clients: self.max_tracked_clients.or(file.max_tracked_clients),
            admin_tls_cert_file: self.admin_tls_cert_file.or(file.admin_tls_cert_file),
            admin_tls_key_file: self.admin_tls_key_file.or(file.admin_tls_key_file),
            admin_client_ca_file: self.admin_client_ca_file.or(file.admin_client_ca_file),
            admin_always_allow_paths: self
                .admin_always_allow_paths
                .or(file.admin_always_allow_paths),
            admin_auth_token_file: self.admin_auth_token_file.or(file.admin_auth_token_file),
            admin_auth_cache_ttl_seconds: self
                .admin_auth_cache_ttl_seconds
                .or(file.admin_auth_cache_ttl_seconds),
        }
    }

    /// Plain HTTP only on loopback; over TLS, delegated authentication and authorization.
    fn admin_security(&self, admin_listen: SocketAddr) -> Result<AdminSecurity, ConfigError> {
        let tls = match (&self.admin_tls_cert_file, &self.admin_tls_key_file) {
            (Some(cert), Some(key)) => {
                readable("admin-tls-cert-file", cert)?;
                readable("admin-tls-key-file", key)?;
                Some(ServingTls {
                    cert: cert.clone(),
                    key: key.clone(),
                })
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "admin-tls-key-file",
                    "required with --admin-tls-cert-file",
                ));
            }
            (None, Some(_)) => {
                return Err(err(
                    "admin-tls-cert-file",
                    "required with --admin-tls-key-file",
                ));
            }
        };
        if tls.is_none() {
            if !admin_listen.ip().is_loopback() {
                return Err(err(
                    "admin-listen",
                    format!(
                        "{admin_listen} is not a loopback address: plain HTTP admin endpoints are for loopback only; serve them over TLS (--admin-tls-cert-file, --admin-tls-key-file), authenticated and authorized by the local API server"
                    ),
                ));
            }
            if self.admin_client_ca_file.is_some() {
                return Err(err(
                    "admin-client-ca-file",
                    "needs --admin-tls-cert-file: client certificates need TLS",
                ));
            }
        }
        if let Some(ca) = &self.admin_client_ca_file {
            readable("admin-client-ca-file", ca)?;
        }
        let always_allow = match &self.admin_always_allow_paths {
            None => vec![
                "/healthz".to_owned(),
                "/readyz".to_owned(),
                "/livez".to_owned(),
            ],
            Some(list) => {
                let paths: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                if let Some(bad) = paths.iter().find(|p| !p.starts_with('/')) {
                    return Err(err(
                        "admin-always-allow-paths",
                        format!("{bad:?} is not a path (starts with /)"),
                    ));
                }
                paths
            }
        };
        let token_file = match &self.admin_auth_token_file {
            Some(f) => {
                readable("admin-auth-token-file", f)?;
                Some(f.clone())
            }
            None => Some(PathBuf::from(SERVICE_ACCOUNT_TOKEN)).filter(|p| p.exists()),
        };
        Ok(AdminSecurity {
            tls,
            client_ca_file: self.admin_client_ca_file.clone(),
            always_allow,
            token_file,
            cache_ttl: match self.admin_auth_cache_ttl_seconds.unwrap_or(10) {
                0 => return Err(err("admin-auth-cache-ttl-seconds", "must be at least 1")),
                s => Duration::from_secs(s),
            },
        })
    }

    fn validate(self) -> Result<Config, ConfigError> {
        let listen = addr("listen", self.listen.as_deref().unwrap_or("127.0.0.1:6443"))?;
        let admin_listen = addr(
            "admin-listen",
            self.admin_listen.as_deref().unwrap_or("127.0.0.1:9090"),
        )?;
        let admin = self.admin_security(admin_listen)?;
        if listen == admin_listen && listen.port() != 0 {
            return Err(err(
                "admin-listen",
                format!("{admin_listen} is also --listen"),
            ));
        }
        let local_raw = self
            .local
            .as_deref()
            .ok_or_else(|| err("local", "required: the URL of the local API server"))?;
        let local = url("local", local_raw)?;
        let server_id = name("server-id", self.server_id.as_deref().unwrap_or("local"))?;

        let mut peers: Vec<PeerConfig> = Vec::new();
        for spec in &self.peers {
            let (n, u) = spec
                .split_once('=')
                .ok_or_else(|| err("peer", format!("{spec:?} is not NAME=URL")))?;
            let peer = PeerConfig {
                name: name("peer", n)?,
                url: url("peer", u)?,
            };
            if peers.iter().any(|p| p.name == peer.name) {
                return Err(err("peer", format!("duplicate peer name {n:?}")));
            }
            if peer.name == server_id {
                return Err(err(
                    "peer",
                    format!("peer name {n:?} is this server's --server-id"),
                ));
            }
            if same_endpoint(&peer.url, &local) {
                return Err(err(
                    "peer",
                    format!("peer {n:?} has the local server's URL {local}"),
                ));
            }
            peers.push(peer);
        }

        let serving_tls = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => {
                readable("tls-cert-file", &cert)?;
                readable("tls-key-file", &key)?;
                Some(ServingTls { cert, key })
            }
            (None, None) => None,
            (Some(_), None) => return Err(err("tls-key-file", "required with --tls-cert-file")),
            (None, Some(_)) => return Err(err("tls-cert-file", "required with --tls-key-file")),
        };
        let proxy_client_cert = match (self.proxy_client_cert_file, self.proxy_client_key_file) {
            (Some(cert), Some(key)) => {
                readable("proxy-client-cert-file", &cert)?;
                readable("proxy-client-key-file", &key)?;
                Some((cert, key))
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "proxy-client-key-file",
                    "required with --proxy-client-cert-file",
                ));
            }
            (None, Some(_)) => {
                return Err(err(
                    "proxy-client-cert-file",
                    "required with --proxy-client-key-file",
                ));
            }
        };
        for (field, file) in [
            ("peer-ca-file", &self.peer_ca_file),
            ("local-ca-file", &self.local_ca_file),
        ] {
            if let Some(f) = file {
                readable(field, f)?;
            }
        }
        let insecure = self.insecure_skip_tls_verify.unwrap_or(false);
        if insecure
            && let Some(field) = [
                ("peer-ca-file", &self.peer_ca_file),
                ("local-ca-file", &self.local_ca_file),
            ]
            .into_iter()
            .find_map(|(field, file)| file.as_ref().map(|_| field))
        {
            return Err(err(
                "insecure-skip-tls-verify",
                format!("cannot be combined with --{field}: nothing would be verified"),
            ));
        }
        if local.scheme_str() == Some("https")
            && !insecure
            && self.local_ca_file.is_none()
            && self.peer_ca_file.is_none()
        {
            return Err(err(
                "local-ca-file",
                "required for an https:// local server (or give --peer-ca-file, or --insecure-skip-tls-verify)",
            ));
        }
        if let Some(p) = peers.iter().find(|p| p.url.scheme_str() == Some("https"))
            && !insecure
            && self.peer_ca_file.is_none()
        {
            return Err(err(
                "peer-ca-file",
                format!("required for https:// peer {}", p.name),
            ));
        }
        let identity = self.identity.unwrap_or_default();
        if identity == IdentityMode::FrontProxy {
            if self.client_ca_file.is_none() {
                return Err(err(
                    "client-ca-file",
                    "required with --identity front-proxy (the CA of users' client certificates)",
                ));
            }
            if proxy_client_cert.is_none() {
                return Err(err(
                    "proxy-client-cert-file",
                    "required with --identity front-proxy (API servers trust X-Remote-* headers only from it)",
                ));
            }
        } else if self.client_ca_file.is_some() {
            return Err(err(
                "client-ca-file",
                "only used with --identity front-proxy",
            ));
        }
        if let Some(f) = &self.client_ca_file {
            readable("client-ca-file", f)?;
        }
        if let Some(f) = &self.requestheader_client_ca_file {
            readable("requestheader-client-ca-file", f)?;
        } else if !self.requestheader_allowed_names.is_empty() {
            return Err(err(
                "requestheader-allowed-names",
                "needs --requestheader-client-ca-file",
            ));
        }
        if (self.client_ca_file.is_some() || self.requestheader_client_ca_file.is_some())
            && serving_tls.is_none()
        {
            return Err(err(
                "tls-cert-file",
                "client certificates need a TLS listener: give --tls-cert-file and --tls-key-file",
            ));
        }
        let header = |field: &str,
                      v: Option<&str>,
                      default: &'static str|
         -> Result<HeaderName, ConfigError> {
            let v = v.unwrap_or(default);
            HeaderName::from_bytes(v.to_ascii_lowercase().as_bytes())
                .map_err(|_| err(field, format!("{v:?} is not a header name")))
        };
        let header_names = HeaderNames {
            user: header(
                "requestheader-username-headers",
                self.requestheader_username_headers.as_deref(),
                "X-Remote-User",
            )?,
            uid: header(
                "requestheader-uid-headers",
                self.requestheader_uid_headers.as_deref(),
                "X-Remote-Uid",
            )?,
            group: header(
                "requestheader-group-headers",
                self.requestheader_group_headers.as_deref(),
                "X-Remote-Group",
            )?,
            extra_prefix: header(
                "requestheader-extra-headers-prefix",
                self.requestheader_extra_headers_prefix.as_deref(),
                "X-Remote-Extra-",
            )?
            .as_str()
            .to_owned(),
        };
        let peer_source = self.peer_source.unwrap_or_default();
        if peer_source != PeerSource::Static && !peers.is_empty() {
            return Err(err(
                "peer",
                "static peers cannot be combined with --peer-source leases or endpointslices",
            ));
        }
        let token_file_given = self.peer_source_token_file.is_some();
        let peer_source_token_file = match self.peer_source_token_file {
            Some(f) => {
                readable("peer-source-token-file", &f)?;
                Some(f)
            }
            None => Some(PathBuf::from(SERVICE_ACCOUNT_TOKEN)).filter(|p| p.exists()),
        };
        let kubeconfig = match &self.kubeconfig {
            None => None,
            Some(_) if peer_source == PeerSource::Static => {
                return Err(err(
                    "kubeconfig",
                    "only used with --peer-source leases or endpointslices",
                ));
            }
            Some(_) if token_file_given => {
                return Err(err(
                    "kubeconfig",
                    "give either --kubeconfig or --peer-source-token-file",
                ));
            }
            Some(path) => Some(
                crate::kubeconfig::load(path).map_err(|why| err("kubeconfig", why.to_string()))?,
            ),
        };
        let peer_source_token_file = if kubeconfig.is_some() {
            None
        } else {
            peer_source_token_file
        };
        let peer_scheme = self.peer_scheme.unwrap_or_default();
        if peer_source != PeerSource::Static
            && peer_scheme == PeerScheme::Https
            && self.peer_ca_file.is_none()
        {
            return Err(err(
                "peer-ca-file",
                "required to verify peers found in the cluster over https",
            ));
        }
        let seconds =
            |field: &str, v: Option<u64>, default: u64| -> Result<Duration, ConfigError> {
                match v.unwrap_or(default) {
                    0 => Err(err(field, "must be at least 1")),
                    s => Ok(Duration::from_secs(s)),
                }
            };
        let peer_server_name = self
            .peer_server_name
            .unwrap_or_else(|| "kubernetes.default.svc".to_owned());
        if rustls::pki_types::ServerName::try_from(peer_server_name.as_str()).is_err() {
            return Err(err(
                "peer-server-name",
                format!("{peer_server_name:?} is not a DNS name or IP address"),
            ));
        }
        Ok(Config {
            admin,
            listen,
            admin_listen,
            local,
            server_id,
            peers,
            identity,
            client_ca_file: self.client_ca_file,
            requestheader_client_ca_file: self.requestheader_client_ca_file,
            requestheader_allowed_names: self.requestheader_allowed_names,
            header_names,
            peer_source,
            peer_source_token_file,
            kubeconfig,
            peer_scheme,
            serving_tls,
            local_ca_file: self.local_ca_file,
            peer_ca_file: self.peer_ca_file,
            peer_server_name,
            proxy_client_cert,
            log_format: self.log_format.unwrap_or_default(),
            refresh_interval: seconds(
                "refresh-interval-seconds",
                self.refresh_interval_seconds,
                30,
            )?,
            connect_timeout: seconds("connect-timeout-seconds", self.connect_timeout_seconds, 5)?,
            response_header_timeout: seconds(
                "response-header-timeout-seconds",
                self.response_header_timeout_seconds,
                60,
            )?,
            tls_reload_interval: seconds(
                "tls-reload-interval-seconds",
                self.tls_reload_interval_seconds,
                10,
            )?,
            insecure_skip_tls_verify: insecure,
            limits: Limits {
                max_request_header_bytes: bounded(
                    "max-request-header-bytes",
                    self.max_request_header_bytes,
                    limits::DEFAULT_MAX_REQUEST_HEADER_BYTES,
                    limits::MIN_REQUEST_HEADER_BYTES as u64,
                    64 << 20,
                )?,
                max_request_body_bytes: bounded(
                    "max-request-body-bytes",
                    self.max_request_body_bytes,
                    limits::DEFAULT_MAX_REQUEST_BODY_BYTES,
                    1,
                    u64::MAX,
                )?,
                max_discovery_document_bytes: bounded(
                    "max-discovery-document-bytes",
                    self.max_discovery_document_bytes,
                    limits::DEFAULT_MAX_DISCOVERY_DOCUMENT_BYTES,
                    1024,
                    1 << 30,
                )?,
                max_connections: bounded(
                    "max-connections",
                    self.max_connections,
                    limits::DEFAULT_MAX_CONNECTIONS,
                    1,
                    1 << 20,
                )?,
            },
            max_tracked_clients: bounded(
                "max-tracked-clients",
                self.max_tracked_clients,
                crate::readiness::clients::DEFAULT_MAX_CLIENTS,
                1,
                10_000,
            )?,
        })
    }
}

/// `v` (or `default`) within `min..=max`, as the type the limit is kept in.
fn bounded<T>(field: &str, v: Option<u64>, default: T, min: u64, max: u64) -> Result<T, ConfigError>
where
    T: TryFrom<u64>,
{
    let Some(v) = v else {
        return Ok(default);
    };
    if v < min || v > max {
        return Err(err(
            field,
            format!("{v} is out of range: must be between {min} and {max}"),
        ));
    }
    T::try_from(v).map_err(|_| err(field, format!("{v} is too large for this platform")))
}

fn read_file(path: &Path) -> Result<ServeArgs, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| err("config", format!("{}: {e}", path.display())))?;
    serde_yaml_ng::from_str(&text).map_err(|e| {
        // serde_yaml names the unknown or mistyped field in its message
        err("config", format!("{}: {e}", path.display()))
    })
}

fn addr(field: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse()
        .map_err(|_| err(field, format!("{s:?} is not an IP:PORT address")))
}

fn url(field: &str, s: &str) -> Result<Uri, ConfigError> {
    let uri: Uri = s
        .parse()
        .map_err(|e| err(field, format!("{s:?} is not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(err(
                field,
                format!("{s:?}: unsupported scheme {other:?} (use http or https)"),
            ));
        }
        None => {
            return Err(err(
                field,
                format!("{s:?} has no scheme (use http:// or https://)"),
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(err(field, format!("{s:?} has no host")));
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return Err(err(
            field,
            format!("{s:?}: a path is not supported, give scheme://host:port"),
        ));
    }
    Ok(uri)
}

fn name(field: &str, s: &str) -> Result<ServerName, ConfigError> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if ok {
        Ok(ServerName::from(s))
    } else {
        Err(err(
            field,
            format!("{s:?} is not a valid name (letters, digits, '-', '.', '_')"),
        ))
    }
}

fn readable(field: &str, path: &Path) -> Result<(), ConfigError> {
    std::fs::File::open(path)
        .map(|_| ())
        .map_err(|e| err(field, format!("{}: {e}", path.display())))
}

fn same_endpoint(a: &Uri, b: &Uri) -> bool {
    let port = crate::forward::port_of;
    a.scheme_str() == b.scheme_str() && a.host() == b.host() && port(a) == port(b)
}

#[cfg(test)]
mod tests;
