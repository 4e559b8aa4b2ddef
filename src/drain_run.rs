//! `--drain` in a run: before a node's pipeline, in its worker, its Node is cordoned and
//! drained (`cluster::drain`); a drain that fails ends the node there (`drain_failed`,
//! nothing run on it) and lifts the cordon again. The Node stays cordoned until the
//! node's final outcome, which may come later than its pipeline (after the Ready gate of
//! a verifying run): a success uncordons it, anything else leaves it cordoned, and the
//! recap and summary.json say so. A Node cordoned before the run is never uncordoned.
//!
//! Joins are not drained: their Node does not exist until they have run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::drain::{Cordon, DrainFailure};
use crate::cluster::{Cluster, Guard};
use crate::diagnosis::FailureClass;
use crate::node_text::escape_controls;
use crate::outcome::{DrainRecord, NodeOutcome, Phase, now};
use crate::pipeline;
use crate::plan::NodePlan;
use crate::redact::Redactor;
use crate::report::transcript::Transcript;
use crate::verify;

/// The run's drains: the timeout, and the Nodes cordoned for their node until its final
/// outcome.
pub struct DrainRun {
    pub timeout: Duration,
    held: Mutex<HashMap<usize, Held>>,
}

/// A node between its drain and its final outcome.
struct Held {
    record: DrainRecord,
    /// Whether this run lifts the cordon once the node succeeded: its own cordon, or an
    /// earlier run's.
    ours: bool,
    redactor: Arc<Redactor>,
}

/// What the worker does after [`DrainRun::before`].
pub enum Before {
    /// Run the node's pipeline; then add these lines to its transcript (the pipeline
    /// makes the transcript anew, so what came before it is written after it).
    Go(Vec<String>),
    /// The drain failed (or was cancelled): this is the node's outcome, and nothing ran.
    Stop(Box<NodeOutcome>),
}

