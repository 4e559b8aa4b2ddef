//! The verdicts of the wait: what a node's outcome becomes when its Node is Ready, late,
//! never registered, or the wait was cancelled; each notes itself in the node's
//! transcript.

use std::time::{Duration, SystemTime};

use super::{Expect, Waiting};
use crate::cluster::{Capacity, NodeWatch, Seen};
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
    if let Some(node) = plan_of(nodes, outcome.index) {
        Transcript::add_notes(outcome, &node.redactor, lines);
    }
}

pub(super) fn ready_outcome(waiting: Waiting, seen: &Seen, nodes: &[NodePlan]) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        keadm_exit,
        expect,
        ..
    } = waiting;
    let upgraded = matches!(expect, Expect::Upgraded(_));
    // An upgrade is Ready on the new version when the gate saw it so (now); a join when
    // its Ready condition turned true, never before keadm's exit.
    let ready_at = if upgraded {
        SystemTime::now()
    } else {
        seen.ready_since
            .unwrap_or_else(SystemTime::now)
            .max(keadm_exit)
    };
    let check = ClusterCheck {
        node_name: node_name.clone(),
        registered_after: Some(after(keadm_exit, seen.first_seen)),
        ready_after: Some(after(keadm_exit, ready_at)),
        ready_after_start: Some((epoch(ready_at) - outcome.started_at).max(0.0)),
        condition: None,
        version: seen.state.kubelet_version.clone(),
        ..ClusterCheck::default()
    };
    note(nodes, &outcome, &[ready_line(&check, upgraded)]);
    outcome.finished_at = epoch(ready_at).max(outcome.finished_at);
    let differences = match plan_of(nodes, outcome.index) {
        Some(plan) if !upgraded => plan
            .placement
            .differences(&seen.state.labels, &seen.state.taints),
        _ => Vec::new(),
    };
    outcome.cluster = Some(check);
    if !differences.is_empty() {
        let shown = differences.join("; ");
        failed(
            nodes,
            &mut outcome,
            FailureClass::LabelsMismatch,
            format!(
                "keadm join exited 0 and the Node {node_name} is Ready, but it does not have the labels and taints the config asks for: {shown}"
            ),
            Some(shown),
        );
    }
    outcome
}

/// The transcript's line for a Node found Ready: both figures, from keadm's exit and from
/// the node's start, e.g. `the cluster has the Node edge-1: registered 0.0 s and Ready 0.0
/// s after keadm exited, Ready 31.2 s after the node's start (v1.32.10-kubeedge-v1.23.1)`.
pub(super) fn ready_line(check: &ClusterCheck, upgraded: bool) -> String {
    let node_name = &check.node_name;
    let version = check
        .version
        .as_deref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    let ready = check.ready_after.unwrap_or(0.0);
    // Joins name the figure (`Ready 31.2 s after ...`): their line gave registration first.
    let since_start = check
        .ready_after_start
        .map(|s| {
            let which = if upgraded { "" } else { "Ready " };
            format!(", {which}{s:.1} s after the node's start")
        })
        .unwrap_or_default();
    if upgraded {
        format!(
            "the cluster has the Node {node_name} Ready on the new version {ready:.1} s after keadm exited{since_start}{version}"
        )
    } else {
        format!(
            "the cluster has the Node {node_name}: registered {:.1} s and Ready {ready:.1} s after keadm exited{since_start}{version}",
            check.registered_after.unwrap_or(0.0),
        )
    }
}

