//! The command line as an operator meets it: invalid configuration is one line naming the
//! field, exit code 2, before any socket opens; `check-config`; SIGTERM stops cleanly.

use std::process::Command;

use integration::*;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(mvproxy_bin())
        .args(args)
        .output()
        .expect("run mvproxy");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn invalid_configuration_exits_2_with_one_line_naming_the_field() {
    // The test holds the listen address for the whole run: mvproxy binding it before
    // validating would fail with "address in use" (exit 1), not the configuration error.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let listen = held.local_addr().expect("local addr").to_string();
    // ... as a valid configuration on the held address shows.
    let (code, _, err) = run(&[
        "serve",
        "--local",
        "http://127.0.0.1:1",
        "--listen",
        &listen,
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1, "a valid configuration reaches the bind: {err}");
    assert!(err.contains(&format!("bind {listen}")), "{err}");
    let cases: &[(&[&str], &str)] = &[
        (&["serve", "--local", "ftp://127.0.0.1:1"], "local"),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--peer",
                "b=http://127.0.0.1:2",
                "--peer",
                "b=http://127.0.0.1:3",
            ],
            "peer",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--peer",
                "b=http://127.0.0.1:1",
            ],
            "peer",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--tls-cert-file",
                "/nonexistent.crt",
                "--tls-key-file",
                "/nonexistent.key",
            ],
            "tls-cert-file",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--peer",
                "b=https://127.0.0.1:2",
            ],
            "peer-ca-file",
        ),
        (&["serve"], "local"),
        (
            &[
                "serve",
                "--local",
                "https://127.0.0.1:1",
                "--insecure-skip-tls-verify",
                "--local-ca-file",
                "/etc/hostname",
            ],
            "insecure-skip-tls-verify",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--max-request-header-bytes",
                "100",
            ],
            "max-request-header-bytes",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--max-connections",
                "0",
            ],
            "max-connections",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--tls-reload-interval-seconds",
                "0",
            ],
            "tls-reload-interval-seconds",
        ),
        // plain HTTP admin endpoints off loopback: open to the node network, refused
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--admin-listen",
                "0.0.0.0:9464",
            ],
            "admin-listen",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--admin-tls-cert-file",
                "/etc/hostname",
            ],
            "admin-tls-key-file",
        ),
        (
            &[
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--admin-client-ca-file",
                "/etc/hostname",
            ],
            "admin-client-ca-file",
        ),
    ];
    for (args, field) in cases {
        let mut args = args.to_vec();
        args.extend(["--listen", &listen]);
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(
            lines[0].contains(&format!("invalid configuration: {field}:")),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_bad_runtime_variable_exits_2_naming_it() {
    // held: were the value not checked before the bind, mvproxy would exit 1 on it, not hang
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let listen = held.local_addr().expect("local addr").to_string();
    for (variable, bad) in [
        ("TOKIO_WORKER_THREADS", "0"),
        ("TOKIO_WORKER_THREADS", "two"),
        ("MVPROXY_HUGE_TEXT", "yes"),
    ] {
        let out = Command::new(mvproxy_bin())
            .args([
                "serve",
                "--local",
                "http://127.0.0.1:1",
                "--listen",
                &listen,
            ])
            .env(variable, bad)
            .output()
            .expect("run mvproxy");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{variable}={bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&format!("invalid configuration: {variable}:")),
            "{variable}={bad:?}: {err}"
        );
    }
}

/// The executable mappings of process `pid` that no file backs, with their `AnonHugePages` (kB).
fn anonymous_code(pid: u32) -> Vec<(String, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("read smaps");
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            // `lo-hi perms offset dev inode [path]`: code with no path is anonymous
            current =
                (fields.get(1) == Some(&"r-xp") && fields.len() == 5).then(|| fields[0].to_owned());
        } else if let (Some(range), ["AnonHugePages:", kb, ..]) = (&current, fields.as_slice()) {
            found.push((range.clone(), kb.parse().expect("kB")));
        }
    }
    found
}

