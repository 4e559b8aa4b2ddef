//! The packed copies of a staged binary: a zstd copy and an xz copy, each made once per
//! binary (named by its sha256, beside the verified release in `BASE/bin/<arch>/`) and
//! sent instead of the gzip tarball to nodes that can unpack it, zstd first. A Go binary
//! such as keadm packs to about 0.2x with either, where the release's gzip tarball is
//! about 0.3x: on a slow link that is a third less time per node. The two differ in what
//! the node pays to unpack: xz costs a small edge CPU 1.6-1.8 CPU-s for an 83 MB keadm,
//! which on a small ARM board is slower than a 20 Mbit/s link brings the bytes, where zstd
//! costs a sixth of that for a copy about a tenth larger (docs/decisions.md has the
//! figures). So a node with `zstd` gets the zstd copy, one with only `xz` the xz copy; a
//! node in a site, whose copy crosses the uplink the site shares, gets the smaller one.
//!
//! Making a copy takes tens of seconds of the control host's cores, longer than a run of
//! tens of nodes takes to send them the release tarball, so nothing waits for it. Staging
//! starts both and hands out the binary at once; an upload that starts before a copy is
//! whole sends the next form the node can unpack (the other copy, else the release
//! tarball), one that starts after sends the copy. The run does not wait for them at its
//! end either: a run makes each in a process of its own ([`CopyMaking::Process`]), which
//! goes on when the run ends first, so the copy still lands for the next run. It is written
//! to a temporary that stays locked while it is written (a run that starts meanwhile
//! neither removes it nor starts a second copy), checked against the sha256 it is to be
//! named by, and renamed into place: the final name only ever holds a whole copy, and a
//! copy that fails is simply not there. A copy whose staging directory is removed stops
//! (`pack`'s `Wanted`), and one binary is packed as one format by one process at a time on the
//! host, whatever the staging directory (`pack`'s `host_turn`).
//!
//! liblzma and libzstd are built from their bundled C sources and linked statically, so
//! the binary needs neither on the control host.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::temporary::{self, Temporary};

mod pack;

pub use pack::make_copy_here;
use pack::{lower_priority, make};

/// What makes keadm-batch the process that makes a copy: `keadm-batch pack-copy FORMAT
/// BINARY SHA256`, the staging dir on its standard input. src/cli/mod.rs reads it before
/// clap, so it is in no help, man page or completion.
pub const PACK_COMMAND: &str = "pack-copy";

/// Recompress only a binary that gzip already shrinks to this share of its size: an
/// incompressible one would cost CPU here and on every node for nothing.
pub(crate) const WORTH_IT_BELOW: f64 = 0.8;

/// What a packed copy is packed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyFormat {
    /// zstd, level 19, long-distance matching in a 16 MiB window: about a tenth larger
    /// than the xz copy and a sixth of its CPU to unpack.
    Zstd,
    /// xz, preset 6 with a 16 MiB dictionary: the smallest, for nodes without `zstd`.
    Xz,
}

impl CopyFormat {
    /// Every format, the one a node that can unpack both gets first: zstd, since a node's
    /// CPU (a small board's share, or a host's cores shared by the nodes unpacking on it)
    /// sets the pace before the link does (bench/README.md). A node in a site gets the
    /// smaller copy instead: its copy crosses the uplink the site shares (the pipeline's
    /// upload.rs).
    pub const PREFERRED: [CopyFormat; 2] = [CopyFormat::Zstd, CopyFormat::Xz];

    /// Its name: the node's tool that unpacks it, and [`PACK_COMMAND`]'s FORMAT.
    pub fn name(self) -> &'static str {
        match self {
            CopyFormat::Zstd => "zstd",
            CopyFormat::Xz => "xz",
        }
    }

    /// The format called `name` ([`CopyFormat::name`]).
    pub fn named(name: &str) -> Option<CopyFormat> {
        CopyFormat::PREFERRED.into_iter().find(|f| f.name() == name)
    }

    fn extension(self) -> &'static str {
        match self {
            CopyFormat::Zstd => "zst",
            CopyFormat::Xz => "xz",
        }
    }

    fn temporary(self) -> Temporary {
        match self {
            CopyFormat::Zstd => Temporary::Zstd,
            CopyFormat::Xz => Temporary::Xz,
        }
    }
}

impl std::fmt::Display for CopyFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A binary's packed copy in the staging dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedCopy {
    pub format: CopyFormat,
    pub path: PathBuf,
    pub size: u64,
}

