//! The kit as one file (`batch bundle --archive FILE.tar`), for an operator who carries one
//! file rather than a directory: a plain tar of kit.json and every file it lists, with its
//! sha512 beside it in `FILE.tar.sha512`, the bare hex digest and a newline as KubeEdge's
//! release checksum files have it. Not compressed: the image layers inside are already,
//! and so are the keadm tarballs. Deterministic (sorted by path, regular files only,
//! relative paths, fixed times, owners and modes), so the same kit gives the same bytes.
//!
//! At the site, [`verify`] reads the archive once without unpacking it: its sha512 against
//! the sidecar, or against the digest the operator was given out of band
//! (`--expect-sha512`: the sidecar checks integrity, not origin, see [`Expected`]), then
//! every file inside against its kit.json, by the kit check a run makes.
//! [`extract`] verifies it, unpacks it with staging's safe unpacker (no links, nothing
//! outside, no more than the archive holds) into a new directory, and checks that
//! directory as `--verify DIR` does.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::TEMPORARY_PREFIX;
use super::archive::file_header;
use super::error::BundleError;
use super::kit_dir::{set_mode, some_of};
use crate::kit::{self, Found, KIT_FILE, Kit, Whole};
use crate::stage::{Admitted, HashingReader, Links, Refusal};

/// An archive [`write`] wrote, read back whole.
#[derive(Debug)]
pub struct Packed {
    pub path: PathBuf,
    /// `FILE.tar.sha512`.
    pub sidecar: PathBuf,
    pub size: u64,
    pub sha512: String,
    pub whole: Whole,
}

/// The sha512 file of `archive`: its name with `.sha512` added, beside it.
pub fn sidecar_of(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".sha512");
    PathBuf::from(name)
}

/// Writes the kit in `dir` (complete, with its kit.json) as the archive `archive` and its
/// sha512 file. The archive is read back as the site will read it before either is in
/// place, so what the operator carries away holds the kit whole.
pub(crate) fn write(dir: &Path, archive: &Path) -> Result<Packed, BundleError> {
    let kit = match Kit::read(dir) {
        Ok(Some(kit)) => kit,
        Ok(None) => {
            return Err(BundleError::broken(vec![kit::KitError::NoManifest {
                dir: dir.to_path_buf(),
                manifest: dir.join(KIT_FILE),
            }]));
        }
        Err(error) => return Err(BundleError::broken(vec![error])),
    };
    // kit.json and the files it lists, nothing else (not a temporary of a bundle), in
    // one order whatever the directory's.
    let mut rels: Vec<&str> = kit.files.iter().map(|f| f.path.as_str()).collect();
    rels.push(KIT_FILE);
    rels.sort_unstable();

    let parent = parent_of(archive);
    let temporary = tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempfile_in(parent)
        .map_err(|e| BundleError::io("create a temporary file in", parent, e))?;
    let written = (|| {
        let mut tar = tar::Builder::new(BufWriter::new(temporary.as_file()));
        for rel in rels {
            let file = File::open(dir.join(rel))?;
            let mut header = file_header(file.metadata()?.len());
            tar.append_data(&mut header, rel, file)?;
        }
        tar.into_inner()?.flush()?;
        temporary.as_file().sync_all()
    })();
    written.map_err(|e| BundleError::io("write", temporary.path(), e))?;

    let reading = read(temporary.path())?;
    let whole = reading.check(archive)?;
    let size = fs::metadata(temporary.path())
        .map_err(|e| BundleError::io("read", temporary.path(), e))?
        .len();
    persist(temporary, archive)?;
    let sidecar = sidecar_of(archive);
    let mut text = tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempfile_in(parent)
        .map_err(|e| BundleError::io("create a temporary file in", parent, e))?;
    text.write_all(crate::stage::checksum_text(&reading.sha512).as_bytes())
        .and_then(|()| text.as_file().sync_all())
        .map_err(|e| BundleError::io("write", text.path(), e))?;
    persist(text, &sidecar)?;
    Ok(Packed {
        path: archive.to_path_buf(),
        sidecar,
        size,
        sha512: reading.sha512,
        whole,
    })
}

/// Moves `temporary` to `path`, readable by whoever copies it on.
fn persist(temporary: tempfile::NamedTempFile, path: &Path) -> Result<(), BundleError> {
    temporary
        .persist(path)
        .map_err(|e| BundleError::io("move into place", path, e.error))?;
    set_mode(path, 0o644);
    Ok(())
}

