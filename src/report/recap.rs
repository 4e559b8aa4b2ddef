//! The console: one line per finished node, and the end-of-run recap.

use std::fmt::Write;
use std::path::Path;

use crate::diagnosis::FailureClass;
use crate::options::{Amount, RunOptions, Shard};
use crate::outcome::{NodeOutcome, Phase, SiteTraffic};
use crate::waves::{Gate, Rollout, WaveRecord, WaveResult, nodes as nodes_text};

use super::summary::Totals;
use super::{findings, names, next_command};

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

/// A rollout in waves that did not finish: which wave stopped it and why, and how many
/// nodes of later waves were not touched, as the recap's first words after its totals.
/// Nothing when every wave passed.
fn waves(waves: &[WaveRecord]) -> String {
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
    out.push('\n');
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
    if let Some(reason) = short_reason(o) {
        let _ = write!(line, ": {reason}");
    }
    line
}

/// The longest reason a console line gives; the whole error is in the transcript,
/// summary.json and batch_process_log.txt.
const REASON_CHARS: usize = 240;
/// How much of a longer reason's start is kept; the rest of [`REASON_CHARS`] is its end.
const REASON_HEAD_CHARS: usize = 60;

/// Why a node did not succeed, for a console line: its class and a short reason. keadm's
/// own line (`failed to execute keadm command <the whole command>: <status>`), which
/// batch_process_log.txt keeps exactly, loses the command here: the transcript has it,
/// and the plan shows it once.
fn short_reason(o: &NodeOutcome) -> Option<String> {
    if o.succeeded() {
        return None;
    }
    let error = o.error.as_deref()?;
    let error = match error
        .strip_prefix(KEADM_FAILED)
        .and_then(|rest| rest.rsplit_once(": Process exited "))
    {
        Some((_, status)) => format!("the keadm command failed: Process exited {status}"),
        None => error.to_string(),
    };
    let mut reason = match o.failure_class {
        Some(class) => format!("[{}] {error}", class.as_str()),
        None => error,
    };
    if let Some(last) = &o.last_output {
        let _ = write!(reason, " (last output: {last})");
    }
    Some(bounded(reason))
}

/// keadm's words for a command that failed, as batch_process_log.txt keeps them.
const KEADM_FAILED: &str = "failed to execute keadm command ";

/// `text` cut to about [`REASON_CHARS`] characters in its middle, with ` ... ` where it
/// was cut: a reason names what failed first and why last (the Node's condition,
/// edgecore's log line, keadm's last output), and the why is what an operator acts on.
fn bounded(text: String) -> String {
    let count = text.chars().count();
    if count <= REASON_CHARS {
        return text;
    }
    let head: String = text.chars().take(REASON_HEAD_CHARS).collect();
    let tail: String = text
        .chars()
        .skip(count - (REASON_CHARS - REASON_HEAD_CHARS))
        .collect();
    format!("{} ... {}", head.trim_end(), tail.trim_start())
}

/// Whether `o` is a node that never started (skipped, or not started before the
/// operator's Ctrl-C): the console counts these and names each once, in the recap.
fn never_started(o: &NodeOutcome) -> bool {
    matches!(o.phase, Phase::Skipped | Phase::Interrupted) && !o.steps.started()
}

/// The one line for the nodes that never started, once the run is over: `[12/12] SKIPPED
/// 8 nodes, not started: <why>`. Their names come once, in the recap; `names` gives them
/// here when there is no recap (`-q`).
pub fn not_started_line(
    not_started: &[NodeOutcome],
    done: usize,
    total: usize,
    names: bool,
) -> String {
    let width = total.to_string().len();
    let Some(first) = not_started.first() else {
        return String::new();
    };
    let status = if first.phase == Phase::Interrupted {
        "STOPPED"
    } else {
        "SKIPPED"
    };
    let listed = if names {
        let all: Vec<&str> = not_started.iter().map(|o| o.name.as_str()).collect();
        format!(" ({})", super::names::compact(&all))
    } else {
        String::new()
    };
    format!(
        "[{done:>width$}/{total}] {status} {}{listed}, not started: {}",
        nodes_text(not_started.len()),
        first.error.as_deref().unwrap_or_default()
    )
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

/// What the end-of-run recap is made from.
pub struct Run<'a> {
    /// Every selected node's outcome, in config order.
    pub outcomes: &'a [NodeOutcome],
    /// A rollout in waves: what became of each wave (empty otherwise).
    pub waves: &'a [WaveRecord],
    /// The run's options, for the one command it suggests.
    pub options: &'a RunOptions,
    pub wall_secs: f64,
}

