//! Offline images: uploaded and imported when the runtime lacks them, neither when it has
//! them, a runtime that cannot take them refused before anything is sent, a failed import
//! stops the node before keadm, and the pre-flight image check.

use super::*;
use crate::diagnosis::{FailureClass, FindingId};
use crate::outcome::Phase;
use crate::stage::ImageSources;

pub(super) const PACKAGE: &str = "docker.io/kubeedge/installation-package:v1.23.1";
pub(super) const PAUSE: &str = "registry.k8s.io/pause:3.6";
/// The import of the offline images.
pub(super) const IMPORT: &str = "images import";
/// The removal of the image archives once their images are in the runtime.
pub(super) const REMOVE: &str = "KB_RM_DONE";

impl Harness {
    /// Offline images in the offline-directory layout: for amd64, one docker-archive per
    /// entry, named `file` and holding the image `tag`. Returns each archive's size.
    pub(super) fn images(&mut self, archives: &[(&str, &str)]) -> Vec<u64> {
        let root = self.dir.path().join("kit");
        let images_dir = root.join("amd64/images");
        std::fs::create_dir_all(&images_dir).unwrap();
        let mut sizes = Vec::new();
        for (file, tag) in archives {
            let bytes = docker_archive(tag);
            sizes.push(bytes.len() as u64);
            std::fs::write(images_dir.join(file), bytes).unwrap();
        }
        self.offline_images = OfflineImages::list(&ImageSources::Layout { dir: root }).unwrap();
        sizes
    }
}

/// A docker-archive that holds only the manifest naming `tag`.
fn docker_archive(tag: &str) -> Vec<u8> {
    let manifest = format!(r#"[{{"Config":"c.json","RepoTags":["{tag}"],"Layers":[]}}]"#);
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_ustar();
    header.set_size(manifest.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, "manifest.json", manifest.as_bytes())
        .unwrap();
    builder.into_inner().unwrap()
}

/// The name the installation-package's archive (`package.tar`) has on the node: the one
/// keadm-batch makes from its sha256.
fn package() -> String {
    use sha2::Digest;
    let bytes = docker_archive("kubeedge/installation-package:v1.23.1");
    format!("image-{}.tar", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The runtime probe's lines that tell containerd at keadm's default socket.
pub(super) const CONTAINERD: &str = "KB_RT_SOCKET /run/containerd/containerd.sock\nKB_RT_KIND containerd\nKB_RT_TOLD ctr version answers on it\n";

/// The prepare step's answer with the runtime probe's lines: containerd's CLI there, and
/// these images listed; the node hashes with OpenSSL.
fn prepared_with_runtime(images: &[&str]) -> Reply {
    prepared_with_runtime_and("", images)
}

/// The same, after the prepare step's `extra` lines (sidecars, tools: a `KB_TOOLS` line
/// there replaces the OpenSSL one).
pub(super) fn prepared_with_runtime_and(extra: &str, images: &[&str]) -> Reply {
    let listed: String = images
        .iter()
        .map(|i| format!("KB_RT_IMAGE {i}\n"))
        .collect();
    prepared(&format!(
        "KB_TOOLS openssl\n{extra}{CONTAINERD}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\n{listed}KB_RT_LISTED\nKB_RT_SANDBOX {PAUSE}\nKB_RT_DONE\n"
    ))
}

/// The import script's answer: each archive imported, then these images listed.
pub(super) fn imported(count: usize, images: &[&str]) -> Reply {
    let mut text = String::new();
    for i in 0..count {
        text.push_str(&format!("unpacking image {i}...done\nKB_IMPORTED {i}\n"));
    }
    for image in images {
        text.push_str(&format!("KB_RT_IMAGE {image}\n"));
    }
    text.push_str("KB_RT_LISTED\nKB_RT_DONE\n");
    Reply::ok().printing(&text)
}

#[test]
fn archives_the_runtime_lacks_are_uploaded_and_imported_before_keadm() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE, PAUSE]))
        .on(sent::PREPARE, prepared_with_runtime(&[PAUSE]))
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    let sizes = h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!(
        (outcome.bytes_uploaded, outcome.uploads_skipped),
        (sizes[0], 0)
    );
    assert_eq!(outcome.arch, Some(crate::arch::Arch::Amd64));

    let execs = h.execs();
    assert_eq!(
        execs.len(),
        5,
        "prepare, archive, import, removal, run: {execs:#?}"
    );
    // The prepare step asks for the archive's sidecar and the runtime's images at once.
    assert!(
        execs[0]
            .command
            .contains(&format!("set -- {}\n", package())),
        "{}",
        execs[0].command
    );
    assert!(
        execs[0]
            .command
            .contains("KB_SOCK=/run/containerd/containerd.sock\n")
            && execs[0].command.contains(
                "ctr --connect-timeout 10s --address \"$KB_SOCK\" -n k8s.io images ls -q"
            ),
        "{}",
        execs[0].command
    );
    assert!(
        execs[1]
            .command
            .contains(&format!("KB_TMP={}\n", tmp(&package())))
    );
    assert!(
        execs[1].command.contains("KB_MODE=600\n"),
        "{}",
        execs[1].command
    );
    let import = &execs[2].command;
    assert!(
        import.contains(&format!("set -- {} {} ", tmp(&package()), package())),
        "{import}"
    );
    assert!(
        import.contains(&format!(
            "KB_RUNTIME=containerd\nKB_SOCK=/run/containerd/containerd.sock\nset -- {} 0\n",
            package()
        )) && import.contains(
            "ctr --connect-timeout 10s --address \"$KB_SOCK\" -n k8s.io images import \"$kb_f\""
        ),
        "{import}"
    );
    assert_eq!(execs[2].stdin, None);
    assert!(execs[3].command.contains(REMOVE), "{}", execs[3].command);
    assert!(execs[4].command.ends_with(JOIN));
    let text = transcript(&outcome);
    assert!(text.contains("unpacking image 0...done"), "{text}");
    assert!(
        text.contains(&format!(
            "imported package.tar ({}) into containerd (/run/containerd/containerd.sock): {PACKAGE}",
            package()
        )),
        "{text}"
    );
}

