//! Cost of building the peer-aggregated `/apis` document on a cache miss: the merge of real
//! discovery documents (1.34-dev local, 1.31-dev and oauth-apiserver peers) and its encoding
//! with the ETag.

use std::hint::black_box;

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use mvproxy_core::discovery::merge::{Merged, encode_with_etag, merge};
use mvproxy_core::discovery::types::{ApiGroupDiscovery, ApiGroupDiscoveryList};

use common::fixture;

fn bench(c: &mut Criterion) {
    let local = fixture("kube-apiserver-1.34-dev/aggregated_v2.json");
    let old = fixture("kube-apiserver-1.31-dev/aggregated_v2.json");
    let oauth = fixture("openshift-oauth-apiserver-k8s-1.34.1/aggregated_v2.json");
    let peers: [(&str, &[ApiGroupDiscovery]); 2] = [("apiserver-b", &old), ("apiserver-c", &oauth)];
    let identical: [(&str, &[ApiGroupDiscovery]); 1] = [("apiserver-b", &local)];

    c.bench_function("merge/three_servers", |b| {
        b.iter(|| merge("apiserver-a", black_box(&local), black_box(&peers)))
    });
    c.bench_function("merge/identical_peer", |b| {
        b.iter(|| merge("apiserver-a", black_box(&local), black_box(&identical)))
    });

    let merged = match merge("apiserver-a", &local, &peers) {
        Merged::Changed(groups) => ApiGroupDiscoveryList::v2(groups),
        Merged::Unchanged => panic!("the fixtures differ, so the merge must change"),
    };
    c.bench_function("encode_with_etag/three_servers", |b| {
        b.iter(|| encode_with_etag(black_box(&merged)))
    });
    c.bench_function("merge_and_encode/three_servers", |b| {
        b.iter(
            || match merge("apiserver-a", black_box(&local), black_box(&peers)) {
                Merged::Changed(groups) => encode_with_etag(&ApiGroupDiscoveryList::v2(groups)),
                Merged::Unchanged => (Vec::new(), String::new()),
            },
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
