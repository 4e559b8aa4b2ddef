//! The top of the run: parse the command line, set up logging, dispatch, and turn the
//! outcome into an exit code. Errors are printed once, here.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use std::io::IsTerminal;

use crate::arch::Arch;
use crate::config::{self, PackageMode, validate::ProcessEnvironment};
use crate::error::Error;
use crate::options::{Command, OutputFormat, RunOptions, Verbosity};
use crate::pool::{self, Cancel};
use crate::report::log::ResultLog;
use crate::report::summary::{SUMMARY_VERSION, StagedPackage, Summary, Totals};
use crate::report::{self, Recorder, RunDir, recap};
use crate::stage::{PackageSource, StageSettings, Stager};
use crate::{cli, dry_run, gen_config, outcome, pipeline, plan};

/// Runs keadm-batch with `args` and returns the process exit code.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> i32 {
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
        Command::GenConfig(_) => Verbosity::Normal,
    };
    init_logging(verbosity);
    match run(command) {
        Ok(()) => 0,
        Err(err) => {
            // One prefix per line, so a list of config problems reads as a list.
            let mut stderr = std::io::stderr().lock();
            for line in err.to_string().lines() {
                let _ = writeln!(stderr, "keadm-batch: error: {line}");
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
            writeln!(buf, "keadm-batch: {level}: {}", record.args())
        });
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    let _ = builder.try_init();
}

fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::GenConfig(options) => gen_config::run(&options),
        Command::Run(options) => run_batch(&options),
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn run_batch(options: &RunOptions) -> Result<(), Error> {
    let loaded = config::load(&options.config, &ProcessEnvironment).inspect_err(|err| {
        // Warnings often explain the errors (`nodes` nested under `keadm`).
        for warning in err.warnings() {
            log::warn!("{}", warning.render(&options.config));
        }
    })?;
    for warning in &loaded.warnings {
        log::warn!("{}", warning.render(&options.config));
    }
    let plan = plan::build(
        &loaded.config,
        options,
        home(),
        PathBuf::from(plan::REMOTE_BASE_DIR),
    )
    .map_err(|e| Error::Usage(e.0))?;
    if options.dry_run {
        print!("{}", dry_run::render(&plan));
        return Ok(());
    }
    Err(Error::Usage(
        "running nodes is not built yet; use --dry-run".into(),
    ))
}
