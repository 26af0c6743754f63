//! The merge of peer-aggregated discovery, over up to four servers' `/apis` documents (NUL
//! separated; the first is local's): it never panics, it is deterministic (same bytes and
//! `ETag` from the same inputs, whatever the order peers are given in), its output decodes,
//! and it is a union: every group-version-resource of local and of every peer (after the
//! exclusion of local's extension group-versions) is in the merged document.

#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use mvproxy_core::discovery::merge::{Merged, merge};
use mvproxy_core::discovery::types::{ApiGroupDiscovery, ApiGroupDiscoveryList, ApiGroupList};

#[path = "common.rs"]
mod common;

const NAMES: [&str; 4] = [common::LOCAL, common::PEER, "apiserver-3", "apiserver-0"];

fn gvrs(groups: &[ApiGroupDiscovery]) -> BTreeSet<(String, String, String)> {
    groups
        .iter()
        .flat_map(|g| {
            g.versions.iter().flat_map(move |v| {
                v.resources
                    .iter()
                    .map(move |r| (g.name().to_owned(), v.version.clone(), r.resource.clone()))
            })
        })
        .collect()
}

fn lists_a_version_twice(doc: &ApiGroupDiscoveryList) -> bool {
    doc.items.iter().any(|g| {
        let mut seen = BTreeSet::new();
        !g.versions.iter().all(|v| seen.insert(v.version.as_str()))
    })
}

fuzz_target!(|data: &[u8]| {
    let docs: Vec<ApiGroupDiscoveryList> = common::parts(data)
        .into_iter()
        .take(NAMES.len())
        .filter_map(|d| serde_json::from_slice(d).ok())
        .collect();
    if docs.is_empty() {
        return;
    }
    let build = || {
        common::snapshot(
            docs.iter()
                .zip(NAMES)
                .enumerate()
                .map(|(i, (d, name))| common::server(name, i == 0, d.clone()))
                .collect(),
        )
    };
    let snap = build();
    let Some((merged, cached)) = snap.merged() else {
        panic!("local was fetched: a merged document exists");
    };
    assert!(!cached);
    let (again, cached) = snap.merged().expect("merged");
    assert!(cached && again.etag == merged.etag);
    let other = build().merged().expect("merged").0;
    assert_eq!(other.aggregated, merged.aggregated, "not deterministic");
    assert_eq!(other.etag, merged.etag);

    let out: ApiGroupDiscoveryList =
        serde_json::from_slice(&merged.aggregated).expect("the merged document decodes");
    if let Some(legacy) = &merged.legacy {
        let _: ApiGroupList = serde_json::from_slice(legacy).expect("legacy decodes");
    }
    let have = gvrs(&out.items);
    let local = snap.local().expect("local");
    let mut want = gvrs(&local.apis);
    for name in &NAMES[1..docs.len()] {
        let peer = snap.peer(&(*name).into()).expect("peer");
        want.extend(gvrs(&peer.view.as_ref().expect("fetched").apis));
    }
    // A group listing one version twice is no document a server sends (kube-apiserver builds
    // each group's versions from a map); the merge, like upstream's, keys versions by name, so
    // there the union holds only per name. Found by this target: such an input is
    // `corpus/merge/regress-duplicate-version`.
    if !docs.iter().any(lists_a_version_twice) {
        let missing: Vec<_> = want.difference(&have).collect();
        assert!(missing.is_empty(), "the merge lost {missing:?}");
    }

    // peers in any order: the same result
    let local_apis = &local.apis;
    let peers: Vec<(&str, Vec<ApiGroupDiscovery>)> = NAMES[1..docs.len()]
        .iter()
        .map(|n| {
            let p = snap.peer(&(*n).into()).expect("peer");
            (*n, p.view.as_ref().expect("fetched").apis.clone())
        })
        .collect();
    let forward: Vec<(&str, &[ApiGroupDiscovery])> =
        peers.iter().map(|(n, g)| (*n, g.as_slice())).collect();
    let backward: Vec<(&str, &[ApiGroupDiscovery])> = forward.iter().rev().copied().collect();
    let a = merge(common::LOCAL, local_apis, &forward);
    let b = merge(common::LOCAL, local_apis, &backward);
    assert_eq!(a, b, "peer order changed the merge");
    if let Merged::Changed(items) = a {
        assert_eq!(items, out.items);
    }
});
