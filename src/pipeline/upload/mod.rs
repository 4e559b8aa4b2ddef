//! Uploads: which files the node needs, which it has already (sidecar match, or its own
//! sha256 under `--verify-remote`), a packed copy of the binary (once it is made) or the
//! release tarball instead of the binary when that saves bytes (the zstd copy to a node
//! with `zstd`, the xz copy to one with `xz`, then the tarball, then the binary itself),
//! the last upload deferred into the run's own channel, and what to say when an upload
//! fails (including a full disk).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::privilege::{exec_as, password_of};
use super::{Run, StepError};
use crate::arch::Arch;
use crate::diagnosis::FailureClass;
use crate::node_text::{CappedBuffer, MESSAGE_CHARS, STEP_OUTPUT_CAP, one_line};
use crate::outcome::Phase;
use crate::plan::KeadmSource;
use crate::remote::{self, Encoding, NodeFacts, Privilege, Sha256Tool};
use crate::stage::{CopyFormat, Gzipped, PackedCopy, StagedBinary, Stager};
use crate::transport::{Connection, RemoteExit, TransportError};

/// An uploaded file to rename into place: (temporary name, final name, sha256).
pub(super) type Move = (String, String, String);

/// The exit status of a script whose uploads could not be moved into place.
pub(super) const FINALIZE_FAILED: i32 = 125;

/// The script line that moves `moves` into place in `dir` before anything uses them,
/// exiting [`FINALIZE_FAILED`] when it cannot; empty when there is nothing to move.
pub(super) fn finalize_line(dir: &str, moves: &[Move]) -> String {
    if moves.is_empty() {
        return String::new();
    }
    remote::finalize_script(dir, moves, FINALIZE_FAILED)
}

/// The exit status of the run's script when receiving the deferred upload failed.
pub(super) const RECEIVE_FAILED: i32 = 201;

/// What arrives in the run's script before keadm runs: the deferred upload, or the copy
/// a node of the site relays. `script` puts it at the temporary name of `to_move` or
/// exits `failed`.
pub(super) struct Arrival {
    pub(super) script: String,
    pub(super) failed: i32,
    pub(super) to_move: Move,
}

/// The last upload, sent on the run's stdin instead of its own channel, in the smallest
/// form the node can unpack: a packed copy of the binary (unpacked to `tmp`), else the
/// release tarball (checked, then the binary unpacked from it to `tmp`), else as it is.
pub(super) struct Deferred {
    pub(super) upload: Upload,
    pub(super) tmp: String,
    /// Where the release tarball lands on the node until the binary is unpacked from it.
    tar_tmp: String,
}

impl Deferred {
    /// What goes on the run's stdin: the local file and its size.
    pub(super) fn sent(&self) -> (&Path, u64) {
        let upload = &self.upload;
        match upload.form() {
            Form::Packed(copy, _) => (&copy.path, copy.size),
            Form::Tarball(tarball) => (&tarball.path, tarball.size),
            Form::Itself => (&upload.local, upload.size),
        }
    }

    /// The script that receives it into `tmp` in `dir`, failing (exit 3 for a packed copy
    /// and the tarball) when it cannot.
    pub(super) fn receive_script(&self, dir: &str) -> String {
        let upload = &self.upload;
        match upload.form() {
            Form::Packed(copy, hasher) => remote::receive_packed_script(
                (dir, &self.tmp),
                &upload.sha256,
                upload.size,
                hasher,
                copy.format.name(),
            ),
            Form::Tarball(tarball) => remote::receive_tarball_script(
                dir,
                &self.tar_tmp,
                &self.tmp,
                &tarball.sha512,
                &tarball.entry,
                upload.size,
            ),
            Form::Itself => remote::receive_script(
                dir,
                &self.tmp,
                upload.mode,
                upload.size,
                upload.check(),
                Encoding::Plain,
            ),
        }
    }

    /// For the transcript, once the node has it: what it was sent as, when that was not
    /// the file itself.
    pub(super) fn sent_note(&self) -> Option<String> {
        let upload = &self.upload;
        match upload.form() {
            Form::Packed(copy, _) => Some(format!(
                "sent the {} copy of the binary ({} bytes for a {}-byte binary) in the run's channel; the node checked the binary's sha256 before moving it into place",
                copy.format, copy.size, upload.size
            )),
            Form::Tarball(tarball) => Some(format!(
                "sent the release tarball ({} bytes for a {}-byte binary) in the run's channel; the node checked its sha512 and unpacked {}",
                tarball.size, upload.size, tarball.entry
            )),
            Form::Itself => None,
        }
    }

