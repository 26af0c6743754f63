//! `Accept` negotiation: any header value negotiates a format without panicking, and
//! `GET /apis` with `profile=nopeer` is always the local server's document.

#![no_main]

use http::header::{ACCEPT, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mvproxy_core::classify::classify;
use mvproxy_core::discovery::negotiate::{DiscoveryFormat, negotiate};
use mvproxy_core::route::{Route, decide};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let format = negotiate(Some(&value));
    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT, value);
    let info = classify(&http::Method::GET, "/apis", None);
    let route = decide(
        &info,
        &http::Method::GET,
        &headers,
        common::two_releases(),
        |_| 0,
    );
    match format {
        DiscoveryFormat::AggregatedV2 { nopeer: true }
        | DiscoveryFormat::AggregatedV2Beta1
        | DiscoveryFormat::Unsupported => {
            assert!(matches!(route, Route::Local(_)), "{format:?} → {route:?}")
        }
        DiscoveryFormat::AggregatedV2 { nopeer: false } | DiscoveryFormat::Legacy => {
            assert!(
                matches!(route, Route::Discovery(_)),
                "{format:?} → {route:?}"
            )
        }
    }
});
