//! The air-gapped kit's manifest, `DIR/kit.json`: every file `batch bundle` wrote into the
//! offline directory, with its sha256 and size, so a run checks a kit file before it uses
//! it. A kit carried by hand to an isolated site can be damaged or altered on the way, and
//! the keadm release's own checksum file travels in the same directory, so only the
//! manifest ties each file to what the bundle verified on the connected machine.
//!
//! An offline directory without `kit.json` was made by hand (keadm's layout, docs/config.md)
//! and is used as before. Format:
//! `{"format": "keadm-batch-kit/1", "keadmVersion": "v1.23.1", "sandboxImages":
//! ["registry.k8s.io/pause:3.9"], "created": "<rfc3339>", "files": [{"path":
//! "amd64/images/pause_3.9.tar", "sha256": "<hex>", "size": 123}]}`, paths relative to the
//! directory and '/'-separated. `sandboxImages` is absent from kits written before it was
//! recorded. Every name a kit lists or holds is one `crate::safe_name` accepts, as every
//! name `batch bundle` writes is.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::safe_name;

/// The manifest's name inside the offline directory.
pub const KIT_FILE: &str = "kit.json";

/// The one format this version reads and writes.
pub const FORMAT: &str = "keadm-batch-kit/1";

/// A kit lists a few dozen files; anything this large is not a kit manifest.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// `kit.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kit {
    pub format: String,
    pub keadm_version: String,
    /// The sandbox images the kit carries, in full, as `--sandbox-image` named them (or the
    /// default): the site's runtime setting, which a later bundle into the same kit keeps
    /// unless told otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandbox_images: Vec<String>,
    /// When the bundle wrote it, RFC 3339.
    pub created: String,
    /// Sorted by path.
    pub files: Vec<KitFile>,
}

/// One file of the kit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KitFile {
    /// Relative to the offline directory, '/'-separated: `amd64/images/pause_3.9.tar`.
    pub path: String,
    /// Lowercase hex.
    pub sha256: String,
    pub size: u64,
}

impl Kit {
    /// Reads `dir/kit.json`; `Ok(None)` when there is none (a hand-made offline directory).
    pub fn read(dir: &Path) -> Result<Option<Kit>, KitError> {
        let manifest = dir.join(KIT_FILE);
        let meta = match std::fs::symlink_metadata(&manifest) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(KitError::unreadable(&manifest, e.to_string())),
        };
        if !meta.is_file() {
            return Err(KitError::unreadable(
                &manifest,
                "it is not a regular file".into(),
            ));
        }
        // Refused before it is read: a manifest is small.
        too_large(&manifest, meta.len())?;
        let text =
            std::fs::read(&manifest).map_err(|e| KitError::unreadable(&manifest, e.to_string()))?;
        Kit::parse(&text, &manifest).map(Some)
    }

    /// The manifest `text`, read from `manifest` (for messages): a directory's kit.json, or
    /// the one inside a kit archive.
    pub fn parse(text: &[u8], manifest: &Path) -> Result<Kit, KitError> {
        too_large(manifest, text.len() as u64)?;
        let kit: Kit = serde_json::from_slice(text).map_err(|e| {
            KitError::unreadable(manifest, format!("it is not a kit manifest ({e})"))
        })?;
        if kit.format != FORMAT {
            return Err(KitError::unreadable(
                manifest,
                format!(
                    "its format is {:?}, and this keadm-batch reads {FORMAT:?}",
                    kit.format
                ),
            ));
        }
        if let Some(bad) = kit
            .files
            .iter()
            .find(|f| relative_key(Path::new(&f.path)).is_none())
        {
            return Err(KitError::unreadable(
                manifest,
                format!(
                    "it lists {:?}, which is not a path inside the kit directory",
                    bad.path
                ),
            ));
        }
        // A name `batch bundle` never writes: the run would refuse the file anyway.
        for file in &kit.files {
            if let Some(refused) = safe_name::refusal_in(Path::new(&file.path)) {
                return Err(KitError::unreadable(
                    manifest,
                    format!(
                        "it lists `{}`: {}",
                        safe_name::shown(&file.path),
                        refused.why
                    ),
                ));
            }
        }
        Ok(kit)
    }

    /// The entry for `rel` (a path relative to the kit directory), if listed.
    pub fn entry(&self, rel: &Path) -> Option<&KitFile> {
        let key = relative_key(rel)?;
        self.files.iter().find(|f| f.path == key)
    }
}