#[test]
fn archives_whose_images_the_runtime_has_are_neither_sent_nor_imported() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(sent::PREPARE, prepared_with_runtime(&[PACKAGE, PAUSE]));
    let mut h = Harness::new(fake);
    h.images(&[
        ("package.tar", "kubeedge/installation-package:v1.23.1"),
        ("pause.tar", PAUSE),
    ]);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!((outcome.bytes_uploaded, outcome.uploads_skipped), (0, 2));
    assert_eq!(h.execs().len(), 2, "prepare and run only: {:#?}", h.execs());
    assert!(
        transcript(&outcome)
            .contains("already has registry.k8s.io/pause:3.6, so the image archive"),
        "{}",
        transcript(&outcome)
    );
}

#[test]
fn an_archive_on_the_node_already_is_imported_without_being_sent_again() {
    let mut h = Harness::new(FakeTransport::new());
    let sizes = h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let archive = &h
        .offline_images
        .as_ref()
        .unwrap()
        .for_arch(crate::arch::Arch::Amd64)[0];
    // Position 0 of the prepare step's names: the node has the identical file.
    let sidecar = format!("KB_FILE 0 {} {}\n", sizes[0], archive.sha256);
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE]))
        .on(sent::PREPARE, prepared_with_runtime_and(&sidecar, &[]));
    h.fake = fake;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert_eq!((outcome.bytes_uploaded, outcome.uploads_skipped), (0, 1));
    let import = h.exec_with(IMPORT).command;
    assert!(
        !import.contains("mv -f"),
        "nothing to move into place: {import}"
    );
}

#[test]
fn a_runtime_that_cannot_take_the_images_fails_the_node_before_anything_is_sent() {
    let frakti = "KB_RT_SOCKET /run/frakti.sock\nKB_RT_KIND unknown\nKB_RT_TOLD crictl is not installed; ctr is not installed; no process this probe can see holds the socket\n";
    let crio = "KB_RT_SOCKET /var/run/crio/crio.sock\nKB_RT_KIND crio\nKB_RT_TOLD its socket is held by crio (pid 7)\n";
    for (command, prepare_extra, expected) in [
        (
            "join --cloudcore-ipport=10.0.0.1:10000 --remote-runtime-endpoint=unix:///run/frakti.sock",
            format!("{frakti}KB_RT_NO_TOOL\nKB_RT_UNLISTED\nKB_RT_DONE\n"),
            "keadm-batch cannot tell which container runtime serves /run/frakti.sock (crictl is not installed; ctr is not installed; no process this probe can see holds the socket), so it cannot import",
        ),
        (
            "join --cloudcore-ipport=10.0.0.1:10000",
            format!("{CONTAINERD}KB_RT_NO_TOOL\nKB_RT_DONE\n"),
            "keadm-batch cannot import the offline images into containerd (/run/containerd/containerd.sock): ctr is not installed on the node. Install it, or import the archives by hand (ctr --address /run/containerd/containerd.sock -n k8s.io images import FILE, FILE being each of these copied to the node: ",
        ),
        (
            "join --cloudcore-ipport=10.0.0.1:10000 -p unix:///var/run/crio/crio.sock",
            format!("{crio}KB_RT_NO_TOOL\nKB_RT_UNLISTED\nKB_RT_DONE\n"),
            "into CRI-O: podman or skopeo is not installed on the node",
        ),
        (
            "join --cloudcore-ipport=10.0.0.1:10000",
            format!(
                "{CONTAINERD}KB_RT_TOOL ctr\nKB_RT_LIST_FAILED ctr: failed to dial \"/run/containerd/containerd.sock\": connection refused\nKB_RT_DONE\n"
            ),
            "containerd (/run/containerd/containerd.sock) on the node does not answer (ctr: failed to dial",
        ),
        (
            "join --cloudcore-ipport=10.0.0.1:10000",
            format!("KB_TOOLS gzip tar\n{CONTAINERD}KB_RT_TOOL ctr\nKB_RT_LISTED\nKB_RT_DONE\n"),
            "The node has neither a working sha256sum nor a working openssl, so it cannot check the offline image archives before they are imported. Install one of them (coreutils, BusyBox or OpenSSL), or import the archives by hand (ctr --address /run/containerd/containerd.sock -n k8s.io images import FILE, FILE being each of these copied to the node: ",
        ),
    ] {
        let fake = FakeTransport::new()
            .on(sent::RUN, Reply::ok())
            .on(sent::PREPARE, prepared(&prepare_extra));
        let mut h = Harness::new(fake);
        h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
        let mut plan = node(vec![]);
        plan.keadm_args = KeadmCommand::parse(command);
        let outcome = h.process(&plan);
        assert_eq!(outcome.phase, Phase::Failed);
        assert_eq!(outcome.failed_in, Some(Phase::Preparing));
        // keadm never ran: the class is keadm-batch's own, never read from keadm's
        // output (whose advice would be edgecore's log).
        let class = if expected.contains("sha256sum") {
            FailureClass::Upload
        } else {
            FailureClass::RuntimeMissing
        };
        assert_eq!(outcome.failure_class, Some(class), "{expected}");
        let error = outcome.error.unwrap();
        assert!(error.contains(expected), "{error}");
        // By hand means the operator's own copy: nothing was sent to the upload dir.
        assert!(!error.contains("/tmp/kb/image-"), "{error}");
        assert_eq!(
            h.execs().len(),
            1,
            "only the prepare step: {:#?}",
            h.execs()
        );
        assert_eq!(outcome.bytes_uploaded, 0);
    }
}

