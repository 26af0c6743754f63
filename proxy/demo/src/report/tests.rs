//! The whole report of one hand-made run (lost, contradicted, rerouted, 503 and true-404
//! requests, the skew, failed checks) is the text and JSON in `golden.txt` and `golden.json`
//! to the byte: a change to how the report is counted or rendered shows up here as a diff an
//! operator would see. A change meant to
//! alter the report rewrites both files with `MVPROXY_DEMO_BLESS=1 cargo test -p mvproxy-demo`,
//! and the diff of the two goes into the same commit.

use std::time::Duration;

use super::*;
use crate::client::Answer;
use crate::plan::{self, ClusterState, Expect, NODES, node_name};
use crate::run::Record;
use crate::workload;

#[test]
fn the_schema_is_json() {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("schema parses");
    assert_eq!(schema["properties"]["format"]["const"], FORMAT);
}

/// What a faithful proxy would answer `request` in `state`, with a few failures mixed in:
/// every 37th request lost, and reroutes of every fifth request answered a false 404 by the
/// picked server.
fn answer(request: &workload::Request, state: &ClusterState) -> Result<Answer, String> {
    if request.seq % 37 == 36 {
        return Err("timed out".to_owned());
    }
    let latency = Duration::from_micros(400 + request.seq * 7919 % 6000);
    let picked = plan::node_name(request.node);
    let (status, answered_by) = match request.expect {
        Expect::Local => (200, Some(picked)),
        Expect::Reroute if request.seq % 5 == 4 => (404, Some(picked)),
        Expect::Reroute => {
            let peer = (1..NODES)
                .map(|d| (request.node + d) % NODES)
                .find(|&n| state.nodes[n].up)
                .unwrap_or(request.node);
            (200, Some(plan::node_name(peer)))
        }
        Expect::PeersDown => (503, None),
        Expect::TrueNotFound => (404, Some(picked)),
        Expect::Discovery => (
            if request.seq.is_multiple_of(2) {
                200
            } else {
                304
            },
            None,
        ),
    };
    Ok(Answer {
        status,
        answered_by,
        latency,
    })
}

/// The proxies' side of `records`, as faithful proxies would count it.
fn scrape(records: &[Record], resources: &[ApiResource], first_phase: bool) -> Scrape {
    let mut m = Scrape::default();
    for r in records {
        let gvr = r.request.resource.and_then(|i| resources.get(i));
        let Ok(a) = &r.result else { continue };
        if let Some(g) = gvr {
            if r.rerouted() {
                *m.rerouted.entry(g.gvr.to_string()).or_default() += 1;
                *m.rerouted_by_code.entry(a.status).or_default() += 1;
            }
            if r.request.expect == Expect::TrueNotFound {
                m.lookup_misses += 1;
            } else {
                m.lookup_hits += 1;
            }
            if let Some(side) = r.request.skew {
                let key = (
                    r.request.agent(resources).client(),
                    g.gvr.to_string(),
                    side.as_str().to_owned(),
                );
                *m.skew.entry(key).or_default() += 1;
            }
            if first_phase && !g.gvr.group.is_empty() && r.request.seq % 3 == 0 {
                let key = (r.request.agent(resources).client(), g.gvr.to_string());
                *m.target_missing.entry(key).or_default() += 1;
            }
        }
        match (r.request.expect, a.status) {
            (Expect::PeersDown, 503) => m.peers_down += 1,
            (Expect::Discovery, 200) => m.merges_built += 1,
            (Expect::Discovery, 304) => m.merges_cached += 1,
            _ => {}
        }
    }
    m.merge_count = m.merges_built + m.merges_cached;
    m.merge_seconds = 0.0004 * m.merge_count as f64;
    m.merge_buckets = vec![
        (0.0001, m.merge_count / 4),
        (0.001, m.merge_count),
        (f64::INFINITY, m.merge_count),
    ];
    m
}

/// A whole run at 40 requests/s for 10 s, answered by [`answer`], with one segment's metrics
/// short of a reroute and one segment's `/debug/discovery` skew wrong.
fn fixture() -> Report {
    let phases = plan::phases(Duration::from_secs(10));
    let surfaces = Surfaces::new();
    let workload = workload::generate(&phases, &surfaces, 7, 40);
    let mut runs = Vec::new();
    for (p, phase) in phases.iter().enumerate() {
        for (s, segment) in phase.segments.iter().enumerate() {
            let records: Vec<Record> = workload.requests[p][s]
                .iter()
                .map(|request| Record {
                    request: request.clone(),
                    result: answer(request, &segment.state),
                })
                .collect();
            let mut metrics = scrape(&records, &workload.resources, p == 0);
            if p == 2
                && s == 0
                && let Some(n) = metrics.rerouted.values_mut().next()
            {
                *n += 1;
            }
            let mut debug_skew: Vec<(String, Vec<String>)> = segment
                .state
                .skew(&surfaces)
                .into_iter()
                .map(|(gvr, by)| (gvr.to_string(), by.into_iter().map(node_name).collect()))
                .collect();
            debug_skew.sort();
            if p == 2 && s == 1 {
                debug_skew.pop();
            }
            runs.push(SegmentRun {
                phase: p,
                segment: s,
                planned: records.len() + usize::from(p == 1),
                lost: usize::from(p == 1),
                records,
                settle: Duration::from_millis(1500 + 100 * p as u64),
                elapsed: Duration::from_millis(2000 - 10 * s as u64),
                metrics,
                debug_skew,
                interrupted: false,
            });
        }
    }
    build(&Inputs {
        phases: &phases,
        workload: &workload,
        surfaces: &surfaces,
        runs: &runs,
        nodes: (0..NODES)
            .map(|n| NodeInfo {
                name: node_name(n),
                proxy: format!("https://127.0.0.1:{}", 7443 + n),
                admin: format!("http://127.0.0.1:{}", 9090 + n),
            })
            .collect(),
        duration_seconds: 10.0,
        wall_seconds: 31.4159,
        interrupted: false,
        digest: workload.digest(&phases),
    })
}

const GOLDEN_TEXT: &str = include_str!("golden.txt");
const GOLDEN_JSON: &str = include_str!("golden.json");

#[test]
fn the_text_report_of_a_known_run_is_unchanged() {
    let text = text(&fixture());
    if std::env::var_os("MVPROXY_DEMO_BLESS").is_some() {
        std::fs::write(
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/report/golden.txt"),
            &text,
        )
        .expect("write golden.txt");
    }
    assert_eq!(text, GOLDEN_TEXT);
}

#[test]
fn the_json_report_of_a_known_run_is_unchanged() {
    let mut json = serde_json::to_string_pretty(&fixture()).expect("serialises");
    json.push('\n');
    if std::env::var_os("MVPROXY_DEMO_BLESS").is_some() {
        std::fs::write(
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/report/golden.json"),
            &json,
        )
        .expect("write golden.json");
    }
    assert_eq!(json, GOLDEN_JSON);
}
