//! Owner-only staging directories and the staging lock.
//!
//! keadm's BASE sits under the shared temp dir and keadm creates it with `mkdir -p` (mode
//! 0777 minus umask), so another local user can pre-create it, or plant a symlink, and swap
//! the keadm binary that is then run as root on every node. We create what is missing with
//! mode 0700 and then check every component with `symlink_metadata` (never following a
//! link) before trusting it.
//!
//! Some directories cannot pass that check and are still the only place to stage: a
//! Kubernetes emptyDir is root's, mode 2777 with no sticky bit, and the pod cannot change
//! that. There we make a directory of our own inside, open it once and check the open
//! directory itself; from then on every path goes through `/proc/self/fd/N`, which leads
//! to that very directory even if someone renames it and puts another in its place.

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::StageError;

/// Where staging works, and what keeps that place ours.
#[derive(Debug)]
pub(crate) struct StagingDir {
    /// The directory as given (absolute), or `/proc/self/fd/N` for a directory of our own
    /// inside it.
    pub(crate) path: PathBuf,
    /// That directory of our own, open (fd N) for as long as `path` is used.
    pub(crate) held: Option<File>,
}

/// The staging directory for `dir`: `dir` itself when it is private (see
/// [`ensure_private_dir`]); else, when `dir` or a directory above it could be changed by
/// another user, a directory of our own inside it (see [`own_dir_in`]). A path with `..`,
/// and a `dir` that is a symbolic link or not a directory, are refused.
pub(crate) fn open_staging_dir(dir: &Path) -> Result<StagingDir, StageError> {
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| StageError::io("find the current directory for", dir, e))?
            .join(dir)
    };
    match ensure_private_dir(&dir) {
        Ok(path) => Ok(StagingDir { path, held: None }),
        Err(StageError::UnsafeDir { path, reason }) => {
            let own = own_dir_in(&dir)?;
            log::info!(
                "staging in a directory of its own, {}, because {} is not private ({reason}); \
                 it is reached as {}, which no other user can redirect",
                own.shown.display(),
                path.display(),
                own.staging.path.display()
            );
            Ok(own.staging)
        }
        Err(other) => Err(other),
    }
}

/// A directory of our own in `dir`, which may be shared, and what to call it in messages.
struct OwnDir {
    staging: StagingDir,
    /// Its path as the operator would look for it.
    shown: PathBuf,
}

/// Makes `dir` if it is missing, then the directory staging may use: `dir` itself when the
/// open directory is ours and not writable by others, else `dir/keadm-batch-<euid>`,
/// created 0700 if missing. Either is checked through its open fd (owner, mode, a real
/// directory), not through its path, since a path through a directory others can write
/// may lead elsewhere from one moment to the next; and either is then used only as
/// `/proc/self/fd/N`. The name is fixed per user, so a later run finds its cache and the
/// staging lock again; one that another user planted is not ours and is refused.
fn own_dir_in(dir: &Path) -> Result<OwnDir, StageError> {
    let euid = effective_uid();
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StageError::CreateDir {
            path: dir.to_path_buf(),
            error: e.to_string(),
        })?;
    let given = open_dir(rustix::fs::CWD, dir, dir)?;
    let meta = given
        .metadata()
        .map_err(|e| StageError::io("inspect the staging directory", dir, e))?;
    let (own, shown, meta) = if check_owned(dir, &meta, euid).is_ok() {
        (given, dir.to_path_buf(), meta)
    } else {
        let name = format!("keadm-batch-{euid}");
        let shown = dir.join(&name);
        match rustix::fs::mkdirat(&given, &name, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(StageError::CreateDir {
                    path: shown,
                    error: std::io::Error::from(e).to_string(),
                });
            }
        }
        let own = open_dir(&given, Path::new(&name), &shown)?;
        let meta = own
            .metadata()
            .map_err(|e| StageError::io("inspect the staging directory", &shown, e))?;
        check_owned(&shown, &meta, euid)?;
        (own, shown, meta)
    };
    let path = PathBuf::from(format!("/proc/self/fd/{}", own.as_raw_fd()));
    let reached = fs::metadata(&path).ok();
    if reached.is_none_or(|m| (m.dev(), m.ino()) != (meta.dev(), meta.ino())) {
        return Err(StageError::NoProcFd { path: shown });
    }
    Ok(OwnDir {
        staging: StagingDir {
            path,
            held: Some(own),
        },
        shown,
    })
}

/// Opens the directory `name` (relative to `at`) without following a final symbolic link;
/// `shown` names it in errors.
fn open_dir(at: impl AsFd, name: &Path, shown: &Path) -> Result<File, StageError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let unsafe_dir = |reason: &str| StageError::UnsafeDir {
        path: shown.to_path_buf(),
        reason: reason.into(),
    };
    match rustix::fs::openat(&at, name, flags, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        // Linux refuses a link with ENOTDIR when O_DIRECTORY is given, so ask which it is
        // (only for the message: nothing is opened).
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            Err(unsafe_dir(if link {
                "it is a symbolic link"
            } else {
                "it is not a directory"
            }))
        }
        Err(e) => Err(StageError::io(
            "open the staging directory",
            shown,
            e.into(),
        )),
    }
}