/// A node whose runtime lacks the one archive's image, its import answered by `import`.
fn run_importing(import: Reply) -> (Harness, NodeOutcome) {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, import)
        .on(sent::PREPARE, prepared_with_runtime(&[]))
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let outcome = h.process(&node(vec![]));
    (h, outcome)
}

#[test]
fn a_failed_import_stops_the_node_before_keadm_with_the_cli_s_words() {
    let (h, outcome) = run_importing(
        Reply::exit(3).printing("ctr: content digest sha256:ab: not found\nKB_IMPORT_FAILED 0 1\n"),
    );
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    let error = outcome.error.unwrap();
    assert!(
        error.starts_with(&format!("Importing the image archive /tmp/kb/{} (package.tar) into containerd (/run/containerd/containerd.sock) failed with status 1: ctr: content digest sha256:ab: not found.", package())),
        "{error}"
    );
    assert!(h.fake.execs_with(sent::RUN).is_empty(), "keadm did not run");
}

#[test]
fn an_import_the_runtime_does_not_list_afterwards_is_a_failure() {
    let (_, outcome) = run_importing(imported(1, &["docker.io/library/other:1"]));
    assert_eq!(outcome.phase, Phase::Failed);
    let error = outcome.error.unwrap();
    assert!(
        error.contains(&format!("does not list {PACKAGE} afterwards")),
        "{error}"
    );
}

/// A verified import (the runtime lists every image afterwards): the archive and its
/// sidecar are removed from the upload dir, after the import and before keadm runs, and
/// the transcript says what went; keadm stays.
#[test]
fn archives_are_removed_once_the_runtime_lists_their_images() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(REMOVE, Reply::ok().printing("KB_RM_DONE 1 30513561\n"))
        .on(IMPORT, imported(1, &[PACKAGE]))
        .on(sent::PREPARE, prepared_with_runtime(&[]))
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let execs = h.execs();
    let at = |pattern: &str| execs.iter().position(|e| e.command.contains(pattern));
    let removal = at(REMOVE).expect("the archives are removed");
    assert!(at(IMPORT).unwrap() < removal && removal < at(sent::RUN).unwrap());
    let script = &execs[removal].command;
    assert!(
        script.contains("KB_DIR=/tmp/kb\nKB_SIDECAR=.sha256\n")
            && script.contains(&format!("set -- {}\n", package()))
            && script.contains("rm -f -- \"$kb_f$KB_SIDECAR\"")
            && !script.contains("keadm"),
        "{script}"
    );
    let text = transcript(&outcome);
    assert!(
        text.contains("removed the image archives from /tmp/kb (1 file, 30.5 MB): their images are in containerd (/run/containerd/containerd.sock)"),
        "{text}"
    );
}

