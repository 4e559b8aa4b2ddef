//! The cluster's part of a run (`--kubeconfig`), decided before any node is touched: the
//! API server must answer and grant what the run needs (get, list and watch on nodes;
//! `get secrets` in kubeedge for a token read from the cluster; `delete nodes` for
//! `--delete-nodes`), joins that need the token get it, and one list of Nodes finds the
//! join names the cluster already has (`name_taken`). With `--drain` (patch nodes, list
//! pods, create pods/eviction), each node that is not a join has its Node cordoned and
//! drained before its pipeline and uncordoned once it succeeded (`drain_run`). After a
//! reset, the Node objects are deleted (`--delete-nodes`) or, one list again, named in the
//! recap as left behind. Those are the only writes this tool makes to a cluster, and only
//! when asked.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::cluster::{self, Capacity, Cluster, Deleted, Guard, NodeState, Permission};
use crate::config::Config;
use crate::drain_run::{self, Before, DrainRun};
use crate::error::{Error, UsageError};
use crate::kubeedge::before_run::{Problem, ProblemKind};
use crate::node_text::escape_controls;
use crate::options::{PreflightMode, RunOptions};
use crate::outcome::{ClusterCheck, NodeOutcome, Phase};
use crate::plan::{NodePlan, Plan};
use crate::report::transcript::Transcript;
use crate::{pipeline, verify};

/// `delete nodes`: what `--delete-nodes` needs besides reading.
const DELETE: Permission = Permission::nodes("delete");

/// The cluster a run works with, asked before any node is touched.
pub struct ClusterRun {
    pub cluster: Cluster,
    pub version: String,
    /// How long a join's Node may take to be Ready after keadm's exit; `None` when joins
    /// are not waited for (`--no-wait`, or no join selected).
    pub wait: Option<Duration>,
    /// Whether a join, an upgrade, a reset is selected.
    pub joins: bool,
    pub upgrades: bool,
    pub resets: bool,
    /// `--delete-nodes`, with a reset selected.
    pub delete_nodes: bool,
    /// The Nodes the cluster had before any node was touched (listed when a join is
    /// selected, for `name_taken`).
    pub nodes_before: Vec<NodeState>,
    /// How many joins got the cluster's token.
    pub token_for: usize,
    /// What the cloud serves (`--cloud-node-limit`, else cloudcore's ConfigMap and
    /// Deployment), or why that is unknown; `None` when no join is selected.
    pub capacity: Option<Result<Capacity, String>>,
    /// `--drain`, with a node selected that is not a join.
    pub drain: Option<DrainRun>,
    /// The KubeEdge NodeGroups the selected joins will be in, by name or by the labels
    /// the config gives them: (group, the nodes' config names). Read only when a join has
    /// labels or taints, and when the cluster has NodeGroups the kubeconfig may list.
    pub node_groups: Vec<(String, Vec<String>)>,
}

/// The kubeconfig the run reads: `--kubeconfig`, the config's, else `$KUBECONFIG`; none
/// with `--no-cluster`.
fn access(config: &Config, options: &RunOptions) -> Option<cluster::Access> {
    if options.no_cluster {
        return None;
    }
    cluster::Access::of_process(
        options.kubeconfig.clone(),
        config.kubeconfig.clone(),
        options.context.clone(),
    )
}

/// The dry run's line about the cluster when the kubeconfig's user runs a command on
/// this machine for its credentials (an exec credential plugin): a dry run runs nothing,
/// so it neither runs that command nor asks the API server anything, and says so. `None`
/// when the dry run may ask the API server (or has no kubeconfig), as a run would.
pub fn unasked(config: &Config, options: &RunOptions) -> Result<Option<String>, Error> {
    if !options.dry_run {
        return Ok(None);
    }
    let Some(access) = access(config, options) else {
        return Ok(None);
    };
    let inspected = access.inspect()?;
    Ok(inspected.command.map(|command| {
        format!(
            "not asked: the kubeconfig's user runs `{command}` on this machine for its credentials (an exec credential plugin), and a dry run runs nothing, so it was not run and the API server was asked nothing (its version, the permissions the run needs, the Nodes it has, the join token); the run would run it first (--no-cluster runs without the cluster)"
        )
    }))
}

