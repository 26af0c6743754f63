//! The `mvproxy` command: parse, validate, start, run until SIGTERM or Ctrl-C.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mvproxy_core::config::{ConfigError, EXIT_CONFIG, LogFormat, ServeArgs};
use mvproxy_core::target::report::ReadinessArgs;
use mvproxy_demo::DemoArgs;
use mvproxy_telemetry::trace::Tracer;

mod text_pages;

/// jemalloc rather than glibc's `malloc`: 7-10 % less CPU per request on both client protocols,
/// and less memory per open watch (bench/PERF_NOTES.md, twenty-second and twenty-third rounds).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// `mvproxy --version`: the release and the commit it was built from (see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MVPROXY_GIT_COMMIT"),
    ")"
);

/// A version-aware proxy for Kubernetes API servers during mixed-version upgrades.
#[derive(Parser)]
#[command(name = "mvproxy", version = VERSION)]
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
    /// Report, from every proxy's admin endpoint, the clients the target release will break
    /// (exit 1 if any would, 2 if a proxy cannot be read).
    Readiness(Box<ReadinessArgs>),
    /// Validate a configuration (serve's flags, --config file and OTEL_* variables, read as
    /// serve reads them, files named checked) and exit: 0 if valid, 2 if not. Nothing starts.
    CheckConfig(Box<ServeArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = match (*args).load() {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            run(
                config.log_format == LogFormat::Json,
                None,
                |tracer| async move {
                    let sockets = match mvproxy_core::app::Sockets::bind(&config.listeners).await {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("mvproxy: {e}");
                            return ExitCode::FAILURE;
                        }
                    };
                    let running = match mvproxy_core::app::start(&config, sockets, tracer).await {
                        Ok(r) => r,
                        Err(e) => {
                            eprintln!("mvproxy: {e}");
                            return ExitCode::FAILURE;
                        }
                    };
                    mvproxy_core::app::shutdown_signal().await;
                    tracing::info!("shutting down: draining in-flight requests");
                    running.shutdown().await;
                    ExitCode::SUCCESS
                },
            )
        }
        // The demo's own output is the progress line and the report: proxy logs only for
        // errors unless RUST_LOG asks for more. Traces go out as in production.
        Command::Demo(args) => run(false, Some("error"), |tracer| {
            mvproxy_demo::run(*args, tracer)
        }),
        // Its output is the report: logs only for errors unless RUST_LOG asks for more.
        Command::Readiness(args) => run(false, Some("error"), |_| async move {
            ExitCode::from(mvproxy_core::target::report::run(*args).await)
        }),
        Command::CheckConfig(args) => {
            // The `OTEL_*` variables serve would read, so a manifest's environment is checked too.
            if let Err(e) =
                mvproxy_telemetry::Settings::from_lookup(|k| std::env::var(k).ok(), false)
            {
                eprintln!("mvproxy: {e}");
                return ExitCode::from(EXIT_CONFIG as u8);
            }
            let source = args
                .config
                .as_deref()
                .map_or_else(|| "flags".to_owned(), |p| p.display().to_string());
            match (*args).load() {
                Ok(c) => {
                    println!(
                        "{source}: valid (local {}, {} peer(s), listen {}, admin {})",
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
/// and runs the future `work` makes in it, given the tracer request spans start from.
fn run<F: Future<Output = ExitCode>>(
    json_logs: bool,
    default_log_filter: Option<&str>,
    work: impl FnOnce(Tracer) -> F,
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
    // Before the runtime starts its threads (text_pages::move_text's contract).
    let text = match text_pages::wanted(std::env::var(text_pages::VARIABLE).ok().as_deref()) {
        Ok(true) => text_pages::move_text(),
        Ok(false) => text_pages::Outcome::Skipped("turned off"),
        Err(e) => return config_error(&e),
    };
    let parallelism = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let flavor = match runtime_flavor(std::env::var(WORKER_THREADS).ok().as_deref(), parallelism) {
        Ok(f) => f,
        Err(e) => return config_error(&e),
    };
    let runtime = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Flavor::MultiThread(workers) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mvproxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let telemetry = match mvproxy_telemetry::init(&telemetry) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("mvproxy: {e}");
                return ExitCode::from(EXIT_CONFIG as u8);
            }
        };
        tracing::debug!(runtime = ?flavor, parallelism, code_on_huge_pages = ?text, "runtime started");
        let code = work(telemetry.tracer()).await;
        // Last, so spans of the drained requests are flushed. Flushing blocks until the export
        // thread has sent them (up to `OTEL_BSP_EXPORT_TIMEOUT`), so it runs on a blocking-pool
        // thread while this one keeps driving the runtime: on the current-thread runtime
        // nothing else would.
        if let Err(e) = tokio::task::spawn_blocking(move || drop(telemetry)).await {
            eprintln!("mvproxy: flushing spans: {e}");
        }
        code
    })
}

