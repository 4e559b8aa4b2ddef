//! The xz copy of a staged binary: made once per binary (named by its sha256, beside the
//! verified release in `BASE/bin/<arch>/`) and sent instead of the gzip tarball to nodes
//! that have `xz`. A Go binary such as keadm packs to about 0.2x with xz where the release's
//! gzip tarball is about 0.3x: on a slow link that is a third less time per node.
//!
//! Making it takes about 35 s of two cores for an 83 MB keadm, longer than a run of tens of
//! nodes takes to send them the release tarball, so nothing waits for it. Staging starts it
//! and hands out the binary at once; an upload that starts before the copy is whole sends
//! the next form (the release tarball), one that starts after sends the copy. The run does
//! not wait for it at its end either: a run makes it in a process of its own
//! ([`XzCopies::Process`]), which goes on when the run ends first, so the copy still lands
//! for the next run. It is written to a temporary that stays locked while it is written (a
//! run that starts meanwhile neither removes it nor starts a second copy), checked against
//! the sha256 it is to be named by, and renamed into place: the final name only ever holds
//! a whole copy, and a copy that fails is simply not there.
//!
//! liblzma is built from its bundled C source and linked statically (the `static`
//! feature), so the binary needs no liblzma on the control host.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use liblzma::stream::{Check, Filters, LzmaOptions, MtStreamBuilder};
use liblzma::write::XzEncoder;
use sha2::{Digest, Sha256};

use super::StageError;
use super::temporary::{self, Temporary};

/// xz's default preset, whose match finder and nice length are the best value per CPU
/// second; only its dictionary is raised (see [`DICT_SIZE`]).
const PRESET: u32 = 6;

/// A 16 MiB dictionary instead of the preset's 8 MiB: a stripped keadm v1.15.4 (66.3 MB)
/// packs to 0.198x instead of 0.201x, and a node needs about 17 MiB to unpack (xz -9's
/// 64 MiB would ask 65 MiB of small edge nodes for 0.197x). No BCJ filter, which would
/// pack x86 code to 0.193x: BusyBox's xz cannot unpack it.
const DICT_SIZE: u32 = 16 << 20;

/// Threads for the copy: liblzma's blocks are 3 dictionaries (48 MiB), so a binary of
/// keadm's size has two, and each thread costs about 200 MiB of memory on the control
/// host; more threads would only cost memory. Fewer would not spare the run's uploads
/// anything that [`lower_priority`] does not already: both threads yield to them.
const MAX_THREADS: usize = 2;

/// The nice value the copy runs at: the lowest priority there is.
const NICE: i32 = 19;

/// What makes keadm-batch the process that makes a copy: `keadm-batch xz-copy BINARY
/// SHA256`, the staging dir on its standard input. src/cli.rs reads it before clap, so it
/// is in no help, man page or completion.
pub const XZ_COPY_COMMAND: &str = "xz-copy";

/// Recompress only a binary that gzip already shrinks to this share of its size: an
/// incompressible one would cost CPU here and on every node for nothing.
pub(crate) const WORTH_IT_BELOW: f64 = 0.8;

/// A binary's xz copy in the staging dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XzCopy {
    pub path: PathBuf,
    pub size: u64,
}

/// How a binary's xz copy is made when no earlier run made it.
#[derive(Clone, Debug, Default)]
pub enum XzCopies {
    /// Not at all: nodes get the release tarball. For staging that sends nothing to a node
    /// (the dry run's check in a scratch directory, `batch bundle`).
    #[default]
    Off,
    /// By a process of its own ([`XZ_COPY_COMMAND`] of this executable, at the lowest CPU
    /// priority), which the run never waits for: it goes on after the run when the run
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

/// `keadm-<sha256>.xz`: the binary's digest names its copy, so a copy never outlives the
/// binary it was made from, and two versions never share one.
pub(crate) fn copy_name(binary_sha256: &str) -> String {
    format!("keadm-{binary_sha256}.xz")
}

/// A staged binary's xz copy: whole, being made, or none to be had (an incompressible
/// binary, [`XzCopies::Off`], a copy that failed). Clones share one state, and asking
/// never waits.
#[derive(Clone)]
pub struct XzSlot(Arc<Slot>);

struct Slot {
    /// Where the whole copy is, or will be.
    path: PathBuf,
    /// The binary it is made of, for messages.
    binary: PathBuf,
    state: Mutex<State>,
}

enum State {
    Ready(XzCopy),
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

impl XzSlot {
    /// No copy, and none coming.
    pub fn none() -> XzSlot {
        XzSlot(Arc::new(Slot {
            path: PathBuf::new(),
            binary: PathBuf::new(),
            state: Mutex::new(State::None),
        }))
    }

