//! `mvproxy readiness`: every proxy's view of its clients, merged into one report a rehearsal
//! can gate on.
//!
//! Each proxy counts only the clients that talked to it, so no proxy alone knows the answer:
//! the command reads `/debug/clients` from every proxy's admin endpoint (with the TLS and token
//! options a scraper of `/metrics` uses), checks that each was started with the same target,
//! merges the uses per client, GVR and kind (requests summed, first and last seen widened),
//! drops what was last seen before `--since`, and prints the result as text, JSON or CSV.
//!
//! Exit codes: 0 when no client would break, 1 when some client uses a GVR the target cannot
//! serve whatever its configuration or that the upgrade removes ([`EXIT_BREAKS`]), 3 when
//! nothing breaks for sure but some client uses a GVR the target serves only when turned on
//! ([`EXIT_UNLESS_ENABLED`]: it breaks unless the target's servers turn it on), 2 when a proxy
//! cannot be read or judged ([`EXIT_UNREADABLE`]), which wins: a partial report is never passed
//! off as a whole one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use http::header::{AUTHORIZATION, HeaderValue};
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

/// Exit code when some client would break on the target or after the upgrade.
pub const EXIT_BREAKS: u8 = 1;
/// Exit code when a proxy cannot be read, or was not started with the target: wins over 1.
pub const EXIT_UNREADABLE: u8 = 2;
/// Exit code when no client breaks for sure, but some use a GVR the target serves only once
/// turned on.
pub const EXIT_UNLESS_ENABLED: u8 = 3;
/// Longest a proxy may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `/debug/clients` read from one proxy.
const MAX_BODY: usize = 64 << 20;

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
// Variant doc comments would become `--help` text beside each possible value.
#[allow(missing_docs)]
pub enum Output {
    #[default]
    Text,
    Json,
    Csv,
}

/// `mvproxy readiness` flags.
#[derive(Debug, Clone, Args)]
pub struct ReadinessArgs {
    /// The target release every proxy was started with (`--target-release`), or the `target`
    /// of its `--target-discovery` (its gitVersion, or "custom")
    #[arg(long)]
    pub target: String,
    /// A proxy's admin endpoint, e.g. https://10.0.0.1:9090 (repeatable)
    #[arg(long = "proxy", value_name = "URL", required = true)]
    pub proxies: Vec<String>,
    /// Only what was last seen within this long before now (e.g. 1h, 30m)
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// How the report is printed
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// CA that verifies the admin endpoints' serving certificates (https)
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate presented to the admin endpoints
    #[arg(long, requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// Key of --cert-file
    #[arg(long, requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// Bearer token presented to the admin endpoints
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

/// Why a proxy's view could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The URL is not one.
    #[error("{proxy}: not an http(s) URL: {why}")]
    Url {
        /// The proxy as given.
        proxy: String,
        /// Why.
        why: String,
    },
    /// No answer, or not a 200.
    #[error("{proxy}: {why}")]
    Fetch {
        /// The proxy as given.
        proxy: String,
        /// Why.
        why: String,
    },
    /// The answer is not `/debug/clients`.
    #[error("{proxy}: /debug/clients: {why}")]
    Decode {
        /// The proxy as given.
        proxy: String,
        /// Why.
        why: String,
    },
    /// The proxy judges against another target, or none.
    #[error(
        "{proxy}: started with target {found}, not {want} (--target-release or --target-discovery)"
    )]
    OtherTarget {
        /// The proxy as given.
        proxy: String,
        /// Its target (`none` without one).
        found: String,
        /// The `--target` asked for.
        want: String,
    },
    /// A TLS file or the token file could not be used.
    #[error("{0}")]
    Credentials(String),
}

/// What a proxy's `/debug/clients` says, as far as the report needs it.
#[derive(Debug, Clone, Deserialize)]
pub struct ProxyView {
    /// The target the proxy judges against.
    #[serde(default)]
    pub target: Option<String>,
    /// Its clients.
    pub clients: Vec<ClientView>,
}

/// One client of one proxy.
#[derive(Debug, Clone, Deserialize)]
pub struct ClientView {
    /// The `client` label.
    pub client: String,
    /// GVRs the upgrade removes.
    #[serde(default)]
    pub breaks_after_upgrade: Vec<UseView>,
    /// GVRs a rollback removes.
    #[serde(default)]
    pub breaks_on_rollback: Vec<UseView>,
    /// GVRs the target cannot serve.
    #[serde(default)]
    pub breaks_on_target: Vec<UseView>,
    /// GVRs the target serves only when turned on.
    #[serde(default)]
    pub breaks_unless_enabled: Vec<UseView>,
    /// GVRs answered with a deprecation warning.
    #[serde(default)]
    pub deprecated: Vec<UseView>,
}

