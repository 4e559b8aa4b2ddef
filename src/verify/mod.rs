//! Joins verified from the cluster: a node whose `keadm join` exited 0 is handed over
//! here instead of being recorded, and its worker goes on to the next node. One thread
//! reads the run's one watch on the cluster's Nodes (`cluster::NodeWatch`) and decides each
//! waiting node: Ready (a success, with its times), registered but not Ready by its
//! deadline (`not_ready`, with the Node's condition), or never registered (`not_registered`:
//! only then is the node asked over SSH what its edgecore says). Every node is recorded
//! exactly once, through the same recorder as the rest.
//!
//! Upgrades are gated the same way: a node whose `keadm upgrade edge` passed on the node
//! (its report and running edgecore checked, `pipeline::edge_task`) waits here for its
//! Node to be Ready on the new version. Past `--ready-timeout` it is `not_ready`, and
//! with `--rollback-on-failure` it is rolled back over SSH (a few at a time) and waits
//! again, for Ready on the version it went back to; a failed upgrade that the pipeline
//! rolled back waits for that too. The rollback's wait only says whether it brought the
//! node back: the node's outcome stays the upgrade's failure.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

mod verdicts;

use crate::cancel::Cancel;
use crate::cluster::{Capacity, Cluster, NodeWatch, Seen};
use crate::outcome::{NodeOutcome, Phase, RollbackRecord};
use crate::pace::JoinSlots;
use crate::plan::NodePlan;
use crate::remote::EdgecoreState;
use crate::report::Recorder;
use crate::{pipeline, pool};
use verdicts::{
    cancelled_outcome, name_mismatch_outcome, not_ready_outcome, not_registered_outcome, plan_of,
    ready_outcome, rollback_waited, upgrade_not_ready_outcome,
};

/// The wait for joins' Nodes in the run's cluster (`cluster_run::ClusterRun` asked it,
/// before any node was touched).
pub struct Verification<'c> {
    pub cluster: &'c Cluster,
    pub timeout: Duration,
    /// Runs on each node's final outcome just before it is recorded, whoever records it.
    pub finish: &'c dyn Finish,
    /// What the cloud serves, when known: a join that never registers while the cloud is
    /// at it says so in its cause.
    pub capacity: Option<Capacity>,
}

/// What becomes of a node's final outcome before it is recorded (`--drain` uncordons the
/// Node of a node that succeeded).
pub trait Finish: Sync {
    fn finish(&self, outcome: NodeOutcome) -> NodeOutcome;
}

/// The run's recorder as the deciding thread records through it: every verdict passes
/// through [`Finish`] first.
pub struct Finishing<'r> {
    recorder: &'r Recorder,
    finish: &'r dyn Finish,
    /// A join's slot in flight ends with its verdict.
    slots: &'r JoinSlots,
}

impl Finishing<'_> {
    pub fn record(&self, outcome: NodeOutcome) {
        self.slots.give_back(outcome.index);
        self.recorder.record(self.finish.finish(outcome));
    }
}

impl Verification<'_> {
    /// Runs every node as [`pool::run_all`] does, each join that keadm finished handed to
    /// the wait for its Node. One watch for the whole run, started before the first node,
    /// so no Node that registers is missed; the waiting joins hold no worker, but keep
    /// their slot in `slots` (`--joins-in-flight`, taken in `process`) until their verdict.
    #[expect(
        clippy::too_many_arguments,
        reason = "the pool's arguments, the pipeline's context and the run's join slots"
    )]
    pub fn run_all(
        &self,
        nodes: &[NodePlan],
        policy: pool::Policy,
        cancel: &Cancel,
        recorder: &Recorder,
        ctx: &pipeline::Context,
        process: &(dyn Fn(&NodePlan) -> NodeOutcome + Sync),
        slots: &JoinSlots,
    ) {
        let max_run_num = policy.max_run_num;
        let watch = self.cluster.watch();
        let mut verifier = Verifier::new(&watch, self.timeout);
        verifier.capacity = self.capacity.clone();
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
        let roll_back = |asked: &[(&NodePlan, Option<String>)]| {
            let plans: Vec<NodePlan> = asked.iter().map(|(n, _)| (*n).clone()).collect();
            // The way back runs whatever the operator pressed: a node left half upgraded
            // is worse than a slower stop.
            pool::probe_all(&plans, max_run_num, &Cancel::new(), |node| {
                let to = asked
                    .iter()
                    .find(|(n, _)| n.index == node.index)
                    .and_then(|(_, to)| to.as_deref());
                pipeline::roll_back(node, ctx, to)
            })
            .into_iter()
            .map(Option::flatten)
            .collect()
        };
        let finishing = Finishing {
            recorder,
            finish: self.finish,
            slots,
        };
        std::thread::scope(|scope| {
            scope.spawn(|| verifier.run(nodes, &finishing, cancel, &ask, &roll_back));
            pool::run_all_handing_over(
                nodes,
                policy,
                cancel,
                recorder,
                |node| {
                    let outcome = verifier
                        .take(node, process(node))
                        .map(|outcome| self.finish.finish(outcome));
                    match &outcome {
                        Some(_) => slots.give_back(node.index),
                        None => ctx.progress.phase(node.index, &node.name, Phase::Verifying),
                    }
                    outcome
                },
                &|| verifier.settle(),
            );
            verifier.close();
        });
    }
}

