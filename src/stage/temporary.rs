//! Temporary files and directories inside the staging dirs (and a run's private
//! directory of image archives in the system's temporary directory), made by tempfile:
//! exclusively created under a random name (so nothing planted there is followed or
//! reused), removed when dropped, and renamed into place only once complete. Their names
//! start with `.<kind>-`: a dot so they never look like a package or a binary, and the
//! kind so the next run can remove what a crashed one left. A packed copy's temporary
//! (xz or zstd) is locked while it is written, since the process writing it may outlive its run (see
//! `recompress`): the next run leaves a locked one alone.

use std::fs::{self, File, OpenOptions, Permissions, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tempfile::{NamedTempFile, TempDir};

use super::StageError;

/// What a temporary is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Temporary {
    /// A tarball being downloaded, renamed into the package cache once verified.
    Download,
    /// A package being extracted, renamed into place once checked.
    Unpack,
    /// Holds an earlier extraction moved aside, until it is removed.
    Old,
    /// A small file being written, such as a cached checksum file.
    Write,
    /// A run's checked copies of its image archives (`images`), removed when the run ends.
    Images,
    /// A binary's xz copy being made (`recompress`), locked by its maker until renamed.
    Xz,
    /// A binary's zstd copy being made, as [`Temporary::Xz`].
    Zstd,
}

impl Temporary {
    const ALL: [Temporary; 7] = [
        Temporary::Download,
        Temporary::Unpack,
        Temporary::Old,
        Temporary::Write,
        Temporary::Images,
        Temporary::Xz,
        Temporary::Zstd,
    ];

    /// How names of this kind start.
    fn prefix(self) -> &'static str {
        match self {
            Temporary::Download => ".download-",
            Temporary::Unpack => ".unpack-",
            Temporary::Old => ".old-",
            Temporary::Write => ".write-",
            Temporary::Images => ".keadm-batch-images-",
            Temporary::Xz => ".xz-",
            Temporary::Zstd => ".zst-",
        }
    }

    /// How names of this kind for `tag` start: `.xz-<sha256>-` for the copy of the binary
    /// with that digest, so a run can tell which copy is being made.
    pub(crate) fn tagged_prefix(self, tag: &str) -> String {
        format!("{}{tag}-", self.prefix())
    }

    /// A new, empty file in `dir` with `mode` (the umask applies, as for any new file).
    pub(crate) fn file_in(self, dir: &Path, mode: u32) -> io::Result<NamedTempFile> {
        self.new_file_in(dir, self.prefix(), mode)
    }

    /// As [`Temporary::file_in`], its name starting with [`Temporary::tagged_prefix`].
    pub(crate) fn tagged_file_in(
        self,
        dir: &Path,
        tag: &str,
        mode: u32,
    ) -> io::Result<NamedTempFile> {
        self.new_file_in(dir, &self.tagged_prefix(tag), mode)
    }

    fn new_file_in(self, dir: &Path, prefix: &str, mode: u32) -> io::Result<NamedTempFile> {
        tempfile::Builder::new()
            .prefix(prefix)
            .permissions(Permissions::from_mode(mode))
            .tempfile_in(dir)
    }

    /// A new, owner-only (0700) directory in `dir`.
    pub(crate) fn dir_in(self, dir: &Path) -> io::Result<TempDir> {
        tempfile::Builder::new()
            .prefix(self.prefix())
            .permissions(Permissions::from_mode(0o700))
            .tempdir_in(dir)
    }
}

/// Removes temporaries a crashed run left in `dir`. Only called under the staging lock and
/// between stagings, so none of them can still be in use.
pub(crate) fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(kind) = Temporary::ALL.iter().find(|t| name.starts_with(t.prefix())) else {
            continue;
        };
        let path = entry.path();
        if matches!(kind, Temporary::Xz | Temporary::Zstd) && in_use(&path) {
            log::debug!("{} is a packed copy still being made", path.display());
            continue;
        }
        let removed = match entry.file_type() {
            Ok(kind) if kind.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
        match removed {
            Ok(()) => log::debug!("removed {} left by an earlier run", path.display()),
            Err(e) => log::warn!(
                "could not remove {} left by an earlier run: {e}",
                path.display()
            ),
        }
    }
}

