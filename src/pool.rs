//! The bounded pool: exactly `maxRunNum` workers on a dedicated rayon pool, nodes started
//! in config order, and Ctrl-C: after the first, no further node starts. Two modes share
//! it: a run ([`run_all`], with the failure policies `--max-fail` and `--canary`, where
//! every selected node ends with exactly one recorded outcome whatever happens), and
//! `--preflight-only` ([`probe_all`], which records nothing and returns each node's result).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cancel::Cancel;
use crate::outcome::{NodeOutcome, Phase};
use crate::plan::NodePlan;
use crate::report::Recorder;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    pub max_run_num: usize,
    /// Stop starting nodes once this many have not succeeded.
    pub max_fail: Option<usize>,
    /// Run the first N nodes alone; go on only if all of them succeed.
    pub canary: Option<usize>,
}

/// Runs `run_node` for every node in `nodes` under `policy`, recording each outcome.
pub fn run_all<F>(
    nodes: &[NodePlan],
    policy: Policy,
    cancel: &Cancel,
    recorder: &Recorder,
    run_node: F,
) where
    F: Fn(&NodePlan) -> NodeOutcome + Sync,
{
    run_all_handing_over(
        nodes,
        policy,
        cancel,
        recorder,
        |node| Some(run_node(node)),
        &|| {},
    );
}

/// [`run_all`] for runs in which some nodes are decided after their worker is done with
/// them (joins waiting to be Ready in the cluster): `run_node` returns `None` for a node it
/// handed over to whoever records it later, and its worker takes the next node at once.
/// `settle` blocks until every node handed over is recorded: the canary's verdict and the
/// skipped nodes' lines wait for it. A failure counts toward `--max-fail` when recorded.
pub fn run_all_handing_over<F>(
    nodes: &[NodePlan],
    policy: Policy,
    cancel: &Cancel,
    recorder: &Recorder,
    run_node: F,
    settle: &dyn Fn(),
) where
    F: Fn(&NodePlan) -> Option<NodeOutcome> + Sync,
{
    let canary = policy.canary.unwrap_or(0).min(nodes.len());
    let (first, rest) = nodes.split_at(canary);
    let mut skip_reason: Option<String> = None;
    if !first.is_empty() {
        run_wave(first, policy, cancel, recorder, &run_node);
        settle();
        let failed = recorder.failures();
        if failed > 0 {
            skip_reason = Some(format!(
                "skipped: {failed} of the {canary} canary node(s) did not succeed, so the rest were not started"
            ));
        }
    }
    if skip_reason.is_none() {
        run_wave(rest, policy, cancel, recorder, &run_node);
        settle();
        if let Some(max) = policy.max_fail
            && recorder.failures() >= max
        {
            skip_reason = Some(format!(
                "skipped: --max-fail {max} was reached, so no further node was started"
            ));
        }
    }
    // Every node gets exactly one line, even those never started.
    for node in nodes {
        if !recorder.recorded(node.index) {
            let (phase, reason) = if cancel.stopping() {
                (
                    Phase::Interrupted,
                    "not started: run interrupted".to_string(),
                )
            } else {
                (
                    Phase::Skipped,
                    skip_reason
                        .clone()
                        .unwrap_or_else(|| "skipped: not started".to_string()),
                )
            };
            recorder.record(NodeOutcome::not_run(
                node.index,
                &node.name,
                &node.address(),
                phase,
                &reason,
            ));
        }
    }
}

