//! Setting up logs and traces from the standard `OTEL_*` variables.
//!
//! No endpoint means no exporter: request spans are empty and the request path pays nothing
//! for them (the client's trace headers pass along untouched). With an endpoint, the request
//! spans ([`crate::trace`]) go to a bounded queue that one thread of their own exports
//! ([`crate::export`]): a slow or dead collector fills (and then drops from) the queue, it
//! never blocks a request. Log lines go through `tracing`, which carries no spans.
//!
//! The variables are read as the SDK reads them (the OpenTelemetry environment variable
//! specification, <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>
//! and <https://opentelemetry.io/docs/specs/otel/protocol/exporter/>), except that a value
//! that cannot be used is an error naming the variable where the SDK silently takes its
//! default.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Uri};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::Sampler;

use crate::export::{Batching, Exporter, Target};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// A setting that cannot be used: the variable and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {var}: {why}")]
pub struct TelemetryError {
    /// The variable.
    pub var: &'static str,
    /// What is wrong with its value.
    pub why: String,
}

fn err(var: &'static str, why: impl Into<String>) -> TelemetryError {
    TelemetryError {
        var,
        why: why.into(),
    }
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The full traces URL (HTTP) or the collector address (gRPC).
    pub endpoint: String,
    /// gRPC (`grpc`) rather than HTTP/protobuf.
    pub grpc: bool,
    /// The variable `endpoint` came from, named by an exporter error.
    pub endpoint_var: &'static str,
    /// `OTEL_EXPORTER_OTLP_HEADERS` (or `_TRACES_HEADERS`): sent with every export.
    pub headers: HeaderMap,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (or `_TRACES_TIMEOUT`): one export request at most.
    pub timeout: Duration,
}

const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Everything `init` needs, read from the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where spans go; `None`: nowhere.
    pub export: Option<Export>,
    /// `OTEL_TRACES_SAMPLER` and its argument.
    pub sampler: Sampler,
    /// The `OTEL_BSP_*` variables.
    pub batching: Batching,
    /// `OTEL_SERVICE_NAME`, else `service.name` from `OTEL_RESOURCE_ATTRIBUTES`, else `mvproxy`.
    pub service_name: String,
    /// JSON log lines.
    pub json_logs: bool,
    /// Log filter when `RUST_LOG` is unset.
    pub default_log_filter: String,
}

impl Settings {
    /// Reads the `OTEL_*` variables through `lookup` (the process environment in production).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        json_logs: bool,
    ) -> Result<Self, TelemetryError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let protocol_var = if get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").is_some() {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        } else {
            "OTEL_EXPORTER_OTLP_PROTOCOL"
        };
        let grpc = match get(protocol_var).as_deref().map(str::trim) {
            None | Some("http/protobuf") => false,
            Some("grpc") => true,
            Some(other) => {
                return Err(err(
                    protocol_var,
                    format!("{other:?} is not supported (use grpc or http/protobuf)"),
                ));
            }
        };
        let export = match (get(TRACES_ENDPOINT), get(ENDPOINT)) {
            (Some(traces), _) => Some((checked(TRACES_ENDPOINT, traces)?, TRACES_ENDPOINT)),
            (None, Some(base)) => {
                let base = checked(ENDPOINT, base)?;
                // The generic endpoint is a base URL: HTTP appends the signal path.
                let endpoint = if grpc {
                    base
                } else {
                    format!("{}/v1/traces", base.trim_end_matches('/'))
                };
                Some((endpoint, ENDPOINT))
            }
            (None, None) => None,
        }
        .map(
            |(endpoint, endpoint_var)| -> Result<Export, TelemetryError> {
                Ok(Export {
                    endpoint,
                    grpc,
                    endpoint_var,
                    headers: headers(&get)?,
                    timeout: millis(&get, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")?
                        .or(millis(&get, "OTEL_EXPORTER_OTLP_TIMEOUT")?)
                        .unwrap_or(Duration::from_secs(10)),
                })
            },
        )
        .transpose()?;
        let service_name = get("OTEL_SERVICE_NAME")
            .or_else(|| {
                get("OTEL_RESOURCE_ATTRIBUTES").and_then(|attrs| {
                    attrs.split(',').find_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        (k.trim() == "service.name").then(|| v.trim().to_owned())
                    })
                })
            })
            .unwrap_or_else(|| "mvproxy".to_owned());
        Ok(Self {
            export,
            sampler: sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?,
            batching: batching(&get)?,
            service_name,
            json_logs,
            default_log_filter: "info".to_owned(),
        })
    }
}

fn checked(var: &'static str, url: String) -> Result<String, TelemetryError> {
    match url.parse::<Uri>() {
        Ok(u) if u.scheme_str() == Some("http") && u.host().is_some() => Ok(url),
        Ok(u) if u.scheme_str() == Some("https") => Err(err(
            var,
            format!(
                "{url:?}: https is not supported; export to a collector over http:// (a local agent or sidecar)"
            ),
        )),
        _ => Err(err(var, format!("{url:?} is not an http:// URL"))),
    }
}

/// A duration in milliseconds from `var`; `None` when unset.
fn millis(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<Duration>, TelemetryError> {
    match get(var) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) => Ok(Some(Duration::from_millis(ms))),
            Err(_) => Err(err(var, format!("{v:?} is not a number of milliseconds"))),
        },
    }
}

