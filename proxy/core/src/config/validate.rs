//! [`ServeArgs`] → [`Config`], without touching the file system: every rule here is a pure
//! function of the flags, one group at a time, and the first broken rule names its field.
//! Whether the files named can be read is [`super::files`]' step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;
use http::header::HeaderName;

use super::args::{IdentityMode, PeerScheme, PeerSource, ServeArgs};
use super::{
    AdminSecurity, AdminTls, CertKey, ClusterPeers, Config, ConfigError, Identity, Listeners,
    PeerConfig, PeerReader, Peers, ProxyTls, RequestHeaderTrust, Timing, TokenFile, UpstreamTls,
    Verify, defaults, err,
};
use crate::identity::HeaderNames;
use crate::limits::{self, Limits};
use crate::peers::Kind;
use crate::plumbing::ServerName;
use crate::target::TargetSource;

/// Largest `--max-request-header-bytes`.
const MAX_REQUEST_HEADER_BYTES: u64 = 64 << 20;
/// Smallest `--max-discovery-document-bytes`: smaller than any real `/api`.
const MIN_DISCOVERY_DOCUMENT_BYTES: u64 = 1024;
/// Largest `--max-discovery-document-bytes`.
const MAX_DISCOVERY_DOCUMENT_BYTES: u64 = 1 << 30;
/// Largest `--max-connections`.
const MAX_CONNECTIONS: u64 = 1 << 20;
/// Largest `--max-tracked-clients`: each is a label value of a metric family.
const MAX_TRACKED_CLIENTS: u64 = 10_000;
/// Longest server or peer name (a DNS name's).
const MAX_NAME_LEN: usize = 253;

impl ServeArgs {
    /// The typed configuration, or the first rule these flags break.
    pub(super) fn validate(self) -> Result<Config, ConfigError> {
        let listeners = self.listeners()?;
        let admin = self.admin(listeners.admin)?;
        let local = url(
            "local",
            self.local
                .as_deref()
                .ok_or_else(|| err("local", "required: the URL of the local API server"))?,
        )?;
        let server_id = name(
            "server-id",
            self.server_id.as_deref().unwrap_or(defaults::SERVER_ID),
        )?;
        let static_peers = self.static_peers(&server_id, &local)?;
        let upstream_tls = self.upstream_tls(&local, &static_peers)?;
        let proxy_tls = self.proxy_tls(upstream_tls.client_cert.is_some())?;
        let header_names = self.header_names()?;
        let peers = self.peers(static_peers, &upstream_tls.verify)?;
        let timing = self.timing()?;
        Ok(Config {
            listeners,
            local,
            server_id,
            peers,
            upstream_tls,
            proxy_tls,
            header_names,
            admin,
            timing,
            limits: self.limits()?,
            max_tracked_clients: bounded(
                "max-tracked-clients",
                self.max_tracked_clients,
                defaults::MAX_TRACKED_CLIENTS,
                1,
                MAX_TRACKED_CLIENTS,
            )?,
            log_format: self.log_format.unwrap_or_default(),
            target: self.target()?,
        })
    }

    /// `--target-release` (a catalog release) or `--target-discovery` (read by the file step).
    fn target(&self) -> Result<Option<TargetSource>, ConfigError> {
        match (&self.target_release, &self.target_discovery) {
            (Some(_), Some(_)) => Err(err(
                "target-release",
                "give --target-release or --target-discovery, not both",
            )),
            (Some(release), None) => {
                let release = release.trim().trim_start_matches('v').to_owned();
                crate::target::catalog::surface(&release)
                    .map_err(|e| err("target-release", e.to_string()))?;
                Ok(Some(TargetSource::Release(release)))
            }
            (None, Some(dir)) => Ok(Some(TargetSource::Discovery(dir.clone()))),
            (None, None) => Ok(None),
        }
    }

    fn listeners(&self) -> Result<Listeners, ConfigError> {
        let proxy = addr("listen", self.listen.as_deref().unwrap_or(defaults::LISTEN))?;
        let admin = addr(
            "admin-listen",
            self.admin_listen
                .as_deref()
                .unwrap_or(defaults::ADMIN_LISTEN),
        )?;
        if proxy == admin && proxy.port() != 0 {
            return Err(err("admin-listen", format!("{admin} is also --listen")));
        }
        Ok(Listeners { proxy, admin })
    }

