//! Legacy discovery of one group or group-version, merged where peers serve it too.
//!
//! A client on legacy discovery (client-go's `ServerGroupsAndResources` with `WithLegacy()`,
//! older kubectl, the Python client) reads `/apis`, then `/apis/{group}` and
//! `/apis/{group}/{version}` one by one. Upstream's in-tree proxy merges only the aggregated
//! `/apis` (KEP-4020,
//! <https://github.com/kubernetes/enhancements/tree/master/keps/sig-api-machinery/4020-unknown-version-interoperability-proxy>);
//! its handlers for a single group or group-version answer from the local server
//! (k8s.io/apiserver kubernetes-1.36.0, `pkg/endpoints/discovery/group.go` and
//! `version.go`). So where both releases serve a group-version with different resources (1.36
//! adds `mutatingadmissionpolicies` to `admissionregistration.k8s.io/v1`), such a client
//! concludes that a resource the merged `/apis` lists does not exist.
//!
//! mvproxy answers those documents itself, built from the same merge as `/apis`
//! ([`super::merge`]), so that every client sees the same resources whichever discovery it
//! speaks: a group's versions and preferred version as the merged `/apis` orders them, a
//! group-version's resources as the merged `/apis` describes them, through client-go's own
//! conversion ([`super::legacy`]). Only documents that differ from the local server's are
//! kept; any other passes through from the local server untouched. The aggregated form
//! carries no `storageVersionHash`, so a merged resource list has none (client-go's
//! aggregated discovery drops it too); an unmerged one keeps the local server's.
//!
//! `/api/v1` is merged the same way from the servers' core groups (a release that adds or
//! drops a core resource), which upstream leaves out of the `/apis` merge.

use std::collections::HashMap;

use bytes::Bytes;

use super::legacy;
use super::merge::{self, Merged};
use super::types::{ApiGroupDiscovery, ApiVersionDiscovery};

/// A merged document as served: its JSON and quoted `ETag`.
#[derive(Debug, Clone)]
pub struct Doc {
    /// The JSON body.
    pub body: Bytes,
    /// Its quoted `ETag` (the SHA-512 of the body, as for `/apis`).
    pub etag: String,
}

impl Doc {
    fn of<T: serde::Serialize>(value: &T) -> Option<Self> {
        let body = serde_json::to_vec(value).ok()?;
        let etag = merge::etag_of(&body);
        Some(Self {
            body: Bytes::from(body),
            etag,
        })
    }
}

/// One server's groups: its core group (`/api`) and its `/apis` groups.
#[derive(Debug, Clone, Copy)]
pub struct Groups<'a> {
    /// The server's ID, which orders the merge.
    pub id: &'a str,
    /// The core group (from `/api`).
    pub core: &'a [ApiGroupDiscovery],
    /// The groups of `/apis`.
    pub apis: &'a [ApiGroupDiscovery],
}

/// The merged legacy documents of one snapshot that differ from the local server's own.
#[derive(Debug, Default)]
pub struct GroupDocs {
    groups: HashMap<String, Doc>,
    versions: HashMap<(String, String), Doc>,
}

impl GroupDocs {
    /// Merges `local` with `peers` (group-version exclusion already applied to the peers)
    /// and keeps the documents of groups and group-versions the local server serves whose
    /// merged form differs from its own.
    pub fn build(local: Groups<'_>, peers: &[Groups<'_>]) -> Self {
        let mut docs = Self::default();
        let apis: Vec<(&str, &[ApiGroupDiscovery])> =
            peers.iter().map(|p| (p.id, p.apis)).collect();
        if let Merged::Changed(merged) = merge::merge(local.id, local.apis, &apis) {
            docs.add_changed(local.apis, &merged, true);
        }
        let core: Vec<(&str, &[ApiGroupDiscovery])> =
            peers.iter().map(|p| (p.id, p.core)).collect();
        if let Merged::Changed(merged) = merge::merge(local.id, local.core, &core) {
            docs.add_changed(local.core, &merged, false);
        }
        docs
    }

    /// The merged `APIGroup` of `/apis/{group}`, when it differs from the local server's.
    pub fn group(&self, group: &str) -> Option<&Doc> {
        self.groups.get(group)
    }

    /// The merged `APIResourceList` of `/apis/{group}/{version}` (or `/api/{version}` for
    /// the core group `""`), when it differs from the local server's.
    pub fn version(&self, group: &str, version: &str) -> Option<&Doc> {
        self.versions.get(&(group.to_owned(), version.to_owned()))
    }

    /// Whether no document differs: every legacy request passes through.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.versions.is_empty()
    }

    fn add_changed(
        &mut self,
        local: &[ApiGroupDiscovery],
        merged: &[ApiGroupDiscovery],
        with_group_docs: bool,
    ) {
        for group in merged {
            let name = group.name();
            // Only what the local server serves: the rest is routed to a peer that serves it.
            let Some(own) = local.iter().find(|g| g.name() == name) else {
                continue;
            };
            let merged_group = legacy::api_group(group);
            if with_group_docs
                && merged_group != legacy::api_group(own)
                && let Some(doc) = Doc::of(&merged_group)
            {
                self.groups.insert(name.to_owned(), doc);
            }
            for version in &group.versions {
                let Some(own_version) = own.versions.iter().find(|v| v.version == version.version)
                else {
                    continue;
                };
                if let Some(doc) = changed_list(name, own_version, version) {
                    self.versions
                        .insert((name.to_owned(), version.version.clone()), doc);
                }
            }
        }
    }
}

fn changed_list(
    group: &str,
    own: &ApiVersionDiscovery,
    merged: &ApiVersionDiscovery,
) -> Option<Doc> {
    let list = legacy::resource_list(group, merged);
    (list != legacy::resource_list(group, own))
        .then(|| Doc::of(&list))
        .flatten()
}

#[cfg(test)]
mod tests;
