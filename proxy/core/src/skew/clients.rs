//! The clients seen using GVRs in the skew, bounded: what `/debug/clients` shows and what the
//! `client` label of `mvproxy_skew_requests_total` may be. Its names are also the `client`
//! label of `mvproxy_client_requests_total` ([`Clients::name`]), so every client of a resource
//! takes a name, whatever it uses, and one client has one label in every family.
//!
//! Any client can send any `User-Agent`, so the set of names must not grow with them: the
//! first `max` distinct clients are tracked by name, every later one is counted as
//! [`OTHER_CLIENT`]. Per client, entries are keyed by GVR and side, which are bounded by what
//! the servers serve (only GVRs in the skew are recorded), so the whole registry is bounded by
//! `(max + 1) × skew × sides`; GVRs the target release lacks are bounded by what the catalog's
//! releases and the servers serve (`crate::target`), deprecated ones by what the servers serve
//! times the releases a warning can name ([`Key`]). A lock is taken only for requests so
//! recorded or named (lists and watches), and held for a map update.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use mvproxy_telemetry::metrics::{OTHER_CLIENT, REMOVED_IN_UNKNOWN};
use serde::Serialize;

use super::agent::Agent;

use crate::classify::Gvr;
use crate::discovery::side::{Release, Side};

/// Default of `--max-tracked-clients`.
pub const DEFAULT_MAX_CLIENTS: usize = 100;

/// How one client used one GVR on one side of the skew.
#[derive(Debug, Clone, PartialEq)]
pub struct Use {
    /// How many requests.
    pub requests: u64,
    /// The first one.
    pub first_seen: SystemTime,
    /// The last one.
    pub last_seen: SystemTime,
}

/// What one use is about: a GVR on a side of the skew, a GVR the target release does not
/// serve (`crate::target`), or a GVR an API server answered with a deprecation warning naming
/// the release that removes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// In the skew, on this side.
    Skew(Side, Gvr),
    /// Not served by the target release: whatever its configuration (`false`), or unless it is
    /// turned on (`true`).
    TargetMissing(Gvr, bool),
    /// Deprecated; removed in this release (`None`: the warning names none).
    Deprecated(Gvr, Option<Release>),
}

/// One client: what identifies it and what it used.
#[derive(Debug, Clone)]
struct Entry {
    program: String,
    version: Option<String>,
    uses: BTreeMap<Key, Use>,
}

/// The bounded set of clients.
#[derive(Debug)]
pub struct Clients {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    named: HashMap<Arc<str>, Entry>,
    other: Option<Entry>,
}

impl Clients {
    /// A registry that names at most `max` clients (at least one).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Records a request of `agent` for `gvr` on `side` at `now`; returns the `client` label
    /// it counts under (its name, or [`OTHER_CLIENT`] past the bound).
    pub fn record(&self, agent: &Agent, gvr: &Gvr, side: Side, now: SystemTime) -> Arc<str> {
        self.record_use(agent, Key::Skew(side, gvr.clone()), now)
    }

    /// Records a request of `agent` about `key` at `now`; returns the `client` label it counts
    /// under, as [`Clients::record`]: one bounded set of names for every kind of use.
    pub fn record_use(&self, agent: &Agent, key: Key, now: SystemTime) -> Arc<str> {
        let mut inner = self.lock();
        let (label, entry) = self.admit(&mut inner, agent);
        entry
            .uses
            .entry(key)
            .and_modify(|u| {
                u.requests += 1;
                u.first_seen = u.first_seen.min(now);
                u.last_seen = u.last_seen.max(now);
            })
            .or_insert(Use {
                requests: 1,
                first_seen: now,
                last_seen: now,
            });
        label
    }

    /// The `client` label of `agent`, from the same bounded set of names as
    /// [`Clients::record_use`], recording no use (`mvproxy_client_requests_total`): a
    /// client first seen here takes a name while there is room, so the label of one client
    /// is the same in every family.
    pub fn name(&self, agent: &Agent) -> Arc<str> {
        self.admit(&mut self.lock(), agent).0
    }

