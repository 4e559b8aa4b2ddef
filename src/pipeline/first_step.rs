//! The step the run's script takes before the node's command (`--reset-first`'s reset
//! before a join, `--backup`'s backup before an upgrade; [`remote::first_then`]): how it
//! ended, read from the status line it printed, and the node failed with keadm's line for
//! it when it failed (the script then stopped before the command: nothing changed).

use super::run::FIRST_FAILED;
use super::{Run, StepError};
use crate::diagnosis::FailureClass;
use crate::node_text::one_line;
use crate::outcome::Phase;
use crate::plan::{FirstStep, FirstStepKind};
use crate::remote;
use crate::transport::{RemoteExit, TransportError};

impl Run<'_, '_> {
    /// Records how the first step ended, and fails the node when it failed.
    pub(super) fn first_step_ended(
        &mut self,
        first: &FirstStep,
        result: &Result<RemoteExit, TransportError>,
    ) -> Result<(), StepError> {
        // An upgrade whose target already runs stops before its backup.
        if self.left_alone() {
            return Ok(());
        }
        let what = first.kind.what();
        let tail = self.transcript.tail(usize::MAX);
        let marker = tail
            .iter()
            .rposition(|l| remote::first_exit(l, what).is_some());
        let status = marker.and_then(|i| remote::first_exit(&tail[i], what));
        let recorded = match (status, result) {
            (Some(status), _) => Some(status),
            // The marker scrolled out of the tail: the command ran, so the step exited 0.
            (None, Ok(RemoteExit::Code(code))) if *code != FIRST_FAILED => Some(0),
            (None, _) => None,
        };
        match first.kind {
            FirstStepKind::Reset => self.reset_exit_status = recorded,
            FirstStepKind::Backup => self.edge_task_record().backup_exit_status = recorded,
        }
        match (status, result) {
            (Some(status), Ok(RemoteExit::Code(FIRST_FAILED))) if status != 0 => {
                let then = match first.kind {
                    FirstStepKind::Reset => "the join was not run",
                    FirstStepKind::Backup => "the upgrade was not run and nothing changed",
                };
                self.transcript
                    .note(&format!("{what} exited with status {status}, so {then}"));
                Err(StepError {
                    phase: Phase::Running,
                    message: format!(
                        "failed to execute keadm command {}: Process exited with status {status}",
                        first.command
                    ),
                    ending: Phase::Failed,
                    exit_status: None,
                    // A failed reset is classed by what keadm printed; a failed backup is
                    // its own class: the upgrade never started.
                    class: (first.kind == FirstStepKind::Backup)
                        .then_some(FailureClass::BackupFailed),
                    // The script ended right after the step, so its last line other than
                    // ours is the step's (stdout and stderr may arrive in either order, so
                    // ours is not always last).
                    last_output: tail
                        .iter()
                        .rev()
                        .find(|l| remote::first_exit(l, what).is_none())
                        .map(|l| one_line(l, 200)),
                })
            }
            _ => Ok(()),
        }
    }
}
