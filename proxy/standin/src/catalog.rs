//! What one stand-in serves: its groups, versions and resources, looked up by request path.

use serde_json::Value;

use crate::discovery::{
    ApiGroupDiscovery, ApiResourceDiscovery, ApiVersionDiscovery, group_version,
};

/// The core group plus the `/apis` groups, in the order the document lists them.
#[derive(Debug)]
pub(super) struct Catalog {
    core: ApiGroupDiscovery,
    groups: Vec<ApiGroupDiscovery>,
}

/// A resource of one group-version, as the store and the handlers need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) resource: String,
    pub(super) kind: String,
    pub(super) namespaced: bool,
}

// === impl Catalog ===

impl Catalog {
    /// A core group inside the `/apis` document would be unreachable there, so it is dropped.
    pub(super) fn new(groups: Vec<ApiGroupDiscovery>, core: ApiGroupDiscovery) -> Self {
        let groups = groups
            .into_iter()
            .filter(|g| !g.name().is_empty())
            .collect();
        Self { core, groups }
    }

    /// The core group, served at `/api`.
    pub(super) fn core(&self) -> &ApiGroupDiscovery {
        &self.core
    }

    /// The groups served at `/apis`.
    pub(super) fn groups(&self) -> &[ApiGroupDiscovery] {
        &self.groups
    }

    /// A named group (`""` is core).
    pub(super) fn group(&self, name: &str) -> Option<&ApiGroupDiscovery> {
        if name.is_empty() {
            return Some(&self.core);
        }
        self.groups.iter().find(|g| g.name() == name)
    }

    /// A served group-version.
    pub(super) fn version(&self, group: &str, version: &str) -> Option<&ApiVersionDiscovery> {
        self.group(group)?
            .versions
            .iter()
            .find(|v| v.version == version)
    }

    /// A served resource, with its discovery entry.
    pub(super) fn resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<(Target, &ApiResourceDiscovery)> {
        let entry = self
            .version(group, version)?
            .resources
            .iter()
            .find(|r| r.resource == resource)?;
        let target = Target {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            kind: entry
                .response_kind
                .as_ref()
                .map(|k| k.kind.clone())
                .unwrap_or_default(),
            namespaced: entry.scope == "Namespaced",
        };
        Some((target, entry))
    }

    /// The target for seeding: the served resource, or, for one the discovery does not list,
    /// a namespaced resource without a kind (it can be stored but never requested).
    pub(super) fn target(&self, group: &str, version: &str, resource: &str) -> Target {
        self.resource(group, version, resource)
            .map(|(target, _)| target)
            .unwrap_or_else(|| Target {
                group: group.to_owned(),
                version: version.to_owned(),
                resource: resource.to_owned(),
                kind: String::new(),
                namespaced: true,
            })
    }
}

// === impl Target ===

impl Target {
    /// `apiVersion` of objects of this target.
    pub(super) fn api_version(&self) -> String {
        group_version(&self.group, &self.version)
    }

    /// `object` with the `kind` and `apiVersion` this group-version names it by.
    pub(super) fn present(&self, mut object: Value) -> Value {
        if let Some(map) = object.as_object_mut() {
            if !self.kind.is_empty() {
                map.insert("kind".to_owned(), self.kind.clone().into());
            }
            map.insert("apiVersion".to_owned(), self.api_version().into());
        }
        object
    }

    /// `resource.group`, or `resource` for core, as kube names it in error messages.
    pub(super) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}
