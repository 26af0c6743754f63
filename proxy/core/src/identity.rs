//! Who the client is, and what the API servers are told about it.
//!
//! API servers trust the front-proxy headers (`X-Remote-User`, `X-Remote-Group`, …) only on a
//! connection authenticated with a certificate from their requestheader CA, which mvproxy
//! presents (`--proxy-client-cert-file`). So whoever can put those headers on a request that
//! mvproxy forwards can be anybody: a client's own are always removed, with two exceptions,
//! kube-apiserver's own rules:
//!
//! - `front-proxy` mode: a client certificate verified against `--client-ca-file` becomes
//!   `X-Remote-User: <CN>` and one `X-Remote-Group: <O>` per organisation (as kube-apiserver
//!   maps certificates); a bearer token still passes for the API server to authenticate.
//! - a connection whose certificate verifies against `--requestheader-client-ca-file` and whose
//!   CN is in `--requestheader-allowed-names` (empty: any) is a trusted front proxy, normally
//!   another mvproxy on the peer hop: its headers are passed on as they are.
//!
//! The decision is made once per connection, after the TLS handshake.

use std::sync::Arc;

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

/// The header names of the requestheader protocol (configurable like kube-apiserver's
/// `--requestheader-*-headers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// The user name header.
    pub user: HeaderName,
    /// The user's UID header.
    pub uid: HeaderName,
    /// The header of each group.
    pub group: HeaderName,
    /// Lowercase prefix of the extra headers.
    pub extra_prefix: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            user: HeaderName::from_static("x-remote-user"),
            uid: HeaderName::from_static("x-remote-uid"),
            group: HeaderName::from_static("x-remote-group"),
            extra_prefix: "x-remote-extra-".to_owned(),
        }
    }
}

/// What a connection proved about its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientIdentity {
    /// Nothing: its identity headers are removed, its credentials pass as sent.
    Anonymous,
    /// A user certificate (front-proxy mode): asserted as front-proxy headers.
    User {
        /// The certificate's CN.
        name: String,
        /// Its organisations (O).
        groups: Vec<String>,
    },
    /// A trusted front proxy: its identity headers pass as they are.
    TrustedProxy {
        /// The proxy certificate's CN.
        name: String,
    },
}

/// Decides a connection's identity from its client certificate chain.
pub struct Authenticator {
    users: Option<Arc<dyn ClientCertVerifier>>,
    proxies: Option<(Arc<dyn ClientCertVerifier>, Vec<String>)>,
    /// The header names to assert and to strip.
    pub names: HeaderNames,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("users", &self.users.is_some())
            .field("proxies", &self.proxies.as_ref().map(|(_, n)| n))
            .finish()
    }
}

impl Authenticator {
    /// `users`: verifies user certificates (front-proxy mode); `proxies`: verifies trusted
    /// front proxies, with their allowed CNs.
    pub fn new(
        users: Option<Arc<dyn ClientCertVerifier>>,
        proxies: Option<(Arc<dyn ClientCertVerifier>, Vec<String>)>,
        names: HeaderNames,
    ) -> Self {
        Self {
            users,
            proxies,
            names,
        }
    }