/// `--preflight-only`: runs `probe` for every node, at most `max_run_num` at once, in
/// config order, with no failure policy. Returns each node's result in the order of
/// `nodes`; `None` for a node that never started because the operator pressed Ctrl-C.
pub fn probe_all<T, F>(
    nodes: &[NodePlan],
    max_run_num: usize,
    cancel: &Cancel,
    probe: F,
) -> Vec<Option<T>>
where
    T: Send,
    F: Fn(&NodePlan) -> T + Sync,
{
    let results: Mutex<Vec<Option<T>>> = Mutex::new(nodes.iter().map(|_| None).collect());
    work_through(nodes, max_run_num, cancel, &|| false, &|i, node| {
        let result = probe(node);
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

fn run_wave<F>(
    nodes: &[NodePlan],
    policy: Policy,
    cancel: &Cancel,
    recorder: &Recorder,
    run_node: &F,
) where
    F: Fn(&NodePlan) -> Option<NodeOutcome> + Sync,
{
    let max_fail_reached = || {
        policy
            .max_fail
            .is_some_and(|max| recorder.failures() >= max)
    };
    work_through(
        nodes,
        policy.max_run_num,
        cancel,
        &max_fail_reached,
        &|_, node| {
            if let Some(outcome) = run_node(node) {
                recorder.record(outcome);
            }
        },
    );
}

/// The workers themselves: `max_run_num` of them (at most one per node) take the nodes in
/// order and call `work(index in nodes, node)` for each, until the nodes run out, the
/// operator asks to stop, or `stop_starting` says so.
fn work_through(
    nodes: &[NodePlan],
    max_run_num: usize,
    cancel: &Cancel,
    stop_starting: &(dyn Fn() -> bool + Sync),
    work: &(dyn Fn(usize, &NodePlan) + Sync),
) {
    if nodes.is_empty() {
        return;
    }
    let workers = max_run_num.clamp(1, nodes.len());
    // A dedicated pool sized to maxRunNum: rayon's global pool is sized to the CPUs.
    // Worker threads mostly wait on the network, so a small stack is plenty.
    let builder = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .stack_size(512 * 1024)
        .thread_name(|i| format!("keadm-batch-worker-{i}"));
    let next = AtomicUsize::new(0);
    let ran = joined(builder, |pool| {
        pool.scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|_| {
                    loop {
                        if cancel.stopping() || stop_starting() {
                            break;
                        }
                        // Taking indices in order starts nodes in config order.
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(node) = nodes.get(i) else { break };
                        work(i, node);
                    }
                });
            }
        });
    });
    if let Err(err) = ran {
        log::error!(
            "Could not start {workers} worker threads: {err}. No node was started; lower maxRunNum (--max-run-num) or the system's load."
        );
    }
}

/// Builds the pool `builder` describes, calls `with_pool` with it, and returns only once
/// every thread of the pool has exited, thread-local destructors and all.
///
/// A rayon `ThreadPool` that is dropped tells its threads to stop but does not wait for
/// them, and `std::thread::scope` (so rayon's `build_scoped`) waits for its threads'
/// closures, not for the threads' ends (rust-lang/rust#116237). Our workers use libssh2
/// and OpenSSL, whose per-thread state OpenSSL frees in a pthread key destructor when a
/// thread exits; a worker still exiting while the process exits raced OpenSSL's `atexit`
/// cleanup, which frees the same state without its lock (openssl/openssl#6214): a
/// "double free" abort after a run that succeeded. So the pool's threads are ours
/// (`spawn_handler`), and each is joined (`pthread_join`, which returns after the
/// thread's destructors have run) before this returns: also when the pool could not be
/// built (rayon stops the threads it had started) or `with_pool` panics.
pub fn joined<R>(
    builder: rayon::ThreadPoolBuilder,
    with_pool: impl FnOnce(&rayon::ThreadPool) -> R,
) -> Result<R, rayon::ThreadPoolBuildError> {
    let mut threads = JoinOnDrop(Vec::new());
    let pool = builder
        .spawn_handler(|thread| {
            let mut os_thread = std::thread::Builder::new();
            if let Some(name) = thread.name() {
                os_thread = os_thread.name(name.to_string());
            }
            if let Some(size) = thread.stack_size() {
                os_thread = os_thread.stack_size(size);
            }
            threads.0.push(os_thread.spawn(move || thread.run())?);
            Ok(())
        })
        .build();
    // The pool is dropped at the end of the closure, which tells its threads to stop;
    // `threads`, dropped after it, joins them.
    pool.map(|pool| with_pool(&pool))
}

