//! The subset of a kubeconfig file that reading peers from the cluster needs: the current
//! context's server, its CA, and the user's bearer token or client certificate, inline
//! (`*-data`, base64) or as files (relative to the kubeconfig's folder, as kubectl reads them).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use http::Uri;
use serde::Deserialize;

/// What the peer source needs to reach and authenticate to an API server. Its `Debug` shows
/// whether a token or client key is there, never the secret itself.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// The file read, for error messages.
    pub path: PathBuf,
    /// The cluster's `server`.
    pub server: Uri,
    /// PEM of the CA that verifies `server` (required for `https://`).
    pub ca_pem: Option<Vec<u8>>,
    /// The user's `token`.
    pub token: Option<String>,
    /// The user's `tokenFile` (reread at each use: it may rotate).
    pub token_file: Option<PathBuf>,
    /// PEM certificate and key of the user.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

/// Stands in for a secret in `Debug` output.
const REDACTED: &str = "[redacted]";

impl std::fmt::Debug for KubeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeConfig")
            .field("path", &self.path)
            .field("server", &self.server)
            .field(
                "ca_pem",
                &self.ca_pem.as_ref().map(|p| format!("{} bytes", p.len())),
            )
            .field("token", &self.token.as_ref().map(|_| REDACTED))
            .field("token_file", &self.token_file)
            .field(
                "client_cert",
                &self
                    .client_cert
                    .as_ref()
                    .map(|(cert, _key)| (format!("{} bytes", cert.len()), REDACTED)),
            )
            .finish()
    }
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "current-context", default)]
    current_context: String,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: Option<T>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    token_file: Option<PathBuf>,
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
}

/// Why a kubeconfig could not be used; every message starts with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The kubeconfig.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not a kubeconfig.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The kubeconfig.
        path: PathBuf,
        /// Why it does not parse.
        source: serde_yaml_ng::Error,
    },
    /// A context, cluster or user it names is not in the file.
    #[error("{}: {what} {name:?} not found", path.display())]
    NotFound {
        /// The kubeconfig.
        path: PathBuf,
        /// `context`, `cluster` or `user`.
        what: &'static str,
        /// The name looked for.
        name: String,
    },
    /// A `*-data` field is not base64.
    #[error("{}: {what}-data: {source}", path.display())]
    Base64 {
        /// The kubeconfig.
        path: PathBuf,
        /// The field, without `-data`.
        what: &'static str,
        /// Why it does not decode.
        source: base64::DecodeError,
    },
    /// A file it references could not be read.
    #[error("{}: {what} {}: {source}", path.display(), file.display())]
    Referenced {
        /// The kubeconfig.
        path: PathBuf,
        /// The field naming the file.
        what: &'static str,
        /// The file.
        file: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The cluster's server is not a URL.
    #[error("{}: server {server:?}: {source}", path.display())]
    Server {
        /// The kubeconfig.
        path: PathBuf,
        /// The cluster's `server`.
        server: String,
        /// Why it is not a URL.
        source: http::uri::InvalidUri,
    },
    /// An `https://` server without a CA to verify it.
    #[error("{}: certificate-authority is required for an https:// server", path.display())]
    CaRequired {
        /// The kubeconfig.
        path: PathBuf,
    },
    /// Only one of the user's certificate and key.
    #[error("{}: client-certificate and client-key go together", path.display())]
    HalfClientCert {
        /// The kubeconfig.
        path: PathBuf,
    },
}

fn find<'a, T>(
    path: &Path,
    items: &'a [Named<T>],
    name: &str,
    what: &'static str,
) -> Result<&'a T, KubeconfigError> {
    items
        .iter()
        .find(|n| n.name == name)
        .and_then(|n| n.value.as_ref())
        .ok_or_else(|| KubeconfigError::NotFound {
            path: path.to_owned(),
            what,
            name: name.to_owned(),
        })
}

/// Reads the current context of `path`.
pub fn load(path: &Path) -> Result<KubeConfig, KubeconfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| KubeconfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

fn parse(path: &Path, text: &str) -> Result<KubeConfig, KubeconfigError> {
    parse_with(path, text, &|f: &Path| std::fs::read(f))
}

