//! The top of the run: parse the command line, set up logging, dispatch, and turn the
//! outcome into an exit code. Errors are printed once, here.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use std::collections::HashSet;
use std::io::IsTerminal;

use crate::arch::Arch;
use crate::config::{self, PackageMode, validate::ProcessEnvironment};
use crate::error::Error;
use crate::options::{Command, MergeOptions, OutputFormat, RunOptions, Verbosity};
use crate::pool::{self, Cancel};
use crate::report::log::ResultLog;
use crate::report::summary::{SUMMARY_VERSION, StagedPackage, Summary, Totals};
use crate::report::{self, Recorder, RunDir, recap};
use crate::stage::{PackageSource, StageSettings, Stager};
use crate::{cli, dry_run, gen_config, outcome, pipeline, plan, rerun};

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
        Command::GenConfig(_) | Command::Merge(_) => Verbosity::Normal,
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
        Command::Merge(options) => run_merge(&options),
    }
}

/// `batch merge DIR...`: the shards' results as one. Exits like a run would: 1 when some
/// node did not succeed.
fn run_merge(options: &MergeOptions) -> Result<(), Error> {
    let merged = report::merge::merge(&options.dirs).map_err(|e| Error::Usage(e.to_string()))?;
    if let Some(into) = &options.into {
        std::fs::create_dir_all(into)
            .and_then(|()| merged.summary.write(&into.join(report::run_dir::SUMMARY)))
            .and_then(|()| std::fs::write(into.join(report::log::LOG_FILE), merged.log_text()))
            .map_err(|e| Error::Output(format!("could not write to {}: {e}", into.display())))?;
    }
    match options.output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&merged.summary).unwrap_or_default()
        ),
        OutputFormat::Text => print!("{}", report::merge::render(&merged)),
    }
    let totals = &merged.summary.totals;
    if totals.not_succeeded() > 0 {
        return Err(Error::NodesFailed {
            failed: totals.not_succeeded(),
            total: totals.selected,
            run_dir: merged.summary.merged_from.join(", "),
        });
    }
    Ok(())
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
    let retry = if options.retry_failed {
        match retry_selection(&loaded.config, options)? {
            Some(retry) => Some(retry),
            None => return Ok(()),
        }
    } else {
        None
    };
    let plan = plan::build(
        &loaded.config,
        options,
        home(),
        PathBuf::from(plan::REMOTE_BASE_DIR),
        retry.as_ref().map(|(names, _)| names),
    )
    .map_err(|e| Error::Usage(e.0))?;
    if options.dry_run {
        print!("{}", dry_run::render(&plan));
        return Ok(());
    }
    execute(
        plan,
        &loaded.config,
        options,
        retry.map(|(_, previous)| previous),
    )
}

/// The nodes `--retry-failed` should process, and the run they come from; `None` when
/// there is nothing to retry (which is a success).
fn retry_selection(
    config: &config::Config,
    options: &RunOptions,
) -> Result<Option<(HashSet<String>, PathBuf)>, Error> {
    let cwd = std::env::current_dir()
        .map_err(|e| Error::Output(format!("the current directory is unusable: {e}")))?;
    let Some(latest) = rerun::latest_run(&cwd) else {
        return Err(Error::Usage(format!(
            "--retry-failed found no earlier run in {}; run without it first",
            cwd.join(report::run_dir::RUNS_DIR).display()
        )));
    };
    let known = rerun::last_outcomes(&latest).map_err(Error::Output)?;
    let names: Vec<&str> = config.nodes.iter().map(|n| n.name.as_str()).collect();
    let selection = rerun::select(&names, &known, options.class.as_deref());
    if !selection.gone.is_empty() {
        log::warn!(
            "{} node(s) of the earlier run are no longer in the config and are ignored: {}",
            selection.gone.len(),
            selection.gone.join(", ")
        );
    }
    if selection.names.is_empty() {
        eprintln!(
            "Nothing to retry: every node of the config {} in {}.",
            match &options.class {
                Some(class) => format!("succeeded or failed with a class other than {class}"),
                None => "succeeded".to_string(),
            },
            latest.display()
        );
        return Ok(None);
    }
    eprintln!(
        "Retrying {} node(s) that did not succeed in {}.",
        selection.names.len(),
        latest.display()
    );
    Ok(Some((selection.names, latest)))
}

