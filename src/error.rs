//! Typed errors for the whole run, and the one place that decides exit codes
//! (README.md, "Exit codes"): 130 interrupted, 2 invalid config or command line, 3 staging failed,
//! 1 some selected node did not succeed, 0 all succeeded.

use crate::config::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line is wrong in a way clap could not see.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// gen-config would overwrite a file, or could not write it.
    #[error("{0}")]
    GenConfig(String),
    /// keadm packages could not be staged; no node was touched.
    #[error("{0}")]
    Stage(String),
    /// The run's own files (log, run dir) could not be written.
    #[error("{0}")]
    Output(String),
    /// Some selected nodes did not succeed; the recap has already said which.
    #[error(
        "{failed} of {total} selected nodes did not succeed; see batch_process_log.txt and {run_dir}"
    )]
    NodesFailed {
        failed: usize,
        total: usize,
        run_dir: String,
    },
    /// `--preflight-only` found something on some nodes (or could not probe them).
    #[error(
        "{nodes} of {total} nodes have pre-flight findings or could not be probed; nothing was changed on any node"
    )]
    Findings { nodes: usize, total: usize },
    /// The operator pressed Ctrl-C or sent SIGTERM; results were written.
    #[error("interrupted: {0}")]
    Interrupted(String),
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Interrupted(_) => 130,
            Error::Usage(_) | Error::Config(_) | Error::GenConfig(_) => 2,
            Error::Stage(_) => 3,
            Error::NodesFailed { .. } | Error::Findings { .. } | Error::Output(_) => 1,
        }
    }
}
