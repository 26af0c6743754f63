//! The export thread: waits for a full batch or the schedule delay, encodes the batch
//! (`crate::otlp`), sends it ([`super::transport`]), and decides the batch's fate from the
//! answer: exported, dropped (counted by reason), or put back at the front of the queue to be
//! tried again after the schedule delay when its retries ran out. At shutdown it sends what
//! is queued within nine tenths of `OTEL_BSP_EXPORT_TIMEOUT` and counts what is left.
//!
//! While exports fail or spans are dropped, one warning per [`WARN_INTERVAL`] says how many
//! warnings it held back.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::Batching;
use super::Transport;
use super::queue::Shared;
use super::stats::{DropReason, Outcome};
use super::transport::Sent;

/// At most one warning per this interval while exports fail or spans are dropped.
const WARN_INTERVAL: Duration = Duration::from_secs(30);

/// Lets one warning through per interval, and counts the ones it held back.
#[derive(Debug)]
pub(super) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when a warning may be logged at `now`, `n` being how many were held back
    /// since the last one; `None` (and one more held back) otherwise.
    pub(super) fn permit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

/// The export thread's state: the queue it empties and the transport it sends on.
pub(super) struct Worker {
    shared: Arc<Shared>,
    client: Transport,
    delay: Duration,
    export_timeout: Duration,
    warn: Throttle,
}

impl Worker {
    pub(super) fn new(shared: Arc<Shared>, client: Transport, batching: &Batching) -> Self {
        Self {
            shared,
            client,
            delay: batching.schedule_delay,
            export_timeout: batching.export_timeout,
            warn: Throttle::new(WARN_INTERVAL),
        }
    }

    /// Exports batches until shutdown has sent what it could.
    pub(super) fn run(&mut self) {
        let mut batch = Vec::with_capacity(self.shared.max_batch);
        // After a batch whose retries ran out: wait the schedule delay, not for a full batch.
        let mut pause = false;
        let mut dropped_seen = 0;
        loop {
            let deadline = Instant::now() + self.delay;
            let stop = {
                let mut q = self.shared.lock();
                while q.stop.is_none() && (pause || q.spans.len() < self.shared.max_batch) {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    q = self
                        .shared
                        .wake
                        .wait_timeout(q, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                let n = q.spans.len().min(self.shared.max_batch);
                batch.extend(q.spans.drain(..n));
                q.in_flight = n;
                q.stop
            };
            pause = false;
            let queue_full = self.shared.stats.dropped_total(DropReason::QueueFull);
            if queue_full > dropped_seen
                && let Some(held) = self.warn.permit(Instant::now())
            {
                tracing::warn!(
                    dropped = queue_full - dropped_seen,
                    max_queue = self.shared.max_queue,
                    held_back_warnings = held,
                    "spans dropped: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full"
                );
                dropped_seen = queue_full;
            }
            if batch.is_empty() {
                if stop.is_some() {
                    return;
                }
                continue;
            }
            let n = batch.len() as u64;
            // At shutdown, every batch within nine tenths of shutdown's bound (the rest leaves
            // time to count and report what is left before `shutdown` stops waiting); else one
            // export's timeout.
            let until = stop.map_or_else(
                || Instant::now() + self.client.target.timeout,
                |at| at + self.export_timeout.mul_f64(0.9),
            );
            let stats = &self.shared.stats;
            match self.client.send(&mut batch, until, stats) {
                Sent::Accepted(a) => {
                    let rejected = a.rejected.min(n);
                    stats.exported(n - rejected);
                    if a.rejected > 0 || !a.message.is_empty() {
                        stats.request(Outcome::PartialSuccess);
                        stats.dropped(DropReason::Rejected, rejected);
                        if let Some(held) = self.warn.permit(Instant::now()) {
                            tracing::warn!(
                                rejected,
                                message = %a.message,
                                held_back_warnings = held,
                                "the collector rejected spans (partial success)"
                            );
                        }
                    } else {
                        stats.request(Outcome::Success);
                    }
                    batch.clear();
                }
                Sent::Refused(e) => {
                    stats.request(Outcome::Failure);
                    stats.dropped(DropReason::ExportFailed, n);
                    if let Some(held) = self.warn.permit(Instant::now()) {
                        tracing::warn!(error = %e, spans = n, held_back_warnings = held, "span export refused; spans dropped");
                    }
                    batch.clear();
                }
                Sent::GaveUp(e) => {
                    stats.request(Outcome::Failure);
                    if stop.is_some() {
                        let mut q = self.shared.lock();
                        let left = n + q.spans.len() as u64;
                        q.spans.clear();
                        q.in_flight = 0;
                        drop(q);
                        stats.dropped(DropReason::ExportFailed, left);
                        eprintln!(
                            "mvproxy: {left} span(s) not exported before OTEL_BSP_EXPORT_TIMEOUT: {e}"
                        );
                        return;
                    }
                    if let Some(held) = self.warn.permit(Instant::now()) {
                        tracing::warn!(error = %e, spans = n, held_back_warnings = held, "span export failing; spans kept in the queue and tried again");
                    }
                    let mut q = self.shared.lock();
                    for span in batch.drain(..).rev() {
                        q.spans.push_front(span);
                    }
                    q.in_flight = 0;
                    pause = true;
                    continue;
                }
            }
            self.shared.lock().in_flight = 0;
        }
    }
}

#[cfg(test)]
mod tests;