/// An archive that could not be removed is a note, never a failure.
#[test]
fn an_archive_that_cannot_be_removed_is_a_note() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(
            REMOVE,
            Reply::ok().printing(&format!("KB_RM_KEPT {}\nKB_RM_DONE 0 0\n", package())),
        )
        .on(IMPORT, imported(1, &[PACKAGE]))
        .on(sent::PREPARE, prepared_with_runtime(&[]))
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let text = transcript(&outcome);
    assert!(
        text.contains(&format!(
            "these image archives stay in /tmp/kb: they could not be removed: {}",
            package()
        )) && !text.contains("removed the image archives"),
        "{text}"
    );
}

/// Nothing is removed after an import that failed, or whose images the runtime does not
/// list afterwards, or that the runtime did not list at all.
#[test]
fn archives_stay_after_an_import_that_failed_or_was_not_verified() {
    for import in [
        Reply::exit(3).printing("ctr: content digest sha256:ab: not found\nKB_IMPORT_FAILED 0 1\n"),
        imported(1, &["docker.io/library/other:1"]),
        Reply::ok().printing("KB_IMPORTED 0\nKB_RT_DONE\n"),
    ] {
        let (h, outcome) = run_importing(import);
        assert!(
            h.fake.execs_with(REMOVE).is_empty(),
            "{:?}: {:#?}",
            outcome.phase,
            h.execs()
        );
    }
    let (_h, outcome) = run_importing(Reply::ok().printing("KB_IMPORTED 0\nKB_RT_DONE\n"));
    assert!(
        transcript(&outcome).contains("the image archives stay in /tmp/kb: containerd (/run/containerd/containerd.sock) could not be listed after the import"),
        "{}",
        transcript(&outcome)
    );
}

/// keadm upgrade edge pulls the installation-package of its target through the node's
/// runtime: on an air-gapped site the archive is imported before keadm runs, as for a
/// join (into the runtime at keadm's default socket, which keadm join wrote into
/// edgecore.yaml).
#[test]
fn an_upgrade_gets_its_offline_images_imported_before_keadm() {
    let fake = FakeTransport::new()
        .on(
            "containerRuntimeEndpoint",
            Reply::ok().printing("unix:///run/k3s/containerd/containerd.sock\n"),
        )
        .on("KB_EDGE_TASK_CHECKED", Reply::ok().printing(
            "KB_REPORT {\"event\":\"Upgrade\",\"success\":true,\"fromVersion\":\"v1.23.0\",\"toVersion\":\"v1.23.1\"}\nKB_RUNNING 9 v1.23.1\nKB_NODE_NAME edge-1\nKB_EDGE_TASK_CHECKED\n",
        ))
        .on("./keadm upgrade", Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE, PAUSE]))
        .on(
            sent::PREPARE,
            prepared(&format!(
                "KB_TOOLS openssl\n{}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\nKB_RT_IMAGE {PAUSE}\nKB_RT_LISTED\nKB_RT_SANDBOX {PAUSE}\nKB_RT_DONE\n",
                CONTAINERD.replace("/run/containerd/", "/run/k3s/containerd/")
            )),
        )
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let mut plan = node(vec![]);
    plan.keadm_cmd = "upgrade edge --toVersion v1.23.1".into();
    plan.keadm_args = KeadmCommand::parse(&plan.keadm_cmd);
    plan.command = crate::plan::keadm_command("/opt/bin", &plan.keadm_cmd);
    plan.edge_task = Some(crate::plan::EdgeTaskPlan {
        task: crate::keadm_cmd::EdgeTask::Upgrade,
        target_version: Some("v1.23.1".into()),
        rollback: None,
    });
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let execs = h.execs();
    assert_eq!(
        execs.len(),
        7,
        "edgecore's runtime, prepare, archive, import, removal, run, check: {execs:#?}"
    );
    // The runtime edgecore.yaml names, not keadm join's default, is probed and used.
    assert!(
        execs[1]
            .command
            .contains("KB_SOCK=/run/k3s/containerd/containerd.sock\n"),
        "{}",
        execs[1].command
    );
    assert!(
        execs[3].command.contains(&format!(
            "KB_RUNTIME=containerd\nKB_SOCK=/run/k3s/containerd/containerd.sock\nset -- {} 0\n",
            package()
        )),
        "{}",
        execs[3].command
    );
    assert!(execs[4].command.contains(REMOVE), "{}", execs[4].command);
    assert!(
        execs[5]
            .command
            .ends_with("yes | ./keadm upgrade edge --toVersion v1.23.1"),
        "{}",
        execs[5].command
    );
    assert!(
        transcript(&outcome).contains(
            "the runtime keadm upgrade edge will use is containerd (/run/k3s/containerd/containerd.sock)"
        ),
        "{}",
        transcript(&outcome)
    );
    let upgrade = outcome.upgrade.expect("an upgrade record");
    assert_eq!(upgrade.running_version.as_deref(), Some("v1.23.1"));
}

