//! Conversions between aggregated and legacy discovery.
//!
//! mvproxy keeps one view per server, in aggregated form, whatever the server speaks: an old
//! release's legacy documents are converted on fetch ([`group_from_legacy`]), and legacy
//! clients get documents converted back ([`group_list`], [`api_group`], [`resource_list`]).
//! The rules are client-go's (`discovery/aggregated_discovery.go`): a resource without a
//! response kind is left out of legacy form, subresources become `parent/sub` entries, and the
//! preferred version is the first one that is not `Stale`.

use super::types::{
    ApiGroup, ApiGroupDiscovery, ApiGroupList, ApiResource, ApiResourceDiscovery, ApiResourceList,
    ApiSubresourceDiscovery, ApiVersionDiscovery, GroupVersionForDiscovery, GroupVersionKind,
    ObjectMeta,
};

const STALE: &str = "Stale";
const NAMESPACED: &str = "Namespaced";
const CLUSTER: &str = "Cluster";

/// `group/version`, or just `version` for the core group.
pub fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The legacy `APIGroupList` of `groups` (the core group, if present, is left out as at `/apis`).
pub fn group_list(groups: &[ApiGroupDiscovery]) -> ApiGroupList {
    ApiGroupList {
        api_version: "v1".to_owned(),
        groups: groups
            .iter()
            .filter(|g| !g.name().is_empty())
            .map(|g| ApiGroup {
                api_version: None,
                kind: None,
                ..api_group(g)
            })
            .collect(),
        kind: "APIGroupList".to_owned(),
    }
}

/// The legacy `APIGroup` document of one group, as served at `/apis/{group}`.
pub fn api_group(group: &ApiGroupDiscovery) -> ApiGroup {
    let name = group.name();
    let gv = |v: &ApiVersionDiscovery| GroupVersionForDiscovery {
        group_version: group_version(name, &v.version),
        version: v.version.clone(),
    };
    ApiGroup {
        api_version: Some("v1".to_owned()),
        kind: Some("APIGroup".to_owned()),
        name: name.to_owned(),
        preferred_version: group
            .versions
            .iter()
            .find(|v| v.freshness.as_deref() != Some(STALE))
            .map(gv),
        versions: group.versions.iter().map(gv).collect(),
    }
}

/// The legacy `APIResourceList` of one group-version, as served at `/apis/{g}/{v}` or `/api/v1`.
pub fn resource_list(group: &str, version: &ApiVersionDiscovery) -> ApiResourceList {
    let mut resources = Vec::new();
    for r in &version.resources {
        let namespaced = r.scope == NAMESPACED;
        if let Some(kind) = r.response_kind.as_ref().filter(|k| !k.kind.is_empty()) {
            resources.push(ApiResource {
                categories: r.categories.clone(),
                group: non_empty(&kind.group),
                kind: kind.kind.clone(),
                name: r.resource.clone(),
                namespaced,
                short_names: r.short_names.clone(),
                singular_name: r.singular_resource.clone(),
                storage_version_hash: None,
                verbs: r.verbs.clone(),
                version: non_empty(&kind.version),
            });
        }
        for s in &r.subresources {
            let Some(kind) = s.response_kind.as_ref().filter(|k| !k.kind.is_empty()) else {
                continue;
            };
            resources.push(ApiResource {
                categories: Vec::new(),
                group: non_empty(&kind.group),
                kind: kind.kind.clone(),
                name: format!("{}/{}", r.resource, s.subresource),
                namespaced,
                short_names: Vec::new(),
                singular_name: String::new(),
                storage_version_hash: None,
                verbs: s.verbs.clone(),
                version: non_empty(&kind.version),
            });
        }
    }
    ApiResourceList {
        api_version: "v1".to_owned(),
        group_version: group_version(group, &version.version),
        kind: "APIResourceList".to_owned(),
        resources,
    }
}

/// Builds the aggregated form of a group from its legacy resource lists, versions in the
/// order given (preferred first), as an old release would have served it.
pub fn group_from_legacy(
    name: &str,
    versions: Vec<(String, ApiResourceList)>,
) -> ApiGroupDiscovery {
    ApiGroupDiscovery {
        metadata: ObjectMeta {
            name: name.to_owned(),
        },
        versions: versions
            .into_iter()
            .map(|(version, list)| ApiVersionDiscovery {
                freshness: Some("Current".to_owned()),
                resources: resources_from_legacy(list.resources),
                version,
            })
            .collect(),
    }
}