/// The plan's line naming the kubeconfig the run reads and its context.
pub fn kubeconfig_line(run: Option<&ClusterRun>, config: &Config, options: &RunOptions) -> String {
    if options.no_cluster {
        return match std::env::var("KUBECONFIG").ok().filter(|v| !v.is_empty()) {
            Some(value) => format!("none read (--no-cluster; $KUBECONFIG={value} is ignored)"),
            None => "none read (--no-cluster)".to_string(),
        };
    }
    let Some(access) = access(config, options) else {
        return "none (no --kubeconfig, no kubeconfig in the config, $KUBECONFIG unset)"
            .to_string();
    };
    let context = match run {
        Some(run) => Some(run.cluster.context.clone()),
        None => access.inspect().ok().map(|i| i.context),
    }
    .filter(|c| !c.is_empty())
    .unwrap_or_else(|| "-".to_string());
    format!("{}, context {context}", access.source)
}

/// Whether a join takes its token from the cluster: `--token-from-cluster`, or a
/// keadmCmd whose `--token` is empty or missing.
fn wants_token(node: &NodePlan, options: &RunOptions) -> bool {
    node.keadm_args.is_join() && (options.token_from_cluster || node.keadm_args.token().is_none())
}

impl ClusterRun {
    /// `None` without a kubeconfig (every behaviour as without the cluster; then
    /// `--delete-nodes` and `--token-from-cluster` are usage errors), or when the plan
    /// has neither a join nor a reset. Otherwise the API server must answer and grant
    /// what the run needs, or the run stops here (exit 2); the joins that want the
    /// cluster's token get it in `plan`.
    pub fn prepare(
        plan: &mut Plan,
        config: &Config,
        options: &RunOptions,
    ) -> Result<Option<ClusterRun>, Error> {
        let Some(access) = access(config, options) else {
            for (given, flag) in [
                (options.delete_nodes, "--delete-nodes"),
                (options.token_from_cluster, "--token-from-cluster"),
                (options.drain.is_some(), "--drain"),
            ] {
                if given {
                    return Err(UsageError::NeedsKubeconfig { flag }.into());
                }
            }
            return Ok(None);
        };
        let joins = plan.nodes.iter().any(|n| n.keadm_args.is_join());
        let resets = plan.nodes.iter().any(|n| n.keadm_args.is_edge_reset());
        let drains = options.drain.is_some() && plan.nodes.iter().any(|n| !n.keadm_args.is_join());
        if options.drain.is_some() && !drains {
            log::warn!(
                "--drain drains the Nodes of nodes already in the cluster (upgrades, resets, config-update), and every selected node's keadmCmd is a join: nothing will be drained."
            );
        }
        let upgrades = plan.nodes.iter().any(|n| n.keadm_args.is_edge_upgrade());
        if !joins && !resets && !upgrades && !drains {
            return Ok(None);
        }
        let token_for = plan
            .nodes
            .iter()
            .filter(|n| wants_token(n, options))
            .count();
        let delete_nodes = options.delete_nodes && resets;
        if options.delete_nodes && !resets {
            log::warn!(
                "--delete-nodes deletes the Node objects of resets, and no selected node's keadmCmd is a reset: nothing will be deleted."
            );
        }
        let mut permissions = Permission::VERIFY.to_vec();
        if token_for > 0 {
            permissions.push(Permission::TOKEN);
        }
        if delete_nodes {
            permissions.push(DELETE);
        }
        if drains {
            permissions.extend(cluster::drain::PERMISSIONS);
        }
        let cluster = Cluster::connect(&access)?;
        let version = cluster.version()?;
        cluster.require(&permissions)?;
        // A dry run reads no secret: it says which joins would take the token.
        if token_for > 0 && !options.dry_run {
            let token = cluster.join_token()?;
            for node in plan.nodes.iter_mut().filter(|n| wants_token(n, options)) {
                node.put_token(&token)
                    .map_err(|command| UsageError::TokenNotPlaced {
                        node: node.name.clone(),
                        command,
                    })?;
            }
        }
        let nodes_before = if joins { cluster.nodes()? } else { Vec::new() };
        let capacity = joins.then(|| capacity(&cluster, options.cloud_node_limit));
        let node_groups = node_groups(&cluster, plan);
        if let Some(Err(why)) = &capacity {
            log::info!("{}", unknown_capacity(why));
        }
        Ok(Some(ClusterRun {
            cluster,
            version,
            wait: ((joins || upgrades) && !options.no_wait)
                .then(|| Duration::from_secs(options.ready_timeout_seconds.max(1))),
            joins,
            upgrades,
            resets,
            delete_nodes,
            nodes_before,
            token_for,
            capacity,
            drain: options.drain.filter(|_| drains).map(DrainRun::new),
            node_groups,
        }))
    }

