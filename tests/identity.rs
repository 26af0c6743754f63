//! Identity across the proxies, with certificates as kubeadm makes them: a user's client
//! certificate becomes front-proxy headers that the API server (and, across the peer hop,
//! the peer's mvproxy) receives; a spoofed identity never reaches an API server.

use http::StatusCode;
use integration::pki::Ca;
use integration::*;

struct Setup {
    cluster_ca: Ca,
    /// Holds the front-proxy certificates' files.
    _front_proxy_ca: Ca,
    alice: integration::pki::Pair,
    /// A client certificate naming a ServiceAccount.
    deployer: integration::pki::Pair,
    intruder: integration::pki::Pair,
    a: StandInRunning,
    b: StandInRunning,
    proxy_a: Proxy,
    proxy_b: Proxy,
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// kubeadm's layout: a cluster CA (serving and user certificates) and a front-proxy CA
/// (the front-proxy-client certificate both proxies present).
async fn setup() -> Setup {
    let cluster_ca = Ca::new("kubernetes");
    let front_proxy_ca = Ca::new("front-proxy-ca");
    let serving = cluster_ca.issue(
        "apiserver",
        "kube-apiserver",
        &["kubernetes.default.svc", "127.0.0.1"],
    );
    let client = front_proxy_ca.issue("front-proxy-client", "front-proxy-client", &[]);
    let alice = cluster_ca.issue_client("alice", "alice", &["devs"]);
    let deployer = cluster_ca.issue_client(
        "deployer",
        "system:serviceaccount:ci:deployer",
        &["system:serviceaccounts"],
    );
    let intruder = front_proxy_ca.issue_client("intruder", "intruder", &[]);
    let a = standin_release("apiserver-a", &apis_134(), "v1.34.0").await;
    let b = standin_release("apiserver-b", &apis_131(), "v1.31.0").await;

    let common = |args: &mut Vec<String>| {
        args.extend([
            "--tls-cert-file".into(),
            path(&serving.cert),
            "--tls-key-file".into(),
            path(&serving.key),
            "--proxy-client-cert-file".into(),
            path(&client.cert),
            "--proxy-client-key-file".into(),
            path(&client.key),
            "--requestheader-client-ca-file".into(),
            path(&front_proxy_ca.cert_file()),
            "--requestheader-allowed-names".into(),
            "front-proxy-client".into(),
            "--peer-ca-file".into(),
            path(&cluster_ca.cert_file()),
            "--identity".into(),
            "front-proxy".into(),
            "--client-ca-file".into(),
            path(&cluster_ca.cert_file()),
        ]);
    };
    let mut args_b = proxy_args("apiserver-b", &b.url(), &[]);
    common(&mut args_b);
    let proxy_b = Proxy::serve(&args_b).await;
    proxy_b.ready().await;
    let mut args_a = proxy_args(
        "apiserver-a",
        &a.url(),
        &[("apiserver-b", &format!("https://{}", proxy_b.listen))],
    );
    common(&mut args_a);
    let proxy_a = Proxy::serve(&args_a).await;
    proxy_a.ready().await;
    crate::cluster::wait_all_up(&proxy_a).await;
    Setup {
        cluster_ca,
        _front_proxy_ca: front_proxy_ca,
        alice,
        deployer,
        intruder,
        a,
        b,
        proxy_a,
        proxy_b,
    }
}

fn identity_headers(r: &RecordedRequest) -> (Vec<String>, Vec<String>) {
    let all = |name: &str| {
        r.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    };
    (all("x-remote-user"), all("x-remote-group"))
}

#[tokio::test]
async fn a_client_certificate_reaches_both_api_servers_as_the_same_user() {
    let s = setup().await;
    let ca = s.cluster_ca.cert_file();
    let spoof = [
        ("x-remote-user", "system:admin"),
        ("x-remote-group", "system:masters"),
    ];
    for p in [PODS, OLD_ONLY] {
        let r = https_get(s.proxy_a.listen, p, &ca, Some(&s.alice), &spoof)
            .await
            .unwrap();
        assert_eq!(r.status, StatusCode::OK, "{p}: {}", r.text());
    }
    // local: mvproxy A asserts alice to its API server
    let local = requests_for(&s.a, "/pods");
    assert_eq!(
        identity_headers(&local[0]),
        (vec!["alice".into()], vec!["devs".into()])
    );
    // peer hop: B trusts A's front-proxy-client certificate and passes alice on, unchanged
    let peer = requests_for(&s.b, "podschedulingcontexts");
    assert_eq!(
        identity_headers(&peer[0]),
        (vec!["alice".into()], vec!["devs".into()])
    );

    // the real kubectl with a client certificate, as with admin.conf
    let (ok, _, err) = Kubectl::new(&s.proxy_a.url())
        .run(&[
            &format!("--certificate-authority={}", path(&ca)),
            &format!("--client-certificate={}", path(&s.alice.cert)),
            &format!("--client-key={}", path(&s.alice.key)),
            "get",
            "podschedulingcontexts.v1alpha3.resource.k8s.io",
            "-n",
            "default",
        ])
        .await;
    assert!(ok, "{err}");
    let last = requests_for(&s.b, "podschedulingcontexts").pop().unwrap();
    assert_eq!(identity_headers(&last).0, ["alice"]);
}

#[tokio::test]
async fn a_spoofed_identity_never_reaches_an_api_server() {
    let s = setup().await;
    let ca = s.cluster_ca.cert_file();
    let spoof = [
        ("x-remote-user", "system:admin"),
        ("x-remote-group", "system:masters"),
        ("authorization", "Bearer sa-token"),
    ];
    // no client certificate: the token passes for the API server to check, the headers do not
    let r = https_get(s.proxy_a.listen, OLD_ONLY, &ca, None, &spoof)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let at_b = requests_for(&s.b, "podschedulingcontexts").pop().unwrap();
    assert_eq!(identity_headers(&at_b), (vec![], vec![]));
    assert_eq!(at_b.headers["authorization"], "Bearer sa-token");

    // straight to B with a front-proxy-CA certificate whose CN is not allowed: stripped
    let r = https_get(s.proxy_b.listen, PODS, &ca, Some(&s.intruder), &spoof)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let at_b = requests_for(&s.b, "/pods").pop().unwrap();
    assert_eq!(identity_headers(&at_b), (vec![], vec![]));
    // and as a user certificate signed by the wrong CA it proves nothing either
    let r = https_get(s.proxy_a.listen, PODS, &ca, Some(&s.intruder), &spoof)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let at_a = requests_for(&s.a, "/pods").pop().unwrap();
    assert_eq!(identity_headers(&at_a), (vec![], vec![]));
}

/// The client of `mvproxy_skew_requests_total` takes its ServiceAccount from the front-proxy
/// identity a verified certificate proves, never from headers a client sets itself.
#[tokio::test]
async fn a_certificate_s_service_account_names_the_client_a_spoofed_one_does_not() {
    let s = setup().await;
    let ca = s.cluster_ca.cert_file();
    let ua = (
        "user-agent",
        "kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc",
    );
    let r = https_get(s.proxy_a.listen, OLD_ONLY, &ca, Some(&s.deployer), &[ua])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let spoof = [
        ua,
        ("x-remote-user", "system:serviceaccount:kube-system:admin"),
    ];
    let r = https_get(s.proxy_a.listen, OLD_ONLY, &ca, None, &spoof)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let d = get(&format!("{}/debug/clients", s.proxy_a.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let clients: Vec<(&str, u64)> = d["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["client"].as_str().unwrap(),
                c["breaks_after_upgrade"][0]["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        clients,
        [("kubectl", 1), ("kubectl (sa ci/deployer)", 1)],
        "{d}"
    );
    // B received A's hop with the certificate's identity and counted nothing itself.
    let d = get(&format!("{}/debug/clients", s.proxy_b.admin_url()), &[])
        .await
        .unwrap()
        .json();
    assert_eq!(d["clients"], serde_json::json!([]), "{d}");
}
