//! Joins verified from the cluster: a node whose `keadm join` exited 0 is handed over
//! here instead of being recorded, and its worker goes on to the next node. One thread
//! reads the run's one watch on the cluster's Nodes (`cluster::NodeWatch`) and decides each
//! waiting node: Ready (a success, with its times), registered but not Ready by its
//! deadline (`not_ready`, with the Node's condition), or never registered (`not_registered`:
//! only then is the node asked over SSH what its edgecore says). Every node is recorded
//! exactly once, through the same recorder as the rest.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::cancel::Cancel;
use crate::cluster::{Cluster, NodeWatch, Seen};
use crate::diagnosis::FailureClass;
use crate::kubeedge::classify;
use crate::node_text::one_line;
use crate::outcome::{ClusterCheck, NodeOutcome, Phase};
use crate::plan::NodePlan;
use crate::remote::EdgecoreState;
use crate::report::Recorder;
use crate::report::transcript::Transcript;
use crate::{pipeline, pool};

/// The wait for joins' Nodes in the run's cluster (`cluster_run::ClusterRun` asked it,
/// before any node was touched).
pub struct Verification<'c> {
    pub cluster: &'c Cluster,
    pub timeout: Duration,
    /// Runs on each node's final outcome just before it is recorded, whoever records it.
    pub finish: &'c dyn Finish,
}

/// What becomes of a node's final outcome before it is recorded (`--drain` uncordons the
/// Node of a node that succeeded).
pub trait Finish: Sync {
    fn finish(&self, outcome: NodeOutcome) -> NodeOutcome;
}

impl Verification<'_> {
    /// Runs every node as [`pool::run_all`] does, each join that keadm finished handed to
    /// the wait for its Node. One watch for the whole run, started before the first node,
    /// so no Node that registers is missed; the waiting joins hold no worker.
    pub fn run_all(
        &self,
        nodes: &[NodePlan],
        policy: pool::Policy,
        cancel: &Cancel,
        recorder: &Recorder,
        ctx: &pipeline::Context,
        process: &(dyn Fn(&NodePlan) -> NodeOutcome + Sync),
    ) {
        let max_run_num = policy.max_run_num;
        let watch = self.cluster.watch();
        let verifier = Verifier::new(&watch, self.timeout);
        let ask = |asked: &[&NodePlan]| {
            let owned: Vec<NodePlan> = asked.iter().map(|n| (*n).clone()).collect();
            // The run's Ctrl-C does not stop these: the nodes have joined, and their
            // records say why they did not register; a second Ctrl-C aborts each ask.
            pool::probe_all(&owned, max_run_num, &Cancel::new(), |node| {
                pipeline::edgecore_state(node, ctx)
            })
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err("The node was not asked.".to_string())))
            .collect()
        };
        std::thread::scope(|scope| {
            scope.spawn(|| verifier.run(nodes, recorder, cancel, &ask, self.finish));
            pool::run_all_handing_over(
                nodes,
                policy,
                cancel,
                recorder,
                |node| {
                    let outcome = verifier
                        .take(node, process(node))
                        .map(|outcome| self.finish.finish(outcome));
                    if outcome.is_none() {
                        ctx.progress.phase(node.index, &node.name, Phase::Verifying);
                    }
                    outcome
                },
                &|| verifier.settle(),
            );
            verifier.close();
        });
    }
}

/// A join waiting for its Node.
struct Waiting {
    outcome: NodeOutcome,
    node_name: String,
    keadm_exit: SystemTime,
    deadline: Instant,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Taken from `waiting` and being decided (asked over SSH).
    deciding: usize,
    closed: bool,
    /// The deciding thread has ended (or died): nothing more will be decided, so
    /// [`Verifier::settle`] must not wait for it.
    ended: bool,
}

/// Marks the deciding thread's end however it ends, a panic included, so the pool's
/// `settle` never waits for a thread that is gone.
struct Ended<'v, 'a>(&'v Verifier<'a>);

impl Drop for Ended<'_, '_> {
    fn drop(&mut self) {
        self.0.lock().ended = true;
        self.0.changed.notify_all();
    }
}

/// What one look at the waiting nodes took out.
struct Decided {
    /// Ready now, with what the watch saw.
    ready: Vec<(Waiting, Seen)>,
    /// Past their deadline, with what the watch saw (`None`: never registered).
    late: Vec<(Waiting, Option<Seen>)>,
    /// Still waiting when the operator cancelled the run (a second Ctrl-C).
    cancelled: Vec<(Waiting, Option<Seen>)>,
    /// No more nodes will come.
    closed: bool,
}

/// The nodes between keadm's exit and their verdict.
pub struct Verifier<'a> {
    watch: &'a NodeWatch,
    timeout: Duration,
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// Asks nodes that never registered what their edgecore says, one answer per node.
pub type AskNodes<'n> = dyn Fn(&[&NodePlan]) -> Vec<Result<EdgecoreState, String>> + Sync + 'n;

/// How often the deciding thread looks again when nothing woke it.
const TICK: Duration = Duration::from_millis(500);

/// The Node name a join registers under: `--edgenode-name`, else the config's nodeName.
pub fn node_name(node: &NodePlan) -> String {
    node.keadm_args
        .edgenode_name()
        .unwrap_or(&node.name)
        .to_string()
}

