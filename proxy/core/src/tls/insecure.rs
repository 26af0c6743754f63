//! `--insecure-skip-tls-verify`: upstream certificates are accepted whoever signed them.
//!
//! For a rehearsal against API servers whose CA is not at hand, like kubectl's flag of the
//! same name. Only an explicit flag turns it on (a missing CA file is a configuration error,
//! never a silent downgrade); mvproxy warns at start and on every upstream connection failure.
//! The handshake is still real TLS: the server must prove it holds the key of the certificate
//! it sent (its handshake signature is checked), only the chain and the name are not.

use rustls::DigitallySignedStruct;
use rustls::SignatureScheme;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Accepts any certificate chain and name; checks handshake signatures.
#[derive(Debug)]
pub struct InsecureVerifier {
    algorithms: WebPkiSupportedAlgorithms,
}

impl InsecureVerifier {
    /// A verifier checking signatures with `provider`'s algorithms.
    pub fn new(provider: &CryptoProvider) -> Self {
        Self {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for InsecureVerifier {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
