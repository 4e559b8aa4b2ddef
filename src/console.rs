//! Standard error, the operator's console: result lines, notes, log records, errors. It is
//! a view of the run, never its record (that is the run directory), so a console that
//! cannot be written must not stop the run or lose a result. `keadm-batch ... 2>&1 | head`
//! after head has quit, a `less` left with `q`, a `tee` that died: every write then fails
//! with EPIPE (Rust ignores SIGPIPE), and `eprintln!` would panic the thread that wrote,
//! a worker mid-node included. Every write to stderr goes through here instead
//! (clippy.toml refuses `eprintln!` and its kin elsewhere): a failed write is dropped, and
//! once the reader has gone no write is attempted again, as `report::stdout` ends stdout
//! quietly when its reader quits.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set at the first EPIPE: the reader has gone and will not come back.
static GONE: AtomicBool = AtomicBool::new(false);

/// Writes `bytes` to stderr, unless its reader has gone. Never fails: other errors (a full
/// disk behind `2>file`) drop this write only, since the next may succeed.
pub fn write(bytes: &[u8]) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut stderr = io::stderr().lock();
    if let Err(e) = stderr.write_all(bytes).and_then(|()| stderr.flush()) {
        note_failure(&e);
    }
}

/// Remembers that stderr's reader has gone when `e` says so.
fn note_failure(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        GONE.store(true, Ordering::Relaxed);
    }
}

/// `text` on stderr as it is (`eprint!`).
pub fn text(text: impl fmt::Display) {
    write(text.to_string().as_bytes());
}

/// `line` and a line break on stderr (`eprintln!`).
pub fn line(line: impl fmt::Display) {
    write(format!("{line}\n").as_bytes());
}

/// `eprintln!` that never fails: formats its arguments and writes them with [`line()`].
macro_rules! console_line {
    ($($arg:tt)*) => {
        $crate::console::line(format_args!($($arg)*))
    };
}

/// `eprint!` that never fails: formats its arguments and writes them with [`text()`].
macro_rules! console_text {
    ($($arg:tt)*) => {
        $crate::console::text(format_args!($($arg)*))
    };
}

pub(crate) use {console_line, console_text};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_pipe_ends_the_console() {
        note_failure(&io::Error::from(io::ErrorKind::StorageFull));
        assert!(
            !GONE.load(Ordering::Relaxed),
            "a full disk may clear; the next line is tried"
        );
        note_failure(&io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(GONE.load(Ordering::Relaxed));
        // The other tests of this process keep their console.
        GONE.store(false, Ordering::Relaxed);
    }
}
