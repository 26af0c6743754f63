//! The file step of validation: every file a valid [`Config`] names can be opened now, and a
//! kubeconfig names a usable current context. Contents of TLS files are read (and then
//! watched) at start ([`crate::app`]); a file that exists but does not parse stops mvproxy there.

use std::path::Path;

use crate::target::TargetSource;

use super::{
    AdminSecurity, Config, ConfigError, Identity, PeerReader, Peers, TokenFile, Verify, err,
};

impl Config {
    /// Checks, field by field, that each file named can be read.
    pub fn check_files(&self) -> Result<(), ConfigError> {
        for (field, path) in self.files() {
            readable(field, path)?;
        }
        if let Peers::Cluster(cluster) = &self.peers
            && let PeerReader::Kubeconfig(path) = &cluster.reader
        {
            crate::kubeconfig::load(path).map_err(|why| err("kubeconfig", why.to_string()))?;
        }
        if let Some(source @ TargetSource::Discovery(_)) = &self.target {
            source
                .load()
                .map_err(|why| err("target-discovery", why.to_string()))?;
        }
        Ok(())
    }

    /// Every file given by a flag, with the flag's name, in the order they are checked.
    fn files(&self) -> Vec<(&'static str, &Path)> {
        let mut files: Vec<(&'static str, &Path)> = Vec::new();
        if let AdminSecurity::Tls(admin) = &self.admin {
            files.push(("admin-tls-cert-file", &admin.serving.cert));
            files.push(("admin-tls-key-file", &admin.serving.key));
            if let Some(ca) = &admin.client_ca {
                files.push(("admin-client-ca-file", ca));
            }
            if let TokenFile::Given(token) = &admin.token {
                files.push(("admin-auth-token-file", token));
            }
        }
        if let Some(tls) = &self.proxy_tls {
            files.push(("tls-cert-file", &tls.serving.cert));
            files.push(("tls-key-file", &tls.serving.key));
        }
        if let Some(pair) = &self.upstream_tls.client_cert {
            files.push(("proxy-client-cert-file", &pair.cert));
            files.push(("proxy-client-key-file", &pair.key));
        }
        if let Verify::Cas { local, peers } = &self.upstream_tls.verify {
            if let Some(ca) = peers {
                files.push(("peer-ca-file", ca));
            }
            if let Some(ca) = local {
                files.push(("local-ca-file", ca));
            }
        }
        if let Some(tls) = &self.proxy_tls {
            if let Identity::FrontProxy { users_ca } = &tls.identity {
                files.push(("client-ca-file", users_ca));
            }
            if let Some(requestheader) = &tls.requestheader {
                files.push(("requestheader-client-ca-file", &requestheader.ca));
            }
        }
        if let Peers::Cluster(cluster) = &self.peers
            && let PeerReader::LocalServer(TokenFile::Given(token)) = &cluster.reader
        {
            files.push(("peer-source-token-file", token));
        }
        files
    }
}

fn readable(field: &str, path: &Path) -> Result<(), ConfigError> {
    std::fs::File::open(path)
        .map(|_| ())
        .map_err(|e| err(field, format!("{}: {e}", path.display())))
}
