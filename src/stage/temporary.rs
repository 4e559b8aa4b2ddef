//! Temporary files and directories inside the staging dirs (and a run's private
//! directory of image archives in the system's temporary directory), made by tempfile:
//! exclusively created under a random name (so nothing planted there is followed or
//! reused), removed when dropped, and renamed into place only once complete. Their names
//! start with `.<kind>-`: a dot so they never look like a package or a binary, and the
//! kind so the next run can remove what a crashed one left.

use std::fs::{self, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
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
}

impl Temporary {
    const ALL: [Temporary; 5] = [
        Temporary::Download,
        Temporary::Unpack,
        Temporary::Old,
        Temporary::Write,
        Temporary::Images,
    ];

    /// How names of this kind start.
    fn prefix(self) -> &'static str {
        match self {
            Temporary::Download => ".download-",
            Temporary::Unpack => ".unpack-",
            Temporary::Old => ".old-",
            Temporary::Write => ".write-",
            Temporary::Images => ".keadm-batch-images-",
        }
    }

    /// A new, empty file in `dir` with `mode` (the umask applies, as for any new file).
    pub(crate) fn file_in(self, dir: &Path, mode: u32) -> io::Result<NamedTempFile> {
        tempfile::Builder::new()
            .prefix(self.prefix())
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
        if !Temporary::ALL.iter().any(|t| name.starts_with(t.prefix())) {
            continue;
        }
        let path = entry.path();
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
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
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
