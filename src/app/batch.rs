//! `batch -c FILE`: the config loaded and checked, the plan made, then the pre-flight
//! probes (`--preflight-only`), the plan printed (`--dry-run`) or the run executed:
//! staging, every selected node through the pool, the results written and recapped.

use std::io::IsTerminal;
use std::path::PathBuf;

use super::{home, install_signal_handler, json, load_config, meters, print};
use crate::arch::Arch;
use crate::cancel::Cancel;
use crate::cluster_run::{self, ClusterRun};
use crate::config::{self, validate::ProcessEnvironment};
use crate::console::{console_line, console_text};
use crate::error::{Error, Interruption, OutputError, OutputFile, UsageError};
use crate::kubeedge::before_run::{self, Refused};
use crate::options::{OutputFormat, PreflightMode, RunOptions, Verbosity};
use crate::pace::{self, JoinSlots};
use crate::report::findings::{Probe, Report, Row};
use crate::report::log::ResultLog;
use crate::report::progress::Progress;
use crate::report::summary::{RunFacts, Summary};
use crate::report::{self, Recorder, RunDir, recap};
use crate::stage::{CopyMaking, OfflineImages, StageError, StageSettings, Stager};
use crate::{bundle, dry_run, outcome, pipeline, plan, pool, rerun, waves};

/// `batch -c FILE`: load and check the config, plan, then probe, print or execute.
pub(super) fn run_batch(options: &RunOptions) -> Result<(), Error> {
    let loaded = load_config(&options.config, &ProcessEnvironment)?;
    let retry = if options.retry_failed {
        match retry_selection(&loaded.config, options)? {
            Some(retry) => Some(retry),
            None => return Ok(()),
        }
    } else {
        None
    };
    let mut plan = plan::build(
        &loaded.config,
        options,
        home(),
        PathBuf::from(plan::REMOTE_BASE_DIR),
        retry.as_ref().map(|retry| &retry.selection.names),
    )
    .map_err(UsageError::from)?;
    if let Some(chosen) = &options.run_dir {
        report::run_dir::check_chosen(chosen).map_err(UsageError::from)?;
    }
    check_join_images(&loaded.config)?;
    // Before the token is checked, staging and any node: a cluster that cannot be asked
    // refuses the run, and the joins that take their token from it get it here.
    // A dry run that may not ask the cluster (its kubeconfig runs a command) says so
    // instead, and runs nothing.
    let unasked = cluster_run::unasked(&loaded.config, options)?;
    let cluster_run = match unasked {
        Some(_) => None,
        None => ClusterRun::prepare(&mut plan, &loaded.config, options)?,
    };
    kubeedge_checks(&plan, options, cluster_run.as_ref())?;
    if options.preflight_only {
        return preflight_only(&plan, options.output);
    }
    // Staging rules that need no download are checked here, so a dry run reports them too.
    if let Some(staging) = &plan.staging {
        staging
            .stage_settings(&plan.config_path, meters(options.verbosity))
            .check_plain_http()
            .map_err(UsageError::UnsafeDownload)?;
    }
    if options.dry_run {
        // What staging will read on this machine is checked too (exit 3, as a run), and
        // the image archives are read and hashed as the run reads them, by the same code.
        if let Some(staging) = &plan.staging {
            dry_run::check_local_packages(staging, &plan.config_path)?;
        }
        let offline_images = list_offline_images(&plan)?;
        return print(dry_run::render(
            &plan,
            offline_images.as_ref(),
            &cluster_run::kubeconfig_line(cluster_run.as_ref(), &loaded.config, options),
            &unasked.unwrap_or_else(|| ClusterRun::describe(cluster_run.as_ref(), options)),
            plan.nodes
                .iter()
                .any(|n| n.keadm_args.is_join())
                .then(|| {
                    JoinSlots::describe(
                        options
                            .joins_in_flight
                            .unwrap_or(pace::DEFAULT_JOINS_IN_FLIGHT),
                        cluster_run.as_ref().is_some_and(|r| r.wait.is_some()),
                        options.joins_in_flight.is_some(),
                    )
                })
                .as_deref(),
            &waves::for_run(
                &plan.nodes,
                options,
                retry.as_ref().map(|r| &r.selection.waves),
            ),
            cluster_run.as_ref().and_then(|run| run.wait),
        ));
    }
    execute(plan, &loaded.config, options, retry, cluster_run)
}

