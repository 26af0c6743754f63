//! Certificates and trust that follow their files while mvproxy runs.
//!
//! kubeadm renews certificates in place (`kubeadm certs renew`, and by default every `kubeadm
//! upgrade apply`, the very operation mvproxy is there for), and an operator may replace a CA
//! bundle to add a new CA before retiring the old. A proxy that read its files once would
//! keep serving an expired certificate, or keep refusing a peer whose new certificate the new
//! bundle trusts, until someone restarts it and drops every watch.
//!
//! So each TLS input is a [`Watched`] value: parsed at start (an error there stops mvproxy, as
//! before), then reread by [`Reloader::run`] every `--tls-reload-interval-seconds`. Files are
//! compared by content, not modification time: content is what matters, it survives copies
//! that keep the mtime, and kubeadm's files are a few KiB. When the content changed and
//! parses, the new value is swapped in whole ([`ArcSwap`]); the next TLS handshake uses it,
//! while established connections (watches, pooled upstream connections) are not touched, as
//! a certificate only matters during a handshake. When the new content is unusable (a
//! half-written file, a key that does not match the certificate yet), the previous value
//! stays and one warning names the file; the check is repeated on the next tick, so a cert and
//! key written one after the other are picked up once both are in place.
//!
//! - [`ServingCert`] is the listener's certificate (`--tls-cert-file`/`--tls-key-file`);
//! - [`ClientCert`] is the one presented upstream (`--proxy-client-cert-file`/`-key-file`);
//! - [`CaVerifier`] verifies upstreams against `--peer-ca-file` or `--local-ca-file`;
//! - [`ClientCaVerifier`] verifies clients against `--client-ca-file` and
//!   `--requestheader-client-ca-file`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use tokio_util::sync::CancellationToken;

use super::insecure::InsecureVerifier;
use super::{TlsError, file_error};

/// What a check of one watched input found.
#[derive(Debug)]
pub enum Checked {
    /// The files are as last seen.
    Unchanged,
    /// The files changed and the new value is in use.
    Reloaded,
    /// The files changed but cannot be used: the previous value stays.
    Kept(TlsError),
}

/// Builds a value from files' paths (for messages) and contents.
type Build<T> = fn(&[PathBuf], &[Vec<u8>]) -> Result<Arc<T>, TlsError>;

/// One value built from files, rebuilt when their content changes.
pub struct Watched<T> {
    /// What it is, for log lines ("serving certificate").
    what: &'static str,
    paths: Vec<PathBuf>,
    build: Build<T>,
    current: ArcSwap<T>,
    /// Each file's content (or read error) at the last check.
    seen: Mutex<Vec<Result<Vec<u8>, String>>>,
}

impl<T> Watched<T> {
    fn load(what: &'static str, paths: &[&Path], build: Build<T>) -> Result<Self, TlsError> {
        let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
        let contents = paths
            .iter()
            .map(|p| super::read(p))
            .collect::<Result<Vec<_>, _>>()?;
        let value = build(&paths, &contents)?;
        Ok(Self {
            what,
            paths,
            build,
            current: ArcSwap::new(value),
            seen: Mutex::new(contents.into_iter().map(Ok).collect()),
        })
    }

    /// The value in use.
    pub fn current(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Rereads the files; rebuilds and swaps the value if their content changed and is usable.
    pub fn check(&self) -> Checked {
        let now: Vec<Result<Vec<u8>, String>> = self
            .paths
            .iter()
            .map(|p| std::fs::read(p).map_err(|e| e.to_string()))
            .collect();
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == now {
                return Checked::Unchanged;
            }
            seen.clone_from(&now);
        }
        let mut contents = Vec::with_capacity(now.len());
        for (path, read) in self.paths.iter().zip(now) {
            match read {
                Ok(bytes) => contents.push(bytes),
                Err(e) => return Checked::Kept(file_error(path, e)),
            }
        }
        match (self.build)(&self.paths, &contents) {
            Ok(value) => {
                self.current.store(value);
                Checked::Reloaded
            }
            Err(e) => Checked::Kept(e),
        }
    }
}