    /// The identity a verified chain proves (the TLS layer has verified it against the union
    /// of both CAs; which CA signed it decides what it may do).
    pub fn identify(&self, chain: Option<&[CertificateDer<'_>]>) -> ClientIdentity {
        let Some((end, intermediates)) = chain.and_then(|c| c.split_first()) else {
            return ClientIdentity::Anonymous;
        };
        let now = UnixTime::now();
        let Some((cn, orgs)) = subject(end) else {
            return ClientIdentity::Anonymous;
        };
        if let Some((verifier, allowed)) = &self.proxies
            && verifier.verify_client_cert(end, intermediates, now).is_ok()
            && (allowed.is_empty() || allowed.contains(&cn))
        {
            return ClientIdentity::TrustedProxy { name: cn };
        }
        if let Some(verifier) = &self.users
            && verifier.verify_client_cert(end, intermediates, now).is_ok()
        {
            return ClientIdentity::User {
                name: cn,
                groups: orgs,
            };
        }
        ClientIdentity::Anonymous
    }

    /// Rewrites the request's identity headers for `identity`.
    pub fn apply(&self, identity: &ClientIdentity, headers: &mut HeaderMap) {
        match identity {
            ClientIdentity::TrustedProxy { .. } => {}
            ClientIdentity::Anonymous => self.strip(headers),
            ClientIdentity::User { name, groups } => {
                self.strip(headers);
                if let Ok(v) = HeaderValue::from_str(name) {
                    headers.insert(self.names.user.clone(), v);
                }
                for g in groups {
                    if let Ok(v) = HeaderValue::from_str(g) {
                        headers.append(self.names.group.clone(), v);
                    }
                }
            }
        }
    }

    fn strip(&self, headers: &mut HeaderMap) {
        let n = &self.names;
        let spoofable: Vec<HeaderName> = headers
            .keys()
            .filter(|k| {
                **k == n.user
                    || **k == n.uid
                    || **k == n.group
                    || k.as_str().starts_with(&n.extra_prefix)
                    // the default names, whatever is configured: never pass them from a client
                    || k.as_str().starts_with("x-remote-")
            })
            .cloned()
            .collect();
        for h in spoofable {
            headers.remove(h);
        }
    }
}

/// The certificate's subject CN and O values.
pub fn subject(cert: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())?
        .to_owned();
    let orgs = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_owned))
        .collect();
    Some((cn, orgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(
        cn: &str,
    ) -> (
        rcgen::Issuer<'static, rcgen::KeyPair>,
        Arc<dyn ClientCertVerifier>,
    ) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            crate::tls::provider(),
        )
        .allow_unauthenticated()
        .build()
        .unwrap();
        (rcgen::Issuer::new(params, key), verifier)
    }

    fn leaf(
        issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
        cn: &str,
        orgs: &[&str],
    ) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    #[test]
    fn certificates_map_to_identities_by_issuing_ca() {
        crate::tls::install_provider();
        let (users_ca, users_roots) = ca("cluster-ca");
        let (proxy_ca, proxy_roots) = ca("front-proxy-ca");
        let auth = Authenticator::new(
            Some(users_roots),
            Some((proxy_roots, vec!["front-proxy-client".to_owned()])),
            HeaderNames::default(),
        );
        // (rcgen writes one O per certificate; several are read the same way)
        let alice = leaf(&users_ca, "alice", &["devs"]);
        assert_eq!(
            auth.identify(Some(&[alice])),
            ClientIdentity::User {
                name: "alice".into(),
                groups: vec!["devs".into()]
            }
        );
        let proxy = leaf(&proxy_ca, "front-proxy-client", &[]);
        assert_eq!(
            auth.identify(Some(&[proxy])),
            ClientIdentity::TrustedProxy {
                name: "front-proxy-client".into()
            }
        );
        // right CA, CN not allowed; a user CA's cert claiming the proxy's name
        assert_eq!(
            auth.identify(Some(&[leaf(&proxy_ca, "intruder", &[])])),
            ClientIdentity::Anonymous
        );
        assert_eq!(
            auth.identify(Some(&[leaf(&users_ca, "front-proxy-client", &[])])),
            ClientIdentity::User {
                name: "front-proxy-client".into(),
                groups: vec![]
            },
            "a user certificate never makes a trusted proxy"
        );
        assert_eq!(auth.identify(None), ClientIdentity::Anonymous);
    }

    #[test]
    fn headers_are_rewritten_per_identity() {
        let auth = Authenticator::new(None, None, HeaderNames::default());
        let spoofed = || {
            let mut h = HeaderMap::new();
            h.insert("x-remote-user", HeaderValue::from_static("system:admin"));
            h.append("x-remote-group", HeaderValue::from_static("system:masters"));
            h.insert("x-remote-extra-scopes", HeaderValue::from_static("all"));
            h.insert("authorization", HeaderValue::from_static("Bearer t"));
            h
        };
        let mut h = spoofed();
        auth.apply(&ClientIdentity::Anonymous, &mut h);
        assert_eq!(
            h.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["authorization"]
        );

        let mut h = spoofed();
        auth.apply(
            &ClientIdentity::User {
                name: "alice".into(),
                groups: vec!["devs".into(), "admins".into()],
            },
            &mut h,
        );
        assert_eq!(h["x-remote-user"], "alice");
        let groups: Vec<_> = h.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["devs", "admins"]);
        assert!(!h.contains_key("x-remote-extra-scopes"));
        assert_eq!(h["authorization"], "Bearer t");

        let mut h = spoofed();
        auth.apply(&ClientIdentity::TrustedProxy { name: "p".into() }, &mut h);
        assert_eq!(
            h["x-remote-user"], "system:admin",
            "a trusted proxy's headers pass"
        );
    }
}
