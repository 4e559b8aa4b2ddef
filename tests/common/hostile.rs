//! Hostile and broken nodes: real sshd nodes whose `ForceCommand` replaces every command
//! the tool runs there (the kill channel's too) with misbehaviour, and a fake keadm that
//! misbehaves on the nodes that hold a marker file in their own /tmp.
//!
//! ```ignore
//! let fleet = Fleet::builder().nodes(2).node_option(1, Hostile::FloodEveryExec.sshd()).start();
//! let sc = Scenario::new(&fleet).keadm(hostile::keadm());
//! hostile::mark(fleet.node(0), HostileKeadm::ForgesNotes);
//! ```

use super::fake_keadm::FakeKeadm;
use super::fleet::{Node, NodeOpt};

/// What a node's sshd runs instead of any command it is asked to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// Every exec, the kill channel's included, answers with lines as fast as it can.
    FloodEveryExec,
    /// Every exec prints the start of the facts (`KB_ARCH x86_64`) and then zero bytes
    /// without a line break, forever.
    FactsThenEndlessLine,
}

impl Hostile {
    /// The node option that makes a fleet node behave so.
    pub fn sshd(self) -> NodeOpt {
        let command = match self {
            Hostile::FloodEveryExec => "exec yes 'flood line'",
            Hostile::FactsThenEndlessLine => "printf 'KB_ARCH x86_64\\n'; exec cat /dev/zero",
        };
        NodeOpt::SshdConfig(format!("ForceCommand {command}"))
    }
}

/// What the fake keadm of [`keadm`] does on a node marked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostileKeadm {
    /// Prints, forever and as fast as it can, the line the tool writes when keadm ends
    /// well: `[keadm-batch] keadm exited with status 0`.
    ForgesNotes,
    /// Prints terminal escape sequences (a title change, a bell, a cursor move) and a
    /// forged log line, then fails.
    PrintsEscapes,
    /// Ignores SIGTERM and SIGHUP and sleeps past any deadline.
    IgnoresTerm,
}

/// The forged note [`HostileKeadm::ForgesNotes`] prints.
pub const FORGED_NOTE: &str = "[keadm-batch] keadm exited with status 0";

impl HostileKeadm {
    fn marker(self) -> &'static str {
        match self {
            HostileKeadm::ForgesNotes => "hostile-forges-notes",
            HostileKeadm::PrintsEscapes => "hostile-prints-escapes",
            HostileKeadm::IgnoresTerm => "hostile-ignores-term",
        }
    }
}

/// A fake keadm that joins on an unmarked node and misbehaves on a marked one.
pub fn keadm() -> FakeKeadm {
    let forge = HostileKeadm::ForgesNotes.marker();
    let escapes = HostileKeadm::PrintsEscapes.marker();
    let term = HostileKeadm::IgnoresTerm.marker();
    FakeKeadm::new()
        .runs(&format!(
            "if [ -e /tmp/{forge} ]; then while :; do echo '{FORGED_NOTE}'; done; fi"
        ))
        .runs(&format!(
            "if [ -e /tmp/{escapes} ]; then printf 'pwned\\033]0;owned\\007\\033[2J\\nSuccessfully processed node edge-99\\n'; exit 1; fi"
        ))
        .runs(&format!(
            "if [ -e /tmp/{term} ]; then trap '' TERM HUP; sleep 600; fi"
        ))
}

/// Makes `node` misbehave as `what` says when [`keadm`] runs there.
pub fn mark(node: &Node, what: HostileKeadm) {
    std::fs::write(node.tmp_path(what.marker()), "").unwrap();
}
