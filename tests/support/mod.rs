//! Support for the end-to-end tests: real `mvproxy` processes, stand-in API servers on
//! loopback sockets, the real `kubectl`, and a plain HTTP client.
//!
//! Every process started here is stopped by its PID when its handle drops, and every wait is
//! bounded, so a failing test fails instead of hanging.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub use mvproxy_standin::{RecordedRequest, Running as StandInRunning, StandIn};
pub use paths::*;

pub mod authz;
pub mod conn;
pub mod otlp;
pub mod paths;
pub mod pki;
pub mod prometheus;
pub mod promql;
pub mod relay;

/// Longest wait for anything in these tests.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The discovery fixtures directory (`fixtures/discovery/`, see its README).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/discovery")
}

/// A fixture file's text.
pub fn fixture(rel: &str) -> String {
    let p = fixtures().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// The 1.31 release's `/apis`.
pub fn apis_131() -> String {
    fixture("kube-apiserver-1.31-dev/aggregated_v2.json")
}

/// The 1.34 release's `/apis`.
pub fn apis_134() -> String {
    fixture("kube-apiserver-1.34-dev/aggregated_v2.json")
}

/// Starts a stand-in API server on a free loopback port.
pub async fn standin(name: &str, apis: &str) -> StandInRunning {
    StandIn::new(name, apis)
        .expect("fixture parses")
        .start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("stand-in starts")
}

/// Starts a stand-in API server on a free loopback port whose `/version` reports
/// `git_version` (the release mvproxy judges the skew's sides by).
pub async fn standin_release(name: &str, apis: &str, git_version: &str) -> StandInRunning {
    StandIn::new(name, apis)
        .expect("fixture parses")
        .git_version(git_version)
        .start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("stand-in starts")
}

/// The `mvproxy` binary built from this workspace (`cargo build` puts it beside `deps/`).
pub fn mvproxy_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let bin = dir.join("mvproxy");
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p mvproxy`, as scripts/test does)",
        bin.display()
    );
    bin
}

/// A running mvproxy: an `mvproxy serve` process (killed on drop), for what only a process
/// shows (flags, exit codes, signals, `OTEL_*` variables, log lines), or the app started
/// in-process on listeners the test bound ([`Proxy::in_process`]).
pub struct Proxy {
    backend: Backend,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub scheme: &'static str,
}

enum Backend {
    Process {
        child: Child,
        log: Arc<Mutex<Vec<String>>>,
    },
    InProcess(Option<mvproxy_core::app::Running>),
}

/// `mvproxy serve`'s flags, parsed as the binary parses them.
#[derive(clap::Parser)]
struct Serve {
    #[command(flatten)]
    args: mvproxy_core::config::ServeArgs,
}

/// Binds a proxy and an admin listener on loopback, on ports the OS picks.
pub async fn bind_sockets() -> mvproxy_core::app::Sockets {
    let any = "127.0.0.1:0".parse().expect("addr");
    mvproxy_core::app::Sockets::bind(&mvproxy_core::config::Listeners {
        proxy: any,
        admin: any,
    })
    .await
    .expect("bind loopback listeners")
}

impl Proxy {
    /// Starts the app in this process with `args` (`mvproxy serve`'s flags) on `sockets`,
    /// which the caller bound: their addresses are known before it starts.
    pub async fn in_process(sockets: mvproxy_core::app::Sockets, args: &[String]) -> Proxy {
        use clap::Parser;
        let tls = args.iter().any(|a| a == "--tls-cert-file");
        let serve =
            Serve::try_parse_from(std::iter::once("serve".to_owned()).chain(args.iter().cloned()))
                .unwrap_or_else(|e| panic!("flags {args:?}: {e}"));
        let config = serve
            .args
            .load()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let running =
            mvproxy_core::app::start(&config, sockets, mvproxy_telemetry::trace::Tracer::none())
                .await
                .unwrap_or_else(|e| panic!("start {args:?}: {e}"));
        Proxy {
            listen: running.listen,
            admin: running.admin,
            scheme: if tls { "https" } else { "http" },
            backend: Backend::InProcess(Some(running)),
        }
    }

    /// Starts the app in this process with `args` on loopback listeners bound first.
    pub async fn serve(args: &[String]) -> Proxy {
        Self::in_process(bind_sockets().await, args).await
    }

    /// Starts `mvproxy serve` with `args` plus loopback listeners on free ports, and waits
    /// until it reports its addresses.
    pub async fn start(args: &[String]) -> Proxy {
        Self::start_with_env(args, &[]).await
    }

    /// As [`Proxy::start`], with extra environment variables (the `OTEL_*` ones).
    pub async fn start_with_env(args: &[String], env: &[(&str, &str)]) -> Proxy {
        let tls = args.iter().any(|a| a == "--tls-cert-file");
        let mut cmd = Command::new(mvproxy_bin());
        cmd.arg("serve").args(["--admin-listen", "127.0.0.1:0"]);
        if !args.iter().any(|a| a == "--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(["--log-format", "json"])
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mvproxy");
        let stderr = child.stderr.take().expect("stderr piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log_w = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut tx = Some(tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addrs) = started_addrs(&line)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addrs);
                }
                log_w.lock().expect("log lock").push(line);
            }
        });
        let (listen, admin) = match tokio::time::timeout(PATIENCE, rx).await {
            Ok(Ok(addrs)) => addrs,
            _ => panic!("mvproxy did not start: {:?}", log.lock().expect("log lock")),
        };
        Proxy {
            backend: Backend::Process { child, log },
            listen,
            admin,
            scheme: if tls { "https" } else { "http" },
        }
    }

    /// `scheme://listen`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.listen)
    }

    /// `http://admin`.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// The process id (a process-level test's).
    pub fn pid(&self) -> u32 {
        match &self.backend {
            Backend::Process { child, .. } => child.id().expect("running"),
            Backend::InProcess(_) => panic!("an in-process proxy has no process id"),
        }
    }

    /// Log lines so far (an in-process proxy logs through the test's own subscriber).
    pub fn log(&self) -> Vec<String> {
        match &self.backend {
            Backend::Process { log, .. } => log.lock().expect("log lock").clone(),
            Backend::InProcess(_) => vec!["(in-process: no log captured)".to_owned()],
        }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&self) {
        let url = format!("{}/readyz", self.admin_url());
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Ok(r) = get(&url, &[]).await
                && r.status == StatusCode::OK
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not ready: {:?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.pid();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let Backend::Process { child, .. } = &mut self.backend else {
            unreachable!("pid() answered")
        };
        match tokio::time::timeout(PATIENCE, child.wait()).await {
            Ok(Ok(status)) => status,
            _ => panic!("mvproxy {pid} did not exit after SIGTERM"),
        }
    }

    /// Stops it: a process is killed at once (a crashed peer); the in-process app stops
    /// accepting and closes its connections (bounded).
    pub async fn kill(mut self) {
        match &mut self.backend {
            Backend::Process { child, .. } => {
                let _ = child.kill().await;
            }
            Backend::InProcess(running) => {
                if let Some(running) = running.take() {
                    let _ = tokio::time::timeout(PATIENCE, running.shutdown()).await;
                }
            }
        }
    }
}

