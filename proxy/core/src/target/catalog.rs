//! What each kube-apiserver release serves, embedded in the binary so that
//! `--target-release 1.N` needs no file: with its default feature gates and runtime config
//! (what a cluster serves unless its operator turned more on), and with every API on (what the
//! release can serve at all; staging clusters, where rehearsals happen, often turn alpha and
//! beta APIs on).
//!
//! Each `catalog/1.N.json` and `catalog/1.N-all.json` is written by
//! `scripts/control-plane/capture.sh catalog` from the aggregated discovery of a real,
//! unmodified kube-apiserver of that release (built by `scripts/control-plane/build.sh`),
//! started alone: with no `--runtime-config` and no `--feature-gates`, and with
//! `--runtime-config=api/all=true` and every alpha and beta gate. The documents it captured
//! are kept in `fixtures/discovery/defaults/kube-apiserver-<version>/` and
//! `fixtures/discovery/all/kube-apiserver-<version>/`, and the tests below keep the catalog
//! equal to them.

use super::{Surface, TargetError};

/// Every release of the catalog, oldest first, with its default surface and its surface with
/// every API on.
const RELEASES: &[(&str, &str, &str)] = &[
    (
        "1.33",
        include_str!("catalog/1.33.json"),
        include_str!("catalog/1.33-all.json"),
    ),
    (
        "1.34",
        include_str!("catalog/1.34.json"),
        include_str!("catalog/1.34-all.json"),
    ),
    (
        "1.35",
        include_str!("catalog/1.35.json"),
        include_str!("catalog/1.35-all.json"),
    ),
    (
        "1.36",
        include_str!("catalog/1.36.json"),
        include_str!("catalog/1.36-all.json"),
    ),
    (
        "1.37",
        include_str!("catalog/1.37.json"),
        include_str!("catalog/1.37-all.json"),
    ),
];

/// Which of a release's two captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// Default feature gates and runtime config.
    Defaults,
    /// Every API on: `--runtime-config=api/all=true` and every alpha and beta gate.
    All,
}

/// The releases the catalog knows, oldest first.
pub fn releases() -> impl Iterator<Item = &'static str> {
    RELEASES.iter().map(|(r, _, _)| *r)
}

/// The catalog's name of the release a `gitVersion` names: `v1.37.2` → `1.37`.
pub fn release_of(git_version: &str) -> String {
    git_version
        .trim_start_matches('v')
        .splitn(3, '.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".")
}

/// What `release` serves by default.
pub fn surface(release: &str) -> Result<Surface, TargetError> {
    surface_with(release, Config::Defaults)
}

/// What `release` serves with `config`.
pub fn surface_with(release: &str, config: Config) -> Result<Surface, TargetError> {
    let (_, defaults, all) = RELEASES
        .iter()
        .find(|(r, _, _)| *r == release)
        .ok_or_else(|| TargetError::UnknownRelease {
            given: release.to_owned(),
            known: releases().map(str::to_owned).collect(),
        })?;
    let text = match config {
        Config::Defaults => defaults,
        Config::All => all,
    };
    serde_json::from_str(text).map_err(|e| TargetError::Catalog {
        release: release.to_owned(),
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::super::Target;
    use super::*;

    fn captured(config: Config) -> PathBuf {
        let dir = match config {
            Config::Defaults => "defaults",
            Config::All => "all",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/discovery")
            .join(dir)
    }

    /// The embedded catalog is exactly what the captured documents say, for both captures of
    /// every release: one release per captured server, the same groups, versions and
    /// resources in the same order, the same `gitVersion`. A catalog edited by hand, or a
    /// capture not turned into the catalog, fails.
    #[test]
    fn the_catalog_equals_the_captured_discovery() {
        for config in [Config::Defaults, Config::All] {
            the_catalog_equals(config);
        }
    }

    fn the_catalog_equals(config: Config) {
        let mut captured_releases = BTreeSet::new();
        for entry in std::fs::read_dir(captured(config)).unwrap() {
            let dir = entry.unwrap().path();
            let from_files = Target::from_dir(&dir).unwrap();
            let git = from_files.surface().git_version.clone().unwrap();
            let release = release_of(&git);
            assert_eq!(
                dir.file_name().unwrap().to_str().unwrap(),
                format!("kube-apiserver-{}", git.trim_start_matches('v')),
                "the directory names the release it holds"
            );
            let embedded = surface_with(&release, config).unwrap();
            assert_eq!(
                &embedded,
                from_files.surface(),
                "catalog/{release} ({config:?}) differs from {}",
                dir.display()
            );
            captured_releases.insert(release);
        }
        let embedded: BTreeSet<String> = releases().map(str::to_owned).collect();
        assert_eq!(
            embedded, captured_releases,
            "one catalog release per capture"
        );
        assert!(embedded.len() >= 5, "1.33 to 1.37 at least: {embedded:?}");
        // what a release serves by default it serves with every API on
        for release in releases() {
            let all = surface_with(release, Config::All).unwrap();
            let all: BTreeSet<_> = all.gvrs().collect();
            let missing: Vec<_> = surface(release)
                .unwrap()
                .gvrs()
                .filter(|g| !all.contains(g))
                .collect();
            assert!(missing.is_empty(), "{release}: {missing:?}");
        }
    }

    #[test]
    fn an_unknown_release_lists_the_known_ones() {
        let e = Target::from_catalog("1.99").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"1.99\""), "{text}");
        for r in releases() {
            assert!(text.contains(r), "{r} missing from {text}");
        }
    }
}
