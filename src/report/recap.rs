//! The console: one line per finished node, and the end-of-run recap.

use std::fmt::Write;
use std::path::Path;

use crate::outcome::{NodeOutcome, Phase};

use super::summary::Totals;

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
