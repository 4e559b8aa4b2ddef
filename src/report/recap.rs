//! The console: one line per finished node, and the end-of-run recap.

use std::fmt::Write;
use std::path::Path;

use crate::diagnosis::FailureClass;
use crate::options::Amount;
use crate::options::Shard;
use crate::outcome::{NodeOutcome, Phase, SiteTraffic};
use crate::shell::shell_quote;
use crate::waves::{Gate, Rollout, WaveRecord, WaveResult, nodes as nodes_text};

use super::summary::Totals;

/// The line before the first node starts: `Processing 20 nodes of shard 2/4 (...) (5 at
/// once); transcripts in batch_runs/<id>`. With `--canary N` alone, it says that the first
/// N run alone before the rest: `Processing 20 nodes (first 2 as a canary, 2 at once;
/// then the other 18, 5 at once); ...`; in waves, their shape: `Processing 20 nodes in 4
/// waves of 5 (at most 0 failed per wave), 5 at once; ...`.
pub fn banner(
    nodes: usize,
    shard: Option<Shard>,
    max_run_num: usize,
    rollout: &Rollout,
    run_dir: &Path,
) -> String {
    let at_once = |count: usize| max_run_num.min(count.max(1));
    let waves = &rollout.waves;
    let canary = waves.first().filter(|w| w.gate == Gate::Canary);
    let pace = match (canary.map(|w| w.positions.len()), waves.len()) {
        (Some(first), 1) => format!(" (all as a canary, {} at once)", at_once(first)),
        (Some(first), 2) if waves[1].number == 2 => format!(
            " (first {first} as a canary, {} at once; then the other {}, {} at once)",
            at_once(first),
            nodes - first,
            at_once(nodes - first)
        ),
        _ if rollout.in_waves() => in_waves(rollout, at_once),
        _ => format!(" ({} at once)", at_once(nodes)),
    };
    format!(
        "Processing {nodes} node{}{}{pace}; transcripts in {}",
        if nodes == 1 { "" } else { "s" },
        shard.map(|s| format!(" of shard {s}")).unwrap_or_default(),
        run_dir.display()
    )
}

/// ` in 4 waves of 5 (at most 0 failed per wave), 5 at once`, with the canary, the
/// earlier run's numbers a retry continues, and the pause between waves.
fn in_waves(rollout: &Rollout, at_once: impl Fn(usize) -> usize) -> String {
    let waves = &rollout.waves;
    let (canary, rest) = match waves.split_first() {
        Some((first, rest)) if first.gate == Gate::Canary => (Some(first), rest),
        _ => (None, &waves[..]),
    };
    let biggest = waves.iter().map(|w| w.positions.len()).max().unwrap_or(0);
    let rest_biggest = rest.iter().map(|w| w.positions.len()).max().unwrap_or(0);
    let of = if rest.iter().all(|w| w.positions.len() == rest_biggest) {
        rest_biggest.to_string()
    } else {
        format!("up to {rest_biggest}")
    };
    let tolerance = match rest.first().map(|w| (w.gate, w.tolerance)) {
        Some((Gate::MaxFail(Amount::Percent(p)), _)) => format!("at most {p}% failed per wave"),
        Some((_, Some(t))) => format!("at most {t} failed per wave"),
        _ => "no failure limit".to_string(),
    };
    let first = waves.first().map_or(1, |w| w.number);
    let shape = match canary {
        Some(canary) => format!(
            "{} waves: a canary of {}, then {} of {of} ({tolerance})",
            waves.len(),
            canary.positions.len(),
            rest.len()
        ),
        None if first != 1 => format!(
            "waves {first} to {} of the earlier run, of {of} ({tolerance})",
            rollout.last()
        ),
        None => format!("{} waves of {of} ({tolerance})", waves.len()),
    };
    let pause = if rollout.pause.is_zero() {
        String::new()
    } else {
        format!(", {}s between waves", rollout.pause.as_secs())
    };
    format!(" in {shape}, {} at once{pause}", at_once(biggest))
}

