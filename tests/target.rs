//! Before the upgrade: a proxy told the target release counts, from the first request and
//! with every server on the old release, the requests that release will not serve, per client,
//! in `mvproxy_target_missing_requests_total` and `/debug/clients` ("use v1"); bad target
//! input exits 2 naming what is wrong.

use std::collections::BTreeMap;
use std::process::Command;

use http::StatusCode;
use integration::*;

const KUBECTL: &str = "kubectl/v1.31.0 (linux/amd64) kubernetes/9edcffc";
const TUNER: &str = "flowschema-tuner/v0.4.2 (linux/amd64) kubernetes/$Format";

/// Removed in 1.32 (flowcontrol.apiserver.k8s.io/v1 is served since 1.29).
const FLOWSCHEMAS_V1BETA3: &str = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas";

fn missing_samples(scrape: &str) -> BTreeMap<String, u64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("mvproxy_target_missing_requests_total{"))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            (series.to_owned(), value.parse().expect("integer count"))
        })
        .collect()
}

#[tokio::test]
async fn requests_the_target_release_does_not_serve_are_counted_per_client_before_the_upgrade() {
    // One server, still on the old release: there is no skew yet.
    let old = standin_release("apiserver-old", &apis_131(), "v1.31.0").await;
    let mut args = proxy_args("apiserver-old", &old.url(), &[]);
    args.extend(["--target-release".to_owned(), "1.36".to_owned()]);
    let p = Proxy::serve(&args).await;
    // The target is declared before any request.
    let scrape = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    assert!(
        scrape.contains("mvproxy_target_info{target=\"1.36\"} 1"),
        "{scrape}"
    );
    p.ready().await;
    let plan: [(&str, &str, usize); 4] = [
        (KUBECTL, FLOWSCHEMAS_V1BETA3, 2),
        (TUNER, FLOWSCHEMAS_V1BETA3, 1),
        (TUNER, PODS, 3),
        (
            KUBECTL,
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            1,
        ),
    ];
    for (agent, path, times) in plan {
        for _ in 0..times {
            let r = get(&format!("{}{path}", p.url()), &[("user-agent", agent)])
                .await
                .unwrap();
            assert_eq!(r.status, StatusCode::OK, "{agent} {path}: {}", r.text());
        }
    }
    let scrape = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    let series = |client: &str| {
        format!(
            "mvproxy_target_missing_requests_total{{client=\"{client}\",group=\"flowcontrol.apiserver.k8s.io\",version=\"v1beta3\",resource=\"flowschemas\",target=\"1.36\",availability=\"never\"}}"
        )
    };
    let want: BTreeMap<String, u64> = [(series("kubectl"), 2), (series("flowschema-tuner"), 1)]
        .into_iter()
        .collect();
    assert_eq!(missing_samples(&scrape), want);

    let d = get(&format!("{}/debug/clients", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    assert_eq!(d["target"], "1.36", "{d}");
    let breaks: BTreeMap<String, (String, u64, String)> = d["clients"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["breaks_on_target"].as_array().unwrap().iter().map(|u| {
                (
                    c["client"].as_str().unwrap().to_owned(),
                    (
                        u["gvr"].as_str().unwrap().to_owned(),
                        u["requests"].as_u64().unwrap(),
                        u["use_version"].as_str().unwrap_or("-").to_owned(),
                    ),
                )
            })
        })
        .collect();
    let fs = "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas".to_owned();
    assert_eq!(
        breaks,
        [
            (
                "flowschema-tuner".to_owned(),
                (fs.clone(), 1, "v1".to_owned())
            ),
            ("kubectl".to_owned(), (fs, 2, "v1".to_owned())),
        ]
        .into_iter()
        .collect()
    );
    p.kill().await;
    old.shutdown().await;
}

/// A staging cluster turns alpha and beta APIs on: a GVR the target serves only once turned
/// on is counted apart (`availability="off_by_default"`), listed in `/debug/clients` with the
/// `--runtime-config` entry, and `mvproxy readiness` exits 3 for it alone.
#[tokio::test]
async fn a_gvr_the_target_serves_only_when_turned_on_is_judged_apart() {
    // 1.34 with every API on serves resource.k8s.io/v1alpha3/devicetaintrules; 1.36 serves it
    // only with that group-version turned on.
    let old = standin_release("apiserver-old", &apis_134(), "v1.34.0").await;
    let mut args = proxy_args("apiserver-old", &old.url(), &[]);
    args.extend(["--target-release".to_owned(), "1.36".to_owned()]);
    let p = Proxy::serve(&args).await;
    p.ready().await;
    let path = "/apis/resource.k8s.io/v1alpha3/devicetaintrules";
    for _ in 0..2 {
        let r = get(&format!("{}{path}", p.url()), &[("user-agent", KUBECTL)])
            .await
            .unwrap();
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let scrape = get(&format!("{}/metrics", p.admin_url()), &[])
        .await
        .unwrap()
        .text();
    let series = "mvproxy_target_missing_requests_total{client=\"kubectl\",group=\"resource.k8s.io\",version=\"v1alpha3\",resource=\"devicetaintrules\",target=\"1.36\",availability=\"off_by_default\"}";
    assert_eq!(
        missing_samples(&scrape),
        [(series.to_owned(), 2)].into_iter().collect(),
        "{scrape}"
    );
    let d = get(&format!("{}/debug/clients", p.admin_url()), &[])
        .await
        .unwrap()
        .json();
    let kubectl = d["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client"] == "kubectl")
        .unwrap()
        .clone();
    assert_eq!(
        kubectl["breaks_on_target"],
        serde_json::json!([]),
        "{kubectl}"
    );
    let u = &kubectl["breaks_unless_enabled"][0];
    assert_eq!(
        u["gvr"], "resource.k8s.io/v1alpha3/devicetaintrules",
        "{kubectl}"
    );
    assert_eq!(
        u["runtime_config"], "resource.k8s.io/v1alpha3=true",
        "{kubectl}"
    );
    assert_eq!(u["requests"], 2, "{kubectl}");

    let (code, text, err) = readiness(&["--target", "1.36", "--proxy", &p.admin_url()]).await;
    assert_eq!(code, 3, "{text}{err}");
    assert!(
        text.contains("--runtime-config resource.k8s.io/v1alpha3=true"),
        "{text}"
    );
    p.kill().await;
    old.shutdown().await;
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(mvproxy_bin())
        .args(args)
        .output()
        .expect("run mvproxy");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_target_input_exits_2_naming_it() {
    let base = ["serve", "--local", "http://127.0.0.1:1"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
    };
    let args = with(&["--target-release", "1.99"]);
    let (code, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("target-release"), "{err}");
    assert!(err.contains("known releases: 1.3"), "{err}");
    assert!(err.contains("1.36"), "{err}");

    let dir = std::env::temp_dir().join(format!("mvproxy-bad-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("api.json"),
        r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("apis.json"),
        r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[{"metadata":{"name":"apps"},"versions":{"v1":1}}]}"#,
    )
    .unwrap();
    let dir_arg = dir.display().to_string();
    let args = with(&["--target-discovery", &dir_arg]);
    let (code, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("target-discovery"), "{err}");
    assert!(err.contains("apis.json: at items[0].versions"), "{err}");
}

/// Runs `mvproxy readiness` without blocking the test's runtime (its stand-in serves there).
async fn readiness(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(mvproxy_bin())
        .arg("readiness")
        .args(args)
        .output()
        .await
        .expect("run mvproxy readiness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn readiness_merges_every_proxy_and_gates_on_what_would_break() {
    let old = standin_release("apiserver-old", &apis_131(), "v1.31.0").await;
    let with_target = |id: &str| {
        let mut args = proxy_args(id, &old.url(), &[]);
        args.extend(["--target-release".to_owned(), "1.36".to_owned()]);
        args
    };
    let a = Proxy::serve(&with_target("apiserver-a")).await;
    let b = Proxy::serve(&with_target("apiserver-b")).await;
    let plain = Proxy::serve(&proxy_args("apiserver-c", &old.url(), &[])).await;
    for p in [&a, &b] {
        p.ready().await;
    }
    let (admin_a, admin_b) = (a.admin_url(), b.admin_url());
    // Nothing that breaks yet: exit 0.
    let (code, out, err) =
        readiness(&["--target", "1.36", "--proxy", &admin_a, "--proxy", &admin_b]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no client would break"), "{out}");

    for (p, times) in [(&a, 2), (&b, 3)] {
        for _ in 0..times {
            let r = get(
                &format!("{}{FLOWSCHEMAS_V1BETA3}", p.url()),
                &[("user-agent", KUBECTL)],
            )
            .await
            .unwrap();
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        }
    }
    let (code, out, err) = readiness(&[
        "--target", "1.36", "--proxy", &admin_a, "--proxy", &admin_b, "--output", "json",
    ])
    .await;
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["breaks"], true);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0]["client"], "kubectl");
    assert_eq!(rows[0]["kind"], "breaks_on_target");
    assert_eq!(
        rows[0]["gvr"],
        "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"
    );
    assert_eq!(rows[0]["requests"], 5, "both proxies' requests");
    assert_eq!(rows[0]["use_version"], "v1");

    let (code, out, _) =
        readiness(&["--target", "1.36", "--proxy", &admin_a, "--output", "csv"]).await;
    assert_eq!(code, 1);
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with(
            "kubectl,breaks_on_target,flowcontrol.apiserver.k8s.io/v1beta3/flowschemas,2,"
        )),
        "{out}"
    );

    // A proxy that cannot be read, or judges against no target, is named; exit 2 wins over 1.
    let plain_admin = plain.admin_url();
    let (code, out, err) = readiness(&[
        "--target",
        "1.36",
        "--proxy",
        &admin_a,
        "--proxy",
        NOTHING_LISTENS,
        "--proxy",
        &plain_admin,
    ])
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "never a partial report: {out}");
    assert!(err.contains(NOTHING_LISTENS), "{err}");
    assert!(
        err.contains(&format!(
            "{plain_admin}: started with target none, not 1.36"
        )),
        "{err}"
    );
    let (code, _, err) = readiness(&["--target", "1.35", "--proxy", &admin_a]).await;
    assert_eq!(code, 2);
    assert!(err.contains("started with target 1.36, not 1.35"), "{err}");

    for p in [a, b, plain] {
        p.kill().await;
    }
    old.shutdown().await;
}