    /// The wait for joins' Nodes, unless joins are not waited for. Each final outcome
    /// passes through [`ClusterRun::finish`] before it is recorded.
    pub fn verification(&self) -> Option<verify::Verification<'_>> {
        self.wait.map(|timeout| verify::Verification {
            cluster: &self.cluster,
            timeout,
            finish: self,
            capacity: self.capacity.clone().and_then(Result::ok),
        })
    }

    /// One node in its worker: with `--drain` its Node cordoned and drained first (a
    /// failed drain is its outcome, and nothing runs on the node), then its pipeline and
    /// [`ClusterRun::after_reset`]. Without a verification every outcome here is final
    /// and passes through [`ClusterRun::finish`]; with one, the verification does that.
    ///
    /// A node for which the run may write to the cluster (its drain, its Node's delete)
    /// is first asked, over SSH, which Node is its own: nothing is written to a Node it
    /// does not name as its own (`cluster::Guard`).
    pub fn process(&self, node: &NodePlan, ctx: &pipeline::Context) -> NodeOutcome {
        let asked = self.writes_for(node);
        let guard = Guard::new(
            if asked {
                pipeline::identity(node, ctx)
            } else {
                Err("it was not asked, since nothing is written to the cluster for it".to_string())
            },
            &node.ssh.host,
        );
        let said: Vec<String> = asked
            .then(|| format!("before its command: {}", guard.said()))
            .into_iter()
            .collect();
        let before = match &self.drain {
            Some(drain) => drain.before(&self.cluster, node, ctx, &guard),
            None => Before::Go(Vec::new()),
        };
        let outcome = match before {
            Before::Stop(outcome) => {
                Transcript::add_notes(&outcome, &node.redactor, &said);
                *outcome
            }
            Before::Go(lines) => {
                let outcome = pipeline::process(node, ctx);
                Transcript::add_notes(&outcome, &node.redactor, &[said, lines].concat());
                self.after_reset(node, outcome, &guard)
            }
        };
        if self.wait.is_some() {
            outcome
        } else {
            verify::Finish::finish(self, outcome)
        }
    }

    /// Whether the run may write to the cluster for `node`: drain its Node (any node but
    /// a join) or delete it (a reset, `--delete-nodes`).
    fn writes_for(&self, node: &NodePlan) -> bool {
        (self.drain.is_some() && !node.keadm_args.is_join())
            || (self.delete_nodes && node.keadm_args.is_edge_reset())
    }

    /// The plan's line about the cluster.
    pub fn describe(run: Option<&ClusterRun>, options: &RunOptions) -> String {
        let Some(run) = run else {
            return if options.no_cluster {
                "verification off (--no-cluster): a join succeeds when keadm exits 0, and nothing is read from or written to a cluster".to_string()
            } else if options.no_wait {
                "verification off (--no-wait): a join succeeds when keadm exits 0".to_string()
            } else {
                "verification off (no kubeconfig, or no join selected): a join succeeds when keadm exits 0".to_string()
            };
        };
        let context = if run.cluster.context.is_empty() {
            "-"
        } else {
            &run.cluster.context
        };
        let mut line = match run.wait {
            Some(timeout) => {
                let (what, must) = match (run.joins, run.upgrades) {
                    (true, false) => ("joins", "each join's Node must register and be Ready"),
                    (false, true) => (
                        "upgrades",
                        "each upgrade's Node must be Ready on the version edgecore runs after it",
                    ),
                    _ => (
                        "joins and upgrades",
                        "each join's Node must register and be Ready, each upgrade's Node be Ready on the version edgecore runs after it,",
                    ),
                };
                format!(
                    "{what} verified in {} (context {context}, {}): {must} within {} s of keadm's exit; the kubeconfig's user may get, list and watch nodes",
                    run.cluster.server,
                    run.version,
                    timeout.as_secs()
                )
            }
            None => format!(
                "{} (context {context}, {}): {}",
                run.cluster.server,
                run.version,
                if options.no_wait {
                    "joins are not waited for (--no-wait)"
                } else {
                    "no join or upgrade to verify"
                }
            ),
        };
        if run.resets {
            line.push_str(if run.delete_nodes {
                "; each reset checked clean has its Node object deleted (--delete-nodes)"
            } else {
                "; the Node objects resets leave are listed in the recap (--delete-nodes deletes them)"
            });
        }
        if run.token_for > 0 {
            let _ = write!(
                line,
                "; {} join(s) take the token from the cluster (secret tokensecret in kubeedge{})",
                run.token_for,
                if options.dry_run {
                    "; a dry run does not read it"
                } else {
                    ""
                }
            );
        }
        match &run.capacity {
            Some(Ok(capacity)) => {
                let registered = cluster::capacity::edge_nodes(&run.nodes_before);
                let _ = write!(
                    line,
                    "; {}, and {registered} edge Node(s) are registered",
                    capacity.describe()
                );
            }
            Some(Err(why)) => {
                let _ = write!(line, "; {}", unknown_capacity(why));
            }
            None => {}
        }
        if let Some(drain) = &run.drain {
            let _ = write!(line, "; {}", drain_run::describe(drain.timeout));
        }
        if !run.node_groups.is_empty() {
            let groups: Vec<String> = run
                .node_groups
                .iter()
                .map(|(group, nodes)| format!("{group} ({})", crate::report::names::compact(nodes)))
                .collect();
            let _ = write!(
                line,
                "; the joins will be in the NodeGroups {}",
                groups.join(", ")
            );
        }
        if run.drain.is_some() || run.delete_nodes {
            let _ = write!(line, "; {}", cluster::guard::RULE);
        }
        line
    }

    /// `name_taken` from the cluster: the joins whose Node name the cluster already has,
    /// each with that Node's state and age. Refused under `--preflight strict`, a warning
    /// otherwise, and always only a warning with `--reset-first`, whose join replaces the
    /// node it finds.
    pub fn names_taken(
        &self,
        plan: &Plan,
        mode: PreflightMode,
        reset_first: bool,
    ) -> Option<Problem> {
        if mode == PreflightMode::Off {
            return None;
        }
        let now = SystemTime::now();
        let taken: Vec<String> = plan
            .nodes
            .iter()
            .filter(|n| n.keadm_args.is_join())
            .filter_map(|n| {
                let name = verify::node_name(n);
                let state = self.nodes_before.iter().find(|s| s.name == name)?;
                Some(format!("{name} ({})", state.describe(now)))
            })
            .collect();
        if taken.is_empty() {
            return None;
        }
        Some(Problem {
            fatal: mode == PreflightMode::Strict && !reset_first,
            kind: ProblemKind::NodesInCluster {
                server: self.cluster.server.clone(),
                names: taken,
                reset_first,
            },
        })
    }

    /// `over_capacity`: the edge Nodes registered now plus the joins whose Node does not
    /// exist yet, against what the cloud serves. Past it, cloudhub would refuse the
    /// sessions of the last joins after keadm reports them installed; refused under
    /// `--preflight strict`, a warning otherwise.
    pub fn over_capacity(&self, plan: &Plan, mode: PreflightMode) -> Option<Problem> {
        if mode == PreflightMode::Off {
            return None;
        }
        let Some(Ok(capacity)) = &self.capacity else {
            return None;
        };
        let registered = cluster::capacity::edge_nodes(&self.nodes_before);
        let planned = plan
            .nodes
            .iter()
            .filter(|n| n.keadm_args.is_join())
            .filter(|n| {
                let name = verify::node_name(n);
                !self.nodes_before.iter().any(|s| s.name == name)
            })
            .count();
        let total = capacity.total();
        (registered as u64 + planned as u64 > total).then(|| Problem {
            fatal: mode == PreflightMode::Strict,
            kind: ProblemKind::OverCapacity {
                server: self.cluster.server.clone(),
                capacity: capacity.describe(),
                registered,
                planned,
                over: (registered as u64 + planned as u64 - total) as usize,
            },
        })
    }

    /// After a node's run: a reset checked clean on its node has its Node object deleted
    /// (`--delete-nodes`), and the outcome and transcript say what became of it. Other
    /// outcomes pass unchanged.
    ///
    /// The Node is deleted only when `guard` (what the node said before the reset) finds
    /// it this node's; otherwise nothing is written, and the refusal is recorded as the
    /// delete's error, so the recap lists the Node as left behind.
    pub fn after_reset(
        &self,
        node: &NodePlan,
        mut outcome: NodeOutcome,
        guard: &Guard,
    ) -> NodeOutcome {
        if !self.delete_nodes || !outcome.reset_verified || !node.keadm_args.is_edge_reset() {
            return outcome;
        }
        let node_name = verify::node_name(node);
        let mut check = ClusterCheck {
            node_name: node_name.clone(),
            ..ClusterCheck::default()
        };
        let line = match self.cluster.delete_node(&node_name, guard) {
            Ok(Deleted::Deleted(this)) => {
                check.deleted = Some(true);
                format!(
                    "[keadm-batch] deleted the Node {node_name} from the cluster (--delete-nodes): {this}"
                )
            }
            Ok(Deleted::Absent) => {
                check.deleted = Some(false);
                format!("[keadm-batch] the cluster has no Node {node_name}: nothing to delete")
            }
            Ok(Deleted::Refused(why)) => {
                let why = escape_controls(&node.redactor.redact(&why));
                log::warn!(
                    "Node {}: its reset was verified, but its Node object {node_name} was not deleted: --delete-nodes deletes only the node's own Node, and {why}. Nothing was written to the cluster for it.",
                    node.name
                );
                check.delete_error = Some(format!("refused: {why}"));
                format!(
                    "[keadm-batch] did not delete the Node {node_name} (--delete-nodes deletes only the node's own Node): {why}; nothing was written to the cluster"
                )
            }
            Err(error) => {
                let error = node.redactor.redact(&error.to_string());
                log::warn!(
                    "Node {}: its reset was verified, but its Node object {node_name} was not deleted: {error}",
                    node.name
                );
                check.delete_error = Some(error.clone());
                format!("[keadm-batch] could not delete the Node {node_name}: {error}")
            }
        };
        Transcript::add_notes(&outcome, &node.redactor, &[line]);
        outcome.cluster = Some(check);
        outcome
    }

    /// Without `--delete-nodes`: the resets that succeeded whose Node object the cluster
    /// still has, from one list, marked in their outcomes (`left_behind`).
    pub fn mark_left_behind(&self, nodes: &[NodePlan], outcomes: &mut [NodeOutcome]) {
        if self.delete_nodes {
            return;
        }
        let resets: Vec<&mut NodeOutcome> = outcomes
            .iter_mut()
            .filter(|o| o.phase == Phase::Succeeded)
            .filter(|o| {
                nodes
                    .iter()
                    .any(|n| n.index == o.index && n.keadm_args.is_edge_reset())
            })
            .collect();
        if resets.is_empty() {
            return;
        }
        let listed = match self.cluster.nodes() {
            Ok(listed) => listed,
            Err(error) => {
                log::warn!("Could not list the cluster's Nodes after the resets: {error}");
                return;
            }
        };
        let now = SystemTime::now();
        for outcome in resets {
            let Some(node) = nodes.iter().find(|n| n.index == outcome.index) else {
                continue;
            };
            let node_name = verify::node_name(node);
            if let Some(state) = listed.iter().find(|s| s.name == node_name) {
                outcome.cluster = Some(ClusterCheck {
                    node_name,
                    left_behind: Some(state.describe(now)),
                    ..ClusterCheck::default()
                });
            }
        }
    }
}

