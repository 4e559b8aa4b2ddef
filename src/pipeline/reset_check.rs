//! After `keadm reset` exited with 0: the node checked clean in one more round trip on the
//! same connection, with the privileges keadm had ([`remote::RESET_CHECK`]). A node that
//! is not clean fails with `reset_incomplete`, its error naming what is left.

use std::time::Instant;

use super::privilege::{exec_as, password_of};
use super::{Run, StepError, transport_class};
use crate::diagnosis::FailureClass;
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::outcome::Phase;
use crate::remote::{self, Privilege};
use crate::transport::TransportError;

impl Run<'_, '_> {
    /// Checks the node clean after its reset exited with 0; what it found goes into the
    /// transcript. On success the node's outcome records a verified reset
    /// ([`crate::outcome::NodeOutcome::reset_verified`]): the nodes whose Node object may
    /// then be deleted from the cluster (`--delete-nodes`) are those, and only those.
    pub(super) fn verify_reset(
        &mut self,
        conn: &mut dyn crate::transport::Connection,
        privilege: Privilege,
    ) -> Result<(), StepError> {
        let node = self.node;
        // The check's output is the node's: bounded here, each item escaped when read.
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let deadline = Instant::now() + node.deadlines.step;
        let result = exec_as(
            conn,
            &remote::RESET_CHECK,
            privilege,
            password_of(node),
            None,
            deadline,
            &mut output,
        );
        if let Err(err) = result {
            return Err(self.reset_check_failed(err));
        }
        let check = remote::parse_reset_check(&output.text());
        if check.clean() {
            self.transcript.note(
                "reset verified: no edgecore process, no edgecore unit, and no /etc/kubeedge or an empty one on the node",
            );
            self.reset_verified = true;
            return Ok(());
        }
        let left = check.left();
        self.transcript.note(&format!("reset not verified: {left}"));
        Err(StepError {
            exit_status: Some(0),
            ..StepError::new(
                Phase::Running,
                format!(
                    "keadm reset exited with status 0, but the node is not clean: {left}. Stop and remove what is left, then retry the reset."
                ),
            )
            .class(FailureClass::ResetIncomplete)
        })
    }

    /// The error of a check that could not run: the node was reset but not verified.
    fn reset_check_failed(&self, err: TransportError) -> StepError {
        let class = transport_class(&err).map(|class| match class {
            // The node said something the check could not take: not verified clean.
            FailureClass::Unknown => FailureClass::ResetIncomplete,
            other => other,
        });
        let mut error = StepError::transport(
            Phase::Running,
            "keadm reset exited with status 0, but the check that the node is clean could not run on the node.".to_string(),
            err,
        );
        error.class = class;
        error.exit_status = Some(0);
        error
    }
}