/// A rollout in waves that did not finish: which wave stopped it and why, how many nodes
/// of later waves were not touched, and how to go on. Nothing when every wave passed.
pub fn waves(waves: &[WaveRecord], config: &Path) -> String {
    let last = waves.iter().map(|w| w.number).max().unwrap_or(0);
    let ended = waves
        .iter()
        .position(|w| matches!(w.result, WaveResult::Stopped | WaveResult::Interrupted));
    let before = waves
        .iter()
        .position(|w| w.result == WaveResult::NotStarted);
    let stopped = ended.is_some_and(|i| waves[i].result == WaveResult::Stopped);
    let (head, later) = match (ended, before) {
        (Some(i), _) => {
            let w = &waves[i];
            let head = if stopped {
                format!(
                    "Wave {} of {last} stopped the rollout: {} of its {} did not succeed, more than its tolerance of {}.",
                    w.number,
                    w.failed,
                    nodes_text(w.nodes.len()),
                    w.tolerance.unwrap_or_default()
                )
            } else {
                format!(
                    "The rollout was interrupted in wave {} of {last}.",
                    w.number
                )
            };
            (head, &waves[i + 1..])
        }
        (None, Some(i)) => (
            format!(
                "The rollout was stopped before wave {} of {last}.",
                waves[i].number
            ),
            &waves[i..],
        ),
        (None, None) => return String::new(),
    };
    let later: Vec<&WaveRecord> = later
        .iter()
        .filter(|w| w.result == WaveResult::NotStarted)
        .collect();
    let untouched: usize = later.iter().map(|w| w.nodes.len()).sum();
    let mut out = format!("\n{head}");
    if let (Some(first), Some(end)) = (later.first(), later.last()) {
        let numbers = if first.number == end.number {
            format!("wave {}", first.number)
        } else {
            format!("waves {} to {}", first.number, end.number)
        };
        let _ = write!(
            out,
            " {} of {numbers} {} not touched.",
            nodes_text(untouched),
            if untouched == 1 { "was" } else { "were" }
        );
    }
    let _ = writeln!(
        out,
        "\n  then, {}: keadm-batch batch -c {} --retry-failed, with this run's --wave and --max-fail: it goes on where the rollout stopped, each node in the wave it had, each wave gated again",
        if stopped {
            "once the cause is fixed"
        } else {
            "to go on"
        },
        shell_quote(&config.display().to_string())
    );
    out
}

/// `[ 3/20] ok      edge-03  12.4s` or `[ 4/20] FAILED  edge-04  connect: ...`.
pub fn node_line(o: &NodeOutcome, done: usize, total: usize) -> String {
    let width = total.to_string().len();
    let secs = o.steps.total();
    let status = match o.phase {
        Phase::Succeeded => "ok",
        Phase::Failed => "FAILED",
        Phase::TimedOut => "TIMEOUT",
        Phase::Skipped => "SKIPPED",
        Phase::Interrupted => "STOPPED",
        _ => "?",
    };
    let mut line = format!(
        "[{done:>width$}/{total}] {status:<7} {} ({})",
        o.name, o.address
    );
    // A node that never started (skipped, or not started before an interrupt) took no
    // time, and its line says so by showing none.
    if o.steps.started() {
        let _ = write!(line, " {secs:.1}s");
    }
    if let Some(ready) = o.cluster.as_ref().and_then(|c| c.ready_after) {
        let _ = write!(line, ", Ready {ready:.1}s after keadm");
        if let Some(start) = o.cluster.as_ref().and_then(|c| c.ready_after_start) {
            let _ = write!(line, " ({start:.1}s after its start)");
        }
    }
    if let Some(error) = o.error_with_output()
        && !o.succeeded()
    {
        let _ = write!(line, ": {error}");
    }
    line
}

/// One line per site that relayed: what crossed its uplink and what its nodes got from
/// each other, e.g. `site s1: 20 nodes, 1 copy over the uplink (15.9 MB), 19 from peers`.
pub fn sites(sites: &[SiteTraffic]) -> String {
    let mut out = String::new();
    for s in sites {
        let _ = writeln!(
            out,
            "site {}: {} nodes, {} cop{} over the uplink ({:.1} MB), {} from peers ({:.1} MB)",
            s.site,
            s.nodes,
            s.uplink_copies,
            if s.uplink_copies == 1 { "y" } else { "ies" },
            s.uplink_bytes as f64 / 1e6,
            s.peer_copies,
            s.peer_bytes as f64 / 1e6
        );
    }
    out
}

