//! A node's transcript: its remote stdout and stderr, plus our own step lines, with
//! secrets masked line by line before anything reaches the disk. It keeps the last lines
//! in memory for error messages and failure classification.
//!
//! A node is not trusted to be brief or polite: control characters are written escaped,
//! a line longer than [`MAX_LINE`] is written in pieces (holding back enough of its end
//! that no secret is ever written in two halves), and the file stops growing at
//! [`MAX_TRANSCRIPT`] bytes, ending with a line that says how much was cut.
//!
//! The tool's notes begin with `[keadm-batch]`. Whether a line is a note is known from
//! who wrote it, not read from its text: a node line that begins the same way is written
//! with its bracket escaped (`\x5bkeadm-batch]`), counts against the cap like any node
//! line, and stays in the tail that error messages and the failure class read.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use crate::node_text::escape_controls;
use crate::outcome::NodeOutcome;
use crate::redact::Redactor;

/// Lines kept in memory for the error message and classification.
const TAIL_LINES: usize = 40;
/// A "line" longer than this is cut and written anyway, so a node printing megabytes
/// without a newline cannot grow our memory.
const MAX_LINE: usize = 64 * 1024;
/// The most a transcript file holds; a node that prints more loses the rest from the
/// file (not from the in-memory tail).
pub const MAX_TRANSCRIPT: u64 = 64 << 20;
/// Held back at a line cut besides the longest known secret: room for a join token,
/// which is masked by its shape and has no fixed length.
const TOKEN_WINDOW: usize = 1024;

/// The share of the cap (1/16) kept for the tool's notes after the node's output has
/// filled the rest: the few lines that say how the node ended and what was cut.
const NOTE_ROOM: u64 = 16;

/// What begins every line the tool itself writes.
const NOTE_PREFIX: &str = "[keadm-batch]";

/// Where a line came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The tool's own words.
    Note,
    /// The node's output.
    Node,
}

pub struct Transcript {
    out: Option<BufWriter<File>>,
    redactor: Arc<Redactor>,
    partial: Vec<u8>,
    tail: VecDeque<String>,
    bytes: u64,
    /// Who the transcript is about, for `-v` console lines.
    label: String,
    /// Bytes the file may hold, written so far, and left out past the cap.
    cap: u64,
    written: u64,
    cut: u64,
}

impl Transcript {
    pub fn create(path: &Path, redactor: Arc<Redactor>) -> io::Result<Transcript> {
        let mut transcript = Transcript::in_memory(redactor);
        transcript.out = Some(BufWriter::new(super::files::create(path)?));
        Ok(transcript)
    }

    /// The transcript of a node whose pipeline has ended, opened again to add what came
    /// after (the cluster's verdict, edgecore's log then), at most `cap` bytes more.
    pub fn reopen(path: &Path, redactor: Arc<Redactor>, cap: u64) -> io::Result<Transcript> {
        let mut transcript = Transcript::in_memory(redactor).capped_at(cap);
        transcript.out = Some(BufWriter::new(super::files::append(path)?));
        Ok(transcript)
    }

    /// Adds `lines` as notes to the transcript of a node whose pipeline has ended (what
    /// the cluster did before or after it), at most 64 KiB more.
    pub fn add_notes(outcome: &NodeOutcome, redactor: &Arc<Redactor>, lines: &[String]) {
        let Some(path) = outcome.transcript.as_deref().filter(|_| !lines.is_empty()) else {
            return;
        };
        if let Ok(mut transcript) = Transcript::reopen(Path::new(path), redactor.clone(), 64 << 10)
        {
            for line in lines {
                transcript.note(line);
            }
            transcript.finish();
        }
    }

    /// A transcript that only keeps the tail (for tests and when the file cannot be made).
    pub fn in_memory(redactor: Arc<Redactor>) -> Transcript {
        Transcript {
            out: None,
            redactor,
            partial: Vec::new(),
            tail: VecDeque::new(),
            bytes: 0,
            label: String::new(),
            cap: MAX_TRANSCRIPT,
            written: 0,
            cut: 0,
        }
    }

    /// The same with another size cap (tests use a small one).
    pub fn capped_at(mut self, bytes: u64) -> Transcript {
        self.cap = bytes;
        self
    }

    /// Names the node in `-v` console lines.
    pub fn labelled(mut self, label: &str) -> Transcript {
        self.label = label.to_string();
        self
    }