impl DrainRun {
    pub fn new(timeout: Duration) -> DrainRun {
        DrainRun {
            timeout,
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cordons and drains the node's Node before anything runs on the node. A join's is
    /// left alone, and so is a Node the cluster does not have (there is nothing on it).
    ///
    /// `guard` holds what the node said of itself before this: nothing is written to a
    /// Node it does not find this node's, and the node then fails as `name_mismatch`
    /// with nothing run on it.
    pub fn before(
        &self,
        cluster: &Cluster,
        node: &NodePlan,
        ctx: &pipeline::Context,
        guard: &Guard,
    ) -> Before {
        let started_at = now();
        let started = Instant::now();
        let node_name = verify::node_name(node);
        let mut record = DrainRecord {
            node_name: node_name.clone(),
            ..DrainRecord::default()
        };
        let mut lines = Vec::new();
        let hold = |record: DrainRecord, ours: bool| {
            self.held().insert(
                node.index,
                Held {
                    record,
                    ours,
                    redactor: node.redactor.clone(),
                },
            );
        };
        if node.keadm_args.is_join() {
            let why = "a join, whose Node does not exist before it runs";
            lines.push(format!("drain: the node is not drained (--drain): {why}"));
            record.not_drained = Some(why.to_string());
            hold(record, false);
            return Before::Go(lines);
        }
        ctx.progress.phase(node.index, &node.name, Phase::Draining);
        // Nothing ran on the node: its outcome is this failure.
        let stop = |record, lines, error, class| {
            Before::Stop(Box::new(self.stopped(
                node,
                ctx,
                (record, lines),
                started_at,
                error,
                class,
            )))
        };
        let target = node
            .edge_task
            .as_ref()
            .filter(|t| t.task == crate::keadm_cmd::EdgeTask::Upgrade)
            .and_then(|t| t.target_version.as_deref());
        let cordon = match cluster.cordon(&node_name, &ctx.run_token, target, guard, &mut |this| {
            lines.push(format!("drain: {this}"));
        }) {
            Ok(Some(cordon)) => cordon,
            Ok(None) => {
                let why = format!("the cluster has no Node named {node_name}");
                log::warn!(
                    "Node {}: not drained (--drain): {why}, so no pod runs on it there. If the node is in the cluster under another name, its pods were not evicted.",
                    node.name
                );
                lines.push(format!("drain: the node is not drained (--drain): {why}"));
                record.not_drained = Some(why);
                hold(record, false);
                return Before::Go(lines);
            }
            Err(error) => {
                let error = format!(
                    "the Node {node_name} could not be cordoned (--drain), so nothing ran on the node: {error}"
                );
                return stop(record, lines, error, FailureClass::DrainFailed);
            }
        };
        let ours = match &cordon {
            Cordon::Refused(why) => {
                let error = format!(
                    "--drain writes only to this node's own Node, and {why}: the Node {node_name} was not cordoned or drained, nothing was written to the cluster, and nothing ran on the node"
                );
                record.not_drained = Some(why.clone());
                return stop(record, lines, error, FailureClass::NameMismatch);
            }
            Cordon::Unneeded(version) => {
                let why = format!(
                    "the Node {node_name} is Ready on {version} already, the upgrade's target, so the upgrade leaves it alone"
                );
                lines.push(format!("drain: the node is not drained (--drain): {why}"));
                record.not_drained = Some(why);
                hold(record, false);
                return Before::Go(lines);
            }
            Cordon::Now => {
                lines.push(format!("drain: cordoned the Node {node_name}"));
                true
            }
            Cordon::Before => {
                record.already_cordoned = true;
                lines.push(format!(
                    "drain: the Node {node_name} was cordoned before the run; it stays cordoned whatever the outcome"
                ));
                false
            }
            Cordon::EarlierRun(run) => {
                record.earlier_run = Some(run.clone());
                lines.push(format!(
                    "drain: the Node {node_name} was left cordoned by the earlier run {run}; this run uncordons it if the node succeeds"
                ));
                true
            }
        };
        record.cordoned = true;
        let drained = cluster.drain(&node_name, self.timeout, ctx.cancel, &mut |line| {
            lines.push(format!("drain: {line}"));
        });
        record.evicted = drained.evicted;
        record.seconds = started.elapsed().as_secs_f64();
        let failure = match drained.ended {
            Ok(()) => {
                lines.push(format!(
                    "drain: the Node {node_name} is drained ({} pod(s) evicted in {:.1} s); the node's command runs now",
                    record.evicted.len(),
                    record.seconds
                ));
                hold(record, ours);
                return Before::Go(lines);
            }
            Err(failure) => failure,
        };
        // Nothing ran on the node: the cordon is lifted again, unless it was there before.
        let lifted = if ours {
            match cluster.uncordon(&node_name) {
                Ok(_) => {
                    record.uncordoned = true;
                    lines.push(format!("drain: uncordoned the Node {node_name} again"));
                    "it was uncordoned again".to_string()
                }
                Err(e) => {
                    record.uncordon_error = Some(node.redactor.redact(&e));
                    lines.push(format!(
                        "drain: the Node {node_name} could not be uncordoned: {e}"
                    ));
                    format!("it could not be uncordoned again and stays cordoned ({e})")
                }
            }
        } else {
            "it stays cordoned, as it was before the run".to_string()
        };
        let error = match &failure {
            DrainFailure::Cancelled => format!(
                "the drain of the Node {node_name} was cancelled by the operator before anything ran on the node; {lifted}"
            ),
            failure => format!(
                "the Node {node_name} was not drained, so nothing ran on the node; {lifted}: {failure}"
            ),
        };
        let mut outcome = self.stopped(
            node,
            ctx,
            (record, lines),
            started_at,
            error,
            FailureClass::DrainFailed,
        );
        if failure == DrainFailure::Cancelled {
            outcome.phase = Phase::Interrupted;
            outcome.failure_class = None;
        }
        Before::Stop(Box::new(outcome))
    }

    /// The outcome of a node whose drain failed or was refused: failed in `draining`, as
    /// `class`, its transcript holding the lines so far and the error.
    fn stopped(
        &self,
        node: &NodePlan,
        ctx: &pipeline::Context,
        (record, mut lines): (DrainRecord, Vec<String>),
        started_at: f64,
        error: String,
        class: FailureClass,
    ) -> NodeOutcome {
        let error = escape_controls(&node.redactor.redact(&error));
        let mut outcome = NodeOutcome::not_run(
            node.index,
            &node.name,
            &node.address(),
            Phase::Failed,
            &error,
        );
        outcome.failed_in = Some(Phase::Draining);
        outcome.failure_class = Some(class);
        outcome.task = Some(node.keadm_args.task());
        outcome.started_at = started_at;
        outcome.drain = Some(record);
        lines.push(format!("failed: {error}"));
        lines.push(format!("failure class: {class}"));
        let path = ctx.run_dir.transcript_path(node.index, &node.name);
        match Transcript::create(&path, node.redactor.clone()) {
            Ok(transcript) => {
                let mut transcript = transcript.labelled(&node.name);
                for line in &lines {
                    transcript.note(line);
                }
                transcript.finish();
                outcome.transcript = Some(path.display().to_string());
            }
            Err(err) => log::warn!(
                "Cannot write the transcript {} of node {}: {err}.",
                path.display(),
                node.name
            ),
        }
        ctx.progress.phase(node.index, &node.name, Phase::Failed);
        outcome
    }

    /// A node's final outcome, just before it is recorded: a node that succeeded has the
    /// cordon this run holds lifted; any other keeps its Node cordoned. The outcome gets
    /// its `drain` record, and the transcript says what became of the Node.
    pub fn finish(&self, cluster: &Cluster, mut outcome: NodeOutcome) -> NodeOutcome {
        let Some(Held {
            mut record,
            ours,
            redactor,
        }) = self.held().remove(&outcome.index)
        else {
            return outcome;
        };
        let name = record.node_name.clone();
        let line = if !record.cordoned {
            None
        } else if !outcome.succeeded() {
            Some(format!(
                "drain: the Node {name} stays cordoned: the node did not succeed (`kubectl uncordon {name}` once it is fixed; a run in which it succeeds uncordons it)"
            ))
        } else if !ours {
            Some(format!(
                "drain: the Node {name} stays cordoned, as it was before the run (`kubectl uncordon {name}` lifts it)"
            ))
        } else if outcome.cluster.as_ref().and_then(|c| c.deleted) == Some(true) {
            record.deleted = true;
            Some(format!(
                "drain: the Node {name} was deleted (--delete-nodes): nothing to uncordon"
            ))
        } else {
            Some(match cluster.uncordon(&name) {
                Ok(true) => {
                    record.uncordoned = true;
                    format!("drain: uncordoned the Node {name}: the node succeeded")
                }
                Ok(false) => {
                    record.deleted = true;
                    format!("drain: the cluster no longer has the Node {name}: nothing to uncordon")
                }
                Err(e) => {
                    let e = redactor.redact(&e);
                    log::warn!(
                        "Node {}: it succeeded, but its Node {name} could not be uncordoned and stays cordoned: {e}",
                        outcome.name
                    );
                    record.uncordon_error = Some(e.clone());
                    format!("drain: the Node {name} could not be uncordoned: {e}")
                }
            })
        };
        Transcript::add_notes(&outcome, &redactor, line.as_slice());
        outcome.drain = Some(record);
        outcome
    }
}

/// The plan's words for the drains.
pub fn describe(timeout: Duration) -> String {
    format!(
        "each node that is not a join has its Node cordoned and drained before its command (--drain: evictions honour PodDisruptionBudgets, within {} s) and uncordoned once it succeeded; a node that fails stays cordoned, and a Node cordoned before the run is never uncordoned",
        timeout.as_secs()
    )
}

/// The recap's list of Nodes the run leaves cordoned, and why. Empty when there is none.
pub fn left_cordoned_recap(outcomes: &[NodeOutcome]) -> String {
    let mut lines = String::new();
    for outcome in outcomes {
        let Some(record) = outcome.drain.as_ref().filter(|r| r.left_cordoned()) else {
            continue;
        };
        let why = if record.already_cordoned {
            "cordoned before the run".to_string()
        } else if let Some(error) = &record.uncordon_error {
            format!("could not be uncordoned: {error}")
        } else if outcome.succeeded() {
            "the node succeeded".to_string()
        } else {
            "the node did not succeed".to_string()
        };
        let _ = writeln!(
            lines,
            "  {} (node {}): {why}",
            record.node_name, outcome.name
        );
    }
    crate::report::recap::titled(
        "Nodes left cordoned in the cluster (--drain; `kubectl uncordon NAME` lifts a cordon once the node is fixed, and a rerun in which the node succeeds lifts this run's)",
        lines,
    )
}
