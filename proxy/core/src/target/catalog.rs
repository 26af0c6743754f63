//! What each kube-apiserver release serves with its default feature gates and runtime config,
//! embedded in the binary so that `--target-release 1.N` needs no file.
//!
//! Each `catalog/1.N.json` is written by `scripts/control-plane/capture.sh catalog` from the
//! aggregated discovery of a real, unmodified kube-apiserver of that release (built by
//! `scripts/control-plane/build.sh`), started alone with no `--runtime-config` and no
//! `--feature-gates`; the documents it captured are kept in
//! `fixtures/discovery/defaults/kube-apiserver-<version>/`, and the test below keeps the two
//! equal. Default gates are what a cluster serves unless its operator turned more on: a
//! cluster that enables alpha or beta APIs should use `--target-discovery` with its own
//! staging server's documents.

use super::{Surface, TargetError};

/// Every release of the catalog, oldest first, with its file.
const RELEASES: &[(&str, &str)] = &[
    ("1.33", include_str!("catalog/1.33.json")),
    ("1.34", include_str!("catalog/1.34.json")),
    ("1.35", include_str!("catalog/1.35.json")),
    ("1.36", include_str!("catalog/1.36.json")),
    ("1.37", include_str!("catalog/1.37.json")),
];

/// The releases the catalog knows, oldest first.
pub fn releases() -> impl Iterator<Item = &'static str> {
    RELEASES.iter().map(|(r, _)| *r)
}

/// What `release` serves.
pub fn surface(release: &str) -> Result<Surface, TargetError> {
    let (_, text) = RELEASES
        .iter()
        .find(|(r, _)| *r == release)
        .ok_or_else(|| TargetError::UnknownRelease {
            given: release.to_owned(),
            known: releases().map(str::to_owned).collect(),
        })?;
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

    fn captured() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/discovery/defaults")
    }

    /// The embedded catalog is exactly what the captured documents say: one release per
    /// captured server, the same groups, versions and resources in the same order, the same
    /// `gitVersion`. A catalog edited by hand, or a capture not turned into the catalog, fails.
    #[test]
    fn the_catalog_equals_the_captured_discovery() {
        let mut captured_releases = BTreeSet::new();
        for entry in std::fs::read_dir(captured()).unwrap() {
            let dir = entry.unwrap().path();
            let from_files = Target::from_dir(&dir).unwrap();
            let git = from_files.surface().git_version.clone().unwrap();
            let release = git
                .trim_start_matches('v')
                .splitn(3, '.')
                .take(2)
                .collect::<Vec<_>>()
                .join(".");
            assert_eq!(
                dir.file_name().unwrap().to_str().unwrap(),
                format!("kube-apiserver-{}", git.trim_start_matches('v')),
                "the directory names the release it holds"
            );
            let embedded = surface(&release).unwrap();
            assert_eq!(
                &embedded,
                from_files.surface(),
                "catalog/{release}.json differs from {}",
                dir.display()
            );
            captured_releases.insert(release);
        }
        let embedded: BTreeSet<String> = releases().map(str::to_owned).collect();
        assert_eq!(
            embedded, captured_releases,
            "one catalog release per capture"
        );
        assert!(embedded.len() >= 4, "1.33 to 1.36 at least: {embedded:?}");
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
