//! How a run creates its files and directories: owner-only (0600 and 0700, whatever the
//! umask), since they hold command lines, node output and node addresses; and never
//! through a symbolic link planted where a file goes, so a local user cannot point
//! keadm-batch's writes at another file.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// Creates `path` and its missing parents with mode 0700. Directories that exist keep
/// their mode: `--run-dir .` must not change the operator's own directory.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Creates or truncates `path` (mode 0600 when created), refusing a symbolic link.
pub fn create(path: &Path) -> io::Result<File> {
    open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )
}

/// Opens `path` for appending (mode 0600 when created), refusing a symbolic link.
pub fn append(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().append(true).create(true))
}

/// Writes `bytes` to `path` as [`create`] opens it.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    create(path)?.write_all(bytes)
}

/// Replaces `path` whole with `bytes`: written into `<name>.tmp` beside it (as [`create`]
/// opens it), then renamed over it, so a reader never sees half a file; the temporary is
/// removed when the rename fails.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} names no file", path.display())))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
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
    // A file that existed keeps the mode it was created with; tighten it.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}