/// The end-of-run recap: totals; what stopped a rollout; the nodes that did not succeed,
/// each once (those that never started as a count and their names); the failures by
/// cause with each cause's fix; the pre-flight findings by id; Ready times, rollbacks,
/// the slowest nodes; and one command to go on with.
pub fn render(run: &Run) -> String {
    let outcomes = run.outcomes;
    let totals = Totals::of(outcomes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} node{} in {:.1}s: {} succeeded, {} failed, {} timed out, {} skipped, {} interrupted",
        totals.selected,
        if totals.selected == 1 { "" } else { "s" },
        run.wall_secs,
        totals.succeeded,
        totals.failed,
        totals.timed_out,
        totals.skipped,
        totals.interrupted
    );
    // What stopped a rollout matters most, so it comes before any list of nodes.
    out.push_str(&waves(run.waves));
    let failed: Vec<&NodeOutcome> = outcomes.iter().filter(|o| !o.succeeded()).collect();
    let (not_started, ran): (Vec<&NodeOutcome>, Vec<&NodeOutcome>) =
        failed.iter().partition(|o| never_started(o));
    if !failed.is_empty() {
        let _ = writeln!(out, "\nNot succeeded:");
        for o in ran.iter().take(50) {
            let _ = writeln!(
                out,
                "  {:<24} {:<11} {}",
                o.name,
                o.phase.as_str(),
                short_reason(o).unwrap_or_default()
            );
        }
        if ran.len() > 50 {
            let _ = writeln!(out, "  ... and {} more (see summary.json)", ran.len() - 50);
        }
        for phase in [Phase::Skipped, Phase::Interrupted] {
            let names: Vec<&str> = not_started
                .iter()
                .filter(|o| o.phase == phase)
                .map(|o| o.name.as_str())
                .collect();
            if !names.is_empty() {
                let _ = writeln!(
                    out,
                    "  {} {}, never started: {}",
                    nodes_text(names.len()),
                    phase.as_str(),
                    names::compact(&names)
                );
            }
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
            let _ = writeln!(
                out,
                "  {} [{}]: {} node(s): {}",
                class.title(),
                class.as_str(),
                names.len(),
                names::compact(names)
            );
            let tasks = failed
                .iter()
                .filter(|o| o.failure_class == Some(*class))
                .map(|o| o.task());
            for fix in class.fixes_for(tasks) {
                let _ = writeln!(out, "    fix: {fix}");
            }
        }
    }
    let found = findings::by_id(
        outcomes
            .iter()
            .map(|o| (o.name.as_str(), o.preflight.as_slice())),
    );
    if !found.is_empty() {
        let _ = writeln!(
            out,
            "\nPre-flight findings (each node's own are in its transcript, summary.json and report.html):"
        );
        out.push_str(&findings::grouped(&found, "  "));
    }
    render_ready(&mut out, outcomes);
    render_rollbacks(&mut out, outcomes);
    let mut slowest: Vec<&NodeOutcome> =
        outcomes.iter().filter(|o| o.steps.total() > 0.0).collect();
    slowest.sort_by(|a, b| b.steps.total().total_cmp(&a.steps.total()));
    if slowest.len() > 1 {
        let _ = writeln!(out, "\nSlowest:");
        for o in slowest.iter().take(5) {
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
    if !failed.is_empty() {
        // Only nodes that never started or were stopped by the operator: nothing to fix.
        let when = if ran.iter().all(|o| o.phase == Phase::Interrupted) {
            "to go on"
        } else {
            "once the causes above are fixed"
        };
        out.push_str(&then(run, &failed, when));
    }
    out
}

/// The one command to go on with, once what the nodes need is fixed: the retry of the
/// nodes that did not succeed, the untouched ones of a stopped rollout included, with
/// this run's flags.
fn then(run: &Run, failed: &[&NodeOutcome], when: &str) -> String {
    let names: Vec<&str> = failed.iter().map(|o| o.name.as_str()).collect();
    let mut out = format!(
        "\nthen, {when}: {}\n",
        next_command::retry(run.options, &names)
    );
    if run.options.run_dir.is_some() {
        out.push_str("  (by name: --retry-failed reads batch_runs/latest, which a --run-dir run leaves alone)\n");
    } else if !run.waves.is_empty() {
        out.push_str("  (it goes on where the rollout stopped, each node in the wave it had, each wave gated again)\n");
    }
    out
}

/// The run's places, the last lines of a run: keadm's log, the run directory, and its
/// report.html when it was written.
pub fn places(log_path: &Path, run_dir: &Path, report: Option<&Path>) -> String {
    let mut out = format!(
        "\nResults: {}\nTranscripts and summary: {}\n",
        log_path.display(),
        run_dir.display()
    );
    if let Some(report) = report {
        let _ = writeln!(out, "Report: {}", report.display());
    }
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
        let mut record = vec![
            wave(1, &["a", "b"], 2, 0, WaveResult::Passed),
            wave(2, &["c", "d"], 1, 1, WaveResult::Stopped),
            wave(3, &["e", "f"], 0, 0, WaveResult::NotStarted),
            wave(4, &["g"], 0, 0, WaveResult::NotStarted),
        ];
        assert_eq!(
            waves(&record),
            "\nWave 2 of 4 stopped the rollout: 1 of its 2 nodes did not succeed, more than its tolerance of 0. 3 nodes of waves 3 to 4 were not touched.\n"
        );
        record[1].result = WaveResult::Passed;
        record[2].result = WaveResult::Interrupted;
        assert_eq!(
            waves(&record),
            "\nThe rollout was interrupted in wave 3 of 4. 1 node of wave 4 was not touched.\n"
        );
        record[2].result = WaveResult::NotStarted;
        assert!(
            waves(&record).starts_with("\nThe rollout was stopped before wave 3 of 4. 3 nodes of waves 3 to 4 were not touched.\n"),
        );
        record[2].result = WaveResult::Passed;
        record[3].result = WaveResult::Passed;
        assert_eq!(waves(&record), "");
        assert_eq!(waves(&[]), "");
    }

    fn options(config: &str) -> RunOptions {
        RunOptions {
            config: config.into(),
            wave: Some(Amount::Nodes(2)),
            max_fail: Some(Amount::Nodes(0)),
            known_hosts: Some("/k h".into()),
            ..RunOptions::default()
        }
    }

    /// Nodes of a stopped rollout that never started: one line on the console while the
    /// run ends, with no names, and in the recap a count and their names once, after
    /// the wave that stopped it, with one command to go on.
    #[test]
    fn untouched_nodes_are_a_count_and_their_names_once_after_the_wave_that_stopped_them() {
        let mut failed = NodeOutcome::not_run(
            1,
            "edge-01",
            "10.0.0.1:22",
            Phase::Failed,
            "failed to execute keadm command x: Process exited with status 1",
        );
        failed.steps.run = Some(1.0);
        let why = "skipped: wave 1 of 2 stopped the rollout";
        let skipped: Vec<NodeOutcome> = (2..12)
            .map(|i| {
                NodeOutcome::not_run(
                    i,
                    &format!("edge-{i:02}"),
                    "10.0.0.9:22",
                    Phase::Skipped,
                    why,
                )
            })
            .collect();
        assert_eq!(
            not_started_line(&skipped, 12, 12, false),
            format!("[12/12] SKIPPED 10 nodes, not started: {why}")
        );
        assert_eq!(
            not_started_line(&skipped, 12, 12, true),
            format!("[12/12] SKIPPED 10 nodes (edge-02..edge-11), not started: {why}")
        );
        let mut outcomes = vec![failed];
        outcomes.extend(skipped);
        let waves = [
            WaveRecord {
                number: 1,
                nodes: vec!["edge-01".into(), "edge-02".into()],
                succeeded: 0,
                failed: 1,
                tolerance: Some(0),
                result: WaveResult::Stopped,
            },
            WaveRecord {
                number: 2,
                nodes: (3..12).map(|i| format!("edge-{i:02}")).collect(),
                succeeded: 0,
                failed: 0,
                tolerance: Some(0),
                result: WaveResult::NotStarted,
            },
        ];
        let options = options("site a.yaml");
        let recap = render(&Run {
            outcomes: &outcomes,
            waves: &waves,
            options: &options,
            wall_secs: 1.0,
        });
        // Each once: the range's ends in the range, the others in it.
        for i in 2..12 {
            let expected = usize::from(i == 2 || i == 11);
            assert_eq!(
                recap.matches(&format!("edge-{i:02}")).count(),
                expected,
                "{recap}"
            );
        }
        assert!(
            recap.contains("  10 nodes skipped, never started: edge-02..edge-11\n"),
            "{recap}"
        );
        let head = recap.find("Wave 1 of 2 stopped the rollout").unwrap();
        assert!(head < recap.find("Not succeeded:").unwrap(), "{recap}");
        assert_eq!(recap.matches("then,").count(), 1, "{recap}");
        assert!(
            recap.contains("then, once the causes above are fixed: keadm-batch batch -c 'site a.yaml' --retry-failed --wave 2 --max-fail 0 --known-hosts '/k h'\n"),
            "{recap}"
        );
    }

    #[test]
    fn a_failure_line_gives_its_class_and_a_short_reason_not_the_keadm_command() {
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
        let command = "cd /tmp/kubeedge/keadm && ./keadm join --cloudcore-ipport=10.0.0.9:10000 --edgenode-name=edge-0 --token=***";
        let mut failed = NodeOutcome::not_run(
            0,
            "edge-0",
            "10.0.0.0:22",
            Phase::Failed,
            &format!("failed to execute keadm command {command}: Process exited with status 1"),
        );
        failed.steps.run = Some(1.5);
        failed.last_output = Some("Error: boom".into());
        failed.failure_class = Some(FailureClass::Unknown);
        assert_eq!(
            node_line(&failed, 1, 2),
            "[1/2] FAILED  edge-0 (10.0.0.0:22) 1.5s: [unknown] the keadm command failed: Process exited with status 1 (last output: Error: boom)"
        );
        // A long reason keeps its start and its end, where the cause is.
        failed.last_output = Some(format!("{}: the cause", "x".repeat(400)));
        let line = node_line(&failed, 1, 2);
        assert!(line.len() < 300, "{line}");
        assert!(
            line.contains(": [unknown] the keadm command failed: Process exited with stat ... ")
                && line.ends_with("xxx: the cause)"),
            "{line}"
        );
        failed.last_output = Some("Error: boom".into());
        let options = RunOptions {
            config: "site a.yaml".into(),
            ..RunOptions::default()
        };
        let recap = render(&Run {
            outcomes: &[failed, skipped],
            waves: &[],
            options: &options,
            wall_secs: 1.0,
        });
        assert!(
            recap.contains("  edge-0                   failed      [unknown] the keadm command failed: Process exited with status 1 (last output: Error: boom)\n"),
            "{recap}"
        );
        assert!(!recap.contains(command), "{recap}");
        assert!(!recap.contains("-0.0s"), "{recap}");
        // The config as given, quoted for the shell, so the line can be pasted.
        assert!(
            recap.contains(
                "then, once the causes above are fixed: keadm-batch batch -c 'site a.yaml' --retry-failed\n"
            ),
            "{recap}"
        );
        assert_eq!(
            places(
                Path::new("batch_process_log.txt"),
                Path::new("run"),
                Some(Path::new("run/report.html"))
            ),
            "\nResults: batch_process_log.txt\nTranscripts and summary: run\nReport: run/report.html\n"
        );
    }

    /// Twelve nodes with the same pre-flight finding: one block naming it once, with its
    /// count, its nodes once and its fix once.
    #[test]
    fn the_recap_groups_pre_flight_findings_by_id() {
        use crate::diagnosis::{Finding, FindingId};
        let finding = |id| Finding {
            id,
            detail: "seen here".into(),
        };
        let outcomes: Vec<NodeOutcome> = (0..12)
            .map(|i| {
                let mut o = NodeOutcome::not_run(
                    i,
                    &format!("edge-{i:02}"),
                    "10.0.0.1:22",
                    Phase::Succeeded,
                    "",
                );
                o.error = None;
                o.preflight = vec![finding(FindingId::ClockSkew)];
                if i == 3 {
                    o.preflight.insert(0, finding(FindingId::LowDisk));
                }
                o
            })
            .collect();
        let options = options("c.yaml");
        let recap = render(&Run {
            outcomes: &outcomes,
            waves: &[],
            options: &options,
            wall_secs: 1.0,
        });
        let skew = finding(FindingId::ClockSkew);
        let expected = format!(
            "  low_disk, 1 node: edge-03\n    {}\n    -> {}\n  clock_skew, 12 nodes: edge-00..edge-11\n    {}\n    -> {}\n",
            finding(FindingId::LowDisk).message(),
            finding(FindingId::LowDisk).suggested_action(),
            skew.message(),
            skew.suggested_action()
        );
        assert!(recap.contains(&expected), "{recap}");
        assert!(!recap.contains("then,"), "nothing failed: {recap}");
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
        let options = options("c.yaml");
        let recap = |outcomes: &[NodeOutcome]| {
            render(&Run {
                outcomes,
                waves: &[],
                options: &options,
                wall_secs: 1.0,
            })
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