    /// The smaller form it is sent as, for messages: a packed copy or the release
    /// tarball; none when it is sent as it is.
    pub(super) fn packed_as(&self) -> Option<String> {
        match self.upload.form() {
            Form::Packed(..) => Some(format!("{} of the binary", self.upload.sent_as())),
            Form::Tarball(_) => Some(self.upload.sent_as()),
            Form::Itself => None,
        }
    }

    /// How it arrives in the run's script in `dir`.
    pub(super) fn arrival(&self, dir: &str) -> Arrival {
        Arrival {
            script: self.receive_script(dir),
            failed: RECEIVE_FAILED,
            to_move: self.to_move(),
        }
    }

    /// Its rename into place, once received.
    pub(super) fn to_move(&self) -> Move {
        let upload = &self.upload;
        (self.tmp.clone(), upload.name.clone(), upload.sha256.clone())
    }
}

/// The form an upload goes as: its best packed copy that the node can unpack (with what
/// the node checks the binary in it with), else the release tarball, else the file itself.
/// [`Upload::next_form`] takes the first away.
enum Form<'a> {
    Packed(&'a PackedCopy, Sha256Tool),
    Tarball(&'a TarballSource),
    Itself,
}

/// A file to put on the node, unless it is there already.
#[derive(Debug)]
pub(super) struct Upload {
    pub(super) local: PathBuf,
    pub(super) name: String,
    pub(super) mode: u32,
    pub(super) size: u64,
    sha256: String,
    /// The binary's packed copies to send instead, best first, each with what the node
    /// checks the binary in it with: those the node can unpack, whole when the upload was
    /// planned.
    copies: Vec<(PackedCopy, Sha256Tool)>,
    /// A copy the node could unpack, better than any in `copies`, that was still being
    /// made when the upload was planned (a cold run), so the upload goes as the next form.
    pending: Option<CopyFormat>,
    /// The release tarball to send instead, when it is much smaller than the file.
    tarball: Option<TarballSource>,
    /// A gzip-compressed copy to send instead (image archives), when the node has gzip.
    gzipped: Option<Gzipped>,
    /// What the node checks the file's sha256 with once it has it, before anything moves
    /// it into place (image archives, which a runtime imports as they are).
    checked: Option<Sha256Tool>,
    /// Shell to run in the same channel once the file is in (the site relay's line that
    /// serves it); it runs only when the file arrived whole and checked.
    then: String,
}

impl Upload {
    /// A file sent as it is.
    pub(super) fn plain(
        local: PathBuf,
        name: String,
        mode: u32,
        size: u64,
        sha256: String,
    ) -> Upload {
        Upload {
            local,
            name,
            mode,
            size,
            sha256,
            copies: Vec::new(),
            pending: None,
            tarball: None,
            gzipped: None,
            checked: None,
            then: String::new(),
        }
    }

    /// With `script` run once the file is in, in the same channel.
    pub(super) fn then(mut self, script: String) -> Upload {
        self.then = script;
        self
    }

    /// `receive` (a script that receives this file), then what runs once it is in.
    fn and_then(&self, receive: String) -> String {
        if self.then.is_empty() {
            return receive;
        }
        format!(
            "{{ {receive}
}} || exit $?
{}",
            self.then
        )
    }

    /// Sent as `gzipped` where the node can decompress it.
    pub(super) fn or_gzipped(mut self, gzipped: Option<Gzipped>) -> Upload {
        self.gzipped = gzipped;
        self
    }

    /// The sha256 of the file itself.
    pub(super) fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Checked by its sha256 on the node, with `hasher`, in whichever form it is sent.
    pub(super) fn checked_with(mut self, hasher: Sha256Tool) -> Upload {
        self.checked = Some(hasher);
        self
    }

    /// What the receiving script checks the file's sha256 against, and with what.
    fn check(&self) -> Option<(&str, Sha256Tool)> {
        self.checked.map(|hasher| (self.sha256.as_str(), hasher))
    }

    /// The error for an upload the node removed because it did not hash to what was sent,
    /// when the receiving script's `output` says so.
    fn arrived_altered(&self, output: &str) -> Option<StepError> {
        self.checked?;
        let got = remote::received_sha256(output)?;
        Some(StepError::new(
            Phase::Uploading,
            format!(
                "The file {} arrived on the node with sha256 {}, but what was sent has sha256 {}, so the node removed it and nothing used it. Check the node's disk and memory, and run again.",
                self.name,
                if got.is_empty() {
                    "(none: the node's hash tool printed nothing)"
                } else {
                    &got
                },
                self.sha256
            ),
        ))
    }

    /// The form it goes as now.
    fn form(&self) -> Form<'_> {
        match (self.copies.first(), &self.tarball) {
            (Some((copy, hasher)), _) => Form::Packed(copy, *hasher),
            (None, Some(tarball)) => Form::Tarball(tarball),
            (None, None) => Form::Itself,
        }
    }

    /// For messages: what it goes as.
    pub(super) fn sent_as(&self) -> String {
        match self.form() {
            Form::Packed(copy, _) => format!("the {} copy", copy.format),
            Form::Tarball(_) => "the release tarball".to_string(),
            Form::Itself => "the binary".to_string(),
        }
    }

    /// The same upload without the form it was just sent as (its best packed copy, else
    /// the release tarball), once the node could not unpack that: the next form goes next.
    pub(super) fn next_form(mut self) -> Upload {
        if self.copies.is_empty() {
            self.tarball = None;
        } else {
            self.copies.remove(0);
        }
        self
    }
}

