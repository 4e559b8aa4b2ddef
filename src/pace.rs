//! Joins paced to the cloud (`--joins-in-flight`): at most N joins between their start and
//! their Node's Ready (or the end of the Ready wait) at once. Since the Ready wait holds
//! no `maxRunNum` worker, workers alone would let joins outrun cloudcore: each worker hands
//! its join to the wait and starts the next. A join takes its slot as its worker starts it,
//! before it connects (keadm's command rides in the same SSH channel as the node's last
//! upload, so its start cannot be held apart from that upload without holding the channel
//! open), and gives it back when its outcome is final: at once when it failed before or in
//! keadm, else when the wait for its Node decides it.
//!
//! The slots are counted by node: giving back a slot a node does not hold does nothing, so
//! every place that ends a node's wait may give back without knowing who took it.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cancel::Cancel;
use crate::report::progress::Progress;

/// The default bound, from the real cloud of tests/cloud_capacity_e2e.rs (figures in
/// docs/kubeedge.md, "Joins paced to the cloud"): three joins at once took half the wall
/// time of three one at a time, each a third slower only because the same two cores ran
/// the three nodes, so a small bound throws time away; the bursts reported to hurt an API
/// server are hundreds of joins at once. Ten leaves a run at the default `maxRunNum` 5
/// unpaced and keeps one at `maxRunNum` 50 from reaching cloudcore fifty at a time.
pub const DEFAULT_JOINS_IN_FLIGHT: usize = 10;

/// How often a waiting join looks at the operator's Ctrl-C.
const LOOK: Duration = Duration::from_millis(200);

/// The slots of joins in flight.
pub struct JoinSlots {
    limit: usize,
    held: Mutex<BTreeSet<usize>>,
    freed: Condvar,
    /// Told how many joins wait for a slot, for the live status line.
    progress: Option<Arc<Progress>>,
    waiting: Mutex<usize>,
}

impl JoinSlots {
    pub fn new(limit: usize, progress: Option<Arc<Progress>>) -> JoinSlots {
        JoinSlots {
            limit: limit.max(1),
            held: Mutex::default(),
            freed: Condvar::new(),
            progress,
            waiting: Mutex::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeSet<usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count_waiting(&self, delta: isize) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        *waiting = waiting.saturating_add_signed(delta);
        if let Some(progress) = &self.progress {
            progress.waiting_for_turn(*waiting);
        }
    }

    /// Takes a slot for node `index`, waiting while all are held. Returns how long it
    /// waited, or `None` when the operator's Ctrl-C came first (the node must not start).
    pub fn take(&self, index: usize, cancel: &Cancel) -> Option<Duration> {
        let started = Instant::now();
        let mut held = self.held();
        if held.len() < self.limit || held.contains(&index) {
            held.insert(index);
            return Some(Duration::ZERO);
        }
        self.count_waiting(1);
        let taken = loop {
            if cancel.stopping() {
                break false;
            }
            if held.len() < self.limit {
                held.insert(index);
                break true;
            }
            held = self
                .freed
                .wait_timeout(held, LOOK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(held);
        self.count_waiting(-1);
        taken.then(|| started.elapsed())
    }

    /// Gives back node `index`'s slot, if it holds one.
    pub fn give_back(&self, index: usize) {
        if self.held().remove(&index) {
            self.freed.notify_all();
        }
    }

    /// The plan's line: the bound, and where a join's turn ends.
    pub fn describe(limit: usize, verified: bool, given: bool) -> String {
        format!(
            "at most {limit} in flight to the cloud at once (--joins-in-flight{}), each from its start to {}; a join past it waits for its turn",
            if given { "" } else { ", the default" },
            if verified {
                "its Node's Ready or the end of its wait"
            } else {
                "keadm's exit (no Ready wait in this run)"
            }
        )
    }

    /// The transcript's line for a join that waited `waited` for its slot; `None` when
    /// it did not wait.
    pub fn waited_line(&self, waited: Duration) -> Option<String> {
        (!waited.is_zero()).then(|| {
            format!(
                "[keadm-batch] waited {:.1} s for its turn before it started: {} joins were in flight to the cloud (--joins-in-flight {})",
                waited.as_secs_f64(),
                self.limit,
                self.limit
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Never more than the limit hold a slot at once, every taker gets one in the end,
    /// and a give-back by a node that holds none frees nothing.
    #[test]
    fn no_more_than_the_limit_hold_a_slot_at_once() {
        let slots = JoinSlots::new(2, None);
        let cancel = Cancel::new();
        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for index in 0..6 {
                let (slots, cancel, now, peak) = (&slots, &cancel, &now, &peak);
                scope.spawn(move || {
                    slots.take(index, cancel).expect("not cancelled");
                    let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(inside, Ordering::SeqCst);
                    // One that holds nothing gives back: nobody else may start for it.
                    slots.give_back(100 + index);
                    std::thread::sleep(Duration::from_millis(50));
                    now.fetch_sub(1, Ordering::SeqCst);
                    slots.give_back(index);
                    slots.give_back(index);
                });
            }
        });
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        assert!(slots.held().is_empty());
    }

    #[test]
    fn a_join_waiting_for_its_turn_stops_at_the_operators_ctrl_c() {
        let slots = JoinSlots::new(1, None);
        let cancel = Cancel::new();
        assert_eq!(slots.take(0, &cancel), Some(Duration::ZERO));
        cancel.request();
        assert_eq!(slots.take(1, &cancel), None);
        assert!(slots.waited_line(Duration::ZERO).is_none());
        assert_eq!(
            slots.waited_line(Duration::from_millis(1500)).unwrap(),
            "[keadm-batch] waited 1.5 s for its turn before it started: 1 joins were in flight to the cloud (--joins-in-flight 1)"
        );
    }
}
