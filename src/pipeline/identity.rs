//! Which Node the node says is its own, asked before `--drain` or `--delete-nodes`
//! writes to the cluster for it (`cluster::Guard`): a connection of its own, before the
//! node's pipeline (the cordon and drain come before anything runs on the node, and a
//! reset removes edgecore.yaml), one read-only round trip with the privileges the node's
//! scripts have (edgecore.yaml may be root's).

use super::{Context, Run};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::outcome::Phase;
use crate::plan::NodePlan;
use crate::remote::{self, NodeIdentity};
use crate::report::transcript::Transcript;

/// Connects to `node` and reads [`remote::NODE_IDENTITY`]; `Err` says in a sentence why
/// the node could not be asked.
pub fn identity(node: &NodePlan, ctx: &Context) -> Result<NodeIdentity, String> {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
    match run.ask_alone(
        &remote::NODE_IDENTITY,
        Phase::Preparing,
        "Could not ask the node which Node is its own.",
        Some(&mut output),
    ) {
        Ok(()) => Ok(remote::parse_node_identity(&output.text())),
        Err(e) => Err(node.redactor.redact(&e.message)),
    }
}
