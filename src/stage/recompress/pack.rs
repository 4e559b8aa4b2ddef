//! Making one packed copy, in the `pack-copy` process ([`make_copy_here`]): the encoder
//! settings, the host-wide turn per binary and format, the priority the process leaves the
//! run's nodes, and the writing, checked against the sha256 it is to be named by.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use liblzma::stream::{Check, Filters, LzmaOptions, MtStreamBuilder};
use liblzma::write::XzEncoder;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::super::StageError;
use super::super::temporary;
use super::{CopyFormat, PACK_COMMAND, copy_name};

/// xz's default preset, whose match finder and nice length are the best value per CPU
/// second; only its dictionary is raised (see [`DICT_SIZE`]).
const PRESET: u32 = 6;

/// A 16 MiB dictionary instead of the preset's 8 MiB: a stripped keadm v1.15.4 (66.3 MB)
/// packs to 0.198x instead of 0.201x, and a node needs about 17 MiB to unpack (xz -9's
/// 64 MiB would ask 65 MiB of small edge nodes for 0.197x). No BCJ filter, which would
/// pack x86 code to 0.193x: BusyBox's xz cannot unpack it.
const DICT_SIZE: u32 = 16 << 20;

/// zstd's level 19, the highest before `--ultra`'s, whose memory a node would pay for:
/// the copy is made once per binary, so its making may be slow; only unpacking it is
/// paid on every node, and zstd unpacks at about the same speed whatever the level.
const ZSTD_LEVEL: i32 = 19;

/// A 2^24-byte (16 MiB) window with long-distance matching: the node needs about as
/// much memory to unpack as for the xz copy (17 MiB), where `--long=27` would ask up to
/// 128 MiB of small edge nodes (measured in docs/decisions.md). Windows up to 2^27
/// unpack with a plain `zstd -d`, so the node needs no `--long` flag.
pub(super) const ZSTD_WINDOW_LOG: u32 = 24;

/// Threads for a copy: liblzma's blocks are 3 dictionaries (48 MiB), so a binary of
/// keadm's size has two, and each thread costs about 200 MiB of memory on the control
/// host; more threads would only cost memory. zstd at level 19 takes about 230 MiB with
/// two. Fewer would not spare the run's uploads
/// anything that [`lower_priority`] does not already: both threads yield to them.
const MAX_THREADS: usize = 2;

/// The nice value a copy is made at: the lowest priority there is.
const NICE: i32 = 19;

/// `keadm-batch pack-copy FORMAT BINARY SHA256`, the process [`CopyMaking::Process`]
/// starts: makes the `format` copy of BINARY (a path inside the directory on its standard
/// input) there.
pub fn make_copy_here(
    format: CopyFormat,
    binary: &Path,
    binary_sha256: &str,
) -> Result<(), StageError> {
    let dir = Path::new("/proc/self/fd/0");
    let failed = |error: String| StageError::PackedCopy {
        format,
        binary: binary.to_path_buf(),
        error,
    };
    if !dir.is_dir() {
        return Err(failed(format!(
            "its standard input is not the staging directory (`keadm-batch {PACK_COMMAND}` is started by a run, not by hand)"
        )));
    }
    leave_the_run_s_cpu_share();
    lower_priority();
    let wanted = Wanted::open(dir).map_err(|e| failed(e.to_string()))?;
    let dir = fs::read_link(dir).unwrap_or_else(|_| dir.to_path_buf());
    // The encoders take the binary in blocks of tens of MiB and then compress for many
    // seconds without reading more, so a check in their loop would come late. This
    // process is the copy's alone: it ends as soon as the copy is no longer wanted
    // (its temporary went with the directory).
    let stopped = failed(format!(
        "its staging directory {} was removed, so the copy is no longer wanted and was stopped",
        dir.display()
    ));
    wanted.watch(move || {
        crate::console::line(format_args!("keadm-batch: error: {stopped}"));
        std::process::exit(1);
    });
    make(format, &dir, &dir.join(binary), binary_sha256)
        .map(|_| ())
        .map_err(|e| failed(format!("{e} (in {})", dir.display())))
}

/// Whether a copy is still wanted: its staging directory is still there. `rm -rf` of it
/// (an operator's, a test's scratch directory) leaves the copy writing into a file
/// nobody can reach; once removed, the directory's link count is 0.
struct Wanted {
    dir: File,
}

