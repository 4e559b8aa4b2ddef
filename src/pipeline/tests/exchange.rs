//! The one-channel exchange: the prepare script, the control host's answer and the run
//! in one exec channel where the node allows it, and the separate channels where not.

use super::*;
use crate::config::AuthSpec;
use crate::diagnosis::FailureClass;
use crate::outcome::Phase;
use crate::remote::FACTS_END;

/// The exec channels opened: every exec but the answers run in an earlier one's channel.
fn channels(h: &Harness) -> usize {
    h.execs().iter().filter(|e| !e.same_channel).count()
}

#[test]
fn a_node_without_sudo_images_or_copy_files_costs_one_channel() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("keadm says hello\n"))
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.exit_status, Some(0));

    let execs = h.execs();
    assert_eq!(execs.len(), 2, "{execs:#?}");
    assert_eq!(channels(&h), 1, "{execs:#?}");
    let (prepare, run) = (&execs[0], &execs[1]);
    assert!(prepare.command.contains(sent::PREPARE) && prepare.command.contains(FACTS_END));
    // keadm's command line (and its token) goes in the answer on stdin, not in the exec.
    assert!(!prepare.command.contains(JOIN), "{}", prepare.command);
    assert!(run.same_channel && run.command.ends_with(&format!("{JOIN}\n")));
    assert_eq!(run.stdin, None, "nothing to upload: keadm is on the node");

    let text = transcript(&outcome);
    assert!(
        text.contains("prepared /tmp/kb (as the login user)"),
        "{text}"
    );
    assert!(
        text.contains("one exec channel: the run's script follows the node's facts"),
        "{text}"
    );
    assert!(text.contains("keadm says hello"), "{text}");
    assert!(!text.contains(FACTS_END), "{text}");
    assert!(outcome.steps.prepare.is_some() && outcome.steps.run.is_some());
}

#[test]
fn the_staged_binary_rides_behind_the_answer() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\nkeadm ran\n"))
        .on(sent::PREPARE, prepared("KB_TOOLS gzip\n"));
    let mut h = Harness::new(fake);
    let binary = b"#!/bin/sh\necho keadm\n".to_vec();
    h.stage(&binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.bytes_uploaded, binary.len() as u64);
    assert_eq!(channels(&h), 1, "{:#?}", h.execs());
    let run = h.exec_with(sent::RUN);
    assert!(run.same_channel);
    assert_eq!(run.stdin, Some(binary));
    assert!(
        run.command
            .starts_with(&format!("( KB_DIR=/tmp/kb\nKB_TMP={}\n", tmp("keadm")))
            && run.command.contains("KB_UNPACK=''\n"),
        "{}",
        run.command
    );
    let text = transcript(&outcome);
    assert!(
        text.contains("uploaded keadm (21 bytes, mode 0755) in the run's channel"),
        "{text}"
    );
    // The bound on the node's work after the last byte, which bench/shaped.sh reads.
    assert!(
        text.contains("node-side time after the last byte: at most "),
        "{text}"
    );
    assert!(
        !text.contains("KB_RECEIVED") && text.contains("keadm ran"),
        "{text}"
    );
}

#[test]
fn a_binary_already_on_the_node_is_not_sent_and_keadm_runs_in_the_same_channel() {
    let binary = b"#!/bin/sh\necho keadm\n".to_vec();
    let sha256 = sha256_hex(&binary);
    // keadm is the first (and only) file the prepare script asks about.
    let fake = FakeTransport::new().on(sent::RUN, Reply::ok()).on(
        sent::PREPARE,
        prepared(&format!("KB_FILE 0 {} {sha256}\n", binary.len())),
    );
    let mut h = Harness::new(fake);
    h.stage(&binary);
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!((outcome.bytes_uploaded, outcome.uploads_skipped), (0, 1));
    assert_eq!(channels(&h), 1);
    let run = h.exec_with(sent::RUN);
    assert_eq!(run.stdin, None);
    assert!(!run.command.contains("mv -f"), "{}", run.command);
}