    /// Plain HTTP only on loopback (or asked for by name); over TLS, delegated authentication
    /// and authorization.
    fn admin(&self, listen: SocketAddr) -> Result<AdminSecurity, ConfigError> {
        let pair = cert_key(
            ("admin-tls-cert-file", &self.admin_tls_cert_file),
            ("admin-tls-key-file", &self.admin_tls_key_file),
        )?;
        let Some(serving) = pair else {
            if !listen.ip().is_loopback() && self.admin_insecure_plain_http != Some(true) {
                return Err(err(
                    "admin-listen",
                    format!(
                        "{listen} is not a loopback address: plain HTTP admin endpoints are for loopback only; serve them over TLS (--admin-tls-cert-file, --admin-tls-key-file), authenticated and authorized by the local API server (or, for a local rehearsal only, --admin-insecure-plain-http)"
                    ),
                ));
            }
            if self.admin_client_ca_file.is_some() {
                return Err(err(
                    "admin-client-ca-file",
                    "needs --admin-tls-cert-file: client certificates need TLS",
                ));
            }
            return Ok(AdminSecurity::PlainHttp);
        };
        let always_allow: Vec<String> = self
            .admin_always_allow_paths
            .as_deref()
            .unwrap_or(defaults::ADMIN_ALWAYS_ALLOW_PATHS)
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        if let Some(bad) = always_allow.iter().find(|p| !p.starts_with('/')) {
            return Err(err(
                "admin-always-allow-paths",
                format!("{bad:?} is not a path (starts with /)"),
            ));
        }
        Ok(AdminSecurity::Tls(AdminTls {
            serving,
            client_ca: self.admin_client_ca_file.clone(),
            always_allow,
            token: token_file(&self.admin_auth_token_file),
            cache_ttl: seconds(
                "admin-auth-cache-ttl-seconds",
                self.admin_auth_cache_ttl_seconds,
                defaults::ADMIN_AUTH_CACHE_TTL,
            )?,
        }))
    }

