//! One shard's run directory, read and checked as `batch merge` takes it: its
//! `summary.json` (checked against its `journal.jsonl` when both are there), or only its
//! journal when the run died before the summary. Nothing in it is trusted: each file
//! must be a regular file of at most [`MAX_SHARD_FILE_BYTES`], read no further; every
//! value has its type, every node is checked ([`check_node`]) and recorded once, the
//! totals are the nodes', and each transcript is the file a run names for its node,
//! looked up where it is now: in this directory, as a regular file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::config::validate::NameProblem;
use crate::node_text::escape_controls;
use crate::outcome::NodeOutcome;

use super::super::json_path::{self, JsonPath};
use super::super::run_dir::{JOURNAL, RunDir, SUMMARY, journal_lines};
use super::super::summary::{SUMMARY_VERSION, Summary, Totals};
use super::{ConfigNodes, InvalidInput, MergeError, Problem};

/// The largest summary.json or journal.jsonl a merge reads. A run writes one to two KiB
/// per node, so this is a shard of over a hundred thousand nodes; what a forged file can
/// make the merge hold stays a few times this.
pub const MAX_SHARD_FILE_BYTES: u64 = 256 << 20;

/// A run directory's summary, or one rebuilt from its journal (then `true`); checked,
/// its text escaped.
pub(super) fn read_run(
    dir: &Path,
    config: Option<&ConfigNodes>,
) -> Result<(Summary, bool), MergeError> {
    let summary_path = dir.join(SUMMARY);
    let journal_path = dir.join(JOURNAL);
    let summary_text = read_text(&summary_path)?;
    let journal_text = read_text(&journal_path)?;
    let journal = match &journal_text {
        Some(text) => Some(read_journal(&journal_path, text, config)?),
        None => None,
    };
    if let Some(text) = &summary_text {
        let part = Part {
            path: &summary_path,
            text,
            lines_before: 0,
            whole: "the summary",
        };
        let mut summary = read_summary(&part, config)?;
        if let Some(journal) = &journal {
            agrees_with_journal(&part, &summary, journal)?;
        }
        find_transcripts(&part, dir, &mut summary.nodes, |i| {
            JsonPath::root().key("nodes").index(i)
        })?;
        escape_summary(&mut summary);
        return Ok((summary, false));
    }
    let Some(journal) = journal else {
        return Err(MergeError::NotARun {
            dir: dir.to_path_buf(),
        });
    };
    let mut nodes = Vec::new();
    for JournalNode { part, mut node } in journal {
        find_transcripts(&part, dir, std::slice::from_mut(&mut node), |_| {
            JsonPath::root()
        })?;
        escape_node(&mut node);
        nodes.push(node);
    }
    let started_at = nodes
        .iter()
        .map(|n| n.started_at)
        .fold(f64::INFINITY, f64::min);
    let finished_at = nodes.iter().map(|n| n.finished_at).fold(0.0, f64::max);
    Ok((
        Summary {
            version: SUMMARY_VERSION,
            tool: String::new(),
            run_id: escape_controls(
                &dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            config: String::new(),
            command_line: None,
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
            sites: Vec::new(),
            waves: Vec::new(),
            merged_from: Vec::new(),
        },
        true,
    ))
}

/// The text of `path`, `None` when there is no such file. Only a regular file, not
/// through a symbolic link (a run writes neither a link nor a FIFO, and a link could
/// lead anywhere, /dev/zero included), and at most [`MAX_SHARD_FILE_BYTES`]: checked
/// before it is read, and counted while it is (a file can grow).
fn read_text(path: &Path) -> Result<Option<String>, MergeError> {
    let refuse = |reason: String| MergeError::NotAShardFile {
        path: path.to_path_buf(),
        reason,
    };
    let unreadable = |source| MergeError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let kind = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta.file_type(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    if kind.is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    if !kind.is_file() {
        return Err(refuse(format!("is {}", not_a_file(kind))));
    }
    // Opened without following a link or waiting on a FIFO, should one have been put
    // there since; then checked again, on what was opened.
    let file = File::options()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(refuse(format!("is {}", not_a_file(meta.file_type()))));
    }
    let too_large = |size: u64| {
        refuse(format!(
            "is {size} bytes, more than the {} MiB a shard's file may be",
            MAX_SHARD_FILE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_SHARD_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_SHARD_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_SHARD_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| {
        unreadable(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is not UTF-8 text ({})", e.utf8_error()),
        ))
    })
}

/// What a file of `kind` is, when it is not a regular file.
fn not_a_file(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// A shard's summary.json, every value of its type, every node checked and listed once,
/// and the totals those of its nodes.
fn read_summary(part: &Part, config: Option<&ConfigNodes>) -> Result<Summary, MergeError> {
    let summary: Summary = serde_json::from_str(part.text).map_err(|err| part.unreadable(&err))?;
    let node_path = |i: usize| JsonPath::root().key("nodes").index(i);
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, node) in summary.nodes.iter().enumerate() {
        check_node(node, config)
            .map_err(|(field, problem)| part.refuse(node_path(i).key(field), problem))?;
        if let Some(before) = first.insert(&node.name, i) {
            return Err(part.refuse(
                node_path(i).key("name"),
                Problem::Repeated {
                    name: node.name.clone(),
                    first: node_path(before).to_string(),
                },
            ));
        }
    }
    let counted = Totals::of(&summary.nodes);
    for (field, claimed, count) in totals_fields(&summary.totals, &counted) {
        if claimed != count {
            return Err(part.refuse(
                JsonPath::root().key("totals").key(field),
                Problem::Totals {
                    field,
                    claimed,
                    counted: count,
                },
            ));
        }
    }
    Ok(summary)
}

/// Each field of the totals, as a summary claims it and as its nodes count.
fn totals_fields(claimed: &Totals, counted: &Totals) -> [(&'static str, usize, usize); 6] {
    [
        ("selected", claimed.selected, counted.selected),
        ("succeeded", claimed.succeeded, counted.succeeded),
        ("failed", claimed.failed, counted.failed),
        ("timed_out", claimed.timed_out, counted.timed_out),
        ("skipped", claimed.skipped, counted.skipped),
        ("interrupted", claimed.interrupted, counted.interrupted),
    ]
}

/// One node of a journal, and the line it is on.
struct JournalNode<'a> {
    part: Part<'a>,
    node: NodeOutcome,
}

/// A shard's journal.jsonl, every line read and checked (only a torn last line, what a
/// crash left, is skipped), each node once.
fn read_journal<'a>(
    path: &'a Path,
    text: &'a str,
    config: Option<&ConfigNodes>,
) -> Result<Vec<JournalNode<'a>>, MergeError> {
    let mut nodes = Vec::new();
    let mut first: HashMap<String, usize> = HashMap::new();
    for line in journal_lines(text) {
        let part = Part {
            path,
            text: line.text,
            lines_before: line.number - 1,
            whole: "the line",
        };
        let node = line.outcome.map_err(|err| part.unreadable(&err))?;
        check_node(&node, config)
            .map_err(|(field, problem)| part.refuse(JsonPath::root().key(field), problem))?;
        if let Some(before) = first.insert(node.name.clone(), line.number) {
            return Err(part.refuse(
                JsonPath::root().key("name"),
                Problem::Repeated {
                    name: node.name.clone(),
                    first: format!("line {before}"),
                },
            ));
        }
        nodes.push(JournalNode { part, node });
    }
    Ok(nodes)
}