impl verify::Finish for ClusterRun {
    /// `--drain`: a node that succeeded has its Node uncordoned; others stay cordoned.
    fn finish(&self, outcome: NodeOutcome) -> NodeOutcome {
        match &self.drain {
            Some(drain) => drain.finish(&self.cluster, outcome),
            None => outcome,
        }
    }
}

/// What the cloud serves, for the joins: `--cloud-node-limit` wins over cloudcore's
/// ConfigMap and Deployment, which are read either way (what they say goes into the
/// message); `Err` says why neither gives it.
fn capacity(cluster: &Cluster, flag: Option<u64>) -> Result<Capacity, String> {
    let read = cluster.cloudcore_capacity();
    match (flag, read) {
        (Some(total), Ok(read)) => Ok(Capacity {
            from: format!(
                "--cloud-node-limit, over nodeLimit {} × {} read from {}",
                read.node_limit
                    .unwrap_or(cluster::capacity::DEFAULT_NODE_LIMIT),
                read.replicas.unwrap_or(1),
                read.from
            ),
            ..Capacity::of_flag(total)
        }),
        (Some(total), Err(_)) => Ok(Capacity::of_flag(total)),
        (None, read) => read,
    }
}

/// The note when the cloud's capacity is unknown: the joins are not counted against it.
fn unknown_capacity(why: &str) -> String {
    format!(
        "cloudcore's capacity was not checked: {why}, and no --cloud-node-limit was given (it is the most edge nodes the cloud serves: cloudcore's nodeLimit times its replicas)"
    )
}

