//! The release an upgrade is heading for, known before any server runs it.
//!
//! The skew ([`crate::skew`]) shows which clients break only once a server of the new
//! release is running. Operators want that answer before the first server is upgraded, so
//! mvproxy can be told the target's discovery up front: a release from the [`catalog`] embedded
//! in the binary (`--target-release 1.36`), or the documents saved from a staging server of the
//! new release (`--target-discovery DIR`). Every request whose GVR the target does not serve is
//! then counted per client from the first request on
//! (`mvproxy_target_missing_requests_total`, `/debug/clients`), with the version of the same
//! group and resource the target does serve, when there is one.
//!
//! A GVR the target does not serve is judged two ways: it breaks on the target whatever its
//! configuration (the release cannot serve it at all), or it breaks unless the target turns it
//! on (the release serves it with every API on, not by default: the `--runtime-config` entry
//! that does is named). The catalog holds both captures of each release.
//!
//! Only built-in APIs are judged: a group that neither the target nor any release of the
//! catalog serves with every API on (a CustomResourceDefinition's, an aggregated API
//! server's) is not part of a kube-apiserver release and is never reported missing. What is
//! counted is bounded by what the catalog's releases and the running servers serve, never by
//! what clients send.

pub mod catalog;
pub mod report;
pub mod warning;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::classify::Gvr;
use crate::discovery::Snapshot;
use crate::discovery::side::ServerVersion;
use crate::discovery::types::{ApiGroupDiscovery, ApiGroupDiscoveryList};
use mvproxy_telemetry::metrics::values;

/// The `target` label of a `--target-discovery` directory without `version.json`.
pub const CUSTOM_TARGET: &str = "custom";

/// The aggregated discovery `apiVersion` and `kind` a target's documents must have.
const V2_API_VERSION: &str = "apidiscovery.k8s.io/v2";
const V2_KIND: &str = "APIGroupDiscoveryList";

/// Where the target comes from, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSource {
    /// `--target-release 1.N`: a release of the [`catalog`].
    Release(String),
    /// `--target-discovery DIR`: `api.json`, `apis.json` and optionally `version.json`.
    Discovery(PathBuf),
}

impl TargetSource {
    /// Reads the target: the catalog's release, or the directory's files.
    pub fn load(&self) -> Result<Target, TargetError> {
        match self {
            Self::Release(release) => Target::from_catalog(release),
            Self::Discovery(dir) => Target::from_dir(dir),
        }
    }
}

/// Why a target could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `--target-release` names a release the catalog lacks.
    #[error("unknown release {given:?}; known releases: {}", known.join(", "))]
    UnknownRelease {
        /// What was given.
        given: String,
        /// The catalog's releases.
        known: Vec<String>,
    },
    /// A file of `--target-discovery` could not be read.
    #[error("{}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file of `--target-discovery` is not what it must be.
    #[error("{}: at {path}: {why}", file.display())]
    Malformed {
        /// The file.
        file: PathBuf,
        /// The JSON path of the fault (`items[3].versions[0].version`; `.` for the whole).
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The embedded catalog does not parse (a build that shipped a broken catalog).
    #[error("catalog release {release}: {why}")]
    Catalog {
        /// The release.
        release: String,
        /// Why.
        why: String,
    },
}

/// One group as the target serves it: versions in the server's order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// The group (`""` for core).
    pub name: String,
    /// Its versions, preferred first.
    pub versions: Vec<Version>,
}

/// One version of a group and the resources it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The version.
    pub version: String,
    /// Its resources (plural names, no subresources).
    pub resources: Vec<String>,
}

/// What a release serves: its `gitVersion` (if known) and its groups, core first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Surface {
    /// `/version`'s `gitVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_version: Option<String>,
    /// The groups of `/api` then `/apis`.
    pub groups: Vec<Group>,
}