#[test]
fn only_joins_and_upgrades_get_offline_images() {
    let fake = FakeTransport::new()
        .on(
            "KB_RESET_CHECKED",
            Reply::ok().printing("KB_RESET_CHECKED\n"),
        )
        .on("./keadm reset", Reply::ok())
        .on(sent::PREPARE, prepared(""));
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let mut plan = node(vec![]);
    plan.keadm_args = KeadmCommand::parse("reset edge --force");
    plan.command = "cd /opt/bin && yes | ./keadm reset edge --force".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let prepare = h.exec_with(sent::PREPARE).command;
    assert!(
        !prepare.contains(&package()) && !prepare.contains("ctr "),
        "{prepare}"
    );
    // The prepare step, keadm, and the check that the reset left the node clean.
    assert_eq!(h.execs().len(), 3);
}

/// The pre-flight probe's answer: its own checks clean, then the runtime probe's lines
/// with these images listed.
fn probed(images: &str) -> Reply {
    Reply::ok().printing(&format!(
        "KB_PF_DONE\n{CONTAINERD}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\n{images}KB_RT_LISTED\nKB_RT_SANDBOX {PAUSE}\nKB_RT_DONE\n"
    ))
}

#[test]
fn pre_flight_reports_images_neither_in_the_runtime_nor_in_an_archive() {
    // No archive and an empty runtime: both images are missing; strict skips the node.
    let mut h = Harness::new(FakeTransport::new().on(sent::PROBE, probed("")));
    h.images(&[]);
    h.preflight = PreflightMode::Strict;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Skipped, "{:?}", outcome.error);
    assert_eq!(outcome.preflight.len(), 1);
    assert_eq!(outcome.preflight[0].id, FindingId::ImageMissing);
    assert_eq!(
        outcome.preflight[0].detail,
        format!(
            "{PACKAGE} and {PAUSE} are not in containerd (/run/containerd/containerd.sock), and no offline image archive for amd64 provides them; `keadm-batch batch bundle` writes them into the kit when run again adding --sandbox-image {PAUSE} (the runtime's sandbox image) and with this keadmCmd and keadmVersion (keadm's own images)"
        )
    );
    // A root login asks the runtime as it is, in the probe's own round trip.
    let probe = h.exec_with(sent::PROBE);
    assert!(!probe.command.contains("sudo"), "{}", probe.command);
    assert!(probe.command.contains("images ls -q"), "{}", probe.command);
    assert_eq!(probe.stdin, None);
    assert!(
        transcript(&outcome).contains(
            "the runtime keadm join will use is containerd (/run/containerd/containerd.sock) (ctr version answers on it)"
        ),
        "{}",
        transcript(&outcome)
    );

    // The archive provides the package and the runtime has the sandbox image: nothing.
    let mut h = Harness::new(
        FakeTransport::new()
            .on(sent::PROBE, probed(&format!("KB_RT_IMAGE {PAUSE}\n")))
            .on(sent::RUN, Reply::ok())
            .on(sent::PREPARE, prepared_with_runtime(&[PACKAGE, PAUSE])),
    );
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    h.preflight = PreflightMode::Strict;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    assert!(outcome.preflight.is_empty(), "{:?}", outcome.preflight);
    // The pre-flight probe and the import both asked the runtime: the transcript says
    // which it is once.
    let said = transcript(&outcome)
        .matches("the runtime keadm join will use is containerd")
        .count();
    assert_eq!(said, 1, "{}", transcript(&outcome));
}

/// The pre-flight probe and the import each ask the runtime what it is, and may be told
/// in other words (here `ctr version` answers the first, and the second learns it from the
/// socket's holder): the same runtime at the same socket is said once. Another runtime
/// than the one pre-flight saw is said again, since that changes what the import does.
#[test]
fn the_runtime_is_said_once_whatever_the_words_it_was_told_in() {
    let held = CONTAINERD.replace(
        "ctr version answers on it",
        "its socket is held by containerd (pid 42)",
    );
    let prepared_as = |runtime: &str| {
        prepared(&format!(
            "KB_TOOLS openssl\n{runtime}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\nKB_RT_IMAGE {PACKAGE}\nKB_RT_IMAGE {PAUSE}\nKB_RT_LISTED\nKB_RT_SANDBOX {PAUSE}\nKB_RT_DONE\n"
        ))
    };
    let mut h = Harness::new(
        FakeTransport::new()
            .on(sent::PROBE, probed(&format!("KB_RT_IMAGE {PAUSE}\n")))
            .on(sent::RUN, Reply::ok())
            .on(sent::PREPARE, prepared_as(&held)),
    );
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    h.preflight = PreflightMode::Warn;
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let text = transcript(&outcome);
    assert_eq!(
        text.matches("the runtime keadm join will use is ").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(
            "the runtime keadm join will use is containerd (/run/containerd/containerd.sock) (ctr version answers on it)"
        ),
        "{text}"
    );

    // CRI-O where pre-flight saw containerd: both are said.
    let crio = "KB_RT_SOCKET /run/containerd/containerd.sock\nKB_RT_KIND crio\nKB_RT_TOLD crictl version says RuntimeName cri-o\n";
    let mut h = Harness::new(
        FakeTransport::new()
            .on(sent::PROBE, probed(&format!("KB_RT_IMAGE {PAUSE}\n")))
            .on(sent::RUN, Reply::ok())
            .on(sent::PREPARE, prepared_as(crio)),
    );
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    h.preflight = PreflightMode::Warn;
    let outcome = h.process(&node(vec![]));
    let text = transcript(&outcome);
    assert!(
        text.contains("the runtime keadm join will use is containerd (")
            && text.contains(
                "the runtime keadm join will use is CRI-O (crictl version says RuntimeName cri-o)"
            ),
        "{text}"
    );
}