/// An upgrade that passed on the node whose Node was not Ready on the new version by its
/// deadline: `not_ready` (or `not_registered` when the cluster has no such Node).
pub(super) fn upgrade_not_ready_outcome(
    waiting: Waiting,
    seen: Option<&Seen>,
    timeout: Duration,
    nodes: &[NodePlan],
) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        expect,
        ..
    } = waiting;
    let target = match &expect {
        Expect::Upgraded(v) => v.clone(),
        _ => String::new(),
    };
    let shows = match seen {
        None => format!("the cluster has no Node named {node_name}"),
        Some(seen) => {
            let condition = match &seen.state.ready {
                Some(c) if c.is_true() => "Ready".to_string(),
                Some(c) => c.describe(),
                None => "no Ready condition".to_string(),
            };
            format!(
                "the Node shows {} and {condition}",
                seen.state
                    .kubelet_version
                    .as_deref()
                    .map(|v| format!("version {v}"))
                    .unwrap_or_else(|| "no version".to_string())
            )
        }
    };
    let error = format!(
        "keadm upgrade edge succeeded on the node (edgecore runs {target}), but the Node {node_name} was not Ready on {target} within {} s of keadm's exit: {shows}",
        timeout.as_secs()
    );
    let class = if seen.is_some() {
        FailureClass::NotReady
    } else {
        FailureClass::NotRegistered
    };
    failed(nodes, &mut outcome, class, error, Some(shows.clone()));
    outcome.cluster = Some(ClusterCheck {
        node_name,
        condition: Some(shows),
        version: seen.and_then(|s| s.state.kubelet_version.clone()),
        ..ClusterCheck::default()
    });
    outcome
}

