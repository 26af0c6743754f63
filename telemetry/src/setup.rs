//! Setting up logs and traces from the standard `OTEL_*` variables.
//!
//! No endpoint means no exporter (unless `OTEL_TRACES_EXPORTER=otlp` asks for the
//! specification's default one): request spans are empty and the request path pays nothing
//! for them (the client's trace headers pass along untouched). With an endpoint, the request
//! spans ([`crate::trace`]) go to a bounded queue that one thread of their own exports
//! ([`crate::export`]): a slow or dead collector fills (and then drops from) the queue, it
//! never blocks a request. Log lines go through `tracing`, which carries no spans.
//!
//! The variables are read as the SDK reads them (the OpenTelemetry environment variable
//! specification, <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>
//! and <https://opentelemetry.io/docs/specs/otel/protocol/exporter/>), the per-signal
//! `OTEL_EXPORTER_OTLP_TRACES_*` form of each winning over the general one, except that a value
//! that cannot be used is an error naming the variable where the SDK silently takes its
//! default: nothing the exporter reads is ignored.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Uri};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::Sampler;

use crate::export::{Batching, Exporter, Target};
use crate::export_tls::FileVar;
use crate::trace::Tracer;
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
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (or `_TRACES_TIMEOUT`): one export, retries included, at
    /// most.
    pub timeout: Duration,
    /// `OTEL_EXPORTER_OTLP_COMPRESSION=gzip` (or `_TRACES_COMPRESSION`).
    pub gzip: bool,
    /// For an `https://` endpoint: the CA (`_CERTIFICATE`, else the system's roots) and the
    /// client certificate (`_CLIENT_CERTIFICATE`, `_CLIENT_KEY`).
    pub tls: Option<Tls>,
}

/// The TLS client configuration of an `https://` endpoint, its files read and checked.
#[derive(Clone)]
pub struct Tls(Arc<rustls::ClientConfig>);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Tls {}

/// A variable of the OTLP exporter in its two forms: the traces signal's, which wins, and the
/// general one.
struct Otlp {
    traces: &'static str,
    general: &'static str,
}

impl Otlp {
    const fn new(traces: &'static str, general: &'static str) -> Self {
        Self { traces, general }
    }

    /// The variable that is set (the traces one first) and its value.
    fn get(&self, get: &impl Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
        get(self.traces)
            .map(|v| (self.traces, v))
            .or_else(|| get(self.general).map(|v| (self.general, v)))
    }
}

const PROTOCOL: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
);
const HEADERS: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
);
const TIMEOUT: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
);
const COMPRESSION: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
);
const CERTIFICATE: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
);
const CLIENT_CERTIFICATE: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
);
const CLIENT_KEY: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
);
const INSECURE: Otlp = Otlp::new(
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_INSECURE",
);

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
    /// The resource of every span: the SDK's `telemetry.sdk.*`, mvproxy's defaults
    /// (`service.name`, `service.namespace`, `service.version`), then
    /// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`, each later one winning.
    pub resource: Vec<KeyValue>,
    /// JSON log lines.
    pub json_logs: bool,
    /// Log filter when `RUST_LOG` is unset.
    pub default_log_filter: String,
}

/// A boolean variable (`true` or `false`, any case); `None` when unset.
fn boolean(var: &'static str, value: Option<String>) -> Result<Option<bool>, TelemetryError> {
    match value.as_deref().map(str::trim) {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(v) => Err(err(var, format!("{v:?} is neither true nor false"))),
    }
}

