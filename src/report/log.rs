//! `batch_process_log.txt`: keadm's result file, one line per selected node in keadm's
//! exact format, each written and flushed the moment its node finishes, so a crash or
//! Ctrl-C loses nothing that had finished (keadm flushed only at exit).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::outcome::NodeOutcome;

/// keadm's file name, in the current directory.
pub const LOG_FILE: &str = "batch_process_log.txt";

pub struct ResultLog {
    file: File,
    path: PathBuf,
}

impl ResultLog {
    /// Truncates (keadm's behaviour) and opens the log. Called only once validation and
    /// staging have succeeded, so a failed start leaves the previous file alone.
    pub fn create(path: &Path) -> io::Result<ResultLog> {
        let file = super::files::create(path)?;
        Ok(ResultLog {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One whole line per write: a single `write_all` of line and newline, so a kill
    /// between nodes never leaves half a line.
    pub fn append(&mut self, outcome: &NodeOutcome) -> io::Result<()> {
        let mut line = outcome.log_line();
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Security finding 7: a symlink planted where the log goes is refused, not followed,
    /// and the file is owner-only.
    #[test]
    fn the_log_is_private_and_never_follows_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.path().join(LOG_FILE);
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = ResultLog::create(&path)
            .err()
            .expect("a planted symlink is refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        std::fs::remove_file(&path).unwrap();
        ResultLog::create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
