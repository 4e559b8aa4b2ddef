//! `batch merge DIR...`: one summary and one keadm-style log from the run directories of
//! several shards (`--shard I/N` runs, on one controller or many).
//!
//! Each directory contributes its `summary.json`, or, when the run died before writing
//! it, its `journal.jsonl` (the nodes that finished). Every node must appear exactly once
//! across the inputs: a node in two directories means the inputs overlap (the same shard
//! twice, or shards of different splits), and merging them would count it twice, so
//! that is an error naming the node and both directories.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::outcome::NodeOutcome;

use super::run_dir::{JOURNAL, SUMMARY, read_journal};
use super::summary::{SUMMARY_VERSION, StagedPackage, Summary, Totals};

/// Why the inputs cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{} is not a run directory: {source}. Give the run directories of the shard runs (batch_runs/<id>).",
        dir.display()
    )]
    NotADir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} has neither {SUMMARY} nor {JOURNAL}, so it is not a keadm-batch run directory. Give the run directories of the shard runs (batch_runs/<id>).",
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

/// Reads every run directory and merges them.
pub fn merge(dirs: &[PathBuf]) -> Result<Merged, MergeError> {
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
        let (summary, from_journal) = read_run(dir)?;
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

/// A run directory's summary, or one rebuilt from its journal (then `true`).
fn read_run(dir: &Path) -> Result<(Summary, bool), MergeError> {
    let unreadable = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Unreadable { path, source }
    };
    let summary_path = dir.join(SUMMARY);
    if summary_path.exists() {
        let summary = Summary::read(&summary_path).map_err(unreadable(&summary_path))?;
        return Ok((summary, false));
    }
    let journal_path = dir.join(JOURNAL);
    if !journal_path.exists() {
        return Err(MergeError::NotARun {
            dir: dir.to_path_buf(),
        });
    }
    let nodes = read_journal(&journal_path).map_err(unreadable(&journal_path))?;
    let started_at = nodes
        .iter()
        .map(|n| n.started_at)
        .fold(f64::INFINITY, f64::min);
    let finished_at = nodes.iter().map(|n| n.finished_at).fold(0.0, f64::max);
    Ok((
        Summary {
            version: SUMMARY_VERSION,
            tool: String::new(),
            run_id: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            config: String::new(),
            started_at: if started_at.is_finite() {
                started_at
            } else {
                0.0
            },
            finished_at,
            // A run without a summary did not finish normally.
            interrupted: true,
            totals: Totals::of(&nodes),
            packages: Vec::new(),
            nodes,
            merged_from: Vec::new(),
        },
        true,
    ))
}

/// Combines summaries; pure, for tests.
pub fn combine(inputs: &[(PathBuf, Summary)]) -> Result<Summary, MergeError> {
    let mut owner: HashMap<&str, &Path> = HashMap::new();
    let mut nodes: Vec<NodeOutcome> = Vec::new();
    let mut packages: Vec<StagedPackage> = Vec::new();
    for (dir, summary) in inputs {
        let mut in_this: HashSet<&str> = HashSet::new();
        for node in &summary.nodes {
            // A journal may hold a node twice only if the run wrote it twice; keep one.
            if !in_this.insert(node.name.as_str()) {
                continue;
            }
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
        merged_from: inputs
            .iter()
            .map(|(dir, _)| dir.display().to_string())
            .collect(),
    })
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
            started_at: 10.0,
            finished_at: 20.0,
            interrupted: false,
            totals: Totals::of(&nodes),
            packages: Vec::new(),
            nodes,
            merged_from: Vec::new(),
        }
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
        let merged = merge(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(merged.summary.nodes.len(), 1);
        assert_eq!(merged.journal_only, vec![dir.clone()]);
        assert!(render(&merged).contains("read from its journal"));
        assert!(matches!(
            merge(&[dir.clone(), dir.clone()]),
            Err(MergeError::SameDir { .. })
        ));
        assert!(matches!(
            merge(&[base.path().to_path_buf()]),
            Err(MergeError::NotARun { .. })
        ));
        assert!(matches!(
            merge(&[base.path().join("absent")]),
            Err(MergeError::NotADir { .. })
        ));
    }
}
