//! Peers from the cluster: any list of Leases or EndpointSlices (as the local API server
//! would send them) gives a set of peers without panicking, never including this server.

#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use mvproxy_core::peers::{peers_from_leases, peers_from_slices};
use mvproxy_core::plumbing::ServerName;

fuzz_target!(|data: &[u8]| {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_slice(data) else {
        return;
    };
    let me = ServerName::from("apiserver-self");
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
    for p in peers_from_leases(items.iter(), &me, "https", now) {
        assert_ne!(p.name, me, "this server is not its own peer");
    }
    for p in peers_from_slices(items.iter(), "10.0.0.1:6443", "https") {
        assert_ne!(p.url.authority().map(|a| a.as_str()), Some("10.0.0.1:6443"));
    }
});
