//! The stand-in's own reading of discovery: the aggregated documents it is given, `Accept`
//! negotiation, and the legacy documents it derives.
//!
//! Why not mvproxy's: the stand-in is what mvproxy's end-to-end tests run against. If both
//! sides shared one negotiation or one legacy conversion, a bug in it would pass every test.
//! So this module is written from kube-apiserver's behaviour, not from mvproxy's code, and
//! `tests/discovery_agreement.rs` checks both against the real documents in
//! `fixtures/discovery/`. Field order is Go's struct order, as a real server writes it:
//! `k8s.io/apimachinery/pkg/apis/meta/v1/types.go` (legacy) and
//! `k8s.io/api/apidiscovery/v2/types.go` (aggregated).

use http::HeaderValue;
use serde::{Deserialize, Serialize};

/// `Content-Type` of an `apidiscovery.k8s.io/v2` answer (kube-apiserver never echoes
/// `profile`).
pub(crate) const CONTENT_TYPE_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// `Content-Type` of an `apidiscovery.k8s.io/v2beta1` answer.
pub(crate) const CONTENT_TYPE_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// `APIGroupDiscoveryList`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiGroupDiscoveryList {
    /// `APIGroupDiscoveryList`.
    #[serde(default)]
    pub kind: String,
    /// `apidiscovery.k8s.io/v2` or `/v2beta1`.
    #[serde(default)]
    pub api_version: String,
    /// Never set by discovery.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The groups, in priority order.
    #[serde(default)]
    pub items: Vec<ApiGroupDiscovery>,
}

impl ApiGroupDiscoveryList {
    /// The list of `items` as `apidiscovery.k8s.io/{version}` writes it.
    pub fn new(version: &str, items: Vec<ApiGroupDiscovery>) -> Self {
        Self {
            kind: "APIGroupDiscoveryList".to_owned(),
            api_version: format!("apidiscovery.k8s.io/{version}"),
            metadata: serde_json::Map::new(),
            items,
        }
    }
}

/// `APIGroupDiscovery`: one group, its versions preferred first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiGroupDiscovery {
    /// Only `name` is ever set.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<ApiVersionDiscovery>,
}

impl ApiGroupDiscovery {
    /// `""` for the core group.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// The part of `ObjectMeta` discovery uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The group name; omitted when empty, as Go's `omitempty` does for the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `APIVersionDiscovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiVersionDiscovery {
    /// `v1`, `v1beta1`, …
    pub version: String,
    /// The resources of this group-version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApiResourceDiscovery>,
    /// `Current` or `Stale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<String>,
}

/// `APIResourceDiscovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceDiscovery {
    /// The plural name.
    pub resource: String,
    /// Absent for resources that are not objects (legacy discovery leaves them out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    /// `Namespaced` or `Cluster`.
    pub scope: String,
    /// The singular name.
    #[serde(default)]
    pub singular_resource: String,
    /// The verbs it supports.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// `kubectl` short names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// Categories such as `all`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Its subresources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<ApiSubresourceDiscovery>,
}

/// `APISubresourceDiscovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiSubresourceDiscovery {
    /// `status`, `scale`, `exec`, …
    pub subresource: String,
    /// What it answers with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    /// What it accepts (`scale` accepts `autoscaling/v1` `Scale`, for one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_types: Vec<GroupVersionKind>,
    /// The verbs it supports.
    #[serde(default)]
    pub verbs: Vec<String>,
}

/// `GroupVersionKind`: empty group and version mean the containing group-version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// The group.
    #[serde(default)]
    pub group: String,
    /// The version.
    #[serde(default)]
    pub version: String,
    /// The kind.
    #[serde(default)]
    pub kind: String,
}

/// The format a request for `/api` or `/apis` negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    V2,
    V2Beta1,
    Legacy,
    /// Nothing in `Accept` is JSON this server renders.
    NotAcceptable,
}

/// Reads `Accept` as kube-apiserver does for discovery: the ranges in order, the first one this
/// server can render wins; a range with `q=0` is refused; no header (or an empty one) means
/// plain JSON. `profile=nopeer` changes nothing: a single server has no peers to leave out.
pub(crate) fn negotiate(accept: Option<&HeaderValue>) -> Format {
    let Some(accept) = accept else {
        return Format::Legacy;
    };
    let Ok(accept) = accept.to_str() else {
        return Format::NotAcceptable;
    };
    if accept.trim().is_empty() {
        return Format::Legacy;
    }
    for range in accept.split(',') {
        let mut params = range.split(';');
        let media = params.next().unwrap_or_default().trim();
        if !["application/json", "application/*", "*/*"]
            .iter()
            .any(|m| m.eq_ignore_ascii_case(media))
        {
            continue;
        }
        let mut g = "";
        let mut v = "";
        let mut kind = "";
        let mut refused = false;
        for param in params {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value = value.trim().trim_matches('"');
            match key.trim() {
                "g" => g = value,
                "v" => v = value,
                "as" => kind = value,
                "q" => refused = value.parse::<f64>().is_ok_and(|q| q <= 0.0),
                _ => {}
            }
        }
        if refused {
            continue;
        }
        match (g, v, kind) {
            ("", "", "") => return Format::Legacy,
            ("apidiscovery.k8s.io", "v2", "APIGroupDiscoveryList") => return Format::V2,
            ("apidiscovery.k8s.io", "v2beta1", "APIGroupDiscoveryList") => {
                return Format::V2Beta1;
            }
            _ => {}
        }
    }
    Format::NotAcceptable
}