    /// The label of `agent` and its entry: its own while there is room for its name, else
    /// the overflow's.
    fn admit<'a>(&self, inner: &'a mut Inner, agent: &Agent) -> (Arc<str>, &'a mut Entry) {
        let name = agent.client();
        let known = inner
            .named
            .get_key_value(name.as_str())
            .map(|(k, _)| k.clone());
        let label: Arc<str> = match known {
            Some(key) => key,
            // An agent calling itself "other" is counted with the overflow, never apart.
            None if inner.named.len() < self.max && name != OTHER_CLIENT => {
                let key: Arc<str> = Arc::from(name);
                inner.named.insert(
                    key.clone(),
                    Entry {
                        program: agent.program.clone(),
                        version: None,
                        uses: BTreeMap::new(),
                    },
                );
                key
            }
            None => Arc::from(OTHER_CLIENT),
        };
        let entry = match inner.named.get_mut(&label) {
            Some(e) => {
                e.version.clone_from(&agent.version);
                e
            }
            None => inner.other.get_or_insert_with(|| Entry {
                program: OTHER_CLIENT.to_owned(),
                version: None,
                uses: BTreeMap::new(),
            }),
        };
        (label, entry)
    }

    /// Number of clients tracked by name (`other` not included), those only named too.
    pub fn named(&self) -> usize {
        self.lock().named.len()
    }

    /// The bound on named clients.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Every client with a use, in name order, `other` last; for `/debug/clients`. A client
    /// only named ([`Clients::name`]: it listed or watched, and used nothing else) has nothing
    /// to show there.
    pub fn report(&self) -> Vec<ClientReport> {
        let inner = self.lock();
        let mut named: Vec<(&Arc<str>, &Entry)> = inner
            .named
            .iter()
            .filter(|(_, e)| !e.uses.is_empty())
            .collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        let mut out: Vec<ClientReport> = named
            .into_iter()
            .map(|(name, e)| ClientReport::of(name, e))
            .collect();
        if let Some(other) = inner.other.as_ref().filter(|e| !e.uses.is_empty()) {
            out.push(ClientReport::of(OTHER_CLIENT, other));
        }
        out
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves counts, never a broken map.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One client in `/debug/clients`.
#[derive(Debug, Clone, Serialize)]
pub struct ClientReport {
    /// The `client` label.
    pub client: String,
    /// The program its `User-Agent` names.
    pub program: String,
    /// The version its last request's `User-Agent` carried.
    pub version: Option<String>,
    /// Requests for GVRs in the skew, in all.
    pub requests: u64,
    /// GVRs only older releases serve: these requests fail once the upgrade completes.
    pub breaks_after_upgrade: Vec<GvrUse>,
    /// GVRs only the newest release serves: these requests fail on a rollback.
    pub breaks_on_rollback: Vec<GvrUse>,
    /// GVRs some servers of one release serve and others do not.
    pub partial: Vec<GvrUse>,
    /// GVRs judged while some server's release was unknown.
    pub unknown: Vec<GvrUse>,
    /// GVRs the target release does not serve whatever its configuration: these requests fail
    /// once the upgrade to it completes (`use_version`: the version of the same group and
    /// resource it serves).
    pub breaks_on_target: Vec<GvrUse>,
    /// GVRs the target release serves only when turned on: these requests fail once the
    /// upgrade completes unless its servers turn them on (`runtime_config`: the entry that does).
    pub breaks_unless_enabled: Vec<GvrUse>,
    /// GVRs an API server answered with a deprecation warning (`removed_in`: the release
    /// the warning names).
    pub deprecated: Vec<GvrUse>,
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
}

/// One GVR a client used, on one side.
#[derive(Debug, Clone, Serialize)]
pub struct GvrUse {
    /// `group/version/resource` (core: `v1/pods`).
    pub gvr: String,
    /// The group (`""` for core).
    pub group: String,
    /// The version.
    pub version: String,
    /// The resource.
    pub resource: String,
    /// How many requests.
    pub requests: u64,
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
    /// In `breaks_on_target` and `breaks_unless_enabled`: the version of this group and
    /// resource the target serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_version: Option<String>,
    /// In `breaks_unless_enabled`: the target's `--runtime-config` entry that turns it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<String>,
    /// In `deprecated`: the release the warning says removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_in: Option<String>,
}

impl ClientReport {
    fn of(name: &str, e: &Entry) -> Self {
        let mut r = ClientReport {
            client: name.to_owned(),
            program: e.program.clone(),
            version: e.version.clone(),
            requests: 0,
            breaks_after_upgrade: Vec::new(),
            breaks_on_rollback: Vec::new(),
            partial: Vec::new(),
            unknown: Vec::new(),
            breaks_on_target: Vec::new(),
            breaks_unless_enabled: Vec::new(),
            deprecated: Vec::new(),
            first_seen: f64::INFINITY,
            last_seen: 0.0,
        };
        for (key, u) in &e.uses {
            let first = unix(u.first_seen);
            let last = unix(u.last_seen);
            let gvr = match key {
                Key::Skew(_, gvr) | Key::TargetMissing(gvr, _) | Key::Deprecated(gvr, _) => gvr,
            };
            // The skew's requests are the client's total; the other kinds count the same
            // requests again from another angle.
            if let Key::Skew(..) = key {
                r.requests += u.requests;
            }
            r.first_seen = r.first_seen.min(first);
            r.last_seen = r.last_seen.max(last);
            let mut item = GvrUse {
                gvr: gvr.to_string(),
                group: gvr.group.as_str().to_owned(),
                version: gvr.version.as_str().to_owned(),
                resource: gvr.resource.as_str().to_owned(),
                requests: u.requests,
                first_seen: first,
                last_seen: last,
                use_version: None,
                runtime_config: None,
                removed_in: None,
            };
            match key {
                Key::Skew(Side::OldOnly, _) => r.breaks_after_upgrade.push(item),
                Key::Skew(Side::NewOnly, _) => r.breaks_on_rollback.push(item),
                Key::Skew(Side::Partial, _) => r.partial.push(item),
                Key::Skew(Side::Unknown, _) => r.unknown.push(item),
                Key::TargetMissing(_, false) => r.breaks_on_target.push(item),
                Key::TargetMissing(gvr, true) => {
                    item.runtime_config = Some(crate::target::runtime_config(gvr));
                    r.breaks_unless_enabled.push(item);
                }
                Key::Deprecated(_, removed_in) => {
                    item.removed_in = Some(
                        removed_in.map_or_else(|| REMOVED_IN_UNKNOWN.to_owned(), |r| r.to_string()),
                    );
                    r.deprecated.push(item);
                }
            }
        }
        if !r.first_seen.is_finite() {
            r.first_seen = 0.0;
        }
        r
    }
}

pub(super) fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::agent::parse;
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn counts_per_client_gvr_and_side_with_first_and_last_seen() {
        let clients = Clients::new(10);
        let kcm = parse(b"kube-controller-manager/v1.31.2 (linux/amd64) kubernetes/abc123/system:serviceaccount:kube-system:generic-garbage-collector");
        let fs = Gvr::new("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas");
        let rc = Gvr::new("resource.k8s.io", "v1beta2", "resourceclaims");
        for t in [30, 10, 20] {
            clients.record(&kcm, &fs, Side::OldOnly, at(t));
        }
        let label = clients.record(&kcm, &rc, Side::NewOnly, at(40));
        assert_eq!(
            &*label,
            "kube-controller-manager (sa kube-system/generic-garbage-collector)"
        );
        let report = clients.report();
        assert_eq!(report.len(), 1);
        let r = &report[0];
        assert_eq!(r.requests, 4);
        assert_eq!(r.version.as_deref(), Some("v1.31.2"));
        assert_eq!((r.first_seen, r.last_seen), (10.0, 40.0));
        assert_eq!(r.breaks_after_upgrade.len(), 1);
        let u = &r.breaks_after_upgrade[0];
        assert_eq!(u.gvr, "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas");
        assert_eq!((u.requests, u.first_seen, u.last_seen), (3, 10.0, 30.0));
        assert_eq!(
            r.breaks_on_rollback[0].gvr,
            "resource.k8s.io/v1beta2/resourceclaims"
        );
        assert!(r.partial.is_empty() && r.unknown.is_empty());
    }

    #[test]
    fn ten_thousand_distinct_agents_stay_within_the_bound() {
        let max = DEFAULT_MAX_CLIENTS;
        let clients = Clients::new(max);
        let gvr = Gvr::new("flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas");
        let mut labels = std::collections::HashSet::new();
        for i in 0..10_000 {
            let ua = format!("operator-{i}/v1.0.{i} (linux/amd64) kubernetes/abc");
            let label = clients.record(&parse(ua.as_bytes()), &gvr, Side::OldOnly, at(i));
            labels.insert(label.to_string());
        }
        assert_eq!(clients.named(), max);
        assert_eq!(labels.len(), max + 1, "named clients and `other`");
        assert!(labels.contains(OTHER_CLIENT));
        let report = clients.report();
        assert_eq!(report.len(), max + 1);
        assert_eq!(report.last().map(|r| r.client.as_str()), Some(OTHER_CLIENT));
        let total: u64 = report.iter().map(|r| r.requests).sum();
        assert_eq!(total, 10_000, "no request lost to the bound");
        assert_eq!(report.last().map(|r| r.requests), Some(10_000 - max as u64));
        // a client seen before the bound keeps its name afterwards
        let first = parse(b"operator-0/v1.0.0 (linux/amd64) kubernetes/abc");
        assert_eq!(
            &*clients.record(&first, &gvr, Side::OldOnly, at(1)),
            "operator-0"
        );
    }
}