/// One use of one GVR.
#[derive(Debug, Clone, Deserialize)]
pub struct UseView {
    /// `group/version/resource`.
    pub gvr: String,
    /// Requests.
    pub requests: u64,
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
    /// The version the target serves instead.
    #[serde(default)]
    pub use_version: Option<String>,
    /// The target's `--runtime-config` entry that turns it on.
    #[serde(default)]
    pub runtime_config: Option<String>,
    /// The release the deprecation warning names.
    #[serde(default)]
    pub removed_in: Option<String>,
}

/// Why a use is in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The target release cannot serve it, whatever its configuration.
    BreaksOnTarget,
    /// The target release serves it only when turned on.
    BreaksUnlessEnabled,
    /// Only older releases of the running servers serve it.
    BreaksAfterUpgrade,
    /// Only the newest running release serves it.
    BreaksOnRollback,
    /// An API server answered it with a deprecation warning.
    Deprecated,
}

impl Kind {
    /// Whether a use of this kind makes the client break on the way to the target.
    pub fn breaks(self) -> bool {
        matches!(self, Self::BreaksOnTarget | Self::BreaksAfterUpgrade)
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::BreaksOnTarget => "breaks_on_target",
            Self::BreaksUnlessEnabled => "breaks_unless_enabled",
            Self::BreaksAfterUpgrade => "breaks_after_upgrade",
            Self::BreaksOnRollback => "breaks_on_rollback",
            Self::Deprecated => "deprecated",
        }
    }
}

/// One line of the merged report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The client.
    pub client: String,
    /// Why it is here.
    pub kind: Kind,
    /// `group/version/resource`.
    pub gvr: String,
    /// Requests, over every proxy.
    pub requests: u64,
    /// Unix seconds, earliest over every proxy.
    pub first_seen: f64,
    /// Unix seconds, latest over every proxy.
    pub last_seen: f64,
    /// The version the target serves instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_version: Option<String>,
    /// The target's `--runtime-config` entry that turns it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<String>,
    /// The release the deprecation warning names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_in: Option<String>,
}

/// The merged report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The target.
    pub target: String,
    /// The proxies read.
    pub proxies: Vec<String>,
    /// Whether some client would break.
    pub breaks: bool,
    /// Whether some client would break unless the target turns an API on.
    pub breaks_unless_enabled: bool,
    /// Every use, by client, kind and GVR.
    pub rows: Vec<Row>,
}

/// Merges the views of several proxies: uses keyed by client, kind and GVR; those last seen
/// before `not_before` (Unix seconds) dropped.
pub fn merge(target: &str, views: &[(String, ProxyView)], not_before: Option<f64>) -> Report {
    let mut rows: BTreeMap<(String, Kind, String), Row> = BTreeMap::new();
    for (_, view) in views {
        for c in &view.clients {
            let kinds = [
                (Kind::BreaksOnTarget, &c.breaks_on_target),
                (Kind::BreaksUnlessEnabled, &c.breaks_unless_enabled),
                (Kind::BreaksAfterUpgrade, &c.breaks_after_upgrade),
                (Kind::BreaksOnRollback, &c.breaks_on_rollback),
                (Kind::Deprecated, &c.deprecated),
            ];
            for (kind, uses) in kinds {
                for u in uses {
                    rows.entry((c.client.clone(), kind, u.gvr.clone()))
                        .and_modify(|r| {
                            r.requests += u.requests;
                            r.first_seen = r.first_seen.min(u.first_seen);
                            r.last_seen = r.last_seen.max(u.last_seen);
                        })
                        .or_insert_with(|| Row {
                            client: c.client.clone(),
                            kind,
                            gvr: u.gvr.clone(),
                            requests: u.requests,
                            first_seen: u.first_seen,
                            last_seen: u.last_seen,
                            use_version: u.use_version.clone(),
                            runtime_config: u.runtime_config.clone(),
                            removed_in: u.removed_in.clone(),
                        });
                }
            }
        }
    }
    let rows: Vec<Row> = rows
        .into_values()
        .filter(|r| not_before.is_none_or(|t| r.last_seen >= t))
        .collect();
    Report {
        target: target.to_owned(),
        proxies: views.iter().map(|(p, _)| p.clone()).collect(),
        breaks: rows.iter().any(|r| r.kind.breaks()),
        breaks_unless_enabled: rows.iter().any(|r| r.kind == Kind::BreaksUnlessEnabled),
        rows,
    }
}

