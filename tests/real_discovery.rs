//! mvproxy's merge against upstream's own, on documents captured from real kube-apiservers
//! (`fixtures/discovery/kube-apiserver-1.35.4/`, `-1.36.3/` and `-1.37.2/`, captured by
//! `scripts/control-plane/capture.sh` as two pairs, 1.35.4 with 1.36.3 and 1.36.3 with 1.37.2;
//! see `fixtures/discovery/README.md`).
//!
//! Each release's `profile=nopeer` document is what mvproxy fetches from it; the
//! `peer-aggregated/aggregated_v2.json` of a release is what that kube-apiserver itself answered
//! with upstream's Mixed Version Proxy on and the other release as its peer. Merging the two
//! nopeer documents with the servers' real IDs (their identity lease names, which order the
//! merge) must give upstream's document: the same groups, versions and resources, in the same
//! order, field for field. Nothing here starts a process.

use std::collections::BTreeMap;

use mvproxy_core::discovery::merge::{Merged, etag_of, merge};
use mvproxy_core::discovery::types::{ApiGroupDiscovery, ApiGroupDiscoveryList};
use serde_json::Value;

use integration::fixture;

const OLD: &str = "kube-apiserver-1.35.4";
const NEW: &str = "kube-apiserver-1.36.3";
const NEWEST: &str = "kube-apiserver-1.37.2";
/// Where the 1.36.3 server's documents of the second pair (its peer being 1.37.2) are.
const NEW_WITH_NEWEST: &str = "kube-apiserver-1.36.3/peer-aggregated-1.37.2";

