//! A node's `copyFrom` directory, listed and hashed once at validation, as keadm uploads
//! it: its files sorted by name, hidden files included, symlinks followed, no
//! subdirectories. Validation turns each [`CopyFromProblem`] into a diagnostic.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::model::CopyFile;

/// Why a copyFrom directory cannot be uploaded.
#[derive(Debug)]
pub enum CopyFromProblem {
    /// The directory itself cannot be listed; nothing else was looked at.
    UnreadableDir { dir: PathBuf, error: io::Error },
    /// Uploads are flat, so a subdirectory cannot be sent.
    Subdirectory { dir: PathBuf, name: String },
    /// A file's metadata cannot be read (a dangling symlink, say).
    Unstattable { path: PathBuf, error: io::Error },
    /// A file cannot be read to hash it.
    UnreadableFile { path: PathBuf, error: io::Error },
}

impl CopyFromProblem {
    /// What is wrong, as a diagnostic's message.
    pub fn message(&self) -> String {
        match self {
            CopyFromProblem::UnreadableDir { dir, error } => {
                format!(
                    "copyFrom directory {} cannot be read: {error}",
                    dir.display()
                )
            }
            CopyFromProblem::Subdirectory { dir, name } => format!(
                "copyFrom directory {} contains the subdirectory {name}, and uploads are flat",
                dir.display()
            ),
            CopyFromProblem::Unstattable { path, error }
            | CopyFromProblem::UnreadableFile { path, error } => {
                format!("copyFrom file {} cannot be read: {error}", path.display())
            }
        }
    }

    /// What to do about it, as a diagnostic's fix.
    pub fn fix(&self) -> &'static str {
        match self {
            CopyFromProblem::UnreadableDir { .. } => {
                "point copyFrom at an existing directory of files to upload, or remove it"
            }
            CopyFromProblem::Subdirectory { .. } => {
                "move the subdirectory's files up, or pack it into a tarball"
            }
            CopyFromProblem::Unstattable { .. } => "fix or remove the file (a dangling symlink?)",
            CopyFromProblem::UnreadableFile { .. } => "make it readable, or remove it",
        }
    }
}

/// The files of `dir`, or every problem found in it.
pub fn list(dir: &Path) -> Result<Vec<CopyFile>, Vec<CopyFromProblem>> {
    let entries = std::fs::read_dir(dir).map_err(|error| {
        vec![CopyFromProblem::UnreadableDir {
            dir: dir.to_path_buf(),
            error,
        }]
    })?;
    let mut names: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    names.sort();
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let display = name.to_string_lossy().to_string();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => problems.push(CopyFromProblem::Subdirectory {
                dir: dir.to_path_buf(),
                name: display,
            }),
            Ok(meta) => match crate::digest::sha256_file(&path) {
                Ok((size, sha256)) => files.push(CopyFile {
                    name: display,
                    path,
                    mode: meta.permissions().mode() & 0o7777,
                    size,
                    sha256,
                }),
                Err(error) => problems.push(CopyFromProblem::UnreadableFile { path, error }),
            },
            Err(error) => problems.push(CopyFromProblem::Unstattable { path, error }),
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(problems)
    }
}

/// Directories already listed: a fleet usually shares one copyFrom dir, which is read and
/// hashed once. Only good listings are kept, so every node naming a bad one is told.
#[derive(Default)]
pub struct Listings {
    listed: HashMap<PathBuf, Vec<CopyFile>>,
}

impl Listings {
    /// [`list`], answered from memory for a directory listed before.
    pub fn list(&mut self, dir: &Path) -> Result<Vec<CopyFile>, Vec<CopyFromProblem>> {
        if let Some(files) = self.listed.get(dir) {
            return Ok(files.clone());
        }
        let files = list(dir)?;
        self.listed.insert(dir.to_path_buf(), files.clone());
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn files_are_listed_sorted_with_modes_sizes_and_hashes() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("b.sh"), "echo b\n").unwrap();
        fs::write(dir.path().join(".hidden"), "").unwrap();
        fs::set_permissions(dir.path().join("b.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::symlink("b.sh", dir.path().join("a-link")).unwrap();
        let files = list(dir.path()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, [".hidden", "a-link", "b.sh"]);
        // A symlink is followed: it uploads as the file it points at.
        assert_eq!(files[1].mode, 0o750);
        assert_eq!(files[1].size, 7);
        assert_eq!(files[1].sha256, files[2].sha256);
        assert_eq!(files[2].path, dir.path().join("b.sh"));
        assert_eq!(
            files[0].sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("missing", dir.path().join("dangling")).unwrap();
        fs::write(dir.path().join("ok"), "x").unwrap();
        let problems = list(dir.path()).unwrap_err();
        let shown: Vec<(String, &str)> = problems.iter().map(|p| (p.message(), p.fix())).collect();
        let d = dir.path().display();
        assert_eq!(shown.len(), 2, "{shown:?}");
        assert!(
            shown[0]
                .0
                .starts_with(&format!("copyFrom file {d}/dangling cannot be read: ")),
            "{shown:?}"
        );
        assert_eq!(shown[0].1, "fix or remove the file (a dangling symlink?)");
        assert_eq!(
            shown[1],
            (
                format!(
                    "copyFrom directory {d} contains the subdirectory sub, and uploads are flat"
                ),
                "move the subdirectory's files up, or pack it into a tarball"
            )
        );
    }

    #[test]
    fn a_missing_directory_is_one_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let problems = list(&missing).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].message().starts_with(&format!(
                "copyFrom directory {} cannot be read: ",
                missing.display()
            )),
            "{}",
            problems[0].message()
        );
    }

    #[test]
    fn a_listing_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), "1").unwrap();
        let mut listings = Listings::default();
        assert_eq!(listings.list(dir.path()).unwrap().len(), 1);
        fs::write(dir.path().join("b"), "2").unwrap();
        assert_eq!(listings.list(dir.path()).unwrap().len(), 1);
    }
}