/// Checks, before anything is fetched, that the archive can go to `archive` (its
/// directory is created): not over a directory, and not inside the kit directory `dir`,
/// where a run and `--verify` would find a file kit.json does not list.
pub(crate) fn check_place(archive: &Path, dir: Option<&Path>) -> Result<(), BundleError> {
    let refusal = |reason: String| BundleError::ArchivePlace {
        archive: archive.to_path_buf(),
        reason,
    };
    if archive.is_dir() {
        return Err(refusal("it is a directory".into()));
    }
    if let Some(dir) = dir {
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.into());
        if absolute(archive).starts_with(absolute(dir)) {
            return Err(refusal(format!(
                "it is inside the kit directory {}, where a run and --verify refuse files that \
                 kit.json does not list",
                dir.display()
            )));
        }
    }
    let parent = parent_of(archive);
    fs::create_dir_all(parent).map_err(|e| BundleError::io("create", parent, e))
}

/// The directory `path` is in (`.` for a bare file name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Verifies the kit archive `archive` where it arrived: its sha512 against `pinned`
/// (`--expect-sha512`) or else its sha512 file, and every file inside against the kit.json
/// inside. Nothing is written.
pub(crate) fn verify(archive: &Path, pinned: Option<&str>) -> Result<Whole, BundleError> {
    verified(archive, pinned).map(|(whole, _)| whole)
}

/// The sha512 a kit archive must have, and who says so. The sha512 file travels with the
/// archive, so it tells a damaged archive, not a replaced one: whoever can replace the one
/// can replace the other. A digest the operator was given another way tells both.
enum Expected {
    /// Its `FILE.tar.sha512`.
    Sidecar { sidecar: PathBuf, sha512: String },
    /// `--expect-sha512 HEX`, lowercase.
    Pinned(String),
}

