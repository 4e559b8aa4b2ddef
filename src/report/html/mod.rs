//! `report.html`: the run at a glance, for a browser. One self-contained file written
//! beside summary.json from the summary alone (so `batch report RUN_DIR` and `batch merge`
//! write the same page a run does): the header, a timeline of every node's phases on one
//! time axis, the failures by class with their fix, the sites and the slowest nodes.
//!
//! Every row is rendered here, not by the page's script: the page reads without
//! JavaScript, and the browser's own find works on it. The script only filters, sorts,
//! groups and zooms what is there. Node text is hostile: the template escapes every value
//! it is given (askama's HTML escaping), node text is also bounded and its control
//! characters escaped, and the page's Content-Security-Policy runs no script but the one
//! shipped, by its hash. What each part shows: docs/summary.md, "report.html".

mod transcript_link;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use askama::Template;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::summary::{FINAL_PHASES, Summary, counted_as};
use crate::diagnosis::FailureClass;
use crate::node_text::{escape_controls, one_line};
use crate::outcome::{NodeOutcome, Phase};
use crate::waves::WaveResult;
use transcript_link::transcript_href;

/// The report's file name in a run directory.
pub const REPORT: &str = "report.html";
/// Node text in the page: at most this many characters per value.
const TEXT_CHARS: usize = 400;
/// The command line in the header: at most this many characters.
const COMMAND_LINE_CHARS: usize = 4000;
/// The slowest nodes listed.
const SLOWEST: usize = 10;

const STYLE: &str = include_str!("../../../templates/report.css");
const SCRIPT: &str = include_str!("../../../templates/report.js");

/// The timeline's phases, in the order a node goes through them.
pub const PHASES: [&str; 5] = ["connect", "prepare", "upload", "run", "ready"];

#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    csp: String,
    style: &'static str,
    script: &'static str,
    title: String,
    run_id: String,
    config: String,
    command_line: Option<String>,
    merged_from: Vec<String>,
    started: String,
    duration: String,
    exit_status: i32,
    exit_meaning: &'static str,
    counts: Vec<Count>,
    span: String,
    ticks: Vec<Tick>,
    rows: Vec<Row>,
    outcomes: Vec<&'static str>,
    classes: Vec<(String, String)>,
    sites: Vec<String>,
    has_waves: bool,
    failures: Vec<FailureGroup>,
    /// The pre-flight findings by id, as failures are by class: the id, what it is, its
    /// fix, and each node that has it with what was seen there.
    preflight: Vec<FailureGroup>,
    site_rows: Vec<SiteRow>,
    waves: Vec<WaveRow>,
    slowest: Vec<Slow>,
    phase_stats: Vec<PhaseStat>,
    phases: &'a [&'static str],
}

struct Count {
    outcome: &'static str,
    count: usize,
}

struct Tick {
    at: String,
    label: String,
}

struct Row {
    name: String,
    address: String,
    outcome: &'static str,
    class: String,
    site: String,
    wave: String,
    start: String,
    duration: String,
    duration_text: String,
    /// With a kubeconfig, a Node that was Ready: the time from the node's start to it
    /// (`Ready 31.2 s`) and, as its tooltip, both figures.
    ready: Option<(String, String)>,
    bars: Vec<Bar>,
    href: Option<String>,
    /// What the row shows of its error: keadm's last line when it has one (the words
    /// that differ from node to node), else the error.
    error: Option<String>,
    /// The whole error, with keadm's last output, as the row's tooltip.
    error_title: Option<String>,
}

struct Bar {
    phase: &'static str,
    start: String,
    length: String,
    title: String,
}

struct FailureGroup {
    class: String,
    title: String,
    fix: String,
    nodes: Vec<FailedNode>,
}

struct FailedNode {
    name: String,
    error: String,
    href: Option<String>,
}

struct SiteRow {
    site: String,
    nodes: usize,
    succeeded: usize,
    not_succeeded: usize,
    uplink: String,
    peers: String,
    slowest: String,
    slowest_time: String,
    /// The longest single phase of any of its nodes: `run 41.2 s (edge-7)`.
    slowest_phase: String,
}