/// A check that could not run is a `probe_incomplete` finding saying what was not
/// checked and why, never "nothing found".
#[test]
fn an_image_check_that_could_not_run_is_a_finding() {
    let unknown = "KB_RT_SOCKET /run/x.sock\nKB_RT_KIND unknown\nKB_RT_TOLD crictl is not installed; ctr is not installed; no process this probe can see holds the socket\n";
    for (answer, expected) in [
        (
            format!("KB_PF_DONE\n{CONTAINERD}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\nKB_RT_LIST_FAILED permission denied\nKB_RT_DONE\n"),
            "the images keadm join needs were not checked: the images of containerd (/run/containerd/containerd.sock) could not be listed (permission denied)".to_string(),
        ),
        (
            format!("KB_PF_DONE\n{unknown}KB_RT_ARCH x86_64\nKB_RT_NO_TOOL\nKB_RT_UNLISTED\nKB_RT_DONE\n"),
            "the images keadm join needs were not checked: keadm-batch cannot tell which container runtime serves /run/x.sock (crictl is not installed; ctr is not installed; no process this probe can see holds the socket)".to_string(),
        ),
        (
            format!("KB_PF_DONE\n{CONTAINERD}KB_RT_ARCH x86_64\nKB_RT_TOOL ctr\nKB_RT_IMAGE {PACKAGE}\nKB_RT_LISTED\nKB_RT_DONE\n"),
            "not every image keadm join needs was checked: keadm-batch cannot tell which sandbox image the runtime is configured with".to_string(),
        ),
        (
            "KB_PF_DONE\nsh: 1: ctr: Segmentation fault\n".to_string(),
            "the images keadm join needs were not checked: it ended with: sh: 1: ctr: Segmentation fault".to_string(),
        ),
    ] {
        let mut h = Harness::new(FakeTransport::new().on(sent::PROBE, Reply::ok().printing(&answer)));
        h.images(&[]);
        h.preflight = PreflightMode::Strict;
        let outcome = h.process(&node(vec![]));
        assert_eq!(outcome.phase, Phase::Skipped, "{:?}", outcome.error);
        assert_eq!(outcome.preflight.len(), 1, "{:?}", outcome.preflight);
        assert_eq!(outcome.preflight[0].id, FindingId::ProbeIncomplete);
        assert_eq!(outcome.preflight[0].detail, expected);
    }
}

/// Under sudo the image check asks the runtime as the run will: in sudo's `sh -c`, after
/// the login user's own checks, with the password first on stdin.
#[test]
fn under_sudo_the_pre_flight_image_check_runs_as_root_with_the_password() {
    let mut plan = node(vec![]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    let mut h = Harness::new(FakeTransport::new().on(sent::PROBE, probed("")));
    h.images(&[]);
    h.preflight = PreflightMode::Strict;
    let outcome = h.process(&plan);
    assert_eq!(outcome.preflight[0].id, FindingId::ImageMissing);
    let probe = h.exec_with(sent::PROBE);
    // The sudo probe begins with the script it hands to sudo (its KB_SCRIPT).
    let (own, under_sudo) = probe.command.split_once("KB_SCRIPT=").unwrap();
    assert!(
        own.contains("KB_PF_DONE") && !own.contains("images ls"),
        "{own}"
    );
    assert!(
        under_sudo.contains("sudo -S -p '' sh -c ") && under_sudo.contains("images ls -q"),
        "{under_sudo}"
    );
    assert_eq!(
        probe.stdin.as_deref(),
        Some(crate::remote::password_preamble(PASSWORD).as_bytes())
    );

    // Sudo wants a password the login does not have: said so, as a finding.
    plan.ssh.auth = crate::config::AuthSpec::Agent;
    let mut h = Harness::new(FakeTransport::new().on(
        sent::PROBE,
        Reply::ok().printing("KB_PF_DONE\nKB_SUDO password\nsudo: no password was provided\n"),
    ));
    h.images(&[]);
    h.preflight = PreflightMode::Strict;
    let outcome = h.process(&plan);
    assert_eq!(outcome.preflight[0].id, FindingId::ProbeIncomplete);
    assert_eq!(
        outcome.preflight[0].detail,
        "the images keadm join needs were not checked: it runs under sudo as the run does, and sudo on the node wants a password, which admin logs in without"
    );
    assert_eq!(h.exec_with(sent::PROBE).stdin, None);
}

/// A node whose runtime lacks the one archive's image and imports it once sent, with the
/// tools of the `KB_TOOLS` line `tools`.
fn importing_with(tools: &str) -> FakeTransport {
    FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE]))
        .on(sent::PREPARE, prepared_with_runtime_and(tools, &[]))
        .on(&tmp(&package()), Reply::ok())
}