impl Expected {
    /// The sha512 of `archive` that `pinned` gives, else its sha512 file.
    fn of(archive: &Path, pinned: Option<&str>) -> Result<Expected, BundleError> {
        if let Some(pinned) = pinned {
            return Ok(Expected::Pinned(pinned.to_ascii_lowercase()));
        }
        let sidecar = sidecar_of(archive);
        let refused = |reason: String| BundleError::Sidecar {
            archive: archive.to_path_buf(),
            sidecar: sidecar.clone(),
            reason,
        };
        match fs::read_to_string(&sidecar) {
            Ok(text) => match crate::stage::parse_checksum(&text) {
                Some(sha512) => Ok(Expected::Sidecar {
                    sidecar: sidecar.clone(),
                    sha512,
                }),
                None => Err(refused(format!(
                    "does not hold a sha512 digest (128 hex characters); it reads {:?}",
                    crate::stage::shorten(&text)
                ))),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(refused("does not exist".into())),
            Err(e) => Err(refused(format!("cannot be read ({e})"))),
        }
    }

    fn sha512(&self) -> &str {
        match self {
            Expected::Sidecar { sha512, .. } | Expected::Pinned(sha512) => sha512,
        }
    }

    /// The error for `archive`, read with the sha512 `actual`, when that is not this one.
    fn mismatch(
        &self,
        archive: &Path,
        actual: String,
        inside: Option<Box<BundleError>>,
    ) -> BundleError {
        let archive = archive.to_path_buf();
        match self {
            Expected::Sidecar { sidecar, sha512 } => BundleError::ArchiveMismatch {
                archive,
                sidecar: sidecar.clone(),
                expected: sha512.clone(),
                actual,
                inside,
            },
            Expected::Pinned(sha512) => BundleError::PinnedMismatch {
                archive,
                expected: sha512.clone(),
                actual,
                inside,
            },
        }
    }
}

/// [`verify`], with the sha512 the archive was verified with.
fn verified(archive: &Path, pinned: Option<&str>) -> Result<(Whole, Expected), BundleError> {
    let expected = Expected::of(archive, pinned)?;
    let reading = read(archive)?;
    // The check inside comes first, so that a damaged archive says which file is damaged.
    let checked = reading.check(archive);
    if reading.sha512 != expected.sha512() {
        return Err(expected.mismatch(archive, reading.sha512, checked.err().map(Box::new)));
    }
    Ok((checked?, expected))
}

/// What reading a kit archive found.
struct Reading {
    /// The whole file's.
    sha512: String,
    /// kit.json's bytes, when it has one.
    manifest: Option<Vec<u8>>,
    /// Every other regular file, by path; the last of a path written twice, as unpacking
    /// would leave it.
    found: BTreeMap<String, Result<(u64, String), String>>,
    /// Why reading stopped before the end of the archive.
    refused: Option<Refusal>,
}

/// Reads the archive `path` once, to its end: the sha512 of all of it, and the size and
/// sha256 of each file inside, under the rules the unpacker applies.
fn read(path: &Path) -> Result<Reading, BundleError> {
    let file = File::open(path).map_err(|e| BundleError::io("open", path, e))?;
    let mut reader = HashingReader::new(BufReader::with_capacity(256 * 1024, file));
    let mut reading = Reading {
        sha512: String::new(),
        manifest: None,
        found: BTreeMap::new(),
        refused: None,
    };
    reading.refused = read_entries(&mut reader, &mut reading).err();
    // The digest covers the whole file, even when reading the entries stopped early.
    io::copy(&mut reader, &mut io::sink()).map_err(|e| BundleError::io("read", path, e))?;
    reading.sha512 = reader.finish_hex();
    Ok(reading)
}

fn read_entries(reader: &mut impl Read, reading: &mut Reading) -> Result<(), Refusal> {
    let unreadable = |e: io::Error| Refusal::Unreadable(e.to_string());
    let mut tar = tar::Archive::new(reader);
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        if crate::stage::admit(&mut entry, Links::Refused)? != Admitted::File {
            continue;
        }
        let Some(rel) = kit::relative_key(&entry.path().map_err(unreadable)?) else {
            continue;
        };
        if rel == KIT_FILE {
            let mut bytes = Vec::new();
            entry
                .by_ref()
                .take(kit::MAX_MANIFEST_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(unreadable)?;
            reading.manifest = Some(bytes);
            continue;
        }
        let read = crate::digest::sha256_reader(&mut entry);
        // A file cut short is the end of what can be read.
        let cut = read
            .as_ref()
            .err()
            .map(|e| Refusal::Unreadable(e.to_string()));
        reading.found.insert(rel, read.map_err(|e| e.to_string()));
        if let Some(cut) = cut {
            return Err(cut);
        }
    }
    Ok(())
}

impl Reading {
    /// The kit inside, checked as a kit directory is: kit.json there, every file in the
    /// archive listed in it and matching, every file it lists there. Messages name the
    /// files inside `archive` as `archive/<path>`.
    fn check(&self, archive: &Path) -> Result<Whole, BundleError> {
        if let Some(refusal) = &self.refused {
            return Err(refused(archive, refusal.clone()));
        }
        let manifest = archive.join(KIT_FILE);
        let Some(text) = &self.manifest else {
            return Err(BundleError::broken(vec![kit::KitError::NoManifest {
                dir: archive.to_path_buf(),
                manifest,
            }]));
        };
        let kit = Kit::parse(text, &manifest).map_err(|e| BundleError::broken(vec![e]))?;
        let found: Vec<Found> = self
            .found
            .iter()
            .map(|(rel, read)| Found {
                rel: rel.clone(),
                read: read.clone(),
            })
            .collect();
        let problems = kit.problems(archive, &found);
        if !problems.is_empty() {
            return Err(BundleError::broken(problems));
        }
        Ok(kit.whole(hex::encode(Sha256::digest(text))))
    }
}

/// The error for a kit archive the unpacker's rules refuse.
fn refused(archive: &Path, refusal: Refusal) -> BundleError {
    let archive = archive.to_path_buf();
    match refusal {
        Refusal::Unreadable(error) => BundleError::ArchiveUnreadable { archive, error },
        Refusal::Unsafe { entry, reason } => BundleError::ArchiveUnsafe {
            archive,
            entry,
            reason,
        },
        // Its limit is the archive's own size: a header that claims more lies.
        Refusal::TooLarge { entry } => BundleError::ArchiveUnreadable {
            archive,
            error: match entry {
                Some(entry) => format!("its entry {entry:?} claims more bytes than it holds"),
                None => "it claims more bytes than it holds".into(),
            },
        },
    }
}

/// Verifies the kit archive `archive` (against `pinned`, else its sha512 file), then
/// unpacks it into `into` (new, or an empty directory) and checks the kit there. Nothing
/// is left in `into` unless the kit is whole.
pub(crate) fn extract(
    archive: &Path,
    into: &Path,
    pinned: Option<&str>,
) -> Result<Whole, BundleError> {
    if !archive.is_file() {
        return Err(BundleError::NoKit {
            path: archive.to_path_buf(),
        });
    }
    refuse_occupied(archive, into)?;
    let (_, expected) = verified(archive, pinned)?;

    let parent = parent_of(into);
    fs::create_dir_all(parent).map_err(|e| BundleError::io("create", parent, e))?;
    let scratch = tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempdir_in(parent)
        .map_err(|e| BundleError::io("create a temporary directory in", parent, e))?;
    let file = File::open(archive).map_err(|e| BundleError::io("open", archive, e))?;
    // An uncompressed archive unpacks into no more than its own size.
    let limit = file
        .metadata()
        .map_err(|e| BundleError::io("read", archive, e))?
        .len();
    let reader = HashingReader::new(BufReader::with_capacity(256 * 1024, file));
    let (mut reader, unpacked) =
        crate::stage::unpack_tar(reader, scratch.path(), Links::Refused, limit);
    io::copy(&mut reader, &mut io::sink()).map_err(|e| BundleError::io("read", archive, e))?;
    let actual = reader.finish_hex();
    // Read a second time: what is unpacked must be what was verified.
    if actual != expected.sha512() {
        return Err(expected.mismatch(archive, actual, None));
    }
    unpacked.map_err(|refusal| refused(archive, refusal))?;

    // Into place under its own name; an empty directory there gives way. Readable by
    // all, as `batch bundle` leaves a kit (the temporary directory is owner-only).
    set_mode(scratch.path(), 0o755);
    if into.is_dir() {
        fs::remove_dir(into)
            .map_err(|e| BundleError::io("replace the empty directory", into, e))?;
    }
    let unpacked = scratch.keep();
    if let Err(e) = fs::rename(&unpacked, into) {
        let _ = fs::remove_dir_all(&unpacked);
        return Err(BundleError::io("move into place", into, e));
    }
    // Checked where the run will read it, as `--verify DIR` checks a directory.
    kit::check_dir(into).map_err(|problems| {
        let _ = fs::remove_dir_all(into);
        BundleError::broken(problems)
    })
}

/// Refuses `into` unless it is absent or an empty directory: a kit extracted among other
/// files would not be the kit, and nothing there is the bundle's to replace.
fn refuse_occupied(archive: &Path, into: &Path) -> Result<(), BundleError> {
    let refusal = |holds: String| BundleError::ExtractInto {
        archive: archive.to_path_buf(),
        dir: into.to_path_buf(),
        holds,
    };
    match fs::symlink_metadata(into) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(BundleError::io("inspect", into, e)),
        Ok(meta) if !meta.is_dir() => return Err(refusal("it is not a directory".into())),
        Ok(_) => {}
    }
    let mut names: Vec<String> = fs::read_dir(into)
        .map_err(|e| BundleError::io("list the files of", into, e))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    Err(refusal(format!("it holds {}", some_of(&names))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::{FORMAT, KitFile};

    /// A kit directory with two files and its kit.json.
    fn kit(dir: &Path) {
        let files = [
            ("amd64/images/pause_3.9.tar", "pause"),
            ("amd64/x.tar.gz", "x"),
        ];
        let mut listed = Vec::new();
        for (rel, text) in files {
            let path = dir.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            listed.push(KitFile {
                path: rel.into(),
                sha256: hex::encode(Sha256::digest(text)),
                size: text.len() as u64,
            });
        }
        let manifest = Kit {
            format: FORMAT.into(),
            keadm_version: "v1.23.1".into(),
            sandbox_images: Vec::new(),
            created: "2026-01-01T00:00:00Z".into(),
            files: listed,
        };
        fs::write(
            dir.join(KIT_FILE),
            serde_json::to_vec_pretty(&manifest).unwrap(),
        )
        .unwrap();
    }

    /// A scratch directory holding the kit `kit` wrote and its archive `kit.tar`.
    fn archived() -> (tempfile::TempDir, PathBuf, PathBuf, Packed) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kit");
        kit(&dir);
        let archive = tmp.path().join("kit.tar");
        let packed = write(&dir, &archive).unwrap();
        (tmp, dir, archive, packed)
    }

    #[test]
    fn an_archive_is_the_kit_in_order_with_its_sha512_beside_it() {
        let (tmp, dir, archive, packed) = archived();
        let bytes = fs::read(&archive).unwrap();
        assert_eq!(packed.sha512, hex::encode(sha2::Sha512::digest(&bytes)));
        assert_eq!(packed.size, bytes.len() as u64);
        assert_eq!(
            fs::read_to_string(sidecar_of(&archive)).unwrap(),
            format!("{}\n", packed.sha512)
        );
        assert_eq!(packed.whole.files, 2);
        let names: Vec<String> = tar::Archive::new(&bytes[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            ["amd64/images/pause_3.9.tar", "amd64/x.tar.gz", "kit.json"]
        );
        // Again: the same bytes.
        write(&dir, &tmp.path().join("again.tar")).unwrap();
        assert_eq!(fs::read(tmp.path().join("again.tar")).unwrap(), bytes);
        assert_eq!(verify(&archive, None).unwrap(), packed.whole);
    }

    #[test]
    fn a_damaged_archive_names_its_sha512_and_the_file_inside() {
        let (tmp, _, archive, _) = archived();
        let mut bytes = fs::read(&archive).unwrap();
        // The first file's data starts after its 512-byte header.
        bytes[512] ^= 0x01;
        fs::write(&archive, &bytes).unwrap();
        let err = verify(&archive, None).unwrap_err();
        assert!(matches!(err, BundleError::ArchiveMismatch { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "The kit file {}/amd64/images/pause_3.9.tar does not match the kit manifest {}/kit.json",
                archive.display(),
                archive.display()
            )),
            "{text}"
        );
        assert_eq!(err.failure(), super::super::Failure::Broken);

        // Nothing is extracted from it.
        let into = tmp.path().join("site");
        assert!(extract(&archive, &into, None).is_err());
        let left: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 3, "kit, kit.tar, kit.tar.sha512: {left:?}");

        // Without its sha512 file it cannot be verified.
        fs::remove_file(sidecar_of(&archive)).unwrap();
        let err = verify(&archive, None).unwrap_err().to_string();
        assert!(err.contains("kit.tar.sha512 of the kit archive"), "{err}");
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn extract_fills_a_new_directory_and_refuses_one_that_holds_anything() {
        let (tmp, dir, archive, packed) = archived();
        let into = tmp.path().join("site/kit");
        assert_eq!(extract(&archive, &into, None).unwrap(), packed.whole);
        assert_eq!(kit::files_in(&into).unwrap(), kit::files_in(&dir).unwrap());
        let err = extract(&archive, &into, None).unwrap_err();
        assert!(matches!(err, BundleError::ExtractInto { .. }), "{err}");
        assert!(
            err.to_string().contains("it holds amd64, kit.json"),
            "{err}"
        );
        // An empty directory is taken.
        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        extract(&archive, &empty, None).unwrap();
    }

    #[test]
    fn an_archive_goes_neither_over_a_directory_nor_inside_the_kit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kit");
        fs::create_dir(&dir).unwrap();
        let inside = check_place(&dir.join("./kit.tar"), Some(&tmp.path().join("./kit")));
        let err = inside.unwrap_err();
        assert!(matches!(err, BundleError::ArchivePlace { .. }), "{err}");
        assert!(
            err.to_string().contains("it is inside the kit directory"),
            "{err}"
        );
        let err = check_place(&dir, None).unwrap_err().to_string();
        assert!(err.contains("there: it is a directory."), "{err}");
        // Beside the kit, in a directory made for it.
        check_place(&tmp.path().join("out/kit.tar"), Some(&dir)).unwrap();
        assert!(tmp.path().join("out").is_dir());
    }

    #[test]
    fn an_archive_with_a_link_is_refused_even_with_a_matching_sha512() {
        let tmp = tempfile::tempdir().unwrap();
        let archive = tmp.path().join("kit.tar");
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        tar.append_link(&mut header, "kit.json", "/etc/passwd")
            .unwrap();
        let bytes = tar.into_inner().unwrap();
        fs::write(&archive, &bytes).unwrap();
        fs::write(
            sidecar_of(&archive),
            format!("{}\n", hex::encode(sha2::Sha512::digest(&bytes))),
        )
        .unwrap();
        let err = verify(&archive, None).unwrap_err().to_string();
        assert!(
            err.contains("its entry \"kit.json\" is a symbolic link to \"/etc/passwd\""),
            "{err}"
        );
        assert!(extract(&archive, &tmp.path().join("site"), None).is_err());
        assert!(!tmp.path().join("site").exists());
    }
}