struct WaveRow {
    number: usize,
    nodes: usize,
    succeeded: usize,
    failed: usize,
    tolerance: String,
    result: &'static str,
}

struct Slow {
    name: String,
    outcome: &'static str,
    site: String,
    duration: String,
    href: Option<String>,
}

struct PhaseStat {
    phase: &'static str,
    nodes: usize,
    median: String,
    p90: String,
    max: String,
    slowest: String,
}

/// The page of `summary`, whose run directory is `run_dir` (transcript links are made
/// relative to it).
pub fn render(summary: &Summary, run_dir: &Path) -> String {
    let t0 = summary.started_at;
    let end = summary
        .nodes
        .iter()
        .map(|n| n.finished_at)
        .fold(summary.finished_at, f64::max);
    let span = (end - t0).max(1.0);
    let rows: Vec<Row> = summary
        .nodes
        .iter()
        .map(|node| row(node, t0, run_dir))
        .collect();
    let mut classes: BTreeMap<String, String> = BTreeMap::new();
    for node in &summary.nodes {
        if let Some(class) = node.failure_class {
            classes.insert(class.as_str().to_string(), class.title().to_string());
        }
    }
    let mut sites: Vec<String> = summary
        .nodes
        .iter()
        .filter_map(|n| n.site.as_deref().map(text))
        .collect();
    sites.sort();
    sites.dedup();
    let page = Page {
        csp: format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'unsafe-inline'; img-src data:",
            base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()))
        ),
        style: STYLE,
        script: SCRIPT,
        title: format!(
            "keadm-batch: {} ({})",
            text(
                &Path::new(&summary.config)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| summary.config.clone())
            ),
            text(&summary.run_id)
        ),
        run_id: text(&summary.run_id),
        config: text(&summary.config),
        command_line: summary
            .command_line
            .as_deref()
            .map(|c| bounded(c, COMMAND_LINE_CHARS)),
        merged_from: summary.merged_from.iter().map(|d| text(d)).collect(),
        started: crate::utc::rfc3339(t0.max(0.0) as u64),
        duration: human(summary.finished_at - t0),
        exit_status: summary.exit_status(),
        exit_meaning: match summary.exit_status() {
            0 => "every selected node succeeded",
            130 => "the operator stopped the run",
            _ => "some node did not succeed",
        },
        counts: counts(&summary.nodes),
        span: number(span),
        ticks: ticks(span),
        outcomes: FINAL_PHASES
            .iter()
            .map(|p| p.as_str())
            .filter(|o| rows.iter().any(|r| r.outcome == *o))
            .collect(),
        classes: classes.into_iter().collect(),
        has_waves: summary.nodes.iter().any(|n| n.wave.is_some()),
        sites,
        failures: failures(&summary.nodes, run_dir),
        preflight: preflight(&summary.nodes, run_dir),
        site_rows: site_rows(summary),
        waves: summary
            .waves
            .iter()
            .map(|w| WaveRow {
                number: w.number,
                nodes: w.nodes.len(),
                succeeded: w.succeeded,
                failed: w.failed,
                tolerance: w.tolerance.map_or("any".to_string(), |t| t.to_string()),
                result: match w.result {
                    WaveResult::Passed => "passed",
                    WaveResult::Stopped => "stopped the rollout",
                    WaveResult::NotStarted => "not started",
                    WaveResult::Interrupted => "interrupted",
                },
            })
            .collect(),
        slowest: slowest(&summary.nodes, run_dir),
        phase_stats: phase_stats(&summary.nodes),
        phases: &PHASES,
        rows,
    };
    page.render().unwrap_or_else(|e| {
        // Rendering into a String fails only on a bug in a template; say so on the page.
        format!(
            "<!DOCTYPE html><title>keadm-batch report</title><p>keadm-batch could not render this report: {}</p>",
            text(&e.to_string()).replace('<', "&lt;")
        )
    })
}

