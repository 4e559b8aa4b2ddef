//! The pool's tests: bounds, order, thread exits, the waves' gates, Ctrl-C.

use super::*;
use crate::options::Amount;
use crate::report::{log::ResultLog, run_dir::RunDir};
use crate::waves::Shape;
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

fn rollout(count: usize, shape: Shape) -> Rollout {
    Rollout {
        waves: crate::waves::plan(count, &shape, &[]),
        pause: Duration::ZERO,
    }
}

/// Without waves, `--max-fail N` stops starting nodes once more than N did not
/// succeed (Ansible's and NodeUpgradeJob's meaning, no longer "once N").
#[test]
fn max_fail_skips_the_rest_and_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodePlan> = (0..10).map(plan).collect();
    let rec = recorder(dir.path(), nodes.len());
    let shape = Shape {
        max_fail: Some(Amount::Nodes(1)),
        ..Shape::default()
    };
    let policy = Policy {
        max_run_num: 1,
        rollout: rollout(nodes.len(), shape),
    };
    run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
        outcome(n, n.index % 2 == 0)
    });
    let all = rec.outcomes();
    assert_eq!(all.len(), 10);
    // n0 ok, n1 fail (1, tolerated), n2 ok, n3 fail (2, past 1) -> stop; n4.. skipped.
    assert_eq!(all[3].phase, Phase::Failed);
    assert!(all[4..].iter().all(|o| o.phase == Phase::Skipped));
    assert!(
        all[9]
            .error
            .as_deref()
            .unwrap()
            .contains("2 nodes did not succeed, more than the run allows (--max-fail 1)")
    );
    // Not in waves: no wave numbers, no wave records.
    assert!(all.iter().all(|o| o.wave.is_none()));
    assert!(rec.waves().is_empty());
}

#[test]
fn failed_canary_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodePlan> = (0..6).map(plan).collect();
    let rec = recorder(dir.path(), nodes.len());
    let shape = Shape {
        canary: Some(2),
        ..Shape::default()
    };
    let policy = Policy {
        max_run_num: 4,
        rollout: rollout(nodes.len(), shape),
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
    assert!(
        all[2]
            .error
            .as_deref()
            .unwrap()
            .contains("wave 1 of 2 (the canary) stopped the rollout")
    );
    let waves: Vec<usize> = all.iter().map(|o| o.wave.unwrap()).collect();
    assert_eq!(waves, [1, 1, 2, 2, 2, 2]);
}

/// Waves run one after another, each settled before the next; the first past its
/// tolerance stops the rollout, its unstarted nodes and every later wave's skipped
/// with the wave named, and each wave's record says what became of it.
#[test]
fn the_first_wave_past_its_tolerance_stops_the_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodePlan> = (0..12).map(plan).collect();
    let rec = recorder(dir.path(), nodes.len());
    let shape = Shape {
        size: Some(Amount::Nodes(4)),
        max_fail: Some(Amount::Nodes(0)),
        ..Shape::default()
    };
    let policy = Policy {
        max_run_num: 1,
        rollout: rollout(nodes.len(), shape),
    };
    let started = Mutex::new(Vec::new());
    let settled = AtomicUsize::new(0);
    run_all_handing_over(
        &nodes,
        policy,
        &Cancel::new(),
        &rec,
        |n| {
            started
                .lock()
                .unwrap()
                .push((n.index, settled.load(Ordering::SeqCst)));
            Some(outcome(n, n.index != 5))
        },
        &|| {
            settled.fetch_add(1, Ordering::SeqCst);
        },
    );
    // Wave 1 (0-3) settled before wave 2 started; wave 2 stopped starting at its
    // failed node 5, one at a time; nothing of wave 3 started.
    assert_eq!(
        started.into_inner().unwrap(),
        [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]
    );
    assert_eq!(settled.load(Ordering::SeqCst), 2);
    let all = rec.outcomes();
    let waves: Vec<usize> = all.iter().map(|o| o.wave.unwrap()).collect();
    assert_eq!(waves, [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
    assert!(all[6..].iter().all(|o| o.phase == Phase::Skipped));
    assert_eq!(
        all[11].error.as_deref().unwrap(),
        "skipped: wave 2 of 3 stopped the rollout: 1 of its 4 nodes did not succeed (--max-fail 0); nothing was done on this node"
    );
    let records: Vec<(usize, usize, usize, WaveResult)> = rec
        .waves()
        .iter()
        .map(|w| (w.number, w.succeeded, w.failed, w.result))
        .collect();
    assert_eq!(
        records,
        [
            (1, 4, 0, WaveResult::Passed),
            (2, 1, 1, WaveResult::Stopped),
            (3, 0, 0, WaveResult::NotStarted)
        ]
    );
    assert_eq!(rec.waves()[2].nodes, ["n8", "n9", "n10", "n11"]);
}

/// `--max-fail P%` tolerates the share of each wave, rounded down: with waves of 5
/// and 20%, one failure per wave passes, two stop the rollout.
#[test]
fn a_share_of_each_wave_may_fail() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodePlan> = (0..15).map(plan).collect();
    let rec = recorder(dir.path(), nodes.len());
    let shape = Shape {
        size: Some(Amount::Nodes(5)),
        max_fail: Some(Amount::Percent(20)),
        ..Shape::default()
    };
    let policy = Policy {
        max_run_num: 5,
        rollout: rollout(nodes.len(), shape),
    };
    run_all(&nodes, policy, &Cancel::new(), &rec, |n| {
        outcome(n, ![2, 6, 7].contains(&n.index))
    });
    let results: Vec<WaveResult> = rec.waves().iter().map(|w| w.result).collect();
    assert_eq!(
        results,
        [
            WaveResult::Passed,
            WaveResult::Stopped,
            WaveResult::NotStarted
        ]
    );
    let all = rec.outcomes();
    assert!(all[10..].iter().all(|o| o.phase == Phase::Skipped));
    assert!(
        all[10]
            .error
            .as_deref()
            .unwrap()
            .contains("2 of its 5 nodes did not succeed (--max-fail 20%: at most 1 of 5)")
    );
}

/// The first Ctrl-C during `--wave-pause` ends the wait at once and starts no later
/// wave: its nodes are interrupted.
#[test]
fn ctrl_c_during_the_pause_stops_the_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<NodePlan> = (0..4).map(plan).collect();
    let rec = recorder(dir.path(), nodes.len());
    let shape = Shape {
        size: Some(Amount::Nodes(2)),
        ..Shape::default()
    };
    let mut rollout = rollout(nodes.len(), shape);
    // Long enough that a wait Ctrl-C did not end would run wave 2 late, not never.
    rollout.pause = Duration::from_secs(20);
    let policy = Policy {
        max_run_num: 2,
        rollout,
    };
    let cancel = Cancel::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while rec.recorded_count() < 2 {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(50));
            cancel.request();
        });
        run_all(&nodes, policy, &cancel, &rec, |n| outcome(n, true));
    });
    let phases: Vec<Phase> = rec.outcomes().iter().map(|o| o.phase).collect();
    assert_eq!(
        phases,
        [
            Phase::Succeeded,
            Phase::Succeeded,
            Phase::Interrupted,
            Phase::Interrupted
        ]
    );
    let results: Vec<WaveResult> = rec.waves().iter().map(|w| w.result).collect();
    assert_eq!(results, [WaveResult::Passed, WaveResult::NotStarted]);
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
