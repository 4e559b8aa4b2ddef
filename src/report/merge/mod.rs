//! `batch merge DIR...`: one summary and one keadm-style log from the run directories of
//! several shards (`--shard I/N` runs, on one controller or many).
//!
//! Each directory contributes its `summary.json`, or, when the run died before writing
//! it, its `journal.jsonl` (the nodes that finished). Every node must appear exactly once
//! across the inputs: a node in two directories means the inputs overlap (the same shard
//! twice, or shards of different splits), and merging them would count it twice, so
//! that is an error naming the node and both directories.
//!
//! The inputs are not trusted: whoever can write one shard's results (a shared volume)
//! could otherwise forge lines in the merged log and results for nodes that never ran.
//! So every input is checked before anything is merged, and a file that fails is refused
//! with its place: node names by the config's own rule ([`NameProblem`]), phases final,
//! every value of its type; with `-c`, every node one of the config's, at its address.
//! Text that passes reaches the log, the console and the merged summary escaped, as a
//! run's own does.

mod into;
mod shard;

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io;
use std::path::{Path, PathBuf};

use crate::config::validate::NameProblem;
use crate::node_text::escape_controls;
use crate::outcome::{NodeOutcome, Phase, SiteTraffic};

use super::log::LOG_FILE;
use super::run_dir::{JOURNAL, SUMMARY};
use super::summary::{SUMMARY_VERSION, StagedPackage, Summary, Totals};
pub use into::{Overlap, check_into};
use shard::read_run;
pub use shard::{JournalPlace, MAX_SHARD_FILE_BYTES};

/// Why the inputs cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{} is not a run directory: {source}. Give the directory a run wrote (batch_runs/<id>, or its --run-dir).",
        dir.display()
    )]
    NotADir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} has neither {SUMMARY} nor {JOURNAL}, so it is not a keadm-batch run directory. Give the directory a run wrote (batch_runs/<id>, or its --run-dir).",
        dir.display()
    )]
    NotARun { dir: PathBuf },
    /// Its summary.json or journal.jsonl exists but cannot be read.
    #[error(
        "{} cannot be read: {source}. Check its permissions, or remove it if the run that wrote it was cut off.",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A summary.json or journal.jsonl that is not a file a run writes: not read at all.
    #[error(
        "{} {reason}, so it was not read: a run writes its {SUMMARY} and {JOURNAL} as regular files of at most {} MiB. Merge run directories as their shard runs left them, or run that shard again. Nothing was merged or written.",
        path.display(),
        MAX_SHARD_FILE_BYTES >> 20
    )]
    NotAShardFile { path: PathBuf, reason: String },
    /// Site figures whose sum across the shards overflows.
    #[error(
        "The shards' {field} for site {site} add up to more than {max} with {}, which no run counts, so that summary was changed or damaged after its run. Merge run directories as their shard runs left them, or run that shard again. Nothing was merged or written.",
        path.display()
    )]
    SiteOverflow {
        site: String,
        field: &'static str,
        /// The most the field holds.
        max: u64,
        path: PathBuf,
    },
    /// A value in a shard's summary.json or journal.jsonl that a merge must not take.
    /// Boxed: it carries the place and the values, and errors travel by value.
    #[error(transparent)]
    Invalid(Box<InvalidInput>),
    #[error(
        "Node {node} appears in two run directories, {first} and {second}. Each node must come from exactly one shard run, so give each shard's run directory once."
    )]
    Duplicate {
        node: String,
        first: String,
        second: String,
    },
    #[error("The run directory {dir} is given twice. Give each shard's run directory once.")]
    SameDir { dir: String },
    /// `--into` where the merged files would overwrite or mix with a shard's own.
    #[error(
        "--into {} {overlap} {} given to merge, so the merged {SUMMARY} and {LOG_FILE} written there would overwrite or mix with that shard's own results. Give --into a directory outside every shard's run directory and not around one. Nothing was read or written.",
        into.display(),
        dir.display()
    )]
    IntoAShard {
        into: PathBuf,
        overlap: Overlap,
        dir: PathBuf,
    },
    #[error(
        "--into {} cannot be resolved against the current directory: {source}. Give --into the path of a directory outside every shard's run directory. Nothing was read or written.",
        into.display()
    )]
    IntoUnresolved {
        into: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A value in a shard's file that a merge must not take, and where it is.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}:{line}:{column}: {field} {problem}. {} Nothing was merged or written.",
    path.display(),
    problem.explanation()
)]
pub struct InvalidInput {
    pub path: PathBuf,
    /// 1-based; for a journal, its line.
    pub line: usize,
    /// 1-based, in bytes.
    pub column: usize,
    /// `nodes[3].name` in a summary, `name` in a journal line.
    pub field: String,
    pub problem: Problem,
}