impl Settings {
    /// Reads the `OTEL_*` variables through `lookup` (the process environment in production).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        json_logs: bool,
    ) -> Result<Self, TelemetryError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let disabled = boolean("OTEL_SDK_DISABLED", get("OTEL_SDK_DISABLED"))?.unwrap_or(false);
        // Unset: export when an endpoint is set. `otlp`: export, to the default endpoint if
        // none is set. `none`: do not.
        let exporter_wanted = match get("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None => None,
            Some("otlp") => Some(true),
            Some("none") => Some(false),
            Some(other) => {
                return Err(err(
                    "OTEL_TRACES_EXPORTER",
                    format!("{other:?} is not supported (use otlp or none)"),
                ));
            }
        };
        let (protocol_var, protocol) = PROTOCOL
            .get(&get)
            .unwrap_or((PROTOCOL.general, String::new()));
        let grpc = match protocol.trim() {
            "" | "http/protobuf" => false,
            "grpc" => true,
            other => {
                return Err(err(
                    protocol_var,
                    format!("{other:?} is not supported (use grpc or http/protobuf)"),
                ));
            }
        };
        let endpoint = match (get(TRACES_ENDPOINT), get(ENDPOINT)) {
            (Some(traces), _) => Some((checked(TRACES_ENDPOINT, traces)?, TRACES_ENDPOINT)),
            (None, base) => {
                // `OTEL_TRACES_EXPORTER=otlp` alone: the specification's default endpoint.
                let base = match (base, exporter_wanted) {
                    (Some(base), _) => Some(checked(ENDPOINT, base)?),
                    (None, Some(true)) if grpc => Some("http://localhost:4317".to_owned()),
                    (None, Some(true)) => Some("http://localhost:4318".to_owned()),
                    (None, _) => None,
                };
                // The generic endpoint is a base URL: HTTP appends the signal path.
                base.map(|base| {
                    let endpoint = if grpc {
                        base
                    } else {
                        format!("{}/v1/traces", base.trim_end_matches('/'))
                    };
                    (endpoint, ENDPOINT)
                })
            }
        };
        let export = endpoint
            .map(|(endpoint, endpoint_var)| export(&get, endpoint, endpoint_var, grpc))
            .transpose()?
            .filter(|_| !disabled && exporter_wanted != Some(false));
        let user_attributes = resource_attributes(get("OTEL_RESOURCE_ATTRIBUTES"))?;
        let service_name = get("OTEL_SERVICE_NAME")
            .map(|s| s.trim().to_owned())
            .or_else(|| {
                user_attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == "service.name")
                    .map(|kv| kv.value.to_string())
            })
            .unwrap_or_else(|| "mvproxy".to_owned());
        let resource = Resource::builder_empty()
            .with_detector(Box::new(TelemetryResourceDetector))
            .with_attributes([
                KeyValue::new("service.namespace", "mvproxy"),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .with_attributes(user_attributes)
            .with_service_name(service_name.clone())
            .build()
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        Ok(Self {
            export,
            sampler: sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?,
            batching: batching(&get)?,
            service_name,
            resource,
            json_logs,
            default_log_filter: "info".to_owned(),
        })
    }
}