fn time(unix: f64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(unix.max(0.0));
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Report {
    /// The exit code: [`EXIT_BREAKS`] when some client would break, else
    /// [`EXIT_UNLESS_ENABLED`] when some would unless the target turns an API on, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.breaks {
            EXIT_BREAKS
        } else if self.breaks_unless_enabled {
            EXIT_UNLESS_ENABLED
        } else {
            0
        }
    }

    /// The report for a person: per client, what breaks where, and what is deprecated.
    pub fn text(&self) -> String {
        let mut out = format!(
            "target {}: {} proxies read; {}\n",
            self.target,
            self.proxies.len(),
            if self.breaks {
                "some clients would break"
            } else if self.breaks_unless_enabled {
                "some clients would break unless the target turns their APIs on"
            } else {
                "no client would break"
            }
        );
        let mut client = None;
        for r in &self.rows {
            if client != Some(&r.client) {
                out.push_str(&format!("\n{}\n", r.client));
                client = Some(&r.client);
            }
            let what = match r.kind {
                Kind::BreaksOnTarget => format!("breaks on {}", self.target),
                Kind::BreaksUnlessEnabled => format!("breaks on {} unless on", self.target),
                Kind::BreaksAfterUpgrade => "breaks after the upgrade".to_owned(),
                Kind::BreaksOnRollback => "breaks on a rollback".to_owned(),
                Kind::Deprecated => format!(
                    "deprecated, removed in {}",
                    r.removed_in.as_deref().unwrap_or("unknown")
                ),
            };
            let hint = match (&r.use_version, &r.runtime_config) {
                (Some(v), Some(rc)) => format!(" (use {v}, or --runtime-config {rc})"),
                (Some(v), None) => format!(" (use {v})"),
                (None, Some(rc)) => format!(" (--runtime-config {rc})"),
                (None, None) => String::new(),
            };
            out.push_str(&format!(
                "  {what:<28} {}{hint}  {} requests, first {}, last {}\n",
                r.gvr,
                r.requests,
                time(r.first_seen),
                time(r.last_seen)
            ));
        }
        out
    }

    /// The report as JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The report as CSV, one row per client, kind and GVR.
    pub fn csv(&self) -> Result<String, csv::Error> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "client",
            "kind",
            "gvr",
            "requests",
            "first_seen",
            "last_seen",
            "use_version",
            "runtime_config",
            "removed_in",
        ])?;
        for r in &self.rows {
            w.write_record([
                r.client.as_str(),
                r.kind.as_str(),
                r.gvr.as_str(),
                &r.requests.to_string(),
                &time(r.first_seen),
                &time(r.last_seen),
                r.use_version.as_deref().unwrap_or(""),
                r.runtime_config.as_deref().unwrap_or(""),
                r.removed_in.as_deref().unwrap_or(""),
            ])?;
        }
        let bytes = w.into_inner().map_err(|e| e.into_error())?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Reads every proxy, checks its target, merges and prints; returns the exit code.
pub async fn run(args: ReadinessArgs) -> u8 {
    crate::tls::install_provider();
    let views = match read_all(&args).await {
        Ok(v) => v,
        Err(errors) => {
            for e in errors {
                eprintln!("mvproxy readiness: {e}");
            }
            return EXIT_UNREADABLE;
        }
    };
    let not_before = args.since.map(|d| {
        SystemTime::now()
            .checked_sub(d)
            .unwrap_or(SystemTime::UNIX_EPOCH)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    });
    let report = merge(&args.target, &views, not_before);
    let printed = match args.output {
        Output::Text => report.text(),
        Output::Json => report.json(),
        Output::Csv => match report.csv() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("mvproxy readiness: writing CSV: {e}");
                return EXIT_UNREADABLE;
            }
        },
    };
    print!("{printed}");
    report.exit_code()
}

