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
        let file = File::create(path)?;
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