    /// The xz copy of `binary` in `dir`: the one an earlier run made, else one made `how`,
    /// started now (or already being made by an earlier run's process). A copy that cannot
    /// be started only costs bytes on the wire (nodes get the tarball), so it is a
    /// warning, not an error.
    pub(crate) fn start(dir: &Path, binary: &Path, binary_sha256: &str, how: &XzCopies) -> XzSlot {
        let path = dir.join(copy_name(binary_sha256));
        let state = if let Some(copy) = whole_copy(&path) {
            State::Ready(copy)
        } else if being_made_elsewhere(dir, binary_sha256) {
            log::info!(
                "the xz copy of {} is being made by an earlier run's process",
                binary.display()
            );
            State::Making(Maker::Elsewhere)
        } else {
            match begin(dir, binary, binary_sha256, how) {
                Ok(Some(maker)) => State::Making(maker),
                Ok(None) => State::None,
                Err(e) => {
                    log::warn!(
                        "Could not start making the xz copy of {} in {}: {e}. Nodes get the release tarball instead.",
                        binary.display(),
                        dir.display()
                    );
                    State::None
                }
            }
        };
        XzSlot(Arc::new(Slot {
            path,
            binary: binary.to_path_buf(),
            state: Mutex::new(state),
        }))
    }

    /// The copy, when it is whole now.
    pub fn ready(&self) -> Option<XzCopy> {
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
        if let Some(copy) = whole_copy(&slot.path) {
            if let Maker::Process(child) = maker {
                // Reaped if it has ended, so it does not linger as a zombie until the run
                // ends (one still ending after its rename does, harmlessly).
                let _ = child.try_wait();
            }
            log::info!(
                "the xz copy of {} is ready ({} bytes); uploads that start from now send it",
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
                            "Could not make the xz copy of {binary}: its process ended with {status}."
                        )
                    } else {
                        said.join(" ")
                    }
                }
                Err(e) => format!(
                    "Could not make the xz copy of {binary}: its process could not be waited for ({e})."
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
                format!("Could not make the xz copy of {binary}: {why}.")
            }
        };
        // It may have landed between the look above and the maker's end.
        *state = match whole_copy(&slot.path) {
            Some(copy) => State::Ready(copy),
            None => {
                log::warn!("{failure} Nodes get the release tarball instead.");
                State::None
            }
        };
        state
    }

    /// Waits until the copy is whole or has failed (tests).
    #[cfg(test)]
    pub(crate) fn wait(&self) -> Option<XzCopy> {
        let start = Instant::now();
        while self.being_made() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the xz copy took over 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.ready()
    }
}

impl std::fmt::Debug for XzSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.0.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Ready(_) => "ready",
            State::Making(_) => "being made",
            State::None => "none",
        };
        f.debug_struct("XzSlot")
            .field("path", &self.0.path)
            .field("state", &state)
            .finish()
    }
}

/// Two slots are the same copy when they name the same file.
impl PartialEq for XzSlot {
    fn eq(&self, other: &XzSlot) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.path == other.0.path
    }
}

impl Eq for XzSlot {}

/// The copy at `path`, if it is there: only a whole copy is ever renamed to that name.
fn whole_copy(path: &Path) -> Option<XzCopy> {
    let meta = fs::metadata(path).ok()?;
    (meta.is_file() && meta.len() > 0).then(|| XzCopy {
        size: meta.len(),
        path: path.to_path_buf(),
    })
}

/// Whether a process is making the copy of the binary with `binary_sha256` in `dir` (an
/// earlier run's, which outlived it): its temporary is there and locked.
fn being_made_elsewhere(dir: &Path, binary_sha256: &str) -> bool {
    let prefix = Temporary::Xz.tagged_prefix(binary_sha256);
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry.file_name().to_string_lossy().starts_with(&prefix) && temporary::in_use(&entry.path())
    })
}

/// Starts making the copy `how`; `None` when it is not to be made.
fn begin(
    dir: &Path,
    binary: &Path,
    binary_sha256: &str,
    how: &XzCopies,
) -> io::Result<Option<Maker>> {
    match how {
        XzCopies::Off => Ok(None),
        XzCopies::Process => {
            spawn_process(dir, binary, binary_sha256).map(|c| Some(Maker::Process(c)))
        }
        XzCopies::Thread(gate) => {
            let (dir, binary, sha256, gate) = (
                dir.to_path_buf(),
                binary.to_path_buf(),
                binary_sha256.to_string(),
                gate.clone(),
            );
            let handle = std::thread::Builder::new()
                .name("xz-copy".into())
                .spawn(move || {
                    gate.pass();
                    lower_priority();
                    make(&dir, &binary, &sha256).map_err(|e| e.to_string())
                })?;
            Ok(Some(Maker::Thread(handle)))
        }
    }
}

