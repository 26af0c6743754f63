//! The API surface of the two releases the demo upgrades between, embedded in the binary.
//!
//! The demo must run from a clone of this repository alone, so it cannot read upstream's
//! discovery documents at run time. Instead `table` holds the facts read off them (groups
//! and versions in each release's order; each resource's kind, scope, verbs, short and
//! singular names, categories and subresources; which release serves it) in about 150 lines,
//! and this module renders each release's aggregated `/apis` document from them. The test at
//! the bottom renders both and compares them with the real documents, so the table cannot
//! drift from upstream unnoticed.
//!
//! The core group (`/api`) is the stand-in's own table ([`mvproxy_standin::core_group`]), which
//! both releases serve alike; it is not duplicated here, only converted to mvproxy's types.

mod table;

use std::collections::{BTreeMap, BTreeSet};

use mvproxy_core::classify::Gvr;
use mvproxy_core::discovery::types::{
    ApiGroupDiscovery, ApiGroupDiscoveryList, ApiResourceDiscovery, ApiSubresourceDiscovery,
    ApiVersionDiscovery, GroupVersionKind, ObjectMeta,
};
use mvproxy_standin as standin;

/// A Kubernetes release the demo's API servers pretend to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Release {
    /// 1.31: what every node runs before the upgrade.
    Old,
    /// 1.34: what every node runs after it.
    New,
}

impl Release {
    /// `1.31` or `1.34`.
    pub fn version(self) -> &'static str {
        match self {
            Self::Old => "1.31",
            Self::New => "1.34",
        }
    }

    /// What the stand-in reports at `/version`.
    pub fn git_version(self) -> &'static str {
        match self {
            Self::Old => "v1.31.0-demo",
            Self::New => "v1.34.0-demo",
        }
    }

    /// The deprecation warnings kube-apiserver of this release sends, as `(group/version,
    /// text)`: 1.31 warns on every request to `flowcontrol.apiserver.k8s.io/v1beta3`
    /// (k8s.io/api `flowcontrol/v1beta3/zz_generated.prerelease-lifecycle.go`: deprecated in
    /// 1.29, removed in 1.32, replaced by `v1`), in the words client-go prints.
    pub fn deprecation_warnings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Old => &[(
                "flowcontrol.apiserver.k8s.io/v1beta3",
                "flowcontrol.apiserver.k8s.io/v1beta3 FlowSchema is deprecated in v1.29+, unavailable in v1.32+; use flowcontrol.apiserver.k8s.io/v1 FlowSchema",
            )],
            Self::New => &[],
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Old => OLD,
            Self::New => NEW,
        }
    }

    fn groups(self) -> table::GroupOrder {
        match self {
            Self::Old => table::GROUPS_1_31,
            Self::New => table::GROUPS_1_34,
        }
    }
}

/// One resource of the table (see [`res`] for the fields).
#[derive(Debug)]
struct Res {
    name: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    verbs: &'static [&'static str],
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Sub],
    releases: u8,
}

/// The three subresource shapes the two releases' `/apis` groups use.
#[derive(Debug, Clone, Copy)]
enum Sub {
    /// `status`: the object itself, get/patch/update.
    Status,
    /// `scale`: an `autoscaling/v1` `Scale`, get/patch/update.
    Scale,
    /// `approval` (certificate signing requests): the object itself, get/patch/update.
    Approval,
}

const NS: bool = true;
const CL: bool = false;
const RW: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const CREATE: &[&str] = &["create"];
const NONE: &[&str] = &[];
const ALL: &[&str] = &["all"];
const EXT: &[&str] = &["api-extensions"];
const STATUS: Sub = Sub::Status;
const SCALE: Sub = Sub::Scale;
const APPROVAL: Sub = Sub::Approval;
const OLD: u8 = 1;
const NEW: u8 = 2;
const BOTH: u8 = OLD | NEW;

/// A table row: resource, singular name, kind, scope, verbs, short names, categories,
/// subresources, releases that serve it.
#[allow(clippy::too_many_arguments)]
const fn res(
    name: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    verbs: &'static [&'static str],
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Sub],
    releases: u8,
) -> Res {
    Res {
        name,
        singular,
        kind,
        namespaced,
        verbs,
        short_names,
        categories,
        subresources,
        releases,
    }
}

/// The release's aggregated `/apis` document (`apidiscovery.k8s.io/v2`).
pub fn apis(release: Release) -> ApiGroupDiscoveryList {
    let items = release
        .groups()
        .iter()
        .map(|&(group, versions)| ApiGroupDiscovery {
            metadata: ObjectMeta {
                name: group.to_owned(),
            },
            versions: versions
                .iter()
                .map(|&version| ApiVersionDiscovery {
                    freshness: Some("Current".to_owned()),
                    resources: served(release, group, version)
                        .map(resource_discovery)
                        .collect(),
                    version: version.to_owned(),
                })
                .collect(),
        })
        .collect();
    ApiGroupDiscoveryList::v2(items)
}

