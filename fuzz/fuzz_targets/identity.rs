//! Identity headers: with any configured header names (as `--requestheader-*` flags, through
//! config validation) and any request headers, a client's spoofed identity never survives:
//! an anonymous client keeps none of the configured or default `X-Remote-*` headers, and a
//! certificate user gets exactly its own name and groups. Any bytes as a client certificate
//! are read (its subject) without panicking.
//!
//! Input: NUL-separated parts: user, uid and group header names, extra prefix, the user
//! name, its groups (comma-separated), then request headers as `name: value` lines.

#![no_main]

use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mvproxy_core::config::ServeArgs;
use mvproxy_core::identity::{Authenticator, ClientIdentity, HeaderNames};
use rustls_pki_types::CertificateDer;

#[path = "common.rs"]
mod common;

fn text(b: Option<&&[u8]>) -> Option<String> {
    b.and_then(|b| std::str::from_utf8(b).ok())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn spoofable(names: &HeaderNames, h: &HeaderName) -> bool {
    *h == names.user
        || *h == names.uid
        || *h == names.group
        || h.as_str().starts_with(&names.extra_prefix)
        || h.as_str().starts_with("x-remote-")
}

fuzz_target!(|data: &[u8]| {
    let auth = Authenticator::new(None, None, HeaderNames::default());
    let cert = CertificateDer::from(data);
    assert_eq!(
        auth.identify(Some(std::slice::from_ref(&cert))),
        ClientIdentity::Anonymous,
        "no verifier: nobody is trusted"
    );

    let parts = common::parts(data);
    let args = ServeArgs {
        local: Some("http://127.0.0.1:1".to_owned()),
        requestheader_username_headers: text(parts.first()),
        requestheader_uid_headers: text(parts.get(1)),
        requestheader_group_headers: text(parts.get(2)),
        requestheader_extra_headers_prefix: text(parts.get(3)),
        ..ServeArgs::default()
    };
    let Ok(config) = args.load() else {
        return;
    };
    let names = config.header_names;
    let mut headers = HeaderMap::new();
    for line in parts.get(6).unwrap_or(&&b""[..]).split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(n, v);
    }
    let auth = Authenticator::new(None, None, names.clone());

    let mut anonymous = headers.clone();
    auth.apply(&ClientIdentity::Anonymous, &mut anonymous);
    for h in anonymous.keys() {
        assert!(!spoofable(&names, h), "{h} passed from an anonymous client");
    }
    let mut before: Vec<_> = headers.keys().filter(|h| !spoofable(&names, h)).collect();
    let mut after: Vec<_> = anonymous.keys().collect();
    before.sort_by_key(|h| h.as_str());
    after.sort_by_key(|h| h.as_str());
    assert_eq!(before, after, "only identity headers are removed");

    let name = text(parts.get(4)).unwrap_or_default();
    let groups: Vec<String> = text(parts.get(5))
        .map(|g| g.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let mut user = headers.clone();
    auth.apply(
        &ClientIdentity::User {
            name: name.clone(),
            groups: groups.clone(),
        },
        &mut user,
    );
    let values = |h: &HeaderName| -> Vec<String> {
        user.get_all(h)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    };
    let want_user: Vec<String> = HeaderValue::from_str(&name)
        .ok()
        .map(|_| name.clone())
        .into_iter()
        .collect();
    let want_groups: Vec<String> = groups
        .iter()
        .filter(|g| HeaderValue::from_str(g).is_ok())
        .cloned()
        .collect();
    if names.user != names.group {
        assert_eq!(values(&names.user), want_user, "user header");
        assert_eq!(values(&names.group), want_groups, "group headers");
    }
    if names.uid != names.user && names.uid != names.group {
        assert!(values(&names.uid).is_empty(), "a client's uid passed");
    }
    for h in user.keys() {
        if *h != names.user && *h != names.group {
            assert!(!spoofable(&names, h), "{h} passed from a certificate user");
        }
    }

    let mut trusted = headers.clone();
    auth.apply(
        &ClientIdentity::TrustedProxy {
            name: "front-proxy-client".to_owned(),
        },
        &mut trusted,
    );
    assert_eq!(
        trusted, headers,
        "a trusted front proxy's headers pass as sent"
    );
});
