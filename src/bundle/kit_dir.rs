//! The kit directory: what may be written into it, files put in place atomically, and
//! `kit.json` listing them.
//!
//! A rerun into the same directory is idempotent: a directory whose every file is listed
//! in its kit.json is an earlier kit and is updated in place. Files whose content is
//! already right stay untouched, files of the earlier kit that the new one does not have
//! (an older keadm release, an image no longer needed) are removed, and kit.json is
//! rewritten only when the list changed. Any other non-empty directory is refused: a run
//! would refuse the files the kit does not list, and a bundle must not delete files it did
//! not write.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use super::TEMPORARY_PREFIX;
use super::error::BundleError;
use crate::kit::{self, FORMAT, KIT_FILE, Kit, KitFile};

/// What happened to one file of the kit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub file: KitFile,
    /// False when the file was already there with this content.
    pub written: bool,
}

pub(crate) struct KitDir {
    path: PathBuf,
    old: Option<Kit>,
    placed: Vec<Placed>,
}

impl KitDir {
    /// Creates `path`, or checks that it is empty or an earlier kit, and removes
    /// temporaries a crashed bundle left.
    pub(crate) fn open(path: &Path) -> Result<KitDir, BundleError> {
        fs::create_dir_all(path)
            .map_err(|e| BundleError::io("create the kit directory", path, e))?;
        remove_temporaries(path);
        let old = Kit::read(path).map_err(|e| BundleError::NotAKit {
            dir: path.to_path_buf(),
            files: format!("{KIT_FILE}, which cannot be used ({e})"),
        })?;
        let mut foreign =
            kit::files_in(path).map_err(|e| BundleError::io("list the files of", path, e))?;
        foreign.retain(|rel| {
            rel != KIT_FILE
                && old
                    .as_ref()
                    .is_none_or(|kit| kit.entry(Path::new(rel)).is_none())
        });
        if !foreign.is_empty() {
            return Err(BundleError::NotAKit {
                dir: path.to_path_buf(),
                files: some_of(&foreign),
            });
        }
        Ok(KitDir {
            path: path.to_path_buf(),
            old,
            placed: Vec::new(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `rel`'s directory in the kit, created.
    pub(crate) fn dir_for(&self, rel: &str) -> Result<PathBuf, BundleError> {
        let dir = self
            .path
            .join(rel)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        fs::create_dir_all(&dir).map_err(|e| BundleError::io("create", &dir, e))?;
        Ok(dir)
    }

    /// The earlier kit's entry for `rel` when the file on disk still matches it.
    pub(crate) fn intact(&self, rel: &str) -> Option<KitFile> {
        let old = self.old.as_ref()?;
        old.check(&self.path, Path::new(rel)).ok()?;
        old.entry(Path::new(rel)).cloned()
    }

    /// Records `rel` as part of the kit, unchanged.
    pub(crate) fn keep(&mut self, file: KitFile) {
        self.placed.push(Placed {
            file,
            written: false,
        });
    }

    /// Puts a copy of `source` at `rel`, unless the file there already has its content.
    pub(crate) fn copy(&mut self, rel: &str, source: &Path) -> Result<(), BundleError> {
        let (size, sha256) =
            crate::digest::sha256_file(source).map_err(|e| BundleError::io("read", source, e))?;
        self.place(rel, size, sha256, |out| {
            let mut from = fs::File::open(source)?;
            std::io::copy(&mut from, &mut &*out).map(|_| ())
        })
    }

    /// Puts `bytes` at `rel`, unless the file there already holds them.
    pub(crate) fn put(&mut self, rel: &str, bytes: &[u8]) -> Result<(), BundleError> {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
        self.place(rel, bytes.len() as u64, sha256, |mut out| {
            std::io::Write::write_all(&mut out, bytes)
        })
    }

    /// Keeps the file at `rel` when it is a regular file of `size` bytes with `sha256`;
    /// otherwise writes it anew with `fill` into a temporary beside it, then moves it there.
    fn place(
        &mut self,
        rel: &str,
        size: u64,
        sha256: String,
        fill: impl FnOnce(&fs::File) -> std::io::Result<()>,
    ) -> Result<(), BundleError> {
        let target = self.path.join(rel);
        if fs::symlink_metadata(&target).is_ok_and(|m| m.is_file() && m.len() == size)
            && crate::digest::sha256_file(&target).is_ok_and(|(_, d)| d == sha256)
        {
            self.keep(KitFile {
                path: rel.to_string(),
                sha256,
                size,
            });
            return Ok(());
        }
        let temporary = self.temporary_for(rel)?;
        fill(temporary.as_file()).map_err(|e| BundleError::io("write", temporary.path(), e))?;
        self.persist(rel, temporary)
    }

    /// After a failure: removes the files this bundle wrote at paths the earlier kit does
    /// not list, so the directory stays an earlier kit that the next bundle can update.
    /// (Files the earlier kit lists and this bundle rewrote no longer match its kit.json,
    /// so a run refuses them until a bundle finishes.) Best effort.
    pub(crate) fn abandon(self) {
        for placed in self.placed.iter().filter(|p| p.written) {
            let listed = self
                .old
                .as_ref()
                .is_some_and(|kit| kit.entry(Path::new(&placed.file.path)).is_some());
            if !listed {
                let _ = fs::remove_file(self.path.join(&placed.file.path));
            }
        }
    }

    /// A new temporary file beside `rel`, for [`KitDir::persist`].
    pub(crate) fn temporary_for(&self, rel: &str) -> Result<NamedTempFile, BundleError> {
        let dir = self.dir_for(rel)?;
        tempfile::Builder::new()
            .prefix(TEMPORARY_PREFIX)
            .tempfile_in(&dir)
            .map_err(|e| BundleError::io("create a temporary file in", &dir, e))
    }

    /// Moves the finished `temporary` to `rel` and records it.
    pub(crate) fn persist(
        &mut self,
        rel: &str,
        temporary: NamedTempFile,
    ) -> Result<(), BundleError> {
        let target = self.path.join(rel);
        temporary
            .as_file()
            .sync_all()
            .map_err(|e| BundleError::io("write", temporary.path(), e))?;
        let (size, sha256) = crate::digest::sha256_file(temporary.path())
            .map_err(|e| BundleError::io("read", temporary.path(), e))?;
        temporary
            .persist(&target)
            .map_err(|e| BundleError::io("move into place", &target, e.error))?;
        // Readable by whoever copies the kit on, as files from a download are.
        set_mode(&target, 0o644);
        self.placed.push(Placed {
            file: KitFile {
                path: rel.to_string(),
                sha256,
                size,
            },
            written: true,
        });
        Ok(())
    }

    /// Writes kit.json (when the list changed) and removes what the earlier kit had and
    /// this one does not. Returns the files and the removed paths.
    pub(crate) fn finish(
        self,
        keadm_version: &str,
        sandbox_images: &[String],
    ) -> Result<(Vec<Placed>, Vec<String>), BundleError> {
        let mut files: Vec<KitFile> = self.placed.iter().map(|p| p.file.clone()).collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let unchanged = self.old.as_ref().is_some_and(|old| {
            old.files == files
                && old.keadm_version == keadm_version
                && old.sandbox_images == sandbox_images
                && old.format == FORMAT
        });
        if !unchanged {
            let kit = Kit {
                format: FORMAT.into(),
                keadm_version: keadm_version.into(),
                sandbox_images: sandbox_images.to_vec(),
                created: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                    .to_string(),
                files: files.clone(),
            };
            let mut text = serde_json::to_vec_pretty(&kit).unwrap_or_default();
            text.push(b'\n');
            let temporary = self.temporary_for(KIT_FILE)?;
            fs::write(temporary.path(), &text)
                .map_err(|e| BundleError::io("write", temporary.path(), e))?;
            let target = self.path.join(KIT_FILE);
            temporary
                .persist(&target)
                .map_err(|e| BundleError::io("move into place", &target, e.error))?;
            set_mode(&target, 0o644);
        }
        let mut removed = Vec::new();
        for old in self.old.iter().flat_map(|kit| &kit.files) {
            if files.iter().all(|f| f.path != old.path) {
                // `Kit::read` refused any path that leaves the directory.
                let path = self.path.join(&old.path);
                match fs::remove_file(&path) {
                    Ok(()) => removed.push(old.path.clone()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(BundleError::io("remove the outdated kit file", &path, e));
                    }
                }
                // Directories the removal emptied (an arch dropped from archGroup).
                let mut dir = path.parent();
                while let Some(d) = dir.filter(|d| *d != self.path) {
                    if fs::remove_dir(d).is_err() {
                        break;
                    }
                    dir = d.parent();
                }
            }
        }
        Ok((self.placed, removed))
    }
}

/// Removes `.bundle-*` files and directories anywhere under `dir`. Best effort.
fn remove_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(TEMPORARY_PREFIX)
        {
            let _ = if is_dir {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
        } else if is_dir {
            remove_temporaries(&path);
        }
    }
}

/// The first five of `names`, and how many more there are: enough to recognise what a
/// directory holds.
pub(crate) fn some_of(names: &[String]) -> String {
    let mut text = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        text.push_str(&format!(" and {} more", names.len() - 5));
    }
    text
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_keeps_what_is_right_and_removes_what_the_kit_no_longer_has() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kit");
        let source = tmp.path().join("source");
        fs::write(&source, b"abc").unwrap();

        let mut kit = KitDir::open(&dir).unwrap();
        kit.copy("amd64/a", &source).unwrap();
        kit.copy("arm/b", &source).unwrap();
        let (placed, removed) = kit.finish("v1", &[]).unwrap();
        assert!(placed.iter().all(|p| p.written));
        assert!(removed.is_empty());
        let manifest = fs::read(dir.join(KIT_FILE)).unwrap();

        // The same kit again: nothing written, kit.json byte for byte the same.
        let mut kit = KitDir::open(&dir).unwrap();
        kit.copy("amd64/a", &source).unwrap();
        kit.copy("arm/b", &source).unwrap();
        let (placed, _) = kit.finish("v1", &[]).unwrap();
        assert!(placed.iter().all(|p| !p.written));
        assert_eq!(fs::read(dir.join(KIT_FILE)).unwrap(), manifest);

        // Without arm: its file and its emptied directory go.
        fs::write(dir.join("amd64").join(".bundle-crashed"), b"x").unwrap();
        let mut kit = KitDir::open(&dir).unwrap();
        assert!(!dir.join("amd64/.bundle-crashed").exists());
        kit.copy("amd64/a", &source).unwrap();
        let (_, removed) = kit.finish("v1", &[]).unwrap();
        assert_eq!(removed, ["arm/b"]);
        assert!(!dir.join("arm").exists());
        let listed = Kit::read(&dir).unwrap().unwrap();
        assert_eq!(listed.files.len(), 1);
        assert_eq!(kit::check(&dir, Path::new("amd64/a")), Ok(()));
    }

    #[test]
    fn a_directory_with_files_no_kit_lists_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("amd64")).unwrap();
        fs::write(tmp.path().join("amd64/notes.txt"), b"mine").unwrap();
        let err = KitDir::open(tmp.path()).err().unwrap().to_string();
        assert!(
            err.contains("it holds amd64/notes.txt, which no earlier"),
            "{err}"
        );
        assert!(tmp.path().join("amd64/notes.txt").exists());
    }
}