/// Creates `dir` (absolute, and any missing parents) owner-only and checks
/// that nobody but us and root can change what it holds. `dir` itself and every directory
/// we create must be a real directory owned by our euid and not writable by group or
/// others; existing ancestors must be owned by root or us and, when writable by others,
/// sticky (like `/tmp`).
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<PathBuf, StageError> {
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
            // Checked one by one, `a/b/..` would vouch for `a/b`, not for where it leads.
            Component::ParentDir => {
                return Err(StageError::DotDotInStagingDir {
                    path: dir.to_path_buf(),
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
    Ok(dir.to_path_buf())
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

/// The effective user id, which must own the staging directories (and the run's).
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn check_owned(path: &Path, meta: &fs::Metadata, euid: u32) -> Result<(), StageError> {
    match not_private(meta, euid) {
        Some(reason) => Err(StageError::UnsafeDir {
            path: path.to_path_buf(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Why the directory `meta` (from `symlink_metadata`) is not one only `euid` can change,
/// as a clause (`it is owned by uid 65534, ...`); `None` when it is: a real directory,
/// owned by `euid`, not writable by group or others.
pub(crate) fn not_private(meta: &fs::Metadata, euid: u32) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Some("it is not a directory".into());
    }
    if meta.uid() != euid {
        return Some(format!(
            "it is owned by uid {}, not by this user (uid {euid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "it is writable by group or others (mode {:o}); `chmod go-w` it",
            meta.mode() & 0o7777
        ));
    }
    None
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

    /// A directory like a Kubernetes emptyDir: writable by everyone, no sticky bit.
    fn shared_dir(tmp: &tempfile::TempDir) -> PathBuf {
        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o2777)).unwrap();
        shared
    }

    fn own_name() -> String {
        format!("keadm-batch-{}", effective_uid())
    }

    #[test]
    fn a_private_dir_is_used_as_it_is() {
        let tmp = scratch();
        let base = tmp.path().join("keadm");
        let staging = open_staging_dir(&base).unwrap();
        assert_eq!(staging.path, base);
        assert!(staging.held.is_none());
    }

    #[test]
    fn a_shared_dir_gets_a_directory_of_our_own_that_cannot_be_swapped() {
        let tmp = scratch();
        let shared = shared_dir(&tmp);
        let staging = open_staging_dir(&shared).unwrap();
        assert!(
            staging.path.starts_with("/proc/self/fd"),
            "{}",
            staging.path.display()
        );
        let own = shared.join(own_name());
        let meta = fs::symlink_metadata(&own).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert_eq!(meta.uid(), effective_uid());
        // Nested directories and files go through the open directory.
        ensure_private_subdir(&staging.path, "bin").unwrap();
        assert!(own.join("bin").is_dir());

        // In a parent without the sticky bit anyone may rename our directory and put
        // theirs in its place; what staging writes still lands in ours.
        let moved = shared.join("moved");
        fs::rename(&own, &moved).unwrap();
        fs::create_dir(&own).unwrap();
        fs::set_permissions(&own, fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(staging.path.join("bin/keadm"), "ours").unwrap();
        assert_eq!(fs::read_to_string(moved.join("bin/keadm")).unwrap(), "ours");
        assert!(!own.join("bin").exists());

        // A later run finds the replacement, which is not private, and refuses it.
        drop(staging);
        let err = open_staging_dir(&shared).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{}: it is writable by group", own.display())),
            "{err}"
        );
    }

    #[test]
    fn our_own_directory_is_found_again() {
        let tmp = scratch();
        let shared = shared_dir(&tmp);
        let first = open_staging_dir(&shared).unwrap();
        fs::write(first.path.join("cached"), "x").unwrap();
        drop(first);
        let second = open_staging_dir(&shared).unwrap();
        assert_eq!(fs::read_to_string(second.path.join("cached")).unwrap(), "x");
    }

    #[test]
    fn a_planted_link_in_place_of_our_own_directory_is_refused() {
        let tmp = scratch();
        let shared = shared_dir(&tmp);
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, shared.join(own_name())).unwrap();
        let err = open_staging_dir(&shared).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
    }

    #[test]
    fn a_new_directory_under_a_shared_one_is_used_through_its_fd() {
        let tmp = scratch();
        let shared = shared_dir(&tmp);
        let sub = shared.join("sub");
        let staging = open_staging_dir(&sub).unwrap();
        assert!(staging.path.starts_with("/proc/self/fd"));
        assert_eq!(
            fs::symlink_metadata(&sub).unwrap().mode() & 0o777,
            0o700,
            "made owner-only"
        );
        fs::write(staging.path.join("f"), "x").unwrap();
        assert!(
            sub.join("f").is_file(),
            "no directory of our own nested in it"
        );
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
