use std::collections::BTreeSet;

use super::*;
use crate::discovery::types::{ApiGroup, ApiGroupDiscoveryList, ApiResourceList};

fn fixture(path: &str) -> String {
    let full = format!(
        "{}/../../fixtures/discovery/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {full}: {e}"))
}

/// A real release's own (`profile=nopeer`) core group and `/apis` groups.
fn release(dir: &str) -> (Vec<ApiGroupDiscovery>, Vec<ApiGroupDiscovery>) {
    let parse = |file: &str| -> Vec<ApiGroupDiscovery> {
        let list: ApiGroupDiscoveryList =
            serde_json::from_str(&fixture(&format!("{dir}/{file}"))).unwrap();
        list.items
    };
    (
        parse("api_aggregated_v2_nopeer.json"),
        parse("aggregated_v2_nopeer.json"),
    )
}

/// The identity lease name of `release`'s server in the capture of the pair whose newer
/// release is `newer` (`peer-aggregated/servers.json`).
fn server_id(newer: &str, release: &str) -> String {
    let servers: serde_json::Value =
        serde_json::from_str(&fixture(&format!("{newer}/peer-aggregated/servers.json"))).unwrap();
    servers[release]["id"].as_str().unwrap().to_owned()
}

/// The captured pairs, older release first.
const PAIRS: [(&str, &str); 2] = [
    ("kube-apiserver-1.35.4", "kube-apiserver-1.36.3"),
    ("kube-apiserver-1.36.3", "kube-apiserver-1.37.2"),
];

fn names(list: &ApiResourceList) -> BTreeSet<String> {
    list.resources.iter().map(|r| r.name.clone()).collect()
}

