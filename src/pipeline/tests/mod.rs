//! The pipeline's branches through the scripted fake transport (`transport::fake`): no
//! sshd and no root, so every branch runs under `cargo test --lib` in milliseconds. The
//! real-sshd integration suite stays the end-to-end proof.

mod classes;
mod connect;
mod exchange;
mod failures;
mod images;
mod reset_check;
mod shellcheck;
mod status;
mod uploads;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Context, process};
use crate::arch::Arch;
use crate::cancel::Cancel;
use crate::config::{AuthSpec, CopyFile, HostKeyPolicy};
use crate::keadm_cmd::KeadmCommand;
use crate::options::PreflightMode;
use crate::outcome::NodeOutcome;
use crate::plan::{KeadmSource, NodePlan};
use crate::redact::Secret;
use crate::report::RunDir;
use crate::report::progress::Progress;
use crate::stage::{
    CopyMaking, CopySlot, Gate, OfflineImages, PackageSource, StageSettings, Stager,
};
use crate::transport::fake::{Exec, FakeTransport, Reply};

/// The run token, so tests can spell the temporary upload names.
const TOKEN: &str = "tok";
/// The login password of [`node`].
const PASSWORD: &str = "hunter2";
/// The upload dir of [`node`].
const DIR: &str = "/tmp/kb";
/// The keadm command of [`node`], as the pipeline runs it.
const JOIN: &str = "cd /opt/bin && ./keadm join --cloudcore-ipport=10.0.0.1:10000";

/// One node's world: the fake transport, a run dir, and what the context shares.
struct Harness {
    dir: tempfile::TempDir,
    run_dir: RunDir,
    progress: Arc<Progress>,
    cancel: Cancel,
    fake: FakeTransport,
    stager: Option<Stager>,
    verify_remote: bool,
    preflight: PreflightMode,
    offline_images: Option<OfflineImages>,
    /// keadm.extraImages.
    extra_images: Vec<crate::image_ref::ImageRef>,
}

impl Harness {
    fn new(fake: FakeTransport) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = RunDir::create(Some(&dir.path().join("run")), dir.path()).unwrap();
        Harness {
            dir,
            run_dir,
            progress: Progress::new(1, 1, false),
            cancel: Cancel::new(),
            fake,
            stager: None,
            verify_remote: false,
            preflight: PreflightMode::Off,
            offline_images: None,
            extra_images: Vec::new(),
        }
    }

    /// A local copyFrom file with `contents`.
    fn file(&self, name: &str, contents: &[u8]) -> CopyFile {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        let (size, sha256) = crate::digest::sha256_file(&path).unwrap();
        CopyFile {
            name: name.to_string(),
            path,
            mode: 0o644,
            size,
            sha256,
        }
    }

    /// Stages an amd64 keadm `binary` from an offline package, as a run would before
    /// its nodes start, and waits for its packed copies (a warm run). Returns the
    /// tarball's path.
    fn stage(&mut self, binary: &[u8]) -> PathBuf {
        let tarball = self.stage_cold(binary, Gate::opened());
        self.stager
            .as_ref()
            .unwrap()
            .staged(Arch::Amd64)
            .unwrap()
            .copies
            .iter()
            .for_each(|slot| {
                CopySlot::wait(slot);
            });
        tarball
    }

    /// Where staging keeps the amd64 binary and its copies.
    fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("base/bin/amd64")
    }

    /// As [`Harness::stage`], on a cold run: the packed copies are made by threads once
    /// `gate` opens, and not waited for.
    fn stage_cold(&mut self, binary: &[u8], gate: Gate) -> PathBuf {
        let version = "v1.0.0";
        let packages = self.dir.path().join("packages");
        let tarball = crate::stage::tests::offline_package(&packages, version, binary);
        let mut settings = StageSettings::new(version, PackageSource::Offline { dir: packages });
        settings.base_dir = self.dir.path().join("base");
        settings.arch_group = vec![Arch::Amd64];
        settings.allow_unverified = true;
        settings.copies = CopyMaking::Thread(gate);
        let stager = Stager::open(settings).unwrap();
        stager.stage_all().unwrap();
        self.stager = Some(stager);
        tarball
    }

    fn process(&self, node: &NodePlan) -> NodeOutcome {
        process(node, &self.ctx())
    }

    /// What `batch status` learns of `node`.
    fn status(
        &self,
        node: &NodePlan,
    ) -> Result<crate::remote::NodeStatus, crate::outcome::ProbeError> {
        super::status_only(node, &self.ctx())
    }

    fn ctx(&self) -> Context<'_> {
        Context {
            connector: &self.fake,
            stager: self.stager.as_ref(),
            known_hosts: self.dir.path().join("known_hosts"),
            jump_connections: 1,
            run_dir: &self.run_dir,
            cancel: &self.cancel,
            verify_remote: self.verify_remote,
            run_token: TOKEN.to_string(),
            retry_base: Duration::from_millis(1),
            handshakes_per_host: crate::transport::DEFAULT_HANDSHAKES_PER_HOST,
            progress: &self.progress,
            preflight: self.preflight,
            binary_size_hint: 0,
            offline_images: self.offline_images.as_ref(),
            keadm_version: Some("v1.23.1"),
            extra_images: &self.extra_images,
            relay: None,
        }
    }

    fn execs(&self) -> Vec<Exec> {
        self.fake.execs()
    }

    /// The one command that contains `pattern`.
    fn exec_with(&self, pattern: &str) -> Exec {
        let found = self.fake.execs_with(pattern);
        assert_eq!(found.len(), 1, "{pattern}: {:#?}", self.execs());
        found.into_iter().next().unwrap()
    }
}