/// What is wrong with a value in a shard's file; it follows the field in a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// Not JSON, a value of the wrong type, an unknown phase, a missing field: serde's
    /// words, escaped.
    Unreadable(String),
    /// A node name the config would refuse.
    Name(NameProblem, String),
    /// A phase a node has only while it runs.
    Unfinished(Phase),
    /// A node the file has recorded already (`first` says where).
    Repeated { name: String, first: String },
    /// A total that is not the count of the summary's nodes.
    Totals {
        field: &'static str,
        claimed: usize,
        counted: usize,
    },
    /// A node of the journal beside the summary that the summary does not list.
    MissingFromSummary {
        name: String,
        journal: JournalPlace,
        recorded: Phase,
    },
    /// A phase the journal beside the summary records otherwise.
    Contradicts {
        claimed: Phase,
        name: String,
        journal: JournalPlace,
        recorded: Phase,
    },
    /// A transcript path a run would not have written for the node.
    Transcript {
        found: String,
        name: String,
        /// Where a run writes it, in its run directory.
        expected: String,
    },
    /// The transcript, or its directory, in the shard is not what a run makes.
    TranscriptNotAFile { path: PathBuf, what: &'static str },
    /// An index past what a run counts.
    Index(usize),
    /// With `-c`: a node the config does not list.
    NotInConfig { name: String, config: PathBuf },
    /// With `-c`: the config gives the node another address.
    OtherAddress {
        found: String,
        name: String,
        expected: String,
        config: PathBuf,
    },
}

impl Problem {
    /// What the problem means, and what to do: sentences for after it.
    fn explanation(&self) -> &'static str {
        match self {
            Problem::Unreadable(_)
            | Problem::Name(..)
            | Problem::Unfinished(_)
            | Problem::Repeated { .. }
            | Problem::Totals { .. }
            | Problem::MissingFromSummary { .. }
            | Problem::Contradicts { .. }
            | Problem::Transcript { .. }
            | Problem::TranscriptNotAFile { .. }
            | Problem::Index(_) => {
                "A keadm-batch run never writes that, so the file was changed or damaged after its run. Merge run directories as their shard runs left them, or run that shard again."
            }
            Problem::NotInConfig { .. } | Problem::OtherAddress { .. } => {
                "The shard ran with another config, or its results were changed. Give the config the shards ran with, or leave that shard's run directory out."
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unreadable(why) => write!(f, "cannot be read: {why}"),
            Problem::Name(problem, name) => f.write_str(&problem.describe(name)),
            Problem::Unfinished(phase) => write!(
                f,
                "is {}, but a run records a node only once it has finished (succeeded, failed, timed_out, skipped or interrupted)",
                phase.as_str()
            ),
            Problem::Repeated { name, first } => write!(
                f,
                "is {name} again ({first} is {name} too), but a run records each node once"
            ),
            Problem::Totals {
                field,
                claimed,
                counted,
            } => {
                let nodes = if *counted == 1 { "node" } else { "nodes" };
                let was = if *counted == 1 { "was" } else { "were" };
                let how = match *field {
                    "selected" => String::new(),
                    "timed_out" => " that timed out".to_string(),
                    "skipped" | "interrupted" => format!(" that {was} {field}"),
                    other => format!(" that {other}"),
                };
                write!(f, "is {claimed}, but nodes holds {counted} {nodes}{how}")
            }
            Problem::MissingFromSummary {
                name,
                journal,
                recorded,
            } => write!(
                f,
                "lacks node {name}, which {journal} records as {}",
                recorded.as_str()
            ),
            Problem::Contradicts {
                claimed,
                name,
                journal,
                recorded,
            } => write!(
                f,
                "is {}, but {journal} records node {name} as {}",
                claimed.as_str(),
                recorded.as_str()
            ),
            Problem::Transcript {
                found,
                name,
                expected,
            } => write!(
                f,
                "is `{}`, but a run writes the transcript of node {name} as {expected} in its run directory",
                escape_controls(found)
            ),
            Problem::TranscriptNotAFile { path, what } => write!(
                f,
                "leads to {}, which is {what}, but a run writes its transcripts as regular files in a nodes directory of its own",
                escape_controls(&path.display().to_string())
            ),
            Problem::Index(index) => write!(f, "is {index}, more than a run counts"),
            Problem::NotInConfig { name, config } => {
                write!(f, "is {name}, which is not a node of {}", config.display())
            }
            Problem::OtherAddress {
                found,
                name,
                expected,
                config,
            } => write!(
                f,
                "is {}, but {} gives node {name} the address {expected}",
                escape_controls(found),
                config.display()
            ),
        }
    }
}

