//! The top of the run: parse the command line, set up logging, dispatch, and turn the
//! outcome into an exit code. Errors are printed once, here.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::collections::HashSet;
use std::io::IsTerminal;

use crate::arch::Arch;
use crate::cancel::Cancel;
use crate::config::{self, PackageMode, validate::ProcessEnvironment};
use crate::error::Error;
use crate::kubeedge::before_run;
use crate::options::{Command, MergeOptions, OutputFormat, RunOptions, Verbosity};
use crate::pool;
use crate::report::log::ResultLog;
use crate::report::progress::{ConsoleWriter, Progress};
use crate::report::summary::{SUMMARY_VERSION, StagedPackage, Summary, Totals};
use crate::report::{self, Recorder, RunDir, recap};
use crate::stage::{PackageSource, Pin, StageSettings, Stager};
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
        _ => Verbosity::Normal,
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
    // Records print above the live status line instead of tearing it.
    builder.target(env_logger::Target::Pipe(Box::new(ConsoleWriter)));
    let _ = builder.try_init();
}

fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::GenConfig(options) => gen_config::run(&options),
        Command::Completions(shell) => {
            cli::write_completions(&shell, &mut std::io::stdout()).map_err(Error::Usage)
        }
        Command::Man => cli::write_man_page(&mut std::io::stdout())
            .map_err(|e| Error::Output(format!("could not write the manual page: {e}"))),
        Command::Run(options) => run_batch(&options),
        Command::Merge(options) => run_merge(&options),
    }
}