/// `--preflight-only`: connects to every selected node through the same pool as a run
/// (so the first Ctrl-C stops further probes), runs the read-only probes, and prints the
/// table of findings (then each site's sandbox images) on stdout, or with `output` JSON
/// the same as one document. Exit 1 when any node has a finding or could not be probed.
fn preflight_only(plan: &plan::Plan, output: OutputFormat) -> Result<(), Error> {
    let cancel = Cancel::new();
    install_signal_handler(&cancel);
    let progress = Progress::new(plan.nodes.len(), plan.total_in_config, false);
    let scratch = RunDir::scratch().map_err(OutputError::file(
        OutputFile::ScratchDir,
        std::env::temp_dir(),
    ))?;
    let run_dir = &scratch.run;
    let offline_images = list_offline_images(plan)?;
    let ctx = pipeline::Context {
        connector: &crate::transport::SshConnector,
        stager: None,
        known_hosts: plan.known_hosts.clone(),
        jump_connections: plan.jump_connections,
        run_dir,
        cancel: &cancel,
        verify_remote: false,
        run_token: run_dir.id.clone(),
        retry_base: std::time::Duration::from_secs(1),
        handshakes_per_host: plan.handshakes_per_host,
        progress: &progress,
        // Findings are reported, never acted on, in this mode.
        preflight: PreflightMode::Warn,
        binary_size_hint: 0,
        offline_images: offline_images.as_ref(),
        keadm_version: plan.staging.as_ref().map(|s| s.version.as_str()),
        extra_images: &plan.extra_images,
        relay: None,
    };
    let probes = pool::probe_all(&plan.nodes, plan.max_run_num, &cancel, |node| {
        if node.keadm_args.is_join() {
            Probe::of(pipeline::preflight_only(node, &ctx))
        } else {
            Probe::NotAJoin
        }
    });
    drop(scratch);
    let rows: Vec<Row> = plan
        .nodes
        .iter()
        .zip(probes)
        .map(|(node, probe)| Row {
            name: node.name.clone(),
            address: node.address(),
            site: node.site.as_ref().map(ToString::to_string),
            probe: probe.unwrap_or(Probe::NotStarted),
        })
        .collect();
    let report = Report {
        rows,
        image_check: offline_images.is_some(),
    };
    print(match output {
        OutputFormat::Json => report.json(),
        // The command line refuses --output junit with --preflight-only.
        OutputFormat::Text | OutputFormat::Junit => report.text(),
    })?;
    let rows = &report.rows;
    if cancel.stopping() {
        return Err(Interruption::Probes {
            probed: rows.iter().filter(|row| row.probe.started()).count(),
            total: rows.len(),
        }
        .into());
    }
    let attention = rows
        .iter()
        .filter(|row| row.probe.needs_attention())
        .count();
    if attention > 0 {
        return Err(Error::Findings {
            nodes: attention,
            total: rows.len(),
        });
    }
    Ok(())
}

/// The images the config's joins will ask for, read as `batch bundle` reads them: a
/// keadmCmd whose `--image-repository` makes no valid reference (keadm trims nothing, so
/// a trailing `/` does that) fails every join it is in, so the run, its dry run and
/// `--preflight-only` refuse it up front (exit 2) with bundle's own message. Without a
/// keadmVersion (every node has keadmBinDir) the version keadm asks for is unknown, and
/// nothing can be built to check.
fn check_join_images(config: &config::Config) -> Result<(), Error> {
    if let Some(version) = &config.keadm_version {
        bundle::join_images(config, version, &[])?;
    }
    Ok(())
}

