use super::*;

#[test]
fn every_family_is_declared_before_any_export() {
    let mut registry = Registry::default();
    register(&mut registry, None);
    let (text, _) = crate::metrics::encode(&registry, false).unwrap();
    for line in [
        "mvproxy_spans_exported_total 0",
        "mvproxy_spans_dropped_total{reason=\"queue_full\"} 0",
        "mvproxy_spans_dropped_total{reason=\"rejected\"} 0",
        "mvproxy_spans_dropped_total{reason=\"export_failed\"} 0",
        "mvproxy_span_export_requests_total{outcome=\"success\"} 0",
        "mvproxy_span_export_requests_total{outcome=\"partial_success\"} 0",
        "mvproxy_span_export_requests_total{outcome=\"retry\"} 0",
        "mvproxy_span_export_requests_total{outcome=\"failure\"} 0",
        "mvproxy_span_export_queue_length 0",
        "mvproxy_span_export_queue_capacity 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}
