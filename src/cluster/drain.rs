//! Cordon and drain (`--drain`), as `kubectl drain` does them: the Node marked
//! unschedulable, its pods evicted through the Eviction subresource (policy/v1, which
//! honours PodDisruptionBudgets) and waited for until they are gone; mirror pods,
//! DaemonSet pods and finished pods are left where they are. Every step is bounded by
//! the drain's deadline and each request by [`REQUEST_TIMEOUT`], and the operator's
//! second Ctrl-C stops it between and during requests.
//!
//! The cordon carries an annotation naming the run ([`CORDONED_BY`]), so a later run
//! tells a Node that an earlier keadm-batch run left cordoned (its node failed) from one
//! the operator cordoned: the first it uncordons once its node succeeds, the second never.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::future::{Either, select};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::pod_state::{PodLeft, PodOnNode};
use super::{Cluster, Guard, Permission, REQUEST_TIMEOUT};
use crate::cancel::Cancel;
use crate::node_text::{escape_controls, one_line};
use crate::stage::error_chain;

/// What `--drain` needs besides reading nodes: to cordon and uncordon them, to list the
/// pods on them (in every namespace), and to evict those pods.
pub const PERMISSIONS: [Permission; 3] = [
    Permission::nodes("patch"),
    Permission {
        verb: "list",
        resource: "pods",
        subresource: None,
        namespace: None,
    },
    Permission {
        verb: "create",
        resource: "pods",
        subresource: Some("eviction"),
        namespace: None,
    },
];

/// The annotation a cordon of this tool puts on the Node: the run's id.
pub const CORDONED_BY: &str = "keadm-batch/cordoned-by-run";

/// How often an eviction a PodDisruptionBudget refused is asked again (as kubectl drain).
const EVICTION_RETRY: Duration = Duration::from_secs(5);
/// How often the pods evicted are looked for until they are gone.
const GONE_POLL: Duration = Duration::from_secs(1);
/// How often a wait looks at the operator's Ctrl-C.
const TICK: Duration = Duration::from_millis(100);
/// The most pods one list page holds, and the most pages read of one Node's pods.
const PAGE: u32 = 500;
const PAGES: usize = 20;
/// The most of a server's message kept in ours.
const MESSAGE_MAX: usize = 300;

/// How the Node was before this run's cordon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cordon {
    /// It was schedulable: this run cordoned it.
    Now,
    /// Someone cordoned it before the run: it stays cordoned whatever happens.
    Before,
    /// An earlier keadm-batch run (its id) cordoned it and left it so: this run takes the
    /// cordon as its own.
    EarlierRun(String),
    /// Left alone: the Node is Ready on this version already, the upgrade's target, so
    /// the upgrade does nothing there and nothing needs to move.
    Unneeded(String),
    /// Not cordoned, nor anything else written: the Node is not this node's (see
    /// `cluster::guard`), as the sentence says.
    Refused(String),
}

/// Why a request of the drain got no answer.
enum Unanswered {
    TimedOut,
    Cancelled,
}

/// Why a drain did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainFailure {
    /// The operator's second Ctrl-C.
    Cancelled,
    /// The deadline passed with these pods still on the Node.
    TimedOut {
        timeout: Duration,
        left: Vec<PodLeft>,
    },
    /// The API server could not be asked, or refused for another reason than a budget.
    Api(String),
}

impl std::fmt::Display for DrainFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainFailure::Cancelled => f.write_str("the drain was cancelled by the operator"),
            DrainFailure::TimedOut { timeout, left } => {
                let listed: Vec<String> = left
                    .iter()
                    .map(|p| format!("{} ({})", p.pod, p.why))
                    .collect();
                write!(
                    f,
                    "it was not drained within {} s (--drain-timeout): {} pod(s) left: {}",
                    timeout.as_secs(),
                    left.len(),
                    listed.join("; ")
                )
            }
            DrainFailure::Api(error) => f.write_str(error),
        }
    }
}