/// The rest of the exporter's variables, for `endpoint`.
fn export(
    get: &impl Fn(&str) -> Option<String>,
    endpoint: String,
    endpoint_var: &'static str,
    grpc: bool,
) -> Result<Export, TelemetryError> {
    let https = endpoint.starts_with("https://");
    let gzip = match COMPRESSION.get(get) {
        None => false,
        Some((var, v)) => match v.trim() {
            "gzip" => true,
            "none" => false,
            other => {
                return Err(err(
                    var,
                    format!("{other:?} is not supported (use gzip or none)"),
                ));
            }
        },
    };
    // `INSECURE` only says what the scheme already says; a contradiction is an error.
    if let Some((var, v)) = INSECURE.get(get)
        && let Some(insecure) = boolean(var, Some(v))?
        && insecure == https
    {
        return Err(err(
            var,
            format!(
                "{insecure} contradicts the endpoint {endpoint:?}: the scheme decides (https:// is always verified, http:// never encrypted)"
            ),
        ));
    }
    let file = |o: &Otlp| o.get(get).map(|(var, path)| (var, path.trim().to_owned()));
    let (ca, cert, key) = (
        file(&CERTIFICATE),
        file(&CLIENT_CERTIFICATE),
        file(&CLIENT_KEY),
    );
    let tls = if https {
        fn as_file<'a>(f: &'a Option<(&'static str, String)>) -> Option<FileVar<'a>> {
            f.as_ref().map(|(var, path)| FileVar { var, path })
        }
        let client = match (as_file(&cert), as_file(&key)) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((c, k)),
            (Some(c), None) => {
                return Err(err(
                    CLIENT_KEY.general,
                    format!("unset, but {} names a client certificate", c.var),
                ));
            }
            (None, Some(k)) => {
                return Err(err(
                    CLIENT_CERTIFICATE.general,
                    format!("unset, but {} names a client key", k.var),
                ));
            }
        };
        Some(Tls(crate::export_tls::client_config(
            as_file(&ca),
            client,
            grpc,
        )?))
    } else {
        if let Some((var, _)) = [ca, cert, key].into_iter().flatten().next() {
            return Err(err(
                var,
                format!("set for an https:// endpoint, but the endpoint is {endpoint:?}"),
            ));
        }
        None
    };
    Ok(Export {
        endpoint,
        grpc,
        endpoint_var,
        headers: headers(get)?,
        timeout: match TIMEOUT.get(get) {
            Some((var, _)) => millis(get, var)?,
            None => None,
        }
        .unwrap_or(Duration::from_secs(10)),
        gzip,
        tls,
    })
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, values percent-encoded.
fn resource_attributes(value: Option<String>) -> Result<Vec<KeyValue>, TelemetryError> {
    const VAR: &str = "OTEL_RESOURCE_ATTRIBUTES";
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| err(VAR, format!("{pair:?} is not key=value")))?;
            let v = percent_decoded(v.trim())
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    err(
                        VAR,
                        format!("{pair:?}: the value is not percent-encoded UTF-8"),
                    )
                })?;
            Ok(KeyValue::new(k.trim().to_owned(), v))
        })
        .collect()
}

fn checked(var: &'static str, url: String) -> Result<String, TelemetryError> {
    match url.parse::<Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => Ok(url),
        _ => Err(err(
            var,
            format!("{url:?} is not an http:// or https:// URL"),
        )),
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
    let Some((var, value)) = HEADERS.get(get) else {
        return Ok(HeaderMap::new());
    };
    let mut headers = HeaderMap::new();
    for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
        let parsed = pair.split_once('=').and_then(|(k, v)| {
            let name = HeaderName::from_bytes(k.trim().as_bytes()).ok()?;
            let value = HeaderValue::from_bytes(&percent_decoded(v.trim())?).ok()?;
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

/// `s` percent-decoded (`percent-encoding`), or `None` when a `%` is not followed by two hex
/// digits: the crate passes such a `%` through, the W3C Baggage format has none.
fn percent_decoded(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let valid = s.match_indices('%').all(|(i, _)| {
        b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    });
    valid.then(|| percent_encoding::percent_decode_str(s).collect())
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
    tracer: Tracer,
}

impl TelemetryGuard {
    /// The handle the request path starts its spans from (and `/metrics` reads the export
    /// queue through): a clone of it is all a server needs to keep.
    pub fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }

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
/// is configured, starts the export thread; the guard's [`tracer`](TelemetryGuard::tracer)
/// samples the request spans and hands them to it.
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
        Some(export) => Some(Arc::new(exporter(export, settings)?)),
    };
    let tracer = match &exporter {
        None => Tracer::none(),
        Some(e) => Tracer::new(settings.sampler.clone(), e.clone()),
    };
    Ok(TelemetryGuard { exporter, tracer })
}

fn exporter(export: &Export, settings: &Settings) -> Result<Exporter, TelemetryError> {
    let var = export.endpoint_var;
    let endpoint = export
        .endpoint
        .parse::<Uri>()
        .map_err(|e| err(var, e.to_string()))?;
    let target = Target {
        endpoint,
        grpc: export.grpc,
        headers: export.headers.clone(),
        timeout: export.timeout,
        gzip: export.gzip,
        tls: export.tls.as_ref().map(|t| t.0.clone()),
    };
    Exporter::start(
        target,
        &settings.batching,
        crate::otlp::resource(
            settings
                .resource
                .iter()
                .map(|kv| (kv.key.as_str(), &kv.value)),
        ),
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
}
