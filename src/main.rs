#![forbid(unsafe_code)]

use clap::Parser;
use finalizer_guard::cli::{self, Cli, Command, LogFormat};
use finalizer_guard::output::{chain, escape};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format());
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            match runtime.block_on(cli::serve(*args)) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("error: {}", escape(&e.to_string()));
                    1
                }
            }
        }
        Command::Certs(args) => report(cli::certs(args).map(|()| 0)),
        Command::Check(args) => report(cli::check(args)),
        Command::Test(args) => report(cli::test(args)),
        Command::Policy(cli::PolicyCommand::Validate(args)) => report(cli::validate(args)),
        Command::Policy(cli::PolicyCommand::Suggest(args)) => report(cli::suggest(args)),
        Command::Policy(cli::PolicyCommand::Export(args)) => report(cli::export(args)),
        Command::Policy(cli::PolicyCommand::Presets(args)) => {
            let cli::PresetsArgs { output, sources } = args;
            report(finalizer_guard::offline::presets::run(output, sources))
        }
        Command::Doctor(args) => match args.cluster() {
            Ok(args) => cluster(finalizer_guard::cluster::doctor::run(args)),
            Err(args) => report(cli::doctor(args)),
        },
        Command::Unstick(args) => {
            cluster(finalizer_guard::cluster::unstick::run(args.into_config()))
        }
        Command::Approve(args) => {
            cluster(finalizer_guard::cluster::approve::run(args.into_config()))
        }
        Command::Version(args) => report(cli::version(args)),
        Command::Watch(args) => {
            init_logging(args.log_format);
            long_running(finalizer_guard::cluster::watch::run(args.into_config()))
        }
    };
    std::process::exit(code);
}

fn report(result: finalizer_guard::error::Result<i32>) -> i32 {
    result.unwrap_or_else(|e| {
        // A path, a name or a value read may hold what acts on a terminal.
        eprintln!("error: {}", escape(&chain(&e)));
        2
    })
}

/// Runs a command that talks to a cluster: exit 2 on usage or connection errors.
fn cluster(
    command: impl std::future::Future<Output = Result<i32, finalizer_guard::cluster::ClusterError>>,
) -> i32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(command).unwrap_or_else(|e| {
        // What the API server said may quote a name: escaped, as every line is.
        eprintln!("error: {}", escape(&chain(&e)));
        2
    })
}

/// `watch`: a long-running command that talks to a cluster, on every core.
fn long_running(
    command: impl std::future::Future<Output = Result<i32, finalizer_guard::cluster::ClusterError>>,
) -> i32 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(command).unwrap_or_else(|e| {
        tracing::error!("{e}");
        eprintln!("error: {}", escape(&e.to_string()));
        2
    })
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