/// [`apis`] as the JSON a stand-in serves.
pub fn apis_json(release: Release) -> Result<String, serde_json::Error> {
    serde_json::to_string(&apis(release))
}

/// Every GVR the release serves, core included: what a server of that release lists in its
/// discovery, and so what a request to it can reach without a 404.
pub fn surface(release: Release) -> BTreeSet<Gvr> {
    let apis = apis(release);
    std::iter::once(core_group())
        .chain(apis.items)
        .flat_map(|g| {
            let group = g.metadata.name;
            g.versions.into_iter().flat_map(move |v| {
                let (group, version) = (group.clone(), v.version);
                v.resources
                    .into_iter()
                    .map(move |r| Gvr::new(group.clone(), version.clone(), r.resource))
            })
        })
        .collect()
}

/// The core group's aggregated `/api` document (`apidiscovery.k8s.io/v2`), the same for
/// both releases.
pub fn core_list() -> ApiGroupDiscoveryList {
    ApiGroupDiscoveryList::v2(vec![core_group()])
}

/// The stand-in's core group in mvproxy's types. The stand-in shares no code with mvproxy, so
/// its documents have types of their own; both read the same wire format.
fn core_group() -> ApiGroupDiscovery {
    let core = standin::core_group();
    let gvk = |k: &standin::GroupVersionKind| GroupVersionKind {
        group: k.group.clone(),
        kind: k.kind.clone(),
        version: k.version.clone(),
    };
    ApiGroupDiscovery {
        metadata: ObjectMeta {
            name: core.metadata.name.clone(),
        },
        versions: core
            .versions
            .iter()
            .map(|v| ApiVersionDiscovery {
                freshness: v.freshness.clone(),
                resources: v
                    .resources
                    .iter()
                    .map(|r| ApiResourceDiscovery {
                        categories: r.categories.clone(),
                        resource: r.resource.clone(),
                        response_kind: r.response_kind.as_ref().map(gvk),
                        scope: r.scope.clone(),
                        short_names: r.short_names.clone(),
                        singular_resource: r.singular_resource.clone(),
                        subresources: r
                            .subresources
                            .iter()
                            .map(|s| ApiSubresourceDiscovery {
                                accepted_types: s.accepted_types.iter().map(gvk).collect(),
                                response_kind: s.response_kind.as_ref().map(gvk),
                                subresource: s.subresource.clone(),
                                verbs: s.verbs.clone(),
                            })
                            .collect(),
                        verbs: r.verbs.clone(),
                    })
                    .collect(),
                version: v.version.clone(),
            })
            .collect(),
    }
}

/// A resource of either release, as a client needs it to build requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResource {
    /// Group, version and resource.
    pub gvr: Gvr,
    /// The kind of its objects.
    pub kind: String,
    /// Whether its objects live in a namespace.
    pub namespaced: bool,
    /// The verbs its discovery lists.
    pub verbs: Vec<String>,
    /// Served by 1.31.
    pub old: bool,
    /// Served by 1.34.
    pub new: bool,
}

impl ApiResource {
    /// Whether `release` serves it.
    pub fn served_by(&self, release: Release) -> bool {
        match release {
            Release::Old => self.old,
            Release::New => self.new,
        }
    }

    /// Whether its discovery lists `verb`.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// Every resource of either release, core first, then by group, version and name: the
/// union of what the rendered discovery documents list.
pub fn resources() -> Vec<ApiResource> {
    let mut out: BTreeMap<Gvr, ApiResource> = BTreeMap::new();
    for release in [Release::Old, Release::New] {
        let apis = apis(release);
        for g in std::iter::once(core_group()).chain(apis.items) {
            for v in &g.versions {
                for r in &v.resources {
                    let gvr = Gvr::new(g.name(), &v.version, &r.resource);
                    let entry = out.entry(gvr.clone()).or_insert_with(|| ApiResource {
                        gvr,
                        kind: r
                            .response_kind
                            .as_ref()
                            .map(|k| k.kind.clone())
                            .unwrap_or_default(),
                        namespaced: r.scope == "Namespaced",
                        verbs: r.verbs.clone(),
                        old: false,
                        new: false,
                    });
                    match release {
                        Release::Old => entry.old = true,
                        Release::New => entry.new = true,
                    }
                }
            }
        }
    }
    out.into_values().collect()
}

fn served(release: Release, group: &str, version: &str) -> impl Iterator<Item = &'static Res> {
    table::RESOURCES
        .iter()
        .filter(move |(g, v, _)| *g == group && *v == version)
        .flat_map(|(_, _, rs)| rs.iter())
        .filter(move |r| r.releases & release.bit() != 0)
}