/// The variable tokio's multi-thread runtime reads for its number of workers (read here, so
/// that a bad value is a configuration error rather than tokio's panic).
const WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// The runtime `run` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// `Builder::new_current_thread`: every task on the thread that called `block_on`.
    CurrentThread,
    /// `Builder::new_multi_thread`, as `Runtime::new`: a work-stealing pool of this many workers.
    MultiThread(usize),
}

/// The current-thread runtime when one worker is all the multi-thread one would start
/// (`TOKIO_WORKER_THREADS=1`, or, unset, one CPU available to the process: an affinity mask or
/// a cgroup CPU quota of one, as `available_parallelism` reads them), else the multi-thread one,
/// sized as tokio's `Runtime::new` would size it.
///
/// Why: the multi-thread scheduler "executes futures on a thread pool, using a work-stealing
/// strategy", one worker per CPU by default, while the current-thread scheduler "provides a
/// single-threaded future executor. All tasks will be created and executed on the current
/// thread" (<https://docs.rs/tokio/1/tokio/runtime/index.html#runtime-configurations>). With one
/// worker there is no one to steal from, yet the pool keeps its machinery on the request path:
/// the atomics of its stealable run queues, the bookkeeping for waking parked workers when a task
/// is spawned or woken, and `block_on`'s own future on a second thread. On one CPU the
/// current-thread runtime runs the same tasks on one thread without it: 3-4 % less CPU per
/// proxied request in `bench/ab.py` (`bench/PERF_NOTES.md`, fifth round). Nothing in mvproxy calls
/// `block_in_place` (it panics on the current-thread runtime); `spawn_blocking` works on both.
fn runtime_flavor(worker_threads: Option<&str>, parallelism: usize) -> Result<Flavor, ConfigError> {
    let workers = match worker_threads {
        None => parallelism,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(ConfigError {
                    field: WORKER_THREADS.to_owned(),
                    why: format!("{v:?} is not a positive number of threads"),
                });
            }
        },
    };
    Ok(if workers == 1 {
        Flavor::CurrentThread
    } else {
        Flavor::MultiThread(workers)
    })
}

fn config_error(e: &ConfigError) -> ExitCode {
    eprintln!("mvproxy: {e}");
    ExitCode::from(EXIT_CONFIG as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_is_the_current_thread_runtime() {
        assert_eq!(runtime_flavor(None, 1), Ok(Flavor::CurrentThread));
        assert_eq!(runtime_flavor(None, 2), Ok(Flavor::MultiThread(2)));
        assert_eq!(
            runtime_flavor(Some("1"), 8),
            Ok(Flavor::CurrentThread),
            "the variable wins over the CPU count"
        );
        assert_eq!(
            runtime_flavor(Some("4"), 1),
            Ok(Flavor::MultiThread(4)),
            "asked for four workers on one CPU: four workers, as tokio would"
        );
    }

    #[test]
    fn a_bad_worker_count_names_the_variable() {
        for bad in ["0", "many", "-1", ""] {
            let e = runtime_flavor(Some(bad), 2).unwrap_err();
            assert_eq!(e.field, "TOKIO_WORKER_THREADS", "{bad:?}: {e}");
        }
    }
}
