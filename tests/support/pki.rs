//! Test certificates made with rcgen: a CA and leaf certificates it signs, written as PEM
//! files into a temporary directory (what kubeadm would have put in /etc/kubernetes/pki).

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use super::tempdir::TempDir;

/// A CA that can sign serving and client certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    pub dir: TempDir,
}

/// A certificate and key on disk.
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        let pem = cert.pem();
        let dir = TempDir::new("pki");
        std::fs::write(dir.path().join("ca.crt"), &pem).expect("write CA");
        Ca {
            issuer: Issuer::new(params, key),
            pem,
            dir,
        }
    }

    /// The CA certificate file.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The CA certificate PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A client certificate for user `cn` in groups `orgs` (rcgen keeps one O per name).
    pub fn issue_client(&self, name: &str, cn: &str, orgs: &[&str]) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pair = Pair {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).expect("write cert");
        std::fs::write(&pair.key, key.serialize_pem()).expect("write key");
        pair
    }

    /// A leaf certificate for `sans` (DNS names or IPs) with common name `cn`, as `name.crt`/`name.key`.
    pub fn issue(&self, name: &str, cn: &str, sans: &[&str]) -> Pair {
        self.issue_with(name, cn, sans, |_| {})
    }

    /// A leaf that was valid in 2001 only.
    pub fn issue_expired(&self, name: &str, cn: &str, sans: &[&str]) -> Pair {
        self.issue_with(name, cn, sans, |p| {
            p.not_before = rcgen::date_time_ymd(2001, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 12, 31);
        })
    }

    fn issue_with(
        &self,
        name: &str,
        cn: &str,
        sans: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Pair {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        edit(&mut params);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pair = Pair {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).expect("write cert");
        std::fs::write(&pair.key, key.serialize_pem()).expect("write key");
        pair
    }
}

/// A self-signed certificate for `sans`, as `dir/name.crt`/`name.key` (no CA vouches for it).
pub fn self_signed(dir: &std::path::Path, name: &str, sans: &[&str]) -> Pair {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    let pair = Pair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&pair.cert, cert.pem()).expect("write cert");
    std::fs::write(&pair.key, key.serialize_pem()).expect("write key");
    pair
}
