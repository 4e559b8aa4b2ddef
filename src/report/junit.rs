//! `--junit FILE` and `--output junit`: the run as one JUnit XML document, for the
//! pipelines that read test results (GitLab's `reports:junit`, Jenkins' JUnit plugin):
//! one `<testsuite>` for the run, one `<testcase>` per selected node (its site as the
//! class), a `<failure>` with the class, the error and the transcript's last lines for
//! each node that failed or timed out, `<skipped>` and `<error>` (interrupted) for the
//! rest. What each element holds: docs/summary.md, "JUnit XML".
//!
//! Node text is hostile: every string from a node (its name, its error, its transcript's
//! lines) is bounded and has its control characters escaped as `\xNN` before it is handed
//! to quick-junit, which escapes XML's own characters and drops whatever XML 1.0 cannot
//! hold; the non-characters XML forbids beyond those are escaped here too.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::summary::Summary;
use crate::node_text::{escape_controls, one_line};
use crate::options::OutputFormat;
use crate::outcome::{NodeOutcome, Phase};

/// Transcript lines in a `<failure>` or `<error>`: the end of it, where keadm said why.
pub const TAIL_LINES: usize = 30;
/// The most of a transcript read for its tail (transcripts hold up to 64 MiB): what a
/// document of 5,000 failed nodes holds stays within tens of MiB.
const TAIL_BYTES: u64 = 16 << 10;
/// One transcript line in the document: at most this many characters.
const LINE_CHARS: usize = 1000;
/// The `message` attribute: one line, at most this many characters.
const MESSAGE_CHARS: usize = 1000;
/// The class of nodes with no site.
pub const NO_SITE: &str = "keadm-batch";

/// Why the document could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    #[error("could not write {}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not write to standard output: {0}")]
    Stdout(#[source] io::Error),
}

/// After a run or a merge: writes the document to `file` (`--junit FILE`) and prints it
/// on stdout (`--output junit`), as asked.
pub fn emit(
    summary: &Summary,
    file: &Option<PathBuf>,
    output: OutputFormat,
) -> Result<(), JunitError> {
    let stdout = output == OutputFormat::Junit;
    if file.is_none() && !stdout {
        return Ok(());
    }
    let text = document(summary);
    if let Some(path) = file {
        write(path, &text).map_err(|source| JunitError::File {
            path: path.to_path_buf(),
            source,
        })?;
    }
    if stdout {
        super::stdout::print(&text).map_err(JunitError::Stdout)?;
    }
    Ok(())
}

/// The JUnit XML document of `summary`: one suite, named after the config file, with one
/// case per node in config order, its site (the node's `site`) as its class.
pub fn document(summary: &Summary) -> String {
    let config = Path::new(&summary.config)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| NO_SITE.to_string());
    let mut suite = TestSuite::new(xml_text(&config));
    suite.set_time(seconds(summary.finished_at - summary.started_at));
    // quick-junit's own timestamps need chrono's types; the run's clock is in seconds.
    suite.extra.insert(
        "timestamp".into(),
        crate::utc::rfc3339(summary.started_at.max(0.0) as u64).into(),
    );
    suite.add_test_cases(summary.nodes.iter().map(test_case));
    let mut report = Report::new("keadm-batch");
    report.set_time(seconds(summary.finished_at - summary.started_at));
    report.add_test_suite(suite);
    report.to_string().unwrap_or_else(|e| {
        // Writing into a String fails only on a bug in the writer; say so in XML.
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- keadm-batch could not write its JUnit document: {} -->\n<testsuites/>\n",
            xml_text(&e.to_string()).replace("--", "- -")
        )
    })
}

/// Writes `text` to `path` atomically: into a new temporary of our own beside it (0600),
/// then renamed.
pub fn write(path: &Path, text: &str) -> io::Result<()> {
    if path.file_name().is_none() {
        return Err(io::Error::other(
            "it names a directory; give --junit a file name, such as junit.xml",
        ));
    }
    super::files::replace(path, text.as_bytes())
}

fn test_case(node: &NodeOutcome) -> TestCase {
    let status = match node.phase {
        Phase::Succeeded => TestCaseStatus::success(),
        Phase::Skipped => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(message(node));
            status
        }
        // The operator stopped the run: the node did not fail, it was not let finish.
        Phase::Interrupted => not_succeeded(node, NonSuccessKind::Error, "interrupted"),
        // Failed, timed out, and (as the totals count them) any phase not final.
        phase => {
            let class = node.failure_class.map_or(phase.as_str(), |c| c.as_str());
            not_succeeded(node, NonSuccessKind::Failure, class)
        }
    };
    let mut case = TestCase::new(xml_text(&node.name), status);
    case.set_classname(node.site.as_deref().map_or(NO_SITE.to_string(), xml_text));
    case.set_time(seconds(node.finished_at - node.started_at));
    case
}

fn not_succeeded(node: &NodeOutcome, kind: NonSuccessKind, ty: &str) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(kind);
    status.set_type(ty).set_message(message(node));
    if let Some(tail) = node.transcript.as_deref().and_then(transcript_tail) {
        status.set_description(tail);
    }
    status
}

/// The node's error on one line (with keadm's last output), else its phase.
fn message(node: &NodeOutcome) -> String {
    let text = node
        .error_with_output()
        .unwrap_or_else(|| node.phase.as_str().to_string());
    xml_text(&one_line(&text, MESSAGE_CHARS))
}

/// The last [`TAIL_LINES`] lines of the transcript at `path`, read from its last
/// [`TAIL_BYTES`]; `None` when there is none to read.
fn transcript_tail(path: &str) -> Option<String> {
    // `batch merge` checked the path, but the shard's directory may be another user's,
    // who could swap in a link to a file they cannot read themselves: opened without
    // following one, and checked once open.
    let mut file = super::files::open_regular(Path::new(path)).ok()?;
    let meta = file.metadata().ok()?;
    let start = meta.len().saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && lines.len() > 1 {
        // The first line was cut by where the read began (unless it is all there is).
        lines.remove(0);
    }
    let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    if tail.is_empty() {
        return None;
    }
    let mut out = String::from("\n");
    for line in tail {
        let cut: String = line.chars().take(LINE_CHARS).collect();
        out.push_str(&xml_text(&cut));
        out.push('\n');
    }
    Some(out)
}

/// Node text made safe for XML: control characters (but tabs) escaped as the transcripts
/// escape them, and the non-characters U+FFFE and U+FFFF, which XML 1.0 cannot hold, too.
fn xml_text(text: &str) -> String {
    let escaped = escape_controls(text);
    if !escaped.contains(['\u{fffe}', '\u{ffff}']) {
        return escaped;
    }
    escaped
        .replace('\u{fffe}', "\\u{fffe}")
        .replace('\u{ffff}', "\\u{ffff}")
}

/// A span of the run's clock as a duration; 0 for one that is negative or not a number
/// (a clock stepped back, a shard's summary that says so).
fn seconds(span: f64) -> Duration {
    Duration::try_from_secs_f64(span).unwrap_or_default()
}

#[cfg(test)]
mod tests;