/// Refuses a manifest of `len` bytes when no kit's could be that large.
fn too_large(manifest: &Path, len: u64) -> Result<(), KitError> {
    if len > MAX_MANIFEST_BYTES {
        return Err(KitError::unreadable(
            manifest,
            format!("it holds {len} bytes, far more than a kit manifest"),
        ));
    }
    Ok(())
}

/// `rel` as the manifest spells it ('/'-separated normal components); `None` for an
/// absolute path, an empty one or one with `..`, which cannot name a file of the kit.
pub fn relative_key(rel: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?.to_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Checks the kit file `dir/rel` against `dir/kit.json` before it is used. Ok when `dir`
/// has no kit.json (a hand-made offline directory); otherwise Ok only when `rel` is listed
/// and its sha256 and size match. Reads kit.json once per call: a caller checking many
/// files reads it once with [`Kit::read`] and calls [`Kit::check`] for each.
pub fn check(dir: &Path, rel: &Path) -> Result<(), KitError> {
    match Kit::read(dir)? {
        Some(kit) => kit.check(dir, rel),
        None => Ok(()),
    }
}

impl Kit {
    /// Checks the kit file `dir/rel` (this kit's directory) against this manifest: it must
    /// be listed, and its sha256 and size must match.
    pub fn check(&self, dir: &Path, rel: &Path) -> Result<(), KitError> {
        let listed = self.listed(dir, rel)?;
        let (size, sha256) =
            crate::digest::sha256_file(&listed.file).map_err(|e| KitError::FileUnreadable {
                file: listed.file.clone(),
                manifest: listed.manifest.clone(),
                error: e.to_string(),
            })?;
        listed.matches(size, sha256)
    }

    /// The entry of the kit file `dir/rel` (this kit's directory), for a caller that hashes
    /// the file itself as it reads it ([`Listed::matches`]); refused when it is not listed,
    /// before anything is read.
    pub fn listed(&self, dir: &Path, rel: &Path) -> Result<Listed<'_>, KitError> {
        let file = dir.join(rel);
        let manifest = dir.join(KIT_FILE);
        match self.entry(rel) {
            Some(entry) => Ok(Listed {
                entry,
                file,
                manifest,
            }),
            None => Err(KitError::NotListed { file, manifest }),
        }
    }
}

/// A kit file that the manifest lists, and where it and the manifest are (for messages).
#[derive(Debug)]
pub struct Listed<'k> {
    entry: &'k KitFile,
    file: PathBuf,
    manifest: PathBuf,
}

impl Listed<'_> {
    /// Whether what was read of the file (`size` bytes hashing to `sha256`, lowercase hex)
    /// is what the manifest lists.
    pub fn matches(&self, size: u64, sha256: String) -> Result<(), KitError> {
        if sha256 != self.entry.sha256.to_ascii_lowercase() || size != self.entry.size {
            return Err(KitError::Mismatch {
                file: self.file.clone(),
                manifest: self.manifest.clone(),
                expected_sha256: self.entry.sha256.clone(),
                expected_size: self.entry.size,
                actual_sha256: sha256,
                actual_size: size,
            });
        }
        Ok(())
    }
}

/// One file found in a kit, in its directory or its archive: where it is, relative to the
/// kit, and its size and sha256 as it was read, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub rel: String,
    pub read: Result<(u64, String), String>,
}

/// A kit whose every file is the one its manifest lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole {
    pub keadm_version: String,
    /// The files the manifest lists (kit.json itself not counted), and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// kit.json's own sha256, lowercase hex: what `batch bundle` printed on the connected
    /// machine, for the operator to compare.
    pub manifest_sha256: String,
}

impl Kit {
    /// Every way the files `found` in the kit at `root` (a directory or an archive, for
    /// messages) differ from this manifest: a file it does not list or that does not match
    /// its entry (the check a run makes before it uses a file), and a file it lists that is
    /// not there. Empty when the kit is whole.
    pub fn problems(&self, root: &Path, found: &[Found]) -> Vec<KitError> {
        let mut problems = Vec::new();
        for found in found.iter().filter(|f| f.rel != KIT_FILE) {
            if let Some(refused) = safe_name::refusal_in(Path::new(&found.rel)) {
                problems.push(KitError::BadName {
                    file: root.join(&found.rel),
                    why: refused.why,
                });
                continue;
            }
            let listed = match self.listed(root, Path::new(&found.rel)) {
                Ok(listed) => listed,
                Err(not_listed) => {
                    problems.push(not_listed);
                    continue;
                }
            };
            let checked = match &found.read {
                Ok((size, sha256)) => listed.matches(*size, sha256.clone()),
                Err(error) => Err(KitError::FileUnreadable {
                    file: listed.file,
                    manifest: listed.manifest,
                    error: error.clone(),
                }),
            };
            problems.extend(checked.err());
        }
        for entry in &self.files {
            if !found.iter().any(|f| f.rel == entry.path) {
                problems.push(KitError::Missing {
                    file: root.join(&entry.path),
                    manifest: root.join(KIT_FILE),
                });
            }
        }
        problems
    }

