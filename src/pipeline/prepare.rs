//! Before anything changes on the node: the read-only pre-flight probe (joins), then the
//! preparatory round trip that creates and checks the upload dir and learns the node's
//! arch, what is already there and whether sudo needs a password.

use std::time::Instant;

use super::privilege::{exec_probing_sudo, password_of};
use super::upload::tarball_may_pay_off;
use super::{Run, StepError};
use crate::diagnosis::FailureClass;
use crate::kubeedge::preflight;
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::options::PreflightMode;
use crate::outcome::{Phase, PreflightFinding};
use crate::plan::KeadmSource;
use crate::remote::{self, NodeFacts, Privilege};
use crate::transport::Connection;

impl Run<'_, '_> {
    /// The read-only pre-flight probe, one round trip before anything changes on the
    /// node. In strict mode a finding skips the node untouched.
    pub(super) fn preflight(&mut self, conn: &mut dyn Connection) -> Result<(), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let needed: u64 =
                node.copy_files.iter().map(|f| f.size).sum::<u64>() + run.ctx.binary_size_hint;
            let script = remote::preflight_probe_script(
                &node.upload_dir,
                &preflight::runtime_socket(&node.keadm_args),
                needed,
            );
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            conn.exec(&script, None, deadline, &mut output)
                .map_err(|e| {
                    StepError::transport(
                        Phase::Preparing,
                        "Cannot run the pre-flight probe on the node.".to_string(),
                        e,
                    )
                })?;
            let findings = preflight::parse(&output.text());
            for finding in &findings {
                let note = format!("pre-flight: {finding}; {}", finding.suggested_action());
                // Under warn the console gets the finding as a warning, so the note
                // stays out of -v's info lines: one line per finding, not two.
                if run.ctx.preflight == PreflightMode::Warn {
                    log::warn!("{}: pre-flight: {finding}", node.name);
                    run.transcript.note_unlogged(&note);
                } else {
                    run.transcript.note(&note);
                }
            }
            run.findings = findings
                .iter()
                .map(|f| PreflightFinding {
                    id: f.id,
                    detail: f.detail.clone(),
                })
                .collect();
            if run.ctx.preflight == PreflightMode::Strict && !findings.is_empty() {
                let first = &findings[0];
                let more = if findings.len() > 1 {
                    format!(" (and {} more finding(s))", findings.len() - 1)
                } else {
                    String::new()
                };
                return Err(StepError {
                    phase: Phase::Preparing,
                    message: format!(
                        "Skipped by pre-flight: {}{more}. {}",
                        first.to_string().trim_end_matches('.'),
                        first.suggested_action()
                    ),
                    ending: Phase::Skipped,
                    exit_status: None,
                    class: None,
                    last_output: None,
                });
            }
            Ok(())
        })
    }

    /// Prepares the upload dir and learns the node's arch and what is already there, in
    /// one round trip. For non-root logins it also learns whether sudo needs a password.
    pub(super) fn prepare(
        &mut self,
        conn: &mut dyn Connection,
    ) -> Result<(NodeFacts, Privilege), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let mut names: Vec<&str> = node.copy_files.iter().map(|f| f.name.as_str()).collect();
            if node.keadm == KeadmSource::Staged {
                names.push("keadm");
            }
            let mut script =
                remote::prepare_script(&node.upload_dir, &names, run.ctx.verify_remote);
            if node.keadm == KeadmSource::Staged && run.ctx.stager.is_some_and(tarball_may_pay_off)
            {
                script.push_str(remote::TOOLS_PROBE);
            }
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            let result = if node.sudo {
                exec_probing_sudo(conn, &script, password_of(node), deadline, &mut output)
            } else {
                conn.exec(&script, None, deadline, &mut output)
            };
            let exit = result.map_err(|e| {
                StepError::transport(
                    Phase::Preparing,
                    format!(
                        "Cannot prepare the upload directory {} on the node.",
                        node.upload_dir
                    ),
                    e,
                )
            })?;
            let text = output.text();
            let facts = remote::parse_facts(&text, &names);
            let privilege = match (node.sudo, facts.sudo_needs_password) {
                (false, _) => Privilege::Login,
                (true, Some(false)) => Privilege::SudoNoPassword,
                (true, _) => Privilege::SudoPassword,
            };
            if privilege == Privilege::SudoPassword && password_of(node).is_none() {
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "Sudo on node {} needs a password, but {} logs in without one. Give {} passwordless sudo on the node, or log in with a password.",
                        node.name, node.ssh.username, node.ssh.username
                    ),
                )
                .class(FailureClass::Sudo));
            }
            if let Some(problem) = &facts.dir_problem {
                let sudo_refused =
                    text.contains("incorrect password") || text.contains("Sorry, try again");
                let hint = if sudo_refused {
                    " (sudo rejected the login password)"
                } else {
                    ""
                };
                let exit = if exit.success() {
                    String::new()
                } else {
                    format!(" ({exit})")
                };
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "The upload directory {} cannot be used{hint}: {}{exit}.",
                        node.upload_dir,
                        problem.trim_end_matches('.')
                    ),
                )
                .class(if sudo_refused {
                    FailureClass::Sudo
                } else {
                    FailureClass::Upload
                }));
            }
            run.transcript.note(&format!(
                "prepared {} ({}), uname -m: {}",
                node.upload_dir,
                match privilege {
                    Privilege::Login => "as the login user",
                    Privilege::SudoNoPassword => "under passwordless sudo",
                    Privilege::SudoPassword => "under sudo with the login password",
                },
                facts.machine.as_deref().unwrap_or("?")
            ));
            Ok((facts, privilege))
        })
    }
}