fn resource_discovery(r: &Res) -> ApiResourceDiscovery {
    ApiResourceDiscovery {
        categories: strings(r.categories),
        resource: r.name.to_owned(),
        response_kind: Some(kind("", "", r.kind)),
        scope: if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }
        .to_owned(),
        short_names: strings(r.short_names),
        singular_resource: r.singular.to_owned(),
        subresources: r
            .subresources
            .iter()
            .map(|s| {
                let (name, response_kind) = match s {
                    Sub::Status => ("status", kind("", "", r.kind)),
                    Sub::Scale => ("scale", kind("autoscaling", "v1", "Scale")),
                    Sub::Approval => ("approval", kind("", "", r.kind)),
                };
                ApiSubresourceDiscovery {
                    accepted_types: Vec::new(),
                    response_kind: Some(response_kind),
                    subresource: name.to_owned(),
                    verbs: strings(&["get", "patch", "update"]),
                }
            })
            .collect(),
        verbs: strings(r.verbs),
    }
}

fn kind(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind {
        group: group.to_owned(),
        kind: kind.to_owned(),
        version: version.to_owned(),
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|&s| s.to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real document of a release, from `fixtures/discovery/` (see its README).
    fn fixture(release: Release) -> ApiGroupDiscoveryList {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../../fixtures/discovery/kube-apiserver-{}-dev/aggregated_v2.json",
            release.version()
        ));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
        serde_json::from_str(&text).expect("fixture parses")
    }

    /// Group names and versions in order, then per group-version every resource's scope and
    /// verbs: the facts routing depends on, compared first so a drift names itself.
    fn outline(doc: &ApiGroupDiscoveryList) -> Vec<(String, String, String, String, Vec<String>)> {
        doc.items
            .iter()
            .flat_map(|g| {
                g.versions.iter().flat_map(move |v| {
                    v.resources.iter().map(move |r| {
                        (
                            g.name().to_owned(),
                            v.version.clone(),
                            r.resource.clone(),
                            r.scope.clone(),
                            r.verbs.clone(),
                        )
                    })
                })
            })
            .collect()
    }

    #[test]
    fn rendered_documents_match_upstream_documents() {
        for release in [Release::Old, Release::New] {
            let real = fixture(release);
            let ours = apis(release);
            let names = |d: &ApiGroupDiscoveryList| -> Vec<(String, Vec<String>)> {
                d.items
                    .iter()
                    .map(|g| {
                        let versions = g.versions.iter().map(|v| v.version.clone()).collect();
                        (g.name().to_owned(), versions)
                    })
                    .collect()
            };
            assert_eq!(
                names(&ours),
                names(&real),
                "{release:?}: groups and versions"
            );
            assert_eq!(outline(&ours), outline(&real), "{release:?}: resources");
            // Everything else too: kinds, names, categories, subresources, freshness.
            assert_eq!(ours, real, "{release:?}: the whole document");
        }
    }

    #[test]
    fn the_table_has_no_row_that_no_release_renders() {
        for (group, version, rows) in table::RESOURCES {
            for r in *rows {
                let rendered = [Release::Old, Release::New].iter().any(|&rel| {
                    r.releases & rel.bit() != 0
                        && rel
                            .groups()
                            .iter()
                            .any(|(g, vs)| g == group && vs.contains(version))
                });
                assert!(rendered, "{group}/{version}/{} is never rendered", r.name);
            }
        }
    }

    #[test]
    fn surfaces_differ_by_the_known_skew() {
        let old = surface(Release::Old);
        let new = surface(Release::New);
        let only_old: Vec<_> = old.difference(&new).map(ToString::to_string).collect();
        let only_new: Vec<_> = new.difference(&old).map(ToString::to_string).collect();
        assert_eq!(only_old.len(), 10, "{only_old:?}");
        assert_eq!(only_new.len(), 18, "{only_new:?}");
        assert!(only_old.contains(&"flowcontrol.apiserver.k8s.io/v1beta3/flowschemas".into()));
        assert!(only_new.contains(&"resource.k8s.io/v1beta2/resourceclaims".into()));
        assert!(
            old.contains(&Gvr::new("", "v1", "pods")) && new.contains(&Gvr::new("", "v1", "pods"))
        );
        let all = resources();
        assert_eq!(all.len(), old.union(&new).count());
        assert!(
            all.iter()
                .all(|r| r.old == old.contains(&r.gvr) && r.new == new.contains(&r.gvr))
        );
    }
}
