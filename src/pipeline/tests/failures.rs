//! How a node fails: the run's exits 201 and 125, a full disk, keadm's own failure line,
//! the deadline and the abort (each with the kill), a broken connection, the strict
//! pre-flight skip, sudo that needs a password nobody has, and an unusable upload dir.

use super::*;
use crate::diagnosis::FailureClass;
use crate::outcome::Phase;

#[test]
fn exit_201_is_an_upload_failure_of_the_deferred_file() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::exit(201))
        .on(sent::FREE_SPACE, Reply::ok().printing("KB_FREE 999999\n"))
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", &[7u8; 5000]);
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Uploading));
    assert_eq!(
        outcome.error.as_deref(),
        Some("Cannot upload the file f1: the node could not write it.")
    );
    assert_eq!((outcome.exit_status, outcome.bytes_uploaded), (None, 0));
    assert_eq!(outcome.failure_class, Some(FailureClass::Upload));
    assert_eq!(h.exec_with(sent::RUN).stdin, Some(vec![7u8; 5000]));
    // The partial file is removed while asking for the free space.
    let cleanup = h.exec_with(sent::FREE_SPACE);
    assert!(
        cleanup.command.contains(&format!("KB_TMP={}\n", tmp("f1")))
            && cleanup.command.contains("rm -f -- \"$KB_TMP\""),
        "{cleanup:?}"
    );
}

#[test]
fn exit_201_on_a_full_disk_says_how_much_room_is_missing() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::exit(201))
        .on(sent::FREE_SPACE, Reply::ok().printing("KB_FREE 1\n"))
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", &[7u8; 5000]);
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.failed_in, Some(Phase::Uploading));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Cannot upload the file f1: no space left on device in /tmp/kb on the node (5 KiB needed, 1 KiB free). \
             Free some space there, or set remoteDir to a directory on a larger filesystem."
        )
    );
    // The node's own answer stays in the transcript.
    assert!(transcript(&outcome).contains("the node could not write it"));
}

#[test]
fn a_plain_upload_refused_by_the_node_names_its_answer_or_the_missing_space() {
    for (free, expected) in [
        (
            "KB_FREE 999999",
            "Cannot upload the file f1: the node answered exit status 1 (cat: write error: No space left on device).",
        ),
        (
            "KB_FREE 0",
            "Cannot upload the file f1: no space left on device in /tmp/kb on the node (1 KiB needed, 0 KiB free). \
             Free some space there, or set remoteDir to a directory on a larger filesystem.",
        ),
    ] {
        let fake = FakeTransport::new()
            .on(sent::RUN, Reply::ok())
            .on(sent::FREE_SPACE, Reply::ok().printing(free))
            .on(sent::PREPARE, prepared(""))
            .on(
                &tmp("f1"),
                Reply::exit(1).printing("cat: write error: No space left on device\n"),
            );
        let h = Harness::new(fake);
        let files = vec![h.file("f1", b"first"), h.file("f2", b"second")];
        let outcome = h.process(&node(files));
        assert_eq!(outcome.failed_in, Some(Phase::Uploading));
        assert_eq!(outcome.error.as_deref(), Some(expected));
        assert!(h.fake.execs_with(sent::RUN).is_empty(), "keadm never ran");
    }
}

#[test]
fn exit_125_from_moving_the_files_into_place_is_a_keadm_failure_line() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::exit(125))
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", b"data");
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(outcome.exit_status, Some(125));
    let error = outcome.error.unwrap();
    assert!(
        error.starts_with(&format!(
            "failed to execute keadm command {JOIN}: Process exited with status 125"
        )),
        "{error}"
    );
    // The file itself arrived: the move failed after it.
    assert_eq!(outcome.bytes_uploaded, 4);
    let run = h.exec_with(sent::RUN);
    assert!(
        run.command.contains(&format!("set -- {} f1 ", tmp("f1")))
            && run.command.contains("KB_EXIT=125\n"),
        "{}",
        run.command
    );
}

#[test]
fn keadms_failure_keeps_keadms_own_line_and_its_last_output() {
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::exit(3).printing("Error: EdgeCore is already running on this node\n"),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    // keadm's line exactly, ending with the status (batch_process_log.txt); the last
    // output beside it, for the console and summary.json.
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            format!("failed to execute keadm command {JOIN}: Process exited with status 3")
                .as_str()
        )
    );
    assert!(outcome.log_line().ends_with("Process exited with status 3"));
    assert_eq!(
        outcome.last_output.as_deref(),
        Some("Error: EdgeCore is already running on this node")
    );
    assert_eq!(outcome.exit_status, Some(3));
    assert_eq!(outcome.failure_class, Some(FailureClass::AlreadyJoined));
}

