//! `Warning` response headers (RFC 7234 as kube-apiserver writes them) and the deprecation
//! read from them: any bytes from any server parse without panicking, a parsed warning has a
//! three-digit code, an agent and a text without control characters, and a release of
//! removal, the `removed_in` label, is only ever `1.N` with N below `MAX_MINOR` (so the label
//! stays bounded). A target's discovery document (`--target-discovery`) parses or names the
//! JSON path of its fault, without panicking.
//!
//! Input: NUL-separated parts: group, version, resource of the request, then header values.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mvproxy_core::classify::Gvr;
use mvproxy_core::target::parse_list;
use mvproxy_core::target::warning::{MAX_MINOR, deprecation, parse};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let _ = parse_list(data);
    for w in parse(data) {
        assert!(w.code <= 999, "{w:?}");
        assert!(!w.agent.is_empty() && !w.agent.contains(' '), "{w:?}");
        assert!(!w.text.chars().any(char::is_control), "{w:?}");
    }
    let parts = common::parts(data);
    let text = |i: usize| {
        parts
            .get(i)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let gvr = Gvr::new(text(0), text(1), text(2));
    let values: Vec<&[u8]> = parts.iter().skip(3).copied().collect();
    if let Some(d) = deprecation(&gvr, values) {
        if let Some(r) = d.removed_in {
            assert_eq!(r.major, 1, "{r}");
            assert!(r.minor < MAX_MINOR, "{r}");
        }
    }
});
