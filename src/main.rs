#![forbid(unsafe_code)]

use std::future::Future;

use clap::Parser;
use finalizer_guard::cli::{
    Cli, Command, ExportArgs, LogFormat, PolicyCommand, PresetsArgs, TestArgs,
};
use finalizer_guard::error::{Error, Result};
use finalizer_guard::output::{chain, escape};
use finalizer_guard::{cluster, offline, server, version};

/// The static (musl) build allocates through mimalloc: musl's allocator takes
/// one lock for every thread (docs/performance.md, "As shipped").
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let Cli { command } = Cli::parse();
    std::process::exit(run(command));
}

/// Runs one command and says how it ended: its exit code, or its error
/// printed once and the error's exit code. `serve` and `watch` log, and log
/// their error too.
fn run(command: Command) -> i32 {
    let logs = command.log_format();
    if let Some(format) = logs {
        init_logging(format);
    }
    dispatch(command).unwrap_or_else(|e| {
        if logs.is_some() {
            tracing::error!("{e}");
            say_error(&escape(&e.to_string()));
        } else {
            // A path, a name or a value read, or what the API server said,
            // may hold what acts on a terminal: escaped, as every line is.
            say_error(&escape(&chain(&e)));
        }
        e.exit_code()
    })
}

/// `error: MESSAGE` on standard error, if it can be written: a standard
/// error nobody reads any more (`eprintln!` would panic) leaves the exit
/// code to say it.
fn say_error(message: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "error: {message}");
}

/// Each command to its body, on the runtime it needs: none for the offline
/// commands, one thread for those that talk to a cluster, every core for
/// the long-running `serve` and `watch`.
fn dispatch(command: Command) -> Result<i32> {
    match command {
        Command::Serve(args) => every_core(async {
            server::run(args.into_config())
                .await
                .map(|()| 0)
                .map_err(Error::serve)
        }),
        Command::Certs(args) => offline::certs::run(args.into_config()),
        Command::Check(args) => offline::check::run(args.into_config()),
        Command::Test(TestArgs {
            policy,
            output,
            max_body,
            paths,
        }) => offline::suite::test(policy.path(), output.format, max_body.bytes, &paths),
        Command::Policy(PolicyCommand::Validate(args)) => {
            offline::validate::run(args.into_config())
        }
        Command::Policy(PolicyCommand::Suggest(args)) => {
            finalizer_guard::offline::suggest::command::run(args.into_config())
        }
        Command::Policy(PolicyCommand::Export(ExportArgs {
            vap: _,
            static_dir,
            static_flags,
            file,
        })) => offline::export::run(static_dir, &static_flags, &file),
        Command::Policy(PolicyCommand::Presets(PresetsArgs { output, sources })) => {
            offline::presets::run(output, sources)
        }
        Command::Doctor(args) => match args.cluster() {
            Ok(args) => one_thread(cluster::doctor::run(args)),
            Err(args) => {
                let format = args.output.format;
                offline::doctor::run(args.offline()?.as_deref(), format)
            }
        },
        Command::Unstick(args) => one_thread(cluster::unstick::run(args.into_config())),
        Command::Approve(args) => one_thread(cluster::approve::run(args.into_config())),
        Command::Version(args) => version::print(args.output.format)
            .map(|()| 0)
            .map_err(Error::stdout),
        Command::Watch(args) => every_core(cluster::watch::run(args.into_config())),
    }
}

/// A command that talks to a cluster: a runtime on this thread.
fn one_thread<E: Into<Error>>(command: impl Future<Output = Result<i32, E>>) -> Result<i32> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(command)
        .map_err(Into::into)
}

/// A long-running command (`serve`, `watch`): a runtime on every core.
fn every_core<E: Into<Error>>(command: impl Future<Output = Result<i32, E>>) -> Result<i32> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(command)
        .map_err(Into::into)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // kube-runtime's watcher warns of a 403 itself, in a Debug dump of
        // the Status; `watch` says it once, in its own words, and leaves the
        // type alone (cluster/watch/discovery.rs).
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime::watcher=error"));
    // Colour only on a terminal, and never under NO_COLOR (no-color.org):
    // escapes in a log file or a pipe are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A log line that cannot be written is lost, never a panic: the
    // subscriber's own report of the failure (`eprintln!`) would panic on
    // a standard error nobody reads any more (a log shipper that exited),
    // in whichever request or shutdown logged.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
