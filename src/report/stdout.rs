//! Standard output: the plan, the pre-flight table, JSON summaries, the manual page and
//! completion scripts. A reader that stops early (`keadm-batch ... | head`) is a normal end
//! of the output, not a failure of keadm-batch: the rest is dropped without a word and the
//! command exits as it would have (docs/decisions.md, "A closed stdout ends the output").

use std::io::{self, Write};

/// Writes `text` to stdout and flushes it. Only real write failures are errors (a full
/// disk behind a redirection); a reader that has gone away is not.
pub fn print(text: impl AsRef<[u8]>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    quiet_on_broken_pipe(out.write_all(text.as_ref()).and_then(|()| out.flush()))
}

/// `result`, with a broken pipe counted as success.
fn quiet_on_broken_pipe(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broken_pipe_is_quiet() {
        let broken = io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(quiet_on_broken_pipe(Err(broken)).is_ok());
        let full = io::Error::from(io::ErrorKind::StorageFull);
        assert!(quiet_on_broken_pipe(Err(full)).is_err());
    }
}
