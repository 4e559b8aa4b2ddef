//! Issue 29, finding 8: every command the pipeline sends, as it assembles it from the
//! scripts of `remote` (the pre-flight probe in the prepare step or on its own, the
//! runtime probe, the tools probe, the one-channel exchange and its answer, each form of
//! keadm's arrival, the copyFrom uploads, the import, the image archives' removal, the
//! reset before the join, the free-space question, the kill, edgecore's log), passes
//! Debian's shellcheck for POSIX sh, as the login user and under sudo. Each scenario runs a node through the fake
//! transport with an upload dir and file names as odd as a config may hold, then checks
//! every command the fake received, and the script inside each `sudo sh -c`.

use super::images::{
    CONTAINERD, IMPORT, PACKAGE, PAUSE, REMOVE, imported, prepared_with_runtime_and,
};
use super::*;
use crate::plan::keadm_command;
use crate::remote::sent_forms::{CLEAN_UP_AFTER_ANY_STEP, LS_OF_PROC_FDS, assert_sent_posix_sh};
use crate::shell::shell_quote;

/// The upload dir of every scenario: a space and both quotes.
const ODD_DIR: &str = "/srv/edge nodes/it's \"kb\"";

/// `plan` with [`ODD_DIR`] as its upload dir and, for a staged keadm, its exec dir.
fn in_odd_dir(mut plan: NodePlan) -> NodePlan {
    plan.upload_dir = ODD_DIR.into();
    if plan.keadm == KeadmSource::Staged {
        plan.exec_dir = ODD_DIR.into();
        plan.command = keadm_command(ODD_DIR, &plan.keadm_cmd);
    }
    plan
}

/// Makes `plan` log in as `admin` under sudo.
fn under_sudo(mut plan: NodePlan) -> NodePlan {
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    plan
}

/// What a scenario set up: the harness, the node, and a pattern of each kind of command
/// it must have sent (so a scenario that stopped early fails rather than checks less).
struct Sent {
    h: Harness,
    plan: NodePlan,
    kinds: &'static [&'static str],
}

/// Root, keadm staged and sent as its xz copy behind the answer of the one-channel
/// exchange, the pre-flight probe riding in the prepare step.
fn xz_in_one_channel() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\n"))
        .on(
            sent::PREPARE,
            prepared("KB_TOOLS sha512sum gzip tar xz sha256sum openssl\nKB_PF_DONE\n"),
        );
    let mut h = Harness::new(fake);
    h.stage(&compressible_binary());
    h.preflight = PreflightMode::Warn;
    Sent {
        h,
        plan: in_odd_dir(staged_node(vec![])),
        kinds: &[sent::PROBE, sent::XZ, sent::RUN],
    }
}

/// Root and a node with zstd: keadm goes as its zstd copy behind the answer.
fn zstd_in_one_channel() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\n"))
        .on(
            sent::PREPARE,
            prepared("KB_TOOLS sha512sum gzip tar xz zstd sha256sum openssl\nKB_PF_DONE\n"),
        );
    let mut h = Harness::new(fake);
    h.stage(&compressible_binary());
    h.preflight = PreflightMode::Warn;
    Sent {
        h,
        plan: in_odd_dir(staged_node(vec![])),
        kinds: &[sent::PROBE, "KB_ZSTD_FAILED", sent::RUN],
    }
}

/// The xz copy under sudo that wants the password: the probe alone as the login user,
/// then the exchange inside the sudo probe.
fn xz_under_sudo_with_a_password() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\n"))
        .on(
            sent::PREPARE,
            prepared("KB_SUDO password\nKB_TOOLS xz sha256sum\n"),
        )
        .on(sent::PROBE, Reply::ok().printing("KB_PF_DONE\n"));
    let mut h = Harness::new(fake);
    h.stage(&compressible_binary());
    h.preflight = PreflightMode::Warn;
    Sent {
        h,
        plan: under_sudo(in_odd_dir(staged_node(vec![]))),
        kinds: &[sent::PROBE, "if sudo -n true", sent::XZ, sent::RUN],
    }
}

/// Root, the release tarball behind the answer, keadm's reset before the join.
fn tarball_after_a_reset() -> Sent {
    let reset = "keadm-batch: keadm reset edge --force exited with status 0\n";
    let fake = FakeTransport::new()
        .on(
            sent::RUN,
            Reply::ok().printing(&format!("KB_RECEIVED\n{reset}")),
        )
        .on(sent::PREPARE, prepared("KB_TOOLS sha512sum gzip tar\n"));
    let mut h = Harness::new(fake);
    h.stage(&compressible_binary());
    let mut plan = in_odd_dir(staged_node(vec![]));
    plan.first_step = Some(crate::plan::FirstStep {
        kind: crate::plan::FirstStepKind::Reset,
        command: format!("cd {} && ./keadm reset edge --force", shell_quote(ODD_DIR)),
    });
    Sent {
        h,
        plan,
        kinds: &[sent::TARBALL, "./keadm reset edge --force", sent::RUN],
    }
}

/// Passwordless sudo, copyFrom files with odd names sent each in its own channel, then
/// keadm as it is (the node has no tool to unpack it) in the run's channel; the strict
/// pre-flight probe in a round trip of its own, and --verify-remote.
fn copy_files_and_the_binary_under_sudo() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok().printing("KB_RECEIVED\n"))
        .on(sent::PREPARE, prepared("KB_SUDO nopasswd\nKB_TOOLS\n"))
        .on(sent::PROBE, Reply::ok().printing("KB_PF_DONE\n"))
        .on("cat > ", Reply::ok());
    let mut h = Harness::new(fake);
    h.stage(&compressible_binary());
    h.preflight = PreflightMode::Strict;
    h.verify_remote = true;
    let files = vec![
        h.file("ca it's.crt", b"a certificate\n"),
        h.file("pre \"run\".sh", b"#!/bin/sh\n"),
    ];
    Sent {
        h,
        plan: under_sudo(in_odd_dir(staged_node(files))),
        kinds: &[sent::PROBE, "cat > ", sent::RUN],
    }
}