impl Surface {
    fn from_discovery(groups: impl IntoIterator<Item = ApiGroupDiscovery>) -> Self {
        Surface {
            git_version: None,
            groups: groups
                .into_iter()
                .map(|g| Group {
                    name: g.metadata.name,
                    versions: g
                        .versions
                        .into_iter()
                        .map(|v| Version {
                            version: v.version,
                            resources: v.resources.into_iter().map(|r| r.resource).collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn gvrs(&self) -> impl Iterator<Item = Gvr> + '_ {
        self.groups.iter().flat_map(|g| {
            g.versions.iter().flat_map(move |v| {
                v.resources
                    .iter()
                    .map(move |r| Gvr::new(&g.name, &v.version, r))
            })
        })
    }
}

/// What the target does about a GVR a client requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The target serves it, or it is not a built-in API, or nothing serves it anywhere.
    Fine,
    /// The target does not serve it, and cannot whatever its configuration: the request
    /// breaks on the target.
    Missing,
    /// The target serves it only when turned on ([`runtime_config`]): the request breaks on
    /// the target unless its operator does.
    OffByDefault,
}

impl Verdict {
    /// The `availability` label of `mvproxy_target_missing_requests_total`, `None` for `Fine`.
    pub fn availability(self) -> Option<&'static str> {
        match self {
            Self::Fine => None,
            Self::Missing => Some(values::AVAILABILITY_NEVER),
            Self::OffByDefault => Some(values::AVAILABILITY_OFF_BY_DEFAULT),
        }
    }
}

/// The `--runtime-config` entry that turns `gvr`'s group-version on (kube-apiserver's
/// `--runtime-config` takes `group/version=true`; `api/v1` for the core group, which is never
/// off). An alpha API also needs its feature gate, which discovery does not name.
pub fn runtime_config(gvr: &Gvr) -> String {
    if gvr.group.is_empty() {
        format!("api/{}=true", gvr.version)
    } else {
        format!("{}/{}=true", gvr.group, gvr.version)
    }
}

/// The target release: what it serves, and what the judgement compares it with.
#[derive(Debug, Clone)]
pub struct Target {
    label: String,
    surface: Surface,
    serves: HashSet<Gvr>,
    /// What the target's release serves with every API on (the catalog's second capture; for
    /// a `--target-discovery` of a release the catalog lacks, what the directory lists).
    can_serve: HashSet<Gvr>,
    /// `(group, resource)` → the first version, in the target's preference, that serves it.
    preferred: HashMap<(CompactString, CompactString), String>,
    /// Groups of the target and of every catalog release with every API on: the built-in APIs.
    builtin_groups: HashSet<String>,
    /// GVRs some catalog release can serve: what may be counted before discovery is synced.
    known: HashSet<Gvr>,
}

impl Target {
    /// The catalog's `release` (`1.36`).
    pub fn from_catalog(release: &str) -> Result<Target, TargetError> {
        let surface = catalog::surface(release)?;
        Target::new(release.to_owned(), surface, Some(release))
    }

    /// `dir/api.json` and `dir/apis.json` (aggregated discovery v2) and, if present,
    /// `dir/version.json`.
    pub fn from_dir(dir: &Path) -> Result<Target, TargetError> {
        let mut groups = read_list(&dir.join("api.json"))?.items;
        groups.extend(read_list(&dir.join("apis.json"))?.items);
        let mut surface = Surface::from_discovery(groups);
        let version_file = dir.join("version.json");
        surface.git_version = match std::fs::read(&version_file) {
            Ok(body) => Some(
                ServerVersion::from_json(&body)
                    .ok_or_else(|| TargetError::Malformed {
                        file: version_file.clone(),
                        path: ".".into(),
                        why: "not a version.Info object (GET /version)".into(),
                    })?
                    .git_version,
            )
            .filter(|g| !g.is_empty()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(TargetError::Read {
                    file: version_file,
                    source,
                });
            }
        };
        let label = surface
            .git_version
            .clone()
            .unwrap_or_else(|| CUSTOM_TARGET.to_owned());
        // The release the directory's server runs, when the catalog has it: what it can serve.
        let release = surface.git_version.as_deref().and_then(|g| {
            let minor = catalog::release_of(g);
            catalog::releases().find(|r| *r == minor)
        });
        Target::new(label, surface, release)
    }

    /// `release`: the catalog release the target runs, whose every-API capture says what it
    /// can serve once turned on (`None`: only what `surface` lists).
    fn new(label: String, surface: Surface, release: Option<&str>) -> Result<Target, TargetError> {
        let mut builtin_groups: HashSet<String> =
            surface.groups.iter().map(|g| g.name.clone()).collect();
        let mut known = HashSet::new();
        for release in catalog::releases() {
            let other = catalog::surface_with(release, catalog::Config::All)?;
            builtin_groups.extend(other.groups.iter().map(|g| g.name.clone()));
            known.extend(other.gvrs());
        }
        let serves: HashSet<Gvr> = surface.gvrs().collect();
        let mut can_serve = serves.clone();
        if let Some(release) = release {
            can_serve.extend(catalog::surface_with(release, catalog::Config::All)?.gvrs());
        }
        let mut preferred = HashMap::new();
        for g in &surface.groups {
            for v in &g.versions {
                for r in &v.resources {
                    preferred
                        .entry((
                            CompactString::from(g.name.as_str()),
                            CompactString::from(r.as_str()),
                        ))
                        .or_insert_with(|| v.version.clone());
                }
            }
        }
        Ok(Target {
            label,
            surface,
            serves,
            can_serve,
            preferred,
            builtin_groups,
            known,
        })
    }

    /// The `target` label: the release, the target's `gitVersion`, or [`CUSTOM_TARGET`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What the target serves.
    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// Whether the target serves `gvr`.
    pub fn serves(&self, gvr: &Gvr) -> bool {
        self.serves.contains(gvr)
    }

    /// The version of `gvr`'s group and resource the target serves, preferred first.
    pub fn use_instead(&self, gvr: &Gvr) -> Option<&str> {
        self.preferred
            .get(&(gvr.group.clone(), gvr.resource.clone()))
            .map(String::as_str)
    }

    /// Judges a requested GVR. Not fine only when the target does not serve it, its group
    /// is a built-in one, and some catalog release or running server serves it (so that what
    /// is counted is bounded by the servers and the catalog, not by what clients make up);
    /// then [`Verdict::OffByDefault`] when the target's release can serve it once turned on,
    /// else [`Verdict::Missing`].
    pub fn judge(&self, gvr: &Gvr, snap: &Snapshot) -> Verdict {
        if self.serves.contains(gvr) || !self.builtin_groups.contains(gvr.group.as_str()) {
            return Verdict::Fine;
        }
        if !self.known.contains(gvr) && snap.serving(gvr).is_none() {
            Verdict::Fine
        } else if self.can_serve.contains(gvr) {
            Verdict::OffByDefault
        } else {
            Verdict::Missing
        }
    }
}

/// One aggregated discovery v2 document, with the JSON path of any fault.
fn read_list(file: &Path) -> Result<ApiGroupDiscoveryList, TargetError> {
    let body = std::fs::read(file).map_err(|source| TargetError::Read {
        file: file.to_owned(),
        source,
    })?;
    parse_list(&body).map_err(|(path, why)| TargetError::Malformed {
        file: file.to_owned(),
        path,
        why,
    })
}

/// Parses an `APIGroupDiscoveryList` (v2); on failure the JSON path and why.
pub fn parse_list(body: &[u8]) -> Result<ApiGroupDiscoveryList, (String, String)> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let list: ApiGroupDiscoveryList = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        (path, e.into_inner().to_string())
    })?;
    if list.kind != V2_KIND {
        return Err((
            "kind".into(),
            format!(
                "{:?}, not {V2_KIND:?} (was it saved without the aggregated discovery Accept header?)",
                list.kind
            ),
        ));
    }
    if list.api_version != V2_API_VERSION {
        return Err((
            "apiVersion".into(),
            format!("{:?}, not {V2_API_VERSION:?}", list.api_version),
        ));
    }
    for (i, g) in list.items.iter().enumerate() {
        for (j, v) in g.versions.iter().enumerate() {
            if v.version.is_empty() {
                return Err((
                    format!("items[{i}].versions[{j}].version"),
                    "empty version".into(),
                ));
            }
            for (k, r) in v.resources.iter().enumerate() {
                if r.resource.is_empty() {
                    return Err((
                        format!("items[{i}].versions[{j}].resources[{k}].resource"),
                        "empty resource".into(),
                    ));
                }
            }
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests;