#[test]
fn the_deadline_kills_the_command_and_reads_edgecores_log_for_a_join() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::timeout())
        .on(sent::KILL, Reply::ok().printing("KB_STOP exited\n"))
        .on(
            sent::EDGECORE_LOG,
            Reply::ok().printing("edgecore: waiting for the certificate\n"),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::TimedOut);
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(
        outcome.error.as_deref(),
        Some("The keadm command ran past its 7 s deadline and was stopped on the node (SIGTERM).")
    );
    let commands: Vec<String> = h.execs().into_iter().map(|e| e.command).collect();
    assert_eq!(commands.len(), 4, "{commands:#?}");
    assert!(commands[1].contains(sent::RUN));
    // The transport leaves keadm to the stop, which gives it SIGTERM and a grace period.
    assert!(h.exec_with(sent::RUN).left_at_deadline);
    assert!(
        commands[2].contains("kill -s TERM") && commands[2].contains("/tmp/kb/.keadm-batch.0.pgid"),
        "{}",
        commands[2]
    );
    assert!(!h.exec_with(sent::EDGECORE_LOG).left_at_deadline);
    assert!(commands[3].contains(sent::EDGECORE_LOG));
    assert!(
        !h.exec_with(sent::KILL).abort_set,
        "the kill runs without the abort check"
    );
    assert!(transcript(&outcome).contains("edgecore: waiting for the certificate"));
    assert!(transcript(&outcome).contains(
        "the deadline passed: sent SIGTERM to the command's process group; it exited within the grace period"
    ));
    assert!(outcome.failure_class.is_some());

    // Where the node had no record of the group (the script had not reached keadm), what
    // the connection runs there is killed at once, and the message says killed.
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::timeout())
        .on(sent::KILL, Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(
        outcome.error.as_deref(),
        Some("The keadm command ran past its 7 s deadline and was killed on the node.")
    );
    let killed: Vec<String> = h
        .fake
        .execs_with(sent::KILL)
        .into_iter()
        .map(|e| e.command)
        .collect();
    assert_eq!(killed.len(), 2, "{killed:#?}");
    assert_eq!(killed[1], *crate::remote::KILL_SIBLINGS);
}

#[test]
fn a_kill_that_cannot_be_confirmed_is_said_and_a_reset_reads_no_edgecore_log() {
    let fake = FakeTransport::new()
        .on("./keadm reset", Reply::timeout())
        .on(sent::KILL, Reply::connection_lost())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let mut plan = node(vec![]);
    plan.keadm_cmd = "reset --force".into();
    plan.keadm_args = KeadmCommand::parse(&plan.keadm_cmd);
    plan.command = "cd /opt/bin && yes | ./keadm reset --force".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::TimedOut);
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "The keadm command ran past its 7 s deadline and could not be confirmed killed on the node."
        )
    );
    assert!(h.fake.execs_with(sent::EDGECORE_LOG).is_empty());
}

#[test]
fn the_operators_abort_interrupts_the_node_and_kills_the_command() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::aborted())
        .on(sent::KILL, Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Interrupted);
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(
        outcome.error.as_deref(),
        Some("Cancelled by the operator; the keadm command was killed on the node.")
    );
    assert!(h.exec_with(sent::RUN).abort_set);
    assert!(!h.exec_with(sent::KILL).abort_set);
    assert!(h.fake.execs_with(sent::EDGECORE_LOG).is_empty());
}

#[test]
fn a_connection_lost_while_the_deferred_file_goes_is_an_upload_failure() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::connection_lost().reading_at_most(10))
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", &[1u8; 100]);
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Uploading));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Cannot upload the file f1. The SSH connection to the node at 10.0.0.9:22 failed \
             while running the command: connection reset by peer."
        )
    );
    assert_eq!(outcome.failure_class, Some(FailureClass::Upload));

    // All of it went out, but the node never said it had it (an xz copy is read whole
    // long before the node has unpacked it): still an upload failure.
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::connection_lost())
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", &[1u8; 100]);
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.failed_in, Some(Phase::Uploading));
    assert_eq!(outcome.failure_class, Some(FailureClass::Upload));
}