/// Every proxy's view, or every reason some could not be read.
async fn read_all(args: &ReadinessArgs) -> Result<Vec<(String, ProxyView)>, Vec<ReadError>> {
    let client = match http_client(args) {
        Ok(c) => c,
        Err(e) => return Err(vec![e]),
    };
    let token = match &args.token_file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) => Some(t.trim().to_owned()),
            Err(e) => {
                return Err(vec![ReadError::Credentials(format!(
                    "token-file: {}: {e}",
                    path.display()
                ))]);
            }
        },
        None => None,
    };
    let mut views = Vec::new();
    let mut errors = Vec::new();
    for proxy in &args.proxies {
        match read_one(&client, proxy, token.as_deref(), &args.target).await {
            Ok(view) => views.push((proxy.clone(), view)),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(views)
    } else {
        Err(errors)
    }
}

type HttpClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

fn http_client(args: &ReadinessArgs) -> Result<HttpClient, ReadError> {
    let cert = args.cert_file.as_deref().zip(args.key_file.as_deref());
    let tls = match &args.ca_file {
        Some(ca) => crate::tls::client_config(ca, cert),
        // Plain-HTTP admin endpoints need no CA; an https one without --ca-file is refused
        // by the handshake (nothing trusted), naming the proxy.
        None => rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .map(|b| {
                b.with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            })
            .map_err(crate::tls::TlsError::Config),
    }
    .map_err(|e| ReadError::Credentials(e.to_string()))?;
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

async fn read_one(
    client: &HttpClient,
    proxy: &str,
    token: Option<&str>,
    want: &str,
) -> Result<ProxyView, ReadError> {
    let base = proxy.trim_end_matches('/');
    let uri: Uri =
        format!("{base}/debug/clients")
            .parse()
            .map_err(|e: http::uri::InvalidUri| ReadError::Url {
                proxy: proxy.to_owned(),
                why: e.to_string(),
            })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(ReadError::Url {
            proxy: proxy.to_owned(),
            why: "the scheme must be http or https".to_owned(),
        });
    }
    let fetch = |why: String| ReadError::Fetch {
        proxy: proxy.to_owned(),
        why,
    };
    let mut req = Request::get(uri)
        .body(Empty::new())
        .map_err(|e| fetch(e.to_string()))?;
    if let Some(t) = token {
        let value = HeaderValue::from_str(&format!("Bearer {t}"))
            .map_err(|_| ReadError::Credentials("token-file: not a header value".to_owned()))?;
        req.headers_mut().insert(AUTHORIZATION, value);
    }
    let body = tokio::time::timeout(TIMEOUT, async {
        let resp = client.request(req).await.map_err(|e| {
            use std::error::Error;
            let mut why = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                why.push_str(&format!(": {s}"));
                source = s.source();
            }
            fetch(why)
        })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(fetch(format!("/debug/clients answered {status}")));
        }
        Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| fetch(format!("reading /debug/clients: {e}")))
    })
    .await
    .map_err(|_| fetch(format!("no answer within {TIMEOUT:?}")))??;
    let view: ProxyView = serde_json::from_slice(&body).map_err(|e| ReadError::Decode {
        proxy: proxy.to_owned(),
        why: e.to_string(),
    })?;
    match view.target.as_deref() {
        Some(t) if t == want => Ok(view),
        other => Err(ReadError::OtherTarget {
            proxy: proxy.to_owned(),
            found: other.unwrap_or("none").to_owned(),
            want: want.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(target: &str, json: &str) -> ProxyView {
        let mut v: ProxyView = serde_json::from_str(json).unwrap();
        v.target = Some(target.to_owned());
        v
    }

    const A: &str = r#"{"clients": [{"client": "kubectl",
        "breaks_on_target": [{"gvr": "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "requests": 2, "first_seen": 100.0, "last_seen": 200.0, "use_version": "v1"}],
        "deprecated": [{"gvr": "policy/v1beta1/podsecuritypolicies", "requests": 1, "first_seen": 50.0, "last_seen": 50.0, "removed_in": "1.25"}]}]}"#;
    const B: &str = r#"{"clients": [{"client": "kubectl",
        "breaks_on_target": [{"gvr": "flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", "requests": 3, "first_seen": 90.0, "last_seen": 150.0, "use_version": "v1"}]},
        {"client": "tuner, \"the\" operator", "breaks_on_rollback": [{"gvr": "x/v1/y", "requests": 1, "first_seen": 10.0, "last_seen": 10.0}]}]}"#;

    #[test]
    fn proxies_views_merge_per_client_kind_and_gvr() {
        let views = vec![
            ("a".to_owned(), view("1.36", A)),
            ("b".to_owned(), view("1.36", B)),
        ];
        let r = merge("1.36", &views, None);
        assert!(r.breaks);
        assert_eq!(r.exit_code(), EXIT_BREAKS);
        assert_eq!(r.rows.len(), 3);
        let fs = &r.rows[0];
        assert_eq!(
            (fs.kind, fs.requests, fs.first_seen, fs.last_seen),
            (Kind::BreaksOnTarget, 5, 90.0, 200.0)
        );
        let text = r.text();
        assert!(
            text.contains("  breaks on 1.36               flowcontrol.apiserver.k8s.io/v1beta3/flowschemas (use v1)  5 requests, first 1970-01-01T00:01:30Z, last 1970-01-01T00:03:20Z"),
            "{text}"
        );
        assert!(text.contains("deprecated, removed in 1.25"), "{text}");
        let csv = r.csv().unwrap();
        assert!(
            csv.contains("\"tuner, \"\"the\"\" operator\",breaks_on_rollback,x/v1/y,1,"),
            "{csv}"
        );
        assert!(csv.starts_with(
            "client,kind,gvr,requests,first_seen,last_seen,use_version,runtime_config,removed_in\n"
        ));
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["rows"][0]["use_version"], "v1");
        assert_eq!(json["breaks"], true);
    }

    /// A GVR the target serves only once turned on: its own kind, the `--runtime-config`
    /// entry in every output, exit code 3 when nothing breaks for sure, 1 when something does.
    #[test]
    fn a_gvr_off_by_default_on_the_target_is_its_own_kind_and_exit_code() {
        const C: &str = r#"{"clients": [{"client": "dra-driver",
            "breaks_unless_enabled": [{"gvr": "resource.k8s.io/v1beta2/devicetaintrules", "requests": 4, "first_seen": 10.0, "last_seen": 20.0, "runtime_config": "resource.k8s.io/v1beta2=true"}]}]}"#;
        let alone = merge("1.36", &[("c".to_owned(), view("1.36", C))], None);
        assert!(!alone.breaks && alone.breaks_unless_enabled);
        assert_eq!(alone.exit_code(), EXIT_UNLESS_ENABLED);
        let text = alone.text();
        assert!(
            text.contains("would break unless the target turns their APIs on"),
            "{text}"
        );
        assert!(
            text.contains("breaks on 1.36 unless on     resource.k8s.io/v1beta2/devicetaintrules (--runtime-config resource.k8s.io/v1beta2=true)"),
            "{text}"
        );
        let csv = alone.csv().unwrap();
        assert!(
            csv.contains("dra-driver,breaks_unless_enabled,resource.k8s.io/v1beta2/devicetaintrules,4,1970-01-01T00:00:10Z,1970-01-01T00:00:20Z,,resource.k8s.io/v1beta2=true,\n"),
            "{csv}"
        );
        let json: serde_json::Value = serde_json::from_str(&alone.json()).unwrap();
        assert_eq!(json["rows"][0]["kind"], "breaks_unless_enabled");
        assert_eq!(
            json["rows"][0]["runtime_config"],
            "resource.k8s.io/v1beta2=true"
        );
        // with a definite break beside it, the definite one decides
        let both = merge(
            "1.36",
            &[
                ("b".to_owned(), view("1.36", B)),
                ("c".to_owned(), view("1.36", C)),
            ],
            None,
        );
        assert_eq!(both.exit_code(), EXIT_BREAKS);
    }

    #[test]
    fn since_drops_what_a_fixed_client_stopped_sending() {
        let views = vec![("a".to_owned(), view("1.36", A))];
        // kubectl's flowschemas were last seen at 200, its deprecated API at 50
        let r = merge("1.36", &views, Some(201.0));
        assert!(r.rows.is_empty());
        assert!(!r.breaks);
        assert_eq!(r.exit_code(), 0);
        let r = merge("1.36", &views, Some(100.0));
        assert_eq!(r.rows.len(), 1);
        assert!(r.breaks);
        // a rollback-only or deprecated use alone does not fail the gate
        let only_rollback = vec![(
            "b".to_owned(),
            view("1.36", &B.replace("breaks_on_target", "x")),
        )];
        assert!(!merge("1.36", &only_rollback, None).breaks);
    }
}