/// The end-of-run recap: totals, failures with reasons, slowest nodes, where things are.
/// `config` is the config file as given with `-c`, for the commands it suggests.
pub fn render(
    outcomes: &[NodeOutcome],
    run_dir: &Path,
    log_path: &Path,
    config: &Path,
    wall_secs: f64,
) -> String {
    let totals = Totals::of(outcomes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} node{} in {wall_secs:.1}s: {} succeeded, {} failed, {} timed out, {} skipped, {} interrupted",
        totals.selected,
        if totals.selected == 1 { "" } else { "s" },
        totals.succeeded,
        totals.failed,
        totals.timed_out,
        totals.skipped,
        totals.interrupted
    );
    let failed: Vec<&NodeOutcome> = outcomes.iter().filter(|o| !o.succeeded()).collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nNot succeeded:");
        for o in failed.iter().take(50) {
            let _ = writeln!(
                out,
                "  {:<24} {:<11} {}",
                o.name,
                o.phase.as_str(),
                o.error_with_output().unwrap_or_default()
            );
        }
        if failed.len() > 50 {
            let _ = writeln!(
                out,
                "  ... and {} more (see summary.json)",
                failed.len() - 50
            );
        }
    }
    let mut by_class: Vec<(FailureClass, Vec<&str>)> = Vec::new();
    for o in &failed {
        if let Some(class) = o.failure_class {
            match by_class.iter_mut().find(|(c, _)| *c == class) {
                Some((_, names)) => names.push(&o.name),
                None => by_class.push((class, vec![&o.name])),
            }
        }
    }
    if !by_class.is_empty() {
        by_class.sort_by_key(|(_, names)| std::cmp::Reverse(names.len()));
        let _ = writeln!(out, "\nBy cause:");
        for (class, names) in &by_class {
            let shown: Vec<&str> = names.iter().take(5).copied().collect();
            let more = if names.len() > 5 {
                format!(" and {} more", names.len() - 5)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {} [{}]: {} node(s): {}{more}",
                class.title(),
                class.as_str(),
                names.len(),
                shown.join(", ")
            );
            let tasks = failed
                .iter()
                .filter(|o| o.failure_class == Some(*class))
                .map(|o| o.task());
            for fix in class.fixes_for(tasks) {
                let _ = writeln!(out, "    fix: {fix}");
            }
            let _ = writeln!(
                out,
                "    then: keadm-batch batch -c {} --retry-failed --class {}",
                shell_quote(&config.display().to_string()),
                class.as_str()
            );
        }
    }
    render_ready(&mut out, outcomes);
    render_rollbacks(&mut out, outcomes);
    let mut ran: Vec<&NodeOutcome> = outcomes.iter().filter(|o| o.steps.total() > 0.0).collect();
    ran.sort_by(|a, b| b.steps.total().total_cmp(&a.steps.total()));
    if ran.len() > 1 {
        let _ = writeln!(out, "\nSlowest:");
        for o in ran.iter().take(5) {
            let s = &o.steps;
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}s"));
            let _ = writeln!(
                out,
                "  {:<24} {:>7.1}s  connect {} prepare {} upload {} run {}",
                o.name,
                s.total(),
                f(s.connect),
                f(s.prepare),
                f(s.upload),
                f(s.run)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nResults: {}\nTranscripts and summary: {}",
        log_path.display(),
        run_dir.display()
    );
    out
}

/// With a kubeconfig: how long the Ready nodes took after keadm exited and from their
/// start (the time a node takes to come up: keadm join exits only after edgecore ran a
/// while, so the first is often 0), the medians and the slowest, with their time to
/// registered.
fn render_ready(out: &mut String, outcomes: &[NodeOutcome]) {
    let mut ready: Vec<(&str, f64, f64, Option<f64>)> = outcomes
        .iter()
        .filter_map(|o| {
            let c = o.cluster.as_ref()?;
            Some((
                o.name.as_str(),
                c.ready_after?,
                c.registered_after.unwrap_or(0.0),
                c.ready_after_start,
            ))
        })
        .collect();
    if ready.is_empty() {
        return;
    }
    ready.sort_by(|a, b| b.1.total_cmp(&a.1));
    let median = ready[ready.len() / 2].1;
    let mut from_start: Vec<f64> = ready.iter().filter_map(|r| r.3).collect();
    from_start.sort_by(|a, b| b.total_cmp(a));
    let from_start = from_start
        .get(from_start.len() / 2)
        .map(|m| format!("; from the node's start: median {m:.1}s"))
        .unwrap_or_default();
    let slowest: Vec<String> = ready
        .iter()
        .take(5)
        .map(|(name, ready, registered, start)| {
            let start = start
                .map(|s| format!(", {s:.1}s from its start"))
                .unwrap_or_default();
            format!("{name} {ready:.1}s (registered {registered:.1}s{start})")
        })
        .collect();
    let _ = writeln!(
        out,
        "\nReady in the cluster: {} node(s), after keadm exited: median {median:.1}s{from_start}; slowest: {}",
        ready.len(),
        slowest.join(", ")
    );
}

/// A recap paragraph: `title:` and its lines, or nothing when there are none.
pub fn titled(title: &str, lines: String) -> String {
    if lines.is_empty() {
        lines
    } else {
        format!("{title}:\n{lines}")
    }
}

