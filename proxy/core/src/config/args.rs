//! The shape of `mvproxy serve`'s flags and of its YAML file: the same names, every value
//! optional, nothing checked yet. [`ServeArgs::load`] reads the file, lets the flags win and
//! hands the result to validation ([`super::validate`]).

use std::fmt::Display;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

use super::{Config, ConfigError, defaults, err};

/// A flag's help line with its default, so the help shows the value validation applies.
fn with_default(help: &str, default: impl Display) -> String {
    format!("{help} [default: {default}]")
}

/// How client identity reaches the API servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityMode {
    /// `Authorization` and `Impersonate-*` forwarded as sent.
    #[default]
    Passthrough,
    /// Client certificates verified and forwarded as `X-Remote-*` headers.
    FrontProxy,
}

/// Where peers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
// Variant doc comments would become `--help` text beside each possible value.
#[allow(missing_docs)]
pub enum PeerSource {
    #[default]
    Static,
    Leases,
    Endpointslices,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
// Variant doc comments would become `--help` text beside each possible value.
#[allow(missing_docs)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `mvproxy serve` flags; also the shape of the YAML file (same names without `--`).
#[derive(Debug, Clone, Default, Args, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeArgs {
    /// Address of the proxy listener
    #[arg(long, help = with_default("Address of the proxy listener", defaults::LISTEN))]
    pub listen: Option<String>,
    /// Address of the admin listener (/healthz, /readyz, /metrics, /debug/discovery)
    #[arg(long, help = with_default("Address of the admin listener (/healthz, /readyz, /metrics, /debug/discovery)", defaults::ADMIN_LISTEN))]
    pub admin_listen: Option<String>,
    /// URL of the local API server, e.g. https://127.0.0.1:6443
    #[arg(long)]
    pub local: Option<String>,
    /// A peer, as NAME=URL (repeatable)
    #[arg(long = "peer", value_name = "NAME=URL")]
    #[serde(default)]
    pub peers: Vec<String>,
    /// This server's name among its peers (the merge orders servers by name)
    #[arg(long, help = with_default("This server's name among its peers (the merge orders servers by name)", defaults::SERVER_ID))]
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
    /// Name verified in peers' certificates and sent as SNI
    #[arg(long, help = with_default("Name verified in peers' certificates and sent as SNI", defaults::PEER_SERVER_NAME))]
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
    /// Seconds between discovery refreshes of each server
    #[arg(long, help = with_default("Seconds between discovery refreshes of each server", defaults::REFRESH_INTERVAL.as_secs()))]
    pub refresh_interval_seconds: Option<u64>,
    /// Seconds to wait for a connection to an upstream (TCP connect and TLS handshake)
    #[arg(long, help = with_default("Seconds to wait for a connection to an upstream (TCP connect and TLS handshake)", defaults::CONNECT_TIMEOUT.as_secs()))]
    pub connect_timeout_seconds: Option<u64>,
    /// Seconds to wait for an upstream's response headers
    #[arg(long, help = with_default("Seconds to wait for an upstream's response headers", defaults::RESPONSE_HEADER_TIMEOUT.as_secs()))]
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
    /// Seconds between checks of the TLS files (certificates, keys, CAs) for changes
    #[arg(long, help = with_default("Seconds between checks of the TLS files (certificates, keys, CAs) for changes", defaults::TLS_RELOAD_INTERVAL.as_secs()))]
    pub tls_reload_interval_seconds: Option<u64>,
    /// Do not verify the local server's and peers' certificates (testing only; logged)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// Largest request line and headers in bytes; a larger request gets 431
    #[arg(long, help = with_default("Largest request line and headers in bytes; a larger request gets 431", defaults::MAX_REQUEST_HEADER_BYTES))]
    pub max_request_header_bytes: Option<u64>,
    /// Largest request body in bytes; a larger one gets 413
    #[arg(long, help = with_default("Largest request body in bytes; a larger one gets 413", defaults::MAX_REQUEST_BODY_BYTES))]
    pub max_request_body_bytes: Option<u64>,
    /// Largest discovery document read from a server, in bytes
    #[arg(long, help = with_default("Largest discovery document read from a server, in bytes", defaults::MAX_DISCOVERY_DOCUMENT_BYTES))]
    pub max_discovery_document_bytes: Option<u64>,
    /// Most client connections open at once; a new one over it gets 503
    #[arg(long, help = with_default("Most client connections open at once; a new one over it gets 503", defaults::MAX_CONNECTIONS))]
    pub max_connections: Option<u64>,
    /// Most distinct clients named in mvproxy_skew_requests_total,
    /// mvproxy_client_requests_total and /debug/clients; later ones count as "other"
    #[arg(long, help = with_default("Most distinct clients named in mvproxy_skew_requests_total, mvproxy_client_requests_total and /debug/clients; later ones count as \"other\"", defaults::MAX_TRACKED_CLIENTS))]
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
    /// Allow plain-HTTP, unauthenticated admin endpoints on a non-loopback --admin-listen: for
    /// a local rehearsal whose Prometheus runs in a container, never on a node network
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub admin_insecure_plain_http: Option<bool>,
    /// Admin paths anyone may get, comma-separated, a trailing * for a prefix; "" for none
    #[arg(long, help = with_default("Admin paths anyone may get, comma-separated, a trailing * for a prefix; \"\" for none", defaults::ADMIN_ALWAYS_ALLOW_PATHS))]
    pub admin_always_allow_paths: Option<String>,
    /// Bearer token mvproxy presents to the local API server for its reviews [default: the in-cluster ServiceAccount token, if present]
    #[arg(long)]
    pub admin_auth_token_file: Option<PathBuf>,
    /// Seconds an admin authentication or authorization decision is cached
    #[arg(long, help = with_default("Seconds an admin authentication or authorization decision is cached", defaults::ADMIN_AUTH_CACHE_TTL.as_secs()))]
    pub admin_auth_cache_ttl_seconds: Option<u64>,
    /// The release the upgrade heads for, from the catalog in the binary (e.g. 1.36): requests
    /// for APIs it does not serve are counted per client from the first request
    #[arg(long, value_name = "1.N", conflicts_with = "target_discovery")]
    pub target_release: Option<String>,
    /// The target release's discovery instead of a catalog release: DIR/api.json and
    /// DIR/apis.json (aggregated discovery v2), optionally DIR/version.json
    #[arg(long, value_name = "DIR")]
    pub target_discovery: Option<PathBuf>,
}

