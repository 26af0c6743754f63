//! A stand-in Kubernetes API server as its own process, for scripts that run real `mvproxy
//! serve` processes in front of it (scripts/conformance/telemetry-pack.sh): the same server
//! the demo and the end-to-end tests start in-process (`mvproxy-standin`), serving the
//! discovery surface of Kubernetes 1.31 or 1.34 from the demo's embedded catalog. The 1.31
//! stand-in warns about `flowcontrol.apiserver.k8s.io/v1beta3` as kube-apiserver 1.31 does, so
//! the per-client deprecation counts have something to count.
//!
//! For the rehearsal's panels of what no proxy fixes, two options add to that surface:
//! `--group-of FILE GROUP` serves GROUP as another server's aggregated discovery document FILE
//! does (1.36's `scheduling.k8s.io`, whose PodGroups carry a finalizer only 1.36's
//! controller-manager removes), and `--undecodable GROUP_VERSION RESOURCE KIND` fails every
//! read of RESOURCE as a server does whose storage holds it at a version its scheme lacks.
//!
//! ```text
//! cargo run -p mvproxy-demo --example standin -- NAME 1.31|1.34 127.0.0.1:PORT \
//!     [--group-of FILE GROUP]... [--undecodable GROUP_VERSION RESOURCE KIND]...
//! ```
//!
//! Prints `ready URL` on stdout once it listens; stops on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;

use mvproxy_demo::catalog::{self, Release};
use mvproxy_standin::StandIn;

const USAGE: &str = "usage: standin NAME 1.31|1.34 LISTEN_ADDR [--group-of FILE GROUP]... \
                     [--undecodable GROUP_VERSION RESOURCE KIND]...";

/// The options after the three positional arguments, applied in order.
fn with_options(mut standin: StandIn, mut options: &[String]) -> Result<StandIn, String> {
    loop {
        match options {
            [] => return Ok(standin),
            [flag, file, group, rest @ ..] if flag == "--group-of" => {
                let json = std::fs::read_to_string(file)
                    .map_err(|e| format!("--group-of: {file}: {e}"))?;
                standin = standin
                    .group_of(&json, group)
                    .map_err(|e| format!("--group-of: {file}: {e}"))?;
                options = rest;
            }
            [flag, gv, resource, kind, rest @ ..] if flag == "--undecodable" => {
                standin = standin.undecodable(gv, resource, kind);
                options = rest;
            }
            [other, ..] => return Err(format!("unknown or incomplete option {other:?}\n{USAGE}")),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, release, listen, options @ ..] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let release = match release.as_str() {
        "1.31" => Release::Old,
        "1.34" => Release::New,
        other => {
            eprintln!("standin: release: {other:?} is not 1.31 or 1.34");
            return ExitCode::from(2);
        }
    };
    let addr: SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("standin: listen address {listen:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let standin = match catalog::apis_json(release)
        .map_err(|e| e.to_string())
        .and_then(|json| StandIn::new(name, &json).map_err(|e| e.to_string()))
    {
        Ok(s) => release
            .deprecation_warnings()
            .iter()
            .fold(s.git_version(release.git_version()), |s, (gv, text)| {
                s.deprecation_warning(gv, text)
            }),
        Err(e) => {
            eprintln!("standin: catalog: {e}");
            return ExitCode::FAILURE;
        }
    };
    let standin = match with_options(standin, options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("standin: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("standin: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let running = match standin.start(addr).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("standin: listen on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("ready {}", running.url());
        mvproxy_core::app::shutdown_signal().await;
        running.shutdown().await;
        ExitCode::SUCCESS
    })
}