/// The nodes of the config given with `batch merge -c`: every merged node must be one
/// of them, at the address the config gives it.
#[derive(Debug, Clone)]
pub struct ConfigNodes {
    /// The config file, as given on the command line.
    pub path: PathBuf,
    /// Each node's name and its address as a run records it (`host:port`).
    pub addresses: HashMap<String, String>,
}

/// The merged result: a summary in the usual format plus where each input came from.
#[derive(Debug, Clone)]
pub struct Merged {
    pub summary: Summary,
    /// Inputs that had no summary.json, so only their journal was read.
    pub journal_only: Vec<PathBuf>,
}

impl Merged {
    /// keadm's `batch_process_log.txt` for the whole fleet: one line per node, in
    /// config order.
    pub fn log_text(&self) -> String {
        let mut out = String::new();
        for node in &self.summary.nodes {
            let _ = writeln!(out, "{}", node.log_line());
        }
        out
    }
}

/// Reads and checks every run directory, then merges them. Nothing is written here, so a
/// refused input leaves no trace.
pub fn merge(dirs: &[PathBuf], config: Option<&ConfigNodes>) -> Result<Merged, MergeError> {
    let mut seen_dirs: Vec<PathBuf> = Vec::new();
    let mut inputs: Vec<(PathBuf, Summary)> = Vec::new();
    let mut journal_only = Vec::new();
    for dir in dirs {
        let canonical = dir.canonicalize().map_err(|source| MergeError::NotADir {
            dir: dir.clone(),
            source,
        })?;
        if seen_dirs.contains(&canonical) {
            return Err(MergeError::SameDir {
                dir: dir.display().to_string(),
            });
        }
        seen_dirs.push(canonical);
        let (summary, from_journal) = read_run(dir, config)?;
        if from_journal {
            journal_only.push(dir.clone());
        }
        inputs.push((dir.clone(), summary));
    }
    let summary = combine(&inputs)?;
    Ok(Merged {
        summary,
        journal_only,
    })
}

/// One run directory's results as a merge reads them, checked and escaped: its
/// summary.json, else a summary rebuilt from its journal (a run that did not finish).
/// `batch report` writes its page from this.
pub fn read_run_dir(dir: &Path) -> Result<Summary, MergeError> {
    Ok(read_run(dir, None)?.0)
}

/// Combines summaries; pure, for tests.
pub fn combine(inputs: &[(PathBuf, Summary)]) -> Result<Summary, MergeError> {
    let mut owner: HashMap<&str, &Path> = HashMap::new();
    let mut nodes: Vec<NodeOutcome> = Vec::new();
    let mut packages: Vec<StagedPackage> = Vec::new();
    for (dir, summary) in inputs {
        // Each shard's file lists a node once (checked when it was read).
        for node in &summary.nodes {
            if let Some(first) = owner.insert(node.name.as_str(), dir.as_path()) {
                return Err(MergeError::Duplicate {
                    node: node.name.clone(),
                    first: first.display().to_string(),
                    second: dir.display().to_string(),
                });
            }
            nodes.push(node.clone());
        }
        for package in &summary.packages {
            if !packages.contains(package) {
                packages.push(package.clone());
            }
        }
    }
    nodes.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.name.cmp(&b.name)));
    let first = inputs.first().map(|(_, s)| s);
    Ok(Summary {
        version: SUMMARY_VERSION,
        tool: format!("keadm-batch {}", env!("CARGO_PKG_VERSION")),
        run_id: format!(
            "merged-{}",
            inputs
                .iter()
                .map(|(_, s)| s.run_id.as_str())
                .collect::<Vec<_>>()
                .join("+")
        ),
        config: first.map(|s| s.config.clone()).unwrap_or_default(),
        command_line: None,
        started_at: inputs
            .iter()
            .map(|(_, s)| s.started_at)
            .reduce(f64::min)
            .unwrap_or(0.0),
        finished_at: inputs
            .iter()
            .map(|(_, s)| s.finished_at)
            .fold(0.0, f64::max),
        interrupted: inputs.iter().any(|(_, s)| s.interrupted),
        totals: Totals::of(&nodes),
        packages,
        nodes,
        sites: merged_sites(inputs)?,
        // Each shard was a rollout of its own: its nodes keep their `wave`, but no one
        // list of waves describes the shards together.
        waves: Vec::new(),
        merged_from: inputs
            .iter()
            .map(|(dir, _)| dir.display().to_string())
            .collect(),
    })
}