/// Starts `keadm-batch xz-copy` (this executable, through /proc/self/exe, so a binary
/// replaced or removed since this run started still runs as itself) with `dir` on its
/// standard input: `dir` may be reachable only through a descriptor of this process
/// (`/proc/self/fd/N`, see `dirs`), which the child then has as its own fd 0. Its
/// messages come back through a pipe, read when it has ended.
fn spawn_process(dir: &Path, binary: &Path, binary_sha256: &str) -> io::Result<Child> {
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
        .arg(XZ_COPY_COMMAND)
        .arg(inside)
        .arg(binary_sha256)
        .stdin(Stdio::from(dir))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
}

/// `keadm-batch xz-copy BINARY SHA256`, the process [`XzCopies::Process`] starts: makes
/// the xz copy of BINARY (a path inside the directory on its standard input) there.
pub fn make_xz_copy_here(binary: &Path, binary_sha256: &str) -> Result<(), StageError> {
    let dir = Path::new("/proc/self/fd/0");
    let failed = |error: String| StageError::XzCopy {
        binary: binary.to_path_buf(),
        error,
    };
    if !dir.is_dir() {
        return Err(failed(format!(
            "its standard input is not the staging directory (`keadm-batch {XZ_COPY_COMMAND}` is started by a run, not by hand)"
        )));
    }
    lower_priority();
    let dir = fs::read_link(dir).unwrap_or_else(|_| dir.to_path_buf());
    make(&dir, &dir.join(binary), binary_sha256)
        .map(|_| ())
        .map_err(|e| failed(format!("{e} (in {})", dir.display())))
}

/// Lowers the calling thread's CPU priority to the lowest there is. The copy only helps
/// uploads that start later, and later runs; the uploads under way (SSH's encryption
/// here, and on a host that is also a node, the nodes' unpacking) need the cores now,
/// and on two cores a copy at normal priority takes one of them from the run for about
/// 35 s. At nice 19 it gets the cores only when the run leaves them idle. On Linux the
/// nice value is per thread and inherited by the threads it then starts, so this covers
/// liblzma's encoder threads, started later. Raising one's own nice value needs no
/// privilege; should it fail all the same, the copy is still worth making.
fn lower_priority() {
    if let Err(e) = rustix::process::setpriority_process(None, NICE) {
        log::debug!("could not lower the xz copy's CPU priority: {e}");
    }
}