impl<T> fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// Something [`Reloader`] checks on every tick.
trait Check: Send + Sync {
    fn check_and_log(&self);
}

impl<T: Send + Sync> Check for Watched<T> {
    fn check_and_log(&self) {
        let files = self
            .paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match self.check() {
            Checked::Unchanged => {}
            Checked::Reloaded => tracing::info!(what = self.what, %files, "reloaded"),
            Checked::Kept(e) => tracing::warn!(
                what = self.what,
                error = %e,
                "the changed file cannot be used; keeping the previous {}",
                self.what
            ),
        }
    }
}

/// Rereads every watched TLS input on an interval.
pub struct Reloader {
    interval: Duration,
    watched: Vec<Arc<dyn Check>>,
}

impl Reloader {
    /// A reloader checking its inputs every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            watched: Vec::new(),
        }
    }

    /// The listener's certificate, watched.
    pub fn serving_cert(&mut self, cert: &Path, key: &Path) -> Result<Arc<ServingCert>, TlsError> {
        let serving = ServingCert::load(cert, key)?;
        self.watched.push(serving.clone());
        Ok(serving)
    }

    /// The proxy client certificate, watched.
    pub fn client_cert(&mut self, cert: &Path, key: &Path) -> Result<Arc<ClientCert>, TlsError> {
        let client = ClientCert::load(cert, key)?;
        self.watched.push(client.clone());
        Ok(client)
    }

    /// A verifier of upstreams against `ca_file`, watched.
    pub fn ca(&mut self, ca_file: &Path) -> Result<Arc<CaVerifier>, TlsError> {
        let ca = CaVerifier::load(ca_file)?;
        self.watched.push(ca.clone());
        Ok(ca)
    }

    /// A verifier of client certificates against `ca_files`, watched.
    pub fn client_cas(&mut self, ca_files: &[&Path]) -> Result<Arc<ClientCaVerifier>, TlsError> {
        let v = ClientCaVerifier::load(ca_files)?;
        self.watched.push(v.clone());
        Ok(v)
    }

    /// The client config for one kind of upstream: verified against `ca_file` (watched), or
    /// not verified at all with `insecure`; `None` when neither (plain `http://` only).
    pub fn upstream_config(
        &mut self,
        ca_file: Option<&Path>,
        insecure: bool,
        client_cert: Option<Arc<ClientCert>>,
    ) -> Result<Option<ClientConfig>, TlsError> {
        let verifier: Arc<dyn ServerCertVerifier> = match (insecure, ca_file) {
            (true, _) => Arc::new(InsecureVerifier::new(&super::provider())),
            (false, Some(ca)) => self.ca(ca)?,
            (false, None) => return Ok(None),
        };
        super::client_config_with(verifier, client_cert.map(|c| c as _)).map(Some)
    }

    /// Checks every input each interval until `shutdown`. File reads run on the blocking pool.
    pub async fn run(self, shutdown: CancellationToken) {
        if self.watched.is_empty() {
            return;
        }
        let watched: Arc<[Arc<dyn Check>]> = self.watched.into();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.interval) => {}
                () = shutdown.cancelled() => return,
            }
            let batch = watched.clone();
            let checked = tokio::task::spawn_blocking(move || {
                for w in batch.iter() {
                    w.check_and_log();
                }
            });
            if let Err(e) = checked.await {
                tracing::warn!(error = %e, "TLS file check failed");
            }
        }
    }
}

