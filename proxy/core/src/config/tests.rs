//! Each invalid value is refused with the field it concerns; a valid file and flags combine.

use super::*;
use crate::config::args::{IdentityMode, PeerScheme, PeerSource};

fn args(local: &str, peers: &[&str]) -> ServeArgs {
    ServeArgs {
        local: Some(local.to_owned()),
        peers: peers.iter().map(|p| (*p).to_owned()).collect(),
        ..ServeArgs::default()
    }
}

fn field_of(a: ServeArgs) -> String {
    match a.load() {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => {
            assert!(e.to_string().starts_with("invalid configuration: "), "{e}");
            e.field
        }
    }
}

#[test]
fn defaults_for_a_minimal_config() {
    let c = args("http://127.0.0.1:8080", &["b=http://127.0.0.1:8081"])
        .load()
        .unwrap();
    assert_eq!(c.listeners.proxy.to_string(), "127.0.0.1:6443");
    assert_eq!(c.listeners.admin.to_string(), "127.0.0.1:9090");
    assert_eq!(c.server_id.as_str(), "local");
    assert_eq!(c.static_peers().len(), 1);
    assert_eq!(c.static_peers()[0].name.as_str(), "b");
    assert_eq!(
        c.timing,
        Timing {
            refresh_interval: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
            response_header_timeout: Duration::from_secs(60),
            tls_reload_interval: Duration::from_secs(10),
        }
    );
    assert_eq!(c.upstream_tls.peer_server_name, "kubernetes.default.svc");
    assert_eq!(
        c.upstream_tls.verify,
        Verify::Cas {
            local: None,
            peers: None
        }
    );
    assert_eq!(c.admin, AdminSecurity::PlainHttp);
    assert!(c.proxy_tls.is_none());
    assert_eq!(c.header_names, HeaderNames::default());
    assert_eq!(c.max_tracked_clients, 100);
    assert_eq!(
        c.limits,
        Limits {
            max_request_header_bytes: 1 << 20,
            max_request_body_bytes: 3 << 20,
            max_discovery_document_bytes: 16 << 20,
            max_connections: 4096,
        }
    );
}

#[test]
fn insecure_skip_tls_verify_replaces_the_ca_files() {
    let c = ServeArgs {
        insecure_skip_tls_verify: Some(true),
        ..args("https://127.0.0.1:8080", &["b=https://127.0.0.1:8081"])
    }
    .load()
    .unwrap();
    assert_eq!(c.upstream_tls.verify, Verify::InsecureSkip);
}

#[test]
fn limits_are_read_within_their_bounds() {
    let c = ServeArgs {
        max_request_header_bytes: Some(8192),
        max_request_body_bytes: Some(1),
        max_discovery_document_bytes: Some(1024),
        max_connections: Some(1),
        tls_reload_interval_seconds: Some(1),
        ..args("http://h:1", &[])
    }
    .load()
    .unwrap();
    assert_eq!(
        c.limits,
        Limits {
            max_request_header_bytes: 8192,
            max_request_body_bytes: 1,
            max_discovery_document_bytes: 1024,
            max_connections: 1,
        }
    );
    assert_eq!(c.timing.tls_reload_interval, Duration::from_secs(1));
}

/// A bad value for the local API server or the static peers is refused with an error naming its flag.
#[test]
fn invalid_upstreams_and_peers_name_their_field() {
    each_names_its_field(vec![
        (ServeArgs::default(), "local"),
        (args("ftp://127.0.0.1:1", &[]), "local"),
        (args("127.0.0.1:8080", &[]), "local"),
        (args("http://127.0.0.1:8080/prefix", &[]), "local"),
        (args("http://127.0.0.1:8080", &["b"]), "peer"),
        (args("http://127.0.0.1:8080", &["b=gopher://x:1"]), "peer"),
        (
            args("http://127.0.0.1:8080", &["b=http://h:1", "b=http://h:2"]),
            "peer",
        ),
        (
            args("http://127.0.0.1:8080", &["b=http://127.0.0.1:8080"]),
            "peer",
        ),
        (
            args("http://127.0.0.1:8080", &["local=http://127.0.0.1:1"]),
            "peer",
        ),
        (
            args("http://127.0.0.1:8080", &["bad name=http://127.0.0.1:1"]),
            "peer",
        ),
        (
            args("http://127.0.0.1:8080", &["b=https://127.0.0.1:1"]),
            "peer-ca-file",
        ),
        (args("https://127.0.0.1:8080", &[]), "local-ca-file"),
    ]);
}

