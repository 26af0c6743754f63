//! The OpenTelemetry environment variables, read as the SDK reads them (the OpenTelemetry
//! environment variable specification,
//! <https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/> and
//! <https://opentelemetry.io/docs/specs/otel/protocol/exporter/>), into [`Settings`].
//!
//! Every variable's name is a constant here, so what mvproxy reads is one list. The
//! per-signal `OTEL_EXPORTER_OTLP_TRACES_*` form of each exporter variable wins over the
//! general one ([`Otlp`]), and a value that cannot be used is an error naming the variable
//! where the SDK silently takes its default: nothing the exporter reads is ignored.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Uri};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::Sampler;

use super::tls::{Ca, FileVar};
use super::{TelemetryError, err};
use crate::export::Batching;

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
pub struct Tls(pub(super) Arc<rustls::ClientConfig>);

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
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
const TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
const TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
const BSP_SCHEDULE_DELAY: &str = "OTEL_BSP_SCHEDULE_DELAY";
const BSP_MAX_QUEUE_SIZE: &str = "OTEL_BSP_MAX_QUEUE_SIZE";
const BSP_MAX_EXPORT_BATCH_SIZE: &str = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE";
const BSP_EXPORT_TIMEOUT: &str = "OTEL_BSP_EXPORT_TIMEOUT";
/// Not an OpenTelemetry variable: the log filter `tracing_subscriber::EnvFilter` reads.
pub(super) const RUST_LOG: &str = "RUST_LOG";

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
        let disabled = boolean(SDK_DISABLED, get(SDK_DISABLED))?.unwrap_or(false);
        // Unset: export when an endpoint is set. `otlp`: export, to the default endpoint if
        // none is set. `none`: do not.
        let exporter_wanted = match get(TRACES_EXPORTER).as_deref().map(str::trim) {
            None => None,
            Some("otlp") => Some(true),
            Some("none") => Some(false),
            Some(other) => {
                return Err(err(
                    TRACES_EXPORTER,
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
        let user_attributes = resource_attributes(get(RESOURCE_ATTRIBUTES))?;
        let service_name = get(SERVICE_NAME)
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
            sampler: sampler(get(TRACES_SAMPLER), get(TRACES_SAMPLER_ARG))?,
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
        let ca = as_file(&ca).map_or(
            Ca::System {
                var: CERTIFICATE.general,
            },
            Ca::File,
        );
        Some(Tls(super::tls::client_config(ca, client, grpc)?))
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
    const VAR: &str = RESOURCE_ATTRIBUTES;
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
        schedule_delay: time(BSP_SCHEDULE_DELAY, d.schedule_delay)?,
        max_queue: count(BSP_MAX_QUEUE_SIZE, d.max_queue)?,
        max_batch: count(BSP_MAX_EXPORT_BATCH_SIZE, d.max_batch)?,
        export_timeout: time(BSP_EXPORT_TIMEOUT, d.export_timeout)?,
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
                    TRACES_SAMPLER_ARG,
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
                TRACES_SAMPLER,
                format!(
                    "{other:?} is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests;
