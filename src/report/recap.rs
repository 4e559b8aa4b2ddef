//! The console: one line per finished node, and the end-of-run recap.

use std::fmt::Write;
use std::path::Path;

use crate::diagnosis::FailureClass;
use crate::options::Shard;
use crate::outcome::{NodeOutcome, Phase, SiteTraffic};
use crate::shell::shell_quote;

use super::summary::Totals;

/// The line before the first node starts: `Processing 20 nodes of shard 2/4 (...) (5 at
/// once); transcripts in batch_runs/<id>`. With `--canary N`, it says that the first N run
/// alone before the rest: `Processing 20 nodes (first 2 as a canary, 2 at once; then the
/// other 18, 5 at once); ...`.
pub fn banner(
    nodes: usize,
    shard: Option<Shard>,
    max_run_num: usize,
    canary: Option<usize>,
    run_dir: &Path,
) -> String {
    let at_once = |count: usize| max_run_num.min(count.max(1));
    let pace = match canary.map(|c| c.min(nodes)) {
        Some(first) if first > 0 && first < nodes => format!(
            "first {first} as a canary, {} at once; then the other {}, {} at once",
            at_once(first),
            nodes - first,
            at_once(nodes - first)
        ),
        Some(first) if first > 0 => format!("all as a canary, {} at once", at_once(first)),
        _ => format!("{} at once", at_once(nodes)),
    };
    format!(
        "Processing {nodes} node{}{} ({pace}); transcripts in {}",
        if nodes == 1 { "" } else { "s" },
        shard.map(|s| format!(" of shard {s}")).unwrap_or_default(),
        run_dir.display()
    )
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
            let _ = writeln!(out, "    fix: {}", class.suggested_fix());
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

/// With a kubeconfig: how long the Ready joins took after keadm exited, the median and
/// the slowest, with their time to registered.
fn render_ready(out: &mut String, outcomes: &[NodeOutcome]) {
    let mut ready: Vec<(&str, f64, f64)> = outcomes
        .iter()
        .filter_map(|o| {
            let c = o.cluster.as_ref()?;
            Some((
                o.name.as_str(),
                c.ready_after?,
                c.registered_after.unwrap_or(0.0),
            ))
        })
        .collect();
    if ready.is_empty() {
        return;
    }
    ready.sort_by(|a, b| b.1.total_cmp(&a.1));
    let median = ready[ready.len() / 2].1;
    let slowest: Vec<String> = ready
        .iter()
        .take(5)
        .map(|(name, ready, registered)| {
            format!("{name} {ready:.1}s (registered {registered:.1}s)")
        })
        .collect();
    let _ = writeln!(
        out,
        "\nReady in the cluster: {} node(s), after keadm exited: median {median:.1}s; slowest: {}",
        ready.len(),
        slowest.join(", ")
    );
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

    #[test]
    fn the_banner_says_how_a_canary_runs() {
        let dir = Path::new("batch_runs/x");
        assert_eq!(
            banner(20, None, 5, None, dir),
            "Processing 20 nodes (5 at once); transcripts in batch_runs/x"
        );
        assert_eq!(
            banner(20, None, 5, Some(2), dir),
            "Processing 20 nodes (first 2 as a canary, 2 at once; then the other 18, 5 at once); transcripts in batch_runs/x"
        );
        assert_eq!(
            banner(1, None, 5, Some(3), dir),
            "Processing 1 node (all as a canary, 1 at once); transcripts in batch_runs/x"
        );
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
}