/// A node waiting for its Node.
struct Waiting {
    outcome: NodeOutcome,
    node_name: String,
    keadm_exit: SystemTime,
    deadline: Instant,
    expect: Expect,
}

/// What a waiting node's Node must show.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// A join: registered and Ready, written since the run began.
    Joined,
    /// An upgrade that passed on the node: Ready, on this (edgecore's) version.
    Upgraded(String),
    /// A failed upgrade rolled back on the node: Ready again, on this version when known.
    RolledBack(Option<String>),
}

impl Expect {
    /// What the node waits for, from how its pipeline ended; `None`: record it now.
    fn of(node: &NodePlan, outcome: &NodeOutcome) -> Option<Expect> {
        if node.keadm_args.is_join() {
            return (outcome.phase == Phase::Succeeded).then_some(Expect::Joined);
        }
        if !node.keadm_args.is_edge_upgrade() {
            return None;
        }
        let upgrade = outcome.upgrade.as_ref()?;
        match outcome.phase {
            Phase::Succeeded => upgrade.running_version.clone().map(Expect::Upgraded),
            Phase::Failed => upgrade
                .rollback
                .as_ref()
                .filter(|r| r.succeeded)
                .map(|r| Expect::RolledBack(r.running_version.clone())),
            _ => None,
        }
    }

    /// Whether `seen` is what is waited for.
    fn met(&self, seen: &Seen) -> bool {
        match self {
            Expect::Joined => seen.ready_now(),
            // A new version is a write of the Node, so no baseline is needed; a rollback
            // to the version the Node showed may write nothing new, and edgecore was seen
            // running that version over SSH.
            Expect::Upgraded(version) | Expect::RolledBack(Some(version)) => {
                seen.state.is_ready() && seen.state.runs_kubeedge(version)
            }
            Expect::RolledBack(None) => seen.state.is_ready(),
        }
    }
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
    /// What the cloud serves, when known (see [`Verification::capacity`]).
    pub capacity: Option<Capacity>,
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// Asks nodes that never registered what their edgecore says, one answer per node.
pub type AskNodes<'n> = dyn Fn(&[&NodePlan]) -> Vec<Result<EdgecoreState, String>> + Sync + 'n;

/// Rolls back upgraded nodes that failed the Ready gate (each to the version given, when
/// known), one record per node (`None`: the node plans no rollback).
pub type RollBack<'n> =
    dyn Fn(&[(&NodePlan, Option<String>)]) -> Vec<Option<RollbackRecord>> + Sync + 'n;

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
            capacity: None,
            queue: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    /// Takes into the wait a join whose keadm exited 0, an upgrade that passed on the
    /// node, and a failed upgrade the pipeline rolled back; any other outcome is
    /// returned, to be recorded now.
    pub fn take(&self, node: &NodePlan, outcome: NodeOutcome) -> Option<NodeOutcome> {
        let Some(expect) = Expect::of(node, &outcome) else {
            return Some(outcome);
        };
        // The gate waits on the config's name, never on the one the node reports: a node
        // must not choose which Node passes its gate. An upgrade whose edgecore.yaml names
        // another Node fails here, before any wait.
        let node_name = node_name(node);
        if let Expect::Upgraded(_) = expect
            && let Some(reported) = outcome.upgrade.as_ref().and_then(|u| u.node_name.clone())
            && reported != node_name
        {
            return Some(name_mismatch_outcome(outcome, &node_name, &reported, node));
        }
        self.wait_for(Waiting {
            node_name,
            keadm_exit: SystemTime::now(),
            deadline: Instant::now() + self.timeout,
            outcome,
            expect,
        });
        None
    }

