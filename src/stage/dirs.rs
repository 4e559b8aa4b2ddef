//! Owner-only staging directories and the staging lock.
//!
//! keadm's BASE sits under the shared temp dir and keadm creates it with `mkdir -p` (mode
//! 0777 minus umask), so another local user can pre-create it, or plant a symlink, and swap
//! the keadm binary that is then run as root on every node. We create what is missing with
//! mode 0700 and then check every component with `symlink_metadata` (never following a
//! link) before trusting it.

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::OFlags;

use super::StageError;

/// Creates `dir` (and any missing parents) owner-only and checks that nobody but us and
/// root can change what it holds. `dir` itself and every directory we create must be a real
/// directory owned by our euid and not writable by group or others; existing ancestors must
/// be owned by root or us and, when writable by others, sticky (like `/tmp`).
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<PathBuf, StageError> {
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| StageError::io("find the current directory for", dir, e))?
            .join(dir)
    };
    let euid = effective_uid();
    let mut current = PathBuf::new();
    let components: Vec<Component> = dir.components().collect();
    for (index, component) in components.iter().enumerate() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                current.push(component.as_os_str());
                continue;
            }
            Component::CurDir => continue,
            Component::ParentDir => {
                return Err(StageError::UnsafeDir {
                    path: dir.clone(),
                    reason: "its path contains '..'".into(),
                });
            }
            Component::Normal(name) => current.push(name),
        }
        let is_target = index + 1 == components.len();
        // Look before creating: mkdir on an existing dir can fail with EACCES or EROFS
        // instead of EEXIST, and existing ancestors are only ever inspected.
        let (meta, created) = match fs::symlink_metadata(&current) {
            Ok(meta) => (meta, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let created = create_one(&current)?;
                let meta = fs::symlink_metadata(&current)
                    .map_err(|e| StageError::io("inspect the staging directory", &current, e))?;
                (meta, created)
            }
            Err(e) => return Err(StageError::io("inspect the staging directory", &current, e)),
        };
        if is_target || created {
            check_owned(&current, &meta, euid)?;
        } else {
            check_ancestor(&current, &meta, euid)?;
        }
    }
    Ok(dir)
}

/// Creates one owner-only subdirectory of an already checked directory and checks it.
pub(crate) fn ensure_private_subdir(parent: &Path, name: &str) -> Result<PathBuf, StageError> {
    let path = parent.join(name);
    create_one(&path)?;
    let meta = fs::symlink_metadata(&path)
        .map_err(|e| StageError::io("inspect the staging directory", &path, e))?;
    check_owned(&path, &meta, effective_uid())?;
    Ok(path)
}

/// `mkdir` with mode 0700; `Ok(true)` when this call created it.
fn create_one(path: &Path) -> Result<bool, StageError> {
    match DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(StageError::CreateDir {
            path: path.to_path_buf(),
            error: e.to_string(),
        }),
    }
}

/// The effective user id, which must own the staging directories.
fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn check_owned(path: &Path, meta: &fs::Metadata, euid: u32) -> Result<(), StageError> {
    let unsafe_dir = |reason: String| StageError::UnsafeDir {
        path: path.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    if meta.uid() != euid {
        return Err(unsafe_dir(format!(
            "it is owned by uid {}, not by this user (uid {euid})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "it is writable by group or others (mode {:o}); `chmod go-w` it",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

fn check_ancestor(path: &Path, meta: &fs::Metadata, euid: u32) -> Result<(), StageError> {
    let unsafe_dir = |reason: String| StageError::UnsafeDir {
        path: path.to_path_buf(),
        reason,
    };
    let trusted_owner = meta.uid() == 0 || meta.uid() == euid;
    if meta.file_type().is_symlink() {
        // System layouts have root-owned links (`/var/run`); a link another user owns may
        // point anywhere they like.
        if !trusted_owner {
            return Err(unsafe_dir(format!(
                "it is a symbolic link owned by uid {}",
                meta.uid()
            )));
        }
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    if !trusted_owner {
        return Err(unsafe_dir(format!(
            "it is owned by uid {}, who could replace what it holds",
            meta.uid()
        )));
    }
    // Without the sticky bit, anyone who can write a directory can rename our entries in it.
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(unsafe_dir(format!(
            "it is writable by group or others without the sticky bit (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Takes the exclusive lock on `BASE/.lock`, waiting for another run that holds it.
/// The lock is released when the returned file is dropped (or the process dies).
pub(crate) fn lock(base: &Path) -> Result<File, StageError> {
    let path = base.join(".lock");
    let lock_err = |e: std::io::Error| StageError::Lock {
        path: path.clone(),
        error: e.to_string(),
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32)
        .open(&path)
        .map_err(lock_err)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => {
            log::warn!(
                "waiting for another keadm-batch run to release {}",
                path.display()
            );
            file.lock().map_err(lock_err)?;
            Ok(file)
        }
        Err(TryLockError::Error(e)) => Err(lock_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn missing_parents_are_created_owner_only() {
        let tmp = scratch();
        let base = tmp.path().join("a/b/keadm");
        let made = ensure_private_dir(&base).unwrap();
        assert_eq!(made, base);
        for dir in ["a", "a/b", "a/b/keadm"] {
            let mode = fs::metadata(tmp.path().join(dir))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{dir}");
        }
    }

    #[test]
    fn an_existing_private_dir_is_accepted_twice() {
        let tmp = scratch();
        ensure_private_dir(tmp.path()).unwrap();
        ensure_private_dir(tmp.path()).unwrap();
        let sub = ensure_private_subdir(tmp.path(), "package").unwrap();
        assert!(sub.is_dir());
    }

    #[test]
    fn a_group_writable_base_is_refused_with_the_fix() {
        let tmp = scratch();
        let base = tmp.path().join("keadm");
        fs::create_dir(&base).unwrap();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o775)).unwrap();
        let err = ensure_private_dir(&base).unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
        assert!(err.contains("--staging-dir"), "{err}");
    }

    #[test]
    fn a_symlink_anywhere_we_own_is_refused() {
        let tmp = scratch();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        let err = ensure_private_subdir(tmp.path(), "link")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
    }

    #[test]
    fn a_world_writable_ancestor_without_sticky_bit_is_refused() {
        let tmp = scratch();
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_private_dir(&open.join("keadm"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("without the sticky bit"), "{err}");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        ensure_private_dir(&open.join("keadm")).unwrap();
    }

    #[test]
    fn the_lock_is_exclusive_until_dropped() {
        let tmp = scratch();
        let held = lock(tmp.path()).unwrap();
        let other = File::options()
            .write(true)
            .open(tmp.path().join(".lock"))
            .unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        other.try_lock().unwrap();
    }
}
