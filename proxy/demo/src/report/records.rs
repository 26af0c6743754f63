//! Hand-built records for the tallies' tests: a request for a GVR of the catalog, picked by
//! one node, and what answered it.

use std::time::Duration;

use crate::catalog::{self, ApiResource};
use crate::client::Answer;
use crate::plan::{Expect, node_name};
use crate::run::Record;
use crate::workload::{Request, Verb};
use mvproxy_core::discovery::side::Side;

/// Every resource of either release, as the workload indexes them.
pub(crate) fn resources() -> Vec<ApiResource> {
    catalog::resources()
}

/// The index of `gvr` (`group/version/resource`, core `v1/…`) in [`resources`].
pub(crate) fn index(gvr: &str) -> usize {
    resources()
        .iter()
        .position(|r| r.gvr.to_string() == gvr)
        .unwrap_or_else(|| panic!("{gvr} is in the catalog"))
}

/// A list of `gvr` (or `GET /apis` for `None`) sent to `node`, expected to meet `expect`.
pub(crate) fn request(seq: u64, node: usize, gvr: Option<&str>, expect: Expect) -> Request {
    Request {
        seq,
        at: Duration::ZERO,
        node,
        verb: if gvr.is_some() {
            Verb::List
        } else {
            Verb::Discovery
        },
        resource: gvr.map(index),
        expect,
        skew: None,
    }
}

/// The same request, its GVR on `side` of the skew.
pub(crate) fn in_skew(mut request: Request, side: Side) -> Request {
    request.skew = Some(side);
    request
}

/// `request` answered `status` after `micros`, by `by`'s API server (`None`: by mvproxy).
pub(crate) fn answered(request: Request, status: u16, by: Option<usize>, micros: u64) -> Record {
    Record {
        request,
        result: Ok(Answer {
            status,
            answered_by: by.map(node_name),
            latency: Duration::from_micros(micros),
        }),
    }
}

/// `request` never answered.
pub(crate) fn lost(request: Request, error: &str) -> Record {
    Record {
        request,
        result: Err(error.to_owned()),
    }
}
