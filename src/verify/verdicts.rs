//! The verdicts of the wait: what a node's outcome becomes when its Node is Ready, late,
//! never registered, or the wait was cancelled; each notes itself in the node's
//! transcript.

use std::time::{Duration, SystemTime};

use super::Waiting;
use crate::cluster::{NodeWatch, Seen};
use crate::diagnosis::FailureClass;
use crate::kubeedge::classify;
use crate::node_text::one_line;
use crate::outcome::{ClusterCheck, NodeOutcome, Phase};
use crate::plan::NodePlan;
use crate::remote::EdgecoreState;
use crate::report::transcript::Transcript;

/// Seconds from keadm's exit to `at`; 0 for what was there before it.
pub(super) fn after(keadm_exit: SystemTime, at: SystemTime) -> f64 {
    at.duration_since(keadm_exit)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub(super) fn epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The plan of the node at `index` in the config. `nodes` is the run's selection, in
/// config order, so it may hold fewer nodes than the config (`--only`, `--shard`,
/// `--retry-failed`): a node is found by its index, never by its place in the selection.
pub(super) fn plan_of(nodes: &[NodePlan], index: usize) -> Option<&NodePlan> {
    nodes
        .binary_search_by_key(&index, |n| n.index)
        .ok()
        .map(|at| &nodes[at])
}

/// Adds `lines` to the node's transcript (its pipeline has closed it).
pub(super) fn note(nodes: &[NodePlan], outcome: &NodeOutcome, lines: &[String]) {
    let Some(node) = plan_of(nodes, outcome.index) else {
        return;
    };
    let Some(path) = &outcome.transcript else {
        return;
    };
    if let Ok(mut transcript) =
        Transcript::reopen(std::path::Path::new(path), node.redactor.clone(), 64 << 10)
    {
        for line in lines {
            transcript.note(line);
        }
        transcript.finish();
    }
}

pub(super) fn ready_outcome(waiting: Waiting, seen: &Seen, nodes: &[NodePlan]) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        keadm_exit,
        ..
    } = waiting;
    let ready_at = seen.ready_since.unwrap_or_else(SystemTime::now);
    let check = ClusterCheck {
        node_name: node_name.clone(),
        registered_after: Some(after(keadm_exit, seen.first_seen)),
        ready_after: Some(after(keadm_exit, ready_at)),
        condition: None,
        version: seen.state.kubelet_version.clone(),
        ..ClusterCheck::default()
    };
    note(
        nodes,
        &outcome,
        &[format!(
            "the cluster has the Node {node_name}: registered {:.1} s and Ready {:.1} s after keadm exited{}",
            check.registered_after.unwrap_or(0.0),
            check.ready_after.unwrap_or(0.0),
            check
                .version
                .as_deref()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        )],
    );
    outcome.finished_at = epoch(ready_at).max(outcome.finished_at);
    outcome.cluster = Some(check);
    outcome
}

/// Marks `outcome` failed after keadm's success, for `class`, with `error` (one line),
/// and says so in the node's transcript.
pub(super) fn failed(
    nodes: &[NodePlan],
    outcome: &mut NodeOutcome,
    class: FailureClass,
    error: String,
    detail: Option<String>,
) {
    note(nodes, outcome, &[format!("{class}: {error}")]);
    outcome.phase = Phase::Failed;
    outcome.failed_in = Some(Phase::Verifying);
    outcome.failure_class = Some(class);
    outcome.error = Some(crate::node_text::escape_controls(&one_line(&error, 2000)));
    outcome.last_output = detail.map(|d| crate::node_text::escape_controls(&one_line(&d, 400)));
    outcome.finished_at = epoch(SystemTime::now());
}

