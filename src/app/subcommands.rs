//! The subcommands besides the run itself: `batch bundle` (the air-gapped kit), `batch
//! merge` (shards' results as one), `batch report` (report.html again) and `batch status`
//! (what each node runs now). Each loads what it needs and hands it to its module.

use std::path::PathBuf;

use super::{home, install_signal_handler, json, load_config, meters, print};
use crate::cancel::Cancel;
use crate::config::{self, validate::ProcessEnvironment};
use crate::console::{console_line, console_text};
use crate::error::{Error, OutputError, OutputFile, UsageError};
use crate::options::{BundleOptions, MergeOptions, OutputFormat, StatusOptions, Verbosity};
use crate::report;
use crate::{bundle, plan, rerun, status};

/// `batch bundle -c FILE --into DIR`: the air-gapped kit, written by `bundle`.
pub(super) fn run_bundle(options: &BundleOptions) -> Result<(), Error> {
    for note in &options.deprecations {
        log::warn!("{note}");
    }
    // The connected machine need not have the site's secrets: bundling reads none.
    let env = config::environment::WithoutSecrets::new(&ProcessEnvironment);
    let loaded = load_config(&options.config, &env)?;
    let docker_config =
        bundle::docker_config_path(std::env::var_os("DOCKER_CONFIG").map(PathBuf::from), home());
    let quiet = options.verbosity == Verbosity::Quiet;
    let settings = bundle::BundleSettings::new(
        &loaded.config,
        options,
        &env.stand_ins(),
        docker_config,
        meters(options.verbosity),
    )?;
    let mut note = |line: String| {
        if !quiet {
            console_line!("{line}");
        }
    };
    let report = bundle::write_kit(&settings, &mut note)?;
    report.lines().into_iter().for_each(note);
    console_text!("{}", report.summary());
    // After the console's lines, as a run prints its summary after the recap.
    if options.output == OutputFormat::Json {
        print(report.json())?;
    }
    Ok(())
}
/// `batch merge DIR...`: the shards' results as one. Exits like a run would: 1 when some
/// node did not succeed.
pub(super) fn run_merge(options: &MergeOptions) -> Result<(), Error> {
    // Before the config or any shard is read: a refused --into leaves no trace.
    if let Some(into) = &options.into {
        report::merge::check_into(into, &options.dirs).map_err(UsageError::from)?;
    }
    let config = options.config.as_deref().map(config_nodes).transpose()?;
    let merged = report::merge::merge(&options.dirs, config.as_ref()).map_err(UsageError::from)?;
    if let Some(into) = &options.into {
        report::files::create_dir_all(into)
            .and_then(|()| merged.summary.write(&into.join(report::run_dir::SUMMARY)))
            .and_then(|()| {
                report::files::write(
                    &into.join(report::log::LOG_FILE),
                    merged.log_text().as_bytes(),
                )
            })
            .and_then(|()| report::html::write(&merged.summary, into).map(drop))
            .map_err(OutputError::file(OutputFile::MergedResults, into))?;
    }
    report::junit::emit(&merged.summary, &options.junit, options.output)?;
    if let Some(path) = &options.metrics {
        report::metrics::write(&merged.summary, path)
            .map_err(OutputError::file(OutputFile::Metrics, path))?;
    }
    print(match options.output {
        OutputFormat::Json => json(&merged.summary),
        OutputFormat::Text => report::merge::render(&merged),
        OutputFormat::Junit => String::new(),
    })?;
    let totals = &merged.summary.totals;
    if totals.not_succeeded() > 0 {
        return Err(Error::MergedNodesFailed {
            failed: totals.not_succeeded(),
            total: totals.selected,
            dirs: merged.summary.merged_from.join(", "),
            log: options
                .into
                .as_ref()
                .map(|into| into.join(report::log::LOG_FILE)),
        });
    }
    Ok(())
}

/// `batch report` without a run directory: the one batch_runs/latest points at, else that
/// link's path, which the refusal then names.
pub(super) fn latest_run() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    rerun::latest_run(&cwd)
        .unwrap_or_else(|| PathBuf::from(report::run_dir::RUNS_DIR).join(report::run_dir::LATEST))
}

/// `batch report RUN_DIR`: report.html from the run's summary.json (else its journal,
/// for a run that did not finish); the page's path on stdout.
pub(super) fn write_report(run_dir: &std::path::Path) -> Result<(), Error> {
    let summary = report::merge::read_run_dir(run_dir).map_err(UsageError::from)?;
    let path = report::html::write(&summary, run_dir)
        .map_err(OutputError::file(OutputFile::Report, run_dir))?;
    print(format!("{}\n", path.display()))
}

/// `batch status -c FILE`: the table (or JSON) on stdout; exit 1 when a node did not answer.
pub(super) fn run_status(options: &StatusOptions) -> Result<(), Error> {
    let loaded = load_config(&options.config, &ProcessEnvironment)?;
    let cwd = std::env::current_dir().map_err(OutputError::CurrentDir)?;
    let cancel = Cancel::new();
    install_signal_handler(&cancel);
    let report = status::gather(&loaded.config, options, home(), &cwd, &cancel)?;
    print(report.render(options.output))?;
    status::ended(&report, &cancel)
}

/// `batch merge -c FILE`: the config's nodes, each at its address as a run records it.
fn config_nodes(path: &std::path::Path) -> Result<report::merge::ConfigNodes, Error> {
    // Merging reads node names and addresses only: no secret need be set on this host.
    let env = config::environment::WithoutSecrets::new(&ProcessEnvironment);
    let loaded = load_config(path, &env)?;
    Ok(report::merge::ConfigNodes {
        path: path.to_path_buf(),
        addresses: loaded
            .config
            .nodes
            .iter()
            .map(|node| {
                let address = plan::display_address(&node.ssh.host, node.ssh.port);
                (node.name.clone(), address)
            })
            .collect(),
    })
}