/// The join batch as a whole, before any node is touched: token lifetime, CA hash, and
/// node names cloudcore (and, with a kubeconfig, the cluster) already has. Fatal problems
/// are a config error (exit 2).
fn kubeedge_checks(
    plan: &plan::Plan,
    options: &RunOptions,
    cluster_run: Option<&ClusterRun>,
) -> Result<(), Error> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let per_node = rerun::latest_run(&cwd)
        .and_then(|run| rerun::measured_per_node_secs(&run))
        .unwrap_or(before_run::DEFAULT_PER_NODE_SECS);
    let now = outcome::now() as u64;
    let mut problems = before_run::check(plan, options.preflight, now, per_node, !options.dry_run);
    problems.extend(
        cluster_run.and_then(|run| run.names_taken(plan, options.preflight, options.reset_first)),
    );
    problems.extend(cluster_run.and_then(|run| run.over_capacity(plan, options.preflight)));
    let (fatal, warnings): (Vec<_>, Vec<_>) = problems.into_iter().partition(|p| p.fatal);
    for warning in warnings {
        log::warn!("{warning}");
    }
    if fatal.is_empty() {
        Ok(())
    } else {
        Err(Refused(fatal).into())
    }
}

/// What `--retry-failed` should do, after telling the operator; `None` when there is
/// nothing to retry (which is a success).
fn retry_selection(
    config: &config::Config,
    options: &RunOptions,
) -> Result<Option<rerun::Retry>, Error> {
    let cwd = std::env::current_dir().map_err(OutputError::CurrentDir)?;
    let names: Vec<&str> = config.nodes.iter().map(|n| n.name.as_str()).collect();
    let retry = rerun::retry(&cwd, &names, options.class)?;
    let selection = &retry.selection;
    if !selection.gone.is_empty() {
        log::warn!(
            "{} node(s) of the earlier run are no longer in the config and are ignored: {}.",
            selection.gone.len(),
            selection.gone.join(", ")
        );
    }
    if selection.names.is_empty() {
        console_line!(
            "Nothing to retry: every node of the config {} in {}.",
            match options.class {
                Some(class) => format!("succeeded or failed with a class other than {class}"),
                None => "succeeded".to_string(),
            },
            retry.from.display()
        );
        return Ok(None);
    }
    console_line!(
        "Retrying {} node(s) that did not succeed in {}.",
        selection.names.len(),
        retry.from.display()
    );
    Ok(Some(retry))
}

