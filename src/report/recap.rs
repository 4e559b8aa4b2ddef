//! The console: one line per finished node, and the end-of-run recap.

use std::fmt::Write;
use std::path::Path;

use crate::diagnosis::FailureClass;
use crate::options::Shard;
use crate::outcome::{NodeOutcome, Phase};

use super::summary::Totals;

/// The line before the first node starts: `Processing 20 nodes of shard 2/4 (...) (5 at
/// once); transcripts in batch_runs/<id>`.
pub fn banner(nodes: usize, shard: Option<Shard>, max_run_num: usize, run_dir: &Path) -> String {
    format!(
        "Processing {nodes} node{}{} ({} at once); transcripts in {}",
        if nodes == 1 { "" } else { "s" },
        shard.map(|s| format!(" of shard {s}")).unwrap_or_default(),
        max_run_num.min(nodes.max(1)),
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
        "[{done:>width$}/{total}] {status:<7} {} ({}) {secs:.1}s",
        o.name, o.address
    );
    if let Some(error) = &o.error
        && !o.succeeded()
    {
        let _ = write!(line, ": {error}");
    }
    line
}

/// The end-of-run recap: totals, failures with reasons, slowest nodes, where things are.
pub fn render(outcomes: &[NodeOutcome], run_dir: &Path, log_path: &Path, wall_secs: f64) -> String {
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
                o.error.as_deref().unwrap_or("")
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
                "    then: keadm-batch batch -c <config> --retry-failed --class {}",
                class.as_str()
            );
        }
    }
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