/// Stages packages, runs every selected node, and writes the results.
fn execute(
    plan: plan::Plan,
    config: &config::Config,
    options: &RunOptions,
    retry_of: Option<PathBuf>,
) -> Result<(), Error> {
    let wall = std::time::Instant::now();
    let started_at = outcome::now();
    let quiet = options.verbosity == Verbosity::Quiet;
    // Staging comes first: if it fails, no node and no previous result file is touched.
    let stager = match &plan.staging {
        Some(staging) => Some(stage_packages(staging, options)?),
        None => None,
    };
    let cwd = std::env::current_dir()
        .map_err(|e| Error::Output(format!("the current directory is unusable: {e}")))?;
    let run_dir = RunDir::create(options.run_dir.as_deref(), &cwd).map_err(|e| {
        Error::Output(format!(
            "could not create the run directory under {}: {e}",
            cwd.display()
        ))
    })?;
    if let Some(previous) = &retry_of {
        let _ = std::fs::write(
            run_dir.path.join(rerun::RETRY_OF),
            previous.display().to_string(),
        );
    }
    let log_path = cwd.join(report::log::LOG_FILE);
    let log = ResultLog::create(&log_path)
        .map_err(|e| Error::Output(format!("could not create {}: {e}", log_path.display())))?;
    let journal = run_dir.journal().map_err(|e| {
        Error::Output(format!(
            "could not create the journal in {}: {e}",
            run_dir.path.display()
        ))
    })?;
    let recorder = Recorder::new(log, journal, plan.nodes.len(), quiet);

    let cancel = Cancel::new();
    install_signal_handler(&cancel);
    if !quiet {
        eprintln!(
            "Processing {} node{}{} ({} at once); transcripts in {}",
            plan.nodes.len(),
            if plan.nodes.len() == 1 { "" } else { "s" },
            plan.shard
                .map(|s| format!(" of shard {}", dry_run::shard_line(s)))
                .unwrap_or_default(),
            plan.max_run_num.min(plan.nodes.len().max(1)),
            run_dir.path.display()
        );
    }
    let ctx = pipeline::Context {
        stager: stager.as_ref(),
        known_hosts: plan.known_hosts.clone(),
        run_dir: &run_dir,
        cancel: &cancel,
        verify_remote: options.verify_remote,
        run_token: run_dir.id.clone(),
        retry_base: std::time::Duration::from_secs(1),
    };
    let policy = pool::Policy {
        max_run_num: plan.max_run_num,
        max_fail: options.max_fail,
        canary: options.canary,
    };
    pool::run_all(&plan.nodes, policy, &cancel, &recorder, |node| {
        pipeline::process(node, &ctx)
    });

    let outcomes = recorder.outcomes();
    let totals = Totals::of(&outcomes);
    let summary = Summary {
        version: SUMMARY_VERSION,
        tool: format!("keadm-batch {}", env!("CARGO_PKG_VERSION")),
        run_id: run_dir.id.clone(),
        config: config.path.display().to_string(),
        started_at,
        finished_at: outcome::now(),
        interrupted: cancel.stopping(),
        totals: totals.clone(),
        packages: stager.as_ref().map(staged_packages).unwrap_or_default(),
        nodes: outcomes.clone(),
        merged_from: Vec::new(),
    };
    if let Err(e) = summary.write(&run_dir.summary_path()) {
        log::error!("could not write {}: {e}", run_dir.summary_path().display());
    }
    if options.output == OutputFormat::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
    }
    if !quiet {
        eprint!(
            "{}",
            recap::render(
                &outcomes,
                &run_dir.path,
                &log_path,
                wall.elapsed().as_secs_f64()
            )
        );
    }
    if cancel.stopping() {
        return Err(Error::Interrupted(format!(
            "{} of {} nodes finished; the rest are marked in {}",
            totals.selected - totals.interrupted,
            totals.selected,
            log_path.display()
        )));
    }
    if totals.not_succeeded() > 0 {
        return Err(Error::NodesFailed {
            failed: totals.not_succeeded(),
            total: totals.selected,
            run_dir: run_dir.path.display().to_string(),
        });
    }
    Ok(())
}

fn stage_packages(staging: &plan::StagingPlan, options: &RunOptions) -> Result<Stager, Error> {
    let source = match &staging.mode {
        PackageMode::Download { url } => PackageSource::Download { url: url.clone() },
        PackageMode::Offline { dir } => PackageSource::Offline { dir: dir.clone() },
    };
    let mut settings = StageSettings::new(staging.version.clone(), source);
    settings.base_dir = staging.base_dir.clone();
    settings.arch_group = staging
        .arch_group
        .iter()
        .filter_map(|a| Arch::from_name(a))
        .collect();
    settings.require_checksum = options.require_checksum;
    settings.progress = std::io::stderr().is_terminal() && options.verbosity != Verbosity::Quiet;
    let stager = Stager::open(settings).map_err(|e| Error::Stage(e.to_string()))?;
    stager
        .stage_all()
        .map_err(|e| Error::Stage(e.to_string()))?;
    Ok(stager)
}

fn staged_packages(stager: &Stager) -> Vec<StagedPackage> {
    Arch::ALL
        .iter()
        .filter_map(|arch| stager.staged(*arch))
        .map(|b| StagedPackage {
            arch: b.arch.as_str().to_string(),
            version: stager.settings().version.clone(),
            tarball_sha512: b.tarball_sha512.clone(),
            verified: b.verified,
        })
        .collect()
}

/// The first Ctrl-C or SIGTERM stops starting nodes; the second cancels running ones.
fn install_signal_handler(cancel: &Cancel) {
    let cancel = cancel.clone();
    let result = ctrlc::set_handler(move || {
        let level = cancel.request();
        if level == 1 {
            eprintln!(
                "\nkeadm-batch: stopping: no new node will start; running nodes finish or reach their deadline. Press Ctrl-C again to cancel them."
            );
        } else if level == 2 {
            eprintln!("\nkeadm-batch: cancelling running nodes; results are still written.");
        }
    });
    if let Err(err) = result {
        log::warn!("could not install the Ctrl-C handler: {err}");
    }
}