/// Stages packages, runs every selected node, and writes the results.
fn execute(
    plan: plan::Plan,
    config: &config::Config,
    options: &RunOptions,
    retry: Option<rerun::Retry>,
    cluster_run: Option<ClusterRun>,
) -> Result<(), Error> {
    let wall = std::time::Instant::now();
    let started_at = outcome::now();
    let quiet = options.verbosity == Verbosity::Quiet;
    // Staging comes first: if it fails, no node and no previous result file is touched.
    let stager = match &plan.staging {
        Some(staging) => {
            let mut settings = staging.stage_settings(&plan.config_path, meters(options.verbosity));
            // The run sends keadm, so its packed copies are worth making; nothing waits
            // for them.
            settings.copies = CopyMaking::Process;
            Some(stage_packages(settings)?)
        }
        None => None,
    };
    let mut offline_images = list_offline_images(&plan)?;
    if let Some(images) = &mut offline_images {
        images.compress_for_the_wire()?;
    }
    let cwd = std::env::current_dir().map_err(OutputError::CurrentDir)?;
    let run_dir =
        RunDir::create(options.run_dir.as_deref(), &cwd).map_err(match &options.run_dir {
            Some(chosen) => OutputError::file(OutputFile::ChosenRunDir, chosen),
            None => OutputError::file(OutputFile::RunDir, &cwd),
        })?;
    if let Some(previous) = retry.as_ref().map(|retry| &retry.from) {
        let _ = report::files::write(
            &run_dir.path.join(rerun::RETRY_OF),
            previous.display().to_string().as_bytes(),
        );
    }
    let log_path = cwd.join(report::log::LOG_FILE);
    let log = ResultLog::create(&log_path)
        .map_err(OutputError::file(OutputFile::ResultLog, &log_path))?;
    let journal = run_dir
        .journal()
        .map_err(OutputError::file(OutputFile::Journal, &run_dir.path))?;
    let live = std::io::stderr().is_terminal() && !quiet;
    let progress = Progress::new(plan.nodes.len(), plan.total_in_config, live);
    let recorder = Recorder::new(log, journal, plan.nodes.len(), quiet, progress.clone());
    recorder.metrics.start(
        options.metrics.as_deref(),
        &run_dir.id,
        &config.path,
        started_at,
    );

    let cancel = Cancel::new();
    install_signal_handler(&cancel);
    let earlier_waves = retry.as_ref().map(|retry| &retry.selection.waves);
    let rollout = waves::for_run(&plan.nodes, options, earlier_waves);
    if !quiet {
        let (count, shard, at_once) = (plan.nodes.len(), plan.shard, plan.max_run_num);
        console_line!(
            "{}",
            recap::banner(count, shard, at_once, &rollout, &run_dir.path)
        );
    }
    let ctx = pipeline::Context {
        connector: &crate::transport::SshConnector,
        stager: stager.as_ref(),
        known_hosts: plan.known_hosts.clone(),
        jump_connections: plan.jump_connections,
        run_dir: &run_dir,
        cancel: &cancel,
        verify_remote: options.verify_remote,
        run_token: run_dir.id.clone(),
        retry_base: std::time::Duration::from_secs(1),
        handshakes_per_host: plan.handshakes_per_host,
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
        offline_images: offline_images.as_ref(),
        keadm_version: plan.staging.as_ref().map(|s| s.version.as_str()),
        extra_images: &plan.extra_images,
        relay: site_relay(&plan),
    };
    let policy = pool::Policy {
        max_run_num: plan.max_run_num,
        rollout,
    };
    let slots = JoinSlots::new(
        options
            .joins_in_flight
            .unwrap_or(pace::DEFAULT_JOINS_IN_FLIGHT),
        Some(progress.clone()),
    );
    // The cluster's part of a node (--drain before it, --delete-nodes after) runs in its
    // worker; a join first waits for its turn (--joins-in-flight).
    let process = |node: &plan::NodePlan| {
        let mut waited = None;
        if node.keadm_args.is_join() {
            match slots.take(node.index, &cancel) {
                Some(time) => waited = slots.waited_line(time),
                None => {
                    return outcome::NodeOutcome::not_run(
                        node.index,
                        &node.name,
                        &node.address(),
                        outcome::Phase::Interrupted,
                        "not started: run interrupted while it waited for its turn (--joins-in-flight)",
                    );
                }
            }
        }
        let outcome = match &cluster_run {
            Some(run) => run.process(node, &ctx),
            None => pipeline::process(node, &ctx),
        };
        report::transcript::Transcript::add_notes(
            &outcome,
            &node.redactor,
            &waited.into_iter().collect::<Vec<_>>(),
        );
        outcome
    };
    match cluster_run.as_ref().and_then(ClusterRun::verification) {
        None => pool::run_all(&plan.nodes, policy, &cancel, &recorder, |node| {
            let outcome = process(node);
            slots.give_back(node.index);
            outcome
        }),
        Some(verification) => verification.run_all(
            &plan.nodes,
            policy,
            &cancel,
            &recorder,
            &ctx,
            &process,
            &slots,
        ),
    }
    // Sites the run did not finish (the operator's Ctrl-C, a wave past --max-fail) still had
    // sources: they serve no more.
    if let Some(relay) = &ctx.relay {
        pipeline::relay::unserve_all(&relay.remaining_sources(), &ctx);
    }

    progress.finish();
    let sites = ctx.relay.as_ref().map(|r| r.traffic()).unwrap_or_default();
    let mut outcomes = recorder.outcomes();
    stamp_sites(&plan.nodes, &mut outcomes);
    if let Some(run) = &cluster_run {
        run.mark_left_behind(&plan.nodes, &mut outcomes);
    }
    let summary = Summary::of_run(
        RunFacts {
            run_id: &run_dir.id,
            config: &config.path,
            started_at,
            interrupted: cancel.stopping(),
            stager: stager.as_ref(),
            sites: &sites,
            waves: &recorder.waves(),
        },
        outcomes,
    );
    let summary_path = run_dir.summary_path();
    if let Err(e) = summary.write(&summary_path) {
        log::error!(
            "Could not write {}: {e}. The nodes' results are still in batch_process_log.txt and the journal.",
            summary_path.display()
        );
    }
    recorder.metrics.finish(&summary);
    let report_page = report::html::write(&summary, &run_dir.path)
        .inspect_err(|e| {
            log::error!(
                "Could not write {}: {e}. summary.json has the same results; `keadm-batch batch report {}` writes the page again.",
                run_dir.path.join(report::html::REPORT).display(),
                crate::shell::shell_quote(&run_dir.path.display().to_string())
            )
        })
        .ok();
    if !quiet {
        console_text!(
            "{}",
            recap::render(&recap::Run {
                outcomes: &summary.nodes,
                waves: &summary.waves,
                options,
                wall_secs: wall.elapsed().as_secs_f64(),
            })
        );
        console_text!("{}", recap::sites(&summary.sites));
        console_text!("{}", cluster_run::left_behind_recap(&summary.nodes));
        console_text!(
            "{}",
            cluster_run::node_groups_recap(cluster_run.as_ref(), &summary.nodes)
        );
        console_text!("{}", crate::drain_run::left_cordoned_recap(&summary.nodes));
        if let Some(stager) = &stager {
            // The process goes on after the run: say so, or it looks left behind.
            for (arch, format, pid) in stager.copies_being_made() {
                console_line!(
                    "The {format} copy of keadm {} for {arch} is still being made (process {pid}, at the lowest CPU priority); runs that start once it is done send it to nodes with {format} instead of a larger form.",
                    stager.settings().version
                );
            }
        }
        // Last, so the run's places are where the eye ends.
        console_text!(
            "{}",
            recap::places(&log_path, &run_dir.path, report_page.as_deref())
        );
    }
    // After the recap, so a stdout that cannot be written still leaves the console whole.
    if options.output == OutputFormat::Json {
        print(json(&summary))?;
    }
    report::junit::emit(&summary, &options.junit, options.output)?;
    let totals = &summary.totals;
    if cancel.stopping() {
        return Err(Interruption::Run {
            finished: totals.selected - totals.interrupted,
            selected: totals.selected,
            log: log_path,
        }
        .into());
    }
    if totals.not_succeeded() > 0 {
        return Err(Error::NodesFailed {
            failed: totals.not_succeeded(),
            total: totals.selected,
            run_dir: run_dir.path.display().to_string(),
        });
    }
    if quiet {
        // -q still prints the final result: on success this line, as the error is on failure.
        console_line!(
            "{} of {} selected nodes succeeded. See batch_process_log.txt and {}.",
            totals.succeeded,
            totals.selected,
            run_dir.path.display()
        );
    }
    Ok(())
}