/// Compresses `binary` on up to [`MAX_THREADS`] cores into a locked temporary in `dir`,
/// hashing it on the way, and renames it to its name in `dir` once the binary proves to
/// have the sha256 it is named by. Returns its size.
/// CRC32 as the stream's check: every xz decoder has it (BusyBox's may lack CRC64), and
/// the node checks the binary's sha256 anyway.
fn make(dir: &Path, binary: &Path, binary_sha256: &str) -> io::Result<u64> {
    let start = Instant::now();
    let path = dir.join(copy_name(binary_sha256));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
    let mut lzma2 = LzmaOptions::new_preset(PRESET).map_err(io::Error::other)?;
    lzma2.dict_size(DICT_SIZE);
    let mut filters = Filters::new();
    filters.lzma2(&lzma2);
    let stream = MtStreamBuilder::new()
        .filters(filters)
        .threads(threads as u32)
        .check(Check::Crc32)
        .encoder()
        .map_err(io::Error::other)?;
    let tmp = Temporary::Xz.tagged_file_in(dir, binary_sha256, 0o600)?;
    temporary::hold(tmp.as_file())?;
    let mut encoder = XzEncoder::new_stream(BufWriter::new(tmp), stream);
    let mut input = Hashing {
        inner: File::open(binary)?,
        hasher: Sha256::new(),
    };
    io::copy(&mut input, &mut encoder)?;
    let digest = hex::encode(input.hasher.finalize());
    if digest != binary_sha256 {
        return Err(io::Error::other(format!(
            "the binary {} has sha256 {digest}, not the {binary_sha256} it was staged with, so it changed and no copy was kept",
            binary.display()
        )));
    }
    let mut tmp = encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
    tmp.flush()?;
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist(&path).map_err(|e| e.error)?;
    super::sync_dir(dir);
    log::info!(
        "made the xz copy of {} ({size} bytes) in {:.1}s",
        binary.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(size)
}

/// Hashes what is read through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::temporary::tests::names;
    use super::*;

    fn binary_in(dir: &Path, content: &[u8]) -> (PathBuf, String) {
        let binary = dir.join("keadm");
        fs::write(&binary, content).unwrap();
        let sha256 = hex::encode(Sha256::digest(content));
        (binary, sha256)
    }

    #[test]
    fn the_copy_unpacks_to_the_binary_and_is_reused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let (binary, sha256) = binary_in(dir.path(), &content);
        let how = XzCopies::Thread(Gate::opened());
        let copy = XzSlot::start(dir.path(), &binary, &sha256, &how)
            .wait()
            .unwrap();
        assert_eq!(copy.path, dir.path().join(format!("keadm-{sha256}.xz")));
        assert!(copy.size < content.len() as u64 / 4, "{copy:?}");
        let mut unpacked = Vec::new();
        liblzma::read::XzDecoder::new(File::open(&copy.path).unwrap())
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, content);
        // No temporary is left behind.
        assert_eq!(
            names(dir.path()),
            ["keadm".into(), format!("keadm-{sha256}.xz")]
        );
        // A second staging finds it by the digest and makes none, even where none would be
        // made.
        fs::write(&copy.path, b"cached").unwrap();
        let again = XzSlot::start(dir.path(), &binary, &sha256, &XzCopies::Off);
        assert_eq!(again.ready().unwrap().size, 6);
    }

    #[test]
    fn a_dir_that_cannot_be_written_means_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        let missing = dir.path().join("missing");
        let how = XzCopies::Thread(Gate::opened());
        let slot = XzSlot::start(&missing, &binary, &sha256, &how);
        assert_eq!(slot.wait(), None);
        assert!(!slot.being_made());
    }

    /// The copy is named by the sha256 staging verified: a binary that no longer has it
    /// (changed on disk since) gets no copy under that name.
    #[test]
    fn a_binary_that_changed_since_staging_gets_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, _) = binary_in(dir.path(), b"#!/bin/sh\necho keadm\n");
        let staged = "ab".repeat(32);
        let how = XzCopies::Thread(Gate::opened());
        assert_eq!(
            XzSlot::start(dir.path(), &binary, &staged, &how).wait(),
            None
        );
        assert_eq!(names(dir.path()), ["keadm"]);
    }

    #[test]
    fn off_makes_none_and_no_slot_is_ever_ready() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        let slot = XzSlot::start(dir.path(), &binary, &sha256, &XzCopies::Off);
        assert!(!slot.being_made());
        assert_eq!(slot.ready(), None);
        assert_eq!(names(dir.path()), ["keadm"]);
        assert_eq!(XzSlot::none().ready(), None);
    }

    /// A copy an earlier run's process is still making (its temporary is locked) is
    /// waited for, not made a second time, and used once it lands.
    #[test]
    fn a_copy_another_process_is_making_is_not_made_twice() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, sha256) = binary_in(dir.path(), b"#!/bin/sh\n");
        let busy = Temporary::Xz
            .tagged_file_in(dir.path(), &sha256, 0o600)
            .unwrap();
        temporary::hold(busy.as_file()).unwrap();
        let how = XzCopies::Thread(Gate::opened());
        let slot = XzSlot::start(dir.path(), &binary, &sha256, &how);
        assert!(slot.being_made());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(names(dir.path()).len(), 2, "no second copy was started");
        fs::write(dir.path().join(copy_name(&sha256)), b"landed").unwrap();
        drop(busy);
        assert_eq!(slot.ready().unwrap().size, 6);
    }

    #[test]
    fn the_command_line_knows_the_subcommand_by_this_name() {
        let args = ["keadm-batch", XZ_COPY_COMMAND, "keadm", "ab"].map(Into::into);
        match crate::cli::parse(args) {
            Ok(crate::options::Command::XzCopy { binary, sha256 }) => {
                assert_eq!((binary, sha256), (PathBuf::from("keadm"), "ab".to_string()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn by_hand_the_subcommand_says_what_it_is_for() {
        // Under the test harness, standard input is not a directory.
        if Path::new("/proc/self/fd/0").is_dir() {
            return;
        }
        let err = make_xz_copy_here(Path::new("keadm"), "ab")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is started by a run, not by hand"), "{err}");
    }
}
