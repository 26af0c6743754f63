//! The YAML configuration (`--config`): any document is either refused with an error naming
//! a real field (the line mvproxy prints before exiting 2) or validated into a `Config`,
//! without panicking. File paths are replaced by one that exists and one that does not, so
//! the target never opens a path the input chose.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::Args;
use libfuzzer_sys::fuzz_target;
use mvproxy_core::config::ServeArgs;

/// A readable file and a path that does not exist.
fn paths() -> &'static (PathBuf, PathBuf) {
    static P: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("mvproxy-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("exists.pem");
        std::fs::write(&file, "not a certificate").expect("temp file");
        (file, dir.join("missing.pem"))
    })
}

/// The flags mvproxy serve has (the fields an error may name), and `config` itself.
fn fields() -> &'static Vec<String> {
    static F: OnceLock<Vec<String>> = OnceLock::new();
    F.get_or_init(|| {
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        let mut f: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        f.push("config".to_owned());
        f
    })
}

fn tame(p: &mut Option<PathBuf>) {
    if let Some(path) = p {
        let (exists, missing) = paths();
        let even = path.as_os_str().len() % 2 == 0;
        *p = Some(if even { exists } else { missing }.clone());
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut args) = serde_yaml_ng::from_str::<ServeArgs>(text) else {
        return;
    };
    for p in [
        &mut args.tls_cert_file,
        &mut args.tls_key_file,
        &mut args.client_ca_file,
        &mut args.local_ca_file,
        &mut args.peer_ca_file,
        &mut args.proxy_client_cert_file,
        &mut args.proxy_client_key_file,
        &mut args.requestheader_client_ca_file,
        &mut args.peer_source_token_file,
        &mut args.kubeconfig,
        &mut args.admin_tls_cert_file,
        &mut args.admin_tls_key_file,
        &mut args.admin_client_ca_file,
        &mut args.admin_auth_token_file,
    ] {
        tame(p);
    }
    args.config = None;
    if let Err(e) = args.load() {
        assert!(
            fields().contains(&e.field),
            "error names no flag: {:?}: {}",
            e.field,
            e.why
        );
    }
});
