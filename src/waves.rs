//! Rollouts in waves: the selected nodes cut, in config order, into waves that run one
//! after another, each gated on its own failures (`--wave`, `--max-fail`, `--canary`; for
//! upgrades waves of 10% by default, as k0sctl's). A wave in which more nodes did not
//! succeed than its tolerance stops the rollout: no node of a later wave is touched.
//! This plans the waves (nothing but a warning leaves it); the pool runs them and records
//! each one's [`WaveRecord`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::options::{Amount, RunOptions};
use crate::plan::NodePlan;

/// The share of the selected nodes each wave of an upgrade takes when `--wave` is not
/// given: k0sctl's.
pub const UPGRADE_WAVE_PERCENT: u8 = 10;

/// Where a wave's tolerance comes from, for the messages that cite it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `--canary N`: every node of the canary wave must succeed.
    Canary,
    /// `--max-fail N` or `--max-fail P%`.
    MaxFail(Amount),
    /// Waves without `--max-fail`: none of a wave's nodes may fail.
    NoneMayFail,
    /// Any number may fail: one wave of every node (waves off), or the nodes after a
    /// canary, without `--wave` and without `--max-fail`.
    Unlimited,
}

/// One wave: which of the selected nodes, and how many of them may fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    /// 1-based. A retry keeps the numbers the earlier run gave its nodes.
    pub number: usize,
    /// Positions in the selected nodes, in config order.
    pub positions: Vec<usize>,
    /// How many of its nodes may not succeed without stopping the rollout; `None`: any.
    pub tolerance: Option<usize>,
    pub gate: Gate,
}

impl Wave {
    fn new(number: usize, positions: Vec<usize>, gate: Gate) -> Wave {
        let size = positions.len();
        let tolerance = match gate {
            Gate::Canary | Gate::NoneMayFail => Some(0),
            Gate::MaxFail(Amount::Nodes(n)) => Some(n),
            // "More than P% of the wave's nodes, rounded down", as Ansible's
            // max_fail_percentage: 20% of 5 nodes tolerates 1, of 4 nodes none.
            Gate::MaxFail(Amount::Percent(p)) => Some(usize::from(p) * size / 100),
            Gate::Unlimited => None,
        };
        Wave {
            number,
            positions,
            tolerance,
            gate,
        }
    }

    /// The rule the wave's tolerance comes from, as messages cite it: `--max-fail 0`,
    /// `--max-fail 20%: at most 1 of 5`.
    pub fn rule(&self) -> String {
        match (self.gate, self.tolerance) {
            (Gate::Canary, _) => "--canary: every canary node must succeed".to_string(),
            (Gate::MaxFail(Amount::Percent(p)), Some(t)) => {
                format!("--max-fail {p}%: at most {t} of {}", self.positions.len())
            }
            (Gate::MaxFail(amount), _) => format!("--max-fail {amount}"),
            (Gate::NoneMayFail, _) => "none may fail without --max-fail".to_string(),
            (Gate::Unlimited, _) => "no limit".to_string(),
        }
    }

    /// The reason recorded for each node not started because this wave, in which
    /// `failed` nodes did not succeed, stopped the rollout. `last` is the rollout's last
    /// wave number; `in_waves` whether it was in waves at all (else one wave, whose
    /// limit is the run's --max-fail).
    pub fn stop_reason(&self, failed: usize, last: usize, in_waves: bool) -> String {
        if !in_waves {
            return format!(
                "skipped: {} did not succeed, more than the run allows ({}), so no further node was started; nothing was done on this node",
                nodes(failed),
                self.rule()
            );
        }
        format!(
            "skipped: wave {} of {last}{} stopped the rollout: {failed} of its {} did not succeed ({}); nothing was done on this node",
            self.number,
            if self.gate == Gate::Canary {
                " (the canary)"
            } else {
                ""
            },
            nodes(self.positions.len()),
            self.rule()
        )
    }
}

/// `1 node`, `5 nodes`.
pub fn nodes(count: usize) -> String {
    format!("{count} node{}", if count == 1 { "" } else { "s" })
}

/// The waves of a run, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollout {
    /// Empty (the default): one wave of every node, any number of which may fail.
    pub waves: Vec<Wave>,
    /// `--wave-pause`: the wait before each wave after the first.
    pub pause: Duration,
}

