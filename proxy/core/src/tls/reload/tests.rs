//! A watched input follows its files: a usable change is picked up, an unusable one is
//! reported and the previous value kept, an unchanged file is not rebuilt.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("mvproxy-reload-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(cn: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    Ca {
        issuer: Issuer::new(params, key),
        pem,
    }
}

/// A leaf for localhost signed by `ca`: (certificate PEM, key PEM, certificate DER).
fn leaf(ca: &Ca, cn: &str) -> (String, String, Vec<u8>) {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

#[test]
fn serving_cert_follows_its_files_and_keeps_the_last_good_pair() {
    crate::tls::install_provider();
    let dir = Dir::new("serving");
    let (cert, key) = (dir.file("tls.crt"), dir.file("tls.key"));
    let ca = ca("ca");
    let (c1, k1, d1) = leaf(&ca, "one");
    std::fs::write(&cert, &c1).unwrap();
    std::fs::write(&key, &k1).unwrap();
    let serving = ServingCert::load(&cert, &key).unwrap();
    let current = || serving.watched().current().cert[0].to_vec();
    assert_eq!(current(), d1);
    assert!(matches!(serving.watched().check(), Checked::Unchanged));

    // a new pair: picked up
    let (c2, k2, d2) = leaf(&ca, "two");
    std::fs::write(&cert, &c2).unwrap();
    std::fs::write(&key, &k2).unwrap();
    assert!(matches!(serving.watched().check(), Checked::Reloaded));
    assert_eq!(current(), d2);

    // the certificate written before its key: refused, named, the previous pair stays
    let (c3, k3, d3) = leaf(&ca, "three");
    std::fs::write(&cert, &c3).unwrap();
    match serving.watched().check() {
        Checked::Kept(e) => {
            let e = e.to_string();
            assert!(e.contains("tls.crt") && e.contains("does not match"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(current(), d2);
    assert!(
        matches!(serving.watched().check(), Checked::Unchanged),
        "an unusable file is reported once"
    );
    // then the key: the new pair is whole
    std::fs::write(&key, &k3).unwrap();
    assert!(matches!(serving.watched().check(), Checked::Reloaded));
    assert_eq!(current(), d3);

    // garbage and a missing file: refused, named, kept
    std::fs::write(&cert, "not a certificate").unwrap();
    match serving.watched().check() {
        Checked::Kept(e) => assert!(e.to_string().contains("tls.crt"), "{e}"),
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(&key).unwrap();
    match serving.watched().check() {
        Checked::Kept(e) => assert!(e.to_string().contains("tls.key"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(current(), d3);
}

#[test]
fn ca_verifier_trusts_what_the_file_says_now() {
    crate::tls::install_provider();
    let dir = Dir::new("ca");
    let file = dir.file("ca.crt");
    let (wrong, right) = (ca("wrong"), ca("right"));
    let (_, _, der) = leaf(&right, "peer");
    let der = CertificateDer::from(der);
    let name = ServerName::try_from("localhost").unwrap();
    std::fs::write(&file, &wrong.pem).unwrap();
    let verifier = CaVerifier::load(&file).unwrap();
    let verify = || verifier.verify_server_cert(&der, &[], &name, &[], UnixTime::now());
    let e = verify().unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    std::fs::write(&file, format!("{}{}", wrong.pem, right.pem)).unwrap();
    assert!(matches!(verifier.watched().check(), Checked::Reloaded));
    verify().unwrap();

    // an unreadable bundle keeps the last good one
    std::fs::write(&file, "-----BEGIN CERTIFICATE-----\nnope\n").unwrap();
    assert!(matches!(verifier.watched().check(), Checked::Kept(_)));
    verify().unwrap();
}

#[test]
fn insecure_verifier_accepts_any_chain() {
    let (_, _, der) = leaf(&ca("anyone"), "peer");
    let v = InsecureVerifier::new(&crate::tls::provider());
    let name = ServerName::try_from("kubernetes.default.svc").unwrap();
    v.verify_server_cert(&CertificateDer::from(der), &[], &name, &[], UnixTime::now())
        .unwrap();
    assert!(!v.supported_verify_schemes().is_empty());
}

#[tokio::test]
async fn the_reloader_checks_on_its_interval_until_shutdown() {
    crate::tls::install_provider();
    let dir = Dir::new("run");
    let file = dir.file("ca.crt");
    let (wrong, right) = (ca("wrong"), ca("right"));
    let (_, _, der) = leaf(&right, "peer");
    let der = CertificateDer::from(der);
    let name = ServerName::try_from("localhost").unwrap();
    std::fs::write(&file, &wrong.pem).unwrap();
    let mut reloader = Reloader::new(Duration::from_millis(20));
    let verifier = reloader.ca(&file).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(reloader.run(shutdown.clone()));
    std::fs::write(&file, &right.pem).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while verifier
        .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
        .is_err()
    {
        assert!(tokio::time::Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn client_cert_presents_the_renewed_pair() {
    crate::tls::install_provider();
    let dir = Dir::new("client");
    let (cert, key) = (
        dir.file("front-proxy-client.crt"),
        dir.file("front-proxy-client.key"),
    );
    let ca = ca("front-proxy-ca");
    let (c1, k1, d1) = leaf(&ca, "front-proxy-client");
    std::fs::write(&cert, &c1).unwrap();
    std::fs::write(&key, &k1).unwrap();
    let client = ClientCert::load(&cert, &key).unwrap();
    let presented = || client.resolve(&[], &[]).unwrap().cert[0].to_vec();
    assert!(client.has_certs());
    assert_eq!(presented(), d1);
    let (c2, k2, d2) = leaf(&ca, "front-proxy-client");
    std::fs::write(&key, &k2).unwrap();
    std::fs::write(&cert, &c2).unwrap();
    assert!(matches!(client.watched().check(), Checked::Reloaded));
    assert_eq!(presented(), d2);
}

#[test]
fn client_ca_verifier_trusts_clients_of_a_ca_added_to_the_file() {
    crate::tls::install_provider();
    let dir = Dir::new("client-ca");
    let file = dir.file("client-ca.crt");
    let (old, new) = (ca("old-ca"), ca("new-ca"));
    std::fs::write(&file, &old.pem).unwrap();
    let verifier = ClientCaVerifier::load(&[&file]).unwrap();
    let (_, _, from_new) = leaf(&new, "alice");
    let (_, _, from_old) = leaf(&old, "bob");
    let verify = |der: &Vec<u8>| {
        verifier
            .verify_client_cert(&CertificateDer::from(der.clone()), &[], UnixTime::now())
            .is_ok()
    };
    assert!(verify(&from_old));
    assert!(!verify(&from_new), "not trusted yet");
    assert!(
        !verifier.client_auth_mandatory(),
        "a certificate stays optional"
    );

    // the operator adds the new CA to the bundle
    std::fs::write(&file, format!("{}{}", old.pem, new.pem)).unwrap();
    assert!(matches!(verifier.watched().check(), Checked::Reloaded));
    assert!(verify(&from_new) && verify(&from_old));
    // a broken bundle keeps the last good one
    std::fs::write(&file, "not a certificate").unwrap();
    assert!(matches!(verifier.watched().check(), Checked::Kept(_)));
    assert!(verify(&from_new));
}