/// Each outcome's site, from the plan: the summary, the JUnit classes and the report's
/// groups read it there.
fn stamp_sites(nodes: &[plan::NodePlan], outcomes: &mut [crate::outcome::NodeOutcome]) {
    let sites: std::collections::HashMap<usize, String> = nodes
        .iter()
        .filter_map(|node| Some((node.index, node.site.as_ref()?.to_string())))
        .collect();
    for outcome in outcomes {
        outcome.site = sites.get(&outcome.index).cloned();
    }
}

/// The offline image archives the plan names, listed and hashed once, before any node.
fn list_offline_images(plan: &plan::Plan) -> Result<Option<OfflineImages>, StageError> {
    Ok(match &plan.offline_images {
        Some(sources) => OfflineImages::list(sources)?,
        None => None,
    })
}

fn stage_packages(settings: StageSettings) -> Result<Stager, StageError> {
    let stager = Stager::open(settings)?;
    stager.stage_all()?;
    Ok(stager)
}
/// The sites' relay for this run: with `--relay auto` and a site of two or more nodes
/// whose addresses this machine knows. Its tag is its own 64 random bits, and its keys,
/// one per payload, are made for this run as payloads are first claimed.
fn site_relay(plan: &crate::plan::Plan) -> Option<std::sync::Arc<pipeline::relay::Relay>> {
    if plan.relay == crate::options::RelayMode::Off {
        return None;
    }
    pipeline::relay::Relay::for_nodes(&plan.nodes, &crate::plan::site_addresses::resolve_here)
}
