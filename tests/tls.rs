//! The peer hop over TLS: the peer verified against `--peer-ca-file` by the name in
//! `--peer-server-name`; a peer whose certificate the CA did not sign is refused, and the
//! client gets a 503 saying so.

use http::StatusCode;
use integration::pki::Ca;
use integration::*;

/// A TLS mvproxy in front of the old release, serving a certificate signed by `ca`.
async fn tls_peer(ca: &Ca, b: &StandInRunning) -> Proxy {
    let serving = ca.issue(
        "apiserver-b",
        "apiserver-b",
        &["kubernetes.default.svc", "127.0.0.1"],
    );
    let mut args = proxy_args("apiserver-b", &b.url(), &[]);
    args.extend([
        "--tls-cert-file".to_owned(),
        serving.cert.display().to_string(),
        "--tls-key-file".to_owned(),
        serving.key.display().to_string(),
    ]);
    let p = Proxy::serve(&args).await;
    p.ready().await;
    p
}

#[tokio::test]
async fn the_peer_hop_verifies_the_peer_against_the_peer_ca() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let b = standin("apiserver-b", &apis_131()).await;
    let proxy_b = tls_peer(&ca, &b).await;
    let peer_url = format!("https://{}", proxy_b.listen);

    let mut args = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &peer_url)]);
    args.extend([
        "--peer-ca-file".to_owned(),
        ca.cert_file().display().to_string(),
    ]);
    let good = Proxy::serve(&args).await;
    good.ready().await;
    crate::cluster::wait_all_up(&good).await;
    let r = get(&format!("{}{OLD_ONLY}", good.url()), &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.header("x-standin-server"), "apiserver-b");

    // Same peer, but trusting another CA: the handshake fails, the request gets a 503
    // whose message says why, and /debug/discovery shows the TLS error.
    let other = Ca::new("some-other-ca");
    let mut args = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &peer_url)]);
    args.extend([
        "--peer-ca-file".to_owned(),
        other.cert_file().display().to_string(),
    ]);
    let bad = Proxy::serve(&args).await;
    bad.ready().await;
    let r = get(&format!("{}{OLD_ONLY}", bad.url()), &[]).await.unwrap();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("apiserver-b"), "{msg}");
    assert!(
        msg.to_lowercase().contains("certificate"),
        "says it is the certificate: {msg}"
    );
    let debug = get(&format!("{}/debug/discovery", bad.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let peer = debug["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "apiserver-b")
        .unwrap()
        .clone();
    assert_eq!(peer["up"], false);
    assert!(
        peer["error"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("certificate"),
        "{peer}"
    );
}

#[tokio::test]
async fn kubectl_works_against_a_tls_listener() {
    let ca = Ca::new("cluster-ca");
    let a = standin("apiserver-a", &apis_134()).await;
    let serving = ca.issue("proxy", "mvproxy", &["127.0.0.1"]);
    let mut args = proxy_args("apiserver-a", &a.url(), &[]);
    args.extend([
        "--tls-cert-file".to_owned(),
        serving.cert.display().to_string(),
        "--tls-key-file".to_owned(),
        serving.key.display().to_string(),
    ]);
    let p = Proxy::serve(&args).await;
    p.ready().await;
    let k = Kubectl::new(&p.url());
    let (ok, _, err) = k
        .run(&[
            "--token=t0ken",
            "--certificate-authority",
            &ca.cert_file().display().to_string(),
            "get",
            "pods",
            "-A",
        ])
        .await;
    assert!(ok, "{err}");
    let seen = requests_for(&a, "/pods");
    assert_eq!(
        seen[0].headers["authorization"], "Bearer t0ken",
        "the token reaches the API server"
    );
    // without the CA, kubectl refuses the certificate: TLS is real
    let (ok, _, err) = k.run(&["--token=t0ken", "get", "pods", "-A"]).await;
    assert!(!ok);
    assert!(err.contains("certificate"), "{err}");
}
