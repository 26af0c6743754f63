//! Which side of the skew serves a GVR: judged from each server's release (its `/version`)
//! and whether its discovery lists the GVR. Pure.
//!
//! During a rolling upgrade the servers run an older and a newer release. A GVR that every
//! server serves is not in the skew. For the others:
//! - only servers older than the newest release serve it: [`Side::OldOnly`], a request for it
//!   breaks once the upgrade completes (an API the new release removed);
//! - only servers of the newest release serve it, and older servers are present:
//!   [`Side::NewOnly`], a request for it breaks on a rollback (an API the new release added);
//! - otherwise (servers of one release disagree, or a single release is running with uneven
//!   surfaces): [`Side::Partial`];
//! - a server whose release is unknown takes part: [`Side::Unknown`].
//!
//! Only servers whose discovery has been fetched at least once count, as in
//! `/debug/discovery`'s skew; a server that is down keeps its last view and release.

use std::collections::{HashMap, HashSet};

use mvproxy_telemetry::metrics::side;

use crate::classify::Gvr;

/// A Kubernetes release, `major.minor`, as `/version` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// The major version.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

impl Release {
    /// From `/version`'s `gitVersion` (`v1.31.2`, `v1.34.0-rc.1+k3s1`), else its `major` and
    /// `minor` (which some distributions suffix, as `31+`).
    pub fn from_version_info(git_version: &str, major: &str, minor: &str) -> Option<Release> {
        let mut parts = git_version.trim().trim_start_matches('v').split('.');
        if let (Some(ma), Some(mi)) = (parts.next(), parts.next())
            && let (Some(major), Some(minor)) = (leading_number(ma), leading_number(mi))
        {
            return Some(Release { major, minor });
        }
        Some(Release {
            major: leading_number(major)?,
            minor: leading_number(minor)?,
        })
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What a server's `/version` (`version.Info`) says, as far as the judgement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// `gitVersion`, cut to [`MAX_GIT_VERSION`] characters.
    pub git_version: String,
    /// The release, when `gitVersion` or `major`/`minor` tell it.
    pub release: Option<Release>,
}

/// Longest `gitVersion` kept.
pub const MAX_GIT_VERSION: usize = 64;

impl ServerVersion {
    /// Reads a `/version` body; `None` if it is not a `version.Info` JSON object.
    pub fn from_json(body: &[u8]) -> Option<ServerVersion> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Info {
            #[serde(default)]
            major: String,
            #[serde(default)]
            minor: String,
            #[serde(default)]
            git_version: String,
        }
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        if !value.is_object() {
            return None;
        }
        let info: Info = serde_json::from_value(value).ok()?;
        Some(ServerVersion {
            release: Release::from_version_info(&info.git_version, &info.major, &info.minor),
            git_version: info.git_version.chars().take(MAX_GIT_VERSION).collect(),
        })
    }
}

fn leading_number(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

/// The side of the skew a GVR is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// Served only by servers of older releases: breaks once the upgrade completes (`old_only`).
    OldOnly,
    /// Served only by servers of the newest release: breaks on a rollback (`new_only`).
    NewOnly,
    /// Some servers of one release serve it and others do not (`partial`).
    Partial,
    /// Some server's release is unknown (`unknown`).
    Unknown,
}

impl Side {
    /// The `side` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OldOnly => side::OLD_ONLY,
            Self::NewOnly => side::NEW_ONLY,
            Self::Partial => side::PARTIAL,
            Self::Unknown => side::UNKNOWN,
        }
    }
}

/// One server as the judgement sees it: its release (if known) and what it serves.
#[derive(Debug, Clone, Copy)]
pub struct Surface<'a> {
    /// The server's release, if known.
    pub release: Option<Release>,
    /// What it serves.
    pub gvrs: &'a HashSet<Gvr>,
}

