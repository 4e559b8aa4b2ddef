//! Offline images for a join: the node's arch's image archives that its container
//! runtime lacks are uploaded (as any upload: temporary name, sidecar, skipped when the
//! node has the identical file; gzip-compressed where that pays and the node has gzip),
//! checked by their sha256 on the node as they arrive (a runtime imports an archive as it
//! is, so bytes damaged on the way must stop there), and imported into the runtime keadm
//! join will use, under the node's privilege, before keadm runs. An archive whose images
//! the runtime already lists is neither uploaded nor imported, so a rerun sends and
//! imports nothing. The runtime is the one the prepare step's probe found serving the
//! socket, as it said itself (`remote::runtime_probe_script`). A node keadm-batch cannot
//! check the archives on or import them into (no working sha256 tool, a runtime it cannot
//! tell, a missing CLI, a runtime that does not answer) fails before anything is sent,
//! naming what is missing and the command to run by hand.

use std::io::Write;
use std::time::Instant;

use super::privilege::{exec_as, password_of};
use super::relay::AfterServing;
use super::upload::{Move, Upload, finalize_line};
use super::{Run, StepError};
use crate::arch::Arch;
use crate::diagnosis::FailureClass;
use crate::kubeedge::preflight;
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::outcome::Phase;
use crate::remote::{
    self, ArchiveImport, InArchive, NodeFacts, Privilege, Runtime, RuntimeFacts, Sha256Tool,
};
use crate::safe_name::shown_path;
use crate::stage::{ImageArchive, OfflineImages, Selector};
use crate::transport::Connection;

/// Image archives are data for the import only: owner-only on the node.
const ARCHIVE_MODE: u32 = 0o600;

