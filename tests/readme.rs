//! The user documentation's commands, run as written so they cannot rot: the README's
//! Grafana walkthrough (everything but the container engine), and docs/configuration.md
//! naming every flag `mvproxy serve` has.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The first ```sh block after `heading` in `text`.
fn sh_block_after(text: &str, heading: &str) -> Vec<String> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &text[start..];
    let open = rest.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let close = rest[open..].find("```").expect("block closed");
    rest[open..open + close]
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_grafana_walkthrough_starts_what_prometheus_scrapes() {
    let block = sh_block_after(&read("README.md"), "## Watch a rehearsal in Grafana");
    // Run as written, but: the binary this test suite built instead of a release build, and
    // no container engine (the stack is not what is checked here).
    let bin_dir = mvproxy_bin()
        .parent()
        .expect("bin dir")
        .to_string_lossy()
        .into_owned();
    let mut script = vec!["set -e".to_owned(), format!("cd '{}'", repo().display())];
    let mut demo_seen = false;
    for line in &block {
        if line.starts_with("cargo build") {
            assert!(
                line.ends_with(r#"export PATH="$PWD/target/release:$PATH""#),
                "{line}"
            );
            script.push(format!("export PATH='{bin_dir}':\"$PATH\""));
        } else if line.contains("docker") {
            continue;
        } else if line.starts_with("mvproxy demo") {
            demo_seen = true;
            // exec: the demo is this process, so the test can stop it like Ctrl-C does.
            script.push(format!("exec {line}"));
        } else {
            script.push(line.clone());
        }
    }
    assert!(demo_seen, "the walkthrough starts a demo: {block:?}");
    let mut demo = Command::new("bash")
        .args(["-c", &script.join("\n")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the walkthrough");

    // Every target of the shipped Prometheus config answers /metrics with mvproxy's families
    // (host.docker.internal is this host as the containers see it).
    let targets_file = read("deploy/prometheus/targets/mvproxy.yml");
    let ports: Vec<u16> = targets_file
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- host.docker.internal:"))
        .map(|p| p.parse().expect("port"))
        .collect();
    assert_eq!(ports.len(), 3, "one target per demo proxy: {targets_file}");
    let deadline = Instant::now() + Duration::from_secs(60);
    for port in &ports {
        loop {
            let url = format!("http://127.0.0.1:{port}/metrics");
            match get(&url, &[]).await {
                Ok(r) if r.status == 200 && r.text().contains("# TYPE mvproxy_") => break,
                _ if Instant::now() < deadline => {
                    if let Ok(Some(status)) = demo.try_wait() {
                        panic!("the demo exited ({status}) before serving {url}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => panic!("{url} never served mvproxy's metrics: {:?}", other.err()),
            }
        }
    }
    // Ctrl-C (SIGINT) stops it cleanly, its report so far printed.
    let pid = demo.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || demo.wait_with_output()),
    )
    .await
    .expect("the demo stops after Ctrl-C")
    .expect("join")
    .expect("wait");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn docs_configuration_names_every_flag_of_serve() {
    let out = Command::new(mvproxy_bin())
        .args(["serve", "--help"])
        .output()
        .expect("mvproxy serve --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let docs = read("docs/configuration.md");
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '=', '[']).next())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() > 20, "{help}");
    let missing: Vec<&&str> = flags
        .iter()
        .filter(|f| !docs.contains(&format!("`--{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}