/// `--rollback-on-failure`: which failed upgrades the rollback brought back, and which
/// it did not (their failure is still the upgrade's, listed above).
fn render_rollbacks(out: &mut String, outcomes: &[NodeOutcome]) {
    let rolled: Vec<(&str, &crate::outcome::RollbackRecord)> = outcomes
        .iter()
        .filter_map(|o| Some((o.name.as_str(), o.upgrade.as_ref()?.rollback.as_ref()?)))
        .collect();
    if rolled.is_empty() {
        return;
    }
    let (back, not_back): (Vec<_>, Vec<_>) = rolled.iter().partition(|(_, r)| r.succeeded);
    let _ = writeln!(
        out,
        "\nRolled back (--rollback-on-failure): {} node(s), {} back on their old version, {} not",
        rolled.len(),
        back.len(),
        not_back.len()
    );
    for (name, rollback) in back.iter().take(10) {
        let _ = writeln!(
            out,
            "  {name:<24} back on {}{}",
            rollback
                .running_version
                .as_deref()
                .unwrap_or("its old version"),
            match rollback.ready {
                Some(true) => ", Ready in the cluster",
                _ => "",
            }
        );
    }
    for (name, rollback) in not_back.iter().take(10) {
        let _ = writeln!(
            out,
            "  {name:<24} NOT brought back: {}",
            rollback.error.as_deref().unwrap_or("the rollback failed")
        );
    }
    if rolled.len() > 20 {
        let _ = writeln!(
            out,
            "  ... (every node's rollback is in summary.json, upgrade.rollback)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waves::Shape;

    fn rollout(count: usize, shape: Shape, earlier: &[Option<usize>]) -> Rollout {
        Rollout {
            waves: crate::waves::plan(count, &shape, earlier),
            pause: std::time::Duration::ZERO,
        }
    }

    use crate::waves::tests_support::shape;

    #[test]
    fn the_banner_says_how_a_canary_runs() {
        let dir = Path::new("batch_runs/x");
        assert_eq!(
            banner(20, None, 5, &Rollout::default(), dir),
            "Processing 20 nodes (5 at once); transcripts in batch_runs/x"
        );
        assert_eq!(
            banner(20, None, 5, &rollout(20, shape(None, None, None), &[]), dir),
            "Processing 20 nodes (5 at once); transcripts in batch_runs/x"
        );
        assert_eq!(
            banner(
                20,
                None,
                5,
                &rollout(20, shape(None, Some(2), None), &[]),
                dir
            ),
            "Processing 20 nodes (first 2 as a canary, 2 at once; then the other 18, 5 at once); transcripts in batch_runs/x"
        );
        assert_eq!(
            banner(
                1,
                None,
                5,
                &rollout(1, shape(None, Some(3), None), &[]),
                dir
            ),
            "Processing 1 node (all as a canary, 1 at once); transcripts in batch_runs/x"
        );
    }

    #[test]
    fn the_banner_says_the_shape_of_the_waves() {
        let dir = Path::new("r");
        let quarter = Some(Amount::Percent(25));
        let zero = Some(Amount::Nodes(0));
        assert_eq!(
            banner(
                20,
                None,
                5,
                &rollout(20, shape(quarter, None, zero), &[]),
                dir
            ),
            "Processing 20 nodes in 4 waves of 5 (at most 0 failed per wave), 5 at once; transcripts in r"
        );
        let mut paused = rollout(
            11,
            shape(Some(Amount::Nodes(3)), Some(1), Some(Amount::Percent(20))),
            &[],
        );
        paused.pause = std::time::Duration::from_secs(30);
        assert_eq!(
            banner(11, None, 2, &paused, dir),
            "Processing 11 nodes in 5 waves: a canary of 1, then 4 of up to 3 (at most 20% failed per wave), 2 at once, 30s between waves; transcripts in r"
        );
        let retry = rollout(3, shape(None, None, None), &[Some(2), Some(3), Some(4)]);
        assert_eq!(
            banner(3, None, 5, &retry, dir),
            "Processing 3 nodes in waves 2 to 4 of the earlier run, of 1 (at most 0 failed per wave), 1 at once; transcripts in r"
        );
    }

    #[test]
    fn the_recap_says_which_wave_stopped_the_rollout_and_what_was_not_touched() {
        let wave = |number: usize, names: &[&str], succeeded, failed, result| WaveRecord {
            number,
            nodes: names.iter().map(|n| n.to_string()).collect(),
            succeeded,
            failed,
            tolerance: Some(0),
            result,
        };
        let config = Path::new("site a.yaml");
        let mut record = vec![
            wave(1, &["a", "b"], 2, 0, WaveResult::Passed),
            wave(2, &["c", "d"], 1, 1, WaveResult::Stopped),
            wave(3, &["e", "f"], 0, 0, WaveResult::NotStarted),
            wave(4, &["g"], 0, 0, WaveResult::NotStarted),
        ];
        let text = waves(&record, config);
        assert!(
            text.starts_with("\nWave 2 of 4 stopped the rollout: 1 of its 2 nodes did not succeed, more than its tolerance of 0. 3 nodes of waves 3 to 4 were not touched.\n"),
            "{text}"
        );
        assert!(text.contains("keadm-batch batch -c 'site a.yaml' --retry-failed, with this run's --wave and --max-fail"), "{text}");
        record[1].result = WaveResult::Passed;
        record[2].result = WaveResult::Interrupted;
        assert!(waves(&record, config).starts_with(
            "\nThe rollout was interrupted in wave 3 of 4. 1 node of wave 4 was not touched.\n  then, to go on: keadm-batch"
        ));
        record[2].result = WaveResult::NotStarted;
        assert!(
            waves(&record, config).starts_with("\nThe rollout was stopped before wave 3 of 4. 3 nodes of waves 3 to 4 were not touched.\n"),
        );
        record[2].result = WaveResult::Passed;
        record[3].result = WaveResult::Passed;
        assert_eq!(waves(&record, config), "");
        assert_eq!(waves(&[], config), "");
    }

    #[test]
    fn a_node_that_never_started_shows_no_duration_and_a_failure_its_last_output() {
        let skipped = NodeOutcome::not_run(
            1,
            "edge-1",
            "10.0.0.1:22",
            Phase::Skipped,
            "skipped: not started",
        );
        assert_eq!(
            node_line(&skipped, 2, 2),
            "[2/2] SKIPPED edge-1 (10.0.0.1:22): skipped: not started"
        );
        let mut failed = NodeOutcome::not_run(
            0,
            "edge-0",
            "10.0.0.0:22",
            Phase::Failed,
            "failed to execute keadm command x: Process exited with status 1",
        );
        failed.steps.run = Some(1.5);
        failed.last_output = Some("Error: boom".into());
        failed.failure_class = Some(FailureClass::Unknown);
        assert_eq!(
            node_line(&failed, 1, 2),
            "[1/2] FAILED  edge-0 (10.0.0.0:22) 1.5s: failed to execute keadm command x: Process exited with status 1 (last output: Error: boom)"
        );
        let recap = render(
            &[failed, skipped],
            Path::new("run"),
            Path::new("batch_process_log.txt"),
            Path::new("site a.yaml"),
            1.0,
        );
        assert!(
            recap.contains("status 1 (last output: Error: boom)"),
            "{recap}"
        );
        assert!(!recap.contains("-0.0s"), "{recap}");
        // The config as given, quoted for the shell, so the line can be pasted.
        assert!(
            recap.contains(
                "then: keadm-batch batch -c 'site a.yaml' --retry-failed --class unknown"
            ),
            "{recap}"
        );
    }
    /// A class's fix is the one for the command its nodes ran: an upgrade's stalled pull
    /// is not told to retry with --reset-first, a join's is; with both, each is named.
    #[test]
    fn a_class_s_fix_is_worded_for_the_command_its_nodes_ran() {
        use crate::keadm_cmd::Task;
        let failed = |index: usize, task: Task| {
            let mut o =
                NodeOutcome::not_run(index, &format!("edge-{index}"), "a:22", Phase::Failed, "x");
            o.steps.run = Some(1.0);
            o.failure_class = Some(FailureClass::ImagePullStalled);
            o.task = Some(task);
            o
        };
        let recap = |outcomes: &[NodeOutcome]| {
            render(
                outcomes,
                Path::new("run"),
                Path::new("log"),
                Path::new("c.yaml"),
                1.0,
            )
        };
        let upgrades = recap(&[failed(0, Task::Upgrade)]);
        assert!(
            upgrades.contains(&format!(
                "    fix: {}\n",
                FailureClass::ImagePullStalled.suggested_fix(Task::Upgrade)
            )),
            "{upgrades}"
        );
        assert!(!upgrades.contains("--reset-first"), "{upgrades}");
        let both = recap(&[failed(0, Task::Upgrade), failed(1, Task::Join)]);
        assert!(both.contains("    fix: keadm join: "), "{both}");
        assert!(both.contains("    fix: keadm upgrade edge: "), "{both}");
    }
}
