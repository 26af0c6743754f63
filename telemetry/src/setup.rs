//! Setting up logs and traces from the standard `OTEL_*` variables.
//!
//! No endpoint means no exporter: no tracer is installed, request spans are empty and the request
//! path pays nothing for them (the client's trace headers pass along untouched). With an
//! endpoint, the request spans ([`crate::trace`]) go out through the SDK's batch processor,
//! which exports on its own thread: a slow or dead collector fills (and then drops from) a
//! bounded queue, it never blocks a request. Log lines go through `tracing`, which carries no
//! spans. The OTLP/HTTP client
//! is the blocking one on purpose: the async clients need a Tokio reactor the batch thread does
//! not have, and would panic there and silently export nothing.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
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
        .map(|(endpoint, endpoint_var)| Export {
            endpoint,
            grpc,
            endpoint_var,
        });
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
            service_name,
            json_logs,
            default_log_filter: "info".to_owned(),
        })
    }
}

fn checked(var: &'static str, url: String) -> Result<String, TelemetryError> {
    match url.parse::<http::Uri>() {
        Ok(u) if u.scheme().is_some() && u.host().is_some() => Ok(url),
        _ => Err(err(
            var,
            format!("{url:?} is not an http:// or https:// URL"),
        )),
    }
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
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Exports what is buffered and stops the exporter (also done on drop).
    pub fn shutdown(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.force_flush() {
                eprintln!("mvproxy: flushing spans: {e}");
            }
            if let Err(e) = p.shutdown() {
                eprintln!("mvproxy: stopping the span exporter: {e}");
            }
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs the process-wide `tracing` subscriber (log lines to stderr) and, when an exporter
/// is configured, the tracer of the request spans. Must run inside a Tokio runtime when exporting over gRPC.
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
    let provider = match &settings.export {
        None => None,
        Some(export) => {
            let provider = provider(export, settings)?;
            crate::trace::install(provider.tracer("mvproxy"));
            Some(provider)
        }
    };
    Ok(TelemetryGuard { provider })
}

fn provider(export: &Export, settings: &Settings) -> Result<SdkTracerProvider, TelemetryError> {
    let var = export.endpoint_var;
    let exporter = if export.grpc {
        SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&export.endpoint)
            .build()
    } else {
        SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&export.endpoint)
            .build()
    }
    .map_err(|e| err(var, e.to_string()))?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes([KeyValue::new("service.namespace", "mvproxy")])
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(settings.sampler.clone())
        .with_resource(resource)
        .build())
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
