//! Which Node the node says is its own, asked before `--drain` or `--delete-nodes`
//! writes to the cluster for it (`cluster::Guard`): a connection of its own, before the
//! node's pipeline (the cordon and drain come before anything runs on the node, and a
//! reset removes edgecore.yaml), one read-only round trip with the privileges the node's
//! scripts have (edgecore.yaml may be root's).

use std::time::Instant;

use super::privilege::{exec_as, password_of};
use super::{Context, Run};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::plan::NodePlan;
use crate::remote::{self, NodeIdentity, Privilege};
use crate::report::transcript::Transcript;

/// Connects to `node` and reads [`remote::NODE_IDENTITY`]; `Err` says in a sentence why
/// the node could not be asked.
pub fn identity(node: &NodePlan, ctx: &Context) -> Result<NodeIdentity, String> {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
    let result = run.connect().and_then(|mut conn| {
        let conn = conn.as_mut();
        run.abort_on_second_interrupt(conn);
        let privilege = Privilege::of(node.sudo, password_of(node).is_some());
        let deadline = Instant::now() + node.deadlines.step;
        exec_as(
            conn,
            remote::NODE_IDENTITY,
            privilege,
            password_of(node),
            None,
            deadline,
            &mut output,
        )
        .map_err(|err| {
            super::StepError::transport(
                crate::outcome::Phase::Preparing,
                "Could not ask the node which Node is its own.".to_string(),
                err,
            )
        })
    });
    match result {
        Ok(_) => Ok(remote::parse_node_identity(&output.text())),
        Err(e) => Err(node.redactor.redact(&e.message)),
    }
}
