//! A two-release control plane: stand-in API servers of 1.34 (`apiserver-a`) and 1.31
//! (`apiserver-b`), each reporting its release at `/version`, each behind an `mvproxy` that
//! has the other proxy as its peer.

use integration::*;

pub struct Cluster {
    pub a: StandInRunning,
    pub b: StandInRunning,
    pub proxy_a: Proxy,
    pub proxy_b: Proxy,
}

impl Cluster {
    /// Both proxies in this process, on listeners bound first: each knows the other's
    /// address before either starts.
    pub async fn start() -> Cluster {
        let (a, b) = standins().await;
        let (sockets_a, sockets_b) = (bind_sockets().await, bind_sockets().await);
        let url = |s: &mvproxy::app::Sockets| format!("http://{}", s.proxy.local_addr().unwrap());
        let (url_a, url_b) = (url(&sockets_a), url(&sockets_b));
        let args_a = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &url_b)]);
        let args_b = proxy_args("apiserver-b", &b.url(), &[("apiserver-a", &url_a)]);
        let proxy_a = Proxy::in_process(sockets_a, &args_a).await;
        let proxy_b = Proxy::in_process(sockets_b, &args_b).await;
        Self::ready(a, b, proxy_a, proxy_b).await
    }

    /// Both proxies as `mvproxy serve` processes, for tests that read their log lines.
    pub async fn start_processes() -> Cluster {
        Self::start_with_env(&[]).await
    }

    /// Both proxies as `mvproxy serve` processes with extra environment variables (the
    /// `OTEL_*` ones, read once per process); their ports are picked free beforehand.
    pub async fn start_with_env(env: &[(&str, &str)]) -> Cluster {
        let (a, b) = standins().await;
        let (port_a, port_b) = (free_port(), free_port());
        let url_a = format!("http://127.0.0.1:{port_a}");
        let url_b = format!("http://127.0.0.1:{port_b}");
        let mut args_a = proxy_args("apiserver-a", &a.url(), &[("apiserver-b", &url_b)]);
        args_a.extend(["--listen".to_owned(), format!("127.0.0.1:{port_a}")]);
        let mut args_b = proxy_args("apiserver-b", &b.url(), &[("apiserver-a", &url_a)]);
        args_b.extend(["--listen".to_owned(), format!("127.0.0.1:{port_b}")]);
        let proxy_a = Proxy::start_with_env(&args_a, env).await;
        let proxy_b = Proxy::start_with_env(&args_b, env).await;
        Self::ready(a, b, proxy_a, proxy_b).await
    }

    async fn ready(
        a: StandInRunning,
        b: StandInRunning,
        proxy_a: Proxy,
        proxy_b: Proxy,
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