/// A run writes each node to its journal as it finishes and the same outcome into its
/// summary: every node of the journal must be in the summary, with the same phase.
/// (The summary may hold more: a node whose journal line could not be written.)
fn agrees_with_journal(
    part: &Part,
    summary: &Summary,
    journal: &[JournalNode],
) -> Result<(), MergeError> {
    let by_name: HashMap<&str, usize> = summary
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.name.as_str(), i))
        .collect();
    for JournalNode {
        part: line,
        node: recorded,
    } in journal
    {
        let journal = JournalPlace {
            path: line.path.to_path_buf(),
            line: line.lines_before + 1,
        };
        match by_name.get(recorded.name.as_str()) {
            None => {
                return Err(part.refuse(
                    JsonPath::root().key("nodes"),
                    Problem::MissingFromSummary {
                        name: recorded.name.clone(),
                        journal,
                        recorded: recorded.phase,
                    },
                ));
            }
            Some(&i) if summary.nodes[i].phase != recorded.phase => {
                return Err(part.refuse(
                    JsonPath::root().key("nodes").index(i).key("phase"),
                    Problem::Contradicts {
                        claimed: summary.nodes[i].phase,
                        name: recorded.name.clone(),
                        journal,
                        recorded: recorded.phase,
                    },
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A line of a journal, for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalPlace {
    pub path: PathBuf,
    /// 1-based.
    pub line: usize,
}

impl std::fmt::Display for JournalPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// Points each node's transcript at the file in `dir` a run writes for it
/// (`nodes/<index + 1>-<name>.log`), or at nothing when it is not there: the path a shard
/// recorded was on the machine it ran on, and says nothing more than the file's name,
/// which must be the one a run gives that node's transcript. A transcript that is there
/// must be a regular file in a real `nodes` directory, not a link out of the shard.
/// `at(i)` is where node `i` sits in `part`.
fn find_transcripts(
    part: &Part,
    dir: &Path,
    nodes: &mut [NodeOutcome],
    at: impl Fn(usize) -> JsonPath,
) -> Result<(), MergeError> {
    let run = RunDir {
        path: dir.to_path_buf(),
        id: String::new(),
    };
    for (i, node) in nodes.iter_mut().enumerate() {
        let Some(recorded) = node.transcript.take() else {
            continue;
        };
        let field = || at(i).key("transcript");
        if node.index == usize::MAX {
            return Err(part.refuse(at(i).key("index"), Problem::Index(node.index)));
        }
        let expected = run.transcript_path(node.index, &node.name);
        let file_name = expected.file_name().unwrap_or_default();
        let recorded_path = Path::new(&recorded);
        let named_so = recorded_path.file_name() == Some(file_name)
            && recorded_path
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|parent| parent == "nodes");
        if !named_so {
            return Err(part.refuse(
                field(),
                Problem::Transcript {
                    found: recorded,
                    name: node.name.clone(),
                    expected: Path::new("nodes").join(file_name).display().to_string(),
                },
            ));
        }
        let nodes_dir = expected.parent().unwrap_or(dir);
        for (path, want_dir) in [(nodes_dir, true), (expected.as_path(), false)] {
            let kind = match std::fs::symlink_metadata(path) {
                Ok(meta) => meta.file_type(),
                // Not copied along with the shard's results: nothing to point at.
                Err(_) => break,
            };
            let right = if want_dir {
                kind.is_dir()
            } else {
                kind.is_file()
            };
            if !right {
                let what = if want_dir && !kind.is_symlink() {
                    "not a directory"
                } else {
                    not_a_file(kind)
                };
                return Err(part.refuse(
                    field(),
                    Problem::TranscriptNotAFile {
                        path: path.to_path_buf(),
                        what,
                    },
                ));
            }
            if !want_dir {
                node.transcript = Some(expected.display().to_string());
            }
        }
    }
    Ok(())
}

/// What of a shard's file is read as one JSON value: the whole summary.json, or one line
/// of journal.jsonl. Its errors say where in the file they are.
struct Part<'a> {
    path: &'a Path,
    text: &'a str,
    /// How many lines of the file come before `text`.
    lines_before: usize,
    /// What the value as a whole is called in messages.
    whole: &'static str,
}

impl Part<'_> {
    /// serde's error about the part: at serde's place, in the field around it.
    fn unreadable(&self, err: &serde_json::Error) -> MergeError {
        let offset = json_path::offset_of(self.text, err.line(), err.column());
        // serde's words without its place, which the message gives in front.
        let words = err.to_string();
        let words = words
            .strip_suffix(&format!(" at line {} column {}", err.line(), err.column()))
            .unwrap_or(&words);
        self.error(
            offset,
            JsonPath::at_offset(self.text, offset),
            Problem::Unreadable(escape_controls(words)),
        )
    }

    /// `problem` in the value at `field`, placed where that value starts.
    fn refuse(&self, field: JsonPath, problem: Problem) -> MergeError {
        let offset = field.offset_in(self.text).unwrap_or(0);
        self.error(offset, field, problem)
    }

    fn error(&self, offset: usize, field: JsonPath, problem: Problem) -> MergeError {
        let (line, column) = json_path::line_column(self.text, offset);
        MergeError::Invalid(Box::new(InvalidInput {
            path: self.path.to_path_buf(),
            line: self.lines_before + line,
            column,
            field: if field.is_root() {
                self.whole.to_string()
            } else {
                field.to_string()
            },
            problem,
        }))
    }
}

/// What is wrong with an outcome a shard recorded, as the field (in the outcome) and the
/// problem: its name by the config's rule, its phase final, and with `-c` its name and
/// address the config's.
fn check_node(
    node: &NodeOutcome,
    config: Option<&ConfigNodes>,
) -> Result<(), (&'static str, Problem)> {
    if let Some(problem) = NameProblem::of(&node.name) {
        return Err(("name", Problem::Name(problem, node.name.clone())));
    }
    if !node.phase.is_final() {
        return Err(("phase", Problem::Unfinished(node.phase)));
    }
    let Some(config) = config else {
        return Ok(());
    };
    let Some(expected) = config.addresses.get(&node.name) else {
        return Err((
            "name",
            Problem::NotInConfig {
                name: node.name.clone(),
                config: config.path.clone(),
            },
        ));
    };
    // A run always records the address; an empty one says nothing to compare.
    if !node.address.is_empty() && node.address != *expected {
        return Err((
            "address",
            Problem::OtherAddress {
                found: node.address.clone(),
                name: node.name.clone(),
                expected: expected.clone(),
                config: config.path.clone(),
            },
        ));
    }
    Ok(())
}

/// Control characters escaped in place; a run wrote its text escaped already, so text
/// from an untouched shard is unchanged.
fn escape(text: &mut String) {
    *text = escape_controls(text);
}

/// Every text of a shard's summary as a run would have written it: escaped.
fn escape_summary(summary: &mut Summary) {
    escape(&mut summary.tool);
    escape(&mut summary.run_id);
    escape(&mut summary.config);
    if let Some(line) = &mut summary.command_line {
        escape(line);
    }
    for package in &mut summary.packages {
        escape(&mut package.version);
        escape(&mut package.tarball_sha512);
    }
    summary.nodes.iter_mut().for_each(escape_node);
}

/// Every text of a node's outcome escaped; its name was checked instead.
fn escape_node(node: &mut NodeOutcome) {
    escape(&mut node.address);
    for text in [
        &mut node.error,
        &mut node.last_output,
        &mut node.transcript,
        &mut node.site,
    ]
    .into_iter()
    .flatten()
    {
        escape(text);
    }
    for finding in &mut node.preflight {
        escape(&mut finding.detail);
    }
}
