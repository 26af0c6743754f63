//! The requests mvproxy kept from a false 404: those the picked server's discovery lacks,
//! answered by a peer's API server (rerouted) or by mvproxy's own 503 when every server of
//! the GVR is down, beside what the counterfactual predicted for each.

use std::collections::BTreeMap;

use crate::catalog::ApiResource;
use crate::plan::Expect;
use crate::run::Record;

/// Reroutes and false 404s, summed over segments.
#[derive(Debug, Default)]
pub(crate) struct Reroutes {
    /// Answered by another node's API server.
    pub(crate) rerouted: u64,
    /// By the GVR's group (`core` for the core group).
    pub(crate) by_group: BTreeMap<String, u64>,
    /// By GVR (`group/version/resource`, core `v1/…`).
    pub(crate) by_gvr: BTreeMap<String, u64>,
    /// By the node whose API server answered.
    pub(crate) by_peer: BTreeMap<String, u64>,
    /// Requests that, without mvproxy, would have got a false 404.
    pub(crate) false_404s: u64,
    /// Of those, answered with anything but a 404.
    pub(crate) false_404s_avoided: u64,
    /// Of those, answered 404 all the same.
    pub(crate) false_404s_delivered: u64,
    /// Requests the counterfactual sends to a peer, by GVR.
    pub(crate) predicted_by_gvr: BTreeMap<String, u64>,
    /// Requests whose GVR only down servers serve: mvproxy must answer them 503 itself.
    pub(crate) predicted_peers_down: u64,
}

impl Reroutes {
    /// One request; `resource` is its GVR's (`None` for discovery).
    pub(crate) fn add(&mut self, r: &Record, resource: Option<&ApiResource>) {
        match r.request.expect {
            Expect::Reroute => {
                if let Some(g) = resource {
                    *self.predicted_by_gvr.entry(g.gvr.to_string()).or_default() += 1;
                }
            }
            Expect::PeersDown => self.predicted_peers_down += 1,
            _ => {}
        }
        let false_404 = r.request.expect.false_404();
        if false_404 {
            self.false_404s += 1;
        }
        let Ok(answer) = &r.result else {
            return;
        };
        if r.rerouted() {
            self.rerouted += 1;
            let group = resource.map_or("", |g| g.gvr.group.as_str());
            let group = if group.is_empty() { "core" } else { group };
            *self.by_group.entry(group.to_owned()).or_default() += 1;
            if let Some(g) = resource {
                *self.by_gvr.entry(g.gvr.to_string()).or_default() += 1;
            }
            if let Some(by) = &answer.answered_by {
                *self.by_peer.entry(by.clone()).or_default() += 1;
            }
        }
        if false_404 {
            if answer.status == 404 {
                self.false_404s_delivered += 1;
            } else {
                self.false_404s_avoided += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
