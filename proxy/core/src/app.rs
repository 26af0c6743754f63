//! Starting mvproxy from a validated [`Config`]: upstream clients, the discovery cache, the
//! proxy and admin listeners, and one shutdown signal for all of them.
//!
//! `main` and the demo both go through [`start`], so what the demo measures is what runs in
//! production. Listeners are bound before anything runs, so a port in use fails at start.
//! TLS files are read here once (an unusable one stops mvproxy), then watched by a
//! [`Reloader`] task for as long as the listeners run.

use std::net::SocketAddr;
use std::sync::Arc;

use mvproxy_telemetry::metrics::Metrics;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Admin};
use crate::config::{Config, PeerSource};
use crate::delegated::{Delegated, Settings as DelegatedSettings};
use crate::discovery::Cache;
use crate::discovery::refresh::{PeerSpec, RefreshSettings, UpstreamFactory};
use crate::forward::{ClientSettings, Upstream, port_of};
use crate::identity::Authenticator;
use crate::kubeconfig::KubeConfig;
use crate::peers::{Kind, KubeSource};
use crate::readiness::Readiness;
use crate::server::{self, App};
use crate::tls::reload::Reloader;
use crate::tls::{self, TlsError};

/// Why mvproxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Bind(#[from] std::io::Error),
    #[error("upstream {name}: {source}")]
    Upstream {
        name: String,
        source: crate::forward::UpstreamError,
    },
}

/// A running mvproxy.
pub struct Running {
    /// The proxy listener's address (useful when the config asked for port 0).
    pub listen: SocketAddr,
    /// The admin listener's address.
    pub admin: SocketAddr,
    pub cache: Arc<Cache>,
    shutdown: CancellationToken,
    tasks: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, drains in-flight requests (bounded) and returns when all is stopped.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.tasks.await;
    }
}

/// The API server a kubeconfig's current context names, as an upstream.
fn kubeconfig_upstream(kc: &KubeConfig, config: &Config) -> Result<Upstream, StartError> {
    let tls = match &kc.ca_pem {
        Some(ca) => Some(tls::client_config_from_pem(
            &kc.path,
            ca,
            kc.client_cert
                .as_ref()
                .map(|(c, k)| (c.as_slice(), k.as_slice())),
        )?),
        None => None,
    };
    let settings = ClientSettings {
        tls,
        server_name: None,
        connect_timeout: config.connect_timeout,
        insecure_skip_verify: false,
    };
    Upstream::new(
        "kubeconfig".into(),
        kc.server.clone(),
        &settings,
        config.response_header_timeout,
    )
    .map_err(|source| StartError::Upstream {
        name: kc.server.to_string(),
        source,
    })
}

/// `host:port` of a URL, with the scheme's default port.
fn authority_with_port(url: &http::Uri) -> String {
    format!("{}:{}", url.host().unwrap_or_default(), port_of(url))
}