/// How a binary's packed copies are made when no earlier run made them.
#[derive(Clone, Debug, Default)]
pub enum CopyMaking {
    /// Not at all: nodes get the release tarball. For staging that sends nothing to a node
    /// (the dry run's check in a scratch directory, `batch bundle`).
    #[default]
    Off,
    /// Each by a process of its own ([`PACK_COMMAND`] of this executable, at the lowest
    /// CPU priority), which the run never waits for: it goes on after the run when the run
    /// ends first, and a Ctrl-C in the terminal stops it with the run. What a run uses.
    Process,
    /// By a thread of this process, at the lowest CPU priority, once the gate opens; it
    /// ends with the process. For the library's own tests, which hold the gate to see
    /// what is handed out while the copy is being made.
    Thread(Gate),
}

/// Holds back a copy made by a thread until it is opened.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// A gate that lets the copy start at once.
    pub fn opened() -> Gate {
        let gate = Gate::default();
        gate.open();
        gate
    }

    /// A gate that holds the copy back until [`Gate::open`].
    pub fn closed() -> Gate {
        Gate::default()
    }

    pub fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        changed.notify_all();
    }

    fn pass(&self) {
        let (open, changed) = &*self.0;
        let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = changed.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// `keadm-<sha256>.zst` or `.xz`: the binary's digest names its copy, so a copy never
/// outlives the binary it was made from, and two versions never share one.
pub(crate) fn copy_name(format: CopyFormat, binary_sha256: &str) -> String {
    format!("keadm-{binary_sha256}.{}", format.extension())
}

/// A staged binary's copy in one format: whole, being made, or none to be had (an
/// incompressible binary, [`CopyMaking::Off`], a copy that failed). Clones share one
/// state, and asking never waits.
#[derive(Clone)]
pub struct CopySlot(Arc<Slot>);

struct Slot {
    format: CopyFormat,
    /// Where the whole copy is, or will be.
    path: PathBuf,
    /// The binary it is made of, for messages.
    binary: PathBuf,
    state: Mutex<State>,
}

enum State {
    Ready(PackedCopy),
    Making(Maker),
    None,
}

/// What is making a copy.
enum Maker {
    /// A process this run started.
    Process(Child),
    /// A thread of this process.
    Thread(JoinHandle<Result<u64, String>>),
    /// A process an earlier run started, found at work (its temporary locked) at staging.
    Elsewhere,
}

impl CopySlot {
    /// The `format` copy of `binary` in `dir`: the one an earlier run made, else one made
    /// `how`, started now (or already being made by an earlier run's process). A copy that
    /// cannot be started only costs bytes on the wire (nodes get another form), so it is a
    /// warning, not an error.
    pub(crate) fn start(
        format: CopyFormat,
        dir: &Path,
        binary: &Path,
        binary_sha256: &str,
        how: &CopyMaking,
    ) -> CopySlot {
        let path = dir.join(copy_name(format, binary_sha256));
        let state = if let Some(copy) = whole_copy(format, &path) {
            State::Ready(copy)
        } else if being_made_elsewhere(format, dir, binary_sha256) {
            log::info!(
                "the {format} copy of {} is being made by an earlier run's process",
                binary.display()
            );
            State::Making(Maker::Elsewhere)
        } else {
            match begin(format, dir, binary, binary_sha256, how) {
                Ok(Some(maker)) => State::Making(maker),
                Ok(None) => State::None,
                Err(e) => {
                    log::warn!(
                        "Could not start making the {format} copy of {} in {}: {e}. Nodes get another form instead.",
                        binary.display(),
                        dir.display()
                    );
                    State::None
                }
            }
        };
        CopySlot(Arc::new(Slot {
            format,
            path,
            binary: binary.to_path_buf(),
            state: Mutex::new(state),
        }))
    }

    /// What the copy is packed with.
    pub fn format(&self) -> CopyFormat {
        self.0.format
    }

    /// The copy, when it is whole now.
    pub fn ready(&self) -> Option<PackedCopy> {
        match &*self.refreshed() {
            State::Ready(copy) => Some(copy.clone()),
            _ => None,
        }
    }

    /// Whether the copy is still being made, so a later upload may get it.
    pub fn being_made(&self) -> bool {
        matches!(*self.refreshed(), State::Making(_))
    }

    /// The id of the process this run started to make the copy, while it still runs.
    pub fn process_id(&self) -> Option<u32> {
        match &*self.refreshed() {
            State::Making(Maker::Process(child)) => Some(child.id()),
            _ => None,
        }
    }

    /// The state, brought up to date: a copy in place is ready, whoever made it; a maker
    /// that ended without one has failed, and says why once.
    fn refreshed(&self) -> std::sync::MutexGuard<'_, State> {
        let slot = &*self.0;
        let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        let State::Making(maker) = &mut *state else {
            return state;
        };
        let format = slot.format;
        if let Some(copy) = whole_copy(format, &slot.path) {
            if let Maker::Process(child) = maker {
                // Reaped if it has ended, so it does not linger as a zombie until the run
                // ends (one still ending after its rename does, harmlessly).
                let _ = child.try_wait();
            }
            log::info!(
                "the {format} copy of {} is ready ({} bytes); uploads that start from now send it to nodes with {format}",
                slot.binary.display(),
                copy.size
            );
            *state = State::Ready(copy);
            return state;
        }
        let binary = slot.binary.display();
        // What went wrong, as a full sentence.
        let failure = match maker {
            Maker::Elsewhere => return state,
            Maker::Process(child) => match child.try_wait() {
                Ok(None) => return state,
                Ok(Some(status)) => {
                    let mut said = String::new();
                    if let Some(stderr) = child.stderr.take() {
                        let _ = stderr.take(4096).read_to_string(&mut said);
                    }
                    // Its own error, printed as any keadm-batch error is.
                    let said: Vec<&str> = said
                        .lines()
                        .map(|l| l.trim_start_matches("keadm-batch: error: ").trim())
                        .filter(|l| !l.is_empty())
                        .collect();
                    if said.is_empty() {
                        format!(
                            "Could not make the {format} copy of {binary}: its process ended with {status}."
                        )
                    } else {
                        said.join(" ")
                    }
                }
                Err(e) => format!(
                    "Could not make the {format} copy of {binary}: its process could not be waited for ({e})."
                ),
            },
            Maker::Thread(handle) => {
                if !handle.is_finished() {
                    return state;
                }
                let State::Making(Maker::Thread(handle)) =
                    std::mem::replace(&mut *state, State::None)
                else {
                    unreachable!("matched above");
                };
                let why = match handle.join() {
                    Ok(Err(why)) => why,
                    Ok(Ok(_)) | Err(_) => "its thread ended without one".to_string(),
                };
                format!("Could not make the {format} copy of {binary}: {why}.")
            }
        };
        // It may have landed between the look above and the maker's end.
        *state = match whole_copy(format, &slot.path) {
            Some(copy) => State::Ready(copy),
            None => {
                log::warn!("{failure} Nodes get another form instead.");
                State::None
            }
        };
        state
    }

    /// Waits until the copy is whole or has failed (tests).
    #[cfg(test)]
    pub(crate) fn wait(&self) -> Option<PackedCopy> {
        let start = std::time::Instant::now();
        while self.being_made() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the {} copy took over 60 s",
                self.0.format
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.ready()
    }
}

