//! What the node says of its edgecore once the cluster's wait for it has ended without a
//! Node: a connection of its own (the node's pipeline ended long before), one read-only
//! round trip, its lines added to the node's transcript.

use std::time::Instant;

use super::privilege::{exec_as, password_of};
use std::io::Write;

use super::{Context, Run, StepError};
use crate::outcome::Phase;
use crate::plan::NodePlan;
use crate::redact::Redactor;
use crate::remote::{self, EdgecoreState, Privilege};
use crate::report::transcript::Transcript;

/// The most the node's answer adds to its transcript.
const ADDED_BYTES: u64 = 256 << 10;

/// Connects to `node` again and asks for edgecore's state and log, under sudo where the
/// node's scripts run under sudo (edgecore's log is root's). Its lines go to the node's
/// transcript; `Err` says in a sentence why the node could not be asked.
pub fn edgecore_state(node: &NodePlan, ctx: &Context) -> Result<EdgecoreState, String> {
    let path = ctx.run_dir.transcript_path(node.index, &node.name);
    let redactor: std::sync::Arc<Redactor> = node.redactor.clone();
    let transcript = Transcript::reopen(&path, redactor.clone(), ADDED_BYTES)
        .unwrap_or_else(|_| Transcript::in_memory(redactor));
    let mut run = Run::new(node, ctx, transcript);
    run.transcript
        .note("asking the node for edgecore's state and the last lines of its log");
    let result = run.ask_alone(
        &remote::EDGECORE_STATE,
        Phase::Verifying,
        "Could not ask for edgecore's state.",
        None,
    );
    let answer = match result {
        Ok(_) => Ok(EdgecoreState::parse(&run.transcript.tail(40))),
        Err(e) => Err(node.redactor.redact(&e.message)),
    };
    if let Err(reason) = &answer {
        run.transcript.note(reason);
    }
    run.transcript.finish();
    answer
}

impl Run<'_, '_> {
    /// Connects to the node on a connection of its own and runs one read-only `script`
    /// with the privileges the node's scripts have; its output goes to `output`, else to
    /// the transcript. `failed` is the sentence for a node that could not be asked.
    pub(super) fn ask_alone(
        &mut self,
        script: &str,
        phase: Phase,
        failed: &str,
        output: Option<&mut dyn Write>,
    ) -> Result<(), StepError> {
        let node = self.node;
        let mut conn = self.connect()?;
        let conn = conn.as_mut();
        self.abort_on_second_interrupt(conn);
        let privilege = Privilege::of(node.sudo, password_of(node).is_some());
        let deadline = Instant::now() + node.deadlines.step;
        let output: &mut dyn Write = match output {
            Some(output) => output,
            None => &mut self.transcript,
        };
        exec_as(
            conn,
            script,
            privilege,
            password_of(node),
            None,
            deadline,
            output,
        )
        .map(|_| ())
        .map_err(|err| StepError::transport(phase, failed.to_string(), err))
    }
}
