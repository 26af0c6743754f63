//! Deletions that wait on a controller of another release: which kube-controller-manager
//! releases are running, and which objects a `DELETE` left held by a finalizer none of them
//! removes ([`super::finalizers`]).
//!
//! The controller-manager's release is read from its own requests: client-go's `User-Agent` is
//! `kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/<commit>/<controller>`. Every
//! controller-manager renews its leader-election Lease, but only the leader's controllers
//! write anything else, so a release counts as running while a controller-manager of it made
//! a write other than to a Lease within the last [`WINDOW`]: during a handover both may count
//! for a while, and a deletion is judged waiting only when none of them removes the finalizer.
//! When no controller-manager talks through this proxy (kubeadm's talk to their API server
//! directly), the API servers' releases stand in for it: kubeadm runs a controller-manager of
//! each server's release beside it, and any of them may lead, so a deletion is judged waiting
//! when some server's release lacks the controller.
//!
//! Both lists are bounded: releases by [`MAX_RELEASES`], waiting objects by [`MAX_WAITING`]
//! (newest kept). A lock is taken for a controller-manager's writes and for a `DELETE` of a
//! resource the catalog names, and held for a map update.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::agent;
use super::deleted::Deleted;
use super::finalizers::{self, Finalizer};
use crate::classify::Gvr;
use crate::discovery::side::Release;

/// How long after its last write a controller-manager's release counts as running.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Controller-manager releases remembered at most (the oldest write is forgotten first).
pub const MAX_RELEASES: usize = 8;
/// Waiting deletions listed at most (the oldest is forgotten first).
pub const MAX_WAITING: usize = 100;
/// The program name kube-controller-manager's clients send.
pub const CONTROLLER_MANAGER: &[u8] = b"kube-controller-manager/";

/// What the running controller-manager releases were judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgedBy {
    /// Controller-managers' writes through this proxy.
    ControllerManagers,
    /// The API servers' releases (no controller-manager wrote through this proxy lately).
    ApiServers,
}

/// One object whose deletion waits, in `/debug/clients`.
#[derive(Debug, Clone, Serialize)]
pub struct Waiting {
    /// Its namespace (`""`: cluster-scoped).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its group.
    pub group: String,
    /// The version it was deleted through.
    pub version: String,
    /// Its resource.
    pub resource: String,
    /// The finalizer that holds it.
    pub finalizer: &'static str,
    /// The controller that removes the finalizer.
    pub controller: &'static str,
    /// The releases whose controller-manager runs that controller (`1.36+`).
    pub removed_by_release: String,
    /// The controller-manager releases running when it was last deleted.
    pub controller_manager_releases: Vec<String>,
    /// What those releases were judged by.
    pub judged_by: JudgedBy,
    /// `DELETE` responses that showed it waiting.
    pub deletes: u64,
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
}

/// A controller-manager release seen writing, in `/debug/clients`.
#[derive(Debug, Clone, Serialize)]
pub struct ManagerReport {
    /// `1.35`.
    pub release: String,
    /// The version its last write's `User-Agent` carried (`v1.35.4`).
    pub version: String,
    /// Unix seconds.
    pub last_write: f64,
    /// Whether that write is within [`WINDOW`].
    pub running: bool,
}

/// The controller-manager releases seen and the waiting deletions.
#[derive(Debug, Default)]
pub struct Deletions {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    managers: BTreeMap<Release, (String, SystemTime)>,
    waiting: VecDeque<Waiting>,
}

/// Whether a request of `verb` on `resource` is a write that shows its controller-manager
/// leads (anything but a read, or a Lease).
pub fn is_leader_write(verb: &str, resource: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch" | "") && resource != "leases"
}

/// Whether any object of `gvr`'s group and resource can hold a finalizer of the catalog: only
/// their `DELETE` responses are looked at.
pub fn watched(gvr: &Gvr) -> bool {
    finalizers::CATALOG
        .iter()
        .any(|f| f.group == gvr.group && f.resource == gvr.resource)
}

