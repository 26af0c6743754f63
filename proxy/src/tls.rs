//! TLS material from files: the serving config for `--listen`, and client configs for the
//! local API server and the peers.
//!
//! Every error names the file and what is wrong with it, because these run at startup and
//! the message is all an operator gets. One crypto provider (aws-lc-rs) for the whole process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A TLS file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {cause}")]
    File { path: PathBuf, cause: String },
    #[error("{0}")]
    Config(String),
}

fn file_error(path: &Path, cause: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        cause: cause.to_string(),
    }
}

/// Installs the process-wide crypto provider once (idempotent).
pub fn install_provider() {
    // A second install returns Err with the installed provider; that is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The trust store of a CA file.
pub fn roots(ca_file: &Path) -> Result<RootCertStore, TlsError> {
    root_store(ca_file)
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = std::fs::read(path).map_err(|e| file_error(path, e))?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate found"));
    }
    Ok(certs)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let data = std::fs::read(path).map_err(|e| file_error(path, e))?;
    PrivateKeyDer::from_pem_slice(&data)
        .map_err(|e| file_error(path, format!("no usable private key: {e}")))
}

fn root_store(ca_file: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca_file)? {
        roots
            .add(cert)
            .map_err(|e| file_error(ca_file, format!("bad CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// The serving config for `--listen` (TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN). Client
/// certificates signed by one of `client_cas` are asked for, never required.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_cas: &[&Path],
) -> Result<ServerConfig, TlsError> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = if client_cas.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        for ca in client_cas {
            for cert in load_certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| file_error(ca, format!("bad CA certificate: {e}")))?;
            }
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Config(format!("client certificate verifier: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("serving certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A client config that trusts `ca_file` only and presents `client_cert` if given.
/// Upstreams are spoken to in HTTP/1.1 (upgrades for exec and port-forward need it).
pub fn client_config(
    ca_file: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(root_store(ca_file)?);
    let config = match client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| file_error(cert, format!("proxy client certificate and key: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file() {
        let missing = Path::new("/nonexistent/ca.crt");
        let e = client_config(missing, None).unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/ca.crt:"), "{e}");

        let dir = std::env::temp_dir().join(format!("mvproxy-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not pem").unwrap();
        let e = load_certs(&junk).unwrap_err().to_string();
        assert!(
            e.contains("junk.pem") && e.contains("no certificate"),
            "{e}"
        );
        let e = load_key(&junk).unwrap_err().to_string();
        assert!(e.contains("junk.pem") && e.contains("private key"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loads_a_generated_pair() {
        install_provider();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = std::env::temp_dir().join(format!("mvproxy-tls2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        server_config(&c, &k, &[]).unwrap();
        server_config(&c, &k, &[&c]).unwrap();
        client_config(&c, Some((&c, &k))).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