impl std::fmt::Debug for CopySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.0.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Ready(_) => "ready",
            State::Making(_) => "being made",
            State::None => "none",
        };
        f.debug_struct("CopySlot")
            .field("format", &self.0.format)
            .field("path", &self.0.path)
            .field("state", &state)
            .finish()
    }
}

/// Two slots are the same copy when they name the same file.
impl PartialEq for CopySlot {
    fn eq(&self, other: &CopySlot) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.path == other.0.path
    }
}

impl Eq for CopySlot {}

/// The copy at `path`, if it is there: only a whole copy is ever renamed to that name.
fn whole_copy(format: CopyFormat, path: &Path) -> Option<PackedCopy> {
    let meta = fs::metadata(path).ok()?;
    (meta.is_file() && meta.len() > 0).then(|| PackedCopy {
        format,
        size: meta.len(),
        path: path.to_path_buf(),
    })
}

/// Whether a process is making the `format` copy of the binary with `binary_sha256` in
/// `dir` (an earlier run's, which outlived it): its temporary is there and locked.
fn being_made_elsewhere(format: CopyFormat, dir: &Path, binary_sha256: &str) -> bool {
    let prefix = format.temporary().tagged_prefix(binary_sha256);
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry.file_name().to_string_lossy().starts_with(&prefix) && temporary::in_use(&entry.path())
    })
}

