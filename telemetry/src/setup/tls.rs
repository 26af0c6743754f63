//! TLS to the collector: the rustls client configuration an `https://` endpoint is reached
//! with, built once at start from `OTEL_EXPORTER_OTLP_CERTIFICATE` (the CA),
//! `_CLIENT_CERTIFICATE` and `_CLIENT_KEY` (mutual TLS), each file read and checked then, so a
//! bad one exits 2 naming its variable instead of failing every export later.
//!
//! Without a CA file the system's roots are trusted (`rustls-native-certs`: on Linux the
//! distribution's bundle, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), as the SDKs' exporters do. The
//! crypto provider is aws-lc-rs, the one the proxy's own TLS uses (`deny.toml`).

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::ClientConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{TelemetryError, err};

/// A variable and the file it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileVar<'a> {
    pub(crate) var: &'static str,
    pub(crate) path: &'a str,
}

fn certificates(f: FileVar<'_>) -> Result<Vec<CertificateDer<'static>>, TelemetryError> {
    let certs = CertificateDer::pem_file_iter(Path::new(f.path))
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| err(f.var, format!("{}: {e}", f.path)))?;
    if certs.is_empty() {
        return Err(err(
            f.var,
            format!("{}: no PEM certificate in the file", f.path),
        ));
    }
    Ok(certs)
}

/// The certificate authority the collector's certificate is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ca<'a> {
    /// The CA file a variable names.
    File(FileVar<'a>),
    /// None named: the system's roots; `var` is the variable an error names.
    System {
        /// The variable that would name a CA file.
        var: &'static str,
    },
}

/// The client configuration for an `https://` endpoint; ALPN offers `h2` for gRPC and
/// `http/1.1` for OTLP/HTTP.
pub(crate) fn client_config(
    ca: Ca<'_>,
    client: Option<(FileVar<'_>, FileVar<'_>)>,
    grpc: bool,
) -> Result<Arc<ClientConfig>, TelemetryError> {
    let mut roots = RootCertStore::empty();
    let ca_var = match ca {
        Ca::File(f) => f.var,
        Ca::System { var } => var,
    };
    match ca {
        Ca::File(ca) => {
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| err(ca.var, format!("{}: {e}", ca.path)))?;
            }
        }
        Ca::System { var } => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(err(
                    var,
                    format!(
                        "unset, and no CA certificate found in the system's store ({} error(s) reading it); name a CA file for the https:// endpoint",
                        native.errors.len()
                    ),
                ));
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| err(ca_var, e.to_string()))?
    .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates(cert)?;
            let private = PrivateKeyDer::from_pem_file(Path::new(key.path))
                .map_err(|e| err(key.var, format!("{}: {e}", key.path)))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|e| err(key.var, format!("{}: {e}", key.path)))?
        }
    };
    config.alpn_protocols = vec![if grpc {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(Arc::new(config))
}