/// A certificate and its key, parsed and checked to match.
fn certified_key(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<Arc<CertifiedKey>, TlsError> {
    let (cert_path, key_path) = (&paths[0], &paths[1]);
    let certs = super::parse_certs(cert_path, &contents[0])?;
    let key = super::parse_key(key_path, &contents[1])?;
    let key = super::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| file_error(key_path, format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(certs, key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(file_error(
            cert_path,
            format!(
                "the certificate does not match the private key in {}",
                key_path.display()
            ),
        )),
        Err(e) => Err(file_error(cert_path, e)),
    }
}

/// The listener's certificate: every handshake gets the current one.
#[derive(Debug)]
pub struct ServingCert(Watched<CertifiedKey>);

impl ServingCert {
    /// Reads and checks the pair (not watched: [`Reloader::serving_cert`] watches it).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        Watched::load("serving certificate", &[cert, key], certified_key).map(|w| Arc::new(Self(w)))
    }

    /// The watched pair.
    pub fn watched(&self) -> &Watched<CertifiedKey> {
        &self.0
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
}

impl Check for ServingCert {
    fn check_and_log(&self) {
        self.0.check_and_log();
    }
}

/// The client certificate presented to upstreams: every handshake gets the current one.
#[derive(Debug)]
pub struct ClientCert(Watched<CertifiedKey>);

impl ClientCert {
    /// Reads and checks the pair (not watched: [`Reloader::client_cert`] watches it).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        Watched::load("proxy client certificate", &[cert, key], certified_key)
            .map(|w| Arc::new(Self(w)))
    }

    /// The watched pair.
    pub fn watched(&self) -> &Watched<CertifiedKey> {
        &self.0
    }
}

impl ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl Check for ClientCert {
    fn check_and_log(&self) {
        self.0.check_and_log();
    }
}

fn ca(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
    super::ca_verifier(&paths[0], &contents[0])
}

/// Verifies upstreams against the CA file as it is now: a handshake after the file changed
/// uses the new CAs; connections already verified stay up.
#[derive(Debug)]
pub struct CaVerifier(Watched<WebPkiServerVerifier>);

impl CaVerifier {
    /// Reads the CA file (not watched: [`Reloader::ca`] watches it).
    pub fn load(ca_file: &Path) -> Result<Arc<Self>, TlsError> {
        Watched::load("CA", &[ca_file], ca).map(|w| Arc::new(Self(w)))
    }

    /// The watched CA file.
    pub fn watched(&self) -> &Watched<WebPkiServerVerifier> {
        &self.0
    }
}

impl Check for CaVerifier {
    fn check_and_log(&self) {
        self.0.check_and_log();
    }
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.current.load().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current
            .load()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current
            .load()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current.load().supported_verify_schemes()
    }
}

/// A client-certificate verifier built from CA files (any of them may sign).
pub struct ClientRoots(Arc<dyn ClientCertVerifier>);

impl fmt::Debug for ClientRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientRoots")
    }
}

fn client_roots(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<Arc<ClientRoots>, TlsError> {
    let mut roots = RootCertStore::empty();
    for (path, data) in paths.iter().zip(contents) {
        roots.roots.extend(super::parse_roots(path, data)?.roots);
    }
    let first = paths
        .first()
        .map(PathBuf::as_path)
        .unwrap_or(Path::new("client CA"));
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), super::provider())
        .allow_unauthenticated()
        .build()
        .map(|v| Arc::new(ClientRoots(v)))
        .map_err(|e| file_error(first, format!("no usable CA: {e}")))
}

/// Verifies client certificates against CA files as they are now (`--client-ca-file`,
/// `--requestheader-client-ca-file`): a certificate is optional, and one signed by a CA
/// added to the file is accepted from the next handshake on.
#[derive(Debug)]
pub struct ClientCaVerifier(Watched<ClientRoots>);

impl ClientCaVerifier {
    /// Reads the CA files (not watched: [`Reloader::client_cas`] watches them).
    pub fn load(ca_files: &[&Path]) -> Result<Arc<Self>, TlsError> {
        Watched::load("client CA", ca_files, client_roots).map(|w| Arc::new(Self(w)))
    }

    /// The watched CA files.
    pub fn watched(&self) -> &Watched<ClientRoots> {
        &self.0
    }
}

impl Check for ClientCaVerifier {
    fn check_and_log(&self) {
        self.0.check_and_log();
    }
}

impl ClientCertVerifier for ClientCaVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints are optional; the CA set changes underneath, so none are sent.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .current()
            .0
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current()
            .0
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current()
            .0
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
