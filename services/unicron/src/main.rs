//! `unicron`: every service and operator command behind one CLI.

mod acls;
mod agent;
mod classify;
mod cli;
mod config;
#[cfg(feature = "simulator")]
mod evaluate;
mod explain;
mod goodput;
mod history;
mod keys;
mod kube_watch;
mod logging;
mod plan;
mod replay;
#[cfg(feature = "simulator")]
mod service_set;
mod services;
mod slurm;
// `up` alone stops the page before its broker.
#[cfg_attr(not(feature = "simulator"), allow(dead_code))]
mod status;
mod topics;
#[cfg(feature = "simulator")]
mod up;
#[cfg(feature = "simulator")]
mod up_progress;
mod usage;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // `up` keeps its terminal for progress; its logs go to a file unless -v.
    #[cfg(feature = "simulator")]
    let logs_to_file = matches!(&cli.command, cli::Command::Up(args) if !args.verbose);
    #[cfg(not(feature = "simulator"))]
    let logs_to_file = false;
    logging::init(logs_to_file);
    let config = match config::Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(cli::run(cli.command, config, cli.config.is_some()));
    // Blocking reads still running must not keep a finished command alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            if e.downcast_ref::<usage::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The error and its causes on one line, without the causes a message
/// already quotes (library errors often embed their source's text, and
/// `{:#}` would print it again).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod one_line_tests {
    #[test]
    fn causes_already_quoted_are_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("kafka: {0}")]
        struct Outer(#[source] std::io::Error);
        let io = std::io::Error::other("broker transport failure");
        let e = anyhow::Error::new(Outer(io)).context("creating topics on 127.0.0.1:9092");
        assert_eq!(
            super::one_line(&e),
            "creating topics on 127.0.0.1:9092: kafka: broker transport failure"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::one_line(&plain), "outer: inner");
    }
}