fn resources_from_legacy(list: Vec<ApiResource>) -> Vec<ApiResourceDiscovery> {
    let (parents, subs): (Vec<_>, Vec<_>) = list.into_iter().partition(|r| !r.name.contains('/'));
    let mut out: Vec<ApiResourceDiscovery> = parents
        .into_iter()
        .map(|r| ApiResourceDiscovery {
            categories: r.categories,
            resource: r.name,
            response_kind: Some(GroupVersionKind {
                group: r.group.unwrap_or_default(),
                kind: r.kind,
                version: r.version.unwrap_or_default(),
            }),
            scope: if r.namespaced { NAMESPACED } else { CLUSTER }.to_owned(),
            short_names: r.short_names,
            singular_resource: r.singular_name,
            subresources: Vec::new(),
            verbs: r.verbs,
        })
        .collect();
    for s in subs {
        let Some((parent, sub)) = s.name.split_once('/') else {
            continue;
        };
        if let Some(p) = out.iter_mut().find(|p| p.resource == parent) {
            p.subresources.push(ApiSubresourceDiscovery {
                accepted_types: Vec::new(),
                response_kind: Some(GroupVersionKind {
                    group: s.group.unwrap_or_default(),
                    kind: s.kind,
                    version: s.version.unwrap_or_default(),
                }),
                subresource: sub.to_owned(),
                verbs: s.verbs,
            });
        }
    }
    out
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(path: &str) -> String {
        let full = format!(
            "{}/../../fixtures/discovery/{path}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {full}: {e}"))
    }

    #[test]
    fn legacy_round_trip_keeps_resources_subresources_and_scope() {
        let list: ApiResourceList =
            serde_json::from_str(&fixture("k0s-v1.21.0-legacy/apis/apps/v1/index.json")).unwrap();
        let group = group_from_legacy("apps", vec![("v1".to_owned(), list.clone())]);
        let deployments = group.versions[0]
            .resources
            .iter()
            .find(|r| r.resource == "deployments")
            .unwrap();
        assert_eq!(deployments.scope, "Namespaced");
        let subs: Vec<_> = deployments
            .subresources
            .iter()
            .map(|s| s.subresource.as_str())
            .collect();
        assert!(
            subs.contains(&"scale") && subs.contains(&"status"),
            "{subs:?}"
        );

        let back = resource_list("apps", &group.versions[0]);
        let names = |l: &ApiResourceList| {
            let mut n: Vec<_> = l.resources.iter().map(|r| r.name.clone()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&back), names(&list));
        assert_eq!(back.group_version, "apps/v1");
    }

    #[test]
    fn preferred_version_skips_stale() {
        let group = ApiGroupDiscovery {
            metadata: ObjectMeta {
                name: "metrics.k8s.io".to_owned(),
            },
            versions: vec![
                ApiVersionDiscovery {
                    freshness: Some("Stale".to_owned()),
                    resources: vec![],
                    version: "v1".to_owned(),
                },
                ApiVersionDiscovery {
                    freshness: Some("Current".to_owned()),
                    resources: vec![],
                    version: "v1beta1".to_owned(),
                },
            ],
        };
        let g = api_group(&group);
        assert_eq!(
            g.preferred_version.map(|p| p.group_version),
            Some("metrics.k8s.io/v1beta1".to_owned())
        );
        assert_eq!(g.versions.len(), 2);
    }

    #[test]
    fn group_list_leaves_out_core_and_keeps_order() {
        let doc: super::super::types::ApiGroupDiscoveryList =
            serde_json::from_str(&fixture("kube-apiserver-1.34-dev/aggregated_v2.json")).unwrap();
        let list = group_list(&doc.items);
        let names: Vec<_> = list.groups.iter().map(|g| g.name.as_str()).collect();
        let want: Vec<_> = doc.items.iter().map(|g| g.name()).collect();
        assert_eq!(names, want);
        assert_eq!(names[0], "apiregistration.k8s.io");
    }
}