/// Legacy `APIVersions`, the answer of `/api`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiVersions {
    kind: &'static str,
    versions: Vec<String>,
    #[serde(rename = "serverAddressByClientCIDRs")]
    server_address_by_client_cidrs: Vec<ServerAddress>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ServerAddress {
    #[serde(rename = "clientCIDR")]
    client_cidr: &'static str,
    server_address: String,
}

/// `/api` for the core group's versions, with `addr` as the address for every client.
pub(crate) fn api_versions(core: &ApiGroupDiscovery, addr: std::net::SocketAddr) -> ApiVersions {
    ApiVersions {
        kind: "APIVersions",
        versions: core.versions.iter().map(|v| v.version.clone()).collect(),
        server_address_by_client_cidrs: vec![ServerAddress {
            client_cidr: "0.0.0.0/0",
            server_address: addr.to_string(),
        }],
    }
}

/// Legacy `APIGroupList`, the answer of `/apis`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiGroupList {
    kind: &'static str,
    api_version: &'static str,
    groups: Vec<ApiGroup>,
}

/// Legacy `APIGroup`: `/apis/{group}`, and (without kind and apiVersion) an item of the list.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiGroup {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    name: String,
    versions: Vec<GroupVersion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preferred_version: Option<GroupVersion>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupVersion {
    group_version: String,
    version: String,
}

/// `group/version`, or `version` alone for the core group.
pub(crate) fn group_version(group: &str, version: &str) -> String {
    match group {
        "" => version.to_owned(),
        _ => format!("{group}/{version}"),
    }
}

/// `/apis` in legacy form: every named group (the core group lives at `/api`).
pub(crate) fn group_list(groups: &[ApiGroupDiscovery]) -> ApiGroupList {
    ApiGroupList {
        kind: "APIGroupList",
        api_version: "v1",
        groups: groups
            .iter()
            .filter(|g| !g.name().is_empty())
            .map(|g| ApiGroup {
                kind: None,
                api_version: None,
                ..api_group(g)
            })
            .collect(),
    }
}

/// `/apis/{group}`: the preferred version is the first one that is not `Stale`, as client-go's
/// `discovery/aggregated_discovery.go` reads it.
pub(crate) fn api_group(group: &ApiGroupDiscovery) -> ApiGroup {
    let versions: Vec<GroupVersion> = group
        .versions
        .iter()
        .map(|v| GroupVersion {
            group_version: group_version(group.name(), &v.version),
            version: v.version.clone(),
        })
        .collect();
    let preferred = group
        .versions
        .iter()
        .position(|v| v.freshness.as_deref() != Some("Stale"))
        .and_then(|i| versions.get(i).cloned());
    ApiGroup {
        kind: Some("APIGroup"),
        api_version: Some("v1"),
        name: group.name().to_owned(),
        versions,
        preferred_version: preferred,
    }
}

/// Legacy `APIResourceList` of `/api/v1` or `/apis/{group}/{version}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiResourceList {
    kind: &'static str,
    api_version: &'static str,
    group_version: String,
    resources: Vec<ApiResource>,
}

/// One entry of an `APIResourceList`; subresources are entries named `parent/sub`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiResource {
    name: String,
    singular_name: String,
    namespaced: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    version: String,
    kind: String,
    verbs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    short_names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    categories: Vec<String>,
}

/// The legacy list of one group-version. A resource or subresource without a response kind
/// has no legacy form and is left out (client-go does the same in the other direction).
pub(crate) fn resource_list(group: &str, served: &ApiVersionDiscovery) -> ApiResourceList {
    let mut resources = Vec::new();
    for r in &served.resources {
        let namespaced = r.scope == "Namespaced";
        if let Some(kind) = r.response_kind.as_ref().filter(|k| !k.kind.is_empty()) {
            resources.push(ApiResource {
                name: r.resource.clone(),
                singular_name: r.singular_resource.clone(),
                namespaced,
                group: kind.group.clone(),
                version: kind.version.clone(),
                kind: kind.kind.clone(),
                verbs: r.verbs.clone(),
                short_names: r.short_names.clone(),
                categories: r.categories.clone(),
            });
        }
        resources.extend(r.subresources.iter().filter_map(|s| {
            let kind = s.response_kind.as_ref().filter(|k| !k.kind.is_empty())?;
            Some(ApiResource {
                name: format!("{}/{}", r.resource, s.subresource),
                singular_name: String::new(),
                namespaced,
                group: kind.group.clone(),
                version: kind.version.clone(),
                kind: kind.kind.clone(),
                verbs: s.verbs.clone(),
                short_names: Vec::new(),
                categories: Vec::new(),
            })
        }));
    }
    ApiResourceList {
        kind: "APIResourceList",
        api_version: "v1",
        group_version: group_version(group, &served.version),
        resources,
    }
}
