use super::*;

fn index(entries: &[(&str, &str)]) -> Index {
    Index {
        paths: entries
            .iter()
            .map(|(k, hash)| {
                (
                    (*k).to_owned(),
                    Entry {
                        server_relative_url: format!("/openapi/v3/{k}?hash={hash}"),
                    },
                )
            })
            .collect(),
    }
}

/// Routed to peer "b" for what the local server does not serve (apps/v1, api/v1).
fn routed(doc: &DocPath, peer: &ServerName) -> bool {
    let local = matches!(doc.group_version(), ("apps", _) | ("", Some("v1")));
    !local && peer.as_str() == "b"
}

#[test]
fn local_entries_are_kept_and_peer_only_group_versions_added_with_the_peers_hash() {
    let local = index(&[("api/v1", "L1"), ("apis/apps/v1", "L2"), ("version", "L3")]);
    let peer = index(&[
        ("api/v1", "P1"),
        ("apis/apps/v1", "P2"),
        ("apis/scheduling.k8s.io", "P4"),
        ("apis/scheduling.k8s.io/v1alpha2", "P5"),
        ("logs", "P6"),
    ]);
    let merged = merge(&local, &[("b".into(), peer)], routed);
    assert_eq!(
        merged,
        index(&[
            ("api/v1", "L1"),
            ("apis/apps/v1", "L2"),
            ("version", "L3"),
            ("apis/scheduling.k8s.io", "P4"),
            ("apis/scheduling.k8s.io/v1alpha2", "P5"),
        ])
    );
}

#[test]
fn a_peer_nothing_is_routed_to_adds_nothing() {
    let local = index(&[("api/v1", "L1")]);
    let peer = index(&[("apis/example.com/v1", "X")]);
    let merged = merge(&local, &[("c".into(), peer)], routed);
    assert_eq!(merged, local);
}

#[test]
fn encoded_as_kube_openapi_writes_it() {
    let (body, etag) = encode(&index(&[("apis/apps/v1", "AB"), ("api/v1", "CD")]));
    assert_eq!(
        String::from_utf8(body).expect("UTF-8"),
        r#"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=CD"},"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=AB"}}}"#
    );
    assert!(etag.starts_with('"') && etag.ends_with('"') && etag.len() == 130);
    // SHA-512 of "abc" (FIPS 180-2, appendix C.1), in kube-openapi's `%X`.
    assert_eq!(
        etag_of(b"abc"),
        "\"DDAF35A193617ABACC417349AE20413112E6FA4E89A97EA20A9EEEE64B55D39A2192992A274FC1A836BA3C23A3FEEBBD454D4423643CE80E2A9AC94FA54CA49F\""
    );
}

/// The real 1.36.3 index as a peer's, merged into a local index without
/// `scheduling.k8s.io/v1alpha2`: that entry comes back as the peer wrote it, nothing else.
#[test]
fn a_real_index_entry_only_the_peer_has() {
    let path = format!(
        "{}/../../fixtures/openapi/kube-apiserver-1.36.3/openapi_v3.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let peer: Index =
        serde_json::from_slice(&std::fs::read(&path).expect("fixture")).expect("an index");
    let key = "apis/scheduling.k8s.io/v1alpha2";
    assert!(peer.paths.contains_key(key));
    let mut local = peer.clone();
    local.paths.remove(key);
    let merged = merge(&local, &[("b".into(), peer.clone())], |doc, _| {
        doc.group_version() == ("scheduling.k8s.io", Some("v1alpha2"))
    });
    assert_eq!(merged, peer);
    let (body, _) = encode(&peer);
    assert_eq!(
        body,
        std::fs::read(&path).expect("fixture"),
        "written byte for byte as kube-openapi writes it"
    );
}