    /// This kit, found whole, whose kit.json has `manifest_sha256`.
    pub fn whole(&self, manifest_sha256: String) -> Whole {
        Whole {
            keadm_version: self.keadm_version.clone(),
            files: self.files.len(),
            bytes: self.files.iter().map(|f| f.size).sum(),
            manifest_sha256,
        }
    }
}

/// Checks the kit directory `dir` as a whole, as it arrived at the site and before any
/// run: it must have a kit.json, and every file in it must be listed there and match, and
/// every file listed must be in it. Every problem is returned, not only the first.
pub fn check_dir(dir: &Path) -> Result<Whole, Vec<KitError>> {
    let manifest = dir.join(KIT_FILE);
    let kit = match Kit::read(dir) {
        Ok(Some(kit)) => kit,
        Ok(None) => {
            return Err(vec![KitError::NoManifest {
                dir: dir.to_path_buf(),
                manifest,
            }]);
        }
        Err(error) => return Err(vec![error]),
    };
    let unreadable = |e: std::io::Error| vec![KitError::unreadable(&manifest, e.to_string())];
    let (_, manifest_sha256) = crate::digest::sha256_file(&manifest).map_err(unreadable)?;
    // Each file is hashed as the run hashes it before use.
    let found: Vec<Found> = files_in(dir)
        .map_err(unreadable)?
        .into_iter()
        .map(|rel| Found {
            read: crate::digest::sha256_file(&dir.join(&rel)).map_err(|e| e.to_string()),
            rel,
        })
        .collect();
    let problems = kit.problems(dir, &found);
    if problems.is_empty() {
        Ok(kit.whole(manifest_sha256))
    } else {
        Err(problems)
    }
}

/// Every file under `dir` (symbolic links and other non-directories included), as the
/// manifest spells paths ('/'-separated, relative to `dir`), sorted.
pub fn files_in(dir: &Path) -> std::io::Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                out.push(relative_key(rel).unwrap_or_else(|| rel.display().to_string()));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// The fix every kit error ends with.
const FIX: &str = "Copy the kit again from the machine that ran `keadm-batch batch bundle`, or \
                   run bundle again there";

/// A kit file that must not be used. Text fields, so staging's error stays `Clone`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KitError {
    #[error(
        "The kit manifest {} cannot be read: {reason}. {FIX}, or remove kit.json to use the \
         directory as a hand-made offline directory without the check.",
        manifest.display()
    )]
    Unreadable { manifest: PathBuf, reason: String },

    #[error(
        "The kit file {} is not listed in the kit manifest {}, so it is not part of the kit \
         `batch bundle` wrote and was not used. Remove it, or {}.",
        file.display(),
        manifest.display(),
        lower_first(FIX)
    )]
    NotListed { file: PathBuf, manifest: PathBuf },

    #[error(
        "The kit file `{}` is not part of the kit: {why}. `batch bundle` writes no such name, \
         so it was not used. Remove it, or {}.",
        safe_name::shown_path(file),
        lower_first(FIX)
    )]
    BadName { file: PathBuf, why: String },

    #[error(
        "The kit file {} cannot be read for its check against the kit manifest {}: {error}. \
         {FIX}.",
        file.display(),
        manifest.display()
    )]
    FileUnreadable {
        file: PathBuf,
        manifest: PathBuf,
        error: String,
    },

    #[error(
        "The kit file {} is listed in the kit manifest {}, but it is missing. {FIX}.",
        file.display(),
        manifest.display()
    )]
    Missing { file: PathBuf, manifest: PathBuf },

    #[error(
        "There is no kit manifest {}, so {} is not a kit `batch bundle` wrote, and there is \
         nothing to check its files against. Give the directory `batch bundle --into` wrote, or \
         its archive, or {}.",
        manifest.display(),
        dir.display(),
        lower_first(FIX)
    )]
    NoManifest { dir: PathBuf, manifest: PathBuf },

    #[error(
        "The kit file {} does not match the kit manifest {}: its sha256 is {actual_sha256} \
         ({actual_size} bytes), but the manifest lists {expected_sha256} ({expected_size} \
         bytes). The file was damaged or altered after `batch bundle` wrote it, so it was not \
         used. {FIX}.",
        file.display(),
        manifest.display()
    )]
    Mismatch {
        file: PathBuf,
        manifest: PathBuf,
        expected_sha256: String,
        expected_size: u64,
        actual_sha256: String,
        actual_size: u64,
    },
}