/// Whether a process holds the lock on the temporary at `path` (its maker, at work).
pub(crate) fn in_use(path: &Path) -> bool {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    else {
        return false;
    };
    matches!(file.try_lock(), Err(TryLockError::WouldBlock))
}

/// Locks a temporary just made, for as long as `file` is open, so [`in_use`] sees it.
pub(crate) fn hold(file: &File) -> io::Result<()> {
    file.try_lock().map_err(io::Error::from)
}

/// Writes `path` via a temporary file in the same directory, fsync and rename, so a
/// crash never leaves a half-written file under the real name. The file gets the mode a
/// plain create would give it (0666 less the umask).
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), StageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = Temporary::Write
        .file_in(dir, 0o666)
        .map_err(|e| StageError::io("create a temporary file in", dir, e))?;
    file.write_all(contents)
        .and_then(|()| file.as_file().sync_all())
        .map_err(|e| StageError::io("write", file.path(), e))?;
    file.persist(path)
        .map_err(|e| StageError::io("move into place", path, e.error))?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The names in `dir`, hidden ones too, sorted.
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn temporaries_are_dot_named_by_kind_and_gone_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let file = Temporary::Download.file_in(tmp.path(), 0o600).unwrap();
        let dir = Temporary::Unpack.dir_in(tmp.path()).unwrap();
        let file_name = file
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(file_name.starts_with(".download-"), "{file_name}");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(file.path()), 0o600);
        assert_eq!(mode(dir.path()), 0o700);
        fs::write(dir.path().join("inside"), "x").unwrap();
        drop((file, dir));
        assert!(names(tmp.path()).is_empty());
    }

    #[test]
    fn stale_temporaries_of_every_kind_are_removed_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        for name in [".download-1-0", ".write-abc", "keadm.tar.gz", ".other"] {
            fs::write(tmp.path().join(name), "x").unwrap();
        }
        for name in [".unpack-XyZ/top/keadm", ".old-1-2/top", "bin"] {
            fs::create_dir_all(tmp.path().join(name)).unwrap();
        }
        remove_stale(tmp.path());
        assert_eq!(names(tmp.path()), [".other", "bin", "keadm.tar.gz"]);
    }

    /// The process making a packed copy may outlive its run: the next run must not pull
    /// the file from under it, but removes what a process that died left.
    #[test]
    fn a_packed_copy_being_made_is_left_alone_and_an_abandoned_one_removed() {
        for (kind, prefix) in [(Temporary::Xz, ".xz-"), (Temporary::Zstd, ".zst-")] {
            let tmp = tempfile::tempdir().unwrap();
            let busy = kind.tagged_file_in(tmp.path(), "ab12", 0o600).unwrap();
            hold(busy.as_file()).unwrap();
            let busy_name = busy
                .path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            assert!(
                busy_name.starts_with(&format!("{prefix}ab12-")),
                "{busy_name}"
            );
            let abandoned = tmp.path().join(format!("{prefix}cd34-abandoned"));
            fs::write(&abandoned, "x").unwrap();
            assert!(in_use(busy.path()));
            assert!(!in_use(&abandoned));
            remove_stale(tmp.path());
            assert_eq!(names(tmp.path()), [busy_name]);
            // Once its maker lets go, it is abandoned too.
            let path = busy.path().to_path_buf();
            let file = busy.keep().unwrap().0;
            drop(file);
            assert!(!in_use(&path));
            remove_stale(tmp.path());
            assert!(names(tmp.path()).is_empty());
        }
    }

    #[test]
    fn an_atomic_write_replaces_the_file_with_a_plain_files_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("checksum.txt");
        fs::write(&path, "old\n").unwrap();
        let plain_mode = fs::metadata(&path).unwrap().permissions().mode();
        write_atomically(&path, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode(),
            plain_mode
        );
        assert_eq!(names(tmp.path()), ["checksum.txt"]);
        let err = write_atomically(&tmp.path().join("no/such/dir/x"), b"")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("Could not create a temporary file in "),
            "{err}"
        );
    }
}