/// The side of one GVR, or `None` when every server or no server serves it.
pub fn judge(gvr: &Gvr, servers: &[Surface<'_>]) -> Option<Side> {
    let serving = servers.iter().filter(|s| s.gvrs.contains(gvr)).count();
    if serving == 0 || serving == servers.len() {
        return None;
    }
    let mut releases = Vec::with_capacity(servers.len());
    for s in servers {
        match s.release {
            Some(r) => releases.push((r, s.gvrs.contains(gvr))),
            None => return Some(Side::Unknown),
        }
    }
    let newest = releases.iter().map(|(r, _)| *r).max()?;
    let oldest = releases.iter().map(|(r, _)| *r).min()?;
    if newest == oldest {
        return Some(Side::Partial);
    }
    if !releases.iter().any(|(r, serves)| *r == newest && *serves) {
        return Some(Side::OldOnly);
    }
    if releases.iter().all(|(r, serves)| !*serves || *r == newest) {
        return Some(Side::NewOnly);
    }
    Some(Side::Partial)
}

/// The side of every GVR in the skew of `servers`.
pub fn sides(servers: &[Surface<'_>]) -> HashMap<Gvr, Side> {
    let mut out = HashMap::new();
    for s in servers {
        for gvr in s.gvrs {
            if !out.contains_key(gvr)
                && let Some(side) = judge(gvr, servers)
            {
                out.insert(gvr.clone(), side);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(minor: u32) -> Option<Release> {
        Some(Release { major: 1, minor })
    }

    fn set(gvrs: &[&str]) -> HashSet<Gvr> {
        gvrs.iter()
            .map(|g| {
                let p: Vec<&str> = g.split('/').collect();
                Gvr::new(p[0], p[1], p[2])
            })
            .collect()
    }

    #[test]
    fn releases_from_version_info() {
        let rel = |g, ma, mi| Release::from_version_info(g, ma, mi);
        assert_eq!(rel("v1.31.2", "1", "31"), r(31));
        assert_eq!(rel("v1.34.0-rc.1+k3s1", "", ""), r(34));
        assert_eq!(rel("v1.31.0-demo", "1", "31"), r(31));
        assert_eq!(rel("", "1", "29+"), r(29));
        assert_eq!(rel("weird", "1", "30"), r(30));
        assert_eq!(rel("", "", ""), None);
        assert_eq!(rel("v1", "one", "x"), None);
        assert!(r(9) < r(10), "numeric, not lexicographic");
    }

    #[test]
    fn version_documents() {
        let v = ServerVersion::from_json(
            br#"{"major":"1","minor":"31","gitVersion":"v1.31.2","gitCommit":"5864a46","platform":"linux/amd64"}"#,
        )
        .unwrap();
        assert_eq!(v.release, r(31));
        assert_eq!(v.git_version, "v1.31.2");
        let odd = ServerVersion::from_json(br#"{"gitVersion":"custom"}"#).unwrap();
        assert_eq!(odd.release, None);
        assert_eq!(ServerVersion::from_json(b"<html>"), None);
        assert_eq!(ServerVersion::from_json(b"[]"), None);
    }

    #[test]
    fn each_side_of_a_two_release_skew() {
        let old_a = set(&["/v1/pods", "flowcontrol/v1beta3/flowschemas", "x/v1/a"]);
        let old_b = set(&["/v1/pods", "flowcontrol/v1beta3/flowschemas"]);
        let new = set(&["/v1/pods", "resource/v1beta2/resourceclaims", "x/v1/a"]);
        let servers = [
            Surface {
                release: r(31),
                gvrs: &old_a,
            },
            Surface {
                release: r(31),
                gvrs: &old_b,
            },
            Surface {
                release: r(34),
                gvrs: &new,
            },
        ];
        let g = |s: &str| set(&[s]).into_iter().next().unwrap();
        assert_eq!(judge(&g("/v1/pods"), &servers), None);
        assert_eq!(judge(&g("no/v1/such"), &servers), None);
        assert_eq!(
            judge(&g("flowcontrol/v1beta3/flowschemas"), &servers),
            Some(Side::OldOnly)
        );
        assert_eq!(
            judge(&g("resource/v1beta2/resourceclaims"), &servers),
            Some(Side::NewOnly)
        );
        // served by the new release and by one of two old servers
        assert_eq!(judge(&g("x/v1/a"), &servers), Some(Side::Partial));
        let all = sides(&servers);
        assert_eq!(all.len(), 3);
        assert_eq!(all[&g("x/v1/a")].as_str(), "partial");

        // one release only: whatever differs is partial
        let same = [
            Surface {
                release: r(34),
                gvrs: &old_b,
            },
            Surface {
                release: r(34),
                gvrs: &new,
            },
        ];
        assert_eq!(
            judge(&g("resource/v1beta2/resourceclaims"), &same),
            Some(Side::Partial)
        );
        // an unknown release makes any skewed GVR unknown, never a guess
        let unknown = [
            Surface {
                release: r(31),
                gvrs: &old_b,
            },
            Surface {
                release: None,
                gvrs: &new,
            },
        ];
        assert_eq!(
            judge(&g("resource/v1beta2/resourceclaims"), &unknown),
            Some(Side::Unknown)
        );
        assert_eq!(judge(&g("/v1/pods"), &unknown), None);
        // a rollback in progress: 1.34 back to 1.31, the same judgement by release
        let three = [
            Surface {
                release: r(33),
                gvrs: &old_b,
            },
            Surface {
                release: r(34),
                gvrs: &new,
            },
            Surface {
                release: r(35),
                gvrs: &new,
            },
        ];
        assert_eq!(
            judge(&g("flowcontrol/v1beta3/flowschemas"), &three),
            Some(Side::OldOnly)
        );
        assert_eq!(
            judge(&g("resource/v1beta2/resourceclaims"), &three),
            Some(Side::Partial),
            "served by 1.34 and 1.35: a rollback to 1.33 breaks it, a rollback to 1.34 does not"
        );
    }
}