/// The `OTEL_BSP_*` variables, the SDK's defaults for those unset.
fn batching(get: &impl Fn(&str) -> Option<String>) -> Result<Batching, TelemetryError> {
    let d = Batching::default();
    let count = |var: &'static str, default: usize| match get(var) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(err(var, format!("{v:?} is not a positive number"))),
        },
    };
    let time = |var, default| millis(get, var).map(|t| t.unwrap_or(default));
    Ok(Batching {
        schedule_delay: time("OTEL_BSP_SCHEDULE_DELAY", d.schedule_delay)?,
        max_queue: count("OTEL_BSP_MAX_QUEUE_SIZE", d.max_queue)?,
        max_batch: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", d.max_batch)?,
        export_timeout: time("OTEL_BSP_EXPORT_TIMEOUT", d.export_timeout)?,
    })
}

/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs
/// separated by commas, values percent-encoded (the W3C Baggage format).
fn headers(get: &impl Fn(&str) -> Option<String>) -> Result<HeaderMap, TelemetryError> {
    let (var, value) = match (
        get("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
        get("OTEL_EXPORTER_OTLP_HEADERS"),
    ) {
        (Some(v), _) => ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", v),
        (None, Some(v)) => ("OTEL_EXPORTER_OTLP_HEADERS", v),
        (None, None) => return Ok(HeaderMap::new()),
    };
    let mut headers = HeaderMap::new();
    for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
        let parsed = pair.split_once('=').and_then(|(k, v)| {
            let name = HeaderName::from_bytes(k.trim().as_bytes()).ok()?;
            let value = HeaderValue::from_bytes(&percent_decode(v.trim())?).ok()?;
            Some((name, value))
        });
        let Some((name, value)) = parsed else {
            return Err(err(
                var,
                format!("{pair:?} is not a header as key=value (value percent-encoded)"),
            ));
        };
        headers.append(name, value);
    }
    Ok(headers)
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

fn sampler(name: Option<String>, arg: Option<String>) -> Result<Sampler, TelemetryError> {
    let ratio = || -> Result<f64, TelemetryError> {
        match arg.as_deref() {
            None => Ok(1.0),
            Some(a) => match a.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(err(
                    "OTEL_TRACES_SAMPLER_ARG",
                    format!("{a:?} is not a ratio between 0 and 1"),
                )),
            },
        }
    };
    Ok(match name.as_deref().map(str::trim) {
        None | Some("parentbased_always_on") => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        Some("always_on") => Sampler::AlwaysOn,
        Some("always_off") => Sampler::AlwaysOff,
        Some("traceidratio") => Sampler::TraceIdRatioBased(ratio()?),
        Some("parentbased_always_off") => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        Some("parentbased_traceidratio") => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio()?)))
        }
        Some(other) => {
            return Err(err(
                "OTEL_TRACES_SAMPLER",
                format!(
                    "{other:?} is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ),
            ));
        }
    })
}

/// Keeps the trace pipeline alive; dropping it flushes and shuts the exporter down.
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    exporter: Option<Arc<Exporter>>,
}

impl TelemetryGuard {
    /// Exports what is queued and stops the exporter (also done on drop), waiting up to
    /// `OTEL_BSP_EXPORT_TIMEOUT`.
    pub fn shutdown(&mut self) {
        if let Some(e) = self.exporter.take() {
            e.shutdown();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs the process-wide `tracing` subscriber (log lines to stderr) and, when an exporter
/// is configured, the sampler and exporter of the request spans.
pub fn init(settings: &Settings) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(&settings.default_log_filter));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = if settings.json_logs {
        fmt.json().with_filter(log_filter).boxed()
    } else {
        fmt.with_filter(log_filter).boxed()
    };
    tracing_subscriber::registry()
        .with(logs)
        .try_init()
        .map_err(|e| err("RUST_LOG", format!("logging already set up: {e}")))?;
    let exporter = match &settings.export {
        None => None,
        Some(export) => {
            let exporter = Arc::new(exporter(export, settings)?);
            crate::trace::install(settings.sampler.clone(), exporter.clone());
            Some(exporter)
        }
    };
    Ok(TelemetryGuard { exporter })
}

fn exporter(export: &Export, settings: &Settings) -> Result<Exporter, TelemetryError> {
    let var = export.endpoint_var;
    let endpoint = export
        .endpoint
        .parse::<Uri>()
        .map_err(|e| err(var, e.to_string()))?;
    // The SDK's resource: `service.name`, the `telemetry.sdk.*` attributes and
    // `OTEL_RESOURCE_ATTRIBUTES`.
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes([KeyValue::new("service.namespace", "mvproxy")])
        .build();
    let target = Target {
        endpoint,
        grpc: export.grpc,
        headers: export.headers.clone(),
        timeout: export.timeout,
    };
    Exporter::start(
        target,
        &settings.batching,
        crate::otlp::resource(resource.iter().map(|(k, v)| (k.as_str(), v))),
    )
    .map_err(|e| err(var, e.to_string()))
}

#[cfg(test)]
mod tests {
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
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
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
}
