//! Running the plan: segment after segment, bring the nodes to the segment's state, send its
//! requests on schedule, collect every answer, and read the proxies' metrics around it.
//!
//! Requests are sent open-loop (at their planned times, whatever the answers take), each in
//! its own task, at most [`MAX_IN_FLIGHT`] at once. Between two segments the runner waits for
//! the requests in flight and for every proxy to have re-read discovery (see
//! [`super::stack`]), then scrapes `/metrics`: so each segment's metric deltas hold exactly
//! its own requests, and each request meets the state its counterfactual was computed for.
//! Ctrl-C stops sending, lets what is in flight finish, and keeps what was measured.

use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::DemoError;
use super::catalog::ApiResource;
use super::client::{Answer, Client, REQUEST_TIMEOUT};
use super::metrics::{self, Scrape};
use super::plan::{Phase, Surfaces, node_name};
use super::stack::Stack;
use super::workload::{Request, Workload};

/// Requests in flight at most; past it, sending waits (and falls behind schedule).
const MAX_IN_FLIGHT: usize = 512;
/// Longest wait for the requests in flight at the end of a segment.
const SEGMENT_DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// One request and what came of it.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) request: Request,
    /// The answer, or why there was none.
    pub(crate) result: Result<Answer, String>,
}

impl Record {
    /// The answer came from another node's API server.
    pub(crate) fn rerouted(&self) -> bool {
        matches!(&self.result, Ok(a) if a.answered_by.as_ref().is_some_and(|b| *b != node_name(self.request.node)))
    }

    /// The answer came from the picked node's own API server.
    pub(crate) fn local(&self) -> bool {
        matches!(&self.result, Ok(a) if a.answered_by.as_deref() == Some(node_name(self.request.node).as_str()))
    }
}

/// What one segment measured.
#[derive(Debug, Clone)]
pub(crate) struct SegmentRun {
    pub(crate) phase: usize,
    pub(crate) segment: usize,
    pub(crate) planned: usize,
    pub(crate) records: Vec<Record>,
    /// Requests sent whose task ended without a record (it panicked): lost.
    pub(crate) lost: usize,
    /// Time spent bringing the nodes to this segment's state before its traffic.
    pub(crate) settle: Duration,
    /// Time from the first request sent to the last answer.
    pub(crate) elapsed: Duration,
    /// The proxies' metrics over the segment, summed over the three.
    pub(crate) metrics: Scrape,
    /// The skew as `/debug/discovery` of a proxy in rotation showed it during the segment.
    pub(crate) debug_skew: Vec<(String, Vec<String>)>,
    /// Cut short by Ctrl-C.
    pub(crate) interrupted: bool,
}

