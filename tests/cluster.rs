//! A two-release control plane: stand-in API servers of 1.34 (`apiserver-a`) and 1.31
//! (`apiserver-b`), each reporting its release at `/version`, each behind an `mvproxy` that
//! has the other proxy as its peer.

use integration::*;
use mvproxy_demo::catalog::Release;

pub struct Cluster {
    pub a: StandInRunning,
    pub b: StandInRunning,
    pub proxy_a: Proxy,
    pub proxy_b: Proxy,
    /// The relay `apiserver-b`'s proxy dials `apiserver-a`'s through, for processes.
    _to_a: Option<relay::Relay>,
}

impl Cluster {
    /// Both proxies in this process, on listeners bound first: each knows the other's
    /// address before either starts.
    pub async fn start() -> Cluster {
        let (a, b) = standins().await;
        Self::in_process(a, b, &[]).await
    }

    /// As [`Cluster::start`], rehearsing an upgrade to 1.36: both proxies run with
    /// `--target-release 1.36`, and `apiserver-b` (1.31) warns about
    /// `flowcontrol.apiserver.k8s.io/v1beta3` as kube-apiserver 1.31 does.
    /// What no proxy can fix is in it too: A serves 1.36's `scheduling.k8s.io` (PodGroups,
    /// whose deletion waits on a finalizer neither release's controller-manager removes) and
    /// cannot decode the PodGroups stored at `v1alpha1` (every read of them fails).
    pub async fn start_rehearsal() -> Cluster {
        let a = StandIn::new("apiserver-a", &apis_134())
            .expect("fixture parses")
            .group_of(
                &fixture("kube-apiserver-1.36.3/aggregated_v2.json"),
                "scheduling.k8s.io",
            )
            .expect("1.36.3 serves scheduling.k8s.io")
            .git_version("v1.34.0")
            .undecodable("scheduling.k8s.io/v1alpha1", "podgroups", "PodGroup")
            .start("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("stand-in starts");
        let b = Release::Old
            .deprecation_warnings()
            .iter()
            .fold(
                StandIn::new("apiserver-b", &apis_131())
                    .expect("fixture parses")
                    .git_version("v1.31.0"),
                |s, (gv, text)| s.deprecation_warning(gv, text),
            )
            .start("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("stand-in starts");
        Self::in_process(a, b, &["--target-release", "1.36"]).await
    }

    async fn in_process(a: StandInRunning, b: StandInRunning, extra: &[&str]) -> Cluster {
        let (sockets_a, sockets_b) = (bind_sockets().await, bind_sockets().await);
        let url =
            |s: &mvproxy_core::app::Sockets| format!("http://{}", s.proxy.local_addr().unwrap());
        let (url_a, url_b) = (url(&sockets_a), url(&sockets_b));
        let mut args_a = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &url_b)]);
        let mut args_b = proxy_args("apiserver-b", &b.url(), &[("apiserver-a", &url_a)]);
        for args in [&mut args_a, &mut args_b] {
            args.extend(extra.iter().map(|s| (*s).to_owned()));
        }
        let proxy_a = Proxy::in_process(sockets_a, &args_a).await;
        let proxy_b = Proxy::in_process(sockets_b, &args_b).await;
        Self::ready(a, b, proxy_a, proxy_b, None).await
    }

    /// Both proxies as `mvproxy serve` processes, for tests that read their log lines.
    pub async fn start_processes() -> Cluster {
        Self::start_with_env(&[]).await
    }

    /// Both proxies as `mvproxy serve` processes with extra environment variables (the
    /// `OTEL_*` ones, read once per process). Each listens on a port the OS picks and reports
    /// it in its startup line; as each must name the other at start, `apiserver-b` dials
    /// `apiserver-a` through a relay the test bound first, aimed at A once A has reported its
    /// address. A dials B directly, so the peer hop the tests look at (A → B) has no relay.
    pub async fn start_with_env(env: &[(&str, &str)]) -> Cluster {
        Self::start_processes_with(env, &[]).await
    }

    /// As [`Cluster::start_with_env`], both proxies with `extra` flags as well.
    pub async fn start_processes_with(env: &[(&str, &str)], extra: &[&str]) -> Cluster {
        let (a, b) = standins().await;
        let to_a = relay::Relay::bind().await;
        let with_extra = |mut args: Vec<String>| {
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            args
        };
        let args_b = with_extra(proxy_args(
            "apiserver-b",
            &b.url(),
            &[("apiserver-a", &to_a.url())],
        ));
        let proxy_b = Proxy::start_with_env(&args_b, env).await;
        let url_b = format!("http://{}", proxy_b.listen);
        let args_a = with_extra(proxy_args(
            "apiserver-a",
            &a.url(),
            &[("apiserver-b", &url_b)],
        ));
        let proxy_a = Proxy::start_with_env(&args_a, env).await;
        let to_a = to_a.to(proxy_a.listen);
        Self::ready(a, b, proxy_a, proxy_b, Some(to_a)).await
    }

    async fn ready(
        a: StandInRunning,
        b: StandInRunning,
        proxy_a: Proxy,
        proxy_b: Proxy,
        to_a: Option<relay::Relay>,
    ) -> Cluster {
        proxy_a.ready().await;
        proxy_b.ready().await;
        wait_all_up(&proxy_a).await;
        wait_all_up(&proxy_b).await;
        Cluster {
            a,
            b,
            proxy_a,
            proxy_b,
            _to_a: to_a,
        }
    }
}

async fn standins() -> (StandInRunning, StandInRunning) {
    (
        standin_release("apiserver-a", &apis_134(), "v1.34.0").await,
        standin_release("apiserver-b", &apis_131(), "v1.31.0").await,
    )
}

/// Waits until `/debug/discovery` shows every server up (peers start in any order).
pub async fn wait_all_up(p: &Proxy) {
    wait_discovery(p, |servers| servers.iter().all(|s| s["up"] == true)).await
}

/// Waits until `/debug/discovery`'s server list satisfies `ok`.
pub async fn wait_discovery(p: &Proxy, ok: impl Fn(&[serde_json::Value]) -> bool) {
    let url = format!("{}/debug/discovery", p.admin_url());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(r) = get(&url, &[]).await {
            let v = r.json();
            if let Some(servers) = v["servers"].as_array()
                && ok(servers)
            {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "discovery never got there: {:?}",
            p.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A namespaced object of `kind` named `name`.
pub fn object(api_version: &str, kind: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {},
    })
}
