//! Latency as the client met it, split by who answered: the picked node's API server, or a
//! peer's, one proxy-to-proxy hop further. mvproxy's own answers (discovery, 503s) are left
//! out: they say nothing about the hop.

use serde::Serialize;

use super::round3;
use crate::run::{Record, percentile};

/// Every answer's latency in microseconds, by who answered.
#[derive(Debug, Default)]
pub(crate) struct LatencyTally {
    local_us: Vec<u64>,
    peer_us: Vec<u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Latencies {
    /// Answered by the picked node's API server.
    pub(crate) local: Percentiles,
    /// Answered by another node's: one more hop, proxy to proxy.
    pub(crate) peer: Percentiles,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) count: u64,
    pub(crate) p50: Option<f64>,
    pub(crate) p95: Option<f64>,
    pub(crate) p99: Option<f64>,
}

impl LatencyTally {
    /// One request; a lost one has no latency.
    pub(crate) fn add(&mut self, r: &Record) {
        let Ok(answer) = &r.result else {
            return;
        };
        let us = u64::try_from(answer.latency.as_micros()).unwrap_or(u64::MAX);
        if r.local() {
            self.local_us.push(us);
        } else if r.rerouted() {
            self.peer_us.push(us);
        }
    }

    /// The nearest-rank percentiles, in milliseconds to the microsecond.
    pub(crate) fn finish(mut self) -> Latencies {
        self.local_us.sort_unstable();
        self.peer_us.sort_unstable();
        Latencies {
            local: percentiles(&self.local_us),
            peer: percentiles(&self.peer_us),
        }
    }
}

fn percentiles(sorted_us: &[u64]) -> Percentiles {
    let ms = |q| percentile(sorted_us, q).map(|us| round3(us as f64 / 1000.0));
    Percentiles {
        count: sorted_us.len() as u64,
        p50: ms(0.50),
        p95: ms(0.95),
        p99: ms(0.99),
    }
}

#[cfg(test)]
mod tests;