/// Passwordless sudo with offline images: the pre-flight probe with the runtime probe
/// under sudo, the prepare step with the runtime and tools probes, the archive sent
/// checked by its sha256, its import, then the run.
fn images_under_sudo() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE, PAUSE]))
        .on(
            sent::PREPARE,
            prepared_with_runtime_and("KB_SUDO nopasswd\n", &[PAUSE]),
        )
        .on(
            sent::PROBE,
            Reply::ok().printing(&format!(
                "KB_PF_DONE\nKB_SUDO nopasswd\n{CONTAINERD}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\nKB_RT_IMAGE {PAUSE}\nKB_RT_LISTED\nKB_RT_DONE\n"
            )),
        )
        .on("cat > ", Reply::ok());
    let mut h = Harness::new(fake);
    // An archive reaches the node under a name the tool makes (image-<sha256>.tar), so
    // its own name, held to safe_name's set at staging, never appears in a script.
    h.images(&[(
        "package_1.23+b.tar",
        "kubeedge/installation-package:v1.23.1",
    )]);
    h.preflight = PreflightMode::Warn;
    Sent {
        h,
        plan: under_sudo(in_odd_dir(node(vec![]))),
        kinds: &[sent::PROBE, "cat > ", IMPORT, REMOVE, sent::RUN],
    }
}

/// Root, a copyFrom upload the node refuses: the free-space question after it.
fn a_refused_upload() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::FREE_SPACE, Reply::ok().printing("KB_FREE 1\n"))
        .on(sent::PREPARE, prepared(""))
        .on("cat > ", Reply::exit(1));
    let h = Harness::new(fake);
    let files = vec![h.file("big it's.bin", &[7u8; 5000]), h.file("f2", b"x")];
    Sent {
        h,
        plan: in_odd_dir(node(files)),
        kinds: &["cat > ", sent::FREE_SPACE],
    }
}

/// Passwordless sudo, a join past its deadline: the kill, then edgecore's log.
fn a_join_past_its_deadline_under_sudo() -> Sent {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::timeout())
        .on(sent::KILL, Reply::ok())
        .on(sent::EDGECORE_LOG, Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO nopasswd\n"));
    Sent {
        h: Harness::new(fake),
        plan: under_sudo(in_odd_dir(node(vec![]))),
        kinds: &[sent::RUN, sent::KILL, sent::EDGECORE_LOG],
    }
}

/// sudo with a password, a reset that exits with 0: the check that the node is clean.
fn a_reset_checked_under_sudo() -> Sent {
    let fake = FakeTransport::new()
        .on(
            "KB_RESET_CHECKED",
            Reply::ok().printing("KB_RESET_CHECKED\n"),
        )
        .on("./keadm reset", Reply::ok())
        .on(sent::PREPARE, prepared("KB_SUDO password\n"));
    let mut plan = under_sudo(in_odd_dir(node(vec![])));
    plan.keadm_cmd = "reset edge --force".into();
    plan.keadm_args = KeadmCommand::parse(&plan.keadm_cmd);
    plan.command = keadm_command("/opt/bin", &plan.keadm_cmd);
    Sent {
        h: Harness::new(fake),
        plan,
        kinds: &["./keadm reset", "KB_RESET_CHECKED"],
    }
}

/// A scenario's name, and what sets it up.
type Scenario = (&'static str, fn() -> Sent);

/// What shellcheck may find in `command`, for the parts of `remote` it holds, each for
/// the reason given there.
fn allowed_in(command: &str) -> Vec<(&'static str, &'static str)> {
    let mut allowed = Vec::new();
    if command.contains("exit 3; }") {
        allowed.push(CLEAN_UP_AFTER_ANY_STEP);
    }
    if command.contains("/proc/[0-9]*/fd") {
        allowed.push(LS_OF_PROC_FDS);
    }
    allowed
}

#[test]
fn every_command_the_pipeline_sends_passes_shellcheck() {
    let scenarios: [Scenario; 9] = [
        ("the zstd copy in one channel", zstd_in_one_channel),
        ("the xz copy in one channel", xz_in_one_channel),
        (
            "the xz copy under sudo with a password",
            xz_under_sudo_with_a_password,
        ),
        ("the tarball after a reset", tarball_after_a_reset),
        (
            "copyFrom files and the binary under sudo",
            copy_files_and_the_binary_under_sudo,
        ),
        ("offline images under sudo", images_under_sudo),
        ("a refused upload", a_refused_upload),
        (
            "a join past its deadline under sudo",
            a_join_past_its_deadline_under_sudo,
        ),
        ("a reset checked under sudo", a_reset_checked_under_sudo),
    ];
    for (scenario, set_up) in scenarios {
        let Sent { h, plan, kinds } = set_up();
        let outcome = h.process(&plan);
        let execs = h.execs();
        for kind in kinds {
            assert!(
                execs.iter().any(|e| e.command.contains(kind)),
                "{scenario}: nothing with {kind:?} was sent ({:?}): {execs:#?}",
                outcome.error
            );
        }
        for (n, exec) in execs.iter().enumerate() {
            assert_sent_posix_sh(
                &format!("{scenario}, command #{}", n + 1),
                &exec.command,
                &allowed_in(&exec.command),
            );
        }
    }
}
