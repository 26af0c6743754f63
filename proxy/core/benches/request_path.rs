//! Cost of the per-request work before any I/O: classifying the path, and the routing
//! decision over a snapshot built from real discovery documents (1.34-dev local, 1.31-dev
//! peer), for a locally served GVR, a peer-only one and one nobody serves; and the readiness
//! record of a request (`mvproxy_core::skew`): nothing for a GVR every server serves, the
//! `User-Agent` parsed and the client counted for one in the skew.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, Method};
use mvproxy_core::classify::classify;
use mvproxy_core::discovery::side::ServerVersion;
use mvproxy_core::discovery::{ServerState, Snapshot};
use mvproxy_core::route::decide;
use mvproxy_core::skew::SkewClients;
use mvproxy_telemetry::metrics::Metrics;
use prometheus_client::registry::Registry;

mod common;
use common::{fixture, state, view};

/// The server's view of the fixture at `path`, at release `git_version`.
fn release(name: &str, local: bool, path: &str, git_version: &str) -> ServerState {
    let version =
        ServerVersion::from_json(format!(r#"{{"gitVersion":"{git_version}"}}"#).as_bytes());
    state(name, local, view(fixture(path)).with_version(version))
}

fn snapshot() -> Snapshot {
    let local = release(
        "apiserver-a",
        true,
        "kube-apiserver-1.34-dev/aggregated_v2.json",
        "v1.34.0",
    );
    let peer = release(
        "apiserver-b",
        false,
        "kube-apiserver-1.31-dev/aggregated_v2.json",
        "v1.31.0",
    );
    Snapshot::build(
        vec![local, peer],
        &BTreeSet::new(),
        Default::default(),
        true,
    )
}

const PATHS: [(&str, &str); 3] = [
    (
        "served_locally",
        "/apis/apps/v1/namespaces/default/deployments/web",
    ),
    (
        "peer_only",
        "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts",
    ),
    ("nobody", "/apis/example.com/v1/namespaces/default/widgets"),
];

fn bench(c: &mut Criterion) {
    for (name, path) in PATHS {
        c.bench_function(&format!("classify/{name}"), |b| {
            b.iter(|| {
                classify(
                    black_box(&Method::GET),
                    black_box(path),
                    black_box(Some("watch=true")),
                )
            })
        });
    }
    let snap = snapshot();
    let headers = HeaderMap::new();
    for (name, path) in PATHS {
        let info = classify(&Method::GET, path, None);
        c.bench_function(&format!("decide/{name}"), |b| {
            b.iter(|| {
                decide(
                    black_box(&info),
                    &Method::GET,
                    &headers,
                    black_box(&snap),
                    |_| 0,
                )
            })
        });
    }
    let mut registry = Registry::default();
    let skew_clients = SkewClients::new(
        100,
        Arc::new(Metrics::register(&mut registry)),
        http::header::HeaderName::from_static("x-remote-user"),
    );
    let mut kcm = HeaderMap::new();
    kcm.insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(
            "kube-controller-manager/v1.31.2 (linux/amd64) kubernetes/abc123/system:serviceaccount:kube-system:generic-garbage-collector",
        ),
    );
    for (name, path) in PATHS {
        let info = classify(&Method::GET, path, None);
        let route = decide(&info, &Method::GET, &headers, &snap, |_| 0);
        c.bench_function(&format!("readiness/{name}"), |b| {
            b.iter(|| skew_clients.observe(black_box(&snap), black_box(&info), &route, &kcm))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