/// A bad value for the listeners, TLS files, front-proxy headers, peer sources or timing is refused with an error naming its flag.
#[test]
fn invalid_listeners_tls_and_sources_name_their_field() {
    each_names_its_field(vec![
        (
            ServeArgs {
                listen: Some("nope".into()),
                ..args("http://h:1", &[])
            },
            "listen",
        ),
        (
            ServeArgs {
                listen: Some("127.0.0.1:7000".into()),
                admin_listen: Some("127.0.0.1:7000".into()),
                ..args("http://h:1", &[])
            },
            "admin-listen",
        ),
        (
            ServeArgs {
                tls_cert_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "tls-key-file",
        ),
        (
            ServeArgs {
                tls_cert_file: Some("/nonexistent.crt".into()),
                tls_key_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "tls-cert-file",
        ),
        (
            ServeArgs {
                proxy_client_cert_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "proxy-client-key-file",
        ),
        (
            ServeArgs {
                peer_ca_file: Some("/nonexistent/ca.crt".into()),
                ..args("http://h:1", &[])
            },
            "peer-ca-file",
        ),
        (
            ServeArgs {
                refresh_interval_seconds: Some(0),
                ..args("http://h:1", &[])
            },
            "refresh-interval-seconds",
        ),
        (
            ServeArgs {
                identity: Some(IdentityMode::FrontProxy),
                ..args("http://h:1", &[])
            },
            "client-ca-file",
        ),
        (
            ServeArgs {
                identity: Some(IdentityMode::FrontProxy),
                client_ca_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "proxy-client-cert-file",
        ),
        (
            ServeArgs {
                client_ca_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "client-ca-file",
        ),
        (
            ServeArgs {
                requestheader_client_ca_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "tls-cert-file",
        ),
        (
            ServeArgs {
                requestheader_allowed_names: vec!["front-proxy-client".into()],
                ..args("http://h:1", &[])
            },
            "requestheader-allowed-names",
        ),
        (
            ServeArgs {
                requestheader_username_headers: Some("bad header".into()),
                ..args("http://h:1", &[])
            },
            "requestheader-username-headers",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                ..args("http://h:1", &["b=http://h:2"])
            },
            "peer",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                ..args("http://h:1", &[])
            },
            "peer-ca-file",
        ),
        (
            ServeArgs {
                kubeconfig: Some("/etc/hostname".into()),
                ..args("http://h:1", &[])
            },
            "kubeconfig",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                peer_scheme: Some(PeerScheme::Http),
                kubeconfig: Some("/nonexistent/kubeconfig".into()),
                ..args("http://h:1", &[])
            },
            "kubeconfig",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Endpointslices),
                peer_scheme: Some(PeerScheme::Http),
                peer_source_token_file: Some("/nonexistent/token".into()),
                ..args("http://h:1", &[])
            },
            "peer-source-token-file",
        ),
        (
            ServeArgs {
                server_id: Some(String::new()),
                ..args("http://h:1", &[])
            },
            "server-id",
        ),
        (
            ServeArgs {
                peer_server_name: Some("not a name!".into()),
                ..args("http://h:1", &[])
            },
            "peer-server-name",
        ),
        (
            ServeArgs {
                tls_reload_interval_seconds: Some(0),
                ..args("http://h:1", &[])
            },
            "tls-reload-interval-seconds",
        ),
        (
            ServeArgs {
                insecure_skip_tls_verify: Some(true),
                peer_ca_file: Some("/etc/hostname".into()),
                ..args("http://h:1", &["b=https://127.0.0.1:2"])
            },
            "insecure-skip-tls-verify",
        ),
        (
            ServeArgs {
                insecure_skip_tls_verify: Some(true),
                local_ca_file: Some("/etc/hostname".into()),
                ..args("https://h:1", &[])
            },
            "insecure-skip-tls-verify",
        ),
        (
            ServeArgs {
                insecure_skip_tls_verify: Some(false),
                ..args("http://127.0.0.1:8080", &["b=https://127.0.0.1:1"])
            },
            "peer-ca-file",
        ),
    ]);
}

/// A bad value for a limit is refused with an error naming its flag.
#[test]
fn invalid_limits_name_their_field() {
    each_names_its_field(vec![
        (
            ServeArgs {
                max_request_header_bytes: Some(8191),
                ..args("http://h:1", &[])
            },
            "max-request-header-bytes",
        ),
        (
            ServeArgs {
                max_request_header_bytes: Some((64 << 20) + 1),
                ..args("http://h:1", &[])
            },
            "max-request-header-bytes",
        ),
        (
            ServeArgs {
                max_request_body_bytes: Some(0),
                ..args("http://h:1", &[])
            },
            "max-request-body-bytes",
        ),
        (
            ServeArgs {
                max_discovery_document_bytes: Some(1023),
                ..args("http://h:1", &[])
            },
            "max-discovery-document-bytes",
        ),
        (
            ServeArgs {
                max_connections: Some(0),
                ..args("http://h:1", &[])
            },
            "max-connections",
        ),
        (
            ServeArgs {
                max_connections: Some((1 << 20) + 1),
                ..args("http://h:1", &[])
            },
            "max-connections",
        ),
        (
            ServeArgs {
                max_tracked_clients: Some(0),
                ..args("http://h:1", &[])
            },
            "max-tracked-clients",
        ),
        (
            ServeArgs {
                max_tracked_clients: Some(10_001),
                ..args("http://h:1", &[])
            },
            "max-tracked-clients",
        ),
    ]);
}

/// Each configuration is refused, and the error names `want`.
fn each_names_its_field(cases: Vec<(ServeArgs, &str)>) {
    for (a, want) in cases {
        let shown = format!("{a:?}");
        assert_eq!(field_of(a), want, "{shown}");
    }
}

#[test]
fn yaml_file_is_read_and_flags_win() {
    let dir = std::env::temp_dir().join(format!("mvproxy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mvproxy.yaml");
    std::fs::write(
        &file,
        "local: http://127.0.0.1:8080\nserver-id: apiserver-a\npeers:\n  - apiserver-b=http://127.0.0.1:8081\nlisten: 127.0.0.1:7443\nmax-connections: 100\nmax-tracked-clients: 7\nmax-request-body-bytes: 1000\ninsecure-skip-tls-verify: true\n",
    )
    .unwrap();
    let c = ServeArgs {
        config: Some(file.clone()),
        listen: Some("127.0.0.1:7444".into()),
        ..ServeArgs::default()
    }
    .load()
    .unwrap();
    assert_eq!(
        c.listeners.proxy.to_string(),
        "127.0.0.1:7444",
        "the flag wins"
    );
    assert_eq!(c.server_id.as_str(), "apiserver-a");
    assert_eq!(c.static_peers()[0].name.as_str(), "apiserver-b");
    assert_eq!(c.limits.max_connections, 100);
    assert_eq!(c.max_tracked_clients, 7);
    assert_eq!(c.limits.max_request_body_bytes, 1000);
    assert_eq!(c.upstream_tls.verify, Verify::InsecureSkip);

    std::fs::write(&file, "local: http://127.0.0.1:8080\nlisten-addr: 1\n").unwrap();
    let e = ServeArgs {
        config: Some(file.clone()),
        ..ServeArgs::default()
    }
    .load()
    .unwrap_err();
    assert_eq!(e.field, "config");
    assert!(
        e.why.contains("listen-addr"),
        "the unknown key is named: {e}"
    );

    let e = ServeArgs {
        config: Some(dir.join("missing.yaml")),
        ..ServeArgs::default()
    }
    .load()
    .unwrap_err();
    assert_eq!(e.field, "config");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plain_http_admin_off_loopback_only_when_asked_for() {
    let mut a = args("http://127.0.0.1:8080", &[]);
    a.admin_listen = Some("0.0.0.0:9191".to_owned());
    assert_eq!(field_of(a.clone()), "admin-listen");
    a.admin_insecure_plain_http = Some(true);
    let c = a.load().unwrap();
    assert_eq!(c.listeners.admin.to_string(), "0.0.0.0:9191");
}

/// Flags for a proxy in front of a plain-HTTP local server.
fn plain() -> ServeArgs {
    args("http://127.0.0.1:8080", &[])
}

fn path(p: &str) -> Option<PathBuf> {
    Some(PathBuf::from(p))
}

fn pair(cert: &str, key: &str) -> CertKey {
    CertKey {
        cert: cert.into(),
        key: key.into(),
    }
}

#[test]
fn peers_take_the_shape_of_their_source() {
    let cluster = |kind, reader, scheme| {
        Peers::Cluster(ClusterPeers {
            kind,
            reader,
            scheme,
        })
    };
    let cases: Vec<(&str, ServeArgs, Peers)> = vec![
        (
            "static by default",
            args("http://h:1", &["b=http://h:2"]),
            Peers::Static(vec![PeerConfig {
                name: "b".into(),
                url: "http://h:2".parse().unwrap(),
            }]),
        ),
        (
            "leases from the local server with the in-cluster token",
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                peer_ca_file: path("/ca.crt"),
                ..plain()
            },
            cluster(
                Kind::Leases,
                PeerReader::LocalServer(TokenFile::InCluster),
                PeerScheme::Https,
            ),
        ),
        (
            "endpointslices with a given token, over http",
            ServeArgs {
                peer_source: Some(PeerSource::Endpointslices),
                peer_scheme: Some(PeerScheme::Http),
                peer_source_token_file: path("/token"),
                ..plain()
            },
            cluster(
                Kind::EndpointSlices,
                PeerReader::LocalServer(TokenFile::Given("/token".into())),
                PeerScheme::Http,
            ),
        ),
        (
            "through a kubeconfig",
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                peer_scheme: Some(PeerScheme::Http),
                kubeconfig: path("/kubeconfig"),
                ..plain()
            },
            cluster(
                Kind::Leases,
                PeerReader::Kubeconfig("/kubeconfig".into()),
                PeerScheme::Http,
            ),
        ),
        (
            "https cluster peers unverified",
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                insecure_skip_tls_verify: Some(true),
                ..plain()
            },
            cluster(
                Kind::Leases,
                PeerReader::LocalServer(TokenFile::InCluster),
                PeerScheme::Https,
            ),
        ),
    ];
    for (case, a, want) in cases {
        let got = a.validate().unwrap_or_else(|e| panic!("{case}: {e}")).peers;
        match (&got, &want) {
            (Peers::Static(g), Peers::Static(w)) => assert_eq!(g, w, "{case}"),
            (Peers::Cluster(g), Peers::Cluster(w)) => assert_eq!(g, w, "{case}"),
            _ => panic!("{case}: {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn tls_settings_take_their_shape() {
    let c = ServeArgs {
        tls_cert_file: path("/s.crt"),
        tls_key_file: path("/s.key"),
        identity: Some(IdentityMode::FrontProxy),
        client_ca_file: path("/users-ca.crt"),
        requestheader_client_ca_file: path("/front-proxy-ca.crt"),
        requestheader_allowed_names: vec!["front-proxy-client".into()],
        proxy_client_cert_file: path("/pc.crt"),
        proxy_client_key_file: path("/pc.key"),
        local_ca_file: path("/local-ca.crt"),
        peer_ca_file: path("/peer-ca.crt"),
        admin_tls_cert_file: path("/a.crt"),
        admin_tls_key_file: path("/a.key"),
        admin_listen: Some("0.0.0.0:9090".into()),
        ..args("https://127.0.0.1:8080", &["b=https://h:2"])
    }
    .validate()
    .unwrap();
    let proxy_tls = c.proxy_tls.clone().unwrap();
    assert_eq!(
        proxy_tls,
        ProxyTls {
            serving: pair("/s.crt", "/s.key"),
            identity: Identity::FrontProxy {
                users_ca: "/users-ca.crt".into()
            },
            requestheader: Some(RequestHeaderTrust {
                ca: "/front-proxy-ca.crt".into(),
                allowed_names: vec!["front-proxy-client".into()],
            }),
        }
    );
    assert_eq!(
        proxy_tls.client_cas(),
        [Path::new("/users-ca.crt"), Path::new("/front-proxy-ca.crt")]
    );
    assert_eq!(c.upstream_tls.client_cert, Some(pair("/pc.crt", "/pc.key")));
    assert_eq!(
        c.upstream_tls.verify.local_ca(),
        Some(Path::new("/local-ca.crt"))
    );
    assert_eq!(
        c.upstream_tls.verify.peer_ca(),
        Some(Path::new("/peer-ca.crt"))
    );
    assert_eq!(
        c.admin,
        AdminSecurity::Tls(AdminTls {
            serving: pair("/a.crt", "/a.key"),
            client_ca: None,
            always_allow: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
            token: TokenFile::InCluster,
            cache_ttl: Duration::from_secs(10),
        })
    );

    // the local server is verified with the peers' CA when it has none of its own
    let c = ServeArgs {
        peer_ca_file: path("/peer-ca.crt"),
        ..args("https://127.0.0.1:8080", &[])
    }
    .validate()
    .unwrap();
    assert_eq!(
        c.upstream_tls.verify.local_ca(),
        Some(Path::new("/peer-ca.crt"))
    );

    // "" allows nothing without review
    let c = ServeArgs {
        admin_tls_cert_file: path("/a.crt"),
        admin_tls_key_file: path("/a.key"),
        admin_always_allow_paths: Some(String::new()),
        admin_auth_token_file: path("/t"),
        ..plain()
    }
    .validate()
    .unwrap();
    let AdminSecurity::Tls(admin) = c.admin else {
        panic!("plain admin")
    };
    assert!(admin.always_allow.is_empty());
    assert_eq!(admin.token, TokenFile::Given("/t".into()));
}

#[test]
fn validation_reads_no_file_and_the_file_step_names_each() {
    let missing = "/nonexistent/mvproxy-test";
    let cases: Vec<(ServeArgs, &str)> = vec![
        (
            ServeArgs {
                admin_tls_cert_file: path(missing),
                admin_tls_key_file: path("/etc/hostname"),
                ..plain()
            },
            "admin-tls-cert-file",
        ),
        (
            ServeArgs {
                admin_tls_cert_file: path("/etc/hostname"),
                admin_tls_key_file: path("/etc/hostname"),
                admin_client_ca_file: path(missing),
                ..plain()
            },
            "admin-client-ca-file",
        ),
        (
            ServeArgs {
                admin_tls_cert_file: path("/etc/hostname"),
                admin_tls_key_file: path("/etc/hostname"),
                admin_auth_token_file: path(missing),
                ..plain()
            },
            "admin-auth-token-file",
        ),
        (
            ServeArgs {
                tls_cert_file: path("/etc/hostname"),
                tls_key_file: path(missing),
                ..plain()
            },
            "tls-key-file",
        ),
        (
            ServeArgs {
                proxy_client_cert_file: path("/etc/hostname"),
                proxy_client_key_file: path(missing),
                ..plain()
            },
            "proxy-client-key-file",
        ),
        (
            ServeArgs {
                local_ca_file: path(missing),
                ..plain()
            },
            "local-ca-file",
        ),
        (
            ServeArgs {
                tls_cert_file: path("/etc/hostname"),
                tls_key_file: path("/etc/hostname"),
                requestheader_client_ca_file: path(missing),
                ..plain()
            },
            "requestheader-client-ca-file",
        ),
        (
            ServeArgs {
                tls_cert_file: path("/etc/hostname"),
                tls_key_file: path("/etc/hostname"),
                identity: Some(IdentityMode::FrontProxy),
                client_ca_file: path(missing),
                proxy_client_cert_file: path("/etc/hostname"),
                proxy_client_key_file: path("/etc/hostname"),
                ..plain()
            },
            "client-ca-file",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                peer_scheme: Some(PeerScheme::Http),
                peer_source_token_file: path(missing),
                ..plain()
            },
            "peer-source-token-file",
        ),
        (
            ServeArgs {
                peer_source: Some(PeerSource::Leases),
                peer_scheme: Some(PeerScheme::Http),
                kubeconfig: path("/etc/hostname"),
                ..plain()
            },
            "kubeconfig",
        ),
    ];
    for (a, want) in cases {
        let shown = format!("{a:?}");
        let config = a.validate().unwrap_or_else(|e| panic!("{shown}: {e}"));
        let e = config.check_files().expect_err(&shown);
        assert_eq!(e.field, want, "{shown}");
    }
}

#[test]
fn every_default_is_shown_in_the_help() {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }
    let help = Serve::command().render_help().to_string();
    for shown in [
        format!("[default: {}]", defaults::LISTEN),
        format!("[default: {}]", defaults::REFRESH_INTERVAL.as_secs()),
        format!("[default: {}]", defaults::MAX_REQUEST_BODY_BYTES),
        format!("[default: {}]", defaults::ADMIN_ALWAYS_ALLOW_PATHS),
    ] {
        assert!(help.contains(&shown), "{shown} in {help}");
    }
}
