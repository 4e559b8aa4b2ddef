//! How a run creates its files and directories: owner-only (0600 and 0700, whatever the
//! umask), since they hold command lines, node output and node addresses; never through
//! a symbolic link planted where a file goes, so a local user cannot point keadm-batch's
//! writes at another file; and never into a file another user made, who could read it
//! or change it afterwards. Files are read back (a transcript's tail) the same way.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Creates `path` and its missing parents with mode 0700. Directories that exist keep
/// their mode: `--run-dir .` must not change the operator's own directory.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Creates or truncates `path` (mode 0600 when created), refusing a symbolic link and a
/// file of another user.
pub fn create(path: &Path) -> io::Result<File> {
    let file = open(path, OpenOptions::new().write(true).create(true))?;
    // Only now that the file is known to be ours.
    file.set_len(0)?;
    Ok(file)
}

/// Opens `path` for appending (mode 0600 when created), refusing a symbolic link and a
/// file of another user.
pub fn append(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().append(true).create(true))
}

/// Writes `bytes` to `path` as [`create`] opens it.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    create(path)?.write_all(bytes)
}

/// Replaces `path` whole with `bytes`: written into a temporary beside it, then renamed
/// over it, so a reader never sees half a file. The temporary has a new random name and
/// is created exclusively (O_EXCL, 0600), so a file another user made in advance, under
/// any name, is never written into; it is removed when anything fails.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    whole(path, bytes, true)
}

/// As [`replace`], but never over a file that is there: an error of kind `AlreadyExists`
/// then (the rename refuses to replace, so a file made meanwhile is kept too).
pub fn create_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    whole(path, bytes, false)
}

fn whole(path: &Path, bytes: &[u8], overwrite: bool) -> io::Result<()> {
    let (dir, name) = dir_and_name(path)?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if overwrite {
        tmp.persist(path).map(drop).map_err(|e| e.error)
    } else {
        tmp.persist_noclobber(path).map(drop).map_err(|e| e.error)
    }
}

/// Opens `path` to read: a regular file, reached without following a symbolic link at
/// it or at its directory. Its directory is opened first (`O_NOFOLLOW | O_DIRECTORY`),
/// then the file in it (`O_NOFOLLOW | O_NONBLOCK`, so a FIFO cannot block), and what was
/// opened is checked with `fstat`: whatever is swapped in after a check by path, a link
/// to another file or a FIFO, is refused rather than read.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let (dir, name) = dir_and_name(path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::open(dir, flags | OFlags::DIRECTORY, Mode::empty())?;
    let file = File::from(rustix::fs::openat(
        &dir,
        name,
        flags | OFlags::NONBLOCK,
        Mode::empty(),
    )?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// `path`'s directory (`.` for a bare name) and file name.
fn dir_and_name(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} names no file", path.display())))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options
        .mode(0o600)
        // NONBLOCK: a FIFO planted where a file goes fails the open instead of blocking it.
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC).bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                io::Error::other(format!(
                    "{} is a symbolic link, and keadm-batch does not write through one; remove it",
                    path.display()
                ))
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    let euid = crate::stage::effective_uid();
    if meta.uid() != euid {
        return Err(io::Error::other(format!(
            "{} belongs to uid {}, not to this user (uid {euid}), and keadm-batch does not write into another user's file, who could read it or change it afterwards; remove it",
            path.display(),
            meta.uid()
        )));
    }
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file; remove it",
            path.display()
        )));
    }
    // A file that existed keeps the mode it was created with; tighten it.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A file another user made where a run file goes is neither written into nor
    /// emptied; a FIFO there neither blocks nor is used. (Run as root, as the suite is:
    /// the file is handed to uid 65534.)
    #[test]
    fn another_user_s_file_or_a_fifo_is_refused_and_left_as_it_was() {
        if crate::stage::effective_uid() != 0 {
            panic!("this test hands a file to another user, which needs root");
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("batch_process_log.txt");
        std::fs::write(&theirs, "theirs\n").unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o666)).unwrap();
        rustix::fs::chown(
            &theirs,
            Some(rustix::fs::Uid::from_raw(65534)),
            Some(rustix::fs::Gid::from_raw(65534)),
        )
        .unwrap();
        for error in [create(&theirs).unwrap_err(), append(&theirs).unwrap_err()] {
            assert!(
                error
                    .to_string()
                    .contains("belongs to uid 65534, not to this user"),
                "{error}"
            );
        }
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs\n");
        let fifo = dir.path().join("summary.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // With no reader the open itself fails (ENXIO, thanks to O_NONBLOCK); with one,
        // the fstat refuses it.
        assert!(create(&fifo).is_err());
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .unwrap();
        let error = create(&fifo).unwrap_err();
        assert!(
            error.to_string().contains("is not a regular file"),
            "{error}"
        );
    }
}