/// The server's own legacy `APIResourceList` of a group-version, as captured; `None` where
/// it does not serve it (the capture holds its `404` `Status` then).
fn captured_list(dir: &str, group: &str, version: &str) -> Option<ApiResourceList> {
    let path = if group.is_empty() {
        format!("{dir}/legacy/api/{version}.json")
    } else {
        format!("{dir}/legacy/apis/{group}/{version}.json")
    };
    let full = format!(
        "{}/../../fixtures/discovery/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    let body: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(full).ok()?).unwrap();
    (body["kind"] == "APIResourceList").then(|| serde_json::from_value(body).unwrap())
}

/// Every group-version the two releases both serve, with the union of their resources from
/// each server's own legacy capture: what a legacy client must see through either proxy.
#[test]
fn real_pairs_every_shared_group_version_lists_the_union_of_both_servers_resources() {
    let directions = PAIRS
        .iter()
        .flat_map(|&(old, new)| [(old, new, new), (new, old, new)]);
    for (local_dir, peer_dir, newer) in directions {
        let (local_id, peer_id) = (server_id(newer, local_dir), server_id(newer, peer_dir));
        let (local_id, peer_id) = (local_id.as_str(), peer_id.as_str());
        let (local_core, local_apis) = release(local_dir);
        let (peer_core, peer_apis) = release(peer_dir);
        let docs = GroupDocs::build(
            Groups {
                id: local_id,
                core: &local_core,
                apis: &local_apis,
            },
            &[Groups {
                id: peer_id,
                core: &peer_core,
                apis: &peer_apis,
            }],
        );
        let mut merged_gvs = 0;
        for group in local_core.iter().chain(&local_apis) {
            for version in &group.versions {
                let (g, v) = (group.name(), version.version.as_str());
                let Some(theirs) = captured_list(peer_dir, g, v) else {
                    continue; // not shared: the local server's own document is the whole truth
                };
                let ours = captured_list(local_dir, g, v).unwrap();
                let union: BTreeSet<String> =
                    names(&ours).union(&names(&theirs)).cloned().collect();
                let served: ApiResourceList = match docs.version(g, v) {
                    Some(doc) => {
                        merged_gvs += 1;
                        serde_json::from_slice(&doc.body).unwrap()
                    }
                    None => ours.clone(),
                };
                assert_eq!(names(&served), union, "{local_dir}: {g}/{v}");
                // A resource only the peer serves is as the peer describes it, save the
                // storage version hash that aggregated discovery does not carry.
                for r in served
                    .resources
                    .iter()
                    .filter(|r| !names(&ours).contains(&r.name))
                {
                    let mut want = theirs
                        .resources
                        .iter()
                        .find(|t| t.name == r.name)
                        .unwrap()
                        .clone();
                    want.storage_version_hash = None;
                    assert_eq!(r, &want, "{local_dir}: {g}/{v} {}", r.name);
                }
            }
        }
        // Each newer release adds resources to group-versions the older one serves too (1.36:
        // MutatingAdmissionPolicy in admissionregistration.k8s.io/v1; 1.37: devicetaintrules in
        // resource.k8s.io/v1): the older side has something to merge. Neither older release
        // adds one to a group-version the newer serves, so the newer side serves its own.
        assert_eq!(
            merged_gvs > 0,
            newer == peer_dir,
            "{local_dir} with {peer_dir}: {merged_gvs} merged"
        );
    }
    // The named case of the issue, from the old server's side.
    let (old_core, old_apis) = release("kube-apiserver-1.35.4");
    let (new_core, new_apis) = release("kube-apiserver-1.36.3");
    let (old_id, new_id) = (
        server_id("kube-apiserver-1.36.3", "kube-apiserver-1.35.4"),
        server_id("kube-apiserver-1.36.3", "kube-apiserver-1.36.3"),
    );
    let docs = GroupDocs::build(
        Groups {
            id: &old_id,
            core: &old_core,
            apis: &old_apis,
        },
        &[Groups {
            id: &new_id,
            core: &new_core,
            apis: &new_apis,
        }],
    );
    let list: ApiResourceList = serde_json::from_slice(
        &docs
            .version("admissionregistration.k8s.io", "v1")
            .unwrap()
            .body,
    )
    .unwrap();
    assert!(names(&list).contains("mutatingadmissionpolicies"));
    assert_eq!(list.group_version, "admissionregistration.k8s.io/v1");
}

fn group(name: &str, versions: &[(&str, &[&str])]) -> ApiGroupDiscovery {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "versions": versions.iter().map(|(v, rs)| serde_json::json!({
            "version": v,
            "freshness": "Current",
            "resources": rs.iter().map(|r| serde_json::json!({
                "resource": r,
                "responseKind": {"group": name, "version": v, "kind": r},
                "scope": "Namespaced",
                "singularResource": r,
                "verbs": ["get", "list"],
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

#[test]
fn a_group_gains_the_peers_version_and_keeps_the_merged_order() {
    let local = [group("example.io", &[("v1", &["widgets"])])];
    let peer = [group(
        "example.io",
        &[("v2", &["widgets"]), ("v1", &["widgets"])],
    )];
    let docs = GroupDocs::build(
        Groups {
            id: "a",
            core: &[],
            apis: &local,
        },
        &[Groups {
            id: "b",
            core: &[],
            apis: &peer,
        }],
    );
    let api_group: ApiGroup =
        serde_json::from_slice(&docs.group("example.io").unwrap().body).unwrap();
    let versions: Vec<&str> = api_group
        .versions
        .iter()
        .map(|v| v.version.as_str())
        .collect();
    assert_eq!(versions, ["v2", "v1"]);
    assert_eq!(api_group.preferred_version.unwrap().version, "v2");
    // v1 has the same resources on both: the local server's own document is served.
    assert!(docs.version("example.io", "v1").is_none());
    // v2 is not the local server's: routed to the peer, not merged here.
    assert!(docs.version("example.io", "v2").is_none());
}

#[test]
fn equal_servers_merge_nothing_and_core_changes_are_merged() {
    let apis = [group("apps", &[("v1", &["deployments"])])];
    let core = [group("", &[("v1", &["pods"])])];
    let same = GroupDocs::build(
        Groups {
            id: "a",
            core: &core,
            apis: &apis,
        },
        &[Groups {
            id: "b",
            core: &core,
            apis: &apis,
        }],
    );
    assert!(same.is_empty());

    let more_core = [group("", &[("v1", &["pods", "podgroups"])])];
    let docs = GroupDocs::build(
        Groups {
            id: "a",
            core: &core,
            apis: &apis,
        },
        &[Groups {
            id: "b",
            core: &more_core,
            apis: &apis,
        }],
    );
    let list: ApiResourceList =
        serde_json::from_slice(&docs.version("", "v1").unwrap().body).unwrap();
    assert_eq!(list.group_version, "v1");
    assert_eq!(
        names(&list),
        BTreeSet::from(["podgroups".to_owned(), "pods".to_owned()])
    );
    assert_eq!(
        docs.version("", "v1").unwrap().etag,
        merge::etag_of(&docs.version("", "v1").unwrap().body)
    );
    assert!(docs.version("apps", "v1").is_none() && docs.group("apps").is_none());
}
