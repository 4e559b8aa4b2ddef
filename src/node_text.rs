//! Text that comes from a node is untrusted: a hostile or broken node can print
//! megabytes or terminal escape sequences. It is captured up to a cap, and it enters our
//! own messages (the console, batch_process_log.txt, summary.json) only as one short
//! line with control characters escaped.
//!
//! A leaf: it depends on nothing else in the crate.

use std::io;

/// How much of one step's output (prepare, pre-flight, a failed upload) is kept.
pub const STEP_OUTPUT_CAP: usize = 1 << 20;

/// The longest line kept back whole while the tool waits for a line of its own (the end
/// of the facts, the upload's receipt): a node that sends more without a line break is
/// refused, not buffered on.
pub const MAX_PENDING_LINE: usize = 64 * 1024;

/// Node text inside a message: at most this many characters.
pub const MESSAGE_CHARS: usize = 300;

/// A writer that keeps the first `cap` bytes and counts the rest.
#[derive(Debug)]
pub struct CappedBuffer {
    bytes: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl CappedBuffer {
    pub fn new(cap: usize) -> CappedBuffer {
        CappedBuffer {
            bytes: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    /// What was kept, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Bytes past the cap, not kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl io::Write for CappedBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.bytes.len());
        let kept = room.min(buf.len());
        self.bytes.extend_from_slice(&buf[..kept]);
        self.dropped += (buf.len() - kept) as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A line the tool waited for that the node never ended: it sent more than
/// [`MAX_PENDING_LINE`] bytes without a line break. Carried inside an `io::Error` from
/// the writer that noticed, so the transport can say so instead of "a write failed".
#[derive(Debug)]
pub struct EndlessLine {
    /// Its start, as one short escaped line.
    pub began: String,
    /// The start of the whole line before it, if any, as one short escaped line.
    pub after: Option<String>,
    /// The line the tool waited for.
    pub awaited: &'static str,
}

impl EndlessLine {
    /// The error for `partial`, the unfinished line, sent after the line `last`.
    pub fn error(partial: &[u8], last: &[u8], awaited: &'static str) -> io::Error {
        let shown = |bytes: &[u8]| {
            let head = &bytes[..bytes.len().min(ENDLESS_SHOWN)];
            one_line(&String::from_utf8_lossy(head), 4 * ENDLESS_SHOWN)
        };
        io::Error::other(EndlessLine {
            began: shown(partial),
            after: (!last.is_empty()).then(|| shown(last)),
            awaited,
        })
    }
}

/// How many bytes of the endless line, and of the line before it, the error shows.
const ENDLESS_SHOWN: usize = 24;

impl std::fmt::Display for EndlessLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "printed more than {} KiB without a line break",
            MAX_PENDING_LINE >> 10
        )?;
        if let Some(after) = &self.after {
            write!(f, " after the line \"{after}\"")?;
        }
        write!(
            f,
            " (it began \"{}...\") while keadm-batch waited for the line {}",
            self.began, self.awaited
        )
    }
}

impl std::error::Error for EndlessLine {}

/// Control characters as visible escapes (`\x1b`), so node text cannot move the cursor,
/// retitle the terminal or hide lines; tabs stay.
pub fn escape_controls(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            let code = u32::from(c);
            if code <= 0xff {
                out.push_str(&format!("\\x{code:02x}"));
            } else {
                out.push_str(&format!("\\u{{{code:x}}}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` with the control characters of each line escaped and its line breaks kept: for
/// a message of several lines of our own that may quote outside text (an error, a log
/// record), so no quoted byte can move the cursor or hide a line. A line break in the
/// quoted text still starts a line, but one that carries our prefix: the quoting places
/// escape their text with [`one_line`] so it stays on its line.
pub fn escape_controls_by_line(text: &str) -> String {
    text.split('\n')
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Node text for a one-line message: lines joined with ` | `, control characters
/// escaped, at most `max` characters (then `...` and how much was left out).
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    let escaped = escape_controls(&joined);
    let count = escaped.chars().count();
    if count <= max {
        escaped
    } else {
        let head: String = escaped.chars().take(max).collect();
        format!("{head}... ({} more characters)", count - max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_capped_buffer_keeps_the_start_and_counts_the_rest() {
        let mut b = CappedBuffer::new(4);
        b.write_all(b"abc").unwrap();
        b.write_all(b"defg").unwrap();
        assert_eq!(b.text(), "abcd");
        assert_eq!(b.dropped(), 3);
    }

    #[test]
    fn node_text_becomes_one_short_escaped_line() {
        assert_eq!(one_line("a\n\n b \r\nc", 100), "a | b | c");
        assert_eq!(one_line("\u{1b}]0;x\u{7}", 100), "\\x1b]0;x\\x07");
        assert_eq!(one_line(&"A".repeat(10), 4), "AAAA... (6 more characters)");
        assert_eq!(escape_controls("a\tb\u{9b}c"), "a\tb\\x9bc");
        assert_eq!(
            escape_controls_by_line("one\u{1b}[2K\r\ntwo\n"),
            "one\\x1b[2K\\x0d\ntwo\n"
        );
    }
}
