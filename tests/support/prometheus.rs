//! The real Prometheus and promtool (Debian's `prometheus` package, installed by
//! `scripts/test.sh`). Tests that need them fail, not skip, when they are missing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::tempdir::TempDir;
use crate::{PATIENCE, get};

fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} is required (Debian package `prometheus`; scripts/test.sh installs it)")
    })
}

/// The `promtool` binary.
pub fn promtool_bin() -> PathBuf {
    tool("promtool")
}

/// Runs promtool with `args` in `dir` (bounded), feeding `stdin`; returns (success, output).
pub async fn promtool(dir: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new(promtool_bin())
        .args(args)
        .current_dir(dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn promtool");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .await
            .expect("promtool stdin");
        drop(pipe);
    }
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("promtool {args:?} hung"))
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A running Prometheus on a loopback port the OS picked, killed (by its PID) and reaped on
/// drop, also when a test fails.
pub struct Prometheus {
    child: std::process::Child,
    pub url: String,
    dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (host:port) every second as job `mvproxy`, with
    /// `rule_files` evaluated every second, and waits until it is ready.
    pub async fn start(targets: &[String], rule_files: &[PathBuf]) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": rule_files,
            "scrape_configs": [{
                "job_name": "mvproxy",
                "static_configs": [{"targets": targets}],
            }],
        });
        // JSON is YAML.
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config.to_string()).expect("write prometheus.yml");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = std::process::Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            // Port 0: the OS picks a free port, and Prometheus logs the one it got.
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--enable-feature=exemplar-storage")
            .arg("--log.level=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        let mut p = Prometheus {
            child,
            url: String::new(),
            dir,
        };
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if p.url.is_empty()
                && let Some(addr) = listening_on(&p.log())
            {
                p.url = format!("http://{addr}");
            }
            if !p.url.is_empty()
                && let Ok(r) = get(&format!("{}/-/ready", p.url), &[]).await
                && r.status == http::StatusCode::OK
            {
                return p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus not ready: {}",
                p.log()
            );
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}): {}", p.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Prometheus's own log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/{path}` with the query `params`; the `data` of a successful answer.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let url = format!("{}/api/v1/{path}?{}", self.url, query.join("&"));
        let r = get(&url, &[])
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let v = r.json();
        assert_eq!(v["status"], "success", "{path} {params:?}: {v}");
        v["data"].clone()
    }

    /// An instant query's result vector.
    pub async fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let data = self.api("query", &[("query", expr)]).await;
        match data["resultType"].as_str() {
            Some("vector" | "matrix") => data["result"].as_array().cloned().unwrap_or_default(),
            Some("scalar") => vec![data["result"].clone()],
            other => panic!("{expr}: unexpected result type {other:?}"),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SIGKILL cannot be ignored, so the wait that reaps it is short.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address Prometheus' web listener got, from its log line `msg="Listening on"
/// address=HOST:PORT`: the exporter-toolkit logs `l.Addr()` of the bound listener there
/// (github.com/prometheus/exporter-toolkit, web/tls_config.go, `Serve`), where the earlier
/// "Start listening for connections" line repeats the flag (`:0`).
fn listening_on(log: &str) -> Option<std::net::SocketAddr> {
    log.lines()
        .filter(|l| l.contains(r#"msg="Listening on""#))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("address="))
                .and_then(|a| a.trim_matches('"').parse().ok())
        })
}

/// Percent-encodes a query parameter value.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