/// The operator cancelled the run while the node waited: it joined, and whether its Node
/// would have been Ready is not known.
pub(super) fn cancelled_outcome(waiting: Waiting, seen: Option<&Seen>, nodes: &[NodePlan]) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        keadm_exit,
        ..
    } = waiting;
    let error = format!(
        "keadm join exited 0; the wait for the Node {node_name} to be Ready was cancelled by the operator ({})",
        match seen {
            Some(seen) => format!(
                "it had registered {:.1} s after keadm exited",
                after(keadm_exit, seen.first_seen)
            ),
            None => "it had not registered yet".to_string(),
        }
    );
    note(nodes, &outcome, &[format!("interrupted: {error}")]);
    outcome.phase = Phase::Interrupted;
    outcome.failed_in = Some(Phase::Verifying);
    outcome.error = Some(error);
    outcome.finished_at = epoch(SystemTime::now());
    outcome.cluster = Some(ClusterCheck {
        node_name,
        registered_after: seen.map(|s| after(keadm_exit, s.first_seen)),
        condition: seen
            .and_then(|s| s.state.ready.as_ref())
            .map(|c| c.describe()),
        ..ClusterCheck::default()
    });
    outcome
}

pub(super) fn not_ready_outcome(
    waiting: Waiting,
    seen: &Seen,
    timeout: Duration,
    nodes: &[NodePlan],
) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        keadm_exit,
        ..
    } = waiting;
    let registered_after = after(keadm_exit, seen.first_seen);
    let condition = match &seen.state.ready {
        Some(c) if c.is_true() => {
            "Ready, but unchanged since before this run: the Node is an earlier join's, and nothing has written it since (this node's edgecore would when it connects)".to_string()
        }
        Some(c) => c.describe(),
        None => "the Node has no Ready condition yet".to_string(),
    };
    let error = format!(
        "keadm join exited 0 and the Node {node_name} registered {registered_after:.1} s later, but it was not Ready within {} s of keadm's exit: {condition}",
        timeout.as_secs()
    );
    failed(
        nodes,
        &mut outcome,
        FailureClass::NotReady,
        error,
        Some(condition.clone()),
    );
    outcome.cluster = Some(ClusterCheck {
        node_name,
        registered_after: Some(registered_after),
        condition: Some(condition),
        version: seen.state.kubelet_version.clone(),
        ..ClusterCheck::default()
    });
    outcome
}

pub(super) fn not_registered_outcome(
    waiting: Waiting,
    answer: Result<EdgecoreState, String>,
    watch: &NodeWatch,
    timeout: Duration,
    nodes: &[NodePlan],
) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        ..
    } = waiting;
    let mut error = format!(
        "keadm join exited 0, but no Node named {node_name} appeared in the cluster within {} s of its exit",
        timeout.as_secs()
    );
    let mut detail = None;
    match answer {
        Ok(state) => {
            match classify::cause(&state.log) {
                Some((class, line)) => {
                    error.push_str(&format!(
                        "; edgecore's log names the cause ({}): {}",
                        class.title(),
                        one_line(&line, 600)
                    ));
                    detail = Some(line);
                }
                None => match state.running {
                    Some(false) => error.push_str(
                        "; edgecore is not running on the node and its log names no cause",
                    ),
                    _ => error.push_str(
                        "; edgecore's log names no cause the tool knows (see the transcript)",
                    ),
                },
            }
            if let Some(hostname) = state.hostname.filter(|h| *h != node_name)
                && watch.seen(&hostname).is_some()
            {
                error.push_str(&format!(
                    "; the cluster has a Node named {hostname}, the node's hostname: pass --edgenode-name={node_name} in keadmCmd"
                ));
            }
        }
        Err(reason) => error.push_str(&format!("; the node could not be asked why: {reason}")),
    }
    if let Some(trouble) = watch.trouble() {
        error.push_str(&format!(
            "; the cluster's watch had trouble meanwhile: {trouble}"
        ));
    }
    failed(
        nodes,
        &mut outcome,
        FailureClass::NotRegistered,
        error,
        detail,
    );
    outcome.cluster = Some(ClusterCheck {
        node_name,
        ..ClusterCheck::default()
    });
    outcome
}
