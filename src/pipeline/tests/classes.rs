//! The failure class of keadm-batch's own failures, from the typed transport error or
//! the step that failed (`unreachable`, `auth`, `host_key`, `arch`; failures.rs checks
//! `sudo`, `upload` and keadm's output deciding once keadm ran); and `--reset-first`'s
//! reset status.

use super::*;
use crate::diagnosis::FailureClass;
use crate::outcome::Phase;
use crate::transport::{Endpoint, TransportError};

fn healthy() -> FakeTransport {
    FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""))
}

/// The outcome of a node whose every connect fails with `make`'s error, after checking
/// that its transcript names the class.
fn failing_connect(
    make: impl Fn(&Endpoint) -> TransportError + Send + Clone + 'static,
) -> NodeOutcome {
    let h = Harness::new(healthy().failing_connects(3, make));
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.failed_in, Some(Phase::Connecting));
    let class = outcome.failure_class.expect("a class");
    assert!(
        transcript(&outcome).contains(&format!("failure class: {class}")),
        "the transcript names the class"
    );
    outcome
}

#[test]
fn connect_failures_are_classed_from_the_transport_error() {
    let refused = failing_connect(|e| TransportError::Refused {
        endpoint: e.clone(),
    });
    assert_eq!(refused.failure_class, Some(FailureClass::Unreachable));
    let silent = failing_connect(|e| TransportError::ConnectTimeout {
        endpoint: e.clone(),
        phase: "connecting",
        after: Duration::from_secs(1),
    });
    assert_eq!(silent.failure_class, Some(FailureClass::Unreachable));
    let rejected = failing_connect(|e| TransportError::AuthRejected {
        endpoint: e.clone(),
        user: "root".into(),
        method: "the password".into(),
    });
    assert_eq!(rejected.failure_class, Some(FailureClass::Auth));
    let changed = failing_connect(|e| TransportError::HostKeyChanged {
        endpoint: e.clone(),
        host_entry: "10.0.0.9".into(),
        fingerprint: "SHA256:new".into(),
        known_hosts: "/kh".into(),
    });
    assert_eq!(changed.failure_class, Some(FailureClass::HostKey));
    // A jump host's failure is classed by what went wrong there.
    let jump = failing_connect(|e| TransportError::Jump {
        endpoint: e.clone(),
        jump: Endpoint::new("10.0.0.1", 22),
        source: Box::new(TransportError::AuthRejected {
            endpoint: Endpoint::new("10.0.0.1", 22),
            user: "jump".into(),
            method: "the key".into(),
        }),
    });
    assert_eq!(jump.failure_class, Some(FailureClass::Auth));
}

#[test]
fn a_command_that_is_not_a_join_gets_the_tools_own_class_too() {
    let h = Harness::new(healthy().failing_connects(3, |e| TransportError::Refused {
        endpoint: e.clone(),
    }));
    let mut plan = node(vec![]);
    plan.keadm_cmd = "reset edge".into();
    plan.keadm_args = crate::keadm_cmd::KeadmCommand::parse("reset edge");
    let outcome = h.process(&plan);
    assert_eq!(outcome.failure_class, Some(FailureClass::Unreachable));
}

#[test]
fn a_prepare_step_past_its_deadline_is_unreachable() {
    let fake = FakeTransport::new().on(sent::PREPARE, Reply::timeout());
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::TimedOut);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(outcome.failure_class, Some(FailureClass::Unreachable));
}

#[test]
fn an_arch_without_a_keadm_build_is_arch() {
    let fake = FakeTransport::new().on(
        sent::PREPARE,
        Reply::ok().printing("KB_ARCH armv6l\nKB_DIR_OK\n"),
    );
    let h = Harness::new(fake);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(outcome.failure_class, Some(FailureClass::Arch));
}

// The sudo, upload-dir, upload and run-failure cases assert their classes where
// failures.rs sets them up.

/// The line the run script prints after `--reset-first`'s reset.
fn reset_status(status: i32) -> String {
    format!("keadm-batch: keadm reset edge --force exited with status {status}\n")
}

fn reset_first(plan: &mut NodePlan) {
    plan.first_step = Some(crate::plan::FirstStep {
        kind: crate::plan::FirstStepKind::Reset,
        command: "cd /opt/bin && ./keadm reset edge --force".into(),
    });
}

#[test]
fn reset_first_runs_the_reset_then_the_join_and_records_its_status() {
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::ok().printing(&format!("{}joined\n", reset_status(0))),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    reset_first(&mut plan);
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.reset_exit_status, Some(0));
    let run = h.exec_with(sent::RUN).command;
    let reset = run.find("./keadm reset edge --force").expect("the reset");
    let join = run.find("./keadm join").expect("the join");
    assert!(reset < join, "{run}");
    assert!(run.contains("KB_FIRST_FAILED=202\n"), "{run}");
    assert!(transcript(&outcome).contains(&reset_status(0)));
}

#[test]
fn a_failed_reset_stops_before_the_join_with_keadms_line_for_the_reset() {
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::exit(202).printing(&format!(
                "Error: failed to stop edgecore\n{}",
                reset_status(4)
            )),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    reset_first(&mut plan);
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(outcome.reset_exit_status, Some(4));
    assert_eq!(outcome.exit_status, None, "the join never ran");
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "failed to execute keadm command cd /opt/bin && ./keadm reset edge --force: Process exited with status 4"
        )
    );
    assert_eq!(
        outcome.last_output.as_deref(),
        Some("Error: failed to stop edgecore")
    );
    assert!(
        transcript(&outcome)
            .contains("keadm reset edge --force exited with status 4, so the join was not run"),
        "{}",
        transcript(&outcome)
    );
}

#[test]
fn a_join_that_fails_after_a_good_reset_is_keadms_line_for_the_join() {
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::exit(1).printing(&format!("{}Error: token is expired\n", reset_status(0))),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    reset_first(&mut plan);
    let outcome = h.process(&plan);
    assert_eq!(outcome.reset_exit_status, Some(0));
    assert_eq!(outcome.exit_status, Some(1));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            format!("failed to execute keadm command {JOIN}: Process exited with status 1")
                .as_str()
        )
    );
    assert_eq!(outcome.failure_class, Some(FailureClass::TokenInvalid));
}
