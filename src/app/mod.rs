//! The top of the run, in hyperfine's shape: the command line parsed into typed options
//! (`cli`), then a plan (`config`, `plan`), then its execution (`stage`, `pool`,
//! `pipeline`, `report`). This module only orders those steps, sets up logging and
//! Ctrl-C, and turns the result into an exit code. Errors arrive typed and are printed
//! once, here.
//!
//! `batch` is `batch -c FILE`: the run, its dry run and `--preflight-only`;
//! `subcommands` the others that load a config or read runs (bundle, merge, report,
//! status).

mod batch;
mod subcommands;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use crate::cancel::Cancel;
use crate::config;
use crate::console::{console_line, console_text};
use crate::error::{Error, OutputError, UsageError};
use crate::node_text::escape_controls_by_line;
use crate::options::{Command, Verbosity};
use crate::report;
use crate::report::progress::ConsoleWriter;
use crate::report::summary::Summary;
use crate::stage::Meters;
use crate::{bundle, cli, gen_config};
use batch::run_batch;
use subcommands::{latest_run, run_bundle, run_merge, run_status, write_report};

/// Runs keadm-batch with `args` and returns the process exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
    // OpenSSL first, as rust-openssl initialises it: with OPENSSL_INIT_NO_ATEXIT. Whoever
    // calls OpenSSL first decides, and some of the openssl crate's calls do not initialise
    // it (the relay key's PKey::generate_ed25519, made on this thread before any SSH
    // session): OpenSSL then initialised itself and registered OPENSSL_cleanup with
    // atexit. At exit that frees every thread's OpenSSL state without a lock, racing any
    // thread still exiting (openssl/openssl#6214; a "double free" abort after a run). The
    // pools join their threads too (pool::joined); this keeps exit clear of OpenSSL
    // whatever thread is still around (a jump-host bridge left to time out, say).
    openssl::init();
    let command = match cli::parse(args) {
        Ok(command) => command,
        Err(err) => {
            // clap prints help and version to stdout and errors to stderr itself.
            let _ = err.print();
            return if err.use_stderr() { 2 } else { 0 };
        }
    };
    let verbosity = match &command {
        Command::Run(options) => options.verbosity,
        Command::Bundle(options) => options.verbosity,
        _ => Verbosity::Normal,
    };
    init_logging(verbosity);
    let result = run(command);
    // Every node is done: the shared jump-host connections are closed and their driver
    // threads joined, so none outlives the run on a socket.
    crate::transport::close_jump_connections();
    match result {
        Ok(()) => 0,
        Err(err) => {
            // One prefix per line, so a list of config problems reads as a list. An error
            // may quote a registry, a node or an API server: escaped here once, so none
            // can move the cursor or retitle the terminal, whichever error it reaches.
            for line in escape_controls_by_line(&err.to_string()).lines() {
                console_line!("keadm-batch: error: {line}");
            }
            err.exit_code()
        }
    }
}

fn init_logging(verbosity: Verbosity) {
    let level = match verbosity {
        Verbosity::Quiet => log::LevelFilter::Error,
        Verbosity::Normal => log::LevelFilter::Warn,
        Verbosity::Verbose => log::LevelFilter::Debug,
    };
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(log::LevelFilter::Warn)
        .filter_module("keadm_batch", level)
        .format(|buf, record| {
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug | log::Level::Trace => "debug",
            };
            // Records quote outside text too (a node's, a registry's): escaped as errors are.
            let text = escape_controls_by_line(&record.args().to_string());
            writeln!(buf, "keadm-batch: {level}: {text}")
        });
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    // Records print above the live status line instead of tearing it.
    builder.target(env_logger::Target::Pipe(Box::new(ConsoleWriter)));
    let _ = builder.try_init();
}

fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::GenConfig(options) => Ok(gen_config::run(&options)?),
        // Both are made in memory first: clap_complete panics on a failed write.
        Command::Completions(shell) => {
            let mut script = Vec::new();
            cli::write_completions(&shell, &mut script).map_err(UsageError::from)?;
            print(script)
        }
        Command::Man => {
            let mut page = Vec::new();
            cli::write_man_page(&mut page).map_err(OutputError::Stdout)?;
            print(page)
        }
        Command::Run(options) => run_batch(&options),
        Command::Merge(options) => run_merge(&options),
        Command::Report { run_dir } => write_report(&run_dir.unwrap_or_else(latest_run)),
        Command::Status(options) => run_status(&options),
        Command::Bundle(options) => run_bundle(&options),
        // What was checked is the result, so it goes to stdout, as a dry run's plan does.
        Command::VerifyKit(options) => {
            print(bundle::verify(&options.path, options.expect_sha512.as_deref())?.summary())
        }
        Command::ExtractKit(options) => {
            for note in &options.deprecations {
                log::warn!("{note}");
            }
            let checked = bundle::extract(
                &options.archive,
                &options.into,
                options.expect_sha512.as_deref(),
            )?;
            console_text!("{}", checked.summary());
            Ok(())
        }
        Command::PackCopy {
            format,
            binary,
            sha256,
        } => Ok(crate::stage::make_copy_here(format, &binary, &sha256)?),
    }
}
/// Loads and validates the config with `env`, printing its warnings.
fn load_config(
    path: &std::path::Path,
    env: &dyn config::Environment,
) -> Result<config::Loaded, Error> {
    let loaded = config::load(path, env).inspect_err(|err| {
        // Warnings often explain the errors (`nodes` nested under `keadm`).
        for warning in err.warnings() {
            log::warn!("{}", warning.render(path));
        }
    })?;
    for warning in &loaded.warnings {
        log::warn!("{}", warning.render(path));
    }
    Ok(loaded)
}
/// Writes `text` on stdout; see [`report::stdout`] for a reader that stops early.
fn print(text: impl AsRef<[u8]>) -> Result<(), Error> {
    Ok(report::stdout::print(text).map_err(OutputError::Stdout)?)
}

/// A summary as `--output json` prints it: pretty, with a final newline.
fn json(summary: &Summary) -> String {
    let mut text = serde_json::to_string_pretty(summary).unwrap_or_default();
    text.push('\n');
    text
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Where downloads and image pulls say how far they are: the console's
/// shared bars on a terminal (below the live status line), plain lines every few seconds
/// elsewhere, nothing when the operator asked for quiet.
fn meters(verbosity: Verbosity) -> Meters {
    if verbosity == Verbosity::Quiet {
        Meters::Off
    } else if std::io::stderr().is_terminal() {
        Meters::Bars(report::progress::console())
    } else {
        Meters::lines()
    }
}
/// The first Ctrl-C or SIGTERM stops starting nodes; the second cancels running ones.
fn install_signal_handler(cancel: &Cancel) {
    let cancel = cancel.clone();
    let result = ctrlc::set_handler(move || {
        let level = cancel.request();
        if level == 1 {
            console_line!(
                "\nkeadm-batch: stopping: no new node will start; running nodes finish or reach their deadline. Press Ctrl-C again to cancel them."
            );
        } else if level == 2 {
            console_line!("\nkeadm-batch: cancelling running nodes; results are still written.");
        }
    });
    if let Err(err) = result {
        log::warn!(
            "Could not install the Ctrl-C handler: {err}. Ctrl-C will end keadm-batch at once, without writing the results."
        );
    }
}
