//! `mvproxy demo` as a user runs it: the real binary, a short rehearsal, its JSON report
//! checked against the schema in the repository and against itself (reroutes only where the
//! releases differ, every false 404 accounted for by mvproxy's metrics, nothing lost), the
//! same seed giving the same requests, and Ctrl-C still printing the report so far.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use integration::*;
use serde_json::Value;

/// Traffic time of the rehearsal in CI: five phases of 1.4 s.
const SHORT: &str = "7s";
/// Longest a short rehearsal may take before the test gives up on it (it takes ~12 s).
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Runs `mvproxy demo ARGS` to completion, bounded in time (killed by its PID past it).
fn demo(args: &[&str]) -> Output {
    let child = Command::new(mvproxy_bin())
        .arg("demo")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mvproxy demo");
    let pid = child.id();
    // Reading both pipes to the end while waiting, so a large report cannot block the child.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("mvproxy demo {args:?} did not finish in {RUN_LIMIT:?}");
        }
    }
}

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proxy/demo/src/report.schema.json");
    let text = std::fs::read_to_string(&path).expect("the schema is in the repository");
    serde_json::from_str(&text).expect("the schema is JSON")
}

fn assert_valid(report: &Value) {
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON schema");
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match the schema: {errors:#?}"
    );
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// GVRs served by both releases, from the embedded catalog.
fn common_gvrs() -> Vec<String> {
    mvproxy_demo::catalog::resources()
        .into_iter()
        .filter(|r| r.old && r.new)
        .map(|r| r.gvr.to_string())
        .collect()
}

#[test]
fn a_short_rehearsal_reconciles_with_the_proxies_metrics() {
    let out = demo(&["--duration", SHORT, "--report", "json", "--seed", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "exit code; stderr:\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}); stderr:\n{stderr}"));
    assert_valid(&report);
    assert_eq!(
        report["reconciled"], true,
        "{:#}",
        report["total"]["checks"]
    );
    assert_eq!(report["interrupted"], false);

    let phases = report["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["all-old", "node-1", "node-2", "node-3", "all-new"]);

    let common = common_gvrs();
    assert!(common.contains(&"v1/pods".to_owned()));
    for phase in phases {
        let name = phase["name"].as_str().unwrap();
        let c = &phase["counts"];
        // Nothing lost.
        assert!(n(&c["sent"]) > 0, "{name}: nothing sent");
        assert_eq!(n(&c["sent"]), n(&c["answered"]), "{name}: sent = answered");
        assert_eq!(n(&c["lost"]), 0, "{name}");
        assert_eq!(
            n(&c["unexpected"]),
            0,
            "{name}: {:#}",
            c["unexpected_examples"]
        );
        // Every false 404 was avoided, and mvproxy's metrics account for each one.
        assert_eq!(n(&c["false_404s_delivered"]), 0, "{name}");
        assert_eq!(n(&c["false_404s"]), n(&c["false_404s_avoided"]), "{name}");
        let p = &c["proxies"];
        assert_eq!(n(&c["rerouted"]), n(&p["rerouted_request_total"]), "{name}");
        assert_eq!(
            n(&c["false_404s_avoided"]),
            n(&p["rerouted_request_total"]) + n(&p["peers_down_503_total"]),
            "{name}"
        );
        assert_eq!(
            n(&c["unavailable_503"]),
            n(&p["peers_down_503_total"]),
            "{name}"
        );
        // Where no server was down with GVRs only it served, every avoided false 404 is a
        // reroute.
        if n(&p["peers_down_503_total"]) == 0 {
            assert_eq!(n(&c["false_404s_avoided"]), n(&c["rerouted"]), "{name}");
        }
        // GVRs both releases serve are never rerouted, in any phase.
        let by_gvr = c["rerouted_by_gvr"].as_object().expect("rerouted_by_gvr");
        for gvr in by_gvr.keys() {
            assert!(
                !common.contains(gvr),
                "{name}: {gvr} is served by every node, yet rerouted"
            );
        }
        assert_eq!(
            by_gvr.values().map(n).sum::<u64>(),
            n(&c["rerouted"]),
            "{name}"
        );
        let rerouted = n(&c["rerouted"]);
        match name {
            "all-old" | "all-new" => assert_eq!(rerouted, 0, "{name}: homogeneous, no reroute"),
            "node-1" | "node-2" => assert!(rerouted > 0, "{name}: mixed, reroutes expected"),
            _ => {}
        }
        assert_eq!(
            phase["mixed"],
            matches!(name, "node-1" | "node-2"),
            "{name}"
        );
    }
    // The last server of the old release restarting: its APIs get 503s, never 404s.
    assert!(n(&phases[3]["counts"]["unavailable_503"]) > 0);

    let total = &report["total"];
    assert_eq!(n(&total["sent"]), n(&report["workload"]["planned"]));
    assert!(
        total["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true),
        "{:#}",
        total["checks"]
    );
    assert!(!report["skew"].as_array().unwrap().is_empty());
    // The proxies merged discovery for the clients' GET /apis.
    assert!(n(&total["discovery"]["requests"]) > 0);
    assert!(n(&total["proxies"]["merges_built"]) > 0);

    // Who would break: the operator on flowcontrol v1beta3 (removed in 1.32) after the
    // upgrade, with every request mvproxy counted; the new release's APIs on a rollback.
    let readiness = &report["readiness"];
    let after = readiness["breaks_after_upgrade"].as_array().unwrap();
    let operator = after
        .iter()
        .find(|c| c["client"] == "flowschema-tuner")
        .unwrap_or_else(|| panic!("the operator is not listed: {readiness:#}"));
    assert!(
        operator["user_agent"]
            .as_str()
            .unwrap()
            .starts_with("flowschema-tuner/v0.4.2 ")
    );
    assert!(n(&operator["requests"]) > 0);
    for gvr in operator["gvrs"].as_object().unwrap().keys() {
        assert!(
            gvr.starts_with("flowcontrol.apiserver.k8s.io/v1beta3/"),
            "{gvr}"
        );
    }
    for side in ["breaks_after_upgrade", "breaks_on_rollback"] {
        let clients = readiness[side].as_array().unwrap();
        assert!(!clients.is_empty(), "{side}: {readiness:#}");
        for c in clients {
            assert_eq!(
                n(&c["requests"]),
                n(&c["counted_by_mvproxy"]),
                "{side}: {c:#}"
            );
            assert_eq!(
                c["gvrs"].as_object().unwrap().values().map(n).sum::<u64>(),
                n(&c["requests"]),
                "{c:#}"
            );
        }
    }
    assert!(
        readiness["breaks_on_rollback"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["client"] != "flowschema-tuner"),
        "{readiness:#}"
    );
    assert_eq!(
        n(&total["skew_requests"]),
        n(&total["proxies"]["skew_requests_total"])
    );

    // Before the upgrade: during all-old the proxies, told 1.34 as their target, counted the
    // operator's flowcontrol v1beta3 requests (1.34 does not serve it) and nothing 1.34
    // serves; after the upgrade exactly those requests got 404s.
    let before = &report["before_upgrade"];
    assert_eq!(before["target"], "v1.34.0-demo", "{before:#}");
    assert_eq!(before["held"], true, "{before:#}");
    let rows = before["rows"].as_array().unwrap();
    let operator_rows: Vec<&Value> = rows
        .iter()
        .filter(|r| r["client"] == "flowschema-tuner")
        .collect();
    assert!(!operator_rows.is_empty(), "{before:#}");
    for r in rows {
        let gvr = r["gvr"].as_str().unwrap();
        assert!(
            !common.contains(&gvr.to_owned()),
            "{gvr} is served by 1.34 yet predicted or broken: {r:#}"
        );
        assert_eq!(n(&r["predicted"]), n(&r["sent_before"]), "{r:#}");
        if n(&r["sent_after"]) > 0 {
            assert_eq!(n(&r["not_found_after"]), n(&r["sent_after"]), "{r:#}");
        }
    }
    assert!(
        rows.iter()
            .any(|r| n(&r["predicted"]) > 0 && n(&r["sent_after"]) > 0),
        "some predicted client and GVR was sent again after the upgrade: {before:#}"
    );

    // The run sent exactly the planned sequence.
    let plan = demo(&["--duration", SHORT, "--seed", "1", "--plan-only"]);
    let digest = report["workload"]["digest"].as_str().unwrap();
    assert!(
        String::from_utf8_lossy(&plan.stderr).contains(digest),
        "the plan's digest is the run's"
    );
}

#[test]
fn the_same_seed_plans_the_same_requests() {
    let args = |seed: &'static str| ["--duration", SHORT, "--seed", seed, "--plan-only"];
    let a = demo(&args("1"));
    let b = demo(&args("1"));
    let c = demo(&args("2"));
    for out in [&a, &b, &c] {
        assert_eq!(out.status.code(), Some(0));
    }
    let lines: Vec<Value> = String::from_utf8_lossy(&a.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line per request"))
        .collect();
    assert_eq!(lines.len(), 1400, "7 s at 200 req/s");
    assert_eq!(a.stdout, b.stdout, "same seed, same request sequence");
    assert_ne!(a.stdout, c.stdout, "another seed, another sequence");
    let verbs: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l["verb"].as_str().unwrap()).collect();
    assert_eq!(
        verbs.into_iter().collect::<Vec<_>>(),
        ["create", "discovery", "get", "list", "watch"]
    );
}

#[test]
fn ctrl_c_stops_cleanly_and_still_reports() {
    let mut child = Command::new(mvproxy_bin())
        .args(["demo", "--duration", "20s", "--report", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mvproxy demo");
    let mut stdout = child.stdout.take().expect("stdout");
    let report = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    // Wait for the second phase to begin, then interrupt as a user would.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("phase 2/5")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            seen.push(line);
        }
        seen
    });
    if rx.recv_timeout(RUN_LIMIT).is_err() {
        let _ = child.kill();
        panic!("the demo never reached phase 2: {:?}", reader.join());
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let deadline = Instant::now() + RUN_LIMIT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the demo did not stop after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().expect("exit status");
    let log = reader.join().expect("stderr reader");
    let stdout = report.join().expect("stdout reader").expect("stdout");
    assert_eq!(status.code(), Some(130), "exit code after Ctrl-C: {log:#?}");
    let report: Value = serde_json::from_slice(&stdout).expect("the report so far, as JSON");
    assert_valid(&report);
    assert_eq!(report["interrupted"], true);
    let phases = report["phases"].as_array().unwrap();
    assert!(!phases.is_empty() && phases.len() <= 2, "{}", phases.len());
    let total = &report["total"];
    assert!(n(&total["sent"]) > 0);
    assert!(n(&total["sent"]) < n(&report["workload"]["planned"]));
    assert_eq!(
        n(&total["sent"]),
        n(&total["answered"]),
        "nothing lost on Ctrl-C"
    );
    assert_eq!(report["reconciled"], true, "{:#}", total["checks"]);
}
