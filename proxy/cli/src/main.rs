//! The `mvproxy` command: parse, validate, start, run until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mvproxy::config::{EXIT_CONFIG, LogFormat, ServeArgs};
use mvproxy_demo::DemoArgs;

/// A version-aware proxy for Kubernetes API servers during mixed-version upgrades.
#[derive(Parser)]
#[command(name = "mvproxy", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Proxy one API server, routing what only a peer serves to that peer.
    Serve(Box<ServeArgs>),
    /// Rehearse a rolling upgrade of a 3-node control plane through mvproxy, on loopback, and
    /// report what clients met (exit 0 if the report reconciles with mvproxy's metrics).
    Demo(Box<DemoArgs>),
    /// Validate a configuration file and exit (0 if valid, 2 if not).
    CheckConfig {
        /// The YAML file to check.
        #[arg(long)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = match (*args).load() {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            run(config.log_format == LogFormat::Json, None, async move {
                let sockets = match mvproxy::app::Sockets::bind(&config.listeners).await {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("mvproxy: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let running = match mvproxy::app::start(&config, sockets).await {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("mvproxy: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                mvproxy::app::shutdown_signal().await;
                tracing::info!("shutting down: draining in-flight requests");
                running.shutdown().await;
                ExitCode::SUCCESS
            })
        }
        // The demo's own output is the progress line and the report: proxy logs only for
        // errors unless RUST_LOG asks for more. Traces go out as in production.
        Command::Demo(args) => run(false, Some("error"), mvproxy_demo::run(*args)),
        Command::CheckConfig { config } => {
            let args = ServeArgs {
                config: Some(config.clone()),
                ..ServeArgs::default()
            };
            match args.load() {
                Ok(c) => {
                    println!(
                        "{}: valid (local {}, {} peer(s), listen {}, admin {})",
                        config.display(),
                        c.local,
                        c.static_peers().len(),
                        c.listeners.proxy,
                        c.listeners.admin
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => config_error(&e),
            }
        }
    }
}

/// Sets up telemetry from `OTEL_*` and `RUST_LOG` (a bad value exits 2) and a runtime, once,
/// and runs `work` in it.
fn run(
    json_logs: bool,
    default_log_filter: Option<&str>,
    work: impl Future<Output = ExitCode>,
) -> ExitCode {
    let mut telemetry =
        match mvproxy_telemetry::Settings::from_lookup(|k| std::env::var(k).ok(), json_logs) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("mvproxy: {e}");
                return ExitCode::from(EXIT_CONFIG as u8);
            }
        };
    if let Some(filter) = default_log_filter {
        telemetry.default_log_filter = filter.to_owned();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mvproxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        // Inside the runtime: the gRPC exporter needs it. Dropped last, so spans of the
        // drained requests are flushed.
        let _telemetry = match mvproxy_telemetry::init(&telemetry) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("mvproxy: {e}");
                return ExitCode::from(EXIT_CONFIG as u8);
            }
        };
        work.await
    })
}

fn config_error(e: &mvproxy::config::ConfigError) -> ExitCode {
    eprintln!("mvproxy: {e}");
    ExitCode::from(EXIT_CONFIG as u8)
}
