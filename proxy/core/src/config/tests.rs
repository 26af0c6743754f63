//! Each invalid value is refused with the field it concerns; a valid file and flags combine.

use super::*;

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
    assert_eq!(c.listen.to_string(), "127.0.0.1:6443");
    assert_eq!(c.admin_listen.to_string(), "127.0.0.1:9090");
    assert_eq!(c.server_id.as_str(), "local");
    assert_eq!(c.peers.len(), 1);
    assert_eq!(c.peers[0].name.as_str(), "b");
    assert_eq!(c.refresh_interval, Duration::from_secs(30));
    assert_eq!(c.peer_server_name, "kubernetes.default.svc");
    assert_eq!(c.tls_reload_interval, Duration::from_secs(10));
    assert!(!c.insecure_skip_tls_verify);
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
    assert!(c.insecure_skip_tls_verify);
    assert!(c.peer_ca_file.is_none() && c.local_ca_file.is_none());
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
    assert_eq!(c.tls_reload_interval, Duration::from_secs(1));
}

#[test]
fn invalid_values_name_their_field() {
    let cases: Vec<(ServeArgs, &str)> = vec![
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
    ];
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
    assert_eq!(c.listen.to_string(), "127.0.0.1:7444", "the flag wins");
    assert_eq!(c.server_id.as_str(), "apiserver-a");
    assert_eq!(c.peers[0].name.as_str(), "apiserver-b");
    assert_eq!(c.limits.max_connections, 100);
    assert_eq!(c.max_tracked_clients, 7);
    assert_eq!(c.limits.max_request_body_bytes, 1000);
    assert!(c.insecure_skip_tls_verify);

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
    assert_eq!(c.admin_listen.to_string(), "0.0.0.0:9191");
}
