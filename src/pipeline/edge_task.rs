//! After one of the edge's upgrade family ran (`upgrade edge`, `backup edge`, `rollback
//! edge`, `config-update`): keadm's report and the running edgecore, read in one
//! round trip on the same connection ([`remote::EDGE_TASK_CHECK`]), decide the node. An
//! exit 0 with no report is no success (`upgrade_not_done`); a report that says it failed
//! is `upgrade_failed`; an upgrade whose running edgecore is not the target is
//! `version_mismatch`. With `--rollback-on-failure`, a failed upgrade is rolled back
//! ([`Run::roll_back`], also run over a connection of its own by [`roll_back`] when the
//! cluster's Ready gate fails later).

use std::time::{Duration, Instant};

use super::privilege::{exec_as, password_of};
use super::{Context, Run, StepError};
use crate::diagnosis::FailureClass;
use crate::keadm_cmd::EdgeTask;
use crate::kubeedge::classify;
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP, one_line};
use crate::outcome::{EdgeTaskRecord, Phase, RollbackRecord};
use crate::plan::{EdgeTaskPlan, NodePlan};
use crate::remote::{self, EdgeTaskCheck, Privilege, ReportRead, same_version};
use crate::report::transcript::Transcript;
use crate::shell::shell_quote;
use crate::transport::{Connection, RemoteExit};

/// The check waits up to 15 s for edgecore to appear; this is the room on top of a step.
const CHECK_ROOM: Duration = Duration::from_secs(20);

/// How much a rollback's own transcript notes may add to the node's closed transcript.
const ADDED_BYTES: u64 = 256 << 10;

impl Run<'_, '_> {
    /// The node's upgrade record, made on first use.
    pub(super) fn edge_task_record(&mut self) -> &mut EdgeTaskRecord {
        self.edge_task.get_or_insert_with(EdgeTaskRecord::default)
    }

    /// Starts the node's upgrade record with what the plan says of its command.
    pub(super) fn edge_task_began(&mut self, task: &EdgeTaskPlan) {
        let record = self.edge_task_record();
        record.task = task.task.report_event().to_string();
        record.target_version = task.target_version.clone();
    }

    /// Whether the run's script left an upgrade alone: its edgecore already ran the
    /// target, so [`remote::unless_running`] printed [`remote::ALREADY_RUNS`] and exited
    /// before the backup and keadm.
    pub(super) fn left_alone(&self) -> bool {
        self.node.edge_task.is_some()
            && self
                .transcript
                .tail(80)
                .iter()
                .any(|l| l.starts_with(remote::ALREADY_RUNS))
    }

    /// Reads keadm's report and the running edgecore after the command; `keadm` is how
    /// keadm's exit was read (its error, for a non-zero exit). Returns the node's verdict,
    /// after rolling a failed upgrade back when the plan says so.
    pub(super) fn check_edge_task(
        &mut self,
        conn: &mut dyn Connection,
        privilege: Privilege,
        task: &EdgeTaskPlan,
        keadm: Result<(), StepError>,
    ) -> Result<(), StepError> {
        self.edge_task_began(task);
        let verdict = match self.read_edge_task(conn, privilege) {
            Ok(check) => {
                let record = self.edge_task_record();
                record.report = match &check.report {
                    ReportRead::Read(report) => Some(report.clone()),
                    _ => None,
                };
                record.running_version = check.running_version().map(str::to_string);
                record.edgecore_running = check.running.is_some();
                record.node_name = check.node_name.clone();
                self.edge_task_verdict(task, &check, keadm)
            }
            Err(err) => {
                self.transcript
                    .note(&format!("the report could not be read: {err}"));
                keadm.map_err(|e| e.class(FailureClass::UpgradeFailed)).and_then(|()| {
                    let mut error = StepError::transport(
                        Phase::Running,
                        format!(
                            "{} exited with status 0, but its report could not be read on the node.",
                            task.task.command()
                        ),
                        err,
                    );
                    error.exit_status = Some(0);
                    error.class = error.class.or(Some(FailureClass::UpgradeFailed));
                    Err(error)
                })
            }
        };
        let Err(failure) = verdict else {
            return Ok(());
        };
        // An upgrade that did nothing (no report) has nothing to roll back.
        if failure.class != Some(FailureClass::UpgradeNotDone) {
            self.roll_back_if_planned(conn, privilege);
        }
        Err(failure)
    }