#[test]
fn a_compressible_archive_goes_gzipped_to_a_node_with_gzip_and_as_it_is_elsewhere() {
    for (tools, gzipped) in [
        ("KB_TOOLS sha512sum gzip tar openssl\n", true),
        ("KB_TOOLS tar openssl\n", false),
    ] {
        let mut h = Harness::new(importing_with(tools));
        let sizes = h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
        let images = h.offline_images.as_mut().unwrap();
        images.compress_for_the_wire().unwrap();
        let copy = images.for_arch(crate::arch::Arch::Amd64)[0]
            .gzipped
            .clone()
            .expect("a manifest and tar padding compress well");
        let outcome = h.process(&node(vec![]));
        assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
        let prepare = h.exec_with(sent::PREPARE).command;
        assert!(
            prepare.contains("KB_TOOLS"),
            "the node is asked for gzip: {prepare}"
        );
        // Received into its temporary name, unpacked by gzip or as it is.
        let received = format!("KB_TMP={}\n", tmp(&package()));
        let upload: Vec<_> = h
            .execs()
            .into_iter()
            .filter(|e| e.command.contains(&received))
            .collect();
        assert_eq!(upload.len(), 1, "{:#?}", h.execs());
        if gzipped {
            assert!(
                upload[0].command.contains("KB_UNPACK=gzip\n"),
                "{}",
                upload[0].command
            );
            assert_eq!(
                upload[0].stdin.as_deref(),
                Some(&std::fs::read(&copy.path).unwrap()[..])
            );
            assert_eq!(outcome.bytes_uploaded, copy.size);
        } else {
            assert!(
                upload[0].command.contains("KB_UNPACK=''\n"),
                "{}",
                upload[0].command
            );
            assert_eq!(outcome.bytes_uploaded, sizes[0]);
        }
    }
}

#[test]
fn under_sudo_the_archive_and_its_import_get_the_password_first_and_run_as_root() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(IMPORT, imported(1, &[PACKAGE]))
        .on(
            sent::PREPARE,
            prepared_with_runtime_and("KB_SUDO password\n", &[]),
        )
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let mut plan = node(vec![]);
    plan.sudo = true;
    plan.ssh.username = "admin".into();
    let outcome = h.process(&plan);
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let preamble = crate::remote::password_preamble(PASSWORD).into_bytes();
    let prepare = h.exec_with(sent::PREPARE).command;
    // The runtime is asked under the same sudo as the prepare step.
    assert!(prepare.contains("\nif sudo -n true"), "{prepare}");
    for exec in [
        h.exec_with(&format!("KB_TMP={}\n", tmp(&package()))),
        h.exec_with(IMPORT),
    ] {
        assert!(
            exec.command.starts_with("sudo -S -p '' sh -c "),
            "{}",
            exec.command
        );
        assert!(
            exec.stdin.as_deref().unwrap().starts_with(&preamble),
            "{:?}",
            exec.stdin
        );
    }
    assert_eq!(h.exec_with(IMPORT).stdin.as_deref(), Some(&preamble[..]));
}

/// A node with a working sha256sum (what the tools probe prints).
const SHA256SUM: &str = "KB_TOOLS sha256sum\n";

/// The sha256 the run hashed for the amd64 archive `index`.
fn hashed(h: &Harness, index: usize) -> String {
    h.offline_images
        .as_ref()
        .unwrap()
        .for_arch(crate::arch::Arch::Amd64)[index]
        .sha256
        .clone()
}

/// The execs that sent the archive `package.tar` (in any form).
fn archive_sent(h: &Harness) -> Vec<Exec> {
    h.fake
        .execs_with(&tmp(&package()))
        .into_iter()
        .filter(|e| e.stdin.is_some())
        .collect()
}

/// Security: whoever can write the offline directory cannot swap an archive between the
/// run's check and its upload. The node gets the bytes the run hashed (and, in a kit,
/// checked against kit.json), even when the file is replaced, same size, afterwards.
#[test]
fn an_archive_replaced_after_it_was_hashed_is_sent_as_it_was_hashed() {
    let mut h = Harness::new(importing_with(SHA256SUM));
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let source = h.dir.path().join("kit/amd64/images/package.tar");
    let original = std::fs::read(&source).unwrap();
    let sha256 = hashed(&h, 0);
    // Same size, other bytes, renamed into place as anyone who can write the directory can.
    let mut swapped = original.clone();
    let last = swapped.len() - 1;
    swapped[last] ^= 0xff;
    let planted = source.with_extension("planted");
    std::fs::write(&planted, &swapped).unwrap();
    std::fs::rename(&planted, &source).unwrap();

    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Succeeded, "{:?}", outcome.error);
    let sent = archive_sent(&h);
    assert_eq!(sent.len(), 1, "{:#?}", h.execs());
    assert!(
        sent[0].stdin.as_deref() == Some(&original[..]),
        "the bytes sent are the bytes hashed, not the file as it is now"
    );
    assert!(sent[0].command.contains(&sha256), "{}", sent[0].command);
    assert!(h.exec_with(IMPORT).command.contains(&sha256));
}

