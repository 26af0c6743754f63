//! TLS done right: only TLS 1.2 and 1.3, a readable answer to plain HTTP, certificates and
//! CAs replaced on disk while mvproxy runs (as kubeadm renews them) taken up by new
//! connections without dropping old ones, and `--insecure-skip-tls-verify` as an explicit,
//! loudly logged choice.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use integration::conn::{H1, assert_status, client_config, req, tls_connect};
use integration::pki::{Ca, Pair, self_signed};
use integration::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tls_args(mut args: Vec<String>, serving: &Pair, extra: &[&str]) -> Vec<String> {
    args.extend([
        "--tls-cert-file".to_owned(),
        serving.cert.display().to_string(),
        "--tls-key-file".to_owned(),
        serving.key.display().to_string(),
        "--tls-reload-interval-seconds".to_owned(),
        "1".to_owned(),
    ]);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// A TLS mvproxy in front of `local`, serving `serving`.
async fn tls_proxy(id: &str, local: &str, serving: &Pair, extra: &[&str]) -> Proxy {
    let p = Proxy::start(&tls_args(proxy_args(id, local, &[]), serving, extra)).await;
    p.ready().await;
    p
}

/// Waits (bounded) until `ok`.
async fn eventually<F, Fut>(what: &str, mut ok: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !ok().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A TLS 1.1 ClientHello: `client_version` 1.1 and no `supported_versions` extension, what a
/// client that cannot speak TLS 1.2 sends. It carries `signature_algorithms` (which rustls
/// requires before it looks at the version; without it the answer is `handshake_failure`,
/// which is what `openssl s_client -tls1_1` gets), so the refusal seen is the version's.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend([7u8; 32]); // random
    body.push(0); // no session id
    // ECDHE-ECDSA- and ECDHE-RSA-AES128-GCM-SHA256 (suites a TLS 1.2 server would pick),
    // AES128-SHA, AES256-SHA
    body.extend([0x00, 0x08, 0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x2f, 0x00, 0x35]);
    body.extend([0x01, 0x00]); // null compression
    // extensions: signature_algorithms = rsa_pkcs1_sha256, ecdsa_secp256r1_sha256,
    // rsa_pss_rsae_sha256
    body.extend([0x00, 0x0c, 0x00, 0x0d, 0x00, 0x08, 0x00, 0x06]);
    body.extend([0x04, 0x01, 0x04, 0x03, 0x08, 0x04]);
    let mut hs = vec![0x01, 0x00, 0x00, body.len() as u8];
    hs.extend(body);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, hs.len() as u8];
    record.extend(hs);
    record
}

#[tokio::test]
async fn only_tls_1_2_and_1_3_are_spoken_and_plain_http_is_told_so() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let serving = ca.issue("proxy", "mvproxy", &["127.0.0.1"]);
    let p = tls_proxy("apiserver-a", &a.url(), &serving, &[]).await;

    // TLS 1.1: a protocol_version alert, then the connection is closed
    let mut s = tokio::net::TcpStream::connect(p.listen).await.unwrap();
    s.write_all(&tls11_client_hello()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut answer))
        .await
        .expect("closed in time")
        .unwrap();
    assert_eq!(answer.first(), Some(&0x15), "an alert record: {answer:?}");
    assert_eq!(
        &answer[5..7],
        &[2, 70],
        "fatal protocol_version: {answer:?}"
    );

    // TLS 1.2 and 1.3 both work
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                mvproxy_core::tls::load_certs(&ca.cert_file())
                    .unwrap()
                    .remove(0),
            )
            .unwrap();
        let config = rustls::ClientConfig::builder_with_protocol_versions(&[version])
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (tls, _) = tls_connect(p.listen, Arc::new(config), "127.0.0.1")
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.protocol_version(), Some(version.version));
    }

    // plain HTTP on the TLS listener: a 400 Status saying what happened, as kube-apiserver
    let mut c = H1::plain(p.listen).await;
    let r = c
        .send(req(Method::GET, CONFIGMAPS, &[], Bytes::new()))
        .await
        .unwrap();
    let msg = assert_status(&r, StatusCode::BAD_REQUEST, "BadRequest");
    assert!(msg.contains("HTTP request to an HTTPS server"), "{msg}");
    assert!(c.closed().await);
    assert!(
        requests_for(&a, "configmaps").is_empty(),
        "nothing got through"
    );
}