    /// `--rollback-on-failure`: rolls a failed upgrade back on this connection.
    pub(super) fn roll_back_if_planned(&mut self, conn: &mut dyn Connection, privilege: Privilege) {
        let Some(rollback) = self
            .node
            .edge_task
            .as_ref()
            .and_then(|t| t.rollback.as_ref())
        else {
            return;
        };
        let to = self.edge_task.as_ref().and_then(|u| u.version_before());
        let done = self.roll_back(conn, privilege, rollback, to.as_deref());
        self.edge_task_record().rollback = Some(done);
    }

    /// The check's round trip (after the command, and after a rollback), noted in the
    /// transcript; its output is the node's, bounded here.
    fn read_edge_task(
        &mut self,
        conn: &mut dyn Connection,
        privilege: Privilege,
    ) -> Result<EdgeTaskCheck, crate::transport::TransportError> {
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + self.node.deadlines.step + CHECK_ROOM;
        exec_as(
            conn,
            &remote::EDGE_TASK_CHECK,
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut output,
        )?;
        let check = remote::parse_edge_task_check(&output.text());
        self.transcript.note(&describe(&check));
        Ok(check)
    }

    /// What the report and the running edgecore say of the command.
    fn edge_task_verdict(
        &mut self,
        task: &EdgeTaskPlan,
        check: &EdgeTaskCheck,
        keadm: Result<(), StepError>,
    ) -> Result<(), StepError> {
        let command = task.task.command();
        let report = match (&check.report, keadm) {
            (_, Err(mut failed)) => {
                // keadm's line stays the error; the report's message, which says why,
                // goes beside it, and classes the failure when keadm's words do.
                if let ReportRead::Read(report) = &check.report
                    && let Some(message) = &report.error_message
                {
                    failed.last_output = Some(one_line(message, 400));
                }
                let mut lines = self.transcript.tail(80);
                if let Some(m) = failed.last_output.clone() {
                    lines.push(m);
                }
                let class = match classify::classify(&lines, false) {
                    FailureClass::Unknown => FailureClass::UpgradeFailed,
                    known => known,
                };
                return Err(failed.class(class));
            }
            (ReportRead::Missing, Ok(()))
                if task.target_version.as_deref().is_some_and(|target| {
                    check
                        .running_version()
                        .is_some_and(|v| same_version(v, target))
                }) && self.left_alone() =>
            {
                self.edge_task_record().unchanged = true;
                self.transcript.note(&format!(
                    "nothing to do: edgecore already runs {}",
                    check.running_version().unwrap_or_default()
                ));
                return Ok(());
            }
            (ReportRead::Missing, Ok(())) => {
                let aborted = self
                    .transcript
                    .tail(80)
                    .iter()
                    .any(|l| l.contains(remote::ABORTED_LINE));
                let why = if aborted {
                    format!(
                        "{command} exited with status 0 but printed `{}` and wrote no {}: its [y/N] prompt was not answered `y`, so nothing was done",
                        remote::ABORTED_LINE,
                        remote::UPGRADE_REPORT
                    )
                } else {
                    format!(
                        "{command} exited with status 0 but wrote no {}, so it did not get to do its work",
                        remote::UPGRADE_REPORT
                    )
                };
                return Err(verdict_error(FailureClass::UpgradeNotDone, why));
            }
            (ReportRead::Unreadable(start), Ok(())) => {
                return Err(verdict_error(
                    FailureClass::UpgradeFailed,
                    format!(
                        "{command} exited with status 0, but {} is not keadm's report: {start}",
                        remote::UPGRADE_REPORT
                    ),
                ));
            }
            (ReportRead::Read(report), Ok(())) => report,
        };
        if report.event != task.task.report_event() {
            return Err(verdict_error(
                FailureClass::UpgradeNotDone,
                format!(
                    "{command} exited with status 0, but the report it left is of a {}, not of this command",
                    report.event
                ),
            ));
        }
        if !report.success {
            let message = report
                .error_message
                .as_deref()
                .unwrap_or("no errorMessage given");
            return Err(StepError {
                last_output: Some(one_line(message, 400)),
                ..verdict_error(
                    FailureClass::UpgradeFailed,
                    format!(
                        "{command} exited with status 0, but its report says it failed: {message}"
                    ),
                )
            });
        }
        // An upgrade goes to its target; a rollback back to the version it names.
        let expected = match task.task {
            EdgeTask::Upgrade => {
                if let Some(target) = &task.target_version
                    && !same_version(&report.to_version, target)
                {
                    return Err(verdict_error(
                        FailureClass::VersionMismatch,
                        format!(
                            "{command} reports success, but to {}, not the target {target}",
                            report.to_version
                        ),
                    ));
                }
                Some(
                    task.target_version
                        .clone()
                        .unwrap_or(report.to_version.clone()),
                )
            }
            EdgeTask::Rollback => Some(report.to_version.clone()).filter(|v| !v.is_empty()),
            EdgeTask::Backup | EdgeTask::ConfigUpdate => None,
        };
        if let Some(expected) = expected {
            let problem = match (&check.running, check.running_version()) {
                (None, _) => Some("no edgecore runs on the node".to_string()),
                (Some(_), None) => Some(
                    "the running edgecore's version could not be read (it logged none, and edgecore.yaml has no edgecoreVersion)"
                        .to_string(),
                ),
                (_, Some(v)) if !same_version(v, &expected) => {
                    Some(format!("the edgecore that runs on the node is {v}"))
                }
                _ => None,
            };
            if let Some(problem) = problem {
                return Err(verdict_error(
                    FailureClass::VersionMismatch,
                    format!(
                        "{command} reports success to {expected}, but {problem}, so the node does not run {expected}"
                    ),
                ));
            }
            self.transcript.note(&format!(
                "{command} verified on the node: its report says success and edgecore runs {expected}"
            ));
        }
        Ok(())
    }