impl<'a> Verifier<'a> {
    pub fn new(watch: &'a NodeWatch, timeout: Duration) -> Verifier<'a> {
        Verifier {
            watch,
            timeout,
            queue: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    /// Takes a join whose keadm exited 0 into the wait; any other outcome is returned, to
    /// be recorded now.
    pub fn take(&self, node: &NodePlan, outcome: NodeOutcome) -> Option<NodeOutcome> {
        if !(node.keadm_args.is_join() && outcome.phase == Phase::Succeeded) {
            return Some(outcome);
        }
        let waiting = Waiting {
            node_name: node_name(node),
            keadm_exit: SystemTime::now(),
            deadline: Instant::now() + self.timeout,
            outcome,
        };
        let mut queue = self.lock();
        queue.waiting.push(waiting);
        self.changed.notify_all();
        None
    }

    /// Blocks until every node taken so far is recorded.
    pub fn settle(&self) {
        let mut queue = self.lock();
        while (!queue.waiting.is_empty() || queue.deciding > 0) && !queue.ended {
            queue = self
                .changed
                .wait_timeout(queue, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// No more nodes will come: [`Verifier::run`] returns once the last is decided.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The deciding thread: until closed and empty, records the nodes the watch shows
    /// Ready and those past their deadline. `ask` asks nodes that never registered what
    /// their edgecore says (over SSH, a few at a time).
    pub fn run(
        &self,
        nodes: &[NodePlan],
        recorder: &Recorder,
        cancel: &Cancel,
        ask: &AskNodes,
        finish: &dyn Finish,
    ) {
        let _ended = Ended(self);
        let record = |outcome| recorder.record(finish.finish(outcome));
        loop {
            let generation = self.watch.generation();
            let Decided {
                ready,
                late,
                cancelled,
                closed,
            } = self.take_decided(cancel);
            for (waiting, seen) in ready {
                record(ready_outcome(waiting, &seen, nodes));
            }
            for (waiting, seen) in cancelled {
                record(cancelled_outcome(waiting, seen.as_ref(), nodes));
            }
            let (registered, missing): (Vec<_>, Vec<_>) =
                late.into_iter().partition(|(_, seen)| seen.is_some());
            for (waiting, seen) in registered {
                let seen = seen.expect("partitioned");
                record(not_ready_outcome(waiting, &seen, self.timeout, nodes));
            }
            if !missing.is_empty() {
                let plans: Vec<Option<&NodePlan>> = missing
                    .iter()
                    .map(|(w, _)| plan_of(nodes, w.outcome.index))
                    .collect();
                let found: Vec<&NodePlan> = plans.iter().flatten().copied().collect();
                let mut answers = ask(&found).into_iter();
                for ((waiting, _), plan) in missing.into_iter().zip(plans) {
                    let answer = plan
                        .and_then(|_| answers.next())
                        .unwrap_or_else(|| Err("The node was not asked.".to_string()));
                    let outcome =
                        not_registered_outcome(waiting, answer, self.watch, self.timeout, nodes);
                    record(outcome);
                }
            }
            {
                let mut queue = self.lock();
                queue.deciding = 0;
                self.changed.notify_all();
                if closed && queue.waiting.is_empty() {
                    return;
                }
            }
            let next = self
                .lock()
                .waiting
                .iter()
                .map(|w| w.deadline)
                .min()
                .unwrap_or_else(|| Instant::now() + TICK)
                .min(Instant::now() + TICK);
            self.watch.wait_past(generation, next);
        }
    }

    /// Takes out the nodes that are decided: Ready now, or past their deadline (all of
    /// them after the operator's second Ctrl-C: nothing more is waited for).
    fn take_decided(&self, cancel: &Cancel) -> Decided {
        let mut queue = self.lock();
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut late = Vec::new();
        let mut cancelled = Vec::new();
        let mut still = Vec::new();
        for waiting in std::mem::take(&mut queue.waiting) {
            let seen = self.watch.seen(&waiting.node_name);
            match seen {
                Some(seen) if seen.ready_now() => ready.push((waiting, seen)),
                seen if now >= waiting.deadline => late.push((waiting, seen)),
                seen if cancel.aborting() => cancelled.push((waiting, seen)),
                _ => still.push(waiting),
            }
        }
        queue.waiting = still;
        queue.deciding = ready.len() + late.len() + cancelled.len();
        Decided {
            ready,
            late,
            cancelled,
            closed: queue.closed,
        }
    }
}

/// Seconds from keadm's exit to `at`; 0 for what was there before it.
fn after(keadm_exit: SystemTime, at: SystemTime) -> f64 {
    at.duration_since(keadm_exit)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The plan of the node at `index` in the config. `nodes` is the run's selection, in
/// config order, so it may hold fewer nodes than the config (`--only`, `--shard`,
/// `--retry-failed`): a node is found by its index, never by its place in the selection.
fn plan_of(nodes: &[NodePlan], index: usize) -> Option<&NodePlan> {
    nodes
        .binary_search_by_key(&index, |n| n.index)
        .ok()
        .map(|at| &nodes[at])
}

/// Adds `lines` to the node's transcript (its pipeline has closed it).
fn note(nodes: &[NodePlan], outcome: &NodeOutcome, lines: &[String]) {
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

fn ready_outcome(waiting: Waiting, seen: &Seen, nodes: &[NodePlan]) -> NodeOutcome {
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
fn failed(
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
fn cancelled_outcome(waiting: Waiting, seen: Option<&Seen>, nodes: &[NodePlan]) -> NodeOutcome {
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

fn not_ready_outcome(
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

fn not_registered_outcome(
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
