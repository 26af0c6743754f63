//! Handles of the series every request records, cached by label set so that counting one is
//! an atomic add, not a hash of its labels under the family's lock.

use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};

use foldhash::fast::FixedState;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::histogram::Histogram;

use super::TraceLabels;

/// Handles of the series every request records, resolved once per label set: a request
/// then counts with an atomic add, where the family would hash its label set (SipHash over
/// its strings) under the family's lock, four times per request. The families involved never
/// remove a series, so a handle never goes stale. Series with a peer label are not cached
/// (their label sets are not a closed set); nor is any label set past [`HANDLE_CACHE_MAX`].
#[derive(Debug, Default)]
pub(super) struct HandleCache {
    /// `mvproxy_requests_total` without a peer, by route, reason, method and code.
    pub(super) requests: RwLock<HashMap<HandleKey, Counter, FixedState>>,
    /// `mvproxy_request_duration_seconds` without a peer, by route.
    pub(super) durations:
        RwLock<HashMap<HandleKey, HistogramWithExemplars<TraceLabels>, FixedState>>,
    /// `mvproxy_discovery_cache_lookups_total` and `..._lookup_duration_seconds`: hit, miss.
    pub(super) lookups: OnceLock<[(Counter, Histogram); 2]>,
}

/// Label sets cached in [`HandleCache`] per family; more go to the family each time.
const HANDLE_CACHE_MAX: usize = 1024;

/// The addresses of `&'static str` label values and the code. Two constants of equal text
/// may have different addresses: then one label set has two entries, both for its series.
type HandleKey = (usize, usize, usize, u16);

pub(super) fn key(
    route: &'static str,
    reason: &'static str,
    method: &'static str,
    code: u16,
) -> HandleKey {
    (
        route.as_ptr() as usize,
        reason.as_ptr() as usize,
        method.as_ptr() as usize,
        code,
    )
}

/// Records with the cached handle for `key`, or the family's (cached while there is room).
/// A cached handle is used under the read lock, not cloned out of it: a handle is an `Arc`, and
/// each count taken and dropped is two locked instructions more per request
/// (bench/PERF_NOTES.md, thirty-eighth round).
pub(super) fn cached<M, R>(
    cache: &RwLock<HashMap<HandleKey, M, FixedState>>,
    key: HandleKey,
    resolve: impl FnOnce() -> M,
    record: impl FnOnce(&M) -> R,
) -> R {
    let read = cache.read().unwrap_or_else(PoisonError::into_inner);
    if let Some(m) = read.get(&key) {
        return record(m);
    }
    let full = read.len() >= HANDLE_CACHE_MAX;
    drop(read);
    let m = resolve();
    let recorded = record(&m);
    if !full {
        cache
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, m);
    }
    recorded
}