/// `MVPROXY_HUGE_TEXT`: by default the proxy's code sits on huge pages where the kernel offers
/// them (an anonymous executable mapping backed by `AnonHugePages`), and proxies as ever; with
/// `0` the code stays the file's. Where the kernel has transparent huge pages off, nothing moves.
#[tokio::test]
async fn the_code_moves_onto_huge_pages_unless_turned_off() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let offered = thp.contains("[always]") || thp.contains("[madvise]");
    let a = standin("apiserver-a", &apis_134()).await;
    for (value, moved) in [(None, offered), (Some("0"), false)] {
        let env: Vec<(&str, &str)> = value
            .map(|v| ("MVPROXY_HUGE_TEXT", v))
            .into_iter()
            .collect();
        let p = Proxy::start_with_env(&proxy_args("apiserver-a", &a.url(), &[]), &env).await;
        p.ready().await;
        let r = get(&format!("{}/api/v1/namespaces/default/pods", p.url()), &[])
            .await
            .expect("proxied");
        assert_eq!(r.status, http::StatusCode::OK, "{value:?}: proxied as ever");
        let code = anonymous_code(p.pid());
        if moved {
            assert!(
                code.iter().any(|(_, kb)| *kb >= 2048),
                "{value:?}: code on huge pages, found {code:?}"
            );
        } else {
            assert!(
                code.is_empty(),
                "{value:?} (THP {thp:?}): nothing moved, found {code:?}"
            );
        }
        let status = p.terminate().await;
        assert!(status.success(), "{value:?}: {status:?}");
    }
}

#[test]
fn check_config_validates_a_file() {
    let dir = tempdir::TempDir::new("check-config");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "local: http://127.0.0.1:8080\nserver-id: apiserver-a\npeers: [\"apiserver-b=http://127.0.0.1:8081\"]\n").unwrap();
    let (code, out, err) = run(&["check-config", "--config", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("valid") && out.contains("1 peer"), "{out}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "local: http://127.0.0.1:8080\npeers: [\"apiserver-b\"]\n",
    )
    .unwrap();
    let (code, _, err) = run(&["check-config", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid configuration: peer:"), "{err}");

    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, "locl: http://127.0.0.1:8080\n").unwrap();
    let (code, _, err) = run(&["check-config", "--config", typo.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("locl"), "names the unknown key: {err}");
}

#[tokio::test]
async fn sigterm_stops_the_proxy_cleanly() {
    let a = standin("apiserver-a", &apis_134()).await;
    let p = Proxy::start(&proxy_args("apiserver-a", &a.url(), &[])).await;
    p.ready().await;
    let listen = p.listen;
    let status = p.terminate().await;
    assert!(status.success(), "{status:?}");
    assert!(
        tokio::net::TcpStream::connect(listen).await.is_err(),
        "listener closed"
    );
}

/// An upstream that answers every request after `delay` (404 for discovery, so it serves
/// nothing and every request is routed to it as `no_peer`); the receiver hears of each
/// resource request (`/api/v1/…`, not the refresher's `/version`) as it arrives.
async fn slow_upstream(
    delay: std::time::Duration,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (arrived, arrivals) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let arrived = arrived.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let resp = if head.starts_with("GET /api ") || head.starts_with("GET /apis ") {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
                    } else {
                        if head.starts_with("GET /api/v1/") {
                            let _ = arrived.send(());
                        }
                        tokio::time::sleep(delay).await;
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 8\r\n\r\nfinished".to_owned()
                    };
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, arrivals)
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests() {
    let (upstream, mut arrivals) = slow_upstream(std::time::Duration::from_millis(1500)).await;
    let p = Proxy::start(&proxy_args("local", &format!("http://{upstream}"), &[])).await;
    p.ready().await;
    let url = format!("{}{CONFIGMAPS}", p.url());
    let in_flight = tokio::spawn(async move { get(&url, &[]).await });
    // SIGTERM only once the request has reached the upstream: it is in flight for sure
    arrivals
        .recv()
        .await
        .expect("the request reached the upstream");
    let pid = p.pid();
    let status = p.terminate().await;
    assert!(status.success(), "mvproxy {pid}: {status:?}");
    let r = in_flight
        .await
        .unwrap()
        .expect("the in-flight request was answered");
    assert_eq!(r.status, http::StatusCode::OK);
    assert_eq!(r.text(), "finished");
}

#[test]
fn version_names_the_release_and_the_commit_it_was_built_from() {
    // What build.rs recorded: the override if the build had one, else this checkout's HEAD
    // (scripts/test.sh builds the binary from the tree it tests), else "unknown".
    let commit = option_env!("MVPROXY_GIT_COMMIT")
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let (code, out, err) = run(&["--version"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("mvproxy {} (commit {commit})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_config_takes_serves_flags() {
    // The flags of a manifest's `serve` command line, checked without starting anything.
    let (code, out, err) = run(&[
        "check-config",
        "--local",
        "http://127.0.0.1:1",
        "--peer",
        "b=http://127.0.0.1:2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("flags: valid") && out.contains("1 peer"),
        "{out}"
    );
    let (code, _, err) = run(&["check-config", "--local", "ftp://127.0.0.1:1"]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid configuration: local"), "{err}");
}
