//! TLS material from files: the serving config for `--listen`, and client configs for the
//! local API server and the peers.
//!
//! Every error names the file and what is wrong with it, because these run at startup and
//! the message is all an operator gets. One crypto provider (aws-lc-rs) for the whole process.
//! Only TLS 1.3 and 1.2 are spoken, on both sides (rustls implements nothing older; the
//! versions are still named explicitly so the choice is visible here).
//!
//! kubeadm rotates certificates in place (`kubeadm certs renew`, and every `kubeadm upgrade
//! apply`, which is exactly when mvproxy runs), so the configs built for the running proxy
//! take their certificates and trust from [`reload`], which rereads the files while serving;
//! [`insecure`] is the verifier behind `--insecure-skip-tls-verify`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ResolvesServerCert;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};

pub mod accept;
pub mod insecure;
pub mod reload;

/// The protocol versions mvproxy speaks, newest first: TLS 1.3 and 1.2, nothing older.
pub static PROTOCOL_VERSIONS: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A TLS file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {cause}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        cause: String,
    },
    /// rustls refused the configuration built from the files.
    #[error("{0}")]
    Config(#[source] rustls::Error),
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

/// The crypto provider every config here uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| file_error(path, e))
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(path, &read(path)?)
}

/// Every certificate of `data`, the PEM contents of `path`.
pub fn parse_certs(path: &Path, data: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate found"));
    }
    Ok(certs)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    parse_key(path, &read(path)?)
}

/// The private key in `data`, the PEM contents of `path`.
pub fn parse_key(path: &Path, data: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(data)
        .map_err(|e| file_error(path, format!("no usable private key: {e}")))
}

/// The trust store made of every certificate in `data`, the PEM contents of `ca_file`.
pub fn parse_roots(ca_file: &Path, data: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(ca_file, data)? {
        roots
            .add(cert)
            .map_err(|e| file_error(ca_file, format!("bad CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A verifier of servers' certificates against the CAs of `ca_file`.
pub fn ca_verifier(
    ca_file: &Path,
    data: &[u8],
) -> Result<Arc<rustls::client::WebPkiServerVerifier>, TlsError> {
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(parse_roots(ca_file, data)?),
        provider(),
    )
    .build()
    .map_err(|e| file_error(ca_file, format!("no usable CA: {e}")))
}

/// The serving config for `--listen` (TLS 1.3 and 1.2, HTTP/2 and HTTP/1.1 by ALPN), with the
/// certificate `cert` gives for each handshake ([`reload::ServingCert`] for the proxy), and
/// client certificates asked for (never required) when `clients` verifies them.
pub fn server_config(
    cert: Arc<dyn ResolvesServerCert>,
    clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(TlsError::Config)?;
    let builder = match clients {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A client config that trusts `ca_file` only and presents `client_cert` if given, both as
/// they are now (the running proxy uses [`reload::Reloader::upstream_config`] instead).
pub fn client_config(
    ca_file: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsError> {
    let verifier = ca_verifier(ca_file, &read(ca_file)?)?;
    let client_cert = match client_cert {
        Some((cert, key)) => Some(reload::ClientCert::load(cert, key)? as _),
        None => None,
    };
    client_config_with(verifier, client_cert)
}

/// A client config from PEM held in memory (a kubeconfig's `*-data`); `origin` names it in
/// errors.
pub fn client_config_from_pem(
    origin: &Path,
    ca: &[u8],
    client: Option<(&[u8], &[u8])>,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(TlsError::Config)?
        .with_root_certificates(parse_roots(origin, ca)?);
    match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(parse_certs(origin, cert)?, parse_key(origin, key)?)
            .map_err(|e| file_error(origin, format!("client certificate and key: {e}"))),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A client config that verifies servers with `verifier` and presents the certificate
/// `client_cert` gives, if any. Upstreams are spoken to in HTTP/1.1 (upgrades for exec and
/// port-forward need it; the connector sets ALPN).
pub fn client_config_with(
    verifier: Arc<dyn ServerCertVerifier>,
    client_cert: Option<Arc<dyn ResolvesClientCert>>,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(TlsError::Config)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(match client_cert {
        Some(resolver) => builder.with_client_cert_resolver(resolver),
        None => builder.with_no_client_auth(),
    })
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
        let serving = reload::ServingCert::load(&c, &k).unwrap();
        let config = server_config(serving.clone(), None).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let clients = reload::ClientCaVerifier::load(&[&c]).unwrap();
        server_config(serving, Some(clients)).unwrap();
        client_config(&c, Some((&c, &k))).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