#[test]
fn a_node_whose_arch_has_no_binary_fails_after_its_facts_and_nothing_runs() {
    let fake = FakeTransport::new().on(sent::RUN, Reply::ok()).on(
        sent::PREPARE,
        Reply::ok().printing("KB_ARCH sparc64\nKB_DIR_OK\n"),
    );
    let mut h = Harness::new(fake);
    h.stage(b"keadm");
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(outcome.failure_class, Some(FailureClass::Arch));
    assert_eq!(h.execs().len(), 1, "{:#?}", h.execs());
}

#[test]
fn sudo_nodes_cost_one_channel_and_get_the_password_only_when_sudo_asks() {
    for sudo in ["nopasswd", "password"] {
        let fake = FakeTransport::new()
            .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\n"))
            .on(sent::PREPARE, prepared(&format!("KB_SUDO {sudo}\n")));
        let mut h = Harness::new(fake);
        let binary = b"#!/bin/sh\necho keadm\n".to_vec();
        h.stage(&binary);
        let mut plan = staged_node(vec![]);
        plan.sudo = true;
        plan.ssh.username = "admin".into();
        // The fake plays sudo's reading of stdin: a password line where none was asked
        // for would be read as the answer and cut it, and one missing where it was asked
        // for would leave the answer unread.
        let outcome = h.process(&plan);
        assert_eq!(
            outcome.phase,
            Phase::Succeeded,
            "{sudo}: {:?}",
            outcome.error
        );
        let execs = h.execs();
        assert_eq!(channels(&h), 1, "{sudo}: {execs:#?}");
        assert!(
            execs[0].command.contains("\nif sudo -n true") && execs[0].command.contains(FACTS_END),
            "{}",
            execs[0].command
        );
        assert!(
            execs.iter().all(|e| !e.command.contains(PASSWORD)),
            "{execs:#?}"
        );
        let run = h.exec_with(sent::RUN);
        assert!(run.same_channel);
        // The answer runs inside the probe's `sudo sh -c`: it is not wrapped again.
        assert!(!run.command.contains("sudo"), "{}", run.command);
        assert_eq!(run.stdin, Some(binary));
        let text = transcript(&outcome);
        let how = match sudo {
            "nopasswd" => "under passwordless sudo",
            _ => "under sudo with the login password",
        };
        assert!(
            text.contains(&format!("prepared /tmp/kb ({how})")),
            "{text}"
        );
    }
}

#[test]
fn sudo_that_wants_a_password_a_key_login_lacks_fails_without_waiting_for_one() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO password\n"));
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    plan.sudo = true;
    plan.ssh.auth = AuthSpec::Agent;
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failure_class, Some(FailureClass::Sudo));
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap()
            .contains("needs a password"),
        "{:?}",
        outcome.error
    );
    assert_eq!(
        h.execs().len(),
        1,
        "nothing ran after the facts: {:#?}",
        h.execs()
    );
}

#[test]
fn copy_files_keep_their_separate_channels() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![h.file("f1", b"one")]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert!(h.fake.execs_with(FACTS_END).is_empty(), "{:#?}", h.execs());
    assert_eq!(h.execs().len(), 2, "prepare and run: {:#?}", h.execs());
}

#[test]
fn a_connection_lost_under_the_upload_is_an_upload_failure() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::connection_lost().reading_at_most(4))
        .on(sent::PREPARE, prepared(""));
    let mut h = Harness::new(fake);
    h.stage(b"#!/bin/sh\necho keadm\n");
    let outcome = h.process(&staged_node(vec![]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Uploading));
    assert_eq!(outcome.failure_class, Some(FailureClass::Upload));
    assert!(
        outcome
            .error
            .as_deref()
            .unwrap()
            .starts_with("Cannot upload the file keadm."),
        "{:?}",
        outcome.error
    );
}