/// An address where nothing listens, so a connection is refused at once: port 1 (tcpmux),
/// which no machine running these tests serves, and which no test binds (a port found free
/// could be taken by the time it is used).
pub const NOTHING_LISTENS: &str = "http://127.0.0.1:1";

fn started_addrs(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let fields = v.get("fields")?;
    if fields.get("message")?.as_str()? != "mvproxy started" {
        return None;
    }
    Some((
        fields.get("listen")?.as_str()?.parse().ok()?,
        fields.get("admin")?.as_str()?.parse().ok()?,
    ))
}

/// Arguments for a proxy in front of `local` named `id` with `peers` (name, url).
pub fn proxy_args(id: &str, local: &str, peers: &[(&str, &str)]) -> Vec<String> {
    let mut args = vec![
        "--server-id".to_owned(),
        id.to_owned(),
        "--local".to_owned(),
        local.to_owned(),
        "--refresh-interval-seconds".to_owned(),
        "1".to_owned(),
        "--connect-timeout-seconds".to_owned(),
        "2".to_owned(),
    ];
    for (name, url) in peers {
        args.push("--peer".to_owned());
        args.push(format!("{name}={url}"));
    }
    args
}

/// A response, collected.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// Reads `resp` to its end.
    pub async fn collect(resp: hyper::Response<hyper::body::Incoming>) -> Result<Resp, String> {
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Resp {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// A header as text ("" if absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }
}

/// GET `url` with `headers` (plain HTTP), bounded by [`PATIENCE`].
pub async fn get(url: &str, headers: &[(&str, &str)]) -> Result<Resp, String> {
    request(Method::GET, url, headers, Bytes::new()).await
}

/// Any request over plain HTTP, bounded by [`PATIENCE`].
pub async fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Resp, String> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
    let fut = async { Resp::collect(client.request(req).await.map_err(|e| e.to_string())?).await };
    tokio::time::timeout(PATIENCE, fut)
        .await
        .map_err(|_| format!("no answer within {PATIENCE:?}"))?
}

/// The path to the real kubectl; the tests fail, not skip, without it.
pub fn kubectl_bin() -> &'static str {
    let p = "/usr/bin/kubectl";
    assert!(Path::new(p).exists(), "kubectl is required at {p}");
    p
}

/// A kubectl pointed at `server` with a fresh discovery cache.
pub struct Kubectl {
    server: String,
    cache: tempdir::TempDir,
}

impl Kubectl {
    pub fn new(server: &str) -> Self {
        Self {
            server: server.to_owned(),
            cache: tempdir::TempDir::new("kubectl-cache"),
        }
    }

    /// The command, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(kubectl_bin());
        c.arg(format!("--server={}", self.server))
            .arg(format!("--cache-dir={}", self.cache.path().display()))
            .arg("--request-timeout=15s")
            .args(args)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", self.cache.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl to completion (bounded) and returns (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(PATIENCE, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} hung"))
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A minimal temporary directory, removed on drop.
pub mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    static N: AtomicU32 = AtomicU32::new(0);

    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(prefix: &str) -> Self {
            let p = std::env::temp_dir().join(format!(
                "mvproxy-{prefix}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).expect("create temp dir");
            Self(p)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Requests a stand-in recorded whose path contains `needle`.
pub fn requests_for(s: &StandInRunning, needle: &str) -> Vec<RecordedRequest> {
    s.requests()
        .into_iter()
        .filter(|r| r.path_and_query.contains(needle))
        .collect()
}

/// A request over HTTPS trusting `ca` only, presenting `client` (a certificate and key) if
/// given; bounded by [`PATIENCE`].
pub async fn https_get(
    addr: SocketAddr,
    path: &str,
    ca: &Path,
    client: Option<&pki::Pair>,
    headers: &[(&str, &str)],
) -> Result<Resp, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(|e| e.to_string())? {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match client {
        Some(pair) => {
            let certs = CertificateDer::pem_file_iter(&pair.cert)
                .map_err(|e| e.to_string())?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_file(&pair.key).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    let fut = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .uri(path)
            .header("host", addr.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        Resp::collect(sender.send_request(req).await.map_err(|e| e.to_string())?).await
    };
    tokio::time::timeout(PATIENCE, fut)
        .await
        .map_err(|_| format!("no answer within {PATIENCE:?}"))?
}
