//! `batch status` through the fake transport: one connection and one command per node,
//! under sudo where the run would use it, and a node that does not finish answering is
//! an error that says what it said last.

use super::*;
use crate::outcome::Phase;
use crate::transport::TransportError;

/// The status probe.
const PROBE: &str = "KB_ST_DONE";

#[test]
fn a_node_is_asked_once_and_its_answer_read() {
    let fake = FakeTransport::new().on(
        PROBE,
        Reply::ok().printing(
            "KB_ST_EDGECORE_PIDS 7 9\nKB_ST_EDGECORE_NONE\nKB_ST_KEADM v1.2.3\nKB_ST_DONE\n",
        ),
    );
    let h = Harness::new(fake);
    let status = h.status(&node(vec![])).unwrap();
    assert_eq!(status.edgecore_pids, [7, 9]);
    assert_eq!(status.keadm_version.as_deref(), Some("v1.2.3"));
    assert_eq!(h.fake.connects().len(), 1);
    let execs = h.execs();
    assert_eq!(execs.len(), 1, "{execs:#?}");
    // keadm as the node's run would have it: in its exec dir.
    assert!(
        execs[0].command.contains("KEADM=/opt/bin/keadm\n"),
        "{}",
        execs[0].command
    );
    assert!(execs[0].stdin.is_none());
}

#[test]
fn a_sudo_node_is_asked_under_sudo_with_the_password_on_stdin() {
    let fake = FakeTransport::new().on(
        PROBE,
        Reply::ok().printing("KB_SUDO password\nKB_ST_DONE\n"),
    );
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    h.status(&plan).unwrap();
    let exec = h.exec_with(PROBE);
    assert!(
        exec.command.contains("\nif sudo -n true"),
        "{}",
        exec.command
    );
    let stdin = String::from_utf8(exec.stdin.unwrap()).unwrap();
    assert!(stdin.starts_with(&format!("{PASSWORD}\n")), "{stdin}");
}

#[test]
fn a_node_that_does_not_finish_or_cannot_be_reached_is_an_error_in_one_line() {
    let fake = FakeTransport::new().on(
        PROBE,
        Reply::exit(1).printing("KB_SUDO password\nSorry, try again.\n"),
    );
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    plan.sudo = true;
    let err = h.status(&plan).unwrap_err();
    assert_eq!(err.phase, Phase::Preparing);
    assert_eq!(
        err.reason,
        "The status script did not finish on the node (under sudo): Sorry, try again."
    );
    let h = Harness::new(
        FakeTransport::new().failing_connects(3, |e| TransportError::Refused {
            endpoint: e.clone(),
        }),
    );
    let err = h.status(&node(vec![])).unwrap_err();
    assert_eq!(err.phase, Phase::Connecting);
    assert!(
        err.reason.contains("refused the connection"),
        "{}",
        err.reason
    );
    assert!(!err.reason.contains('\n'));
}
