use super::*;

#[test]
fn every_family_of_the_contract_is_exposed_with_its_name() {
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    m.discovery_nopeer_requests.inc();
    m.rerouted_requests
        .get_or_create(&RerouteLabels {
            code: 200,
            group: "resource.k8s.io".into(),
            version: "v1beta2".into(),
            resource: "resourceclaims".into(),
        })
        .inc();
    m.merge_duration.observe(0.0001);
    m.peer_proxy_errors
        .get_or_create(&PeerErrorLabels {
            r#type: "proxy_transport",
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
        })
        .inc();
    m.peer_discovery_sync_errors
        .get_or_create(&TypeLabels {
            r#type: "fetch_discovery",
        })
        .inc();
    let route = RouteLabels {
        route: "peer",
        peer: "b".into(),
    };
    m.requests
        .get_or_create(&RequestLabels {
            route: route.route,
            reason: "peer_only",
            peer: route.peer.clone(),
            code: 200,
            method: "GET",
        })
        .inc();
    m.request_duration.get_or_create(&route).observe(
        0.02,
        Some(TraceLabels {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        }),
        None,
    );
    let hit = ResultLabels { result: "hit" };
    m.cache_lookups.get_or_create(&hit).inc();
    m.cache_lookup_duration.get_or_create(&hit).observe(0.00001);
    m.merges.get_or_create(&hit).inc();
    let peer = PeerLabels { peer: "b".into() };
    m.peer_fetch_duration.get_or_create(&peer).observe(0.1);
    m.peer_up.get_or_create(&peer).set(1);
    m.discovery_resources
        .get_or_create(&ServerLabels { server: "a".into() })
        .set(42);
    m.skew_requests
        .get_or_create(&SkewLabels {
            client: "kube-controller-manager (sa kube-system/generic-garbage-collector)".into(),
            group: "flowcontrol.apiserver.k8s.io".into(),
            version: "v1beta3".into(),
            resource: "flowschemas".into(),
            side: side::OLD_ONLY,
        })
        .inc();
    let (text, _) = encode(&registry, false).unwrap();
    for name in [
        "mvproxy_rerouted_request_total{code=\"200\",group=\"resource.k8s.io\",version=\"v1beta2\",resource=\"resourceclaims\"} 1",
        "mvproxy_discovery_nopeer_requests_total 1",
        "mvproxy_peer_proxy_errors_total{type=\"proxy_transport\",group=\"\",version=\"v1\",resource=\"pods\"} 1",
        "mvproxy_peer_discovery_sync_errors_total{type=\"fetch_discovery\"} 1",
        "mvproxy_requests_total{route=\"peer\",reason=\"peer_only\",peer=\"b\",code=\"200\",method=\"GET\"} 1",
        "mvproxy_request_duration_seconds_bucket{route=\"peer\",peer=\"b\",le=\"0.03\"} 1",
        "mvproxy_request_duration_seconds_bucket{route=\"peer\",peer=\"b\",le=\"0.015\"} 0",
        "mvproxy_discovery_cache_lookups_total{result=\"hit\"} 1",
        "mvproxy_discovery_cache_lookup_duration_seconds_bucket{result=\"hit\",le=\"1e-05\"} 1",
        "mvproxy_discovery_merges_total{result=\"hit\"} 1",
        "mvproxy_discovery_merge_duration_seconds_bucket{le=\"0.00025\"} 1",
        "mvproxy_peer_discovery_fetch_duration_seconds_count{peer=\"b\"} 1",
        "mvproxy_peer_up{peer=\"b\"} 1",
        "mvproxy_discovery_resources{server=\"a\"} 42",
        "mvproxy_skew_requests_total{client=\"kube-controller-manager (sa kube-system/generic-garbage-collector)\",group=\"flowcontrol.apiserver.k8s.io\",version=\"v1beta3\",resource=\"flowschemas\",side=\"old_only\"} 1",
    ] {
        assert!(text.contains(name), "missing {name:?} in\n{text}");
    }
    let (om, ct) = encode(&registry, true).unwrap();
    assert!(om.ends_with("# EOF\n"));
    assert!(
        om.contains(r#"mvproxy_request_duration_seconds_bucket{le="0.03",route="peer",peer="b"} 1 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.02"#),
        "{om}"
    );
    assert!(ct.starts_with("application/openmetrics-text"));
}

#[test]
fn requests_counted_through_cached_handles_land_in_their_series() {
    use values::{REASON_PEER_ONLY, REASON_SERVED_LOCALLY, ROUTE_LOCAL, ROUTE_PEER};
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    // (route, reason, peer, code, how many times)
    let counted = [
        (ROUTE_LOCAL, REASON_SERVED_LOCALLY, "", 200, 3),
        (ROUTE_LOCAL, REASON_SERVED_LOCALLY, "", 404, 1),
        (ROUTE_PEER, REASON_PEER_ONLY, "b", 200, 2),
    ];
    for (route, reason, peer, code, times) in counted {
        for _ in 0..times {
            m.count_request(route, reason, peer, code, "GET");
        }
    }
    for _ in 0..3 {
        m.observe_request(values::ROUTE_LOCAL, "", 0.002, None);
        m.observe_lookup(true, 0.000_001);
    }
    m.observe_request(values::ROUTE_PEER, "b", 0.02, None);
    m.observe_lookup(false, 0.000_001);
    let (text, _) = encode(&registry, false).unwrap();
    for line in [
        "mvproxy_requests_total{route=\"local\",reason=\"served_locally\",peer=\"\",code=\"200\",method=\"GET\"} 3",
        "mvproxy_requests_total{route=\"local\",reason=\"served_locally\",peer=\"\",code=\"404\",method=\"GET\"} 1",
        "mvproxy_requests_total{route=\"peer\",reason=\"peer_only\",peer=\"b\",code=\"200\",method=\"GET\"} 2",
        "mvproxy_request_duration_seconds_count{route=\"local\",peer=\"\"} 3",
        "mvproxy_request_duration_seconds_count{route=\"peer\",peer=\"b\"} 1",
        "mvproxy_discovery_cache_lookups_total{result=\"hit\"} 3",
        "mvproxy_discovery_cache_lookups_total{result=\"miss\"} 1",
        "mvproxy_discovery_cache_lookup_duration_seconds_count{result=\"hit\"} 3",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

#[test]
fn families_with_known_label_values_are_on_metrics_from_the_start_at_zero() {
    let mut registry = Registry::default();
    let _m = Metrics::register(&mut registry);
    let (text, _) = encode(&registry, false).unwrap();
    for line in [
        "# TYPE mvproxy_peer_discovery_sync_errors_total counter",
        "mvproxy_peer_discovery_sync_errors_total{type=\"hostport_resolution\"} 0",
        "mvproxy_peer_discovery_sync_errors_total{type=\"fetch_discovery\"} 0",
        "mvproxy_peer_discovery_sync_errors_total{type=\"lease_list\"} 0",
        "mvproxy_peer_discovery_sync_errors_total{type=\"endpointslice_list\"} 0",
        "mvproxy_local_proxy_errors_total{type=\"proxy_transport\"} 0",
        "mvproxy_discovery_cache_lookups_total{result=\"hit\"} 0",
        "mvproxy_discovery_cache_lookups_total{result=\"miss\"} 0",
        "mvproxy_discovery_merges_total{result=\"miss\"} 0",
        "mvproxy_discovery_cache_lookup_duration_seconds_count{result=\"miss\"} 0",
        "mvproxy_peer_proxy_errors_total{type=\"endpoint_resolution\",group=\"\",version=\"\",resource=\"\"} 0",
        "mvproxy_request_duration_seconds_count{route=\"local\",peer=\"\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn a_peer_that_leaves_takes_every_series_labelled_with_it() {
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    for peer in ["b", "c"] {
        let labels = PeerLabels { peer: peer.into() };
        m.peer_up.get_or_create(&labels).set(1);
        m.peer_fetch_duration.get_or_create(&labels).observe(0.02);
        m.discovery_resources
            .get_or_create(&ServerLabels {
                server: peer.into(),
            })
            .set(7);
        m.set_server_version(peer, None, Some("v1.35.4"));
    }
    m.forget_peer("b", Some("v1.35.4"));
    let (text, _) = encode(&registry, false).unwrap();
    assert!(!text.contains("\"b\""), "series of peer b left:\n{text}");
    for line in [
        "mvproxy_peer_up{peer=\"c\"} 1",
        "mvproxy_peer_discovery_fetch_duration_seconds_count{peer=\"c\"} 1",
        "mvproxy_discovery_resources{server=\"c\"} 7",
        "mvproxy_server_info{server=\"c\",git_version=\"v1.35.4\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn every_family_is_declared_at_the_first_scrape_before_any_series() {
    let mut registry = Registry::default();
    let _m = Metrics::register(&mut registry);
    crate::trace::Tracer::none().register_metrics(&mut registry);
    for openmetrics in [false, true] {
        let (text, _) = encode(&registry, openmetrics).unwrap();
        // OpenMetrics names a counter's family without `_total`.
        let counter = |name: &str| {
            if openmetrics {
                name.trim_end_matches("_total").to_owned()
            } else {
                name.to_owned()
            }
        };
        for (name, ty) in [
            ("mvproxy_requests_total", "counter"),
            ("mvproxy_request_duration_seconds", "histogram"),
            (
                "mvproxy_discovery_cache_lookup_duration_seconds",
                "histogram",
            ),
            ("mvproxy_peer_proxy_errors_total", "counter"),
            ("mvproxy_skew_requests_total", "counter"),
            ("mvproxy_rerouted_request_total", "counter"),
            ("mvproxy_peer_up", "gauge"),
            ("mvproxy_peer_discovery_fetch_duration_seconds", "histogram"),
            ("mvproxy_discovery_resources", "gauge"),
            ("mvproxy_target_missing_requests_total", "counter"),
            ("mvproxy_target_info", "gauge"),
            ("mvproxy_server_info", "gauge"),
            ("mvproxy_deprecated_requests_total", "counter"),
            ("mvproxy_deletions_waiting_total", "counter"),
            ("mvproxy_undecodable_objects_total", "counter"),
            ("mvproxy_upstream_replays_total", "counter"),
            ("mvproxy_spans_dropped_total", "counter"),
        ] {
            let name = if ty == "counter" {
                counter(name)
            } else {
                name.to_owned()
            };
            for line in [format!("# HELP {name} "), format!("# TYPE {name} {ty}\n")] {
                assert!(
                    text.contains(&line),
                    "missing {line:?} (openmetrics: {openmetrics}) in\n{text}"
                );
            }
        }
    }
    let (text, _) = encode(&registry, false).unwrap();
    for line in [
        "mvproxy_upstream_replays_total{upstream=\"local\",protocol=\"http1\"} 0",
        "mvproxy_upstream_replays_total{upstream=\"peer\",protocol=\"http2\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

/// A server upgraded in place: its old version's series ends as the new one starts, so each
/// server has one `mvproxy_server_info` series at a time and a dashboard sees the change.
#[test]
fn a_version_change_replaces_the_servers_info_series() {
    let mut registry = Registry::default();
    let m = Metrics::register(&mut registry);
    m.set_server_version("a", None, Some("v1.35.4"));
    m.set_server_version("a", Some("v1.35.4"), Some("v1.35.4"));
    m.set_server_version("b", None, Some("v1.35.4"));
    m.set_server_version("a", Some("v1.35.4"), Some("v1.36.3"));
    let (text, _) = encode(&registry, false).unwrap();
    let mut info: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("mvproxy_server_info{"))
        .collect();
    info.sort_unstable();
    assert_eq!(
        info,
        [
            "mvproxy_server_info{server=\"a\",git_version=\"v1.36.3\"} 1",
            "mvproxy_server_info{server=\"b\",git_version=\"v1.35.4\"} 1",
        ]
    );
}
