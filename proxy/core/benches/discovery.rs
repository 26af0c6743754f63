//! Discovery on the request path, against the targets: the routing decision for a
//! resource request (a GVR lookup) must stay flat from 100 to 10 000 GVRs; the merged `/apis`
//! is served from the snapshot's cache; a merge of three release documents (1.34-dev local,
//! 1.31-dev and oauth-apiserver peers, from `fixtures/discovery/`) rebuilds it.
//!
//! `cargo bench -p mvproxy-core --bench discovery`

use std::collections::BTreeSet;
use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use http::{HeaderMap, Method};
use mvproxy_core::classify::classify;
use mvproxy_core::discovery::types::{
    ApiGroupDiscovery, ApiResourceDiscovery, ApiVersionDiscovery, ObjectMeta,
};
use mvproxy_core::discovery::{ServerState, Snapshot};
use mvproxy_core::route::{Route, decide};

mod common;
use common::{fixture, state, view};

/// `n` GVRs: groups `g{i}.example.com` of one version with 10 resources each.
fn synthetic(n: usize, prefix: &str) -> Vec<ApiGroupDiscovery> {
    (0..n.div_ceil(10))
        .map(|g| ApiGroupDiscovery {
            metadata: ObjectMeta {
                name: format!("{prefix}{g}.example.com"),
            },
            versions: vec![ApiVersionDiscovery {
                freshness: Some("Current".into()),
                version: "v1".into(),
                resources: (0..10.min(n - g * 10))
                    .map(|r| ApiResourceDiscovery {
                        categories: Vec::new(),
                        resource: format!("things{r}"),
                        response_kind: None,
                        scope: "Namespaced".into(),
                        short_names: Vec::new(),
                        singular_resource: format!("thing{r}"),
                        subresources: Vec::new(),
                        verbs: vec!["get".into(), "list".into(), "watch".into()],
                    })
                    .collect(),
            }],
        })
        .collect()
}

fn snapshot(servers: Vec<ServerState>) -> Snapshot {
    Snapshot::build(servers, &BTreeSet::new(), Default::default(), true)
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    let headers = HeaderMap::new();
    for n in [100, 1_000, 10_000] {
        // local serves `l*` groups, the peer `p*` groups: n GVRs in the index each
        let snap = snapshot(vec![
            state("apiserver-a", true, view(synthetic(n, "l"))),
            state("apiserver-b", false, view(synthetic(n, "p"))),
        ]);
        let last = n.div_ceil(10) - 1;
        for (name, path) in [
            (
                "served_locally",
                format!("/apis/l{last}.example.com/v1/namespaces/default/things0"),
            ),
            (
                "peer_only",
                format!("/apis/p{last}.example.com/v1/namespaces/default/things0"),
            ),
        ] {
            let info = classify(&Method::GET, &path, None);
            let route = decide(&info, &Method::GET, &headers, &snap, |_| 0);
            assert!(
                matches!(
                    (name, &route),
                    ("served_locally", Route::Local(_)) | ("peer_only", Route::Peer(_))
                ),
                "{name}: {route:?}"
            );
            group.bench_with_input(BenchmarkId::new(name, n), &info, |b, info| {
                b.iter(|| decide(black_box(info), &Method::GET, &headers, &snap, |_| 0))
            });
        }
    }
    group.finish();
}

fn merged(c: &mut Criterion) {
    let local = fixture("kube-apiserver-1.34-dev/aggregated_v2.json");
    let old = fixture("kube-apiserver-1.31-dev/aggregated_v2.json");
    let oauth = fixture("openshift-oauth-apiserver-k8s-1.34.1/aggregated_v2.json");
    let servers = vec![
        state("apiserver-a", true, view(local)),
        state("apiserver-b", false, view(old)),
        state("apiserver-c", false, view(oauth)),
    ];
    let snap = snapshot(servers.clone());
    let (_, hit) = snap.merged().expect("local is synced");
    assert!(!hit, "the first use builds it");
    c.bench_function("merged_apis/cached", |b| {
        b.iter(|| {
            let (m, hit) = black_box(&snap).merged().expect("synced");
            assert!(hit);
            m.aggregated.clone()
        })
    });
    // a new snapshot (a discovery change) merges the three documents and encodes the result
    c.bench_function("merged_apis/rebuild_three_releases", |b| {
        b.iter_batched(
            || snapshot(servers.clone()),
            |snap| snap.merged().map(|(m, _)| m.aggregated.len()),
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, lookup, merged);
criterion_main!(benches);