    fn static_peers(
        &self,
        server_id: &ServerName,
        local: &Uri,
    ) -> Result<Vec<PeerConfig>, ConfigError> {
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
            if peer.name == *server_id {
                return Err(err(
                    "peer",
                    format!("peer name {n:?} is this server's --server-id"),
                ));
            }
            if same_endpoint(&peer.url, local) {
                return Err(err(
                    "peer",
                    format!("peer {n:?} has the local server's URL {local}"),
                ));
            }
            peers.push(peer);
        }
        Ok(peers)
    }

    fn upstream_tls(&self, local: &Uri, peers: &[PeerConfig]) -> Result<UpstreamTls, ConfigError> {
        let client_cert = cert_key(
            ("proxy-client-cert-file", &self.proxy_client_cert_file),
            ("proxy-client-key-file", &self.proxy_client_key_file),
        )?;
        let verify = if self.insecure_skip_tls_verify.unwrap_or(false) {
            if let Some(field) = [
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
            Verify::InsecureSkip
        } else {
            let verify = Verify::Cas {
                local: self.local_ca_file.clone(),
                peers: self.peer_ca_file.clone(),
            };
            if is_https(local) && verify.local_ca().is_none() {
                return Err(err(
                    "local-ca-file",
                    "required for an https:// local server (or give --peer-ca-file, or --insecure-skip-tls-verify)",
                ));
            }
            if let Some(p) = peers.iter().find(|p| is_https(&p.url))
                && verify.peer_ca().is_none()
            {
                return Err(err(
                    "peer-ca-file",
                    format!("required for https:// peer {}", p.name),
                ));
            }
            verify
        };
        let peer_server_name = self
            .peer_server_name
            .clone()
            .unwrap_or_else(|| defaults::PEER_SERVER_NAME.to_owned());
        if rustls::pki_types::ServerName::try_from(peer_server_name.as_str()).is_err() {
            return Err(err(
                "peer-server-name",
                format!("{peer_server_name:?} is not a DNS name or IP address"),
            ));
        }
        Ok(UpstreamTls {
            verify,
            peer_server_name,
            client_cert,
        })
    }

    /// The proxy listener's TLS and the client certificates it takes.
    fn proxy_tls(&self, has_client_cert: bool) -> Result<Option<ProxyTls>, ConfigError> {
        let serving = cert_key(
            ("tls-cert-file", &self.tls_cert_file),
            ("tls-key-file", &self.tls_key_file),
        )?;
        let identity = match (self.identity.unwrap_or_default(), &self.client_ca_file) {
            (IdentityMode::FrontProxy, None) => {
                return Err(err(
                    "client-ca-file",
                    "required with --identity front-proxy (the CA of users' client certificates)",
                ));
            }
            (IdentityMode::FrontProxy, Some(_)) if !has_client_cert => {
                return Err(err(
                    "proxy-client-cert-file",
                    "required with --identity front-proxy (API servers trust X-Remote-* headers only from it)",
                ));
            }
            (IdentityMode::FrontProxy, Some(users_ca)) => Identity::FrontProxy {
                users_ca: users_ca.clone(),
            },
            (IdentityMode::Passthrough, Some(_)) => {
                return Err(err(
                    "client-ca-file",
                    "only used with --identity front-proxy",
                ));
            }
            (IdentityMode::Passthrough, None) => Identity::Passthrough,
        };
        let requestheader = match &self.requestheader_client_ca_file {
            Some(ca) => Some(RequestHeaderTrust {
                ca: ca.clone(),
                allowed_names: self.requestheader_allowed_names.clone(),
            }),
            None if !self.requestheader_allowed_names.is_empty() => {
                return Err(err(
                    "requestheader-allowed-names",
                    "needs --requestheader-client-ca-file",
                ));
            }
            None => None,
        };
        match serving {
            Some(serving) => Ok(Some(ProxyTls {
                serving,
                identity,
                requestheader,
            })),
            None if identity != Identity::Passthrough || requestheader.is_some() => Err(err(
                "tls-cert-file",
                "client certificates need a TLS listener: give --tls-cert-file and --tls-key-file",
            )),
            None => Ok(None),
        }
    }

    fn header_names(&self) -> Result<HeaderNames, ConfigError> {
        let default = HeaderNames::default();
        let header = |field: &str, v: &Option<String>| -> Result<Option<HeaderName>, ConfigError> {
            v.as_ref()
                .map(|v| {
                    HeaderName::from_bytes(v.to_ascii_lowercase().as_bytes())
                        .map_err(|_| err(field, format!("{v:?} is not a header name")))
                })
                .transpose()
        };
        Ok(HeaderNames {
            user: header(
                "requestheader-username-headers",
                &self.requestheader_username_headers,
            )?
            .unwrap_or(default.user),
            uid: header("requestheader-uid-headers", &self.requestheader_uid_headers)?
                .unwrap_or(default.uid),
            group: header(
                "requestheader-group-headers",
                &self.requestheader_group_headers,
            )?
            .unwrap_or(default.group),
            extra_prefix: header(
                "requestheader-extra-headers-prefix",
                &self.requestheader_extra_headers_prefix,
            )?
            .map_or(default.extra_prefix, |h| h.as_str().to_owned()),
        })
    }

    /// Static peers, or where cluster peers are read from.
    fn peers(&self, static_peers: Vec<PeerConfig>, verify: &Verify) -> Result<Peers, ConfigError> {
        let kind = match self.peer_source.unwrap_or_default() {
            PeerSource::Static => {
                if self.kubeconfig.is_some() {
                    return Err(err(
                        "kubeconfig",
                        "only used with --peer-source leases or endpointslices",
                    ));
                }
                return Ok(Peers::Static(static_peers));
            }
            PeerSource::Leases => Kind::Leases,
            PeerSource::Endpointslices => Kind::EndpointSlices,
        };
        if !static_peers.is_empty() {
            return Err(err(
                "peer",
                "static peers cannot be combined with --peer-source leases or endpointslices",
            ));
        }
        let reader = match (&self.kubeconfig, &self.peer_source_token_file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "kubeconfig",
                    "give either --kubeconfig or --peer-source-token-file",
                ));
            }
            (Some(kubeconfig), None) => PeerReader::Kubeconfig(kubeconfig.clone()),
            (None, token) => PeerReader::LocalServer(token_file(token)),
        };
        let scheme = self.peer_scheme.unwrap_or_default();
        if scheme == PeerScheme::Https && verify.peer_ca().is_none() && !verify.is_insecure() {
            return Err(err(
                "peer-ca-file",
                "required to verify peers found in the cluster over https",
            ));
        }
        Ok(Peers::Cluster(ClusterPeers {
            kind,
            reader,
            scheme,
        }))
    }

    fn timing(&self) -> Result<Timing, ConfigError> {
        Ok(Timing {
            refresh_interval: seconds(
                "refresh-interval-seconds",
                self.refresh_interval_seconds,
                defaults::REFRESH_INTERVAL,
            )?,
            connect_timeout: seconds(
                "connect-timeout-seconds",
                self.connect_timeout_seconds,
                defaults::CONNECT_TIMEOUT,
            )?,
            response_header_timeout: seconds(
                "response-header-timeout-seconds",
                self.response_header_timeout_seconds,
                defaults::RESPONSE_HEADER_TIMEOUT,
            )?,
            tls_reload_interval: seconds(
                "tls-reload-interval-seconds",
                self.tls_reload_interval_seconds,
                defaults::TLS_RELOAD_INTERVAL,
            )?,
        })
    }

    fn limits(&self) -> Result<Limits, ConfigError> {
        Ok(Limits {
            max_request_header_bytes: bounded(
                "max-request-header-bytes",
                self.max_request_header_bytes,
                defaults::MAX_REQUEST_HEADER_BYTES,
                limits::MIN_REQUEST_HEADER_BYTES as u64,
                MAX_REQUEST_HEADER_BYTES,
            )?,
            max_request_body_bytes: bounded(
                "max-request-body-bytes",
                self.max_request_body_bytes,
                defaults::MAX_REQUEST_BODY_BYTES,
                1,
                u64::MAX,
            )?,
            max_discovery_document_bytes: bounded(
                "max-discovery-document-bytes",
                self.max_discovery_document_bytes,
                defaults::MAX_DISCOVERY_DOCUMENT_BYTES,
                MIN_DISCOVERY_DOCUMENT_BYTES,
                MAX_DISCOVERY_DOCUMENT_BYTES,
            )?,
            max_connections: bounded(
                "max-connections",
                self.max_connections,
                defaults::MAX_CONNECTIONS,
                1,
                MAX_CONNECTIONS,
            )?,
        })
    }
}

/// A certificate and key given together, or neither.
fn cert_key(
    (cert_field, cert): (&str, &Option<PathBuf>),
    (key_field, key): (&str, &Option<PathBuf>),
) -> Result<Option<CertKey>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(CertKey {
            cert: cert.clone(),
            key: key.clone(),
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(err(key_field, format!("required with --{cert_field}"))),
        (None, Some(_)) => Err(err(cert_field, format!("required with --{key_field}"))),
    }
}

fn token_file(given: &Option<PathBuf>) -> TokenFile {
    given
        .as_ref()
        .map_or(TokenFile::InCluster, |p| TokenFile::Given(p.clone()))
}

/// `v` seconds (or `default`), at least one.
fn seconds(field: &str, v: Option<u64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(0) => Err(err(field, "must be at least 1")),
        Some(s) => Ok(Duration::from_secs(s)),
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

fn is_https(url: &Uri) -> bool {
    url.scheme_str() == Some("https")
}

fn name(field: &str, s: &str) -> Result<ServerName, ConfigError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_LEN
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

fn same_endpoint(a: &Uri, b: &Uri) -> bool {
    let port = crate::plumbing::port_of;
    a.scheme_str() == b.scheme_str() && a.host() == b.host() && port(a) == port(b)
}