/// A smaller form of a file on its way to the node in a channel of its own (a gzipped
/// image archive; keadm's forms ride in the run's channel): what to send, and the script
/// that unpacks it to the temporary name (exit 3 when it cannot).
struct Packed<'a> {
    path: &'a Path,
    size: u64,
    /// The bytes the upload deadline allows for (the node may unpack more than is sent).
    deadline_bytes: u64,
    script: String,
    /// For the transcript, after a success: what was sent and what the node checked.
    sent: String,
    /// For the transcript, after a failure: what went wrong, then what is sent next.
    failed: String,
    instead: &'static str,
}

/// The release tarball a binary came from, and where the binary sits inside it.
#[derive(Debug)]
struct TarballSource {
    path: PathBuf,
    size: u64,
    sha512: String,
    entry: String,
}

/// Send the tarball only when it saves at least this share of the bytes: an
/// incompressible binary would only cost the node gunzip time.
const TARBALL_MAX_RATIO: f64 = 0.8;

/// The tarball of `staged`, if sending it beats sending the binary.
fn tarball_source(staged: &StagedBinary) -> Option<TarballSource> {
    let size = staged.tarball_size;
    ((size as f64) < TARBALL_MAX_RATIO * staged.binary_size as f64).then(|| TarballSource {
        path: staged.tarball.clone(),
        size,
        sha512: staged.tarball_sha512.clone(),
        entry: staged.tarball_entry.clone(),
    })
}

/// For a node in a site, whose copy crosses the uplink the site's nodes share (the one
/// copy the relay sends there, or every node's with `--relay off`): the packed copies
/// ready now, smallest first, so the xz copy goes before the zstd copy, which is about a
/// tenth larger. The bytes on a shared uplink are what a site waits for; what the node
/// pays to unpack xz instead of zstd runs while the bytes arrive (bench/README.md, the
/// sites' table for issue 47). A node in no site keeps [`CopyFormat::PREFERRED`]'s order.
fn smallest_first(copies: &mut [(PackedCopy, Sha256Tool)]) {
    copies.sort_by_key(|(copy, _)| copy.size);
}

/// Whether any package staged so far is worth sending as its tarball (then the prepare
/// step asks the node for tar, gzip and sha512sum).
pub(super) fn tarball_may_pay_off(stager: &Stager) -> bool {
    Arch::ALL
        .iter()
        .filter_map(|arch| stager.staged(*arch))
        .any(|staged| tarball_source(&staged).is_some())
}

/// Opens a local file to send, or says which one cannot be read.
pub(super) fn open_local(path: &Path) -> Result<File, StepError> {
    File::open(path).map_err(|e| {
        StepError::new(
            Phase::Uploading,
            format!("Cannot open the local file {}: {e}.", path.display()),
        )
    })
}

pub(super) fn upload_error(upload: &Upload, err: TransportError) -> StepError {
    StepError::transport(
        Phase::Uploading,
        format!("Cannot upload the file {}.", upload.name),
        err,
    )
}