/// Starts making the copy `how`; `None` when it is not to be made.
fn begin(
    format: CopyFormat,
    dir: &Path,
    binary: &Path,
    binary_sha256: &str,
    how: &CopyMaking,
) -> io::Result<Option<Maker>> {
    match how {
        CopyMaking::Off => Ok(None),
        CopyMaking::Process => {
            spawn_process(format, dir, binary, binary_sha256).map(|c| Some(Maker::Process(c)))
        }
        CopyMaking::Thread(gate) => {
            let (dir, binary, sha256, gate) = (
                dir.to_path_buf(),
                binary.to_path_buf(),
                binary_sha256.to_string(),
                gate.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("{format}-copy"))
                .spawn(move || {
                    gate.pass();
                    lower_priority();
                    make(format, &dir, &binary, &sha256).map_err(|e| e.to_string())
                })?;
            Ok(Some(Maker::Thread(handle)))
        }
    }
}

/// Starts `keadm-batch pack-copy FORMAT` (this executable, through /proc/self/exe, so a binary
/// replaced or removed since this run started still runs as itself) with `dir` on its
/// standard input: `dir` may be reachable only through a descriptor of this process
/// (`/proc/self/fd/N`, see `dirs`), which the child then has as its own fd 0. Its
/// messages come back through a pipe, read when it has ended.
fn spawn_process(
    format: CopyFormat,
    dir: &Path,
    binary: &Path,
    binary_sha256: &str,
) -> io::Result<Child> {
    let inside = binary.strip_prefix(dir).map_err(|_| {
        io::Error::other(format!(
            "the binary {} is not in {}",
            binary.display(),
            dir.display()
        ))
    })?;
    let dir = File::open(dir)?;
    Command::new("/proc/self/exe")
        .arg0("keadm-batch")
        .arg(PACK_COMMAND)
        .arg(format.name())
        .arg(inside)
        .arg(binary_sha256)
        .stdin(Stdio::from(dir))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
}

/// A locked temporary for the `format` copy of the binary with `binary_sha256` in `dir`,
/// as another process's copy still being made looks, while the returned file lives.
#[cfg(test)]
pub(crate) fn pretend_being_made(
    format: CopyFormat,
    dir: &Path,
    binary_sha256: &str,
) -> tempfile::NamedTempFile {
    let busy = format
        .temporary()
        .tagged_file_in(dir, binary_sha256, 0o600)
        .unwrap();
    temporary::hold(busy.as_file()).unwrap();
    busy
}

#[cfg(test)]
mod tests {
    use super::super::temporary::tests::names;
    use super::pack::ZSTD_WINDOW_LOG;
    use super::*;
    use sha2::{Digest, Sha256};

    fn binary_in(dir: &Path, content: &[u8]) -> (PathBuf, String) {
        let binary = dir.join("keadm");
        fs::write(&binary, content).unwrap();
        let sha256 = hex::encode(Sha256::digest(content));
        (binary, sha256)
    }

    /// What `path` unpacks to, as a node with the memory the format's window asks for
    /// unpacks it (zstd: a decoder that refuses a larger window).
    fn unpacked(format: CopyFormat, path: &Path) -> Vec<u8> {
        let mut unpacked = Vec::new();
        let file = File::open(path).unwrap();
        match format {
            CopyFormat::Xz => liblzma::read::XzDecoder::new(file)
                .read_to_end(&mut unpacked)
                .unwrap(),
            CopyFormat::Zstd => {
                let mut decoder = zstd::stream::read::Decoder::new(file).unwrap();
                decoder.window_log_max(ZSTD_WINDOW_LOG).unwrap();
                decoder.read_to_end(&mut unpacked).unwrap()
            }
        };
        unpacked
    }

    #[test]
    fn each_copy_unpacks_to_the_binary_and_is_reused_by_name() {
        for (format, extension) in [(CopyFormat::Zstd, "zst"), (CopyFormat::Xz, "xz")] {
            let dir = tempfile::tempdir().unwrap();
            let content: Vec<u8> = (0..200_000u32)
                .flat_map(|i| (i % 251).to_le_bytes())
                .collect();
            let (binary, sha256) = binary_in(dir.path(), &content);
            let how = CopyMaking::Thread(Gate::opened());
            let copy = CopySlot::start(format, dir.path(), &binary, &sha256, &how)
                .wait()
                .unwrap();
            let name = format!("keadm-{sha256}.{extension}");
            assert_eq!(copy.path, dir.path().join(&name));
            assert_eq!(copy.format, format);
            assert!(copy.size < content.len() as u64 / 4, "{copy:?}");
            assert!(unpacked(format, &copy.path) == content, "{format}");
            // No temporary is left behind.
            assert_eq!(names(dir.path()), ["keadm".into(), name]);
            // A second staging finds it by the digest and makes none, even where none
            // would be made.
            fs::write(&copy.path, b"cached").unwrap();
            let again = CopySlot::start(format, dir.path(), &binary, &sha256, &CopyMaking::Off);
            assert_eq!(again.ready().unwrap().size, 6);
        }
    }