impl Rollout {
    /// Whether the run goes in waves, whose numbers its records keep: two or more, or
    /// the waves a retry continues.
    pub fn in_waves(&self) -> bool {
        self.waves.len() > 1 || self.waves.iter().any(|w| w.number != 1)
    }

    /// The last wave's number: the `4` of `wave 2 of 4`.
    pub fn last(&self) -> usize {
        self.waves.iter().map(|w| w.number).max().unwrap_or(1)
    }

    /// The one wave of `count` nodes a run not in waves is.
    pub fn one_wave(count: usize) -> Wave {
        Wave::new(1, (0..count).collect(), Gate::Unlimited)
    }
}

/// What shapes the waves: `--wave` (or the upgrades' default), `--canary`, `--max-fail`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub size: Option<Amount>,
    pub canary: Option<usize>,
    pub max_fail: Option<Amount>,
}

/// A [`Shape`] in one call, for the tests of the waves and of what prints them.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::{Amount, Shape};

    pub fn shape(size: Option<Amount>, canary: Option<usize>, max_fail: Option<Amount>) -> Shape {
        Shape {
            size,
            canary,
            max_fail,
        }
    }
}

/// The waves of `count` selected nodes. `earlier` holds, for a retry, the wave each
/// node had in the run it retries (by position; empty or `None` when unknown): those
/// nodes keep their numbers, grouped by them in order, so a retry goes on where the
/// rollout stopped (the rest of the stopped wave, then the untouched ones); the nodes
/// without one follow in fresh waves. `--canary` shapes fresh rollouts only.
pub fn plan(count: usize, shape: &Shape, earlier: &[Option<usize>]) -> Vec<Wave> {
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut fresh = Vec::new();
    for position in 0..count {
        match earlier.get(position).copied().flatten() {
            Some(number) if number > 0 => groups.entry(number).or_default().push(position),
            _ => fresh.push(position),
        }
    }
    let continued = !groups.is_empty();
    let gate = shape.max_fail.map_or(Gate::NoneMayFail, Gate::MaxFail);
    let mut waves: Vec<Wave> = groups
        .into_iter()
        .map(|(number, positions)| Wave::new(number, positions, gate))
        .collect();
    let mut next = waves.last().map_or(1, |w| w.number + 1);
    let mut rest = &fresh[..];
    if let Some(canary) = shape.canary.filter(|c| *c > 0 && !continued) {
        let (first, after) = rest.split_at(canary.min(rest.len()));
        if !first.is_empty() {
            waves.push(Wave::new(next, first.to_vec(), Gate::Canary));
            next += 1;
        }
        rest = after;
    }
    let size = match shape.size {
        None => rest.len(),
        Some(Amount::Nodes(n)) => n,
        // A share of the selected nodes, rounded up.
        Some(Amount::Percent(p)) => (usize::from(p) * count).div_ceil(100),
    };
    let chunks: Vec<&[usize]> = rest.chunks(size.max(1)).collect();
    let gate = match shape.max_fail {
        Some(amount) => Gate::MaxFail(amount),
        None if chunks.len() > 1 || continued => Gate::NoneMayFail,
        None => Gate::Unlimited,
    };
    for (i, chunk) in chunks.into_iter().enumerate() {
        waves.push(Wave::new(next + i, chunk.to_vec(), gate));
    }
    waves
}

/// The rollout of a run over `nodes` (the selected ones, in config order) with
/// `options`. `earlier` maps node names to the waves of the run a retry retries. With
/// no `--wave` and only `keadm upgrade edge` commands, waves of
/// [`UPGRADE_WAVE_PERCENT`].
pub fn for_run(
    nodes: &[NodePlan],
    options: &RunOptions,
    earlier: Option<&HashMap<String, usize>>,
) -> Rollout {
    let upgrades = !nodes.is_empty() && nodes.iter().all(|n| n.keadm_args.is_edge_upgrade());
    let shape = Shape {
        size: options
            .wave
            .or(upgrades.then_some(Amount::Percent(UPGRADE_WAVE_PERCENT))),
        canary: options.canary,
        max_fail: options.max_fail,
    };
    let earlier: Vec<Option<usize>> = nodes
        .iter()
        .map(|node| earlier.and_then(|waves| waves.get(&node.name).copied()))
        .collect();
    let rollout = Rollout {
        waves: plan(nodes.len(), &shape, &earlier),
        pause: options.wave_pause.unwrap_or_default(),
    };
    if !rollout.pause.is_zero() && !rollout.in_waves() {
        log::warn!(
            "--wave-pause has no effect: the run is one wave of every selected node. Give --wave N or --wave P% to roll out in waves."
        );
    }
    rollout
}