/// Writes the page of `summary` into `run_dir` as report.html, atomically (0600, via a
/// temporary file renamed over it).
pub fn write(summary: &Summary, run_dir: &Path) -> io::Result<PathBuf> {
    let path = run_dir.join(REPORT);
    super::files::replace(&path, render(summary, run_dir).as_bytes())?;
    Ok(path)
}

/// A node's outcome as the page names it: its final phase as the totals count it.
fn outcome(node: &NodeOutcome) -> &'static str {
    counted_as(node.phase).as_str()
}

fn counts(nodes: &[NodeOutcome]) -> Vec<Count> {
    FINAL_PHASES
        .iter()
        .map(|phase| Count {
            outcome: phase.as_str(),
            count: nodes
                .iter()
                .filter(|n| counted_as(n.phase) == *phase)
                .count(),
        })
        .collect()
}

fn row(node: &NodeOutcome, t0: f64, run_dir: &Path) -> Row {
    let duration = (node.finished_at - node.started_at).max(0.0);
    Row {
        name: text(&node.name),
        address: text(&node.address),
        outcome: outcome(node),
        class: node
            .failure_class
            .map(|c| c.as_str().to_string())
            .unwrap_or_default(),
        site: node.site.as_deref().map(text).unwrap_or_default(),
        wave: node.wave.map(|w| w.to_string()).unwrap_or_default(),
        start: number(node.started_at - t0),
        duration: number(duration),
        duration_text: human(duration),
        ready: node.cluster.as_ref().and_then(|c| {
            let start = c.ready_after_start?;
            Some((
                format!("Ready {}", human(start)),
                format!(
                    "Ready {} after the node's start, {} after keadm exited",
                    human(start),
                    human(c.ready_after.unwrap_or(0.0))
                ),
            ))
        }),
        bars: bars(node, t0),
        href: transcript_href(node, run_dir),
        error: node
            .last_output
            .as_deref()
            .or(node.error.as_deref())
            .map(text),
        error_title: node.error_with_output().map(|e| text(&e)),
    }
}

