//! Serde types for the discovery documents mvproxy reads and writes.
//!
//! Aggregated discovery (`apidiscovery.k8s.io/v2`, and `v2beta1` which has the same shape) is
//! what every release since 1.26 serves at `/api` and `/apis`; the legacy types (`APIVersions`,
//! `APIGroupList`, `APIGroup`, `APIResourceList`) are what older releases serve and what
//! older clients ask for. Only the fields Kubernetes defines are kept: a document is re-encoded
//! only when mvproxy merges it, and then the field set is the upstream one. Fields are declared
//! in alphabetical order so that encoding matches the key order of real servers' documents.

use serde::{Deserialize, Serialize};

/// Media-type parameters of aggregated discovery, shared by fetch, negotiation and the stand-in.
pub const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";
/// The list kind named in the `as=` media-type parameter.
pub const AGGREGATED_KIND: &str = "APIGroupDiscoveryList";
/// `Content-Type` of a v2 aggregated discovery response (upstream never echoes `profile`).
pub const CONTENT_TYPE_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// `Content-Type` of a v2beta1 aggregated discovery response.
pub const CONTENT_TYPE_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// The `Accept` a peer-aware client sends to see one server only (client-go's
/// `discovery/discovery_client.go` with `NoPeerDiscovery`, plus
/// v2beta1 and plain JSON so that every release answers something mvproxy can read).
pub const ACCEPT_NOPEER: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// `APIGroupDiscoveryList`: every group a server serves, in its priority order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiGroupDiscoveryList {
    /// `apidiscovery.k8s.io/v2` (or `v2beta1`).
    #[serde(rename = "apiVersion", default = "default_list_api_version")]
    pub api_version: String,
    /// The groups, in priority order.
    #[serde(default)]
    pub items: Vec<ApiGroupDiscovery>,
    /// `APIGroupDiscoveryList`.
    #[serde(default = "default_list_kind")]
    pub kind: String,
    /// Empty.
    #[serde(default)]
    pub metadata: ListMeta,
}

fn default_list_api_version() -> String {
    format!("{AGGREGATED_GROUP}/v2")
}

fn default_list_kind() -> String {
    AGGREGATED_KIND.to_owned()
}

impl ApiGroupDiscoveryList {
    /// A v2 list holding `items`.
    pub fn v2(items: Vec<ApiGroupDiscovery>) -> Self {
        Self {
            api_version: default_list_api_version(),
            items,
            kind: default_list_kind(),
            metadata: ListMeta::default(),
        }
    }
}

/// `ListMeta`: discovery lists never set any of its fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListMeta {}

/// `APIGroupDiscovery`: one group and its versions, preferred first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiGroupDiscovery {
    /// `metadata.name` is the group.
    pub metadata: ObjectMeta,
    /// Its versions, preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<ApiVersionDiscovery>,
}

impl ApiGroupDiscovery {
    /// The group name (`""` for core).
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// The only `ObjectMeta` field discovery sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The name (the group, `""` for core).
    #[serde(default)]
    pub name: String,
}

/// `APIVersionDiscovery`: one version of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiVersionDiscovery {
    /// `Current` or `Stale` (a server that could not refresh an aggregated API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<String>,
    /// The resources served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApiResourceDiscovery>,
    /// The version.
    pub version: String,
}

/// `APIResourceDiscovery`: one resource of a group-version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiResourceDiscovery {
    /// Categories (`all`, …) `kubectl get` expands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// The resource (plural).
    pub resource: String,
    /// The kind of what a request returns.
    #[serde(
        rename = "responseKind",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub response_kind: Option<GroupVersionKind>,
    /// `Namespaced` or `Cluster`.
    pub scope: String,
    /// Short names (`po`, `deploy`, …).
    #[serde(rename = "shortNames", default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// The singular name.
    #[serde(rename = "singularResource", default)]
    pub singular_resource: String,
    /// Its subresources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<ApiSubresourceDiscovery>,
    /// The verbs it supports.
    #[serde(default)]
    pub verbs: Vec<String>,
}

