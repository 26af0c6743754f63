//! What one server serves, as last fetched: its groups, and the index of its GVRs.
//!
//! Read by the fetch that builds it and by the snapshot that routes with it, so it is neither
//! one's: the fetch does not depend on the snapshot.

use std::collections::{BTreeSet, HashSet};

use bytes::Bytes;

use super::side::ServerVersion;
use super::types::ApiGroupDiscovery;
use crate::classify::Gvr;

/// Groups compiled into kube-apiserver. A group-version that the local server serves outside
/// this set comes from a CRD or an APIService: upstream (1.36 `gv_exclusion_manager.go`)
/// keeps such group-versions local-only, neither routed to peers nor merged from them.
/// Discovery documents do not say where a group-version comes from, so this list stands in
/// for upstream's CRD and APIService informers.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// A group-version, `("", "v1")` for core.
pub type GroupVersion = (String, String);

/// What one server serves, as last fetched.
#[derive(Debug, Default)]
pub struct ServerView {
    /// The core group from `/api` (used for routing, never merged).
    pub core: Vec<ApiGroupDiscovery>,
    /// The groups from `/apis`, in the server's priority order.
    pub apis: Vec<ApiGroupDiscovery>,
    /// `/apis` exactly as the server sent it, when it spoke aggregated v2.
    pub apis_raw: Option<Bytes>,
    /// What the server's `/version` said, if it could be read (the skew's sides need it).
    pub version: Option<ServerVersion>,
    pub(super) gvrs: HashSet<Gvr>,
}

impl ServerView {
    /// Indexes the resources of `core` and `apis`.
    pub fn new(
        core: Vec<ApiGroupDiscovery>,
        apis: Vec<ApiGroupDiscovery>,
        apis_raw: Option<Bytes>,
    ) -> Self {
        let mut gvrs = HashSet::new();
        for g in core.iter().chain(&apis) {
            for v in &g.versions {
                for r in &v.resources {
                    gvrs.insert(Gvr::new(g.name(), &v.version, &r.resource));
                }
            }
        }
        Self {
            core,
            apis,
            apis_raw,
            version: None,
            gvrs,
        }
    }

    /// The view with the server's `/version`.
    pub fn with_version(mut self, version: Option<ServerVersion>) -> Self {
        self.version = version;
        self
    }

    /// Whether the server lists the resource.
    pub fn serves(&self, gvr: &Gvr) -> bool {
        self.gvrs.contains(gvr)
    }

    /// Number of GVRs served.
    pub fn gvr_count(&self) -> usize {
        self.gvrs.len()
    }

    /// Every GVR served.
    pub fn gvrs(&self) -> impl Iterator<Item = &Gvr> {
        self.gvrs.iter()
    }

    /// Whether the server serves the group at all (any version).
    pub fn serves_group(&self, group: &str) -> bool {
        self.apis.iter().any(|g| g.name() == group)
    }

    /// Whether it serves the group-version, or with no version the group at all.
    pub fn serves_gv_or_group(&self, group: &str, version: Option<&str>) -> bool {
        match version {
            Some(v) => self.serves_gv(group, v),
            None => self.serves_group(group),
        }
    }

    /// Whether the server serves the group-version.
    pub fn serves_gv(&self, group: &str, version: &str) -> bool {
        self.groups()
            .any(|g| g.name() == group && g.versions.iter().any(|v| v.version == version))
    }

    fn groups(&self) -> impl Iterator<Item = &ApiGroupDiscovery> {
        self.core.iter().chain(&self.apis)
    }

    /// Group-versions served from CRDs or APIServices (outside the built-in groups).
    pub(crate) fn extension_gvs(&self) -> impl Iterator<Item = GroupVersion> + '_ {
        self.apis
            .iter()
            .filter(|g| !BUILTIN_GROUPS.contains(&g.name()))
            .flat_map(|g| {
                g.versions
                    .iter()
                    .map(|v| (g.name().to_owned(), v.version.clone()))
            })
    }

    /// The view with every excluded group-version removed (and groups left empty dropped).
    pub(super) fn without(&self, excluded: &BTreeSet<GroupVersion>) -> ServerView {
        let filter = |groups: &[ApiGroupDiscovery]| -> Vec<ApiGroupDiscovery> {
            groups
                .iter()
                .filter_map(|g| {
                    let versions: Vec<_> = g
                        .versions
                        .iter()
                        .filter(|v| !excluded.contains(&(g.name().to_owned(), v.version.clone())))
                        .cloned()
                        .collect();
                    (!versions.is_empty()).then(|| ApiGroupDiscovery {
                        metadata: g.metadata.clone(),
                        versions,
                    })
                })
                .collect()
        };
        ServerView::new(filter(&self.core), filter(&self.apis), None)
            .with_version(self.version.clone())
    }
}