#[test]
fn a_connection_lost_after_the_node_had_the_file_is_a_run_failure() {
    // The run's script says when the deferred file is on the node, before keadm runs.
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::connection_lost().printing("KB_RECEIVED\n"),
        )
        .on(sent::PREPARE, prepared(""));
    let h = Harness::new(fake);
    let f1 = h.file("f1", &[1u8; 100]);
    let outcome = h.process(&node(vec![f1]));
    assert_eq!(outcome.failed_in, Some(Phase::Running));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            format!(
                "failed to execute keadm command {JOIN}: The SSH connection to the node at \
                 10.0.0.9:22 failed while running the command: connection reset by peer."
            )
            .as_str()
        )
    );
    // keadm may have run, so its output decides, not the lost connection.
    assert_eq!(outcome.failure_class, Some(FailureClass::Unknown));
}

#[test]
fn strict_preflight_skips_the_node_before_anything_changes() {
    let fake = FakeTransport::new()
        .on(
            sent::PROBE,
            Reply::ok().printing(
                "KB_PF edgecore_running pid 12\nKB_PF bash_missing no bash\nKB_PF_DONE\n",
            ),
        )
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let mut h = Harness::new(fake);
    h.preflight = PreflightMode::Strict;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Skipped);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Skipped by pre-flight: edgecore is already running on this node, so keadm join would stop at its \
             first check (pid 12) (and 1 more finding(s)). Leave the node out if it is joined already, or reset \
             it first with `keadm reset edge --force` (--reset-first)."
        )
    );
    let ids: Vec<&str> = outcome.preflight.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["edgecore_running", "bash_missing"]);
    assert_eq!(outcome.failure_class, None, "a skip is no failure");
    assert_eq!(h.execs().len(), 1, "only the read-only probe ran");
}

#[test]
fn warning_preflight_records_findings_and_goes_on_in_the_prepare_round_trip() {
    // One exec probes and prepares: the probe first, in a subshell of its own.
    let fake = FakeTransport::new().on(sent::RUN, Reply::ok()).on(
        sent::PROBE,
        prepared("KB_PF bash_missing no bash\nKB_PF_DONE\n"),
    );
    let mut h = Harness::new(fake);
    h.preflight = PreflightMode::Warn;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.preflight.len(), 1);
    assert_eq!(h.execs().len(), 2, "probe and prepare, then the run");
    let first = h.exec_with(sent::PROBE).command;
    assert!(first.starts_with("(\nUP=/tmp/kb\n"), "{first}");
    assert!(
        first.find(sent::PROBE) < first.find(sent::PREPARE),
        "the read-only probe runs before the upload dir is made: {first}"
    );
}

#[test]
fn warning_preflight_under_sudo_keeps_its_own_round_trip() {
    // prepare runs under sudo, the probe as the login user.
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(
            sent::PROBE,
            Reply::ok().printing("KB_PF bash_missing no bash\nKB_PF_DONE\n"),
        )
        .on(sent::PREPARE, prepared("KB_SUDO nopasswd\n"));
    let mut h = Harness::new(fake);
    h.preflight = PreflightMode::Warn;
    let mut plan = node(vec![]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(outcome.preflight.len(), 1);
    assert_eq!(h.execs().len(), 3, "probe, prepare, run");
    assert!(!h.exec_with(sent::PROBE).command.contains(sent::PREPARE));
}

#[test]
fn sudo_that_needs_a_password_under_key_auth_is_a_clear_error() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO password\n"));
    let h = Harness::new(fake);
    let mut plan = node(vec![h.file("f1", b"x")]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    plan.ssh.auth = AuthSpec::PrivateKey {
        path: "/keys/id".into(),
        passphrase: None,
    };
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "Sudo on node edge-0 needs a password, but admin logs in without one. \
             Give admin passwordless sudo on the node, or log in with a password."
        )
    );
    assert_eq!(outcome.failure_class, Some(FailureClass::Sudo));
    assert_eq!(h.execs().len(), 1, "nothing uploaded, nothing run");
    assert_eq!(
        h.exec_with(sent::PREPARE).stdin,
        None,
        "no password to send"
    );
}

#[test]
fn an_unusable_upload_dir_is_named_with_the_nodes_reason() {
    let fake = FakeTransport::new().on(
        sent::PREPARE,
        Reply::ok().printing("KB_ARCH x86_64\nKB_BAD /tmp/kb is a symbolic link; remove it or choose another remoteDir\n"),
    );
    let h = Harness::new(fake);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(
        outcome.error.as_deref(),
        Some(
            "The upload directory /tmp/kb cannot be used: /tmp/kb is a symbolic link; remove it or choose another remoteDir."
        )
    );
    assert_eq!(outcome.failure_class, Some(FailureClass::Upload));
}