impl Run<'_, '_> {
    /// The files to upload: copyFrom files and, unless keadmBinDir says keadm is there
    /// already, the staged keadm for the node's arch.
    pub(super) fn wanted_uploads(&mut self, facts: &NodeFacts) -> Result<Vec<Upload>, StepError> {
        // The node's facts are in: its site's other nodes need not wait for it any more.
        self.relay_knows_its_needs();
        let node = self.node;
        let mut uploads = Vec::new();
        for file in &node.copy_files {
            uploads.push(Upload::plain(
                file.path.clone(),
                file.name.clone(),
                file.mode,
                file.size,
                file.sha256.clone(),
            ));
        }
        if node.keadm == KeadmSource::Staged {
            let arch = self.node_arch(facts)?;
            let stager = self.ctx.stager.ok_or_else(|| {
                StepError::new(Phase::Preparing, "No keadm binary was staged for this run.")
                    .class(FailureClass::Arch)
            })?;
            let staged = stager.for_node(arch).map_err(|e| {
                StepError::new(Phase::Preparing, e.to_string()).class(FailureClass::Arch)
            })?;
            // What is ready when this node's upload is planned, of what the node can
            // unpack: on a cold run the copies are still being made, and the node gets the
            // next form rather than wait.
            let mut copies = Vec::new();
            let mut pending = None;
            for slot in &staged.copies {
                let Some(hasher) = facts.packed_hasher(slot.format().name()) else {
                    continue;
                };
                match slot.ready() {
                    Some(copy) => copies.push((copy, hasher)),
                    None if copies.is_empty() && pending.is_none() && slot.being_made() => {
                        pending = Some(slot.format());
                    }
                    None => {}
                }
            }
            if node.site.is_some() {
                smallest_first(&mut copies);
            }
            uploads.push(Upload {
                local: staged.binary.clone(),
                name: "keadm".into(),
                mode: 0o755,
                size: staged.binary_size,
                sha256: staged.binary_sha256.clone(),
                copies,
                pending,
                tarball: tarball_source(&staged).filter(|_| facts.can_unpack_tarball()),
                gzipped: None,
                checked: None,
                then: String::new(),
            });
        }
        Ok(uploads)
    }

    /// The node's arch, from the `uname -m` the prepare step learned.
    pub(super) fn node_arch(&mut self, facts: &NodeFacts) -> Result<Arch, StepError> {
        let machine = facts.machine.clone().unwrap_or_default();
        let arch = Arch::from_uname(&machine).map_err(|e| {
            StepError::new(Phase::Preparing, e.to_string()).class(FailureClass::Arch)
        })?;
        self.arch = Some(arch);
        Ok(arch)
    }

    /// Whether `upload` is on the node already (its sidecar matches, or under
    /// `--verify-remote` its own sha256 does); if so, says so and counts it as skipped.
    pub(super) fn already_there(&mut self, facts: &NodeFacts, upload: &Upload) -> bool {
        let already = self.node_has(facts, upload);
        if already {
            self.uploads_skipped += 1;
            self.transcript.note(&format!(
                "{} is already on the node (sha256 {}), not uploaded",
                upload.name,
                &upload.sha256[..12]
            ));
        }
        already
    }

    /// Whether `upload` is on the node already, as [`Run::already_there`] judges it, without
    /// saying so or counting it.
    pub(super) fn node_has(&self, facts: &NodeFacts, upload: &Upload) -> bool {
        if self.ctx.verify_remote {
            facts
                .computed_sha256
                .iter()
                .any(|(name, sha)| *name == upload.name && *sha == upload.sha256)
        } else {
            facts.existing.iter().any(|f| {
                f.name == upload.name && f.size == upload.size && f.sidecar == upload.sha256
            })
        }
    }

    /// The temporary name this run uploads `name` to.
    pub(super) fn temp_name(&self, name: &str) -> String {
        remote::temp_name(name, &self.ctx.run_token, self.node.index)
    }

    /// `upload`, to ride in the run's channel.
    pub(super) fn defer(&mut self, upload: Upload) -> Deferred {
        if let Some(format) = upload.pending {
            self.transcript.note(&format!(
                "the {format} copy of keadm is still being made on this machine, so the node gets {} instead of waiting for it",
                upload.sent_as()
            ));
        }
        Deferred {
            tmp: self.temp_name(&upload.name),
            tar_tmp: self.temp_name(&format!("{}.tar.gz", upload.name)),
            upload,
        }
    }
}

mod send;