/// The shards' site figures, added up per site (a site's nodes may be in several
/// shards); names escaped as every other text of a shard is. A sum that would overflow
/// is refused: no run counts that far, and a wrapped figure would be a lie.
fn merged_sites(inputs: &[(PathBuf, Summary)]) -> Result<Vec<SiteTraffic>, MergeError> {
    let mut sites: Vec<SiteTraffic> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for (dir, summary) in inputs {
        for site in &summary.sites {
            let name = escape_controls(&site.site);
            let i = *at.entry(name.clone()).or_insert_with(|| {
                sites.push(SiteTraffic {
                    site: name.clone(),
                    ..SiteTraffic::default()
                });
                sites.len() - 1
            });
            let sum = &mut sites[i];
            let overflow = |field, max| MergeError::SiteOverflow {
                site: name.clone(),
                field,
                max,
                path: dir.join(SUMMARY),
            };
            sum.nodes = sum
                .nodes
                .checked_add(site.nodes)
                .ok_or_else(|| overflow("nodes", usize::MAX as u64))?;
            sum.uplink_copies = sum
                .uplink_copies
                .checked_add(site.uplink_copies)
                .ok_or_else(|| overflow("uplink_copies", u32::MAX.into()))?;
            sum.uplink_bytes = sum
                .uplink_bytes
                .checked_add(site.uplink_bytes)
                .ok_or_else(|| overflow("uplink_bytes", u64::MAX))?;
            sum.peer_copies = sum
                .peer_copies
                .checked_add(site.peer_copies)
                .ok_or_else(|| overflow("peer_copies", u32::MAX.into()))?;
            sum.peer_bytes = sum
                .peer_bytes
                .checked_add(site.peer_bytes)
                .ok_or_else(|| overflow("peer_bytes", u64::MAX))?;
        }
    }
    Ok(sites)
}