/// The node's transcript, as written to the run dir.
fn transcript(outcome: &NodeOutcome) -> String {
    std::fs::read_to_string(Path::new(outcome.transcript.as_ref().unwrap())).unwrap()
}

/// A root node with password login that joins with a keadm already on the node
/// (keadmBinDir), so only `files` are uploaded.
fn node(files: Vec<CopyFile>) -> NodePlan {
    let keadm_cmd = "join --cloudcore-ipport=10.0.0.1:10000";
    let mut node = NodePlan::sample(0);
    node.name = "edge-0".into();
    node.ssh.host = "10.0.0.9".into();
    node.ssh.auth = AuthSpec::Password(Secret::new(PASSWORD));
    node.copy_files = files;
    node.keadm = KeadmSource::OnNode("/opt/bin".into());
    node.upload_dir = DIR.into();
    node.exec_dir = "/opt/bin".into();
    node.keadm_cmd = keadm_cmd.into();
    node.keadm_args = KeadmCommand::parse(keadm_cmd);
    node.command = JOIN.into();
    node.deadlines.command = Duration::from_secs(7);
    node.retries = 2;
    node
}

/// A node whose keadm is the staged binary.
fn staged_node(files: Vec<CopyFile>) -> NodePlan {
    let mut node = node(files);
    node.keadm = KeadmSource::Staged;
    node.exec_dir = DIR.into();
    node.command = format!("cd {DIR} && ./keadm join --cloudcore-ipport=10.0.0.1:10000");
    node
}

/// What the preparatory round trip prints on a healthy amd64 node, then `extra`.
fn prepared(extra: &str) -> Reply {
    Reply::ok().printing(&format!("KB_ARCH x86_64\nKB_DIR_OK\n{extra}"))
}

/// The sha256 of `bytes`, in lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    crate::digest::sha256_reader(bytes).unwrap().1
}

/// A keadm that packs well: its tarball and packed copies are much smaller than it.
fn compressible_binary() -> Vec<u8> {
    let mut binary = b"#!/bin/sh\necho keadm\n".to_vec();
    binary.resize(256 << 10, b'#');
    binary
}

/// The temporary name `name` is uploaded to.
fn tmp(name: &str) -> String {
    crate::remote::temp_name(name, TOKEN, 0)
}

/// Patterns that pick out each kind of command the pipeline sends.
mod sent {
    /// The preparatory round trip.
    pub const PREPARE: &str = "KB_DIR_OK";
    /// The pre-flight probe.
    pub const PROBE: &str = "KB_PF_DONE";
    /// The run of keadm.
    pub const RUN: &str = "./keadm join";
    /// The kill of the command's process group.
    pub const KILL: &str = "kill -s KILL";
    /// The free-space question after a failed upload.
    pub const FREE_SPACE: &str = "df -Pk";
    /// The release tarball, unpacked on the node.
    pub const TARBALL: &str = "tar -xOf";
    /// The binary's xz copy, unpacked on the node.
    pub const XZ: &str = "KB_XZ_FAILED";
    /// The edgecore log after a join timed out.
    pub const EDGECORE_LOG: &str = "journalctl -u edgecore";
}