fn list(rel: &str) -> Vec<ApiGroupDiscovery> {
    let doc: ApiGroupDiscoveryList =
        serde_json::from_str(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    doc.items
}

/// The identity lease name of each release's server when the capture of the pair whose newer
/// release is `newer` ran.
fn server_id(newer: &str, release: &str) -> String {
    let servers: Value =
        serde_json::from_str(&fixture(&format!("{newer}/peer-aggregated/servers.json"))).unwrap();
    servers[release]["id"].as_str().unwrap().to_owned()
}

/// Every difference between two group lists, as a line a reader can act on.
fn differences(ours: &[ApiGroupDiscovery], theirs: &[ApiGroupDiscovery]) -> Vec<String> {
    let mut out = Vec::new();
    let names = |gs: &[ApiGroupDiscovery]| -> Vec<String> {
        gs.iter().map(|g| g.name().to_owned()).collect()
    };
    if names(ours) != names(theirs) {
        out.push(format!(
            "group order: mvproxy {:?}, upstream {:?}",
            names(ours),
            names(theirs)
        ));
    }
    let theirs_by_name: BTreeMap<&str, &ApiGroupDiscovery> =
        theirs.iter().map(|g| (g.name(), g)).collect();
    for g in ours {
        let Some(t) = theirs_by_name.get(g.name()) else {
            out.push(format!("group {} only in mvproxy's", g.name()));
            continue;
        };
        let vs = |x: &ApiGroupDiscovery| -> Vec<String> {
            x.versions.iter().map(|v| v.version.clone()).collect()
        };
        if vs(g) != vs(t) {
            out.push(format!(
                "{}: versions mvproxy {:?}, upstream {:?}",
                g.name(),
                vs(g),
                vs(t)
            ));
        }
        for v in &g.versions {
            let Some(tv) = t.versions.iter().find(|x| x.version == v.version) else {
                continue;
            };
            let rs = |x: &mvproxy_core::discovery::types::ApiVersionDiscovery| -> Vec<String> {
                x.resources.iter().map(|r| r.resource.clone()).collect()
            };
            if rs(v) != rs(tv) {
                out.push(format!(
                    "{}/{}: resources mvproxy {:?}, upstream {:?}",
                    g.name(),
                    v.version,
                    rs(v),
                    rs(tv)
                ));
            }
            if v.freshness != tv.freshness {
                out.push(format!("{}/{}: freshness differs", g.name(), v.version));
            }
            for r in &v.resources {
                if let Some(tr) = tv.resources.iter().find(|x| x.resource == r.resource)
                    && r != tr
                {
                    out.push(format!(
                        "{}/{}/{}: mvproxy {r:?}, upstream {tr:?}",
                        g.name(),
                        v.version,
                        r.resource
                    ));
                }
            }
        }
    }
    for t in theirs {
        if !ours.iter().any(|g| g.name() == t.name()) {
            out.push(format!("group {} only in upstream's", t.name()));
        }
    }
    out
}

/// mvproxy's merge of `local`'s and `peer`'s own documents, with the IDs they had in the capture
/// of the pair whose newer release is `newer`.
fn merged(newer: &str, local: &str, peer: &str) -> Vec<ApiGroupDiscovery> {
    let local_groups = list(&format!("{local}/aggregated_v2_nopeer.json"));
    let peer_groups = list(&format!("{peer}/aggregated_v2_nopeer.json"));
    let (local_id, peer_id) = (server_id(newer, local), server_id(newer, peer));
    match merge(&local_id, &local_groups, &[(&peer_id, &peer_groups)]) {
        Merged::Changed(groups) => groups,
        Merged::Unchanged => {
            panic!("the releases differ, so the merge must change {local}'s document")
        }
    }
}

#[test]
fn merge_of_the_two_releases_equals_the_1_36_servers_peer_aggregated_apis() {
    let ours = merged(NEW, NEW, OLD);
    let theirs = list(&format!("{NEW}/peer-aggregated/aggregated_v2.json"));
    assert_eq!(differences(&ours, &theirs), Vec::<String>::new());
}

#[test]
fn merge_of_1_36_and_1_37_equals_the_1_37_servers_peer_aggregated_apis() {
    let ours = merged(NEWEST, NEWEST, NEW);
    let theirs = list(&format!("{NEWEST}/peer-aggregated/aggregated_v2.json"));
    assert_eq!(differences(&ours, &theirs), Vec::<String>::new());
}

#[test]
fn merge_of_1_36_and_1_37_equals_the_1_36_servers_peer_aggregated_apis() {
    let ours = merged(NEWEST, NEW, NEWEST);
    let theirs = list(&format!("{NEW_WITH_NEWEST}/aggregated_v2.json"));
    assert_eq!(differences(&ours, &theirs), Vec::<String>::new());
}

#[test]
fn merge_of_the_two_releases_equals_the_1_35_servers_peer_aggregated_apis() {
    let ours = merged(NEW, OLD, NEW);
    let theirs = list(&format!("{OLD}/peer-aggregated/aggregated_v2.json"));
    assert_eq!(differences(&ours, &theirs), Vec::<String>::new());
}

#[test]
fn the_merge_is_a_union_of_both_releases() {
    let ours = merged(NEW, NEW, OLD);
    for release in [OLD, NEW] {
        for g in list(&format!("{release}/aggregated_v2_nopeer.json")) {
            let m = ours
                .iter()
                .find(|x| x.name() == g.name())
                .unwrap_or_else(|| {
                    panic!("group {} of {release} missing from the merge", g.name())
                });
            for v in &g.versions {
                let mv = m.versions.iter().find(|x| x.version == v.version);
                let mv = mv.unwrap_or_else(|| panic!("{}/{} missing", g.name(), v.version));
                for r in &v.resources {
                    assert!(
                        mv.resources.iter().any(|x| x.resource == r.resource),
                        "{}/{}/{} of {release} missing from the merge",
                        g.name(),
                        v.version,
                        r.resource
                    );
                }
            }
        }
    }
}

/// kube-apiserver's discovery ETag is the SHA-512 of the document encoded before the encoder
/// adds `kind` and `apiVersion` (its TypeMeta is empty when the hash is taken): mvproxy's
/// `etag_of` of that encoding is the ETag the server sent. mvproxy hashes the document it
/// sends (with `kind` and `apiVersion`), so equal content carries a different ETag through
/// mvproxy than straight from kube-apiserver; a client compares an ETag only with the one it
/// got from the same place.
#[test]
fn etag_of_a_real_document_equals_the_servers_etag() {
    const TYPE_META: &str =
        r#""kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","#;
    for release in [OLD, NEW, NEWEST] {
        let rel = format!("{release}/aggregated_v2_nopeer.json");
        let body = fixture(&rel);
        let headers = fixture(&format!("{rel}.headers"));
        let sent = headers
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .unwrap_or_else(|| panic!("{rel}.headers has no etag"));
        let hashed = body.trim_end().replacen(TYPE_META, "", 1);
        assert_ne!(
            hashed.len(),
            body.trim_end().len(),
            "{rel} starts with its TypeMeta"
        );
        assert_eq!(etag_of(hashed.as_bytes()), sent, "{rel}");
        assert_ne!(etag_of(body.trim_end().as_bytes()), sent, "{rel}");
    }
}
