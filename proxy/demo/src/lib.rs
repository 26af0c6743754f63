//! `mvproxy demo`: a rolling control-plane upgrade rehearsed on one machine, with a report.
//!
//! Why it exists: the question an operator brings to mvproxy is "what will my clients see
//! while I upgrade?", and the answer should not need a cluster. So the demo runs the whole
//! story in one process on loopback sockets: three stand-in API servers on Kubernetes 1.31's
//! API surface, a real mvproxy in front of each (started by [`mvproxy_core::app::start`], so the
//! request path, metrics and traces are production's), a client workload spread over the
//! three proxies as a load balancer would, and then each node in turn drained, stopped and
//! restarted on 1.34's surface. It ends with a report of what the clients met, checked
//! against mvproxy's own `/metrics`.
//!
//! - [`catalog`]: both releases' API surface, embedded, and their discovery documents;
//! - `plan`: the phases and, for each state, what a request must meet (the counterfactual);
//! - `workload`: the seeded request sequence;
//! - `stack`: stand-ins and proxies, node restarts, waiting for discovery to settle;
//! - `client`, `run`: sending the plan and the live progress line;
//! - `metrics`, `report`: the proxies' side, the reconciliation, text and JSON.
//!
//! The demo never reads anything outside the binary (no fixtures, no network beyond
//! loopback), so it works from a fresh clone.

#![warn(missing_docs, unreachable_pub)]

pub mod catalog;
mod client;
mod metrics;
mod plan;
mod report;
mod run;
mod stack;
mod workload;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

use catalog::Release;
use mvproxy_core::config::ConfigError;
use mvproxy_telemetry::trace::Tracer;
use plan::{SegmentKind, Surfaces, node_name};
use report::{Inputs, NodeInfo};
use stack::Stack;

/// Exit code when the run did not reconcile, lost requests, or failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code after Ctrl-C (the report so far is still printed).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Longest wait for everything to stop at the end.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// `mvproxy demo` flags.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Traffic time of the whole rehearsal, split evenly over its five phases (e.g. 25s, 2m)
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Requests per second from the clients, over the three proxies
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub rate: u32,
    /// Seed of the workload: the same seed (with the same duration and rate) sends the same
    /// requests
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Report format
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub report: ReportFormat,
    /// Write the report to this file instead of stdout
    #[arg(long, value_name = "FILE")]
    pub report_file: Option<PathBuf>,
    /// After the report, keep the stack up (addresses printed) until Ctrl-C
    #[arg(long)]
    pub keep_running: bool,
    /// Admin listeners (/metrics) on PORT, PORT+1 and PORT+2, for a fixed Prometheus scrape
    /// config [default: free ports]
    #[arg(long, value_name = "PORT")]
    pub admin_port: Option<u16>,
    /// Address the admin listeners bind (plain HTTP): 0.0.0.0 lets a Prometheus in a local
    /// container reach them through the host gateway; a local rehearsal only
    #[arg(long, value_name = "IP", default_value_t = std::net::Ipv4Addr::LOCALHOST)]
    pub admin_ip: std::net::Ipv4Addr,
    /// Print the planned requests as JSON lines and exit without starting anything
    #[arg(long)]
    pub plan_only: bool,
}

/// How the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// For people: phases, what clients met, the reconciliation.
    Text,
    /// For tools: the schema in `report.schema.json`.
    Json,
}

