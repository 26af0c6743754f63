//! mvproxy: a version-aware forwarding proxy for Kubernetes API servers during mixed-version
//! upgrades.
//!
//! While API servers of two releases run side by side, a request that lands on a server
//! lacking its group/version/resource gets a false `404`. mvproxy sits in front of each API
//! server and does what kube-apiserver's Mixed Version Proxy does: it routes such a request to
//! a peer that serves it, and merges every server's aggregated discovery.
//!
//! # Layout
//! One request meets these modules in this order (ARCHITECTURE.md has one line for each):
//! - `server` accepts the connection and runs the request through the rest; [`limits`] bounds
//!   what the client can make it hold; [`tls`] does the handshake;
//! - [`classify`]: the path as kube-apiserver's RequestInfo reads it;
//! - [`discovery`]: what each server serves (fetch, refresh, the routing snapshot, merge);
//! - [`route`]: the decision, a pure function of the request and the snapshot;
//! - [`openapi`]: `/openapi/v3` and `/openapi/v2` across the skew (documents routed by their
//!   group-version, the index and v2 merged once per snapshot);
//! - [`identity`]: what the API servers are told about who the client is;
//! - [`skew`]: which clients use GVRs that not every server serves, and on which side of the
//!   upgrade (`mvproxy_skew_requests_total`, `/debug/clients`); `spans`: the trace of it;
//! - [`upstream`]: streaming the request to the chosen upstream and its answer back;
//! - [`error`]: every failure mvproxy answers itself, as a Kubernetes `Status`;
//! - [`plumbing`]: the body and error types all of them pass around.
//!
//! Off the request path: [`peers`] finds peers in the cluster (identity Leases or
//! EndpointSlices), read from the local API server or through a [`kubeconfig`]; `admin` serves
//! health, readiness, metrics and `/debug/discovery`; [`config`] turns flags and YAML into a
//! validated [`config::Config`]; [`app`] starts everything from it.
//!
//! [`target`] knows, before the upgrade starts, what the release it heads for serves: the
//! skew's client recorder counts per client the requests that release will not serve.
//!
//! A module uses only the modules below it: there is no cycle of imports between them
//! (`scripts/check-layers.py` checks it in CI).
//!
//! The stand-in API server (`mvproxy-standin`, which shares no code with this crate) and
//! `mvproxy demo` (`mvproxy-demo`, which uses both) are crates of their own: nothing here can
//! reach them. The `mvproxy` binary (`proxy/cli`) parses flags and runs [`app`].
//!
//! What only this crate uses is `pub(crate)` (`unreachable_pub` keeps it so), and every item
//! other crates can reach is documented (`missing_docs`).

#![warn(missing_docs, unreachable_pub)]

pub(crate) mod admin;
pub mod app;
pub mod bearer;
pub mod classify;
pub mod config;
pub mod discovery;
pub mod error;
pub mod identity;
pub mod kubeconfig;
pub mod limits;
pub mod openapi;
pub mod peers;
pub mod plumbing;
pub mod route;
pub(crate) mod server;
pub mod skew;
pub(crate) mod spans;
pub mod target;
#[cfg(test)]
mod testkit;
pub mod tls;
pub mod upstream;
pub(crate) mod watch_end;