/// `APISubresourceDiscovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiSubresourceDiscovery {
    /// The kinds a request may send.
    #[serde(
        rename = "acceptedTypes",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub accepted_types: Vec<GroupVersionKind>,
    /// The kind of what a request returns.
    #[serde(
        rename = "responseKind",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub response_kind: Option<GroupVersionKind>,
    /// The subresource (`status`, `scale`, …).
    pub subresource: String,
    /// The verbs it supports.
    #[serde(default)]
    pub verbs: Vec<String>,
}

/// `GroupVersionKind`; empty group and version mean "the containing group-version".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// The group (empty: the containing one).
    #[serde(default)]
    pub group: String,
    /// The kind.
    #[serde(default)]
    pub kind: String,
    /// The version (empty: the containing one).
    #[serde(default)]
    pub version: String,
}

/// Legacy `APIVersions`, served at `/api`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiVersions {
    /// `APIVersions`.
    #[serde(default = "api_versions_kind")]
    pub kind: String,
    /// The core versions (`v1`).
    #[serde(default)]
    pub versions: Vec<String>,
    /// Where clients in each CIDR reach the server.
    #[serde(rename = "serverAddressByClientCIDRs", default)]
    pub server_address_by_client_cidrs: Vec<serde_json::Value>,
}

fn api_versions_kind() -> String {
    "APIVersions".to_owned()
}

/// Legacy `APIGroupList`, served at `/apis`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiGroupList {
    /// `v1`.
    #[serde(rename = "apiVersion", default = "v1")]
    pub api_version: String,
    /// The groups.
    #[serde(default)]
    pub groups: Vec<ApiGroup>,
    /// `APIGroupList`.
    #[serde(default = "api_group_list_kind")]
    pub kind: String,
}

fn v1() -> String {
    "v1".to_owned()
}

fn api_group_list_kind() -> String {
    "APIGroupList".to_owned()
}

/// Legacy `APIGroup`, an item of `APIGroupList` and the body of `/apis/{group}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiGroup {
    /// `apiVersion` (`v1` as a document, absent as a list item).
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,
    /// `kind` (`APIGroup` as a document, absent as a list item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The group.
    pub name: String,
    /// The version a client should use.
    #[serde(
        rename = "preferredVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_version: Option<GroupVersionForDiscovery>,
    /// Its versions, preferred first.
    #[serde(default)]
    pub versions: Vec<GroupVersionForDiscovery>,
}

/// `GroupVersionForDiscovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupVersionForDiscovery {
    /// `group/version` (`v1` for core).
    #[serde(rename = "groupVersion")]
    pub group_version: String,
    /// The version.
    pub version: String,
}

/// Legacy `APIResourceList`, the body of `/api/v1` and `/apis/{group}/{version}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiResourceList {
    /// `v1`.
    #[serde(rename = "apiVersion", default = "v1")]
    pub api_version: String,
    /// `group/version` (`v1` for core).
    #[serde(rename = "groupVersion")]
    pub group_version: String,
    /// `APIResourceList`.
    #[serde(default = "api_resource_list_kind")]
    pub kind: String,
    /// The resources and subresources.
    #[serde(default)]
    pub resources: Vec<ApiResource>,
}

fn api_resource_list_kind() -> String {
    "APIResourceList".to_owned()
}

/// Legacy `APIResource`; subresources appear as `parent/sub` names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiResource {
    /// Categories (`all`, …) `kubectl get` expands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// The group of the kind, when it differs from the list's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The kind.
    #[serde(default)]
    pub kind: String,
    /// The resource, or `resource/subresource`.
    pub name: String,
    /// Whether objects live in a namespace.
    #[serde(default)]
    pub namespaced: bool,
    /// Short names (`po`, `deploy`, …).
    #[serde(rename = "shortNames", default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// The singular name.
    #[serde(rename = "singularName", default)]
    pub singular_name: String,
    /// A hash of the version objects are stored at.
    #[serde(
        rename = "storageVersionHash",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub storage_version_hash: Option<String>,
    /// The verbs it supports.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// The version of the kind, when it differs from the list's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