/// How often a copy looks whether it is still wanted.
const WANTED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Wanted {
    fn open(dir: &Path) -> io::Result<Wanted> {
        Ok(Wanted {
            dir: File::open(dir)?,
        })
    }

    fn gone(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.dir.metadata().is_ok_and(|meta| meta.nlink() == 0)
    }

    /// Runs `stop` once the directory is gone, from a thread of its own that looks every
    /// [`WANTED_EVERY`].
    fn watch(self, stop: impl FnOnce() + Send + 'static) {
        std::thread::spawn(move || {
            while !self.gone() {
                std::thread::sleep(WANTED_EVERY);
            }
            stop();
        });
    }
}

/// The host-wide turn to pack the binary with `binary_sha256` as `format`: one copy of
/// one binary is made at a time on this host, whatever the staging directory (two
/// operators' runs, a test run's scratch staging), since each takes every core it can get
/// for tens of seconds to minutes. Waits, looking every [`WANTED_EVERY`] whether the
/// copy is still wanted, while another process has it. The lock is a file in a directory
/// only this user can change (`/run/keadm-batch` for root, else `$XDG_RUNTIME_DIR`'s),
/// so another local user can neither plant a link there nor hold our turn. Where there
/// is no such directory the copy goes ahead without one: it is only worth making, never
/// needed. The turn lasts as long as the returned file is open.
fn host_turn(format: CopyFormat, binary_sha256: &str, wanted: &Wanted) -> io::Result<Option<File>> {
    let Some(dir) = host_lock_dir() else {
        return Ok(None);
    };
    let path = dir.join(format!("{}-{binary_sha256}.lock", format.name()));
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(&path)?;
    let mut said = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        if !said {
            log::info!(
                "waiting for another process on this host to finish packing the same binary as {format} ({})",
                path.display()
            );
            said = true;
        }
        if wanted.gone() {
            return Err(io::Error::other(
                "its staging directory was removed while it waited for its turn, so the copy is no longer wanted",
            ));
        }
        std::thread::sleep(WANTED_EVERY);
    }
}

/// Where [`host_turn`] keeps its locks, created owner-only and checked as staging
/// directories are; `None` when there is no such place.
fn host_lock_dir() -> Option<PathBuf> {
    let dir = if super::super::effective_uid() == 0 {
        PathBuf::from("/run/keadm-batch")
    } else {
        PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?).join("keadm-batch")
    };
    if !dir.is_absolute() {
        return None;
    }
    super::super::dirs::ensure_private_dir(&dir)
        .inspect_err(|e| log::debug!("packed copies are made without a host-wide turn: {e}"))
        .ok()
}

/// Moves this copy process out of the run's scheduling group, into a session of its own
/// whose group has the lowest weight there is. Linux's autogroup (on by default where
/// processes are not in cgroups of their own) shares the CPU fairly between sessions
/// first and only then by nice value inside each: at nice 19 in the run's session the
/// copy still got a whole session's share against every other session, such as each
/// sshd session of a node on the same machine or the operator's other work. In a session
/// of its own at autogroup nice 19 it gets the cores only when they are idle, as nice 19
/// promises. Also outside the terminal's process group, so a Ctrl-C that stops the run
/// leaves the copy to finish, as a run that ends does (it is renamed into place only when
/// whole). Without autogroup the write fails and nice 19 alone is the priority.
fn leave_the_run_s_cpu_share() {
    if let Err(e) = rustix::process::setsid() {
        // Not on to the autogroup: the copy would lower the run's own session with it.
        log::debug!("could not start a session of its own for the copy: {e}");
        return;
    }
    // The kernel takes one autogroup nice change a tenth of a second; the other copy may
    // have just made one.
    for _ in 0..5 {
        match fs::write("/proc/self/autogroup", NICE.to_string()) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                std::thread::sleep(std::time::Duration::from_millis(110));
            }
            Err(e) => return log::debug!("could not lower the copy's autogroup priority: {e}"),
            Ok(()) => break,
        }
    }
    // What the kernel now says, for `-v` (and the test that the copy leaves the run's share).
    log::debug!(
        "the copy runs in a session of its own (session {}, process {}), in {}",
        rustix::process::getsid(None).map_or(0, |sid| sid.as_raw_nonzero().get()),
        std::process::id(),
        fs::read_to_string("/proc/self/autogroup").map_or_else(
            |e| format!("no autogroup ({e})"),
            |group| group.trim().to_string()
        )
    );
}