    /// Our own line, such as `[keadm-batch] connected in 0.12 s`; also an info record
    /// (shown with `-v`).
    pub fn note(&mut self, text: &str) {
        self.flush_partial();
        self.emit(Kind::Note, &format!("{NOTE_PREFIX} {text}"));
        // Masked and escaped again only when -v will show it: notes come on every node.
        if log::log_enabled!(log::Level::Info)
            && let Some(record) = self.record(text)
        {
            log::info!("{record}");
        }
    }

    /// The `-v` record of the note `text` (none when the transcript names no node): clean
    /// as the transcript's line is, since a note may quote a node or an SSH server.
    fn record(&self, text: &str) -> Option<String> {
        (!self.label.is_empty()).then(|| format!("{}: {}", self.label, self.clean(text)))
    }

    /// `text` as it may be shown: secrets masked, control characters escaped.
    fn clean(&self, text: &str) -> String {
        escape_controls(&self.redactor.redact(text))
    }

    /// Writes one line of `kind`. Where a line came from is decided here, by the caller,
    /// never by its text: a node cannot write a line that reads as the tool's note, and
    /// every byte of the node's lines counts against the cap.
    fn emit(&mut self, kind: Kind, line: &str) {
        let mut clean = self.clean(line);
        if kind == Kind::Node && clean.starts_with(NOTE_PREFIX) {
            // The opening bracket as the escape a control character gets.
            clean.replace_range(..1, "\\x5b");
        }
        let size = clean.len() as u64 + 1;
        if let Some(out) = &mut self.out {
            // The tool's notes are few and always written; the node's lines stop short of
            // the cap by the room kept for the notes that follow them, so the file as a
            // whole stays within its cap.
            if kind == Kind::Note || self.written + size <= self.cap - self.cap / NOTE_ROOM {
                let _ = out.write_all(clean.as_bytes());
                let _ = out.write_all(b"\n");
                self.written += size;
            } else {
                self.cut += size;
            }
        }
        if kind == Kind::Node {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(clean);
        }
    }

    fn flush_partial(&mut self) {
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&self.partial).into_owned();
            self.partial.clear();
            self.emit(Kind::Node, &line);
        }
    }

    /// The last non-empty lines of the node's output (never the tool's notes), masked,
    /// oldest first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let lines: Vec<&String> = self.tail.iter().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    pub fn remote_bytes(&self) -> u64 {
        self.bytes
    }

    pub fn finish(&mut self) {
        self.flush_partial();
        if let Some(out) = &mut self.out {
            if self.cut > 0 {
                let _ = writeln!(
                    out,
                    "{NOTE_PREFIX} transcript cut at {} bytes: {} more bytes of the node's output were not written",
                    self.cap, self.cut
                );
                self.cut = 0;
            }
            let _ = out.flush();
        }
    }

    /// A line longer than [`MAX_LINE`]: masks what is held, writes all of it but the
    /// last stretch, and holds that back. A secret that starts in the written part and
    /// is not masked yet would have to be longer than the held-back stretch, which is
    /// longer than any secret, so no secret is ever written in two pieces.
    fn cut_long_line(&mut self) {
        let valid = match std::str::from_utf8(&self.partial) {
            Ok(_) => self.partial.len(),
            // A character split between writes stays held back whole.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.partial.len(),
        };
        let rest = self.partial.split_off(valid);
        let masked = self
            .redactor
            .redact(&String::from_utf8_lossy(&self.partial));
        let keep = self.redactor.longest().max(TOKEN_WINDOW);
        let mut at = masked.len().saturating_sub(keep);
        while !masked.is_char_boundary(at) {
            at -= 1;
        }
        let (head, held) = masked.split_at(at);
        let held = held.as_bytes().to_vec();
        let head = head.to_string();
        self.emit(Kind::Node, &head);
        self.partial = held;
        self.partial.extend_from_slice(&rest);
    }
}

