//! The nodes: a stand-in API server and an `mvproxy` process each, started, killed and
//! restarted on their addresses, and what the load balancer knows of them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mvproxy_standin::{Running as StandInRunning, StandIn};
use tokio::process::{Child, Command};

use crate::PATIENCE;
use crate::load::get;

/// What the load balancer knows of a node.
pub(crate) struct Rotation {
    pub(crate) name: String,
    pub(crate) listen: SocketAddr,
    /// The GVR only peers serve, seen from this node.
    pub(crate) peer_only: &'static str,
    pub(crate) in_rotation: AtomicBool,
    pub(crate) in_flight: AtomicUsize,
    /// A new pool per proxy process, so no request rides a dead process's connection.
    pub(crate) client: Mutex<Client<HttpConnector, Full<Bytes>>>,
}

pub(crate) fn new_client() -> Client<HttpConnector, Full<Bytes>> {
    // Idle connections are closed soon, so the proxies' open descriptors follow the load
    // rather than the load balancer's pool.
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build_http()
}

pub(crate) struct Node {
    pub(crate) apis: &'static str,
    /// The API server's address: port 0 until its first start, then the port it got, on
    /// which it restarts (as a kube-apiserver comes back on its address).
    pub(crate) api_addr: SocketAddr,
    /// The running proxy's admin address, read from its startup log line (it listens on
    /// port 0 and the OS picks a free port).
    pub(crate) admin: Option<SocketAddr>,
    /// The running proxy's log file.
    pub(crate) log: PathBuf,
    pub(crate) peers: Vec<String>,
    pub(crate) standin: Option<StandInRunning>,
    pub(crate) proxy: Option<Child>,
    pub(crate) generation: usize,
    pub(crate) rotation: Arc<Rotation>,
}

/// `n` loopback ports free a moment ago, for the proxies' listeners only: each names the
/// others as peers before any starts, and a restarted proxy comes back on its address.
///
/// They come from below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`): a port
/// `bind(0)` returns lies inside it, where any outgoing connection (the proxies connect to one
/// another all the time) may take it while its proxy is down for a restart. Below the range
/// only a listener asking for the port by number can take it.
pub(crate) fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = low.saturating_sub(4096).max(1024);
    let span = low.saturating_sub(first);
    assert!(
        span > 0,
        "no loopback port below the ephemeral range ({low}-)"
    );
    let offset = fastrand::u16(0..span);
    // Each listener is held until all are found, so no port is returned twice.
    let held: Vec<std::net::TcpListener> = (0..span)
        .map(|k| first + (offset + k) % span)
        .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
        .take(n)
        .collect();
    assert_eq!(held.len(), n, "{n} free loopback ports below {low}");
    held.iter()
        .map(|l| l.local_addr().expect("a bound listener's address"))
        .collect()
}

/// The admin address in `mvproxy serve`'s JSON startup line (`"message":"mvproxy started"`).
pub(crate) fn started_admin(log: &str) -> Option<SocketAddr> {
    log.lines().find_map(|line| {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let fields = v.get("fields")?;
        if fields.get("message")?.as_str()? != "mvproxy started" {
            return None;
        }
        fields.get("admin")?.as_str()?.parse().ok()
    })
}

impl Node {
    pub(crate) fn name(&self) -> &str {
        &self.rotation.name
    }

    pub(crate) async fn start_api(&mut self) {
        let mut err = None;
        // the port was just released by the previous server: retry briefly
        for _ in 0..50 {
            let standin = StandIn::new(self.name(), self.apis).expect("fixture parses");
            match standin.start(self.api_addr).await {
                Ok(r) => {
                    self.api_addr = r.addr;
                    self.standin = Some(r);
                    return;
                }
                Err(e) => err = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{}: API server did not restart: {err:?}", self.name());
    }

    pub(crate) async fn stop_api(&mut self) {
        if let Some(s) = self.standin.take() {
            s.shutdown().await;
        }
    }

    pub(crate) fn start_proxy(&mut self, bin: &Path, logs: &Path) {
        self.generation += 1;
        let log = logs.join(format!("{}.{}.log", self.proxy_name(), self.generation));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(["--server-id", self.name()])
            .args(["--local", &format!("http://{}", self.api_addr)])
            .args(["--listen", &self.rotation.listen.to_string()])
            .args(["--admin-listen", "127.0.0.1:0"])
            .args(["--refresh-interval-seconds", "2"])
            .args(["--connect-timeout-seconds", "1"])
            .args(["--response-header-timeout-seconds", "3"])
            .args(["--log-format", "json"]);
        for p in &self.peers {
            cmd.args(["--peer", p]);
        }
        let child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mvproxy");
        self.proxy = Some(child);
        self.admin = None;
        self.log = log;
        *self.rotation.client.lock().expect("client lock") = new_client();
    }

    pub(crate) fn proxy_name(&self) -> String {
        self.name().replace("apiserver", "mvproxy")
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.proxy.as_ref().and_then(Child::id)
    }

    /// Waits until the proxy is ready and sees its own API server up.
    pub(crate) async fn wait_ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.admin.is_none() {
                self.admin = std::fs::read_to_string(&self.log)
                    .ok()
                    .and_then(|l| started_admin(&l));
            }
            if let Some(admin) = self.admin
                && let url = format!("http://{admin}/debug/discovery")
                && let Ok((StatusCode::OK, body)) = get(&new_client(), &url, &[]).await
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                && v["servers"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["local"] == true && s["up"] == true))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never became ready",
                self.proxy_name()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Takes the node out of rotation and waits for its requests in flight to finish.
    pub(crate) async fn drain(&self) {
        self.rotation.in_rotation.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        while self.rotation.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn rejoin(&self) {
        self.rotation.in_rotation.store(true, Ordering::SeqCst);
    }

    pub(crate) async fn kill_proxy(&mut self) {
        if let Some(mut c) = self.proxy.take() {
            let _ = c.kill().await;
        }
    }

    /// SIGTERM, then the exit status (bounded).
    pub(crate) async fn terminate_proxy(&mut self) -> Result<(), String> {
        let Some(mut child) = self.proxy.take() else {
            return Err("not running".to_owned());
        };
        let Some(pid) = child.id() else {
            return Err("already exited".to_owned());
        };
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        if !sent.success() {
            return Err("kill -TERM failed".to_owned());
        }
        match tokio::time::timeout(PATIENCE, child.wait()).await {
            Ok(Ok(s)) if s.success() => Ok(()),
            Ok(Ok(s)) => Err(format!("exited with {s}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                let _ = child.kill().await;
                Err(format!("still running {PATIENCE:?} after SIGTERM"))
            }
        }
    }
}