    /// The zstd frame says how large the binary is and asks for no larger window than
    /// [`ZSTD_WINDOW_LOG`], however large the binary: a small node's memory is the limit.
    #[test]
    fn the_zstd_copy_records_its_size_and_keeps_to_its_window() {
        let dir = tempfile::tempdir().unwrap();
        // Larger than the window, and repeating beyond it, so long matches would pay.
        let block: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let content: Vec<u8> = block.iter().cycle().take(20 << 20).copied().collect();
        let (binary, sha256) = binary_in(dir.path(), &content);
        let how = CopyMaking::Thread(Gate::opened());
        let copy = CopySlot::start(CopyFormat::Zstd, dir.path(), &binary, &sha256, &how)
            .wait()
            .unwrap();
        let packed = fs::read(&copy.path).unwrap();
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&packed).ok(),
            Some(Some(content.len() as u64))
        );
        assert!(unpacked(CopyFormat::Zstd, &copy.path) == content);
    }

    #[test]
    fn a_dir_that_cannot_be_written_means_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        let missing = dir.path().join("missing");
        let how = CopyMaking::Thread(Gate::opened());
        for format in CopyFormat::PREFERRED {
            let slot = CopySlot::start(format, &missing, &binary, &sha256, &how);
            assert_eq!(slot.wait(), None);
            assert!(!slot.being_made());
        }
    }

    /// The copy is named by the sha256 staging verified: a binary that no longer has it
    /// (changed on disk since) gets no copy under that name.
    #[test]
    fn a_binary_that_changed_since_staging_gets_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, _) = binary_in(dir.path(), b"#!/bin/sh\necho keadm\n");
        let staged = "ab".repeat(32);
        let how = CopyMaking::Thread(Gate::opened());
        for format in CopyFormat::PREFERRED {
            assert_eq!(
                CopySlot::start(format, dir.path(), &binary, &staged, &how).wait(),
                None
            );
            assert_eq!(names(dir.path()), ["keadm"]);
        }
    }

    #[test]
    fn off_makes_none_and_no_slot_is_ever_ready() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        for format in CopyFormat::PREFERRED {
            let slot = CopySlot::start(format, dir.path(), &binary, &sha256, &CopyMaking::Off);
            assert!(!slot.being_made());
            assert_eq!(slot.ready(), None);
            assert_eq!(names(dir.path()), ["keadm"]);
        }
    }

    /// A copy an earlier run's process is still making (its temporary is locked) is
    /// waited for, not made a second time, and used once it lands.
    #[test]
    fn a_copy_another_process_is_making_is_not_made_twice() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        let busy = Temporary::Zstd
            .tagged_file_in(dir.path(), &sha256, 0o600)
            .unwrap();
        temporary::hold(busy.as_file()).unwrap();
        let how = CopyMaking::Thread(Gate::closed());
        let slot = CopySlot::start(CopyFormat::Zstd, dir.path(), &binary, &sha256, &how);
        assert!(slot.being_made());
        // The other format's copy is its own: an xz copy being made is not this one.
        let xz = CopySlot::start(
            CopyFormat::Xz,
            dir.path(),
            &binary,
            &sha256,
            &CopyMaking::Off,
        );
        assert!(!xz.being_made());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(names(dir.path()).len(), 2, "no second copy was started");
        fs::write(
            dir.path().join(copy_name(CopyFormat::Zstd, &sha256)),
            b"landed",
        )
        .unwrap();
        drop(busy);
        assert_eq!(slot.ready().unwrap().size, 6);
    }

    #[test]
    fn the_command_line_knows_the_subcommand_by_this_name() {
        for format in CopyFormat::PREFERRED {
            let args = ["keadm-batch", PACK_COMMAND, format.name(), "keadm", "ab"].map(Into::into);
            match crate::cli::parse(args) {
                Ok(crate::options::Command::PackCopy {
                    format: parsed,
                    binary,
                    sha256,
                }) => {
                    assert_eq!(parsed, format);
                    assert_eq!((binary, sha256), (PathBuf::from("keadm"), "ab".to_string()));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn by_hand_the_subcommand_says_what_it_is_for() {
        // Under the test harness, standard input is not a directory.
        if Path::new("/proc/self/fd/0").is_dir() {
            return;
        }
        let err = make_copy_here(CopyFormat::Zstd, Path::new("keadm"), "ab")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is started by a run, not by hand"), "{err}");
    }
}
