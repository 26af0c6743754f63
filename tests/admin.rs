//! The admin listener secured as a control-plane component's: over TLS, every request but the
//! health paths is authenticated (client certificate or bearer token, by the local API
//! server's TokenReview) and authorized (SubjectAccessReview, `get` on the path); refused
//! with 401, 403, or a 503 when the API server cannot be asked, never an open door.

use http::StatusCode;
use integration::authz::{Fake, PROMETHEUS};
use integration::conn::assert_status;
use integration::pki::Ca;
use integration::*;

#[tokio::test]
async fn admin_over_tls_is_authenticated_and_authorized_by_the_local_api_server() {
    let api = Fake::start().await;
    let ca = Ca::new("admin-ca");
    let serving = ca.issue("admin", "mvproxy-admin", &["127.0.0.1"]);
    let clients = Ca::new("clients");
    let admin_cert = clients.issue_client("admin-user", "admin", &["operators"]);
    let stranger_cert = clients.issue_client("stranger", "stranger", &[]);
    let mut args = proxy_args("apiserver-a", &api.url(), &[]);
    for (flag, value) in [
        ("--admin-tls-cert-file", serving.cert.display().to_string()),
        ("--admin-tls-key-file", serving.key.display().to_string()),
        (
            "--admin-client-ca-file",
            clients.cert_file().display().to_string(),
        ),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    let p = Proxy::serve(&args).await;
    let ca_file = ca.cert_file();
    let admin = |path: &'static str, client: Option<&'static str>, token: Option<&'static str>| {
        let (ca_file, addr) = (ca_file.clone(), p.admin);
        let pair = match client {
            Some("admin") => Some(&admin_cert),
            Some(_) => Some(&stranger_cert),
            None => None,
        };
        let auth = token.map(|t| format!("Bearer {t}"));
        async move {
            let headers: Vec<(&str, &str)> = auth
                .as_deref()
                .map(|a| vec![("authorization", a)])
                .unwrap_or_default();
            https_get(addr, path, &ca_file, pair, &headers)
                .await
                .unwrap()
        }
    };

    // health paths: anonymous
    for path in ["/healthz", "/readyz"] {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let r = admin(path, None, None).await;
            if r.status == StatusCode::OK {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path}: {}",
                r.text()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    assert!(
        api.reviews().is_empty(),
        "health needs no review: {:?}",
        api.reviews()
    );

    // no credentials, or a token the API server rejects: 401
    let r = admin("/metrics", None, None).await;
    assert_status(&r, StatusCode::UNAUTHORIZED, "Unauthorized");
    let r = admin("/metrics", None, Some("forged-token")).await;
    assert_status(&r, StatusCode::UNAUTHORIZED, "Unauthorized");

    // the Prometheus ServiceAccount token: /metrics yes, /debug/discovery no (403)
    let r = admin("/metrics", None, Some("prometheus-token")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.text().contains("# TYPE mvproxy_"), "{}", r.text());
    let r = admin("/debug/discovery", None, Some("prometheus-token")).await;
    let msg = assert_status(&r, StatusCode::FORBIDDEN, "Forbidden");
    assert!(
        msg.contains(PROMETHEUS) && msg.contains("/debug/discovery"),
        "{msg}"
    );
    // a user the API server knows but allows nothing: 403
    let r = admin("/metrics", None, Some("nobody-token")).await;
    assert_status(&r, StatusCode::FORBIDDEN, "Forbidden");

    // client certificates: CN admin may read everything, CN stranger nothing
    let r = admin("/debug/discovery", Some("admin"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = admin("/metrics", Some("stranger"), None).await;
    assert_status(&r, StatusCode::FORBIDDEN, "Forbidden");

    // decisions are cached: the same token again asks nothing more
    let before = api.reviews().len();
    let r = admin("/metrics", None, Some("prometheus-token")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(api.reviews().len(), before, "{:?}", api.reviews());
    let reviews = api.reviews();
    assert_eq!(
        reviews
            .iter()
            .filter(|r| *r == "token prometheus-token")
            .count(),
        1,
        "{reviews:?}"
    );
    assert!(
        reviews.contains(&format!("access {PROMETHEUS} get /metrics")),
        "{reviews:?}"
    );

    // plain HTTP to the TLS admin port gets no metrics
    let plain = get(&format!("http://{}/metrics", p.admin), &[]).await;
    assert!(plain.map_or(true, |r| r.status != StatusCode::OK));

    // the API server cannot be asked: 503 with Retry-After, not an open door; health stays up
    api.stop();
    let r = admin("/metrics", None, Some("nobody-else-token")).await;
    let msg = assert_status(&r, StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
    assert!(msg.contains("tokenreviews"), "{msg}");
    assert_eq!(r.header("retry-after"), "1");
    let r = admin("/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
}
