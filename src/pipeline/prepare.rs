//! Before anything changes on the node: the read-only pre-flight probe (joins), then the
//! preparatory round trip that creates and checks the upload dir and learns the node's
//! arch, what is already there (files, and with offline images the runtime's images) and
//! whether sudo needs a password.

use std::time::{Instant, SystemTime};

use super::privilege::{exec_probing_sudo, password_of};
use super::upload::tarball_may_pay_off;
use super::{Run, StepError};
use crate::arch::Arch;
use crate::diagnosis::FailureClass;
use crate::kubeedge::{Finding, FindingId, clock_skew, images, preflight};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::options::PreflightMode;
use crate::outcome::{Phase, PreflightFinding};
use crate::plan::KeadmSource;
use crate::remote::{self, NodeFacts, Privilege, Runtime};
use crate::transport::{Connection, RemoteExit, TransportError};

impl<'a> Run<'a, '_> {
    /// The read-only pre-flight probe, one round trip before anything changes on the
    /// node. In strict mode a finding skips the node untouched.
    pub(super) fn preflight(&mut self, conn: &mut dyn Connection) -> Result<(), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let script = run.preflight_script();
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            run.probe_sent = Some(SystemTime::now());
            // The image check asks the runtime with the privilege the run will have (the
            // runtime's socket is root's), in the same round trip: under sudo the
            // login-user checks go first and the runtime probe in sudo's `sh -c`.
            let images = run
                .images_in_play()
                .map(|_| remote::runtime_probe_script(&run.runtime_socket()));
            let result = match images {
                Some(images) if node.sudo => exec_probing_sudo(
                    conn,
                    &script,
                    &images,
                    password_of(node),
                    deadline,
                    &mut output,
                ),
                Some(images) => {
                    conn.exec(&format!("{script}{images}"), None, deadline, &mut output)
                }
                None => conn.exec(&script, None, deadline, &mut output),
            };
            result.map_err(|e| {
                StepError::transport(
                    Phase::Preparing,
                    "Cannot run the pre-flight probe on the node.".to_string(),
                    e,
                )
            })?;
            run.preflight_findings(&output.text())
        })
    }

    /// Whether the pre-flight probe rides in the prepare round trip: when its findings
    /// only warn (strict mode must skip a node untouched, and prepare creates the upload
    /// dir), when both run as the login user (prepare may run under sudo), and when no
    /// image archives are in play (both would probe the runtime).
    pub(super) fn preflight_rides_with_prepare(&self) -> bool {
        self.ctx.preflight == PreflightMode::Warn
            && !self.node.sudo
            && self.images_in_play().is_none()
    }

    /// The pre-flight probe's own checks: read-only, as the login user. The image check
    /// is added by [`Run::preflight`].
    fn preflight_script(&self) -> String {
        let node = self.node;
        let needed: u64 = node.copy_files.iter().map(|f| f.size).sum::<u64>()
            + self.ctx.binary_size_hint
            + self.images_in_play().map_or(0, |i| i.largest_arch_bytes());
        remote::preflight_probe_script(
            &node.upload_dir,
            &self.runtime_socket(),
            needed,
            &preflight::join_side(&node.keadm_args),
        )
    }

    /// Reads the probe's findings from `text`, notes them, and in strict mode turns the
    /// first into the node's skip.
    fn preflight_findings(&mut self, text: &str) -> Result<(), StepError> {
        let mut findings = preflight::parse(text);
        // Before a "probe incomplete" finding, which parse puts last.
        let at = findings
            .iter()
            .position(|f| f.id == FindingId::ProbeIncomplete)
            .unwrap_or(findings.len());
        let mut found_here: Vec<Finding> = self
            .probe_sent
            .and_then(|sent| clock_skew::finding(text, sent, SystemTime::now()))
            .into_iter()
            .collect();
        if self.images_in_play().is_some() {
            found_here.extend(self.image_findings(text));
        }
        findings.splice(at..at, found_here);
        for finding in &findings {
            // The console groups a run's findings by id in its recap: a warning per node
            // and finding buried everything else at scale. -v still shows each here.
            self.transcript.note(&format!(
                "pre-flight: {finding}; {}",
                finding.suggested_action()
            ));
        }
        self.findings = findings
            .iter()
            .map(|f| PreflightFinding {
                id: f.id,
                detail: f.detail.clone(),
            })
            .collect();
        if self.ctx.preflight == PreflightMode::Strict && !findings.is_empty() {
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
    }

    /// The pre-flight image check: the images this join needs (keadm's own and those
    /// keadm.extraImages lists) that the runtime does not list and no offline archive for
    /// the node's arch provides (`image_missing`), and
    /// what could not be checked, and why (`probe_incomplete`): a check that could not run
    /// is a finding, never "nothing found".
    fn image_findings(&mut self, output: &str) -> Vec<Finding> {
        let not_checked = |detail: String| Finding {
            id: FindingId::ProbeIncomplete,
            detail,
        };
        let facts = remote::parse_runtime_facts(output);
        // For --preflight-only's list of the sandbox images each site's kit needs.
        self.sandbox_image = facts
            .as_ref()
            .and_then(|f| f.sandbox.as_ref())
            .map(ToString::to_string);
        let facts = match facts {
            Some(facts) if facts.done => facts,
            _ => {
                return vec![not_checked(format!(
                    "the images keadm join needs were not checked: {}",
                    self.image_check_cut(output)
                ))];
            }
        };
        let runtime = self.told_runtime(&facts);
        if let Runtime::Unknown { socket, why } = &runtime {
            return vec![not_checked(format!(
                "the images keadm join needs were not checked: keadm-batch cannot tell which container runtime serves {socket} ({why})"
            ))];
        }
        if !facts.listed {
            let why = match (&facts.tool, &facts.list_error) {
                (_, Some(error)) => error.clone(),
                (None, None) => format!("none of {} is on the node", runtime.tools().join(", ")),
                (Some(tool), None) => format!("{tool} cannot list its images"),
            };
            return vec![not_checked(format!(
                "the images keadm join needs were not checked: the images of {} could not be listed ({why})",
                runtime.name()
            ))];
        }
        let (needed, unknown) = images::needed_by_join(
            &self.node.keadm_args,
            self.ctx.keadm_version,
            facts.sandbox.as_ref(),
        );
        let arch = facts
            .machine
            .as_deref()
            .and_then(|m| Arch::from_uname(m).ok());
        let provided = match (self.images_in_play(), arch) {
            (Some(images), Some(arch)) => images.provided(arch),
            _ => Vec::new(),
        };
        let mut findings: Vec<Finding> = images::missing_finding(
            &needed,
            self.ctx.extra_images,
            &facts.images,
            &provided,
            &runtime.name(),
            arch,
            facts.sandbox.as_ref(),
        )
        .into_iter()
        .collect();
        if !unknown.is_empty() {
            findings.push(not_checked(format!(
                "not every image keadm join needs was checked: keadm-batch cannot tell {}",
                unknown.join(", nor ")
            )));
        }
        findings
    }

    /// Why the image check's probe (in `output`) ended before its last line.
    fn image_check_cut(&self, output: &str) -> String {
        let node = self.node;
        let sudo_wants_password = output
            .lines()
            .any(|l| l.trim_end() == remote::SUDO_WANTS_PASSWORD);
        if sudo_wants_password && password_of(node).is_none() {
            format!(
                "it runs under sudo as the run does, and sudo on the node wants a password, which {} logs in without",
                node.ssh.username
            )
        } else {
            preflight::how_it_ended(output)
        }
    }

    /// Prepares the upload dir and learns the node's arch and what is already there, in
    /// one round trip. For non-root logins it also learns whether sudo needs a password.
    ///
    /// With `with_preflight` the pre-flight probe goes first in the same script, in a
    /// subshell of its own (see [`Run::preflight_rides_with_prepare`]): one exec channel,
    /// two or three round trips, less per node.
    pub(super) fn prepare(
        &mut self,
        conn: &mut dyn Connection,
        with_preflight: bool,
    ) -> Result<(NodeFacts, Privilege), StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let (script, names) = run.prepare_script(with_preflight);
            // The relay's steps in the login user's home run as the login user.
            let as_login = run.relay_prepare_as_login();
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let deadline = Instant::now() + node.deadlines.step;
            run.probe_sent = Some(SystemTime::now());
            let result = if node.sudo {
                exec_probing_sudo(
                    conn,
                    &as_login,
                    &script,
                    password_of(node),
                    deadline,
                    &mut output,
                )
            } else {
                conn.exec(&format!("{as_login}{script}"), None, deadline, &mut output)
            };
            let exit = result.map_err(|e| run.prepare_failed(e))?;
            run.learn_prepared(&output.text(), with_preflight, &names, &exit)
        })
    }

    /// The preparatory script (with the pre-flight probe first when `with_preflight`),
    /// and the names of the files whose presence it reports, in its order.
    pub(super) fn prepare_script(&self, with_preflight: bool) -> (String, Vec<&'a str>) {
        let node = self.node;
        let probe = with_preflight.then(|| format!("(\n{}\n)\n", self.preflight_script()));
        let mut names: Vec<&str> = node.copy_files.iter().map(|f| f.name.as_str()).collect();
        if node.keadm == KeadmSource::Staged {
            names.push("keadm");
        }
        let images = self.images_in_play();
        if let Some(images) = images {
            names.extend(images.remote_names());
        }
        let mut script = probe.unwrap_or_default();
        script.push_str(&remote::prepare_script(
            &node.upload_dir,
            &names,
            self.ctx.verify_remote,
        ));
        if images.is_some() {
            script.push_str(&remote::runtime_probe_script(&self.runtime_socket()));
        }
        let tarball =
            node.keadm == KeadmSource::Staged && self.ctx.stager.is_some_and(tarball_may_pay_off);
        let relay = self.relay_active();
        // A node checks image archives by their sha256 (and may get them gzipped), and a
        // relaying node checks the copy a peer sends.
        if tarball || relay || images.is_some() {
            script.push_str(&remote::TOOLS_PROBE);
        }
        // What an earlier run's fetch left in the upload dir, and whether root can
        // serve as the login user (the rest is the login user's, before sudo).
        script.push_str(&self.relay_prepare_privileged());
        (script, names)
    }

    /// The error of a preparatory script that could not run to its end.
    pub(super) fn prepare_failed(&self, err: TransportError) -> StepError {
        StepError::transport(
            Phase::Preparing,
            format!(
                "Cannot prepare the upload directory {} on the node.",
                self.node.upload_dir
            ),
            err,
        )
    }

    /// What the preparatory script's output `text` says: the node's facts and the
    /// privilege later steps run with, or why the node cannot go on (a pre-flight skip,
    /// sudo without a password, an upload dir that cannot be trusted). `exit` is how the
    /// script ended, named beside a dir problem.
    pub(super) fn learn_prepared(
        &mut self,
        text: &str,
        with_preflight: bool,
        names: &[&str],
        exit: &RemoteExit,
    ) -> Result<(NodeFacts, Privilege), StepError> {
        let node = self.node;
        if with_preflight {
            self.preflight_findings(text)?;
        }
        self.learn_relay_prepared(text);
        let facts = remote::parse_facts(text, names);
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
        self.transcript.note(&format!(
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
    }
}