/// The end of a rolled-back node's wait: Ready again on the version it went back to, or
/// not by its deadline. The node's outcome stays its upgrade's failure; the rollback's
/// record says whether it brought the node back.
pub(super) fn rollback_waited(
    waiting: Waiting,
    seen: Option<&Seen>,
    ready: bool,
    timeout: Duration,
    nodes: &[NodePlan],
) -> NodeOutcome {
    let Waiting {
        mut outcome,
        node_name,
        expect,
        ..
    } = waiting;
    let version = match &expect {
        Expect::RolledBack(Some(v)) => format!(" on {v}"),
        _ => String::new(),
    };
    let line = if ready {
        format!("rolled back: the Node {node_name} is Ready{version} again")
    } else {
        format!(
            "the rollback did not bring the node back: the Node {node_name} was not Ready{version} within {} s{}",
            timeout.as_secs(),
            seen.map(|s| format!(
                " ({})",
                s.state
                    .ready
                    .as_ref()
                    .map(|c| c.describe())
                    .unwrap_or_else(|| "no Ready condition".to_string())
            ))
            .unwrap_or_else(|| " (no such Node)".to_string())
        )
    };
    note(nodes, &outcome, std::slice::from_ref(&line));
    if let Some(rollback) = outcome.upgrade.as_mut().and_then(|u| u.rollback.as_mut()) {
        rollback.ready = Some(ready);
        if !ready {
            rollback.succeeded = false;
            rollback.error = Some(line);
        }
    }
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
pub(super) fn cancelled_outcome(
    waiting: Waiting,
    seen: Option<&Seen>,
    nodes: &[NodePlan],
) -> NodeOutcome {
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

/// What a node that never registered says when its log matches no known cause: edgecore's
/// last error line, if it logged one, is the lead.
fn no_known_cause(state: &EdgecoreState) -> String {
    match (state.running, classify::last_error(&state.log)) {
        (Some(false), Some(line)) => format!(
            "; edgecore is not running on the node, and the last error in its log is: {}",
            one_line(line, 600)
        ),
        (Some(false), None) => {
            "; edgecore is not running on the node and its log names no cause".to_string()
        }
        (_, Some(line)) => format!(
            "; edgecore's log names no cause the tool knows; its last error is: {}",
            one_line(line, 600)
        ),
        (_, None) => {
            "; edgecore's log names no cause the tool knows (see the transcript)".to_string()
        }
    }
}

/// `full`: the cloud's limit, when it was reached ([`at_capacity`]).
pub(super) fn not_ready_outcome(
    waiting: Waiting,
    seen: &Seen,
    full: Option<String>,
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
    let mut error = format!(
        "keadm join exited 0 and the Node {node_name} registered {registered_after:.1} s later, but it was not Ready within {} s of keadm's exit: {condition}",
        timeout.as_secs()
    );
    if let Some(full) = full {
        error.push_str(&format!(". {full}"));
    }
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

/// `full`: the cloud's limit, when it was reached ([`at_capacity`]).
pub(super) fn not_registered_outcome(
    waiting: Waiting,
    answer: Result<EdgecoreState, String>,
    watch: &NodeWatch,
    full: Option<String>,
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
                None => error.push_str(&no_known_cause(&state)),
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
    if let Some(full) = full {
        error.push_str(&format!(". {full}"));
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

/// The cause of a join that did not turn Ready while the cloud served all it may, with
/// `others` edge Nodes registered besides it: cloudhub drops the session of a node past
/// `nodeLimit` ("Fail to serve node ..., reach node limit") after keadm join has finished.
/// On KubeEdge v1.23.1 the node's first messages still reach the cloud, so its Node
/// registers and stays NotReady (`CSINode is not yet initialized`: no answer comes back);
/// elsewhere it may never register. `None` below the limit, or when it is unknown.
pub(super) fn at_capacity(
    capacity: Option<&Capacity>,
    others: usize,
    node_name: &str,
) -> Option<String> {
    let capacity = capacity?;
    (others as u64 >= capacity.total()).then(|| {
        format!(
            "{} and {others} other edge {} registered: cloudhub refuses node {node_name} (\"reach node limit\") and serves it nothing. Raise nodeLimit or add cloudcore replicas",
            capacity.describe(),
            if others == 1 { "Node is" } else { "Nodes are" }
        )
    })
}

/// An upgrade whose node names another Node in its edgecore.yaml (`hostnameOverride`)
/// than the config's `name`: failed as `name_mismatch`, before any wait, since which of
/// the two Nodes is this node's cannot be told from the cluster.
pub(super) fn name_mismatch_outcome(
    mut outcome: NodeOutcome,
    name: &str,
    reported: &str,
    node: &NodePlan,
) -> NodeOutcome {
    let error = format!(
        "keadm upgrade edge succeeded on the node, but its /etc/kubeedge/config/edgecore.yaml names the Node {reported} (hostnameOverride), not {name}, the config's name for it: the Ready gate waits only on {name}, and was not waited for. Set nodeName to {reported} if that is this node's Node, or fix hostnameOverride on the node"
    );
    failed(
        std::slice::from_ref(node),
        &mut outcome,
        FailureClass::NameMismatch,
        error,
        Some(format!("edgecore.yaml: hostnameOverride: {reported}")),
    );
    outcome.cluster = Some(ClusterCheck {
        node_name: name.to_string(),
        ..ClusterCheck::default()
    });
    outcome
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::cluster::NodeState;

    fn waiting(started_ago: f64, keadm_exit: SystemTime, expect: Expect) -> Waiting {
        let mut outcome = NodeOutcome::not_run(0, "edge-1", "10.0.0.1:22", Phase::Verifying, "");
        outcome.error = None;
        outcome.started_at = epoch(SystemTime::now()) - started_ago;
        Waiting {
            outcome,
            node_name: "edge-1".into(),
            keadm_exit,
            deadline: Instant::now(),
            expect,
        }
    }

    fn seen(at: SystemTime) -> Seen {
        Seen {
            state: NodeState {
                kubelet_version: Some("v1.32.10-kubeedge-v1.23.1".into()),
                ..NodeState::default()
            },
            first_seen: at,
            ready_since: Some(at),
            baseline_version: None,
        }
    }

    /// A node that never registered while the cloud was at its limit names the limit, the
    /// count and the fix; below the limit, or with no limit known, nothing is said.
    #[test]
    fn a_refused_node_names_the_cloud_s_limit_only_at_it() {
        let capacity = Capacity {
            node_limit: Some(2),
            replicas: Some(1),
            from: "the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore".into(),
            flag: None,
        };
        assert_eq!(
            at_capacity(Some(&capacity), 2, "edge-3").unwrap(),
            "CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore) and 2 other edge Nodes are registered: cloudhub refuses node edge-3 (\"reach node limit\") and serves it nothing. Raise nodeLimit or add cloudcore replicas"
        );
        assert!(at_capacity(Some(&capacity), 3, "edge-3").is_some());
        assert_eq!(at_capacity(Some(&capacity), 1, "edge-3"), None);
        assert_eq!(at_capacity(None, 900, "edge-3"), None);
    }

    /// Seen on a real fleet of 24 nodes: edgecore's kubelet ran out of inotify instances,
    /// logged it and stopped. Its line is quoted, not "no cause".
    #[test]
    fn a_stopped_edgecore_with_no_known_cause_quotes_its_last_error() {
        let state = EdgecoreState {
            running: Some(false),
            hostname: None,
            log: vec![
                "E1206 06:12:01.000000 5151 kubelet.go:1493] \"Failed to start cAdvisor\" err=\"inotify_init: too many open files\"".into(),
                "I1206 06:12:01.100000 5151 core.go:50] shutting down".into(),
            ],
        };
        assert_eq!(
            no_known_cause(&state),
            "; edgecore is not running on the node, and the last error in its log is: E1206 06:12:01.000000 5151 kubelet.go:1493] \"Failed to start cAdvisor\" err=\"inotify_init: too many open files\""
        );
        let quiet = EdgecoreState {
            log: vec!["I1206 06:12:01.100000 5151 core.go:50] started".into()],
            ..state
        };
        assert_eq!(
            no_known_cause(&quiet),
            "; edgecore is not running on the node and its log names no cause"
        );
    }

    /// keadm join exits only after edgecore ran a while, so its Node is often Ready
    /// before keadm's exit: 0 s after it. The time from the node's start says how long
    /// the node took; the outcome and the transcript's line give both.
    #[test]
    fn a_ready_join_gives_its_time_from_keadm_s_exit_and_from_the_node_s_start() {
        let keadm_exit = SystemTime::now() - Duration::from_secs(2);
        let w = waiting(30.0, keadm_exit, Expect::Joined);
        let outcome = ready_outcome(w, &seen(keadm_exit - Duration::from_secs(1)), &[]);
        let check = outcome.cluster.clone().unwrap();
        assert_eq!(check.registered_after, Some(0.0));
        assert_eq!(check.ready_after, Some(0.0));
        let since_start = check.ready_after_start.unwrap();
        assert!((27.5..28.5).contains(&since_start), "{check:?}");
        assert_eq!(
            ready_line(&check, false),
            format!(
                "the cluster has the Node edge-1: registered 0.0 s and Ready 0.0 s after keadm exited, Ready {since_start:.1} s after the node's start (v1.32.10-kubeedge-v1.23.1)"
            )
        );
    }

    #[test]
    fn an_upgrade_ready_on_its_new_version_gives_both_figures() {
        let keadm_exit = SystemTime::now() - Duration::from_secs(3);
        let w = waiting(12.0, keadm_exit, Expect::Upgraded("v1.23.1".into()));
        let outcome = ready_outcome(w, &seen(keadm_exit), &[]);
        let check = outcome.cluster.unwrap();
        let ready = check.ready_after.unwrap();
        let since_start = check.ready_after_start.unwrap();
        assert!((2.5..4.0).contains(&ready), "{check:?}");
        assert!((11.5..13.0).contains(&since_start), "{check:?}");
        assert_eq!(
            ready_line(&check, true),
            format!(
                "the cluster has the Node edge-1 Ready on the new version {ready:.1} s after keadm exited, {since_start:.1} s after the node's start (v1.32.10-kubeedge-v1.23.1)"
            )
        );
    }
}
