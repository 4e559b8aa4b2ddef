//! `batch status -c FILE`: the config's selected nodes asked, read-only, what they run,
//! beside their outcome in the latest run in the current directory. The plan is a run's
//! (the same `--only`, host-key policy and known-hosts file), the pool is the one
//! `--preflight-only` uses (`pool::probe_all`: at most maxRunNum at once, the first Ctrl-C
//! stops further nodes), and each node costs one connection and one round trip
//! (`pipeline::status_only`). Nothing is written on a node, and no run directory is made:
//! the pipeline's context gets a scratch one in the system's temporary directory, which
//! nothing is written to and which goes when the status is done.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::cancel::Cancel;
use crate::cluster::{self, NodeState};
use crate::config::Config;
use crate::error::{Error, Interruption, OutputError, OutputFile, UsageError};
use crate::options::{PreflightMode, StatusOptions};
use crate::outcome::NodeOutcome;
use crate::report::RunDir;
use crate::report::progress::Progress;
use crate::report::status::{Asked, ClusterView, StatusReport, StatusRow};
use crate::{pipeline, plan, pool, rerun, verify};

/// Asks every node `options` selects from `config`, and reads the latest run under `cwd`.
pub fn gather(
    config: &Config,
    options: &StatusOptions,
    home: Option<PathBuf>,
    cwd: &Path,
    cancel: &Cancel,
) -> Result<StatusReport, Error> {
    let plan = plan::build(
        config,
        &options.as_run(),
        home,
        PathBuf::from(plan::REMOTE_BASE_DIR),
        None,
    )
    .map_err(UsageError::from)?;
    // The cluster first (one list of its Nodes), so a kubeconfig that does not work
    // stops the status before any node is asked.
    let in_cluster = cluster_nodes(config, options)?;
    let progress = Progress::new(plan.nodes.len(), plan.total_in_config, false);
    let scratch = RunDir::scratch().map_err(OutputError::file(
        OutputFile::ScratchDir,
        std::env::temp_dir(),
    ))?;
    let ctx = pipeline::Context {
        connector: &crate::transport::SshConnector,
        stager: None,
        known_hosts: plan.known_hosts.clone(),
        jump_connections: plan.jump_connections,
        run_dir: &scratch.run,
        cancel,
        verify_remote: false,
        run_token: scratch.run.id.clone(),
        retry_base: std::time::Duration::from_secs(1),
        handshakes_per_host: plan.handshakes_per_host,
        progress: &progress,
        preflight: PreflightMode::Off,
        binary_size_hint: 0,
        offline_images: None,
        keadm_version: None,
        extra_images: &[],
        relay: None,
    };
    let asked = pool::probe_all(&plan.nodes, plan.max_run_num, cancel, |node| {
        pipeline::status_only(node, &ctx)
    });
    drop(scratch);
    let latest = rerun::latest_run(cwd);
    let mut last: HashMap<String, NodeOutcome> = match &latest {
        Some(run) => rerun::last_outcomes(run)?,
        None => HashMap::new(),
    };
    let now = std::time::SystemTime::now();
    let rows = plan
        .nodes
        .iter()
        .zip(asked)
        .map(|(node, asked)| StatusRow {
            name: node.name.clone(),
            address: node.address(),
            asked: match asked {
                Some(Ok(status)) => Asked::Answered(status),
                Some(Err(error)) => Asked::Failed(error),
                None => Asked::NotAsked,
            },
            last_run: last.remove(&node.name),
            cluster: in_cluster.as_ref().map(|listed| {
                let node_name = verify::node_name(node);
                let state = listed.iter().find(|s| s.name == node_name);
                ClusterView {
                    registered: state.is_some(),
                    ready: state.map(NodeState::status_word),
                    age: state.and_then(|s| s.age(now)),
                    labels_differ: state
                        .filter(|_| !node.placement.is_empty())
                        .map(|s| node.placement.differences(&s.labels, &s.taints)),
                    node_name,
                }
            }),
        })
        .collect();
    Ok(StatusReport {
        rows,
        last_run_dir: latest.map(|dir| dir.strip_prefix(cwd).unwrap_or(&dir).display().to_string()),
        now: now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        cert_warn_days: options.cert_warn_days,
    })
}

/// The cluster's Nodes, with a kubeconfig (`--kubeconfig`, the config's, `KUBECONFIG`):
/// one list, read-only; `None` without one.
fn cluster_nodes(
    config: &Config,
    options: &StatusOptions,
) -> Result<Option<Vec<NodeState>>, Error> {
    let Some(access) = cluster::Access::of_process(
        options.kubeconfig.clone(),
        config.kubeconfig.clone(),
        options.context.clone(),
    ) else {
        return Ok(None);
    };
    Ok(Some(cluster::Cluster::connect(&access)?.nodes()?))
}

/// How `batch status` ends once its report is printed: a warning for each edge
/// certificate that expires soon (it changes no exit code), then interrupted (130) when
/// the operator stopped it, 1 when some node did not answer, else 0.
pub fn ended(report: &StatusReport, cancel: &Cancel) -> Result<(), Error> {
    for warning in report.cert_warnings() {
        log::warn!("{warning}");
    }
    let total = report.rows.len();
    if cancel.stopping() {
        let asked = report.asked();
        return Err(Interruption::Status { asked, total }.into());
    }
    match report.not_answered() {
        0 => Ok(()),
        nodes => Err(Error::NotAnswered { nodes, total }),
    }
}
