//! Issue 30, resets verified: a reset command that exits with 0 is followed, on the same
//! connection and with keadm's privileges, by the check that the node is clean; a node
//! with something left fails with `reset_incomplete`, naming it. Joins, failed resets and
//! `reset cloud` are not checked.

use super::*;
use crate::diagnosis::FailureClass;
use crate::outcome::Phase;
use crate::remote::STDIN_MARK;

/// The check after the reset.
const CHECK: &str = "KB_RESET_CHECKED";

/// `plan` made a reset (`keadm_cmd`) of the keadm in /opt/bin.
fn reset(keadm_cmd: &str) -> NodePlan {
    let mut plan = node(vec![]);
    plan.keadm_cmd = keadm_cmd.into();
    plan.keadm_args = KeadmCommand::parse(keadm_cmd);
    plan.command = format!("cd /opt/bin && yes | ./keadm {keadm_cmd}");
    plan
}

/// A node whose reset exits with `status` and whose check prints `check`.
fn resetting(status: i32, check: Reply) -> FakeTransport {
    FakeTransport::new()
        .on(CHECK, check)
        .on("./keadm reset", Reply::exit(status))
        .on(sent::PREPARE, prepared(""))
}

#[test]
fn a_clean_reset_is_verified_after_keadm_in_the_same_connection() {
    let h = Harness::new(resetting(0, Reply::ok().printing("KB_RESET_CHECKED\n")));
    let outcome = h.process(&reset("reset edge --force"));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert!(outcome.reset_verified);
    assert_eq!(h.fake.connects().len(), 1);
    let commands: Vec<String> = h.execs().into_iter().map(|e| e.command).collect();
    let run = commands.iter().position(|c| c.contains("./keadm reset"));
    let check = commands.iter().position(|c| c.contains(CHECK));
    assert!(run.is_some() && check > run, "{commands:#?}");
    assert!(transcript(&outcome).contains("reset verified: no edgecore process"));
    // summary.json says so; a node without a verified reset carries no such field.
    let json = serde_json::to_string(&outcome).unwrap();
    assert!(json.contains("\"reset_verified\":true"), "{json}");
}

#[test]
fn what_a_reset_left_fails_the_node_with_reset_incomplete_naming_it() {
    let h = Harness::new(resetting(
        0,
        Reply::ok().printing(
            "KB_LEFT pid 4242\nKB_LEFT unit /etc/systemd/system/edgecore.service\nKB_LEFT path /etc/kubeedge\nKB_RESET_CHECKED\n",
        ),
    ));
    let outcome = h.process(&reset("reset"));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failure_class, Some(FailureClass::ResetIncomplete));
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(outcome.exit_status, Some(0));
    assert!(!outcome.reset_verified);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "keadm reset exited with status 0, but the node is not clean: edgecore still runs (pid 4242); edgecore's unit is still there (/etc/systemd/system/edgecore.service); /etc/kubeedge still exists. Stop and remove what is left, then retry the reset."
        )
    );
    let transcript = transcript(&outcome);
    assert!(
        transcript.contains("reset not verified: edgecore still runs (pid 4242)"),
        "{transcript}"
    );
    assert!(transcript.contains("failure class: reset_incomplete"));
}

#[test]
fn a_check_that_cannot_finish_is_not_a_clean_reset() {
    // Nothing printed at all: not verified.
    let h = Harness::new(resetting(0, Reply::ok()));
    let outcome = h.process(&reset("reset edge"));
    assert_eq!(outcome.failure_class, Some(FailureClass::ResetIncomplete));
    // A check past its deadline: the node stopped answering.
    let h = Harness::new(resetting(0, Reply::timeout()));
    let outcome = h.process(&reset("reset edge"));
    assert_eq!(outcome.phase, Phase::TimedOut);
    assert_eq!(outcome.failure_class, Some(FailureClass::Unreachable));
    let error = outcome.error.unwrap();
    assert!(
        error.starts_with("keadm reset exited with status 0, but the check that the node is clean could not run on the node."),
        "{error}"
    );
}

#[test]
fn only_an_edge_reset_that_exited_with_0_is_checked() {
    for (keadm_cmd, status) in [
        ("reset edge --force", 1),
        ("reset cloud --force", 0),
        ("upgrade edge", 0),
    ] {
        let h = Harness::new(resetting(
            status,
            Reply::ok().printing("KB_LEFT path /etc/kubeedge\n"),
        ));
        let outcome = h.process(&reset(keadm_cmd));
        assert!(h.fake.execs_with(CHECK).is_empty(), "{keadm_cmd}");
        assert_ne!(outcome.failure_class, Some(FailureClass::ResetIncomplete));
        assert!(!outcome.reset_verified);
    }
    let fake = FakeTransport::new()
        .on(CHECK, Reply::ok())
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    assert_eq!(h.process(&node(vec![])).phase, Phase::Succeeded);
    assert!(h.fake.execs_with(CHECK).is_empty());
}

#[test]
fn the_check_runs_under_sudo_as_keadm_did_with_the_password_on_stdin() {
    let fake = FakeTransport::new()
        .on(CHECK, Reply::ok().printing("KB_RESET_CHECKED\n"))
        .on("./keadm reset", Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO password\n"));
    let h = Harness::new(fake);
    let mut plan = reset("reset edge --force");
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let check = h.exec_with(CHECK);
    assert!(
        check.command.starts_with("sudo -S -p '' sh -c "),
        "{}",
        check.command
    );
    assert_eq!(
        check.stdin.as_deref(),
        Some(format!("{PASSWORD}\n{STDIN_MARK}\n").as_bytes())
    );
}