/// Scheme of peer addresses read from Leases or EndpointSlices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
// Variant doc comments would become `--help` text beside each possible value.
#[allow(missing_docs)]
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

impl ServeArgs {
    /// Reads `--config` if given, lets flags win, validates and checks the files named.
    pub fn load(self) -> Result<Config, ConfigError> {
        let args = match self.config.clone() {
            Some(path) => self.over(read_file(&path)?)?,
            None => self,
        };
        let config = args.validate()?;
        config.check_files()?;
        Ok(config)
    }

    /// `self` (flags) over `file`: every key given as a flag replaces the file's.
    fn over(self, file: ServeArgs) -> Result<ServeArgs, ConfigError> {
        let (Value::Mapping(mut merged), Value::Mapping(flags)) =
            (to_yaml(&file)?, to_yaml(&self)?)
        else {
            return Err(err("config", "flags and file are not maps"));
        };
        let given = |v: &Value| match v {
            Value::Null => false,
            Value::Sequence(s) => !s.is_empty(),
            _ => true,
        };
        for (key, value) in flags {
            if given(&value) {
                merged.insert(key, value);
            }
        }
        let mut args: ServeArgs = serde_yaml_ng::from_value(Value::Mapping(merged))
            .map_err(|e| err("config", e.to_string()))?;
        args.config = self.config;
        Ok(args)
    }
}

fn to_yaml(args: &ServeArgs) -> Result<Value, ConfigError> {
    serde_yaml_ng::to_value(args).map_err(|e| err("config", e.to_string()))
}

fn read_file(path: &Path) -> Result<ServeArgs, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| err("config", format!("{}: {e}", path.display())))?;
    // serde_yaml names the unknown or mistyped key in its message
    serde_yaml_ng::from_str(&text).map_err(|e| err("config", format!("{}: {e}", path.display())))
}