impl Write for Transcript {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes += buf.len() as u64;
        let mut rest = buf;
        while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&rest[..pos]);
            let line = String::from_utf8_lossy(&self.partial)
                .trim_end_matches('\r')
                .to_string();
            self.partial.clear();
            self.emit(Kind::Node, &line);
            rest = &rest[pos + 1..];
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE {
            self.cut_long_line();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Transcript {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::Secret;

    #[test]
    fn a_note_s_console_record_is_masked_and_escaped() {
        let mut r = Redactor::new();
        r.add(&Secret::new("hunter22"));
        let t = Transcript::in_memory(Arc::new(r)).labelled("edge-1");
        // A note may quote what a node or an SSH server said.
        let record = t
            .record("signal KILL\u{1b}]0;x\u{7}\nedge-2: keadm exited with status 0 hunter22")
            .unwrap();
        assert_eq!(
            record,
            "edge-1: signal KILL\\x1b]0;x\\x07\\x0aedge-2: keadm exited with status 0 ***"
        );
        assert_eq!(
            Transcript::in_memory(Arc::new(Redactor::new())).record("x"),
            None
        );
    }

    #[test]
    fn secrets_split_across_writes_are_still_masked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut r = Redactor::new();
        r.add(&Secret::new("hunter22"));
        let mut t = Transcript::create(&path, Arc::new(r)).unwrap();
        t.write_all(b"password is hun").unwrap();
        t.write_all(b"ter22\njoin --token=abc.def\nlast").unwrap();
        t.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "password is ***\njoin --token=***\nlast\n");
        assert_eq!(
            t.tail(2),
            vec!["join --token=***".to_string(), "last".to_string()]
        );
    }

    /// Security finding 9: a secret that straddles the cut of an over-long line is
    /// masked whole; neither piece reaches the file.
    #[test]
    fn a_secret_split_at_the_line_cut_is_still_masked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut r = Redactor::new();
        r.add(&Secret::new("hunter22-secret"));
        let mut t = Transcript::create(&path, Arc::new(r)).unwrap();
        t.write_all("x".repeat(MAX_LINE - 5).as_bytes()).unwrap();
        t.write_all(b"hunter22-").unwrap();
        t.write_all(b"secret and the rest\n").unwrap();
        t.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("hunter"), "a piece of the secret leaked");
        assert!(!text.contains("-secret"), "a piece of the secret leaked");
        assert!(text.contains("***"));
        assert!(text.contains(" and the rest"));
    }

    /// Security finding 8: a transcript stops growing at its cap and says so in a last
    /// line; the in-memory tail still follows the node.
    #[test]
    fn a_transcript_stops_at_its_cap_and_says_what_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut t = Transcript::create(&path, Arc::new(Redactor::new()))
            .unwrap()
            .capped_at(4096);
        for i in 0..1000 {
            writeln!(t, "line {i} of a chatty node").unwrap();
        }
        t.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < 4096 + 300, "the file has {} bytes", text.len());
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("[keadm-batch] transcript cut at 4096 bytes:"),
            "{last}"
        );
        assert_eq!(t.tail(1), vec!["line 999 of a chatty node".to_string()]);
    }

    /// Review finding 4: a node line that begins with the tool's prefix is the node's
    /// text: written so it cannot pass for a note, counted against the cap, and kept in
    /// the tail; the tool's own notes never are in the tail.
    #[test]
    fn node_lines_with_the_tools_prefix_cannot_pass_for_notes_or_pass_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut t = Transcript::create(&path, Arc::new(Redactor::new()))
            .unwrap()
            .capped_at(4096);
        t.note("connected");
        for _ in 0..1000 {
            writeln!(t, "[keadm-batch] keadm exited with status 0").unwrap();
        }
        t.write_all(b"[keadm-batch] no newline").unwrap();
        t.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < 4096 + 300, "the file has {} bytes", text.len());
        let notes: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("[keadm-batch]"))
            .collect();
        assert_eq!(notes.len(), 2, "{notes:#?}");
        assert_eq!(notes[0], "[keadm-batch] connected");
        assert!(notes[1].starts_with("[keadm-batch] transcript cut at 4096 bytes:"));
        assert!(text.contains("\\x5bkeadm-batch] keadm exited with status 0\n"));
        assert_eq!(
            t.tail(2),
            vec![
                "\\x5bkeadm-batch] keadm exited with status 0".to_string(),
                "\\x5bkeadm-batch] no newline".to_string()
            ]
        );
    }

    /// The tail holds the node's lines only: a note between them is not among them.
    #[test]
    fn the_tail_holds_node_lines_only() {
        let mut t = Transcript::in_memory(Arc::new(Redactor::new()));
        t.write_all(b"Error: boom\n").unwrap();
        t.note("keadm exited with status 1");
        assert_eq!(t.tail(1), vec!["Error: boom".to_string()]);
    }

    /// Security finding 8: terminal control sequences from a node are written escaped.
    #[test]
    fn control_characters_are_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let mut t = Transcript::create(&path, Arc::new(Redactor::new())).unwrap();
        t.write_all(b"a\x1b]0;title\x07b\tc\n").unwrap();
        t.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "a\\x1b]0;title\\x07b\tc\n");
    }
}