impl KitError {
    fn unreadable(manifest: &Path, reason: String) -> KitError {
        KitError::Unreadable {
            manifest: manifest.to_path_buf(),
            reason,
        }
    }
}

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn kit_dir(files: &[(&str, &str, u64)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let kit = Kit {
            format: FORMAT.into(),
            keadm_version: "v1.23.1".into(),
            sandbox_images: Vec::new(),
            created: "2026-01-01T00:00:00Z".into(),
            files: files
                .iter()
                .map(|(path, sha256, size)| KitFile {
                    path: path.to_string(),
                    sha256: sha256.to_string(),
                    size: *size,
                })
                .collect(),
        };
        std::fs::write(
            dir.path().join(KIT_FILE),
            serde_json::to_vec_pretty(&kit).unwrap(),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("amd64")).unwrap();
        dir
    }

    #[test]
    fn a_directory_without_a_manifest_is_not_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check(dir.path(), Path::new("amd64/anything")), Ok(()));
    }

    #[test]
    fn a_listed_file_with_its_digest_and_size_passes() {
        let dir = kit_dir(&[("amd64/f", ABC_SHA256, 3)]);
        std::fs::write(dir.path().join("amd64/f"), b"abc").unwrap();
        assert_eq!(check(dir.path(), Path::new("amd64/f")), Ok(()));
        assert_eq!(check(dir.path(), Path::new("./amd64/f")), Ok(()));
    }

    #[test]
    fn an_altered_file_is_refused_naming_file_both_digests_and_the_fix() {
        let dir = kit_dir(&[("amd64/f", ABC_SHA256, 3)]);
        std::fs::write(dir.path().join("amd64/f"), b"abd").unwrap();
        let err = check(dir.path(), Path::new("amd64/f")).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, KitError::Mismatch { .. }), "{text}");
        assert!(text.starts_with(&format!(
            "The kit file {}/amd64/f does not match the kit manifest {}/kit.json: its sha256 is ",
            dir.path().display(),
            dir.path().display()
        )));
        assert!(text.contains(&format!("but the manifest lists {ABC_SHA256} (3 bytes)")));
        assert!(text.ends_with("or run bundle again there."), "{text}");
    }

    #[test]
    fn an_unlisted_file_and_a_broken_manifest_are_refused() {
        let dir = kit_dir(&[("amd64/f", ABC_SHA256, 3)]);
        std::fs::write(dir.path().join("amd64/g"), b"abc").unwrap();
        let err = check(dir.path(), Path::new("amd64/g")).unwrap_err();
        assert!(matches!(err, KitError::NotListed { .. }), "{err}");
        assert!(
            err.to_string().contains("Remove it, or copy the kit again"),
            "{err}"
        );

        std::fs::write(dir.path().join(KIT_FILE), b"{\"format\": 1}").unwrap();
        let err = check(dir.path(), Path::new("amd64/f")).unwrap_err();
        assert!(matches!(err, KitError::Unreadable { .. }), "{err}");

        let escaping = kit_dir(&[("../etc/passwd", ABC_SHA256, 3)]);
        let err = Kit::read(escaping.path()).unwrap_err().to_string();
        assert!(err.contains("not a path inside the kit directory"), "{err}");
    }

    #[test]
    fn a_whole_kit_passes_with_its_manifest_s_sha256() {
        let dir = kit_dir(&[("amd64/f", ABC_SHA256, 3)]);
        std::fs::write(dir.path().join("amd64/f"), b"abc").unwrap();
        let whole = check_dir(dir.path()).unwrap();
        assert_eq!((whole.files, whole.bytes), (1, 3));
        assert_eq!(whole.keadm_version, "v1.23.1");
        assert_eq!(
            whole.manifest_sha256,
            crate::digest::sha256_file(&dir.path().join(KIT_FILE))
                .unwrap()
                .1
        );
    }

    #[test]
    fn every_problem_of_a_kit_is_named_with_the_run_s_messages() {
        let dir = kit_dir(&[
            ("amd64/altered", ABC_SHA256, 3),
            ("amd64/gone", ABC_SHA256, 3),
            ("amd64/right", ABC_SHA256, 3),
        ]);
        std::fs::write(dir.path().join("amd64/altered"), b"abd").unwrap();
        std::fs::write(dir.path().join("amd64/right"), b"abc").unwrap();
        std::fs::write(dir.path().join("amd64/extra"), b"abc").unwrap();
        let problems = check_dir(dir.path()).unwrap_err();
        let kinds: Vec<(&str, String)> = problems
            .iter()
            .map(|p| match p {
                KitError::Mismatch { file, .. } => ("mismatch", file.display().to_string()),
                KitError::NotListed { file, .. } => ("not listed", file.display().to_string()),
                KitError::Missing { file, .. } => ("missing", file.display().to_string()),
                other => panic!("{other}"),
            })
            .collect();
        let at = |rel: &str| dir.path().join(rel).display().to_string();
        assert_eq!(
            kinds,
            [
                ("mismatch", at("amd64/altered")),
                ("not listed", at("amd64/extra")),
                ("missing", at("amd64/gone")),
            ]
        );
        // The same words as the run's check of one file.
        assert_eq!(
            problems[0],
            check(dir.path(), Path::new("amd64/altered")).unwrap_err()
        );
        assert!(
            problems[2]
                .to_string()
                .ends_with("or run bundle again there.")
        );

        // Found in an archive: the same check over what was read, named inside it.
        let kit = Kit::read(dir.path()).unwrap().unwrap();
        let found = [Found {
            rel: "amd64/right".into(),
            read: Err("cut short".into()),
        }];
        let problems = kit.problems(Path::new("kit.tar"), &found);
        assert!(
            problems[0]
                .to_string()
                .starts_with("The kit file kit.tar/amd64/right cannot be read for its check against the kit manifest kit.tar/kit.json: cut short."),
            "{}",
            problems[0]
        );
        assert_eq!(problems.len(), 3, "and the two not found: {problems:?}");
    }

    /// Security (review finding 2): a kit holds only the names `batch bundle` writes; a
    /// kit.json that lists another, and a file with another, are refused, shown escaped.
    #[test]
    fn names_outside_the_accepted_set_are_refused_in_a_kit_shown_escaped() {
        for listed in [
            "amd64/images/a\nb.tar",
            "amd64/-x/ok.tar",
            "amd64/images/a\"b.tar",
        ] {
            let dir = kit_dir(&[(listed, ABC_SHA256, 3)]);
            let err = Kit::read(dir.path()).unwrap_err();
            assert!(matches!(err, KitError::Unreadable { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains(&format!(
                    "cannot be read: it lists `{}`: its ",
                    safe_name::shown(listed)
                )) && !text.contains('\n'),
                "{text}"
            );
        }
        let dir = kit_dir(&[("amd64/images/a+b-1.2_x.tar", ABC_SHA256, 3)]);
        let kit = Kit::read(dir.path()).unwrap().unwrap();
        let found = [
            Found {
                rel: "amd64/images/a+b-1.2_x.tar".into(),
                read: Ok((3, ABC_SHA256.into())),
            },
            Found {
                rel: "amd64/images/x\u{1b}[2J.tar".into(),
                read: Ok((3, ABC_SHA256.into())),
            },
        ];
        let problems = kit.problems(Path::new("kit.tar"), &found);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(matches!(problems[0], KitError::BadName { .. }));
        assert!(
            problems[0].to_string().starts_with(
                "The kit file `kit.tar/amd64/images/x\\u{1b}[2J.tar` is not part of the kit: its file name `x\\u{1b}[2J.tar` holds `\\u{1b}`, `[`, and an accepted name has "
            ),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn a_directory_without_a_manifest_is_no_kit_to_check() {
        let dir = tempfile::tempdir().unwrap();
        let problems = check_dir(dir.path()).unwrap_err();
        assert!(
            matches!(problems[..], [KitError::NoManifest { .. }]),
            "{problems:?}"
        );
        assert!(
            problems[0].to_string().starts_with(&format!(
                "There is no kit manifest {}/kit.json",
                dir.path().display()
            )),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn relative_keys_are_slash_separated_and_stay_inside() {
        assert_eq!(
            relative_key(Path::new("amd64/images/pause_3.9.tar")).as_deref(),
            Some("amd64/images/pause_3.9.tar")
        );
        assert_eq!(
            relative_key(Path::new("./amd64//x")).as_deref(),
            Some("amd64/x")
        );
        for bad in ["", "/etc/passwd", "amd64/../../x", ".."] {
            assert_eq!(relative_key(Path::new(bad)), None, "{bad:?}");
        }
    }
}
