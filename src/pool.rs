//! The bounded pool: exactly `maxRunNum` workers on a dedicated rayon pool, nodes started
//! in config order, and Ctrl-C: after the first, no further node starts. Two modes share
//! it: a run ([`run_all`], in the waves of its [`Rollout`], each gated by its tolerance
//! (`--wave`, `--max-fail`, `--canary`), where every selected node ends with exactly one
//! recorded outcome whatever happens), and `--preflight-only` ([`probe_all`], which
//! records nothing and returns each node's result).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cancel::Cancel;
use crate::outcome::{NodeOutcome, Phase};
use crate::plan::NodePlan;
use crate::report::Recorder;
use crate::waves::{Rollout, Wave, WaveRecord, WaveResult, nodes as count_nodes};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub max_run_num: usize,
    /// The waves the nodes go in, one after another; the default is one wave of every
    /// node, any number of which may fail.
    pub rollout: Rollout,
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
/// `settle` blocks until every node handed over is recorded: each wave's verdict (the
/// canary's too) and the skipped nodes' lines wait for it. A failure counts toward its
/// wave's tolerance when recorded.
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
    let rollout = &policy.rollout;
    let one_wave;
    let waves: &[Wave] = if rollout.waves.is_empty() {
        one_wave = [Rollout::one_wave(nodes.len())];
        &one_wave
    } else {
        &rollout.waves
    };
    let members = |wave: &Wave| -> Vec<&NodePlan> {
        wave.positions
            .iter()
            .filter_map(|&p| nodes.get(p))
            .collect()
    };
    let (in_waves, last) = (rollout.in_waves(), rollout.last());
    if in_waves {
        let wave_of: HashMap<usize, usize> = waves
            .iter()
            .flat_map(|wave| members(wave).into_iter().map(|n| (n.index, wave.number)))
            .collect();
        recorder.assign_waves(wave_of);
    }
    let mut skip_reason: Option<String> = None;
    let mut records = Vec::with_capacity(waves.len());
    for (i, wave) in waves.iter().enumerate() {
        let members = members(wave);
        let mut record = WaveRecord {
            number: wave.number,
            nodes: members.iter().map(|n| n.name.clone()).collect(),
            succeeded: 0,
            failed: 0,
            tolerance: wave.tolerance,
            result: WaveResult::NotStarted,
        };
        let go = skip_reason.is_none()
            && !cancel.stopping()
            && (i == 0 || pause_before(wave, last, rollout, recorder, cancel));
        if go {
            if in_waves {
                recorder.wave_started(wave.number, last, &start_line(wave, last));
            }
            let (failed_before, recorded_before) = (recorder.failures(), recorder.recorded_count());
            run_wave(
                &members,
                policy.max_run_num,
                wave,
                failed_before,
                cancel,
                recorder,
                &run_node,
            );
            settle();
            record.failed = recorder.failures() - failed_before;
            record.succeeded =
                (recorder.recorded_count() - recorded_before).saturating_sub(record.failed);
            record.result = if wave.tolerance.is_some_and(|t| record.failed > t) {
                skip_reason = Some(wave.stop_reason(record.failed, last, in_waves));
                WaveResult::Stopped
            } else if record.succeeded + record.failed < members.len() {
                // Only the operator's Ctrl-C, or workers that could not start, leave
                // nodes of a wave unstarted: no later wave may start either way.
                skip_reason.get_or_insert_with(|| "skipped: not started".to_string());
                WaveResult::Interrupted
            } else {
                WaveResult::Passed
            };
        }
        records.push(record);
    }
    // Every node gets exactly one outcome, even those never started; the console counts
    // those in one line.
    // Decided once: a Ctrl-C during the loop must not split them into two kinds, which
    // the console's one line would give the first one's words.
    let (phase, reason) = if cancel.stopping() {
        (
            Phase::Interrupted,
            "not started: run interrupted".to_string(),
        )
    } else {
        (
            Phase::Skipped,
            skip_reason.unwrap_or_else(|| "skipped: not started".to_string()),
        )
    };
    let not_started: Vec<NodeOutcome> = nodes
        .iter()
        .filter(|node| !recorder.recorded(node.index))
        .map(|node| NodeOutcome::not_run(node.index, &node.name, &node.address(), phase, &reason))
        .collect();
    recorder.record_not_started(not_started);
    if in_waves {
        recorder.set_waves(records);
    }
}

/// `wave 2 of 4: 5 nodes, at most 0 may fail`.
fn start_line(wave: &Wave, last: usize) -> String {
    let may_fail = match wave.tolerance {
        Some(t) => format!("at most {t} may fail"),
        None => "any may fail".to_string(),
    };
    format!(
        "wave {} of {last}: {}, {may_fail} ({})",
        wave.number,
        count_nodes(wave.positions.len()),
        wave.rule()
    )
}

/// `--wave-pause`: waits before `wave` (not the first), saying so; `false` when the
/// operator's Ctrl-C came before or during the wait, which stops the rollout.
fn pause_before(
    wave: &Wave,
    last: usize,
    rollout: &Rollout,
    recorder: &Recorder,
    cancel: &Cancel,
) -> bool {
    if !rollout.pause.is_zero() {
        recorder.note(&format!(
            "waiting {}s before wave {} of {last} (--wave-pause); Ctrl-C stops the rollout",
            rollout.pause.as_secs(),
            wave.number
        ));
        cancel.sleep(rollout.pause);
    }
    !cancel.stopping()
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
    let nodes: Vec<&NodePlan> = nodes.iter().collect();
    work_through(&nodes, max_run_num, cancel, &|| false, &|i, node| {
        let result = probe(node);
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Runs one wave's nodes, at most `max_run_num` at once; no further node of it starts
/// once more of them than its tolerance did not succeed (`failed_before`: the failures
/// recorded before it began).
fn run_wave<F>(
    members: &[&NodePlan],
    max_run_num: usize,
    wave: &Wave,
    failed_before: usize,
    cancel: &Cancel,
    recorder: &Recorder,
    run_node: &F,
) where
    F: Fn(&NodePlan) -> Option<NodeOutcome> + Sync,
{
    let past_tolerance = || {
        wave.tolerance
            .is_some_and(|t| recorder.failures() - failed_before > t)
    };
    work_through(members, max_run_num, cancel, &past_tolerance, &|_, node| {
        if let Some(outcome) = run_node(node) {
            recorder.record(outcome);
        }
    });
}

/// The workers themselves: `max_run_num` of them (at most one per node) take the nodes in
/// order and call `work(index in nodes, node)` for each, until the nodes run out, the
/// operator asks to stop, or `stop_starting` says so.
fn work_through(
    nodes: &[&NodePlan],
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
                        let Some(&node) = nodes.get(i) else { break };
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
mod tests;