/// What a drain did: the pods it evicted (also when it failed), those it left alone, and
/// how it ended.
#[derive(Debug)]
pub struct Drained {
    pub evicted: Vec<String>,
    pub left_alone: Vec<String>,
    pub ended: Result<(), DrainFailure>,
}

/// A server's text, as our messages may hold it: one line, bounded, no control characters.
fn server_text(text: &str) -> String {
    escape_controls(&one_line(text, MESSAGE_MAX))
}

/// What went wrong with a request, bounded: an API server's answer as its code, reason
/// and message (`500 InternalError: etcdserver: request timed out`), anything else as
/// the error's own chain.
fn error_text(error: &kube::Error) -> String {
    server_text(&match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => error_chain(other),
    })
}

/// An eviction refused with 429: the budget's message, and the causes the server names
/// (`The disruption budget web needs 1 healthy pods and has 1 currently`).
fn refusal(status: &kube::core::Status) -> String {
    let mut text = status.message.clone();
    for cause in status.details.iter().flat_map(|d| d.causes.iter()) {
        if !cause.message.is_empty() {
            text.push(' ');
            text.push_str(&cause.message);
        }
    }
    server_text(&text)
}

impl Cluster {
    /// Runs one request on the client's runtime, for at most [`REQUEST_TIMEOUT`] and
    /// never past `until`; `cancel`'s second Ctrl-C stops the wait for it.
    fn ask<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
        until: Instant,
        cancel: Option<&Cancel>,
    ) -> Result<Result<T, kube::Error>, Unanswered> {
        let limit = until
            .saturating_duration_since(Instant::now())
            .min(REQUEST_TIMEOUT);
        self.runtime.block_on(async {
            let answer = Box::pin(tokio::time::timeout(limit, request));
            let cancelled = Box::pin(async {
                while !cancel.is_some_and(Cancel::aborting) {
                    tokio::time::sleep(TICK).await;
                }
            });
            match select(answer, cancelled).await {
                Either::Left((Ok(answer), _)) => Ok(answer),
                Either::Left((Err(_elapsed), _)) => Err(Unanswered::TimedOut),
                Either::Right(_) => Err(Unanswered::Cancelled),
            }
        })
    }

    /// A request that is not part of a drain's deadline (the cordon, the uncordon): the
    /// server's answer, or why there is none, as a sentence about `what` (these errors
    /// come while a node runs, so they are not [`ClusterError`]'s, which say that no node
    /// was touched).
    fn ask_once<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<Result<T, kube::Error>, String> {
        self.ask(request, Instant::now() + REQUEST_TIMEOUT, None)
            .map_err(|_| {
                format!(
                    "the API server {} did not answer within {} s when asked {what}",
                    self.server,
                    REQUEST_TIMEOUT.as_secs()
                )
            })
    }

    /// The server's refusal of `what`, in a sentence.
    fn refused(&self, what: &str, error: &kube::Error) -> String {
        format!(
            "the API server {} could not be asked {what}: {}",
            self.server,
            error_text(error)
        )
    }

    /// Cordons the Node `name` (`spec.unschedulable: true`, by a merge patch that also
    /// puts [`CORDONED_BY`] `run_id` on it), unless it is cordoned already, or it is Ready
    /// on `unless_on` (an upgrade's target: the upgrade will leave that node alone).
    /// `Ok(None)` when the cluster has no such Node.
    ///
    /// Before anything is written, `guard` must find the Node this node's; `note` hears
    /// why it is, for the node's transcript.
    pub fn cordon(
        &self,
        name: &str,
        run_id: &str,
        unless_on: Option<&str>,
        guard: &Guard,
        note: &mut dyn FnMut(String),
    ) -> Result<Option<Cordon>, String> {
        let name = super::api_name(name)?;
        if let Err(why) = guard.names(name) {
            return Ok(Some(Cordon::Refused(why)));
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let what = format!("for the node {name}");
        let Some(node) = self
            .ask_once(&what, api.get_opt(name))?
            .map_err(|e| self.refused(&what, &e))?
        else {
            return Ok(None);
        };
        match guard.check(&super::NodeState::of(&node)) {
            Ok(this) => note(this),
            Err(why) => return Ok(Some(Cordon::Refused(why))),
        }
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            let ours = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CORDONED_BY))
                .map(|run| server_text(run));
            return Ok(Some(match ours {
                Some(run) => Cordon::EarlierRun(run),
                None => Cordon::Before,
            }));
        }
        // Not cordoned: an upgrade that will find its target running needs no drain.
        let state = super::NodeState::of(&node);
        if let Some(version) = unless_on.filter(|v| state.is_ready() && state.runs_kubeedge(v)) {
            return Ok(Some(Cordon::Unneeded(version.to_string())));
        }
        let patch = json!({
            "metadata": {"annotations": {CORDONED_BY: run_id}},
            "spec": {"unschedulable": true},
        });
        let what = format!("to cordon the node {name}");
        self.ask_once(
            &what,
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )?
        .map_err(|e| self.refused(&what, &e))?;
        Ok(Some(Cordon::Now))
    }

    /// Uncordons the Node `name` and takes [`CORDONED_BY`] off it; `Ok(false)` when the
    /// cluster has no such Node (a reset's, deleted with `--delete-nodes`).
    pub fn uncordon(&self, name: &str) -> Result<bool, String> {
        let name = super::api_name(name)?;
        let api: Api<Node> = Api::all(self.client.clone());
        // null removes a field in a merge patch: the Node reads as one never cordoned,
        // as after `kubectl uncordon`.
        let patch = json!({
            "metadata": {"annotations": {CORDONED_BY: null}},
            "spec": {"unschedulable": null},
        });
        let what = format!("to uncordon the node {name}");
        match self.ask_once(
            &what,
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )? {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(self.refused(&what, &e)),
        }
    }

    /// The pods bound to the Node `name`, in every namespace (`spec.nodeName=`).
    fn pods_on(
        &self,
        name: &str,
        until: Instant,
        cancel: &Cancel,
    ) -> Result<Vec<PodOnNode>, DrainFailure> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let mut params = ListParams::default()
            .fields(&format!("spec.nodeName={name}"))
            .limit(PAGE);
        let mut pods = Vec::new();
        for _ in 0..PAGES {
            let list = match self.ask(api.list(&params), until, Some(cancel)) {
                Ok(Ok(list)) => list,
                Ok(Err(e)) => {
                    return Err(DrainFailure::Api(format!(
                        "the pods on it could not be listed: {}",
                        error_text(&e)
                    )));
                }
                Err(Unanswered::Cancelled) => return Err(DrainFailure::Cancelled),
                Err(Unanswered::TimedOut) => {
                    return Err(DrainFailure::Api(
                        "the pods on it could not be listed: the API server did not answer in time"
                            .to_string(),
                    ));
                }
            };
            pods.extend(list.items.iter().map(PodOnNode::of));
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(pods),
            }
        }
        Err(DrainFailure::Api(format!(
            "it has more than {} pods, more than a drain here reads",
            PAGE as usize * PAGES
        )))
    }

    /// Drains the Node `name`, which the caller has cordoned: evicts every pod on it but
    /// mirror, DaemonSet and finished pods, asking again every few seconds for those a
    /// PodDisruptionBudget holds (429), then waits until the evicted pods are gone, all
    /// within `timeout`. `note` hears each step, for the node's transcript.
    pub fn drain(
        &self,
        name: &str,
        timeout: Duration,
        cancel: &Cancel,
        note: &mut dyn FnMut(String),
    ) -> Drained {
        let until = Instant::now() + timeout;
        let mut drained = Drained {
            evicted: Vec::new(),
            left_alone: Vec::new(),
            ended: Ok(()),
        };
        drained.ended = self.evict_all(name, timeout, until, cancel, note, &mut drained);
        drained
    }

    fn evict_all(
        &self,
        name: &str,
        timeout: Duration,
        until: Instant,
        cancel: &Cancel,
        note: &mut dyn FnMut(String),
        drained: &mut Drained,
    ) -> Result<(), DrainFailure> {
        let pods = self.pods_on(name, until, cancel)?;
        let (alone, mut to_evict): (Vec<PodOnNode>, Vec<PodOnNode>) =
            pods.into_iter().partition(|p| p.left_alone.is_some());
        drained.left_alone = alone.iter().map(PodOnNode::key).collect();
        note(format!(
            "the Node {name} has {} pod(s) to evict{}{}",
            to_evict.len(),
            if to_evict.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    to_evict
                        .iter()
                        .map(PodOnNode::key)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            if alone.is_empty() {
                String::new()
            } else {
                format!(
                    "; left alone: {}",
                    alone
                        .iter()
                        .map(|p| format!("{} ({})", p.key(), p.left_alone.unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
        // The budgets' refusals, per pod, for the message should the deadline pass.
        let mut refused: BTreeMap<String, String> = BTreeMap::new();
        let mut evicted: Vec<PodOnNode> = Vec::new();
        loop {
            let mut still = Vec::new();
            for pod in to_evict {
                let api: Api<Pod> = Api::namespaced(self.client_once.clone(), &pod.namespace);
                match self.ask(
                    api.evict(&pod.name, &EvictParams::default()),
                    until,
                    Some(cancel),
                ) {
                    Ok(Ok(_)) => {
                        refused.remove(&pod.key());
                        note(format!(
                            "evicted the pod {}{}",
                            pod.key(),
                            if pod.controlled {
                                ""
                            } else {
                                " (no controller owns it: nothing recreates it elsewhere)"
                            }
                        ));
                        drained.evicted.push(pod.key());
                        evicted.push(pod);
                    }
                    // Gone already: nothing to wait for.
                    Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                        refused.remove(&pod.key());
                    }
                    Ok(Err(kube::Error::Api(status))) if status.code == 429 => {
                        let why = refusal(&status);
                        if refused.get(&pod.key()) != Some(&why) {
                            note(format!(
                                "the eviction of {} was refused, asking again every {} s: {why}",
                                pod.key(),
                                EVICTION_RETRY.as_secs()
                            ));
                        }
                        refused.insert(pod.key(), why);
                        still.push(pod);
                    }
                    Ok(Err(e)) => {
                        return Err(DrainFailure::Api(format!(
                            "the pod {} could not be evicted: {}",
                            pod.key(),
                            error_text(&e)
                        )));
                    }
                    Err(Unanswered::Cancelled) => return Err(DrainFailure::Cancelled),
                    // The deadline passed during the request: the pod is still there.
                    Err(Unanswered::TimedOut) => still.push(pod),
                }
            }
            to_evict = still;
            if to_evict.is_empty() {
                break;
            }
            if !pause(EVICTION_RETRY, until, cancel)? {
                let mut left: Vec<PodLeft> = to_evict
                    .iter()
                    .map(|p| PodLeft {
                        pod: p.key(),
                        why: match refused.get(&p.key()) {
                            Some(why) => format!("its eviction was refused: {why}"),
                            None => "its eviction got no answer in time".to_string(),
                        },
                    })
                    .collect();
                left.extend(self.not_gone(name, &evicted, cancel));
                return Err(DrainFailure::TimedOut { timeout, left });
            }
        }
        self.wait_gone(name, evicted, timeout, until, cancel, note)
    }

    /// Waits until none of `evicted` is on the Node `name` any more (a pod of the same
    /// name with another uid is a new one).
    fn wait_gone(
        &self,
        name: &str,
        mut evicted: Vec<PodOnNode>,
        timeout: Duration,
        until: Instant,
        cancel: &Cancel,
        note: &mut dyn FnMut(String),
    ) -> Result<(), DrainFailure> {
        let started = Instant::now();
        loop {
            if evicted.is_empty() {
                return Ok(());
            }
            let on_node = match self.pods_on(name, until, cancel) {
                Ok(pods) => pods,
                // The deadline came during the list: the pods are not known to be gone.
                Err(DrainFailure::Api(_)) if Instant::now() >= until => {
                    let left = PodLeft::not_gone(&evicted, &[]);
                    return Err(DrainFailure::TimedOut { timeout, left });
                }
                Err(failure) => return Err(failure),
            };
            evicted.retain(|p| on_node.iter().any(|q| q.uid == p.uid));
            if evicted.is_empty() {
                note(format!(
                    "the pods evicted are gone from the Node {name} ({:.1} s after their eviction)",
                    started.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            if !pause(GONE_POLL, until, cancel)? {
                let left = PodLeft::not_gone(&evicted, &on_node);
                return Err(DrainFailure::TimedOut { timeout, left });
            }
        }
    }

    /// The evicted pods still on the Node when the deadline passed, from one last list
    /// (none when it cannot be had).
    fn not_gone(&self, name: &str, evicted: &[PodOnNode], cancel: &Cancel) -> Vec<PodLeft> {
        if evicted.is_empty() {
            return Vec::new();
        }
        // The deadline has passed: the last look gets a request's time of its own.
        match self.pods_on(name, Instant::now() + REQUEST_TIMEOUT, cancel) {
            Ok(on_node) => {
                let still: Vec<PodOnNode> = evicted
                    .iter()
                    .filter(|p| on_node.iter().any(|q| q.uid == p.uid))
                    .cloned()
                    .collect();
                PodLeft::not_gone(&still, &on_node)
            }
            Err(_) => Vec::new(),
        }
    }
}

/// Sleeps `wait`, but not past `until`: `Ok(false)` once the deadline has come,
/// `Err(Cancelled)` on the operator's second Ctrl-C.
fn pause(wait: Duration, until: Instant, cancel: &Cancel) -> Result<bool, DrainFailure> {
    let end = (Instant::now() + wait).min(until);
    loop {
        if cancel.aborting() {
            return Err(DrainFailure::Cancelled);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(now < until);
        }
        std::thread::sleep(TICK.min(end - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_budgets_message_and_its_causes_on_one_bounded_line() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]},
            "code": 429}))
        .unwrap();
        assert_eq!(
            refusal(&status),
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 1 healthy pods and has 1 currently"
        );
        let long = kube::core::Status {
            message: format!("x\u{1b}[31m{}", "y".repeat(5000)),
            ..kube::core::Status::default()
        };
        let text = refusal(&long);
        assert!(text.len() < MESSAGE_MAX + 40, "{}", text.len());
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn a_pause_ends_at_the_deadline_or_the_second_ctrl_c() {
        let cancel = Cancel::new();
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(pause(Duration::from_secs(5), soon, &cancel), Ok(false));
        cancel.request();
        cancel.request();
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            pause(Duration::from_secs(5), later, &cancel),
            Err(DrainFailure::Cancelled)
        );
    }

    #[test]
    fn a_timed_out_drain_names_each_pod_left_and_why() {
        let failure = DrainFailure::TimedOut {
            timeout: Duration::from_secs(300),
            left: vec![
                PodLeft {
                    pod: "default/web-1".into(),
                    why: "its eviction was refused: Cannot evict pod".into(),
                },
                PodLeft {
                    pod: "default/db-0".into(),
                    why: "evicted, still on the node".into(),
                },
            ],
        };
        assert_eq!(
            failure.to_string(),
            "it was not drained within 300 s (--drain-timeout): 2 pod(s) left: default/web-1 (its eviction was refused: Cannot evict pod); default/db-0 (evicted, still on the node)"
        );
    }
}
