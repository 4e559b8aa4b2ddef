//! `batch status`: one node's connection and one read-only round trip
//! ([`remote::status_probe_script`]), with the privileges a run's keadm would have, so the
//! keadm in a root-owned upload dir can tell its version. Nothing is written on the node.

use std::time::Instant;

use super::privilege::{exec_probing_sudo, password_of};
use super::{Context, Run};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP, one_line};
use crate::outcome::{Phase, ProbeError};
use crate::plan::NodePlan;
use crate::remote::{self, NodeStatus};
use crate::report::transcript::Transcript;

/// Connects to `node` and asks it what `batch status` shows. An error is a node that
/// could not be reached (or asked): its phase and the reason in one line, secrets masked.
/// The operator's second Ctrl-C aborts a probe under way, as it aborts a run.
pub fn status_only(node: &NodePlan, ctx: &Context) -> Result<NodeStatus, ProbeError> {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let failed = |phase: Phase, reason: &str| ProbeError {
        phase,
        reason: one_line(&node.redactor.redact(reason), 300),
    };
    let mut conn = run.connect().map_err(|e| failed(e.phase, &e.message))?;
    let conn = conn.as_mut();
    run.abort_on_second_interrupt(conn);
    let keadm = format!("{}/keadm", node.exec_dir.trim_end_matches('/'));
    let script = remote::status_probe_script(&keadm);
    let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
    let deadline = Instant::now() + node.deadlines.step;
    let result = if node.sudo {
        exec_probing_sudo(conn, "", &script, password_of(node), deadline, &mut output)
    } else {
        conn.exec(&script, None, deadline, &mut output)
    };
    let text = output.text();
    result.map_err(|e| {
        failed(
            Phase::Preparing,
            &format!("Cannot ask the node for its status. {e}"),
        )
    })?;
    let status = remote::parse_status(&text);
    if !status.finished {
        // sudo refused, or the node's shell stopped early: what it said last says why.
        let said = text
            .lines()
            .rev()
            .find(|l| !l.starts_with("KB_"))
            .unwrap_or("it said nothing");
        return Err(failed(
            Phase::Preparing,
            &format!(
                "The status script did not finish on the node{}: {said}",
                if node.sudo { " (under sudo)" } else { "" }
            ),
        ));
    }
    Ok(status)
}
