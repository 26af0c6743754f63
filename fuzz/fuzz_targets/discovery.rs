//! Discovery decoding, as `discovery::fetch` reads a server's documents: aggregated v2 and
//! v2beta1 (`APIGroupDiscoveryList`), legacy `APIVersions`, `APIGroupList` and
//! `APIResourceList` (completed into the aggregated form as for old releases), and the
//! `Content-Type` that tells them apart. Whatever decodes is indexed for routing and rendered
//! back as legacy documents without panicking; an aggregated list re-encodes to itself.

#![no_main]

use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mvproxy_core::discovery::fetch::aggregated_version;
use mvproxy_core::discovery::legacy;
use mvproxy_core::discovery::snapshot::ServerView;
use mvproxy_core::discovery::types::{
    ApiGroupDiscoveryList, ApiGroupList, ApiResourceList, ApiVersions,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(ct) = HeaderValue::from_bytes(data) {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, ct);
        let _ = aggregated_version(&h);
    }
    if let Ok(list) = serde_json::from_slice::<ApiGroupDiscoveryList>(data) {
        let again: ApiGroupDiscoveryList =
            serde_json::from_slice(&serde_json::to_vec(&list).expect("encodes"))
                .expect("re-decodes");
        assert_eq!(again, list, "re-encoding changed the document");
        let _ = serde_json::to_vec(&legacy::group_list(&list.items));
        for g in &list.items {
            let _ = legacy::api_group(g);
            for v in &g.versions {
                let _ = legacy::resource_list(g.name(), v);
            }
        }
        let view = ServerView::new(Vec::new(), list.items, None);
        for gvr in view.gvrs() {
            assert!(view.serves(gvr));
        }
    }
    if let Ok(v) = serde_json::from_slice::<ApiVersions>(data) {
        let _ = v.versions.len();
    }
    if let Ok(list) = serde_json::from_slice::<ApiGroupList>(data) {
        for g in list.groups {
            let _ = g.versions.len();
        }
    }
    if let Ok(list) = serde_json::from_slice::<ApiResourceList>(data) {
        let g = legacy::group_from_legacy("fuzz.example.com", vec![("v1".to_owned(), list)]);
        let _ = ServerView::new(Vec::new(), vec![g], None);
    }
});