/// The node's phases as bars: its steps one after the other from its start, then the wait
/// for Ready; whatever is left until it finished goes to the phase it stopped in.
fn bars(node: &NodeOutcome, t0: f64) -> Vec<Bar> {
    let mut spans: Vec<(&'static str, f64, f64)> = Vec::new();
    let mut at = node.started_at - t0;
    let steps = [
        ("connect", node.steps.connect),
        ("prepare", node.steps.prepare),
        ("upload", node.steps.upload),
        ("run", node.steps.run),
        ("ready", node.cluster.as_ref().and_then(|c| c.ready_after)),
    ];
    for (phase, secs) in steps {
        if let Some(secs) = secs.filter(|s| s.is_finite() && *s >= 0.0) {
            spans.push((phase, at, secs));
            at += secs;
        }
    }
    let left = node.finished_at - t0 - at;
    if left > 0.05 && node.steps.started() {
        let phase = match node.failed_in {
            Some(Phase::Connecting) => "connect",
            Some(Phase::Preparing) => "prepare",
            Some(Phase::Uploading) => "upload",
            Some(Phase::Running) => "run",
            _ if node.cluster.is_some() => "ready",
            _ => "run",
        };
        match spans.last_mut() {
            Some(last) if last.0 == phase => last.2 += left,
            _ => spans.push((phase, at, left)),
        }
    }
    spans
        .into_iter()
        .map(|(phase, start, secs)| bar(phase, start, secs))
        .collect()
}

fn bar(phase: &'static str, start: f64, secs: f64) -> Bar {
    Bar {
        phase,
        start: number(start),
        length: number(secs),
        title: format!("{phase}: {}", human_precise(secs)),
    }
}

/// The nodes that failed or timed out, by class (those with none last), each class with
/// its title and fix.
fn failures(nodes: &[NodeOutcome], run_dir: &Path) -> Vec<FailureGroup> {
    let mut by_class: BTreeMap<Option<FailureClass>, Vec<&NodeOutcome>> = BTreeMap::new();
    for node in nodes {
        if matches!(outcome(node), "failed" | "timed_out") {
            by_class.entry(node.failure_class).or_default().push(node);
        }
    }
    let mut groups: Vec<FailureGroup> = by_class
        .into_iter()
        .map(|(class, members)| FailureGroup {
            class: class.map_or("unclassified".to_string(), |c| c.as_str().to_string()),
            title: class
                .map_or("Failures with no class", |c| c.title())
                .to_string(),
            fix: class.map_or_else(
                || "Read the node's transcript: it ends with what went wrong.".to_string(),
                |c| c.fixes_for(members.iter().map(|n| n.task())).join(" "),
            ),
            nodes: members
                .iter()
                .map(|n| FailedNode {
                    name: text(&n.name),
                    error: n.error_with_output().map(|e| text(&e)).unwrap_or_default(),
                    href: transcript_href(n, run_dir),
                })
                .collect(),
        })
        .collect();
    // Those with a class first, the largest first; the unclassified last.
    groups.sort_by_key(|g| (g.class == "unclassified", std::cmp::Reverse(g.nodes.len())));
    groups
}

/// The pre-flight findings of `nodes`, grouped by id as the recap groups them, each
/// node with what its probe saw.
fn preflight(nodes: &[NodeOutcome], run_dir: &Path) -> Vec<FailureGroup> {
    // By index: each finding's nodes are then at hand, not looked up by name.
    let found = super::findings::by_id(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i, n.preflight.as_slice())),
    );
    found
        .into_iter()
        .map(|(id, members)| {
            let finding = crate::diagnosis::Finding {
                id,
                detail: String::new(),
            };
            FailureGroup {
                class: id.as_str().to_string(),
                title: finding.message().to_string(),
                fix: finding.suggested_action().to_string(),
                nodes: members
                    .into_iter()
                    .map(|i| &nodes[i])
                    .map(|n| FailedNode {
                        name: text(&n.name),
                        error: text(
                            &n.preflight
                                .iter()
                                .filter(|f| f.id == id && !f.detail.is_empty())
                                .map(|f| f.detail.as_str())
                                .collect::<Vec<_>>()
                                .join("; "),
                        ),
                        href: transcript_href(n, run_dir),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// One row per site (the nodes with none as one row), with what the relay moved.
fn site_rows(summary: &Summary) -> Vec<SiteRow> {
    // By name, the nodes with no site last.
    let mut members: BTreeMap<(bool, Option<&str>), Vec<&NodeOutcome>> = BTreeMap::new();
    for node in &summary.nodes {
        let site = node.site.as_deref();
        members
            .entry((site.is_none(), site))
            .or_default()
            .push(node);
    }
    if members.len() < 2 && summary.sites.is_empty() {
        return Vec::new();
    }
    let traffic: HashMap<&str, &crate::outcome::SiteTraffic> =
        summary.sites.iter().map(|t| (t.site.as_str(), t)).collect();
    members
        .into_iter()
        .map(|((_, site), nodes)| {
            let moved = site.and_then(|s| traffic.get(s));
            let slowest = nodes
                .iter()
                .max_by(|a, b| node_seconds(a).total_cmp(&node_seconds(b)));
            SiteRow {
                site: site.map_or("(no site)".to_string(), text),
                nodes: nodes.len(),
                succeeded: nodes.iter().filter(|n| n.phase == Phase::Succeeded).count(),
                not_succeeded: nodes.iter().filter(|n| n.phase != Phase::Succeeded).count(),
                uplink: moved.map_or("-".to_string(), |t| {
                    format!(
                        "{} in {} copies",
                        crate::human::size(t.uplink_bytes),
                        t.uplink_copies
                    )
                }),
                peers: moved.map_or("-".to_string(), |t| {
                    format!(
                        "{} in {} copies",
                        crate::human::size(t.peer_bytes),
                        t.peer_copies
                    )
                }),
                slowest: slowest.map(|n| text(&n.name)).unwrap_or_default(),
                slowest_time: slowest.map(|n| human(node_seconds(n))).unwrap_or_default(),
                slowest_phase: longest_phase(&nodes)
                    .map(|(phase, secs, node)| {
                        format!("{phase} {} ({})", human_precise(secs), text(&node.name))
                    })
                    .unwrap_or_else(|| "-".to_string()),
            }
        })
        .collect()
}

fn node_seconds(node: &NodeOutcome) -> f64 {
    (node.finished_at - node.started_at).max(0.0)
}

fn slowest(nodes: &[NodeOutcome], run_dir: &Path) -> Vec<Slow> {
    let mut started: Vec<&NodeOutcome> = nodes.iter().filter(|n| n.steps.started()).collect();
    started.sort_by(|a, b| node_seconds(b).total_cmp(&node_seconds(a)));
    started
        .into_iter()
        .take(SLOWEST)
        .map(|n| Slow {
            name: text(&n.name),
            outcome: outcome(n),
            site: n.site.as_deref().map(text).unwrap_or_default(),
            duration: human(node_seconds(n)),
            href: transcript_href(n, run_dir),
        })
        .collect()
}

/// The seconds `node` spent in `phase`, when it reached it.
fn phase_seconds(phase: &str, node: &NodeOutcome) -> Option<f64> {
    match phase {
        "connect" => node.steps.connect,
        "prepare" => node.steps.prepare,
        "upload" => node.steps.upload,
        "run" => node.steps.run,
        _ => node.cluster.as_ref().and_then(|c| c.ready_after),
    }
    .filter(|s| s.is_finite())
}

/// The longest single phase among `nodes`: the phase, its seconds and its node.
fn longest_phase<'n>(nodes: &[&'n NodeOutcome]) -> Option<(&'static str, f64, &'n NodeOutcome)> {
    PHASES
        .iter()
        .flat_map(|phase| {
            nodes
                .iter()
                .filter_map(move |n| Some((*phase, phase_seconds(phase, n)?, *n)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Each phase's median, 90th percentile and maximum over the nodes that reached it.
fn phase_stats(nodes: &[NodeOutcome]) -> Vec<PhaseStat> {
    PHASES
        .iter()
        .filter_map(|phase| {
            let mut times: Vec<(f64, &NodeOutcome)> = nodes
                .iter()
                .filter_map(|n| Some((phase_seconds(phase, n)?, n)))
                .collect();
            if times.is_empty() {
                return None;
            }
            times.sort_by(|a, b| a.0.total_cmp(&b.0));
            let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].0;
            let (max, slowest) = times[times.len() - 1];
            Some(PhaseStat {
                phase,
                nodes: times.len(),
                median: human_precise(at(0.5)),
                p90: human_precise(at(0.9)),
                max: human_precise(max),
                slowest: text(&slowest.name),
            })
        })
        .collect()
}

/// Nine evenly spaced labels on the time axis.
fn ticks(span: f64) -> Vec<Tick> {
    (0..=8)
        .map(|i| {
            let at = span * i as f64 / 8.0;
            Tick {
                at: number(at),
                label: human(at),
            }
        })
        .collect()
}

/// Node text for the page: one line, control characters escaped, bounded. (The template
/// escapes it for HTML.)
fn text(value: &str) -> String {
    bounded(value, TEXT_CHARS)
}

/// [`text`] with a bound of its own (the command line's is longer).
fn bounded(value: &str, chars: usize) -> String {
    escape_controls(&one_line(value, chars))
}

/// A number for a CSS variable or a data attribute: finite, in milliseconds' precision.
fn number(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.3}")
    } else {
        "0".to_string()
    }
}

/// Seconds with tenths under a minute (a node's time on the timeline), else as the
/// status line gives them.
fn human(secs: f64) -> String {
    if secs.is_finite() && secs < 60.0 {
        format!("{:.1} s", secs.max(0.0))
    } else {
        crate::human::duration(secs)
    }
}

fn human_precise(secs: f64) -> String {
    if secs.is_finite() && secs < 10.0 {
        format!("{:.2} s", secs.max(0.0))
    } else {
        human(secs)
    }
}

#[cfg(test)]
mod tests;