/// Reads the current context of `text`, the contents of the kubeconfig at `path`, with
/// `read_file` reading the files it names (the parser alone, for tests and fuzzing).
pub fn parse_with(
    path: &Path,
    text: &str,
    read_file: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<KubeConfig, KubeconfigError> {
    let file: File = serde_yaml_ng::from_str(text).map_err(|source| KubeconfigError::Parse {
        path: path.to_owned(),
        source,
    })?;
    let context = find(
        path,
        &file.contexts,
        &file.current_context,
        "current context",
    )?;
    let cluster = find(path, &file.clusters, &context.cluster, "cluster")?;
    let default_user = User::default();
    let user = if context.user.is_empty() {
        &default_user
    } else {
        find(path, &file.users, &context.user, "user")?
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let read = |data: &Option<String>,
                file: &Option<PathBuf>,
                what: &'static str|
     -> Result<Option<Vec<u8>>, KubeconfigError> {
        match (data, file) {
            (Some(d), _) => base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(Some)
                .map_err(|source| KubeconfigError::Base64 {
                    path: path.to_owned(),
                    what,
                    source,
                }),
            (None, Some(f)) => {
                let f = dir.join(f);
                read_file(&f)
                    .map(Some)
                    .map_err(|source| KubeconfigError::Referenced {
                        path: path.to_owned(),
                        what,
                        file: f,
                        source,
                    })
            }
            (None, None) => Ok(None),
        }
    };
    let server: Uri = cluster
        .server
        .parse()
        .map_err(|source| KubeconfigError::Server {
            path: path.to_owned(),
            server: cluster.server.clone(),
            source,
        })?;
    let ca_pem = read(
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
        "certificate-authority",
    )?;
    if server.scheme_str() == Some("https") && ca_pem.is_none() {
        return Err(KubeconfigError::CaRequired {
            path: path.to_owned(),
        });
    }
    let client_cert = match (
        read(
            &user.client_certificate_data,
            &user.client_certificate,
            "client-certificate",
        )?,
        read(&user.client_key_data, &user.client_key, "client-key")?,
    ) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(KubeconfigError::HalfClientCert {
                path: path.to_owned(),
            });
        }
    };
    Ok(KubeConfig {
        path: path.to_owned(),
        server,
        ca_pem,
        token: user.token.clone(),
        token_file: user.token_file.as_ref().map(|f| dir.join(f)),
        client_cert,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_never_prints_the_token_or_the_client_key() {
        let kc = super::KubeConfig {
            path: "/etc/kubeconfig".into(),
            server: http::Uri::from_static("https://10.0.0.1:6443"),
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            token: Some("s3cr3t-token-value".to_owned()),
            token_file: None,
            client_cert: Some((
                b"-----BEGIN CERTIFICATE-----".to_vec(),
                b"-----BEGIN PRIVATE KEY-----\nMIIEv-key-material".to_vec(),
            )),
        };
        let shown = format!("{kc:?}");
        assert!(!shown.contains("s3cr3t-token-value"), "{shown}");
        assert!(
            !shown.contains("PRIVATE KEY") && !shown.contains("MIIEv"),
            "{shown}"
        );
        assert!(
            shown.contains("[redacted]") && shown.contains("10.0.0.1:6443"),
            "{shown}"
        );
    }

    use super::*;

    #[test]
    fn reads_the_current_context_with_inline_and_file_credentials() {
        let dir = std::env::temp_dir().join(format!("mvproxy-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), "CA PEM").unwrap();
        let text = r#"
apiVersion: v1
kind: Config
current-context: admin@kubernetes
contexts:
  - name: other
    context: {cluster: nope, user: nope}
  - name: admin@kubernetes
    context: {cluster: kubernetes, user: admin}
clusters:
  - name: kubernetes
    cluster:
      server: https://10.0.0.1:6443
      certificate-authority: ca.crt
users:
  - name: admin
    user:
      client-certificate-data: Q0VSVA==
      client-key-data: S0VZ
"#;
        let c = parse(&dir.join("config"), text).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443".parse::<Uri>().unwrap());
        assert_eq!(
            c.ca_pem.as_deref(),
            Some(&b"CA PEM"[..]),
            "relative to the file's folder"
        );
        assert_eq!(c.client_cert, Some((b"CERT".to_vec(), b"KEY".to_vec())));
        assert_eq!(c.token, None);

        let token = text.replace(
            "      client-certificate-data: Q0VSVA==\n      client-key-data: S0VZ",
            "      token: abc",
        );
        assert_eq!(
            parse(&dir.join("config"), &token).unwrap().token.as_deref(),
            Some("abc")
        );
        let no_ca = text.replace("      certificate-authority: ca.crt\n", "");
        assert!(matches!(
            parse(&dir.join("config"), &no_ca),
            Err(KubeconfigError::CaRequired { .. })
        ));
        let wrong = text.replace(
            "current-context: admin@kubernetes",
            "current-context: missing",
        );
        let e = parse(&dir.join("config"), &wrong).unwrap_err();
        assert!(
            matches!(&e, KubeconfigError::NotFound { what: "current context", name, .. } if name == "missing"),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with("config: current context \"missing\" not found"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
