//! `keadm-batch batch report`'s argument, and its conversion into [`Command::Report`].

use std::path::PathBuf;

use clap::Args;

use crate::options::Command;

#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// The run directory (batch_runs/<id>, or --run-dir's, or batch merge --into's);
    /// without it, the latest run here (batch_runs/latest).
    #[arg(value_name = "RUN_DIR")]
    run_dir: Option<PathBuf>,
}

/// The run directory `batch report` names.
pub(super) fn command_of(args: ReportArgs) -> Command {
    let ReportArgs { run_dir } = args;
    Command::Report { run_dir }
}