impl<'c> Run<'_, 'c> {
    /// The offline images in play for this node: a join, or an upgrade (which pulls the
    /// installation-package of its target), in a run set up for them.
    pub(super) fn images_in_play(&self) -> Option<&'c OfflineImages> {
        let args = &self.node.keadm_args;
        self.ctx
            .offline_images
            .filter(|_| args.is_join() || args.is_edge_upgrade())
    }

    /// The socket of the runtime keadm will use on this node: for an upgrade, the one
    /// edgecore.yaml names (read by [`Run::read_upgrade_runtime`]); for a join its
    /// `--remote-runtime-endpoint`, else keadm's default.
    pub(super) fn runtime_socket(&self) -> String {
        match &self.upgrade_runtime {
            Some(socket) => socket.clone(),
            None => preflight::runtime_socket(&self.node.keadm_args),
        }
    }

    /// An upgrade pulls through the runtime edgecore.yaml's `containerRuntimeEndpoint`
    /// names (keadm join wrote it from `--remote-runtime-endpoint`): read it, before the
    /// prepare step probes the runtime, in one read-only round trip. A node that does not
    /// say one keeps keadm's default, and the transcript says so.
    pub(super) fn read_upgrade_runtime(&mut self, conn: &mut dyn Connection) {
        let mut output = crate::node_text::CappedBuffer::new(4096);
        let deadline = std::time::Instant::now() + self.node.deadlines.step;
        let said = conn
            .exec(
                remote::EDGECORE_RUNTIME_ENDPOINT,
                None,
                deadline,
                &mut output,
            )
            .ok()
            .and_then(|_| remote::runtime_endpoint(&output.text()));
        match said {
            Some(socket) => {
                self.transcript.note(&format!(
                    "edgecore.yaml's containerRuntimeEndpoint is {socket}: the offline images go into that runtime"
                ));
                self.upgrade_runtime = Some(socket);
            }
            None => self.transcript.note(&format!(
                "edgecore.yaml names no containerRuntimeEndpoint this user can read: the offline images go into the runtime at {}, keadm's default",
                self.runtime_socket()
            )),
        }
    }

    /// The runtime at that socket as `probe` told it, noted in the transcript with how it
    /// was told; unknown when the probe did not get that far. The pre-flight probe and the
    /// import both ask, and may be told in other words (`ctr version` answers one, the
    /// socket's holder the other): the line is written once per runtime, compared by what
    /// it is and where it listens, not by the words.
    pub(super) fn told_runtime(&mut self, probe: &RuntimeFacts) -> Runtime {
        let runtime = probe.runtime.clone().unwrap_or_else(|| Runtime::Unknown {
            socket: self.runtime_socket(),
            why: "the probe ended before it could ask".to_string(),
        });
        if let Some(told) = &probe.told {
            let command = if self.node.keadm_args.is_edge_upgrade() {
                "keadm upgrade edge"
            } else {
                "keadm join"
            };
            let line = format!(
                "the runtime {command} will use is {} ({told})",
                runtime.name()
            );
            if !self
                .runtime_noted
                .as_ref()
                .is_some_and(|noted| noted.is_same(&runtime))
            {
                self.transcript.note(&line);
                self.runtime_noted = Some(runtime.clone());
            }
        }
        runtime
    }

    /// Puts the node's arch's offline images into its runtime, skipping what the runtime
    /// has (see the module doc).
    pub(super) fn offline_images(
        &mut self,
        conn: &mut dyn Connection,
        facts: &NodeFacts,
        privilege: Privilege,
    ) -> Result<(), StepError> {
        let Some(images) = self.images_in_play() else {
            return Ok(());
        };
        let arch = self.node_arch(facts)?;
        let archives = images.for_arch(arch);
        if archives.is_empty() {
            self.transcript.note(&format!(
                "offline images: there is no image archive for {arch}"
            ));
            return Ok(());
        }
        let probe = facts.runtime.clone().unwrap_or_default();
        let runtime = self.told_runtime(&probe);
        let mut needed: Vec<&ImageArchive> = Vec::new();
        for archive in archives {
            if probe.listed && archive.images.iter().all(|i| probe.has(&i.reference)) {
                self.uploads_skipped += 1;
                self.transcript.note(&format!(
                    "{} already has {}, so the image archive {} was neither uploaded nor imported",
                    runtime.name(),
                    references(archive),
                    shown_path(&archive.source)
                ));
            } else {
                needed.push(archive);
            }
        }
        if needed.is_empty() {
            return Ok(());
        }
        let hasher = self.can_import(&runtime, &probe, facts.sha256_tool(), &needed)?;
        let gzip = facts
            .tools
            .as_ref()
            .is_some_and(|tools| tools.iter().any(|t| t == "gzip"));
        let uploads = needed
            .iter()
            .map(|a| {
                Upload::plain(
                    a.staged.clone(),
                    a.remote_name.clone(),
                    ARCHIVE_MODE,
                    a.size,
                    a.sha256.clone(),
                )
                .or_gzipped(a.gzipped.clone().filter(|_| gzip))
                .checked_with(hasher)
            })
            .collect();
        let moves = self.upload_relaying(conn, uploads, facts, privilege, hasher)?;
        let verified = self.import(conn, &runtime, arch, &needed, &moves, privilege)?;
        if !verified {
            self.transcript.note(&format!(
                "the image archives stay in {}: {} could not be listed after the import, so keadm-batch cannot tell their images are in",
                self.node.upload_dir,
                runtime.name()
            ));
            return Ok(());
        }
        self.timed(Phase::Preparing, |run| {
            run.archives_imported(conn, &runtime, &needed, privilege);
            Ok(())
        })
    }

    /// The archives `imported` are in the runtime, which lists their images: nothing on
    /// the node needs them any more, except the node's site while the node serves them
    /// from its upload dir. Those go once it serves no more ([`Relay::take_after_serving`],
    /// cleared with its relay line); the others go now.
    ///
    /// [`Relay::take_after_serving`]: super::relay::Relay::take_after_serving
    fn archives_imported(
        &mut self,
        conn: &mut dyn Connection,
        runtime: &Runtime,
        imported: &[&ImageArchive],
        privilege: Privilege,
    ) {
        let (served, unneeded): (Vec<String>, Vec<String>) = imported
            .iter()
            .map(|a| a.remote_name.clone())
            .partition(|name| self.archives_served.contains(name));
        if !unneeded.is_empty() {
            self.remove_archives(conn, &unneeded, &runtime.name(), privilege);
        }
        let Some(relay) = self.ctx.relay.as_ref().filter(|_| !served.is_empty()) else {
            return;
        };
        self.transcript.note(&format!(
            "the image archives this node serves to its site stay in {} ({}) while it serves them: they are removed when it serves no more",
            self.node.upload_dir,
            file_count(served.len() as u64)
        ));
        relay.remove_after_serving(
            self.node.index,
            AfterServing {
                files: served,
                runtime: runtime.name(),
            },
        );
    }

    /// Removes the image archives `files` from the upload dir, with `privilege`, within a
    /// step's deadline, and says in the transcript what went. Never fails the node: an
    /// archive left behind is a note (a rerun finds its images in the runtime and does not
    /// need it either).
    pub(super) fn remove_archives(
        &mut self,
        conn: &mut dyn Connection,
        files: &[String],
        runtime: &str,
        privilege: Privilege,
    ) {
        let node = self.node;
        let script = remote::remove_archives_script(&node.upload_dir, files);
        let deadline = Instant::now() + node.deadlines.step;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let result = exec_as(
            conn,
            &script,
            privilege,
            password_of(node),
            None,
            deadline,
            &mut output,
        );
        let dir = &node.upload_dir;
        let removed = match result {
            Err(e) => {
                self.transcript.note(&format!(
                    "the image archives stay in {dir}: removing them failed ({e})"
                ));
                return;
            }
            Ok(exit) => match remote::parse_removed(&output.text()) {
                Some(removed) => removed,
                None => {
                    self.transcript.note(&format!(
                        "the image archives stay in {dir}: removing them did not finish ({exit}): {}",
                        remote::cli_output(&output.text())
                    ));
                    return;
                }
            },
        };
        if removed.no_dir {
            self.transcript.note(&format!(
                "the image archives stay in {dir}: the upload dir cannot be entered to remove them"
            ));
            return;
        }
        if removed.files > 0 {
            self.transcript.note(&format!(
                // Decimal megabytes, as the recap gives what crossed the uplink.
                "removed the image archives from {dir} ({}, {:.1} MB): their images are in {runtime}",
                file_count(removed.files),
                removed.bytes as f64 / 1e6
            ));
        }
        if !removed.kept.is_empty() {
            self.transcript.note(&format!(
                "these image archives stay in {dir}: they could not be removed: {}",
                removed.kept.join(", ")
            ));
        }
    }

    /// Refuses, before anything is sent, a node that cannot check the archives (`hasher`,
    /// the sha256 tool the node has) or a runtime they cannot be imported into. Returns the
    /// tool the node checks them with.
    fn can_import(
        &self,
        runtime: &Runtime,
        probe: &RuntimeFacts,
        hasher: Option<Sha256Tool>,
        needed: &[&ImageArchive],
    ) -> Result<Sha256Tool, StepError> {
        // Nothing was sent yet: by hand means the operator's own copies of the archives.
        let by_hand = || {
            let sources: Vec<String> = needed.iter().map(|a| shown_path(&a.source)).collect();
            format!(
                "{}, FILE being each of these copied to the node: {}",
                runtime.manual_import("FILE"),
                sources.join(", ")
            )
        };
        let problem = if let Runtime::Unknown { socket, why } = runtime {
            format!(
                "keadm-batch cannot tell which container runtime serves {socket} ({why}), so it cannot import the offline images (it imports into containerd, docker through cri-dockerd, CRI-O and iSulad). Import the archives on the node by hand with the runtime's own command, or point --remote-runtime-endpoint at the socket of one of those runtimes"
            )
        } else if probe.tool.is_none() && probe.done {
            format!(
                "keadm-batch cannot import the offline images into {}: {} is not installed on the node. Install it, or import the archives by hand ({}), and run again",
                runtime.name(),
                runtime.tools().join(" or "),
                by_hand()
            )
        } else if let Some(error) = &probe.list_error {
            format!(
                "{} on the node does not answer ({}), so the offline images cannot be imported. Check that the runtime runs and that --remote-runtime-endpoint names its socket",
                runtime.name(),
                error.trim_end_matches('.')
            )
        } else if let Some(hasher) = hasher {
            return Ok(hasher);
        } else {
            return Err(StepError::new(
                Phase::Preparing,
                format!(
                    "The node has neither a working sha256sum nor a working openssl, so it cannot check the offline image archives before they are imported. Install one of them (coreutils, BusyBox or OpenSSL), or import the archives by hand ({}), and run again.",
                    by_hand()
                ),
            )
            .class(FailureClass::Upload));
        };
        // keadm never ran: the class is keadm-batch's own, not read from keadm's output.
        Err(StepError::new(Phase::Preparing, format!("{problem}."))
            .class(FailureClass::RuntimeMissing))
    }

    /// Moves the uploaded archives into place, imports them, and checks that the runtime
    /// lists every image they provide: `true` when it listed its images afterwards (so the
    /// check was made), `false` when it did not list them.
    fn import(
        &mut self,
        conn: &mut dyn Connection,
        runtime: &Runtime,
        arch: Arch,
        needed: &[&ImageArchive],
        moves: &[Move],
        privilege: Privilege,
    ) -> Result<bool, StepError> {
        self.timed(Phase::Preparing, |run| {
            let node = run.node;
            let mut script = finalize_line(&node.upload_dir, moves);
            let imports: Vec<ArchiveImport> = needed.iter().map(|a| archive_import(a)).collect();
            script.push_str(&remote::import_script(&node.upload_dir, runtime, &imports));
            let bytes: u64 = needed.iter().map(|a| a.size).sum();
            let deadline = Instant::now() + node.deadlines.upload(bytes);
            let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
            let started = Instant::now();
            let result = exec_as(
                conn,
                &script,
                privilege,
                password_of(node),
                None,
                deadline,
                &mut output,
            );
            let text = output.text();
            for line in text.lines().filter(|l| !l.starts_with("KB_")) {
                let _ = writeln!(run.transcript, "{line}");
            }
            let exit = result.map_err(|e| {
                StepError::transport(
                    Phase::Preparing,
                    format!(
                        "Cannot import the offline images into {} on the node.",
                        runtime.name()
                    ),
                    e,
                )
            })?;
            let report = remote::parse_import(&text);
            if let Some((index, status)) = report.failed {
                let archive = needed.get(index).copied().unwrap_or(needed[0]);
                let file = format!("{}/{}", node.upload_dir, archive.remote_name);
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "Importing the image archive {file} ({}) into {} failed with status {status}: {}. Check the archive (it must hold images for {arch}) and the runtime, or import it by hand ({}), and run again.",
                        archive.file_name(),
                        runtime.name(),
                        remote::cli_output(&text).trim_end_matches('.'),
                        runtime.manual_import(&file),
                    ),
                )
                .class(FailureClass::RuntimeMissing));
            }
            if report.imported.len() < needed.len() {
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "The image archives could not be moved into place in {} on the node ({exit}): {}.",
                        node.upload_dir,
                        remote::cli_output(&text).trim_end_matches('.')
                    ),
                ));
            }
            for archive in needed {
                run.transcript.note(&format!(
                    "imported {} ({}) into {}: {}",
                    archive.file_name(),
                    archive.remote_name,
                    runtime.name(),
                    references(archive)
                ));
            }
            run.transcript.note(&format!(
                "imported {} image archive(s) in {:.2}s",
                needed.len(),
                started.elapsed().as_secs_f64()
            ));
            let Some(after) = report.after.filter(|a| a.listed) else {
                return Ok(false);
            };
            let missing: Vec<String> = needed
                .iter()
                .flat_map(|a| &a.images)
                .filter(|i| !after.has(&i.reference))
                .map(|i| i.reference.to_string())
                .collect();
            if !missing.is_empty() {
                return Err(StepError::new(
                    Phase::Preparing,
                    format!(
                        "The offline images were imported into {}, but it does not list {} afterwards, so keadm join would try to pull them. Check that the archives hold images for {arch} under those full names (registry/path:tag, as `ctr export` and `docker save` write them).",
                        runtime.name(),
                        missing.join(" and ")
                    ),
                ));
            }
            Ok(true)
        })
    }
}

/// `1 file`, `2 files`.
fn file_count(count: u64) -> String {
    match count {
        1 => "1 file".to_string(),
        n => format!("{n} files"),
    }
}

/// The images an archive provides, for notes: `a, b`.
fn references(archive: &ImageArchive) -> String {
    archive
        .images
        .iter()
        .map(|i| i.reference.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the import script needs to know of an archive.
fn archive_import(archive: &ImageArchive) -> ArchiveImport {
    ArchiveImport {
        file: archive.remote_name.clone(),
        images: archive
            .images
            .iter()
            .map(|image| {
                let in_archive = match &image.selector {
                    Selector::DockerTag(tag) => InArchive::DockerTag(tag.clone()),
                    Selector::OciRefName(name) => InArchive::OciRefName(name.clone()),
                    Selector::None => InArchive::Unnamed,
                };
                (image.reference.to_string(), in_archive)
            })
            .collect(),
    }
}