    fn wait_for(&self, waiting: Waiting) {
        let mut queue = self.lock();
        queue.waiting.push(waiting);
        self.changed.notify_all();
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
        recorder: &Finishing,
        cancel: &Cancel,
        ask: &AskNodes,
        roll_back: &RollBack,
    ) {
        let _ended = Ended(self);
        loop {
            let generation = self.watch.generation();
            let Decided {
                ready,
                late,
                cancelled,
                closed,
            } = self.take_decided(cancel);
            for (waiting, seen) in ready {
                recorder.record(match waiting.expect {
                    Expect::RolledBack(_) => {
                        rollback_waited(waiting, Some(&seen), true, self.timeout, nodes)
                    }
                    _ => ready_outcome(waiting, &seen, nodes),
                });
            }
            for (waiting, seen) in cancelled {
                recorder.record(match waiting.expect {
                    Expect::RolledBack(_) => waiting.outcome,
                    _ => cancelled_outcome(waiting, seen.as_ref(), nodes),
                });
            }
            let (joins, late): (Vec<_>, Vec<_>) = late
                .into_iter()
                .partition(|(w, _)| w.expect == Expect::Joined);
            let mut rolling_back = Vec::new();
            for (waiting, seen) in late {
                match &waiting.expect {
                    Expect::Upgraded(_) => {
                        let failed =
                            upgrade_not_ready_outcome(waiting, seen.as_ref(), self.timeout, nodes);
                        match plan_of(nodes, failed.index)
                            .filter(|n| n.edge_task.as_ref().is_some_and(|t| t.rollback.is_some()))
                        {
                            Some(plan) => rolling_back.push((failed, plan)),
                            None => recorder.record(failed),
                        }
                    }
                    _ => recorder.record(rollback_waited(
                        waiting,
                        seen.as_ref(),
                        false,
                        self.timeout,
                        nodes,
                    )),
                }
            }
            self.roll_back_late(rolling_back, recorder, roll_back);
            let (registered, missing): (Vec<_>, Vec<_>) =
                joins.into_iter().partition(|(_, seen)| seen.is_some());
            for (waiting, seen) in registered {
                let seen = seen.expect("partitioned");
                let full = self.at_capacity(&waiting.node_name);
                recorder.record(not_ready_outcome(waiting, &seen, full, self.timeout, nodes));
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
                    let full = self.at_capacity(&waiting.node_name);
                    let outcome = not_registered_outcome(
                        waiting,
                        answer,
                        self.watch,
                        full,
                        self.timeout,
                        nodes,
                    );
                    recorder.record(outcome);
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

    /// Why a join missed Ready when the cloud is at its limit, counted as its wait ends:
    /// what cloudhub had when it refused the node.
    fn at_capacity(&self, node_name: &str) -> Option<String> {
        verdicts::at_capacity(
            self.capacity.as_ref(),
            self.watch.edge_nodes_but(node_name),
            node_name,
        )
    }

    /// `--rollback-on-failure` for upgrades that failed the Ready gate: rolled back a few
    /// at a time, each then waiting for Ready on the version it went back to (before the
    /// deciding count drops, so `settle` waits for that too), or recorded with why the
    /// rollback did not bring it back.
    fn roll_back_late(
        &self,
        failed: Vec<(NodeOutcome, &NodePlan)>,
        recorder: &Finishing,
        roll_back: &RollBack,
    ) {
        if failed.is_empty() {
            return;
        }
        let asked: Vec<(&NodePlan, Option<String>)> = failed
            .iter()
            .map(|(outcome, plan)| {
                (
                    *plan,
                    outcome.upgrade.as_ref().and_then(|u| u.version_before()),
                )
            })
            .collect();
        let records = roll_back(&asked);
        for ((mut outcome, plan), record) in failed.into_iter().zip(records) {
            let Some(record) = record else {
                recorder.record(outcome);
                continue;
            };
            let back_on = record.succeeded.then(|| record.running_version.clone());
            if let Some(upgrade) = outcome.upgrade.as_mut() {
                upgrade.rollback = Some(record);
            }
            match back_on {
                Some(version) => self.wait_for(Waiting {
                    node_name: outcome
                        .cluster
                        .as_ref()
                        .map(|c| c.node_name.clone())
                        .unwrap_or_else(|| node_name(plan)),
                    keadm_exit: SystemTime::now(),
                    deadline: Instant::now() + self.timeout,
                    outcome,
                    expect: Expect::RolledBack(version),
                }),
                None => recorder.record(outcome),
            }
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
                Some(seen) if waiting.expect.met(&seen) => ready.push((waiting, seen)),
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