/// Which NodeGroups the selected joins will be in, by their Node name or the labels the
/// config gives them; empty unless a join has labels or taints and the cluster lets
/// NodeGroups be listed. A node in two groups (KubeEdge allows one) is listed in both.
fn node_groups(cluster: &Cluster, plan: &Plan) -> Vec<(String, Vec<String>)> {
    let joins: Vec<&NodePlan> = plan
        .nodes
        .iter()
        .filter(|n| n.keadm_args.is_join())
        .collect();
    if joins.iter().all(|n| n.placement.is_empty()) {
        return Vec::new();
    }
    let Some(groups) = cluster.node_groups() else {
        return Vec::new();
    };
    let mut members: Vec<(String, Vec<String>)> = Vec::new();
    for node in joins {
        let node_name = verify::node_name(node);
        for group in cluster::node_group::groups_of(&groups, &node_name, &node.placement.labels) {
            match members.iter_mut().find(|(name, _)| *name == group.name) {
                Some((_, nodes)) => nodes.push(node.name.clone()),
                None => members.push((group.name.clone(), vec![node.name.clone()])),
            }
        }
    }
    members
}

/// The recap's NodeGroups: each group the run's joins are in, with the nodes that
/// joined it (succeeded) and those that did not. Empty without groups.
pub fn node_groups_recap(run: Option<&ClusterRun>, outcomes: &[NodeOutcome]) -> String {
    let mut lines = String::new();
    for (group, nodes) in run.map_or(&[][..], |r| &r.node_groups[..]) {
        let (joined, not): (Vec<&String>, Vec<&String>) = nodes.iter().partition(|name| {
            outcomes
                .iter()
                .any(|o| &o.name == *name && o.phase == crate::outcome::Phase::Succeeded)
        });
        if joined.is_empty() && not.is_empty() {
            continue;
        }
        let mut line = format!("  {group}: ");
        if !joined.is_empty() {
            let _ = write!(line, "{} joined", crate::report::names::compact(&joined));
        }
        if !not.is_empty() {
            let sep = if joined.is_empty() { "" } else { "; " };
            let _ = write!(line, "{sep}{} did not", crate::report::names::compact(&not));
        }
        let _ = writeln!(lines, "{line}");
    }
    crate::report::recap::titled(
        "NodeGroups the joins' Nodes are in (by name or by the labels the config gives them)",
        lines,
    )
}

/// The recap's list of Node objects that resets left in the cluster: those not deleted
/// without `--delete-nodes`, and those whose delete failed. Empty when there is none.
pub fn left_behind_recap(outcomes: &[NodeOutcome]) -> String {
    let mut lines = String::new();
    for outcome in outcomes {
        let Some(check) = &outcome.cluster else {
            continue;
        };
        let why = match (&check.left_behind, &check.delete_error) {
            (Some(state), _) => state.clone(),
            (None, Some(error)) => format!("not deleted: {error}"),
            (None, None) => continue,
        };
        let _ = writeln!(
            lines,
            "  {} (node {}): {why}",
            check.node_name, outcome.name
        );
    }
    crate::report::recap::titled(
        "Node objects left in the cluster by resets (delete them with `kubectl delete node NAME`, or run the reset with --delete-nodes)",
        lines,
    )
}
