//! kubeconfig reading (`--kubeconfig`): any document gives a current context or an error,
//! without panicking; an `https://` server always comes with a CA. Files it names are
//! "read" from a fixed table, never from disk.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mvproxy_core::kubeconfig::parse_with;

fn read(p: &Path) -> std::io::Result<Vec<u8>> {
    match p.file_name().and_then(|n| n.to_str()) {
        Some("ca.crt" | "client.crt" | "client.key" | "token") => Ok(b"PEM".to_vec()),
        _ => Err(std::io::ErrorKind::NotFound.into()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(k) = parse_with(Path::new("/fuzz/kubeconfig"), text, &read) {
        if k.server.scheme_str() == Some("https") {
            assert!(k.ca_pem.is_some(), "https without a CA: {k:?}");
        }
    }
});