#[tokio::test]
async fn a_renewed_serving_certificate_is_used_by_new_connections_and_old_ones_go_on() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let serving = ca.issue("proxy", "mvproxy", &["127.0.0.1"]);
    let p = tls_proxy("apiserver-a", &a.url(), &serving, &[]).await;
    let config = client_config(&ca.cert_file(), &["http/1.1"]);

    // before: a keep-alive connection and a watch, each on its own connection
    let mut keep = H1::tls(p.listen, config.clone(), "127.0.0.1").await;
    let r = keep
        .send(req(Method::GET, CONFIGMAPS, &[], Bytes::new()))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let old_der = keep.peer_certs[0].clone();
    let mut watcher = H1::tls(p.listen, config.clone(), "127.0.0.1").await;
    let watch = watcher
        .open(req(
            Method::GET,
            &format!("{CONFIGMAPS}?watch=true"),
            &[],
            Bytes::new(),
        ))
        .await;
    assert_eq!(watch.status(), StatusCode::OK);
    let mut events = watch.into_body();

    // kubeadm renews the certificate in place: same files, a new serial and name
    let renewed = ca.issue("proxy", "mvproxy-renewed", &["127.0.0.1"]);
    assert_eq!(renewed.cert, serving.cert);
    let new_der = mvproxy_core::tls::load_certs(&renewed.cert)
        .unwrap()
        .remove(0);
    assert_ne!(new_der, old_der);
    eventually("a new connection gets the renewed certificate", || {
        let config = config.clone();
        let new_der = new_der.clone();
        async move {
            let (_, certs) = tls_connect(p.listen, config, "127.0.0.1").await.unwrap();
            certs[0] == new_der
        }
    })
    .await;
    assert!(p.log().iter().any(|l| l.contains("reloaded")));

    // the connections opened before are still up: the keep-alive one answers, the watch
    // delivers
    let r = keep
        .send(req(Method::GET, CONFIGMAPS, &[], Bytes::new()))
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    a.insert(
        "",
        "v1",
        "configmaps",
        Some("default"),
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}}),
    );
    let event = crate::limits::next_event(&mut events).await;
    assert_eq!(event["object"]["metadata"]["name"], "after", "{event}");

    // a broken file is refused with a warning naming it; the renewed certificate stays
    std::fs::write(&serving.cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    let cert_name = serving.cert.display().to_string();
    eventually("a warning naming the broken file", || {
        let log = p.log();
        let cert_name = cert_name.clone();
        async move {
            log.iter()
                .any(|l| l.contains("keeping the previous") && l.contains(&cert_name))
        }
    })
    .await;
    let (_, certs) = tls_connect(p.listen, config.clone(), "127.0.0.1")
        .await
        .unwrap();
    assert_eq!(certs[0], new_der);
}

#[tokio::test]
async fn a_peer_ca_file_fixed_while_running_lets_the_peer_in_without_a_restart() {
    let ca = Ca::new("cluster-ca");
    let wrong = Ca::new("some-other-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let serving_b = ca.issue("apiserver-b", "apiserver-b", &["kubernetes.default.svc"]);
    let proxy_b = tls_proxy("apiserver-b", &b.url(), &serving_b, &[]).await;

    // the CA file starts out wrong
    let dir = tempdir::TempDir::new("peer-ca");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, wrong.pem()).unwrap();
    let mut args = proxy_args(
        "apiserver-a",
        &a.url(),
        &[("apiserver-b", &format!("https://{}", proxy_b.listen))],
    );
    args.extend(
        [
            "--peer-ca-file",
            &ca_file.display().to_string(),
            "--tls-reload-interval-seconds",
            "1",
        ]
        .map(String::from),
    );
    let p = Proxy::start(&args).await;
    p.ready().await;
    let url = format!("{}{OLD_ONLY}", p.url());
    let r = get(&url, &[]).await.unwrap();
    let msg = assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");

    // the operator puts the right CA in the file: no restart, the peer comes in
    std::fs::write(&ca_file, ca.pem()).unwrap();
    eventually("the peer is reached with the new CA", || {
        let url = url.clone();
        async move { get(&url, &[]).await.unwrap().status == StatusCode::OK }
    })
    .await;
    let r = get(&url, &[]).await.unwrap();
    assert_eq!(r.header("x-standin-server"), "apiserver-b");
}