/// Why the demo could not run (or finish) its rehearsal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("starting {node}: {source}")]
    Start {
        node: String,
        source: mvproxy_core::app::StartError,
    },
    #[error("starting {node}: stand-in API server on {addr}: {source}")]
    StandIn {
        node: String,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("starting proxies: binding their listeners: {0}")]
    Bind(#[source] std::io::Error),
    #[error("the embedded catalog: {0}")]
    Catalog(#[source] serde_json::Error),
    #[error("{proxy} did not catch up with {server} in time: {why}")]
    Converge {
        proxy: String,
        server: String,
        why: String,
    },
    #[error("reading {node}'s admin endpoints: {source}")]
    Scrape {
        node: String,
        source: client::ClientError,
    },
    #[error("{0} requests still unanswered after the drain timeout")]
    Stuck(usize),
    #[error("interrupted")]
    Interrupted,
    #[error("writing the report to {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("encoding the report: {0}")]
    Encode(#[source] serde_json::Error),
}

/// `25s`, `2m`, `500ms`, `1.5s`, or plain seconds; between 1 s and 1 h.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 25s, 2m or 500ms"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("unknown unit {unit:?}: use ms, s or m")),
    };
    if !(1.0..=3600.0).contains(&secs) {
        return Err("between 1s and 1h".to_owned());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Runs the demo, its proxies' request spans starting from `tracer`; the exit code says
/// whether it reconciled.
pub async fn run(args: DemoArgs, tracer: Tracer) -> ExitCode {
    let phases = plan::phases(args.duration);
    let surfaces = Surfaces::new();
    let workload = workload::generate(&phases, &surfaces, args.seed, args.rate);
    let digest = workload.digest(&phases);
    if args.plan_only {
        return print_plan(&workload, &phases, &digest);
    }
    let interrupt = CancellationToken::new();
    let signals = tokio::spawn(watch_signals(interrupt.clone()));
    announce(&args, &phases, &surfaces, &digest);
    let started = Instant::now();
    let first = phases[0].segments[0].state;
    let mut stack = match Stack::start(
        &first,
        &surfaces,
        (args.admin_ip, args.admin_port),
        &interrupt,
        &tracer,
    )
    .await
    {
        Ok(s) => s,
        Err(DemoError::Interrupted) => {
            signals.abort();
            eprintln!("mvproxy demo: interrupted while starting");
            return ExitCode::from(EXIT_INTERRUPTED);
        }
        Err(e) => {
            signals.abort();
            eprintln!("mvproxy demo: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let nodes: Vec<NodeInfo> = stack
        .nodes
        .iter()
        .map(|n| NodeInfo {
            name: n.name.clone(),
            proxy: n.proxy_url.clone(),
            admin: n.admin_url.clone(),
        })
        .collect();
    for n in &nodes {
        eprintln!("  {}  mvproxy {}  admin {}", n.name, n.proxy, n.admin);
    }
    let client = client::Client::new();
    let outcome = run::execute(
        &phases, &workload, &surfaces, &mut stack, &client, &interrupt,
    )
    .await;
    let (runs, failure) = match outcome {
        Ok(runs) => (runs, None),
        Err((runs, e)) => (runs, Some(e)),
    };
    let interrupted = interrupt.is_cancelled();
    let report = report::build(&Inputs {
        phases: &phases,
        workload: &workload,
        surfaces: &surfaces,
        runs: &runs,
        nodes,
        duration_seconds: args.duration.as_secs_f64(),
        wall_seconds: started.elapsed().as_secs_f64(),
        interrupted,
        digest,
    });
    let mut code = if interrupted {
        ExitCode::from(EXIT_INTERRUPTED)
    } else if failure.is_some() || !report.reconciled {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    };
    if let Some(e) = &failure {
        eprintln!("mvproxy demo: the rehearsal stopped early: {e}");
    }
    if let Err(e) = write_report(&report, args.report, args.report_file.as_ref()) {
        eprintln!("mvproxy demo: {e}");
        code = ExitCode::from(EXIT_FAILED);
    }
    if args.keep_running && !interrupted {
        keep_running(&stack, &interrupt).await;
    }
    signals.abort();
    drop(client);
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, stack.shutdown())
        .await
        .is_err()
    {
        eprintln!("mvproxy demo: the stack did not stop within {SHUTDOWN_TIMEOUT:?}");
        code = ExitCode::from(EXIT_FAILED);
    }
    code
}

fn print_plan(workload: &workload::Workload, phases: &[plan::Phase], digest: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    for line in workload.lines(phases) {
        let Ok(json) = serde_json::to_string(&line) else {
            return ExitCode::from(EXIT_FAILED);
        };
        if writeln!(out, "{json}").is_err() {
            return ExitCode::from(EXIT_FAILED);
        }
    }
    eprintln!("{} requests, {digest}", workload.len());
    ExitCode::SUCCESS
}

/// The plan, for people, on stderr (stdout is the report's).
fn announce(args: &DemoArgs, phases: &[plan::Phase], surfaces: &Surfaces, digest: &str) {
    let count = |r: Release| {
        catalog::resources()
            .iter()
            .filter(|x| surfaces.serves(r, &x.gvr))
            .count()
    };
    eprintln!(
        "mvproxy demo: a rolling upgrade of a 3-node control plane from {} to {}, on loopback",
        Release::Old.version(),
        Release::New.version()
    );
    eprintln!(
        "  3 stand-in API servers ({}..3) start on {}'s API surface ({} GVRs; {} serves {}),",
        node_name(0),
        Release::Old.version(),
        count(Release::Old),
        Release::New.version(),
        count(Release::New)
    );
    eprintln!("  each behind a real mvproxy with the other two proxies as peers;");
    eprintln!("  kubectl, kube-controller-manager's garbage collector and an operator still on");
    eprintln!(
        "  flowcontrol.apiserver.k8s.io/v1beta3 send {} req/s (list, get, watch, create,",
        args.rate
    );
    eprintln!("  GET /apis) through a load balancer");
    eprintln!(
        "  over the proxies in rotation; seed {} ({digest})",
        args.seed
    );
    eprintln!("  phases, {:.1} s of traffic:", args.duration.as_secs_f64());
    for (i, p) in phases.iter().enumerate() {
        let total: Duration = p.segments.iter().map(|s| s.duration).sum();
        let down: Duration = p
            .segments
            .iter()
            .filter(|s| s.kind == SegmentKind::Restart)
            .map(|s| s.duration)
            .sum();
        let down = if down.is_zero() {
            String::new()
        } else {
            format!(" ({:.1} s of it down)", down.as_secs_f64())
        };
        eprintln!(
            "    {} {:<8} {:>5.1} s  {}{down}",
            i + 1,
            p.name,
            total.as_secs_f64(),
            p.title
        );
    }
}

fn write_report(
    report: &report::Report,
    format: ReportFormat,
    file: Option<&PathBuf>,
) -> Result<(), DemoError> {
    let body = match format {
        ReportFormat::Text => report::text(report),
        ReportFormat::Json => {
            let mut json = serde_json::to_string_pretty(report).map_err(DemoError::Encode)?;
            json.push('\n');
            json
        }
    };
    match file {
        Some(path) => std::fs::write(path, body).map_err(|source| DemoError::Write {
            path: path.display().to_string(),
            source,
        }),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(body.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|source| DemoError::Write {
                    path: "stdout".to_owned(),
                    source,
                })
        }
    }
}

/// Leaves the stack up, addresses printed, until Ctrl-C.
async fn keep_running(stack: &Stack, interrupt: &CancellationToken) {
    eprintln!();
    eprintln!("the stack stays up until Ctrl-C:");
    for n in &stack.nodes {
        eprintln!(
            "  {}  kubectl --server {}   metrics {}/metrics",
            n.name, n.proxy_url, n.admin_url
        );
    }
    let targets: Vec<String> = stack
        .nodes
        .iter()
        .map(|n| format!("'{}'", n.admin_url.trim_start_matches("http://")))
        .collect();
    eprintln!("  Prometheus scrape targets: [{}]", targets.join(", "));
    interrupt.cancelled().await;
}

/// Cancels `interrupt` on Ctrl-C or SIGTERM.
async fn watch_signals(interrupt: CancellationToken) {
    mvproxy_core::app::shutdown_signal().await;
    interrupt.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("25s"), Ok(Duration::from_secs(25)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0.5s").is_err());
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
