//! The client's side of every request: sent, answered or lost, who answered, with what
//! status, and whether that is what the request's counterfactual says mvproxy must give.
//! Reroutes, the other way a request gets answered, are counted by [`super::reroutes`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::catalog::ApiResource;
use crate::client::Answer;
use crate::plan::{Expect, node_name};
use crate::run::{Record, SegmentRun};
use crate::workload::Verb;

/// How many contradicting answers the report shows in full.
const EXAMPLES: usize = 5;

/// Answers and losses, summed over segments.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    pub(crate) planned: u64,
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    /// Sent and never answered, and tasks that ended without a record.
    pub(crate) lost: u64,
    pub(crate) served_locally: u64,
    pub(crate) answered_by_mvproxy: u64,
    pub(crate) unavailable_503: u64,
    /// Requests for GVRs no server serves answered 404.
    pub(crate) true_404s: u64,
    /// Requests for GVRs no server serves, answered or not.
    pub(crate) no_server: u64,
    /// Requests sent that are not discovery.
    pub(crate) resource_requests: u64,
    pub(crate) discovery: DiscoveryCounts,
    pub(crate) status_codes: BTreeMap<String, u64>,
    pub(crate) unexpected: u64,
    pub(crate) unexpected_examples: Vec<Unexpected>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DiscoveryCounts {
    /// `GET /apis` (aggregated v2) sent.
    pub(crate) requests: u64,
    /// Answered `200` with the merged document.
    pub(crate) merged: u64,
    /// Answered `304` to the client's `If-None-Match`.
    pub(crate) not_modified: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unexpected {
    pub(crate) seq: u64,
    pub(crate) node: String,
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) expect: Expect,
    pub(crate) status: Option<u16>,
    pub(crate) answered_by: Option<String>,
    pub(crate) error: Option<String>,
}

impl Answers {
    /// A segment's planned requests, and those sent whose task left no record (lost).
    pub(crate) fn add_segment(&mut self, run: &SegmentRun) {
        self.planned += run.planned as u64;
        self.sent += (run.records.len() + run.lost) as u64;
        self.lost += run.lost as u64;
    }

    /// One request and its answer, or why there was none.
    pub(crate) fn add(&mut self, r: &Record, resources: &[ApiResource]) {
        if r.request.expect == Expect::TrueNotFound {
            self.no_server += 1;
        }
        let discovery = r.request.verb == Verb::Discovery;
        if discovery {
            self.discovery.requests += 1;
        } else {
            self.resource_requests += 1;
        }
        let Ok(answer) = &r.result else {
            self.lost += 1;
            self.note_unexpected(r, resources);
            return;
        };
        self.answered += 1;
        *self
            .status_codes
            .entry(answer.status.to_string())
            .or_default() += 1;
        if r.local() {
            self.served_locally += 1;
        } else if !r.rerouted() {
            self.answered_by_mvproxy += 1;
        }
        if answer.status == 503 {
            self.unavailable_503 += 1;
        }
        if r.request.expect == Expect::TrueNotFound && answer.status == 404 {
            self.true_404s += 1;
        }
        if discovery {
            match answer.status {
                200 => self.discovery.merged += 1,
                304 => self.discovery.not_modified += 1,
                _ => {}
            }
        }
        if !as_expected(r, answer) {
            self.note_unexpected(r, resources);
        }
    }

    fn note_unexpected(&mut self, r: &Record, resources: &[ApiResource]) {
        self.unexpected += 1;
        if self.unexpected_examples.len() >= EXAMPLES {
            return;
        }
        let (status, answered_by, error) = match &r.result {
            Ok(a) => (Some(a.status), a.answered_by.clone(), None),
            Err(e) => (None, None, Some(e.clone())),
        };
        self.unexpected_examples.push(Unexpected {
            seq: r.request.seq,
            node: node_name(r.request.node),
            method: if r.request.verb == Verb::Create {
                "POST"
            } else {
                "GET"
            },
            path: r.request.path(resources),
            expect: r.request.expect,
            status,
            answered_by,
            error,
        });
    }
}

/// Whether the answer is what the request's counterfactual says mvproxy must give.
fn as_expected(r: &Record, answer: &Answer) -> bool {
    let ok_status = answer.status < 400;
    match r.request.expect {
        Expect::Local => r.local() && ok_status,
        Expect::Reroute => r.rerouted() && ok_status,
        Expect::PeersDown => answer.answered_by.is_none() && answer.status == 503,
        Expect::TrueNotFound => r.local() && answer.status == 404,
        Expect::Discovery => answer.answered_by.is_none() && matches!(answer.status, 200 | 304),
    }
}

#[cfg(test)]
mod tests;