/// Lowers the calling thread's CPU priority to the lowest there is. A copy only helps
/// uploads that start later, and later runs; the uploads under way (SSH's encryption
/// here, and on a host that is also a node, the nodes' unpacking) need the cores now,
/// and on two cores a copy at normal priority takes one of them from the run for about
/// 35 s. At nice 19 it gets the cores only when the run leaves them idle. On Linux the
/// nice value is per thread and inherited by the threads it then starts, so this covers
/// liblzma's encoder threads, started later. Raising one's own nice value needs no
/// privilege; should it fail all the same, the copy is still worth making.
pub(super) fn lower_priority() {
    if let Err(e) = rustix::process::setpriority_process(None, NICE) {
        log::debug!("could not lower the copy's CPU priority: {e}");
    }
}

/// Packs `binary` as `format` on up to [`MAX_THREADS`] cores into a locked temporary in
/// `dir`, hashing it on the way, and renames it to its name in `dir` once the binary
/// proves to have the sha256 it is named by. Returns its size.
pub(super) fn make(
    format: CopyFormat,
    dir: &Path,
    binary: &Path,
    binary_sha256: &str,
) -> io::Result<u64> {
    let start = Instant::now();
    let path = dir.join(copy_name(format, binary_sha256));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
    // The temporary first: while this copy waits for its turn, a run that starts in
    // this directory sees it being made and starts no other.
    let tmp = format
        .temporary()
        .tagged_file_in(dir, binary_sha256, 0o600)?;
    temporary::hold(tmp.as_file())?;
    let _turn = host_turn(format, binary_sha256, &Wanted::open(dir)?)?;
    let file = File::open(binary)?;
    let binary_size = file.metadata()?.len();
    let mut input = Hashing {
        inner: file,
        hasher: Sha256::new(),
    };
    let out = BufWriter::new(tmp);
    let mut tmp = match format {
        CopyFormat::Xz => pack_xz(&mut input, out, threads)?,
        CopyFormat::Zstd => pack_zstd(&mut input, out, threads, binary_size)?,
    };
    let digest = hex::encode(input.hasher.finalize());
    if digest != binary_sha256 {
        return Err(io::Error::other(format!(
            "the binary {} has sha256 {digest}, not the {binary_sha256} it was staged with, so it changed and no copy was kept",
            binary.display()
        )));
    }
    tmp.flush()?;
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist(&path).map_err(|e| e.error)?;
    super::super::sync_dir(dir);
    log::info!(
        "made the {format} copy of {} ({size} bytes) in {:.1}s",
        binary.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(size)
}

/// The xz stream of `input`. CRC32 as the stream's check: every xz decoder has it
/// (BusyBox's may lack CRC64), and the node checks the binary's sha256 anyway.
fn pack_xz(
    input: &mut impl Read,
    out: BufWriter<NamedTempFile>,
    threads: usize,
) -> io::Result<NamedTempFile> {
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
    let mut encoder = XzEncoder::new_stream(out, stream);
    io::copy(input, &mut encoder)?;
    encoder.finish()?.into_inner().map_err(|e| e.into_error())
}

/// The zstd frame of `input`, `size` bytes. The frame records the size (so the node's
/// zstd sizes its buffers to it) and carries no checksum of its own: the node checks the
/// binary's sha256.
fn pack_zstd(
    input: &mut impl Read,
    out: BufWriter<NamedTempFile>,
    threads: usize,
    size: u64,
) -> io::Result<NamedTempFile> {
    let mut encoder = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?;
    encoder.set_pledged_src_size(Some(size))?;
    encoder.include_contentsize(true)?;
    encoder.include_checksum(false)?;
    encoder.window_log(ZSTD_WINDOW_LOG)?;
    encoder.long_distance_matching(true)?;
    encoder.multithread(threads as u32)?;
    io::copy(input, &mut encoder)?;
    encoder.finish()?.into_inner().map_err(|e| e.into_error())
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