/// `batch merge DIR...`: the shards' results as one. Exits like a run would: 1 when some
/// node did not succeed.
fn run_merge(options: &MergeOptions) -> Result<(), Error> {
    let merged = report::merge::merge(&options.dirs).map_err(|e| Error::Usage(e.to_string()))?;
    if let Some(into) = &options.into {
        report::files::create_dir_all(into)
            .and_then(|()| merged.summary.write(&into.join(report::run_dir::SUMMARY)))
            .and_then(|()| {
                report::files::write(
                    &into.join(report::log::LOG_FILE),
                    merged.log_text().as_bytes(),
                )
            })
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
    kubeedge_checks(&plan, options)?;
    if options.preflight_only {
        return preflight_only(&plan);
    }
    // Staging rules that need no download are checked here, so a dry run reports them too.
    if let Some(staging) = &plan.staging {
        stage_settings(staging, &plan.config_path, options)
            .check_plain_http()
            .map_err(|e| Error::Usage(format!("{e} No node was touched.")))?;
    }
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

/// Connects to every selected node, runs the read-only probes, prints a table of findings
/// on stdout. Exit 1 when any node has a finding or could not be probed.
fn preflight_only(plan: &plan::Plan) -> Result<(), Error> {
    use rayon::prelude::*;
    let cancel = Cancel::new();
    install_signal_handler(&cancel);
    let progress = Progress::new(plan.nodes.len(), plan.total_in_config, false);
    let scratch = RunDir::scratch().map_err(|e| {
        Error::Output(format!(
            "could not create a temporary directory in {}: {e}",
            std::env::temp_dir().display()
        ))
    })?;
    let run_dir = &scratch.run;
    let ctx = pipeline::Context {
        stager: None,
        known_hosts: plan.known_hosts.clone(),
        run_dir,
        cancel: &cancel,
        verify_remote: false,
        run_token: run_dir.id.clone(),
        retry_base: std::time::Duration::from_secs(1),
        progress: &progress,
        // Findings are reported, never acted on, in this mode.
        preflight: crate::options::PreflightMode::Warn,
        binary_size_hint: 0,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(plan.max_run_num.clamp(1, plan.nodes.len().max(1)))
        .build()
        .map_err(|e| Error::Output(e.to_string()))?;
    let results: Vec<_> = pool.install(|| {
        plan.nodes
            .par_iter()
            .map(|node| {
                if node.keadm_args.is_join() {
                    pipeline::preflight_only(node, &ctx)
                } else {
                    Ok(Vec::new())
                }
            })
            .collect()
    });
    drop(scratch);
    let mut table = String::new();
    let width = plan
        .nodes
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    table.push_str(&format!(
        "{:<width$}  {:<22}  FINDINGS\n",
        "NODE", "ADDRESS"
    ));
    let mut bad = 0;
    for (node, result) in plan.nodes.iter().zip(&results) {
        let address = node.address();
        match result {
            Ok(findings) if findings.is_empty() => {
                let note = if node.keadm_args.is_join() {
                    "none"
                } else {
                    "none (not a join)"
                };
                table.push_str(&format!("{:<width$}  {:<22}  {note}\n", node.name, address));
            }
            Ok(findings) => {
                bad += 1;
                for (i, f) in findings.iter().enumerate() {
                    let id: crate::kubeedge::FindingId = match crate::kubeedge::FindingId::ALL
                        .iter()
                        .find(|x| x.as_str() == f.id)
                    {
                        Some(id) => *id,
                        None => continue,
                    };
                    let finding = crate::kubeedge::Finding {
                        id,
                        detail: f.detail.clone(),
                    };
                    let (n, a) = if i == 0 {
                        (node.name.as_str(), address.as_str())
                    } else {
                        ("", "")
                    };
                    table.push_str(&format!("{n:<width$}  {a:<22}  {finding}\n"));
                    table.push_str(&format!(
                        "{:<width$}  {:<22}    -> {}\n",
                        "",
                        "",
                        finding.suggested_action()
                    ));
                }
            }
            Err(error) => {
                bad += 1;
                table.push_str(&format!(
                    "{:<width$}  {:<22}  not probed: {error}\n",
                    node.name, address
                ));
            }
        }
    }
    print!("{table}");
    if cancel.stopping() {
        return Err(Error::Interrupted("the probes were stopped".into()));
    }
    if bad > 0 {
        return Err(Error::Findings {
            nodes: bad,
            total: plan.nodes.len(),
        });
    }
    Ok(())
}

/// The join batch as a whole, before any node is touched: token lifetime, CA hash, and
/// node names cloudcore already has. Fatal problems are a config error (exit 2).
fn kubeedge_checks(plan: &plan::Plan, options: &RunOptions) -> Result<(), Error> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let per_node = rerun::latest_run(&cwd)
        .and_then(|run| rerun::measured_per_node_secs(&run))
        .unwrap_or(before_run::DEFAULT_PER_NODE_SECS);
    let now = outcome::now() as u64;
    let problems = before_run::check(plan, options.preflight, now, per_node, !options.dry_run);
    let mut fatal = Vec::new();
    for problem in problems {
        if problem.fatal {
            fatal.push(problem.message);
        } else {
            log::warn!("{}", problem.message);
        }
    }
    if fatal.is_empty() {
        Ok(())
    } else {
        fatal.push("No node was touched.".into());
        Err(Error::Usage(fatal.join("\n")))
    }
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
    // `token-invalid` and `token_invalid` both name a class; journals hold the latter.
    let class = match &options.class {
        Some(class) => Some(
            class
                .parse::<crate::kubeedge::classify::FailureClass>()
                .map_err(|e| Error::Usage(e.to_string()))?
                .as_str(),
        ),
        None => None,
    };
    let known = rerun::last_outcomes(&latest).map_err(Error::Output)?;
    let names: Vec<&str> = config.nodes.iter().map(|n| n.name.as_str()).collect();
    let selection = rerun::select(&names, &known, class);
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
        Some(staging) => Some(stage_packages(stage_settings(
            staging,
            &plan.config_path,
            options,
        ))?),
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
        let _ = report::files::write(
            &run_dir.path.join(rerun::RETRY_OF),
            previous.display().to_string().as_bytes(),
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
    let live = std::io::stderr().is_terminal() && !quiet;
    let progress = Progress::new(plan.nodes.len(), plan.total_in_config, live);
    let recorder = Recorder::new(log, journal, plan.nodes.len(), quiet, progress.clone());

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
        progress: &progress,
        preflight: options.preflight,
        binary_size_hint: stager
            .as_ref()
            .map(|s| {
                Arch::ALL
                    .iter()
                    .filter_map(|a| s.staged(*a))
                    .map(|b| b.binary_size)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0),
    };
    let policy = pool::Policy {
        max_run_num: plan.max_run_num,
        max_fail: options.max_fail,
        canary: options.canary,
    };
    pool::run_all(&plan.nodes, policy, &cancel, &recorder, |node| {
        pipeline::process(node, &ctx)
    });

    progress.finish();
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

fn stage_packages(settings: StageSettings) -> Result<Stager, Error> {
    let stager = Stager::open(settings).map_err(|e| Error::Stage(e.to_string()))?;
    stager
        .stage_all()
        .map_err(|e| Error::Stage(e.to_string()))?;
    Ok(stager)
}

/// The stager's settings for the plan: the one conversion, used for the checks before
/// the run and for the run itself.
fn stage_settings(
    staging: &plan::StagingPlan,
    config_path: &Path,
    options: &RunOptions,
) -> StageSettings {
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
    settings.pins = staging
        .pins
        .iter()
        .map(|(arch, pin)| {
            let pin = Pin {
                digest: pin.digest.clone(),
                source: format!(
                    "keadm.download.sha512.{arch} ({}:{})",
                    config_path.display(),
                    pin.pos
                ),
            };
            (*arch, pin)
        })
        .collect();
    settings.allow_unverified = staging.allow_unverified;
    settings.insecure_http = staging.insecure_http;
    settings.max_package_bytes = staging.max_package_bytes;
    settings.progress = (std::io::stderr().is_terminal() && options.verbosity != Verbosity::Quiet)
        .then(report::progress::console);
    settings
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