    /// `keadm rollback edge` on this connection, to `to` when known (the newest backup
    /// otherwise), then the same check as after any of its family: the rollback succeeded
    /// when keadm exited 0, its report says success and edgecore runs what it went back to.
    pub(super) fn roll_back(
        &mut self,
        conn: &mut dyn Connection,
        privilege: Privilege,
        rollback: &str,
        to: Option<&str>,
    ) -> RollbackRecord {
        let command = match to {
            Some(version) => format!("{rollback} --historical-version={}", shell_quote(version)),
            None => rollback.to_string(),
        };
        self.transcript.note(&format!(
            "rolling back (--rollback-on-failure): {}",
            self.node.redactor.redact(&command)
        ));
        let mut record = RollbackRecord {
            to_version: to.map(str::to_string),
            ..RollbackRecord::default()
        };
        // The operator's second Ctrl-C does not stop a node's way back half way.
        conn.set_abort(None);
        let deadline = Instant::now() + self.node.deadlines.command;
        let exit = exec_as(
            conn,
            &remote::run_script(&self.node.upload_dir, self.node.index, &command),
            privilege,
            password_of(self.node),
            None,
            deadline,
            &mut self.transcript,
        );
        let status = match exit {
            Ok(RemoteExit::Code(code)) => code,
            Ok(RemoteExit::Signal(signal)) => {
                record.error = Some(format!("keadm rollback edge ended by signal {signal}"));
                return record;
            }
            Err(err) => {
                record.error = Some(format!("keadm rollback edge could not run: {err}"));
                return record;
            }
        };
        record.exit_status = Some(status);
        let check = match self.read_edge_task(conn, privilege) {
            Ok(check) => check,
            Err(err) => {
                record.error = Some(format!("the rollback's report could not be read: {err}"));
                return record;
            }
        };
        if let ReportRead::Read(report) = &check.report {
            record.report = Some(report.clone());
        }
        record.running_version = check.running_version().map(str::to_string);
        let edgecore_runs = check.running.is_some();
        let went_to = to.map(str::to_string).or_else(|| {
            record
                .report
                .as_ref()
                .map(|r| r.to_version.clone())
                .filter(|v| !v.is_empty())
        });
        record.error = match (&record.report, &record.running_version, &went_to) {
            _ if status != 0 => Some(format!(
                "keadm rollback edge exited with status {status}{}",
                record
                    .report
                    .as_ref()
                    .and_then(|r| r.error_message.as_deref())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
            (None, _, _) => Some("keadm rollback edge wrote no report".to_string()),
            (Some(r), _, _) if !r.success || r.event != EdgeTask::Rollback.report_event() => {
                Some(format!(
                    "keadm rollback edge's report says it failed: {}",
                    r.error_message
                        .as_deref()
                        .unwrap_or("no errorMessage given")
                ))
            }
            (_, None, _) if !edgecore_runs => {
                Some("no edgecore runs on the node after the rollback".to_string())
            }
            (_, None, _) => Some(
                "after the rollback the running edgecore's version could not be read".to_string(),
            ),
            (_, Some(v), Some(want)) if !same_version(v, want) => Some(format!(
                "after the rollback the edgecore that runs is {v}, not {want}"
            )),
            _ => None,
        };
        record.succeeded = record.error.is_none();
        self.transcript.note(&match &record.error {
            None => format!(
                "rolled back: edgecore runs {} again",
                record.running_version.as_deref().unwrap_or("?")
            ),
            Some(error) => format!("the rollback did not bring the node back: {error}"),
        });
        record
    }
}

/// A failure the report or the version check found after keadm exited 0.
fn verdict_error(class: FailureClass, message: String) -> StepError {
    StepError {
        exit_status: Some(0),
        ..StepError::new(Phase::Running, message).class(class)
    }
}

/// The check's findings, as one transcript line.
fn describe(check: &EdgeTaskCheck) -> String {
    let report = match &check.report {
        ReportRead::Missing => format!("no {} was written", remote::UPGRADE_REPORT),
        ReportRead::Unreadable(start) => {
            format!("{} is not keadm's JSON: {start}", remote::UPGRADE_REPORT)
        }
        ReportRead::Read(r) => format!(
            "{}: event {}, success {}, fromVersion {}, toVersion {}{}",
            remote::UPGRADE_REPORT,
            r.event,
            r.success,
            r.from_version,
            r.to_version,
            r.error_message
                .as_deref()
                .map(|m| format!(", errorMessage {m}"))
                .unwrap_or_default()
        ),
    };
    let running = match (&check.running, check.running_version()) {
        (None, _) => "no edgecore runs".to_string(),
        (Some(_), None) => {
            "an edgecore runs, but its version could not be read (no log line, no edgecoreVersion)"
                .to_string()
        }
        (_, Some(v)) if check.version_from_config() => {
            format!(
                "the running edgecore is {v} (edgecore.yaml's edgecoreVersion: its log line was not found)"
            )
        }
        (_, Some(v)) => format!("the running edgecore is {v}"),
    };
    format!("{report}; {running}")
}

/// `--rollback-on-failure` for a node whose upgrade passed on the node but failed the
/// cluster's Ready gate: connects again and rolls it back, its notes going to the node's
/// transcript. `None` when the node plans no rollback.
pub fn roll_back(node: &NodePlan, ctx: &Context, to: Option<&str>) -> Option<RollbackRecord> {
    let rollback = node.edge_task.as_ref()?.rollback.as_ref()?;
    let path = ctx.run_dir.transcript_path(node.index, &node.name);
    let transcript = Transcript::reopen(&path, node.redactor.clone(), ADDED_BYTES)
        .unwrap_or_else(|_| Transcript::in_memory(node.redactor.clone()));
    let mut run = Run::new(node, ctx, transcript);
    let record = match run.connect() {
        Ok(mut conn) => {
            let privilege = Privilege::of(node.sudo, password_of(node).is_some());
            run.abort_on_second_interrupt(conn.as_mut());
            run.roll_back(conn.as_mut(), privilege, rollback, to)
        }
        Err(e) => RollbackRecord {
            to_version: to.map(str::to_string),
            error: Some(format!(
                "the node could not be reached to roll it back: {}",
                node.redactor.redact(&e.message)
            )),
            ..RollbackRecord::default()
        },
    };
    run.transcript.finish();
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_the_report_and_the_running_version() {
        let check = remote::parse_edge_task_check(
            "KB_REPORT {\"event\":\"Upgrade\",\"success\":false,\"fromVersion\":\"v1.23.0\",\"toVersion\":\"v1.23.1\",\"errorMessage\":\"failed to pull image\"}\nKB_RUNNING_NONE\n",
        );
        let said = describe(&check);
        assert!(said.contains("success false"), "{said}");
        assert!(said.contains("errorMessage failed to pull image"), "{said}");
        assert!(said.ends_with("no edgecore runs"), "{said}");
    }
}