/// Joins its threads when dropped.
struct JoinOnDrop(Vec<std::thread::JoinHandle<()>>);

impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        for thread in self.0.drain(..) {
            // A worker thread's own panic is rayon's abort; jobs' panics reach the caller
            // of `joined` through its `scope`.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{log::ResultLog, run_dir::RunDir};
    use std::time::Duration;

    fn plan(index: usize) -> NodePlan {
        NodePlan::sample(index)
    }

    fn outcome(node: &NodePlan, ok: bool) -> NodeOutcome {
        let mut o = NodeOutcome::not_run(node.index, &node.name, "a", Phase::Failed, "boom");
        if ok {
            o.phase = Phase::Succeeded;
            o.error = None;
        }
        o
    }

    fn recorder(dir: &std::path::Path, total: usize) -> Recorder {
        let run = RunDir::create(Some(&dir.join("run")), dir).unwrap();
        let progress = crate::report::progress::Progress::new(total, total, false);
        Recorder::new(
            ResultLog::create(&dir.join("log.txt")).unwrap(),
            run.journal().unwrap(),
            total,
            true,
            progress,
        )
    }

    #[test]
    fn never_more_than_max_run_num_at_once_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<NodePlan> = (0..20).map(plan).collect();
        let rec = recorder(dir.path(), nodes.len());
        let running = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let starts = Mutex::new(Vec::new());
        let policy = Policy {
            max_run_num: 5,
            ..Policy::default()
        };
        run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
            starts.lock().unwrap().push(n.index);
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            running.fetch_sub(1, Ordering::SeqCst);
            outcome(n, true)
        });
        assert_eq!(peak.load(Ordering::SeqCst), 5);
        let starts = starts.into_inner().unwrap();
        // Start order follows config order up to the race between workers taking the
        // next index and recording their start.
        assert_eq!(starts.len(), 20);
        assert_eq!(rec.outcomes().len(), 20);
        let log = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
        assert_eq!(log.lines().count(), 20);
    }

    /// When `run_all` returns, every worker thread has exited and its thread-local
    /// destructors have run: OpenSSL frees a thread's state in such a destructor, and a
    /// worker still in it as the process exits races OpenSSL's cleanup at exit (see
    /// [`joined`]). The destructor here takes its time, as a slow exit would.
    #[test]
    fn every_worker_has_exited_when_run_all_returns() {
        use std::cell::RefCell;
        use std::sync::Arc;
        struct OnExit(Arc<AtomicUsize>);
        impl Drop for OnExit {
            fn drop(&mut self) {
                std::thread::sleep(Duration::from_millis(50));
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        thread_local! {
            static ON_EXIT: RefCell<Option<OnExit>> = const { RefCell::new(None) };
        }
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<NodePlan> = (0..8).map(plan).collect();
        let rec = recorder(dir.path(), nodes.len());
        let exited = Arc::new(AtomicUsize::new(0));
        let workers = Mutex::new(std::collections::BTreeSet::new());
        let policy = Policy {
            max_run_num: 4,
            ..Policy::default()
        };
        run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
            workers.lock().unwrap().insert(unsafe { libc::gettid() });
            ON_EXIT.with(|e| {
                e.borrow_mut().get_or_insert_with(|| OnExit(exited.clone()));
            });
            std::thread::sleep(Duration::from_millis(10));
            outcome(n, true)
        });
        let workers = workers.into_inner().unwrap();
        assert_eq!(exited.load(Ordering::SeqCst), workers.len());
        for tid in workers {
            let task = format!("/proc/self/task/{tid}");
            assert!(!std::path::Path::new(&task).exists(), "{task} still exists");
        }
    }

    #[test]
    fn max_fail_skips_the_rest_and_lists_them() {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<NodePlan> = (0..10).map(plan).collect();
        let rec = recorder(dir.path(), nodes.len());
        let policy = Policy {
            max_run_num: 1,
            max_fail: Some(2),
            canary: None,
        };
        run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
            outcome(n, n.index % 2 == 0)
        });
        let all = rec.outcomes();
        assert_eq!(all.len(), 10);
        // n0 ok, n1 fail, n2 ok, n3 fail -> stop; n4.. skipped.
        assert_eq!(all[3].phase, Phase::Failed);
        assert!(all[4..].iter().all(|o| o.phase == Phase::Skipped));
        assert!(all[9].error.as_deref().unwrap().contains("--max-fail 2"));
    }

    #[test]
    fn failed_canary_stops_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<NodePlan> = (0..6).map(plan).collect();
        let rec = recorder(dir.path(), nodes.len());
        let policy = Policy {
            max_run_num: 4,
            max_fail: None,
            canary: Some(2),
        };
        run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
            outcome(n, n.index != 1)
        });
        let all = rec.outcomes();
        assert_eq!(all[0].phase, Phase::Succeeded);
        assert_eq!(all[1].phase, Phase::Failed);
        assert!(
            all[2..].iter().all(|o| o.phase == Phase::Skipped),
            "{all:?}"
        );
        assert!(all[2].error.as_deref().unwrap().contains("canary"));
    }

    #[test]
    fn probe_mode_returns_results_in_node_order_at_most_max_run_num_at_once() {
        let nodes: Vec<NodePlan> = (0..12).map(plan).collect();
        let running = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let results = probe_all(&nodes, 3, &Cancel::new(), |n| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(10));
            running.fetch_sub(1, Ordering::SeqCst);
            n.name.clone()
        });
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        let names: Vec<String> = results.into_iter().map(Option::unwrap).collect();
        let expected: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        assert_eq!(names, expected);
    }

    /// The first Ctrl-C stops `--preflight-only` from starting further probes, as it stops
    /// a run from starting further nodes; the probe under way finishes.
    #[test]
    fn probe_mode_honours_the_first_ctrl_c() {
        let nodes: Vec<NodePlan> = (0..6).map(plan).collect();
        let cancel = Cancel::new();
        let probed = Mutex::new(Vec::new());
        let results = probe_all(&nodes, 1, &cancel, |n| {
            probed.lock().unwrap().push(n.index);
            if n.index == 1 {
                cancel.request();
            }
            n.index * 10
        });
        assert_eq!(probed.into_inner().unwrap(), [0, 1]);
        assert_eq!(results, [Some(0), Some(10), None, None, None, None]);
        // Already stopping before the first probe: nothing starts.
        let results = probe_all(&nodes, 4, &cancel, |_| unreachable!("no probe may start"));
        assert!(results.iter().all(Option::is_none));
        let none: Vec<Option<()>> = probe_all(&[], 4, &Cancel::new(), |_| ());
        assert!(none.is_empty());
    }

    #[test]
    fn cancel_marks_unstarted_nodes_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<NodePlan> = (0..5).map(plan).collect();
        let rec = recorder(dir.path(), nodes.len());
        let cancel = Cancel::new();
        let policy = Policy {
            max_run_num: 1,
            ..Policy::default()
        };
        run_all(&nodes, policy, &cancel, &rec, |n| {
            if n.index == 1 {
                cancel.request();
            }
            outcome(n, true)
        });
        let all = rec.outcomes();
        assert_eq!(all[1].phase, Phase::Succeeded, "a running node finishes");
        assert!(all[2..].iter().all(|o| o.phase == Phase::Interrupted));
        assert_eq!(
            all[4].log_line(),
            "Failed to process node n4: not started: run interrupted"
        );
    }
}
