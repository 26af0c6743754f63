use super::*;

fn settings(vars: &[(&str, &str)]) -> Result<Settings, TelemetryError> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Settings::from_lookup(
        |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        false,
    )
}

#[test]
fn no_endpoint_no_exporter() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.export, None);
    assert_eq!(s.service_name, "mvproxy");
}

#[test]
fn endpoints_and_protocols() {
    let s = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
    assert_eq!(
        s.export,
        Some(Export {
            endpoint: "http://127.0.0.1:4318/v1/traces".into(),
            grpc: false,
            endpoint_var: ENDPOINT,
            headers: HeaderMap::new(),
            timeout: Duration::from_secs(10),
            gzip: false,
            tls: None,
        })
    );
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ])
    .unwrap();
    assert_eq!(s.export.unwrap().endpoint, "http://127.0.0.1:4317");
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://traces:4318/custom",
        ),
    ])
    .unwrap();
    let export = s.export.unwrap();
    assert_eq!(export.endpoint_var, TRACES_ENDPOINT, "errors name it");
    assert_eq!(
        export.endpoint, "http://traces:4318/custom",
        "the signal variable is used as is"
    );
}

#[test]
fn service_name_sources() {
    let s = settings(&[(
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=staging,service.name=proxy-a",
    )])
    .unwrap();
    assert_eq!(s.service_name, "proxy-a");
    let s = settings(&[
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name=proxy-a"),
        ("OTEL_SERVICE_NAME", "proxy-b"),
    ])
    .unwrap();
    assert_eq!(s.service_name, "proxy-b");
}

#[test]
fn bad_values_name_the_variable() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp")],
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            &[("OTEL_TRACES_SAMPLER", "sometimes")],
            "OTEL_TRACES_SAMPLER",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4318")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.crt"),
            ],
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                    "/nonexistent/ca.crt",
                ),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/also/nonexistent"),
            ],
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
                (
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    "/nonexistent/c.crt",
                ),
            ],
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/some/key"),
            ],
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
            ],
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "false"),
            ],
            "OTEL_EXPORTER_OTLP_INSECURE",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "maybe"),
            ],
            "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
        ),
        (&[("OTEL_SDK_DISABLED", "yes")], "OTEL_SDK_DISABLED"),
        (
            &[("OTEL_TRACES_EXPORTER", "console")],
            "OTEL_TRACES_EXPORTER",
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "team")],
            "OTEL_RESOURCE_ATTRIBUTES",
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "team=a%2")],
            "OTEL_RESOURCE_ATTRIBUTES",
        ),
        (
            &[("OTEL_BSP_MAX_QUEUE_SIZE", "0")],
            "OTEL_BSP_MAX_QUEUE_SIZE",
        ),
        (
            &[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many")],
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        ),
        (
            &[("OTEL_BSP_SCHEDULE_DELAY", "5s")],
            "OTEL_BSP_SCHEDULE_DELAY",
        ),
        (
            &[("OTEL_BSP_EXPORT_TIMEOUT", "-1")],
            "OTEL_BSP_EXPORT_TIMEOUT",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "ten"),
            ],
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "authorization"),
            ],
            "OTEL_EXPORTER_OTLP_HEADERS",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-tenant=%zz"),
            ],
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ),
        (
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ],
            "OTEL_TRACES_SAMPLER_ARG",
        ),
    ];
    for (vars, var) in cases {
        assert_eq!(settings(vars).unwrap_err().var, *var, "{vars:?}");
    }
}

#[test]
fn export_headers_timeouts_and_batching() {
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Basic%20dTpw, x-scope-orgid=tenant-1",
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8192"),
    ])
    .unwrap();
    let export = s.export.unwrap();
    assert_eq!(
        export.headers["authorization"], "Basic dTpw",
        "percent-decoded"
    );
    assert_eq!(export.headers["x-scope-orgid"], "tenant-1");
    assert_eq!(export.timeout, Duration::from_millis(2500));
    assert_eq!(s.batching.schedule_delay, Duration::from_millis(200));
    assert_eq!(s.batching.max_queue, 8192);
    assert_eq!(s.batching.max_batch, 512, "the SDK's default");
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-b=2"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
    ])
    .unwrap();
    let export = s.export.unwrap();
    assert_eq!(
        export.headers.get("x-a"),
        None,
        "the signal's own variable wins"
    );
    assert_eq!(export.headers["x-b"], "2");
    assert_eq!(export.timeout, Duration::from_millis(700));
}

#[test]
fn compression_and_the_signal_variables_winning() {
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
    ])
    .unwrap();
    assert!(s.export.unwrap().gzip);
    let s = settings(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"),
    ])
    .unwrap();
    assert!(!s.export.unwrap().gzip, "the signal's own variable wins");
}

#[test]
fn disabled_and_exporter_choice() {
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
    for off in [
        ("OTEL_SDK_DISABLED", "TRUE"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        assert_eq!(settings(&[endpoint, off]).unwrap().export, None, "{off:?}");
    }
    let s = settings(&[endpoint, ("OTEL_SDK_DISABLED", "false")]).unwrap();
    assert!(s.export.is_some());
    let s = settings(&[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap();
    assert_eq!(
        s.export.unwrap().endpoint,
        "http://localhost:4318/v1/traces",
        "the specification's default endpoint"
    );
    let s = settings(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ])
    .unwrap();
    assert_eq!(s.export.unwrap().endpoint, "http://localhost:4317");
}

#[test]
fn the_users_resource_attributes_win_over_mvproxys_defaults() {
    let attr = |s: &Settings, k: &str| {
        s.resource
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    let s = settings(&[]).unwrap();
    assert_eq!(attr(&s, "service.namespace").as_deref(), Some("mvproxy"));
    assert_eq!(attr(&s, "service.name").as_deref(), Some("mvproxy"));
    assert_eq!(attr(&s, "telemetry.sdk.language").as_deref(), Some("rust"));
    let s = settings(&[
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.namespace=control-plane,service.name=from-attrs,k8s.cluster.name=a%20b",
        ),
        ("OTEL_SERVICE_NAME", "proxy-b"),
    ])
    .unwrap();
    assert_eq!(
        attr(&s, "service.namespace").as_deref(),
        Some("control-plane")
    );
    assert_eq!(attr(&s, "service.name").as_deref(), Some("proxy-b"));
    assert_eq!(attr(&s, "k8s.cluster.name").as_deref(), Some("a b"));
    assert_eq!(
        s.resource
            .iter()
            .filter(|kv| kv.key.as_str() == "service.name")
            .count(),
        1
    );
}

#[test]
fn samplers() {
    let s = settings(&[
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
    ])
    .unwrap();
    assert!(
        matches!(s.sampler, Sampler::ParentBased(_)),
        "{:?}",
        s.sampler
    );
    let s = settings(&[("OTEL_TRACES_SAMPLER", "always_off")]).unwrap();
    assert!(matches!(s.sampler, Sampler::AlwaysOff));
}