/// The text the command prints: totals, the inputs, and the keadm-style log.
pub fn render(merged: &Merged) -> String {
    let s = &merged.summary;
    let t = &s.totals;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Merged {} run director{}: {} node{}: {} succeeded, {} failed, {} timed out, {} skipped, {} interrupted",
        s.merged_from.len(),
        if s.merged_from.len() == 1 { "y" } else { "ies" },
        t.selected,
        if t.selected == 1 { "" } else { "s" },
        t.succeeded,
        t.failed,
        t.timed_out,
        t.skipped,
        t.interrupted
    );
    for dir in &s.merged_from {
        let note = if merged
            .journal_only
            .iter()
            .any(|j| j.display().to_string() == *dir)
        {
            " (no summary.json: read from its journal; nodes that never finished are missing)"
        } else {
            ""
        };
        let _ = writeln!(out, "  from {dir}{note}");
    }
    out.push('\n');
    out.push_str(&merged.log_text());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Phase;

    fn summary(id: &str, nodes: &[(usize, &str, Phase)]) -> Summary {
        let nodes: Vec<NodeOutcome> = nodes
            .iter()
            .map(|(i, name, phase)| {
                let mut o = NodeOutcome::not_run(*i, name, "127.0.0.1:22", *phase, "boom");
                if *phase == Phase::Succeeded {
                    o.error = None;
                }
                o
            })
            .collect();
        Summary {
            version: SUMMARY_VERSION,
            tool: "t".into(),
            run_id: id.into(),
            config: "c.yaml".into(),
            command_line: None,
            started_at: 10.0,
            finished_at: 20.0,
            interrupted: false,
            totals: Totals::of(&nodes),
            packages: Vec::new(),
            nodes,
            sites: Vec::new(),
            waves: Vec::new(),
            merged_from: Vec::new(),
        }
    }

    /// A shard's nodes keep their site through the merge's reader (the merged JUnit
    /// classes and report groups read it), its control characters escaped.
    #[test]
    fn a_shard_s_sites_survive_its_reading_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let mut shard = summary("a", &[(0, "n0", Phase::Succeeded)]);
        shard.nodes[0].site = Some("north\x1b[2J".into());
        shard.write(&dir.path().join(SUMMARY)).unwrap();
        let read = read_run_dir(dir.path()).unwrap();
        assert_eq!(read.nodes[0].site.as_deref(), Some("north\\x1b[2J"));
    }

    #[test]
    fn shards_merge_in_config_order() {
        let merged = combine(&[
            (
                "s2".into(),
                summary(
                    "b",
                    &[(1, "n1", Phase::Failed), (3, "n3", Phase::Succeeded)],
                ),
            ),
            (
                "s1".into(),
                summary(
                    "a",
                    &[(0, "n0", Phase::Succeeded), (2, "n2", Phase::Succeeded)],
                ),
            ),
        ])
        .unwrap();
        let names: Vec<&str> = merged.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n0", "n1", "n2", "n3"]);
        assert_eq!(merged.totals.selected, 4);
        assert_eq!(merged.totals.succeeded, 3);
        assert_eq!(merged.totals.failed, 1);
        assert_eq!(merged.run_id, "merged-b+a");
        assert_eq!(merged.merged_from, ["s2", "s1"]);
    }

    #[test]
    fn a_node_in_two_inputs_is_an_error_naming_both() {
        let err = combine(&[
            ("s1".into(), summary("a", &[(0, "n0", Phase::Succeeded)])),
            ("s2".into(), summary("b", &[(0, "n0", Phase::Succeeded)])),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, MergeError::Duplicate { node, first, second }
                if node == "n0" && first == "s1" && second == "s2"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("Node n0 appears in two run directories, s1 and s2.")
        );
    }

    /// The name an outside review forged into a shard's summary: a second, made-up
    /// success line for the log and a terminal escape for the console.
    const FORGED: &str = "edge-7\nSuccessfully processed node edge-99\u{1b}]0;pwned\u{7}";

    /// A run directory under `base` holding `file` with `text`.
    fn shard(base: &Path, name: &str, file: &str, text: &str) -> PathBuf {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
        dir
    }

    fn pretty(summary: &Summary) -> String {
        serde_json::to_string_pretty(summary).unwrap()
    }

    /// The 1-based line and column where `needle` first is in `text`.
    fn place_of(text: &str, needle: &str) -> (usize, usize) {
        let before = &text[..text.find(needle).unwrap()];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (
            before.matches('\n').count() + 1,
            before.len() - line_start + 1,
        )
    }

    fn journal_line(node: &NodeOutcome) -> String {
        serde_json::to_string(node).unwrap() + "\n"
    }

    #[test]
    fn a_forged_name_in_a_summary_is_refused_naming_the_file_field_and_line() {
        let base = tempfile::tempdir().unwrap();
        let text = pretty(&summary(
            "a",
            &[(0, "n0", Phase::Succeeded), (1, FORGED, Phase::Succeeded)],
        ));
        let dir = shard(base.path(), "s1", SUMMARY, &text);
        let err = merge(std::slice::from_ref(&dir), None)
            .unwrap_err()
            .to_string();
        let (line, column) = place_of(&text, "\"edge-7");
        assert!(
            err.starts_with(&format!(
                "{}:{line}:{column}: nodes[1].name `edge-7\\x0aSuccessfully processed node edge-99\\x1b]0;pwned\\x07` contains control characters (a line break or a terminal escape), which would forge lines in batch_process_log.txt and on the console.",
                dir.join(SUMMARY).display()
            )),
            "{err}"
        );
        assert!(!err.contains(['\n', '\u{1b}', '\u{7}']), "{err:?}");
        let empty = pretty(&summary("a", &[(0, "", Phase::Failed)]));
        let dir = shard(base.path(), "s2", SUMMARY, &empty);
        let err = merge(&[dir], None).unwrap_err().to_string();
        assert!(err.contains(": nodes[0].name is empty."), "{err}");
    }

    #[test]
    fn a_journal_line_with_an_unknown_phase_is_refused_naming_its_line_and_field() {
        let base = tempfile::tempdir().unwrap();
        let good = |i: usize| NodeOutcome::not_run(i, &format!("n{i}"), "a:22", Phase::Failed, "x");
        let forged =
            journal_line(&good(1)).replace("\"phase\":\"failed\"", "\"phase\":\"succeded\"");
        let text = journal_line(&good(0)) + &forged + &journal_line(&good(2));
        let dir = shard(base.path(), "s1", JOURNAL, &text);
        let err = merge(std::slice::from_ref(&dir), None)
            .unwrap_err()
            .to_string();
        let column = forged.find("\"succeded\"").unwrap() + "\"succeded\"".len();
        assert!(
            err.starts_with(&format!(
                "{}:2:{column}: phase cannot be read: unknown variant `succeded`, expected one of `pending`,",
                dir.join(JOURNAL).display()
            )),
            "{err}"
        );
        // Only a torn last line is what a crash leaves; a bad line before it is not.
        let text = journal_line(&good(0)) + "{\"torn\n" + &journal_line(&good(2));
        let dir = shard(base.path(), "s2", JOURNAL, &text);
        let err = merge(std::slice::from_ref(&dir), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("{}:2:", dir.join(JOURNAL).display())),
            "{err}"
        );
    }

    #[test]
    fn wrong_types_and_unfinished_phases_are_errors_not_defaults() {
        let base = tempfile::tempdir().unwrap();
        let text = pretty(&summary(
            "a",
            &[(0, "n0", Phase::Succeeded), (1, "n1", Phase::Failed)],
        ));
        let cases = [
            // (what is replaced in node 1, the field, what the message says)
            (
                "\"bytes_uploaded\": 0",
                "\"bytes_uploaded\": \"lots\"",
                "nodes[1].bytes_uploaded cannot be read: invalid type: string \"lots\", expected u64",
            ),
            (
                "\"connect_attempts\": 0",
                "\"connect_attempts\": -1",
                "nodes[1].connect_attempts cannot be read: invalid value: integer `-1`, expected u32",
            ),
            (
                "\"error\": \"boom\"",
                "\"error\": 7",
                "nodes[1].error cannot be read: invalid type: integer `7`, expected a string",
            ),
            (
                "\"phase\": \"failed\"",
                "\"phase\": \"running\"",
                "nodes[1].phase is running, but a run records a node only once it has finished",
            ),
        ];
        for (i, (from, to, says)) in cases.into_iter().enumerate() {
            let at = text.rfind(from).unwrap();
            let forged = format!("{}{to}{}", &text[..at], &text[at + from.len()..]);
            let dir = shard(base.path(), &format!("s{i}"), SUMMARY, &forged);
            let err = merge(std::slice::from_ref(&dir), None)
                .unwrap_err()
                .to_string();
            let line = forged[..at].lines().count();
            assert!(
                err.starts_with(&format!("{}:{line}", dir.join(SUMMARY).display())),
                "{to}: {err}"
            );
            assert!(err.contains(says), "{to}: {err}");
        }
    }

    #[test]
    fn with_a_config_every_node_must_be_one_of_its_own_at_its_address() {
        let base = tempfile::tempdir().unwrap();
        let config = ConfigNodes {
            path: "c.yaml".into(),
            addresses: [("n0", "127.0.0.1:22"), ("n1", "10.0.0.2:22")]
                .into_iter()
                .map(|(name, address)| (name.to_string(), address.to_string()))
                .collect(),
        };
        let at = |name: &str, nodes: &[(usize, &str, Phase)]| {
            shard(base.path(), name, SUMMARY, &pretty(&summary(name, nodes)))
        };
        let n0 = at("s0", &[(0, "n0", Phase::Succeeded)]);
        for (shard, says) in [
            (
                at("s1", &[(1, "n1", Phase::Succeeded)]),
                ": nodes[0].address is 127.0.0.1:22, but c.yaml gives node n1 the address 10.0.0.2:22. The shard ran with another config, or its results were changed.",
            ),
            (
                at("s2", &[(9, "n9", Phase::Succeeded)]),
                ": nodes[0].name is n9, which is not a node of c.yaml.",
            ),
        ] {
            let err = merge(&[n0.clone(), shard], Some(&config)).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
        // An outcome without an address has nothing to compare.
        let mut n1 = NodeOutcome::not_run(1, "n1", "", Phase::Failed, "x");
        n1.address.clear();
        let journal = shard(base.path(), "s3", JOURNAL, &journal_line(&n1));
        let merged = merge(&[n0, journal], Some(&config)).unwrap();
        assert_eq!(merged.summary.nodes.len(), 2);
    }

    #[test]
    fn node_text_from_a_shard_reaches_the_log_and_the_console_escaped() {
        let base = tempfile::tempdir().unwrap();
        let mut forged = summary("a", &[(0, "n0", Phase::Failed)]);
        forged.nodes[0].error = Some(format!("boom\u{1b}[2J\n{FORGED}"));
        forged.nodes[0].last_output = Some("\u{1b}]0;pwned\u{7}".into());
        forged.nodes[0].address = "a:22\u{1b}[1A".into();
        forged.run_id = "a\u{1b}[2J".into();
        let dir = shard(base.path(), "s1", SUMMARY, &pretty(&forged));
        let merged = merge(&[dir], None).unwrap();
        let node = &merged.summary.nodes[0];
        assert_eq!(
            node.error.as_deref(),
            Some(
                "boom\\x1b[2J\\x0aedge-7\\x0aSuccessfully processed node edge-99\\x1b]0;pwned\\x07"
            )
        );
        assert_eq!(node.last_output.as_deref(), Some("\\x1b]0;pwned\\x07"));
        assert_eq!(node.address, "a:22\\x1b[1A");
        assert_eq!(merged.summary.run_id, "merged-a\\x1b[2J");
        let log = merged.log_text();
        assert_eq!(log.lines().count(), 1, "{log}");
        let shown = render(&merged);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown:?}"
        );
    }

    #[test]
    fn a_crashed_run_is_read_from_its_journal() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        let node = NodeOutcome::not_run(0, "n0", "a:22", Phase::Failed, "x");
        std::fs::write(
            dir.join(JOURNAL),
            format!("{}\n{{\"torn", serde_json::to_string(&node).unwrap()),
        )
        .unwrap();
        let merged = merge(std::slice::from_ref(&dir), None).unwrap();
        assert_eq!(merged.summary.nodes.len(), 1);
        assert_eq!(merged.journal_only, vec![dir.clone()]);
        assert!(render(&merged).contains("read from its journal"));
        assert!(matches!(
            merge(&[dir.clone(), dir.clone()], None),
            Err(MergeError::SameDir { .. })
        ));
        assert!(matches!(
            merge(&[base.path().to_path_buf()], None),
            Err(MergeError::NotARun { .. })
        ));
        assert!(matches!(
            merge(&[base.path().join("absent")], None),
            Err(MergeError::NotADir { .. })
        ));
    }

    /// The error of merging `dirs`, as text.
    fn refusal(dirs: &[PathBuf]) -> String {
        merge(dirs, None).unwrap_err().to_string()
    }

    #[test]
    fn totals_that_disagree_with_the_nodes_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let mut forged = summary(
            "a",
            &[(0, "n0", Phase::Succeeded), (1, "n1", Phase::Failed)],
        );
        forged.totals.succeeded = 2;
        forged.totals.failed = 0;
        let text = pretty(&forged);
        let dir = shard(base.path(), "s1", SUMMARY, &text);
        let err = refusal(std::slice::from_ref(&dir));
        let (line, column) = place_of(&text, "2,\n    \"failed\"");
        assert!(
            err.starts_with(&format!(
                "{}:{line}:{column}: totals.succeeded is 2, but nodes holds 1 node that succeeded.",
                dir.join(SUMMARY).display()
            )),
            "{err}"
        );
        assert!(err.ends_with("Nothing was merged or written."), "{err}");
    }

    #[test]
    fn a_node_recorded_twice_in_one_shard_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let twice = summary(
            "a",
            &[
                (0, "n0", Phase::Failed),
                (1, "n1", Phase::Failed),
                (0, "n0", Phase::Succeeded),
            ],
        );
        let dir = shard(base.path(), "s1", SUMMARY, &pretty(&twice));
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.contains(": nodes[2].name is n0 again (nodes[0] is n0 too), but a run records each node once."),
            "{err}"
        );
        let good = |i: usize| NodeOutcome::not_run(i, &format!("n{i}"), "a:22", Phase::Failed, "x");
        let text = journal_line(&good(0)) + &journal_line(&good(1)) + &journal_line(&good(0));
        let dir = shard(base.path(), "s2", JOURNAL, &text);
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.starts_with(&format!(
                "{}:3:19: name is n0 again (line 1 is n0 too), but a run records each node once.",
                dir.join(JOURNAL).display()
            )),
            "{err}"
        );
    }

    /// A run writes each node to its journal as it finishes and the same outcome into
    /// its summary at the end: a summary that says otherwise was changed.
    #[test]
    fn a_summary_that_contradicts_its_journal_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let failed = NodeOutcome::not_run(1, "n1", "127.0.0.1:22", Phase::Failed, "boom");
        let journal = journal_line(&summary("a", &[(0, "n0", Phase::Succeeded)]).nodes[0])
            + &journal_line(&failed);
        let claims = pretty(&summary(
            "a",
            &[(0, "n0", Phase::Succeeded), (1, "n1", Phase::Succeeded)],
        ));
        let dir = shard(base.path(), "s1", SUMMARY, &claims);
        std::fs::write(dir.join(JOURNAL), &journal).unwrap();
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.contains(&format!(
                ": nodes[1].phase is succeeded, but {}:2 records node n1 as failed.",
                dir.join(JOURNAL).display()
            )),
            "{err}"
        );
        // The journal's own nodes must all be in the summary.
        let fewer = pretty(&summary("a", &[(0, "n0", Phase::Succeeded)]));
        std::fs::write(dir.join(SUMMARY), &fewer).unwrap();
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.contains(&format!(
                ": nodes lacks node n1, which {}:2 records as failed.",
                dir.join(JOURNAL).display()
            )),
            "{err}"
        );
    }

    /// The merged summary points at each transcript where it is now, in the shard's run
    /// directory under the name a run gives it; a recorded path that a run would not have
    /// written, or a transcript that is not a regular file there, is refused.
    #[test]
    fn transcripts_are_found_in_the_shard_or_refused() {
        let base = tempfile::tempdir().unwrap();
        let mut honest = summary(
            "a",
            &[(0, "n0", Phase::Succeeded), (1, "n1", Phase::Failed)],
        );
        honest.nodes[0].transcript = Some("/srv/elsewhere/run/nodes/1-n0.log".into());
        // Only the file's name says anything: the rest was where the shard ran.
        honest.nodes[1].transcript = Some("../../etc/nodes/2-n1.log".into());
        let dir = shard(base.path(), "s1", SUMMARY, &pretty(&honest));
        std::fs::create_dir(dir.join("nodes")).unwrap();
        std::fs::write(dir.join("nodes/1-n0.log"), "transcript\n").unwrap();
        let merged = merge(std::slice::from_ref(&dir), None).unwrap();
        let transcripts: Vec<Option<String>> = merged
            .summary
            .nodes
            .iter()
            .map(|n| n.transcript.clone())
            .collect();
        // n1's transcript did not come along with the shard's results.
        assert_eq!(
            transcripts,
            [Some(dir.join("nodes/1-n0.log").display().to_string()), None]
        );

        for (i, (recorded, says)) in [
            (
                "/etc/shadow",
                "nodes[0].transcript is `/etc/shadow`, but a run writes the transcript of node n0 as nodes/1-n0.log in its run directory.",
            ),
            (
                "run/nodes/1-n0.log/../../../../etc/shadow",
                "nodes[0].transcript is `run/nodes/1-n0.log/../../../../etc/shadow`, but a run writes",
            ),
            (
                "run/logs/1-n0.log",
                "nodes[0].transcript is `run/logs/1-n0.log`, but a run writes",
            ),
            (
                "run/nodes/2-n1.log",
                "nodes[0].transcript is `run/nodes/2-n1.log`, but a run writes the transcript of node n0 as nodes/1-n0.log",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut forged = honest.clone();
            forged.nodes[0].transcript = Some(recorded.into());
            let dir = shard(base.path(), &format!("f{i}"), SUMMARY, &pretty(&forged));
            let err = refusal(std::slice::from_ref(&dir));
            assert!(err.contains(says), "{recorded}: {err}");
        }

        // A transcript that is a symbolic link out of the shard.
        let outside = base.path().join("secret");
        std::fs::write(&outside, "not a transcript").unwrap();
        let dir = shard(base.path(), "link", SUMMARY, &pretty(&honest));
        std::fs::create_dir(dir.join("nodes")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("nodes/1-n0.log")).unwrap();
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.contains(&format!(
                ": nodes[0].transcript leads to {}, which is a symbolic link, but a run writes its transcripts as regular files in a nodes directory of its own.",
                dir.join("nodes/1-n0.log").display()
            )),
            "{err}"
        );
        // And a nodes directory that is one.
        let dir = shard(base.path(), "linked-dir", SUMMARY, &pretty(&honest));
        std::os::unix::fs::symlink(base.path().join("s1/nodes"), dir.join("nodes")).unwrap();
        let err = refusal(std::slice::from_ref(&dir));
        assert!(err.contains("which is a symbolic link"), "{err}");
    }

    /// Site figures are added up across shards; forged ones that would overflow are
    /// refused, not wrapped (or a panic).
    #[test]
    fn site_figures_that_overflow_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let site = SiteTraffic {
            site: "lab".into(),
            nodes: 2,
            uplink_bytes: u64::MAX,
            ..SiteTraffic::default()
        };
        let dirs: Vec<PathBuf> = [(0, "s1"), (1, "s2")]
            .into_iter()
            .map(|(i, name)| {
                let mut one = summary(name, &[(i, &format!("n{i}"), Phase::Succeeded)]);
                one.sites = vec![site.clone()];
                shard(base.path(), name, SUMMARY, &pretty(&one))
            })
            .collect();
        let err = refusal(&dirs);
        assert!(
            err.starts_with(&format!(
                "The shards' uplink_bytes for site lab add up to more than 18446744073709551615 with {}, which no run counts, so that summary was changed or damaged after its run.",
                dirs[1].join(SUMMARY).display()
            )),
            "{err}"
        );
    }

    /// JSON nested 100,000 deep costs a merge no stack and no time: in a field the format
    /// does not have, serde_json skips it without recursing (a newer version's fields
    /// are skipped so); where the format has a value, the first bracket is refused at
    /// its place.
    #[test]
    fn deep_nesting_is_skipped_or_refused_quickly() {
        let base = tempfile::tempdir().unwrap();
        let text = pretty(&summary("a", &[(0, "n0", Phase::Failed)]));
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let start = std::time::Instant::now();
        let unknown = text.replacen(
            "\"error\": ",
            &format!("\"extra\": {deep},\n      \"error\": "),
            1,
        );
        let dir = shard(base.path(), "s1", SUMMARY, &unknown);
        let merged = merge(std::slice::from_ref(&dir), None).unwrap();
        assert_eq!(merged.summary.nodes[0].error.as_deref(), Some("boom"));
        let typed = text.replacen("\"error\": \"boom\"", &format!("\"error\": {deep}"), 1);
        let dir = shard(base.path(), "s2", SUMMARY, &typed);
        let err = refusal(std::slice::from_ref(&dir));
        assert!(
            err.contains(
                ":24:15: nodes[0] cannot be read: invalid type: sequence, expected a string."
            ),
            "{err}"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }
}