/// Builds and starts everything; returns once both listeners are bound.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    tls::install_provider();
    let mut reloader = Reloader::new(config.tls_reload_interval);
    let insecure = config.insecure_skip_tls_verify;
    if insecure {
        tracing::warn!(
            "--insecure-skip-tls-verify: the certificates of the local server and of peers are NOT verified; use this for testing only"
        );
    }
    let client_cert = config
        .proxy_client_cert
        .as_ref()
        .map(|(c, k)| reloader.client_cert(c, k))
        .transpose()?;
    let local_ca = config
        .local_ca_file
        .as_ref()
        .or(config.peer_ca_file.as_ref());
    let local_settings = ClientSettings {
        tls: reloader.upstream_config(
            local_ca.map(|p| p.as_path()),
            insecure,
            client_cert.clone(),
        )?,
        server_name: None,
        connect_timeout: config.connect_timeout,
        insecure_skip_verify: insecure,
    };
    let peer_settings = ClientSettings {
        tls: reloader.upstream_config(config.peer_ca_file.as_deref(), insecure, client_cert)?,
        server_name: Some(config.peer_server_name.clone()),
        connect_timeout: config.connect_timeout,
        insecure_skip_verify: insecure,
    };
    let upstream = |name, url: &http::Uri, settings: &ClientSettings| {
        Upstream::new(name, url.clone(), settings, config.response_header_timeout).map_err(
            |source| StartError::Upstream {
                name: url.to_string(),
                source,
            },
        )
    };
    let local = upstream(config.server_id.clone(), &config.local, &local_settings)?;
    let timeout = config.response_header_timeout;
    let new_peer: UpstreamFactory = Box::new(move |name, url| {
        Upstream::new(name.clone(), url.clone(), &peer_settings, timeout)
    });

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let cache = Cache::new(
        local.clone(),
        new_peer,
        RefreshSettings {
            interval: config.refresh_interval,
            max_document_bytes: config.limits.max_discovery_document_bytes,
        },
        metrics.clone(),
    );
    // Client certificates: each CA file is watched, so a CA added to the bundle is trusted
    // from the next handshake on.
    let users = config
        .client_ca_file
        .as_deref()
        .map(|ca| reloader.client_cas(&[ca]))
        .transpose()?;
    let proxies = config
        .requestheader_client_ca_file
        .as_deref()
        .map(|ca| reloader.client_cas(&[ca]))
        .transpose()?;
    let client_cas: Vec<&std::path::Path> =
        [&config.client_ca_file, &config.requestheader_client_ca_file]
            .into_iter()
            .flatten()
            .map(|p| p.as_path())
            .collect();
    let handshake_verifier = if client_cas.is_empty() {
        None
    } else {
        Some(reloader.client_cas(&client_cas)?
            as Arc<dyn rustls::server::danger::ClientCertVerifier>)
    };
    let auth = Authenticator::new(
        users.map(|v| v as _),
        proxies.map(|v| (v as _, config.requestheader_allowed_names.clone())),
        config.header_names.clone(),
    );
    let acceptor = match &config.serving_tls {
        Some(t) => Some(TlsAcceptor::from(Arc::new(tls::server_config(
            reloader.serving_cert(&t.cert, &t.key)?,
            handshake_verifier,
        )?))),
        None => None,
    };
    let admin_tls = match &config.admin.tls {
        Some(t) => {
            let clients = config
                .admin
                .client_ca_file
                .as_deref()
                .map(|ca| reloader.client_cas(&[ca]))
                .transpose()?
                .map(|v| v as Arc<dyn rustls::server::danger::ClientCertVerifier>);
            Some(TlsAcceptor::from(Arc::new(tls::server_config(
                reloader.serving_cert(&t.cert, &t.key)?,
                clients,
            )?)))
        }
        None => None,
    };
    let delegated = config.admin.tls.as_ref().map(|_| {
        Arc::new(Delegated::new(
            local.clone(),
            DelegatedSettings {
                always_allow: config.admin.always_allow.clone(),
                token_file: config.admin.token_file.clone(),
                cache_ttl: config.admin.cache_ttl,
            },
        ))
    });
    let listener = server::bind(config.listen).await?;
    let admin_listener = server::bind(config.admin_listen).await?;
    let listen = listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;

    let shutdown = CancellationToken::new();
    let peer_source = match config.peer_source {
        PeerSource::Static => {
            cache.set_peers(
                config
                    .peers
                    .iter()
                    .map(|p| PeerSpec {
                        name: p.name.clone(),
                        url: p.url.clone(),
                        generation: String::new(),
                    })
                    .collect(),
            );
            None
        }
        PeerSource::Leases | PeerSource::Endpointslices => Some(KubeSource {
            kind: if config.peer_source == PeerSource::Leases {
                Kind::Leases
            } else {
                Kind::EndpointSlices
            },
            api: match &config.kubeconfig {
                Some(kc) => kubeconfig_upstream(kc, config)?,
                None => local.clone(),
            },
            token: config.kubeconfig.as_ref().and_then(|kc| kc.token.clone()),
            token_file: config
                .kubeconfig
                .as_ref()
                .and_then(|kc| kc.token_file.clone())
                .or_else(|| config.peer_source_token_file.clone()),
            self_name: config.server_id.clone(),
            self_addr: authority_with_port(&config.local),
            scheme: config.peer_scheme.as_str(),
            metrics: metrics.clone(),
        }),
    };
    let readiness = Arc::new(Readiness::new(
        config.max_tracked_clients,
        metrics.clone(),
        config.header_names.user.clone(),
    ));
    let app = Arc::new(App {
        auth,
        server_id: config.server_id.clone(),
        listen,
        local,
        cache: cache.clone(),
        metrics,
        limits: config.limits,
        readiness: readiness.clone(),
    });
    let admin = Admin {
        cache: cache.clone(),
        registry: Arc::new(registry),
        readiness,
        delegated,
    };
    let tasks = tokio::spawn({
        let shutdown = shutdown.clone();
        let cache = cache.clone();
        async move {
            let peers =
                peer_source.map(|source| tokio::spawn(source.run(cache.clone(), shutdown.clone())));
            let refresher = tokio::spawn(cache.run(shutdown.clone()));
            let reloads = tokio::spawn(reloader.run(shutdown.clone()));
            let admin = tokio::spawn(admin::serve(
                admin_listener,
                admin_tls,
                admin,
                shutdown.clone(),
            ));
            server::serve(listener, acceptor, app, shutdown.clone()).await;
            let _ = tokio::join!(refresher, admin, reloads);
            if let Some(peers) = peers {
                let _ = peers.await;
            }
        }
    });
    tracing::info!(%listen, admin = %admin_addr, local = %config.local, peers = config.peers.len(), "mvproxy started");
    Ok(Running {
        listen,
        admin: admin_addr,
        cache,
        shutdown,
        tasks,
    })
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