/// Runs every segment; stops early when `interrupt` fires. On an error, what was measured
/// until then comes back with it.
pub(crate) async fn execute(
    phases: &[Phase],
    workload: &Workload,
    surfaces: &Surfaces,
    stack: &mut Stack,
    client: &Arc<Client>,
    interrupt: &CancellationToken,
) -> Result<Vec<SegmentRun>, (Vec<SegmentRun>, DemoError)> {
    let live = Live::new();
    let ticker_stop = CancellationToken::new();
    let ticker = tokio::spawn(live.clone().tick(ticker_stop.clone()));
    let resources: Arc<Vec<ApiResource>> = Arc::new(workload.resources.clone());
    let mut runs = Vec::new();
    let mut result = Ok(());
    'phases: for (p, phase) in phases.iter().enumerate() {
        live.println(&format!(
            "phase {}/{} {}: {}",
            p + 1,
            phases.len(),
            phase.name,
            phase.title
        ));
        for (s, segment) in phase.segments.iter().enumerate() {
            if interrupt.is_cancelled() {
                break 'phases;
            }
            live.set_label(&format!("{} settling", phase.name));
            let settle = match stack.apply(&segment.state, surfaces, interrupt).await {
                Ok(d) => d,
                Err(DemoError::Interrupted) => break 'phases,
                Err(e) => {
                    result = Err(e);
                    break 'phases;
                }
            };
            live.println(&format!(
                "  {:<8} nodes {}  ({} ms to settle)",
                format!("{:?}", segment.kind).to_lowercase(),
                segment.state.describe(),
                settle.as_millis()
            ));
            live.set_label(&format!("{} {:?}", phase.name, segment.kind).to_lowercase());
            let run = run_segment(
                (p, s),
                &workload.requests[p][s],
                &segment.state.in_rotation(),
                stack,
                client,
                &resources,
                &live,
                interrupt,
            )
            .await;
            match run {
                Ok(mut run) => {
                    run.settle = settle;
                    let stop = run.interrupted;
                    runs.push(run);
                    if stop {
                        break 'phases;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break 'phases;
                }
            }
        }
    }
    ticker_stop.cancel();
    let _ = ticker.await;
    live.finish();
    match result {
        Ok(()) => Ok(runs),
        Err(e) => Err((runs, e)),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_segment(
    (phase, segment): (usize, usize),
    requests: &[Request],
    rotation: &[usize],
    stack: &Stack,
    client: &Arc<Client>,
    resources: &Arc<Vec<ApiResource>>,
    live: &Arc<Live>,
    interrupt: &CancellationToken,
) -> Result<SegmentRun, DemoError> {
    let before = scrape_all(stack, client).await?;
    let debug_skew = match rotation.first() {
        Some(&n) => {
            let node = &stack.nodes[n];
            metrics::skew(client, &node.admin_url)
                .await
                .map_err(|source| DemoError::Scrape {
                    node: node.name.clone(),
                    source,
                })?
        }
        None => Vec::new(),
    };
    let started = tokio::time::Instant::now();
    let mut tasks: JoinSet<Record> = JoinSet::new();
    let mut records = Vec::with_capacity(requests.len());
    let mut interrupted = false;
    let mut lost = 0;
    for request in requests {
        tokio::select! {
            () = tokio::time::sleep_until(started + request.at) => {}
            () = interrupt.cancelled() => {
                interrupted = true;
                break;
            }
        }
        while tasks.len() >= MAX_IN_FLIGHT {
            if let Some(done) = tasks.join_next().await {
                keep(done, &mut records, &mut lost);
            }
        }
        while let Some(done) = tasks.try_join_next() {
            keep(done, &mut records, &mut lost);
        }
        let (client, resources, live) = (client.clone(), resources.clone(), live.clone());
        let base = stack.proxy_url(request.node).to_owned();
        let request = request.clone();
        live.sent();
        tasks.spawn(async move {
            let result = client
                .send(&base, &request, &resources)
                .await
                .map_err(|e| e.to_string());
            let record = Record { request, result };
            live.answered(&record);
            record
        });
    }
    let drained = tokio::time::timeout(SEGMENT_DRAIN_TIMEOUT.max(REQUEST_TIMEOUT), async {
        while let Some(done) = tasks.join_next().await {
            keep(done, &mut records, &mut lost);
        }
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
        return Err(DemoError::Stuck(tasks.len()));
    }
    let elapsed = started.elapsed();
    let after = scrape_all(stack, client).await?;
    records.sort_by_key(|r| r.request.seq);
    Ok(SegmentRun {
        phase,
        segment,
        planned: requests.len(),
        records,
        lost,
        settle: Duration::ZERO,
        elapsed,
        metrics: after.since(&before),
        debug_skew,
        interrupted,
    })
}

/// Keeps a finished task's record; a task that panicked (none should) counts as lost.
fn keep(done: Result<Record, tokio::task::JoinError>, records: &mut Vec<Record>, lost: &mut usize) {
    match done {
        Ok(record) => records.push(record),
        Err(error) => {
            tracing::error!(%error, "request task failed");
            *lost += 1;
        }
    }
}

/// The three proxies' metrics, summed.
async fn scrape_all(stack: &Stack, client: &Client) -> Result<Scrape, DemoError> {
    let mut total = Scrape::default();
    for node in &stack.nodes {
        let one = metrics::scrape(client, &node.admin_url)
            .await
            .map_err(|source| DemoError::Scrape {
                node: node.name.clone(),
                source,
            })?;
        total.add(&one);
    }
    Ok(total)
}

/// The live one-line progress on stderr: every second, the last second's numbers.
struct Live {
    window: Mutex<Window>,
    label: Mutex<String>,
    started: Instant,
    tty: bool,
}

#[derive(Default)]
struct Window {
    sent: u64,
    answered: u64,
    rerouted: u64,
    unavailable: u64,
    latencies_us: Vec<u64>,
    /// A progress line is on screen without its newline.
    open_line: bool,
}

impl Live {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            window: Mutex::new(Window::default()),
            label: Mutex::new(String::new()),
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
        })
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sent(&self) {
        self.window().sent += 1;
    }

    fn answered(&self, record: &Record) {
        let mut w = self.window();
        if let Ok(answer) = &record.result {
            w.answered += 1;
            if record.rerouted() {
                w.rerouted += 1;
            }
            if answer.status == 503 {
                w.unavailable += 1;
            }
            w.latencies_us
                .push(u64::try_from(answer.latency.as_micros()).unwrap_or(u64::MAX));
        }
    }

    fn set_label(&self, label: &str) {
        let mut l = self.label.lock().unwrap_or_else(PoisonError::into_inner);
        label.clone_into(&mut l);
    }

    /// A line of its own (ends the progress line on a terminal first).
    fn println(&self, line: &str) {
        let mut w = self.window();
        let mut err = std::io::stderr().lock();
        if w.open_line {
            let _ = writeln!(err);
            w.open_line = false;
        }
        let _ = writeln!(err, "{line}");
    }

    async fn tick(self: Arc<Self>, stop: CancellationToken) {
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            tokio::select! {
                _ = interval.tick() => self.print(),
                () = stop.cancelled() => return,
            }
        }
    }

    fn print(&self) {
        let label = self
            .label
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut w = self.window();
        let mut latencies = std::mem::take(&mut w.latencies_us);
        latencies.sort_unstable();
        let p99 = percentile(&latencies, 0.99).map_or_else(
            || "-".to_owned(),
            |us| format!("{:.1} ms", us as f64 / 1000.0),
        );
        let rerouted = if w.answered == 0 {
            0.0
        } else {
            100.0 * w.rerouted as f64 / w.answered as f64
        };
        let line = format!(
            "  [{:>3}s] {label:<16} {:>4} req/s  rerouted {rerouted:>5.1}%  503s {:>3}  p99 {p99}",
            self.started.elapsed().as_secs(),
            w.sent,
            w.unavailable,
        );
        (w.sent, w.answered, w.rerouted, w.unavailable) = (0, 0, 0, 0);
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
            w.open_line = true;
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn finish(&self) {
        let mut w = self.window();
        if w.open_line {
            let _ = writeln!(std::io::stderr());
            w.open_line = false;
        }
    }
}

/// Nearest-rank percentile of a sorted slice.
pub(crate) fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}