#[tokio::test]
async fn a_peer_with_an_expired_certificate_gets_a_503_saying_so() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let expired = ca.issue_expired("apiserver-b", "apiserver-b", &["kubernetes.default.svc"]);
    let proxy_b = tls_proxy("apiserver-b", &b.url(), &expired, &[]).await;
    let mut args = proxy_args(
        "apiserver-a",
        &a.url(),
        &[("apiserver-b", &format!("https://{}", proxy_b.listen))],
    );
    args.extend([
        "--peer-ca-file".to_owned(),
        ca.cert_file().display().to_string(),
    ]);
    let p = Proxy::start(&args).await;
    p.ready().await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    let msg = assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(
        msg.contains("apiserver-b") && msg.contains("certificate expired"),
        "{msg}"
    );
}

#[tokio::test]
async fn insecure_skip_tls_verify_reaches_a_self_signed_peer_and_warns() {
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let dir = tempdir::TempDir::new("self-signed");
    let own = self_signed(dir.path(), "apiserver-b", &["somewhere.else"]);
    let proxy_b = tls_proxy("apiserver-b", &b.url(), &own, &[]).await;
    let mut args = proxy_args(
        "apiserver-a",
        &a.url(),
        &[("apiserver-b", &format!("https://{}", proxy_b.listen))],
    );
    args.push("--insecure-skip-tls-verify".to_owned());
    let p = Proxy::start(&args).await;
    p.ready().await;
    crate::cluster::wait_all_up(&p).await;
    assert!(
        p.log()
            .iter()
            .any(|l| l.contains("WARN") && l.contains("NOT verified")),
        "a warning at start: {:?}",
        p.log()
    );
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.header("x-standin-server"), "apiserver-b");

    // the peer goes away: every failure to reach it repeats that nothing is verified
    proxy_b.kill().await;
    let r = get(&format!("{}{OLD_ONLY}", p.url()), &[]).await.unwrap();
    assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(
        p.log().iter().any(|l| l.contains("WARN")
            && l.contains("connection failed while TLS verification is off")
            && l.contains("apiserver-b")),
        "{:?}",
        p.log()
    );
}

#[tokio::test]
async fn over_the_connection_limit_a_tls_client_gets_a_503_after_the_handshake() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let serving = ca.issue("proxy", "mvproxy", &["127.0.0.1"]);
    let p = tls_proxy(
        "apiserver-a",
        &a.url(),
        &serving,
        &["--max-connections", "1"],
    )
    .await;
    let config = client_config(&ca.cert_file(), &["http/1.1"]);
    let list = || req(Method::GET, CONFIGMAPS, &[], Bytes::new());
    let mut held = H1::tls(p.listen, config.clone(), "127.0.0.1").await;
    assert_eq!(held.send(list()).await.unwrap().status, StatusCode::OK);
    let mut over = H1::tls(p.listen, config.clone(), "127.0.0.1").await;
    let r = over.send(list()).await.unwrap();
    assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(over.closed().await);
    assert_eq!(held.send(list()).await.unwrap().status, StatusCode::OK);
}

#[tokio::test]
async fn kubectl_over_http2_keeps_to_the_announced_header_limit() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let serving = ca.issue("proxy", "mvproxy", &["127.0.0.1"]);
    let p = tls_proxy(
        "apiserver-a",
        &a.url(),
        &serving,
        &["--max-request-header-bytes", "16384"],
    )
    .await;
    let k = Kubectl::new(&p.url());
    let ca_flag = format!("--certificate-authority={}", ca.cert_file().display());
    let token = |n: usize| format!("--token={}", "t".repeat(n));
    let (ok, _, err) = k
        .run(&[&ca_flag, &token(12_000), "get", "--raw", "/version"])
        .await;
    assert!(ok, "under the limit: {err}");
    // Go's HTTP/2 client reads SETTINGS_MAX_HEADER_LIST_SIZE and refuses to send more
    let (ok, _, err) = k
        .run(&[&ca_flag, &token(20_000), "get", "--raw", "/version"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("request header list larger than peer's advertised limit"),
        "{err}"
    );
}