/// The node hashes an archive it received before anything moves it into place: one that
/// does not hash to what was sent fails the node on one line, naming the archive and both
/// digests, and is neither imported nor sent again in another form.
#[test]
fn an_archive_that_does_not_hash_on_the_node_to_what_was_sent_is_not_imported() {
    let got = "ab".repeat(32);
    for (tools, hasher, gzipped) in [
        ("KB_TOOLS sha256sum openssl\n", "KB_HASHER=openssl\n", false),
        (SHA256SUM, "KB_HASHER=sha256sum\n", false),
        ("KB_TOOLS gzip sha256sum\n", "KB_UNPACK=gzip\n", true),
    ] {
        let fake = FakeTransport::new()
            .on(sent::RUN, Reply::ok())
            .on(IMPORT, imported(1, &[PACKAGE]))
            .on(sent::PREPARE, prepared_with_runtime_and(tools, &[]))
            .on(
                &tmp(&package()),
                Reply::exit(3).printing(&format!("KB_SHA256_GOT {got}\n")),
            );
        let mut h = Harness::new(fake);
        h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
        if gzipped {
            let images = h.offline_images.as_mut().unwrap();
            images.compress_for_the_wire().unwrap();
        }
        let expected = hashed(&h, 0);
        let outcome = h.process(&node(vec![]));
        assert_eq!(outcome.phase, Phase::Failed);
        assert_eq!(outcome.failed_in, Some(Phase::Uploading));
        let error = outcome.error.unwrap();
        assert!(
            error.starts_with(&format!(
                "The file {} arrived on the node with sha256 {got}, but what was sent has sha256 {expected}, so the node removed it",
                package()
            )),
            "{error}"
        );
        assert!(!error.contains('\n'), "{error}");
        let sent = archive_sent(&h);
        assert_eq!(sent.len(), 1, "sent once: {:#?}", h.execs());
        let receive = &sent[0];
        assert!(
            receive.command.contains(hasher) && receive.command.contains(&expected),
            "{}",
            receive.command
        );
        assert!(
            receive
                .command
                .contains(&format!("KB_TMP={}\nKB_MODE=600\n", tmp(&package())))
                && receive.command.contains("KB_FAILED=remove\n"),
            "{}",
            receive.command
        );
        assert!(h.fake.execs_with(IMPORT).is_empty(), "{:#?}", h.execs());
        assert!(h.fake.execs_with(sent::RUN).is_empty(), "keadm did not run");
    }
}

/// Issue 33 item 4: a stale node (an old edgecore running, /etc/kubeedge full) that
/// pre-flight in `warn` saw, whose import then failed: the cause the operator needs is
/// `already_joined`, with its fix, not the runtime.
#[test]
fn a_failure_on_a_node_preflight_found_joined_is_classed_already_joined() {
    let fake = FakeTransport::new()
        .on(sent::RUN, Reply::ok())
        .on(
            IMPORT,
            Reply::exit(3).printing("ctr: content digest sha256:ab: not found\nKB_IMPORT_FAILED 0 1\n"),
        )
        .on(
            sent::PROBE,
            prepared_with_runtime_and(
                "KB_PF edgecore_running pid 12\nKB_PF management_dir_not_clean 3 entries: ca certs edgecore.yaml\nKB_PF_DONE\n",
                &[],
            ),
        )
        .on(sent::PREPARE, prepared_with_runtime(&[]))
        .on(&tmp(&package()), Reply::ok());
    let mut h = Harness::new(fake);
    h.preflight = PreflightMode::Warn;
    h.images(&[("package.tar", "kubeedge/installation-package:v1.23.1")]);
    let outcome = h.process(&node(vec![]));
    assert_eq!(outcome.phase, Phase::Failed);
    assert_eq!(outcome.failed_in, Some(Phase::Preparing));
    assert_eq!(
        outcome.failure_class,
        Some(FailureClass::AlreadyJoined),
        "{:?}",
        outcome.error
    );
    let ids: Vec<&str> = outcome.preflight.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids[..2], ["edgecore_running", "management_dir_not_clean"]);
    let transcript = transcript(&outcome);
    assert!(
        transcript.contains("failure class: already_joined (pre-flight found edgecore running on the node before anything changed: pid 12; the step's own class was runtime_missing)"),
        "{transcript}"
    );
}