impl Deletions {
    /// Records a leader's write by the controller-manager whose `User-Agent` is `user_agent`.
    pub fn manager_wrote(&self, user_agent: &[u8], now: SystemTime) {
        let Some(version) = agent::parse(user_agent).version else {
            return;
        };
        let Some(release) = Release::from_version_info(&version, "", "") else {
            return;
        };
        let mut inner = self.lock();
        inner.managers.insert(release, (version, now));
        if inner.managers.len() > MAX_RELEASES
            && let Some(oldest) = inner
                .managers
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(r, _)| *r)
        {
            inner.managers.remove(&oldest);
        }
    }

    /// Judges the objects a `DELETE` of `gvr` answered with, at `now`, `servers` being the API
    /// servers' releases; records and returns the waiting ones' finalizers.
    pub fn deleted(
        &self,
        gvr: &Gvr,
        objects: &[Deleted],
        servers: &[Release],
        now: SystemTime,
    ) -> Vec<&'static Finalizer> {
        let mut inner = self.lock();
        let running: Vec<Release> = inner
            .managers
            .iter()
            .filter(|(_, (_, t))| now.duration_since(*t).is_ok_and(|d| d <= WINDOW))
            .map(|(r, _)| *r)
            .collect();
        let (judged_by, releases) = if running.is_empty() {
            (JudgedBy::ApiServers, servers.to_vec())
        } else {
            (JudgedBy::ControllerManagers, running)
        };
        let waits = |f: &Finalizer| match judged_by {
            JudgedBy::ControllerManagers => !releases.iter().any(|r| f.removed_by(*r)),
            JudgedBy::ApiServers => releases.iter().any(|r| !f.removed_by(*r)),
        };
        let mut found = Vec::new();
        for object in objects.iter().filter(|o| o.pending) {
            for f in object
                .finalizers
                .iter()
                .filter_map(|name| finalizers::lookup(&gvr.group, &gvr.resource, name))
                .filter(|f| waits(f))
            {
                found.push(f);
                inner.note(gvr, object, f, judged_by, &releases, now);
            }
        }
        found
    }

    /// The controller-manager releases seen, newest release first, and the waiting deletions,
    /// newest first.
    pub fn report(&self, now: SystemTime) -> (Vec<ManagerReport>, Vec<Waiting>) {
        let inner = self.lock();
        let managers = inner
            .managers
            .iter()
            .rev()
            .map(|(r, (version, t))| ManagerReport {
                release: r.to_string(),
                version: version.clone(),
                last_write: super::clients::unix(*t),
                running: now.duration_since(*t).is_ok_and(|d| d <= WINDOW),
            })
            .collect();
        (managers, inner.waiting.iter().rev().cloned().collect())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn note(
        &mut self,
        gvr: &Gvr,
        object: &Deleted,
        f: &'static Finalizer,
        judged_by: JudgedBy,
        releases: &[Release],
        now: SystemTime,
    ) {
        let at = super::clients::unix(now);
        let same = |w: &Waiting| {
            w.finalizer == f.name
                && w.name == object.name
                && w.namespace == object.namespace
                && w.group == gvr.group
                && w.resource == gvr.resource
        };
        let mut entry = match self.waiting.iter().position(same) {
            Some(i) => self.waiting.remove(i),
            None => None,
        }
        .unwrap_or_else(|| Waiting {
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            group: gvr.group.as_str().to_owned(),
            version: gvr.version.as_str().to_owned(),
            resource: gvr.resource.as_str().to_owned(),
            finalizer: f.name,
            controller: f.controller,
            removed_by_release: f.releases(),
            controller_manager_releases: Vec::new(),
            judged_by,
            deletes: 0,
            first_seen: at,
            last_seen: at,
        });
        gvr.version.as_str().clone_into(&mut entry.version);
        entry.controller_manager_releases = releases.iter().map(Release::to_string).collect();
        entry.judged_by = judged_by;
        entry.deletes += 1;
        entry.last_seen = at;
        self.waiting.push_back(entry);
        while self.waiting.len() > MAX_WAITING {
            self.waiting.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KCM_135: &[u8] =
        b"kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abc/namespace-controller";
    const KCM_136: &[u8] =
        b"kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/def/podgroup-protection-controller";
    const FINALIZER: &str = "scheduling.k8s.io/podgroup-protection";

    fn podgroups() -> Gvr {
        Gvr::new("scheduling.k8s.io", "v1alpha2", "podgroups")
    }

    fn pending(name: &str) -> Deleted {
        Deleted {
            namespace: "team-a".into(),
            name: name.into(),
            pending: true,
            finalizers: vec!["example.com/other".into(), FINALIZER.into()],
        }
    }

    fn r(minor: u32) -> Release {
        Release { major: 1, minor }
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000 + secs)
    }

    #[test]
    fn a_podgroup_waits_while_only_a_1_35_controller_manager_writes() {
        let d = Deletions::default();
        d.manager_wrote(KCM_135, t(0));
        let found = d.deleted(&podgroups(), &[pending("train-1")], &[r(35), r(36)], t(10));
        assert_eq!(
            found.iter().map(|f| f.name).collect::<Vec<_>>(),
            [FINALIZER]
        );
        // deleted again: one line, two deletes
        d.deleted(&podgroups(), &[pending("train-1")], &[r(35), r(36)], t(20));
        let (managers, waiting) = d.report(t(30));
        assert_eq!(waiting.len(), 1);
        let w = &waiting[0];
        assert_eq!(
            (w.namespace.as_str(), w.name.as_str(), w.deletes),
            ("team-a", "train-1", 2)
        );
        assert_eq!(w.removed_by_release, "1.36+");
        assert_eq!(w.controller, "podgroup-protection-controller");
        assert_eq!(w.controller_manager_releases, ["1.35"]);
        assert_eq!(w.judged_by, JudgedBy::ControllerManagers);
        assert_eq!(managers[0].version, "v1.35.4");
        assert!(managers[0].running);
    }

    #[test]
    fn once_a_1_36_controller_manager_writes_nothing_waits() {
        let d = Deletions::default();
        d.manager_wrote(KCM_135, t(0));
        d.manager_wrote(KCM_136, t(5));
        assert!(
            d.deleted(&podgroups(), &[pending("a")], &[r(36)], t(10))
                .is_empty()
        );
        // the 1.36 one stopped writing long ago: the 1.35 one leads
        d.manager_wrote(KCM_135, t(2000));
        assert_eq!(
            d.deleted(&podgroups(), &[pending("a")], &[r(36)], t(2001))
                .len(),
            1
        );
    }

    #[test]
    fn without_controller_managers_the_servers_releases_are_judged() {
        let d = Deletions::default();
        assert_eq!(
            d.deleted(&podgroups(), &[pending("a")], &[r(35), r(36)], t(0))
                .len(),
            1
        );
        assert!(
            d.deleted(&podgroups(), &[pending("b")], &[r(36), r(37)], t(0))
                .is_empty()
        );
        assert_eq!(d.report(t(0)).1[0].judged_by, JudgedBy::ApiServers);
    }

    #[test]
    fn only_pending_deletions_of_the_protected_resource_are_recorded() {
        let d = Deletions::default();
        d.manager_wrote(KCM_135, t(0));
        let mut done = pending("done");
        done.pending = false;
        assert!(d.deleted(&podgroups(), &[done], &[], t(1)).is_empty());
        let pods = Gvr::new("", "v1", "pods");
        assert!(d.deleted(&pods, &[pending("p")], &[], t(1)).is_empty());
        assert!(watched(&podgroups()));
        assert!(!watched(&pods));
    }

    #[test]
    fn both_lists_stay_bounded() {
        let d = Deletions::default();
        for minor in 0..(MAX_RELEASES as u64 + 5) {
            let ua = format!("kube-controller-manager/v1.{minor}.0 (linux/amd64) kubernetes/x");
            d.manager_wrote(ua.as_bytes(), t(minor));
        }
        d.manager_wrote(b"kube-controller-manager/not-a-version", t(99));
        for i in 0..(MAX_WAITING + 7) {
            d.deleted(&podgroups(), &[pending(&format!("pg-{i}"))], &[], t(100));
        }
        let (managers, waiting) = d.report(t(100));
        assert_eq!(managers.len(), MAX_RELEASES);
        assert_eq!(waiting.len(), MAX_WAITING);
        assert_eq!(waiting[0].name, format!("pg-{}", MAX_WAITING + 6));
    }

    #[test]
    fn leases_and_reads_do_not_show_a_leader() {
        assert!(!is_leader_write("update", "leases"));
        assert!(!is_leader_write("list", "podgroups"));
        assert!(is_leader_write("patch", "podgroups"));
        assert!(is_leader_write("create", "events"));
    }
}
