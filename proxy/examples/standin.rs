//! Runs one stand-in API server (see `mvproxy::standin`) until SIGTERM or Ctrl-C, for load
//! tests that need real discovery, lists and watches behind mvproxy (`bench/watches.py`).
//!
//! `cargo run --release -p mvproxy --example standin -- NAME APIS_JSON ADDR`

use std::net::SocketAddr;
use std::process::ExitCode;

use mvproxy::standin::StandIn;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, apis, addr] = args.as_slice() else {
        eprintln!("usage: standin NAME APIS_JSON ADDR");
        return ExitCode::from(2);
    };
    let apis = match std::fs::read_to_string(apis) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("standin: {apis}: {e}");
            return ExitCode::from(2);
        }
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("standin: {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    let standin = match StandIn::new(name, &apis) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("standin: the /apis document: {e}");
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
                eprintln!("standin: bind {addr}: {e}");
                return ExitCode::FAILURE;
            }
        };
        mvproxy::app::shutdown_signal().await;
        running.shutdown().await;
        ExitCode::SUCCESS
    })
}