/// What became of one wave, as summary.json records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveRecord {
    pub number: usize,
    /// Its nodes' names, in config order.
    pub nodes: Vec<String>,
    /// Of its nodes that ran, how many succeeded and how many did not.
    pub succeeded: usize,
    pub failed: usize,
    /// How many could fail without stopping the rollout; `null`: any number.
    pub tolerance: Option<usize>,
    pub result: WaveResult,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaveResult {
    /// Every node ran, and no more failed than the tolerance.
    #[serde(rename = "passed")]
    Passed,
    /// More failed than the tolerance: no later wave started.
    #[serde(rename = "stopped the rollout")]
    Stopped,
    /// An earlier wave stopped the rollout, or the operator stopped it before this wave.
    #[serde(rename = "not started")]
    NotStarted,
    /// The operator stopped the run while this wave was under way.
    #[serde(rename = "interrupted")]
    Interrupted,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(waves: &[Wave]) -> Vec<(usize, usize, Option<usize>)> {
        waves
            .iter()
            .map(|w| (w.number, w.positions.len(), w.tolerance))
            .collect()
    }

    use super::tests_support::shape;

    #[test]
    fn a_share_rounds_up_and_waves_go_in_config_order() {
        let waves = plan(20, &shape(Some(Amount::Percent(25)), None, None), &[]);
        assert_eq!(
            sizes(&waves),
            [
                (1, 5, Some(0)),
                (2, 5, Some(0)),
                (3, 5, Some(0)),
                (4, 5, Some(0))
            ]
        );
        assert_eq!(waves[1].positions, [5, 6, 7, 8, 9]);
        // 10% of 11 nodes is 1.1: waves of 2, the last one short.
        let waves = plan(11, &shape(Some(Amount::Percent(10)), None, None), &[]);
        assert_eq!(waves.len(), 6);
        assert_eq!(waves[5].positions, [10]);
        // At least one node, however small the share.
        let waves = plan(3, &shape(Some(Amount::Percent(1)), None, None), &[]);
        assert_eq!(
            sizes(&waves),
            [(1, 1, Some(0)), (2, 1, Some(0)), (3, 1, Some(0))]
        );
        assert!(plan(0, &shape(Some(Amount::Nodes(2)), None, None), &[]).is_empty());
    }

    #[test]
    fn a_percent_tolerance_rounds_down_per_wave() {
        let waves = plan(
            12,
            &shape(Some(Amount::Nodes(5)), None, Some(Amount::Percent(20))),
            &[],
        );
        assert_eq!(
            sizes(&waves),
            [(1, 5, Some(1)), (2, 5, Some(1)), (3, 2, Some(0))]
        );
        assert_eq!(waves[0].rule(), "--max-fail 20%: at most 1 of 5");
        let waves = plan(4, &shape(None, None, Some(Amount::Nodes(0))), &[]);
        assert_eq!(sizes(&waves), [(1, 4, Some(0))]);
        assert_eq!(waves[0].rule(), "--max-fail 0");
    }

    #[test]
    fn one_wave_is_waves_off_and_keeps_the_old_behaviour() {
        for size in [None, Some(Amount::Percent(100)), Some(Amount::Nodes(9))] {
            let rollout = Rollout {
                waves: plan(6, &shape(size, None, None), &[]),
                pause: Duration::ZERO,
            };
            assert_eq!(sizes(&rollout.waves), [(1, 6, None)], "{size:?}");
            assert!(!rollout.in_waves());
        }
        assert_eq!(Rollout::one_wave(3), plan(3, &Shape::default(), &[])[0]);
        assert!(!Rollout::default().in_waves());
        assert_eq!(Rollout::default().last(), 1);
    }

    #[test]
    fn the_canary_goes_first_then_the_waves() {
        // Without --wave: the canary, then the rest with the run's --max-fail (none).
        let waves = plan(6, &shape(None, Some(2), None), &[]);
        assert_eq!(sizes(&waves), [(1, 2, Some(0)), (2, 4, None)]);
        assert_eq!(waves[0].gate, Gate::Canary);
        let waves = plan(10, &shape(Some(Amount::Nodes(3)), Some(1), None), &[]);
        assert_eq!(
            sizes(&waves),
            [
                (1, 1, Some(0)),
                (2, 3, Some(0)),
                (3, 3, Some(0)),
                (4, 3, Some(0))
            ]
        );
        // A canary of every node is one wave of them.
        let waves = plan(2, &shape(None, Some(5), Some(Amount::Nodes(3))), &[]);
        assert_eq!(sizes(&waves), [(1, 2, Some(0))]);
    }

    #[test]
    fn a_retry_continues_the_earlier_waves_and_new_nodes_follow() {
        // Wave 2 stopped after its node 1; waves 3 and 4 were untouched; node 5 is new.
        let earlier = [Some(2), Some(2), Some(3), Some(3), Some(4), None];
        let waves = plan(
            6,
            &shape(Some(Amount::Nodes(2)), Some(1), Some(Amount::Nodes(0))),
            &earlier,
        );
        assert_eq!(
            sizes(&waves),
            [
                (2, 2, Some(0)),
                (3, 2, Some(0)),
                (4, 1, Some(0)),
                (5, 1, Some(0))
            ]
        );
        assert_eq!(waves[2].positions, [4]);
        assert_eq!(waves[3].positions, [5]);
        let rollout = Rollout {
            waves: plan(1, &Shape::default(), &[Some(3)]),
            pause: Duration::ZERO,
        };
        assert!(
            rollout.in_waves(),
            "a retry of wave 3 alone is still wave 3"
        );
        assert_eq!((rollout.last(), rollout.waves[0].tolerance), (3, Some(0)));
        // A journal without wave numbers: fresh waves.
        let waves = plan(4, &shape(Some(Amount::Nodes(2)), None, None), &[None; 4]);
        assert_eq!(sizes(&waves), [(1, 2, Some(0)), (2, 2, Some(0))]);
    }

    #[test]
    fn the_stop_reason_names_the_wave_its_failures_and_the_rule() {
        let waves = plan(
            20,
            &shape(Some(Amount::Percent(25)), None, Some(Amount::Nodes(0))),
            &[],
        );
        assert_eq!(
            waves[1].stop_reason(1, 4, true),
            "skipped: wave 2 of 4 stopped the rollout: 1 of its 5 nodes did not succeed (--max-fail 0); nothing was done on this node"
        );
        let waves = plan(3, &shape(None, Some(1), None), &[]);
        assert_eq!(
            waves[0].stop_reason(1, 2, true),
            "skipped: wave 1 of 2 (the canary) stopped the rollout: 1 of its 1 node did not succeed (--canary: every canary node must succeed); nothing was done on this node"
        );
        let waves = plan(4, &shape(None, None, Some(Amount::Nodes(1))), &[]);
        assert_eq!(
            waves[0].stop_reason(2, 1, false),
            "skipped: 2 nodes did not succeed, more than the run allows (--max-fail 1), so no further node was started; nothing was done on this node"
        );
    }

    #[test]
    fn wave_records_serialize_as_summary_md_says() {
        let record = WaveRecord {
            number: 2,
            nodes: vec!["a".into()],
            succeeded: 0,
            failed: 1,
            tolerance: None,
            result: WaveResult::Stopped,
        };
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            r#"{"number":2,"nodes":["a"],"succeeded":0,"failed":1,"tolerance":null,"result":"stopped the rollout"}"#
        );
        for (result, text) in [
            (WaveResult::Passed, "\"passed\""),
            (WaveResult::NotStarted, "\"not started\""),
            (WaveResult::Interrupted, "\"interrupted\""),
        ] {
            assert_eq!(serde_json::to_string(&result).unwrap(), text);
        }
    }
}
