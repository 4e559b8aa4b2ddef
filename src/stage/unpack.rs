//! Safe unpacking of a keadm release tarball into `BASE/bin/<arch>`, and of any tar under
//! the same rules (`unpack_tar`, `admit`; the kit's archive is unpacked with no links).
//!
//! keadm shells out to `tar -xzvf`, which trusts the archive. We read it with flate2 + tar,
//! hash the file in the same pass (so the bytes we check are the bytes we unpack, even for
//! an offline package in a directory others can write), refuse anything that could land
//! outside the target or create a device, and only move the result into place once the
//! digest matches and the binary is present.

use std::cell::Cell;
use std::fs;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use flate2::read::GzDecoder;
use sha2::{Digest, Sha512};
use tar::EntryType;

use super::StageError;
use super::temporary::Temporary;

/// What a package must hash to, and where that expectation came from (for messages): a
/// checksum file's path or URL, or the pin's place in the config.
pub(crate) struct Expected {
    pub digest: String,
    pub source: String,
}

impl Expected {
    /// The error for `package`, whose sha512 is `actual` instead.
    pub(crate) fn mismatch(&self, package: &str, actual: String) -> StageError {
        StageError::ChecksumMismatch {
            package: package.to_string(),
            checksum_source: self.source.clone(),
            expected: self.digest.clone(),
            actual,
        }
    }
}

/// An unpacked, verified package.
pub(crate) struct Extracted {
    /// `bin_dir/<top>/keadm/keadm`, mode 0755.
    pub binary: PathBuf,
    pub tarball_sha512: String,
}

/// Unpacks `tarball` into `bin_dir/<top>` (replacing an earlier extraction), where `top`
/// is `keadm-<ver>-linux-<arch>`. With `expected`, a digest mismatch is an error and
/// nothing is moved into place. `name` is how messages refer to the package (a freshly
/// downloaded one still sits under a temporary name, so its URL says more). The archive
/// may hold at most `limit` bytes once decompressed, tar headers included, so neither a
/// huge file nor a flood of small ones can fill the disk.
pub(crate) fn unpack_package(
    tarball: &Path,
    name: &str,
    bin_dir: &Path,
    top: &str,
    expected: Option<&Expected>,
    limit: u64,
) -> Result<Extracted, StageError> {
    let file = fs::File::open(tarball).map_err(|e| StageError::io("open", tarball, e))?;
    let scratch = Temporary::Unpack
        .dir_in(bin_dir)
        .map_err(|e| StageError::io("create a temporary directory in", bin_dir, e))?;

    let reader = HashingReader::new(BufReader::with_capacity(256 * 1024, file));
    let (decoder, extracted) =
        unpack_tar(GzDecoder::new(reader), scratch.path(), Links::Inside, limit);
    let extracted = extracted.map_err(|refusal| refusal.of_package(name, limit));

    // Hash whatever the decoder did not need (trailer, padding) so the digest covers the
    // whole file, even when extraction stopped early on a bad entry.
    let mut reader = decoder.into_inner();
    io::copy(&mut reader, &mut io::sink()).map_err(|e| StageError::io("read", tarball, e))?;
    let actual = reader.finish_hex();

    // A mismatch explains a broken archive better than the archive error does.
    if let Some(expected) = expected
        && expected.digest != actual
    {
        return Err(expected.mismatch(name, actual));
    }
    extracted?;

    let unpacked_top = scratch.path().join(top);
    let binary_rel = format!("{top}/keadm/keadm");
    let binary = scratch.path().join(&binary_rel);
    // Each step must be real: a linked `keadm/` would dangle once the scratch dir is gone.
    let is_real = |path: &Path, dir: bool| {
        fs::symlink_metadata(path).is_ok_and(|m| {
            if dir {
                m.file_type().is_dir()
            } else {
                m.file_type().is_file()
            }
        })
    };
    if !(is_real(&unpacked_top, true)
        && is_real(&unpacked_top.join("keadm"), true)
        && is_real(&binary, false))
    {
        return Err(StageError::MissingBinary {
            package: name.to_string(),
            expected: binary_rel,
        });
    }
    remove_write_for_others(&unpacked_top)?;
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755))
        .map_err(|e| StageError::io("set the mode of", &binary, e))?;

    let target = bin_dir.join(top);
    replace_dir(&unpacked_top, &target, bin_dir)?;
    Ok(Extracted {
        binary: target.join("keadm/keadm"),
        tarball_sha512: actual,
    })
}

/// The links a tar may hold besides regular files and directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// Symbolic and hard links whose targets stay inside, as keadm's release tarballs
    /// may have.
    Inside,
    /// None: the kit's archive holds regular files only.
    Refused,
}

/// Why a tar could not be unpacked (or read); each kind of archive words it for its
/// operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It cannot be read as a tar archive: why.
    Unreadable(String),
    /// Its entry `entry` (its name as written) `reason` ("is a device file").
    Unsafe { entry: String, reason: String },
    /// Unpacking it would go past the limit: at `entry`, or, without one, in all.
    TooLarge { entry: Option<String> },
}

impl Refusal {
    /// The staging error for the keadm package `package`, unpacked under `limit`.
    fn of_package(self, package: &str, limit: u64) -> StageError {
        match self {
            Refusal::Unreadable(error) => StageError::BadArchive {
                package: package.to_string(),
                error,
            },
            Refusal::Unsafe { entry, reason } => StageError::UnsafeEntry {
                package: package.to_string(),
                entry,
                reason,
            },
            Refusal::TooLarge { entry } => StageError::UnpackTooLarge {
                package: package.to_string(),
                reason: match entry {
                    Some(entry) => {
                        format!("unpacking its entry {entry:?} would go past the limit")
                    }
                    None => "decompressed, it holds more than the limit".to_string(),
                },
                limit,
            },
        }
    }
}

/// What an entry that passed [`admit`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// Nothing to unpack: `./` (the directory itself), or a metadata record.
    Nothing,
    Directory,
    File,
    /// A link whose target stays inside (only with [`Links::Inside`]).
    Link,
}

/// Checks `entry` before a byte of it is used: a path that stays inside, and a kind of
/// entry `links` allows (regular files and directories always; never devices or FIFOs).
pub(crate) fn admit<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    links: Links,
) -> Result<Admitted, Refusal> {
    let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
    let unsafe_entry = |reason: &str| Refusal::Unsafe {
        entry: name.clone(),
        reason: reason.to_string(),
    };
    let unreadable = |e: io::Error| Refusal::Unreadable(e.to_string());
    let path = entry.path().map_err(unreadable)?.into_owned();
    if let Some(reason) = escape_reason(&path) {
        return Err(unsafe_entry(reason));
    }
    if path.components().all(|c| c == Component::CurDir) {
        return Ok(Admitted::Nothing);
    }
    match entry.header().entry_type() {
        EntryType::Regular | EntryType::Continuous => Ok(Admitted::File),
        EntryType::Directory => Ok(Admitted::Directory),
        kind @ (EntryType::Symlink | EntryType::Link) => {
            let what = if kind == EntryType::Symlink {
                "is a symbolic link"
            } else {
                "is a hard link"
            };
            let target = entry
                .link_name()
                .map_err(unreadable)?
                .ok_or_else(|| unsafe_entry("is a link without a target"))?;
            let shown = format!("{:?}", target.display().to_string());
            // Targets may only point down from where they are resolved: with no `..`
            // and no root, even chains of links stay inside.
            if escape_reason(&target).is_some() {
                return Err(unsafe_entry(&format!(
                    "{what} to {shown}, outside the package"
                )));
            }
            match links {
                Links::Inside => Ok(Admitted::Link),
                Links::Refused => Err(unsafe_entry(&format!("{what} to {shown}"))),
            }
        }
        EntryType::Char | EntryType::Block => Err(unsafe_entry("is a device file")),
        EntryType::Fifo => Err(unsafe_entry("is a FIFO")),
        // PAX and GNU metadata records are folded into the next entry by `tar`.
        EntryType::XGlobalHeader
        | EntryType::XHeader
        | EntryType::GNULongName
        | EntryType::GNULongLink => Ok(Admitted::Nothing),
        kind => Err(unsafe_entry(&format!(
            "is a {kind:?} entry, which neither keadm's releases nor kits hold"
        ))),
    }
}

/// Unpacks the tar stream `reader` into the existing directory `dest`: the entries
/// [`admit`] lets through under `links`, with at most `limit` bytes read from `reader`,
/// so neither a huge file nor a flood of small ones can fill the disk. Stops at the
/// first refusal. Gives `reader` back, so a caller hashing it can read it to its end.
pub(crate) fn unpack_tar<R: Read>(
    reader: R,
    dest: &Path,
    links: Links,
    limit: u64,
) -> (R, Result<(), Refusal>) {
    let budget = Budget::new(limit);
    let mut archive = tar::Archive::new(budget.wrap(reader));
    // Modes are kept (masked to 0o777: no setuid from an archive); owners are not.
    archive.set_preserve_permissions(false);
    archive.set_unpack_xattrs(false);
    let mut unpacked = extract_entries(&mut archive, dest, links, &budget);
    if budget.exceeded() {
        // The archive's own error ("failed to read entire block") would hide the reason.
        unpacked = Err(Refusal::TooLarge { entry: None });
    }
    (archive.into_inner().inner, unpacked)
}

fn extract_entries<R: Read>(
    archive: &mut tar::Archive<R>,
    dest: &Path,
    links: Links,
    budget: &Budget,
) -> Result<(), Refusal> {
    let unreadable = |e: io::Error| Refusal::Unreadable(e.to_string());
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        if admit(&mut entry, links)? == Admitted::Nothing {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        // Refused before a byte of it is written, naming the entry; the reader's own limit
        // still catches what the header does not announce.
        if budget.used().saturating_add(entry.size()) > budget.limit {
            return Err(Refusal::TooLarge { entry: Some(name) });
        }
        // `unpack_in` repeats its own containment checks: a second line of defence.
        let inside = entry
            .unpack_in(dest)
            .map_err(|e| Refusal::Unreadable(format!("entry {name:?}: {e}")))?;
        if !inside {
            return Err(Refusal::Unsafe {
                entry: name,
                reason: "points outside the extraction directory".into(),
            });
        }
    }
    Ok(())
}

/// Why `path` could resolve outside the directory it is relative to, if it could.
fn escape_reason(path: &Path) -> Option<&'static str> {
    for component in path.components() {
        match component {
            Component::ParentDir => return Some("points outside the package ('..')"),
            Component::RootDir | Component::Prefix(_) => return Some("is an absolute path"),
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    None
}

/// Clears group/other write bits below `dir` (links are not followed): an archive saying
/// 0777 must not make the binary swappable by other users.
fn remove_write_for_others(dir: &Path) -> Result<(), StageError> {
    let meta = fs::symlink_metadata(dir).map_err(|e| StageError::io("inspect", dir, e))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode & 0o7755))
            .map_err(|e| StageError::io("set the mode of", dir, e))?;
    }
    if meta.is_dir() {
        for child in fs::read_dir(dir).map_err(|e| StageError::io("read", dir, e))? {
            let child = child.map_err(|e| StageError::io("read", dir, e))?;
            remove_write_for_others(&child.path())?;
        }
    }
    Ok(())
}

/// Moves `new` to `target`, replacing what was there. Renames in one directory we own: a
/// reader sees the old tree or the new one, never a half-written mix. The old tree is
/// moved into a temporary directory first, and goes when that is dropped.
fn replace_dir(new: &Path, target: &Path, parent: &Path) -> Result<(), StageError> {
    let aside = if fs::symlink_metadata(target).is_ok() {
        let aside = Temporary::Old
            .dir_in(parent)
            .map_err(|e| StageError::io("create a temporary directory in", parent, e))?;
        fs::rename(target, aside.path().join("tree"))
            .map_err(|e| StageError::io("move aside", target, e))?;
        Some(aside)
    } else {
        None
    };
    fs::rename(new, target).map_err(|e| StageError::io("move into place", target, e))?;
    if let Some(aside) = aside {
        let path = aside.path().to_path_buf();
        if let Err(e) = aside.close() {
            log::warn!(
                "could not remove the old extraction {}: {e}",
                path.display()
            );
        }
    }
    Ok(())
}

/// Counts the bytes read through readers it wraps and fails a read past its limit.
struct Budget {
    limit: u64,
    used: Rc<Cell<u64>>,
    exceeded: Rc<Cell<bool>>,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: Rc::default(),
            exceeded: Rc::default(),
        }
    }

    fn wrap<R: Read>(&self, inner: R) -> Limited<R> {
        Limited {
            inner,
            limit: self.limit,
            used: self.used.clone(),
            exceeded: self.exceeded.clone(),
        }
    }

    fn used(&self) -> u64 {
        self.used.get()
    }

    fn exceeded(&self) -> bool {
        self.exceeded.get()
    }
}

/// A reader that fails once more than `limit` bytes would have come through it.
struct Limited<R> {
    inner: R,
    limit: u64,
    used: Rc<Cell<u64>>,
    exceeded: Rc<Cell<bool>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Ask for one byte more than the room left: getting it proves the stream too long.
        let room = (self.limit - self.used.get()).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if self.used.get().saturating_add(n as u64) > self.limit {
            self.exceeded.set(true);
            return Err(io::Error::other("the archive is larger than the limit"));
        }
        self.used.set(self.used.get() + n as u64);
        Ok(n)
    }
}

/// Hashes everything read through it with sha512.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha512,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha512::new(),
        }
    }

    pub(crate) fn finish_hex(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    const TOP: &str = "keadm-v1.21.0-linux-amd64";
    const NO_LIMIT: u64 = u64::MAX;

    enum Item<'a> {
        File(&'a str, &'a [u8], u32),
        Dir(&'a str),
        Symlink(&'a str, &'a str),
        HardLink(&'a str, &'a str),
        Device(&'a str),
    }

    /// Writes the name straight into the header: `tar::Builder` refuses `..` itself.
    fn raw_header(name: &str, kind: EntryType, size: u64, mode: u32) -> tar::Header {
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(mode);
        header
    }

    fn tarball(dir: &Path, items: &[Item]) -> PathBuf {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        io::Write::write_all(&mut gz, &tar_bytes(items)).unwrap();
        let path = dir.join(format!("{TOP}.tar.gz"));
        fs::write(&path, gz.finish().unwrap()).unwrap();
        path
    }

    /// `items` as a plain tar.
    fn tar_bytes(items: &[Item]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for item in items {
            let (mut header, data): (tar::Header, &[u8]) = match *item {
                Item::File(name, data, mode) => (
                    raw_header(name, EntryType::Regular, data.len() as u64, mode),
                    data,
                ),
                Item::Dir(name) => (raw_header(name, EntryType::Directory, 0, 0o755), b""),
                Item::Symlink(name, target) | Item::HardLink(name, target) => {
                    let kind = if matches!(item, Item::Symlink(..)) {
                        EntryType::Symlink
                    } else {
                        EntryType::Link
                    };
                    let mut header = raw_header(name, kind, 0, 0o777);
                    header.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
                    (header, b"")
                }
                Item::Device(name) => (raw_header(name, EntryType::Char, 0, 0o644), b""),
            };
            header.set_cksum();
            builder.append(&header, data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn good_items() -> Vec<Item<'static>> {
        vec![
            Item::Dir("keadm-v1.21.0-linux-amd64/"),
            Item::File("keadm-v1.21.0-linux-amd64/version", b"v1.21.0\n", 0o644),
            Item::Dir("keadm-v1.21.0-linux-amd64/keadm/"),
            Item::File(
                "keadm-v1.21.0-linux-amd64/keadm/keadm",
                b"#!/bin/sh\n",
                0o666,
            ),
        ]
    }

    fn bin_dir(tmp: &Path) -> PathBuf {
        let dir = tmp.join("bin");
        fs::create_dir(&dir).unwrap();
        dir
    }

    fn refused(items: Vec<Item>) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let bin = bin_dir(tmp.path());
        let tarball = tarball(tmp.path(), &items);
        let err = unpack_package(&tarball, "pkg", &bin, TOP, None, NO_LIMIT)
            .err()
            .expect("the archive must be refused");
        // Nothing moved into place, no scratch dir left behind.
        assert_eq!(fs::read_dir(&bin).unwrap().count(), 0, "{err}");
        err.to_string()
    }

    #[test]
    fn a_good_package_unpacks_with_an_executable_binary() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = bin_dir(tmp.path());
        let tarball = tarball(tmp.path(), &good_items());
        let digest = hex::encode(Sha512::digest(fs::read(&tarball).unwrap()));
        let expected = Expected {
            digest: digest.clone(),
            source: "test".into(),
        };
        let out = unpack_package(&tarball, "pkg", &bin, TOP, Some(&expected), NO_LIMIT).unwrap();
        assert_eq!(out.tarball_sha512, digest);
        assert_eq!(out.binary, bin.join(TOP).join("keadm/keadm"));
        let mode = fs::metadata(&out.binary).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        // Unpacking again replaces the old tree and leaves no scratch dirs.
        unpack_package(&tarball, "pkg", &bin, TOP, None, NO_LIMIT).unwrap();
        let names: Vec<_> = fs::read_dir(&bin)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [TOP]);
    }

    #[test]
    fn a_digest_mismatch_moves_nothing_into_place() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = bin_dir(tmp.path());
        let tarball = tarball(tmp.path(), &good_items());
        let expected = Expected {
            digest: "00".into(),
            source: "sums.txt".into(),
        };
        let err = unpack_package(&tarball, "pkg", &bin, TOP, Some(&expected), NO_LIMIT)
            .err()
            .unwrap();
        assert!(matches!(err, StageError::ChecksumMismatch { .. }), "{err}");
        assert_eq!(fs::read_dir(&bin).unwrap().count(), 0);
    }

    #[test]
    fn parent_dir_entries_are_refused() {
        let mut items = good_items();
        items.push(Item::File("../evil", b"x", 0o644));
        let err = refused(items);
        assert!(
            err.contains("\"../evil\" points outside the package"),
            "{err}"
        );
    }

    #[test]
    fn absolute_entries_are_refused() {
        let mut items = good_items();
        items.insert(0, Item::File("/etc/evil", b"x", 0o644));
        let err = refused(items);
        assert!(err.contains("\"/etc/evil\" is an absolute path"), "{err}");
    }

    #[test]
    fn escaping_symlinks_and_hard_links_are_refused() {
        let mut items = good_items();
        items.push(Item::Symlink("keadm-v1.21.0-linux-amd64/up", "../../.."));
        let err = refused(items);
        assert!(err.contains("is a symbolic link to \"../../..\""), "{err}");

        let mut items = good_items();
        items.push(Item::Symlink("keadm-v1.21.0-linux-amd64/abs", "/etc"));
        assert!(refused(items).contains("is a symbolic link to \"/etc\""));

        let mut items = good_items();
        items.push(Item::HardLink("keadm-v1.21.0-linux-amd64/h", "/etc/shadow"));
        assert!(refused(items).contains("is a hard link to \"/etc/shadow\""));
    }

    #[test]
    fn without_links_even_a_link_that_stays_inside_is_refused() {
        let file = || Item::File("kit.json", b"{}", 0o644);
        let plain = tar_bytes(&[file()]);
        let linked = tar_bytes(&[file(), Item::Symlink("amd64/x.tar", "kit.json")]);
        let tmp = tempfile::tempdir().unwrap();
        let dest = |name: &str| {
            let dir = tmp.path().join(name);
            fs::create_dir(&dir).unwrap();
            dir
        };
        let (_, refused) = unpack_tar(&linked[..], &dest("refused"), Links::Refused, NO_LIMIT);
        assert_eq!(
            refused,
            Err(Refusal::Unsafe {
                entry: "amd64/x.tar".into(),
                reason: "is a symbolic link to \"kit.json\"".into()
            })
        );
        let (_, inside) = unpack_tar(&linked[..], &dest("inside"), Links::Inside, NO_LIMIT);
        assert_eq!(inside, Ok(()));
        let files = dest("files");
        let (rest, unpacked) = unpack_tar(&plain[..], &files, Links::Refused, NO_LIMIT);
        assert_eq!(unpacked, Ok(()));
        assert_eq!(fs::read(files.join("kit.json")).unwrap(), b"{}");
        assert!(
            rest.is_empty() || rest.iter().all(|&b| b == 0),
            "the reader comes back"
        );
    }

    #[test]
    fn device_files_are_refused() {
        let mut items = good_items();
        items.push(Item::Device("keadm-v1.21.0-linux-amd64/null"));
        let err = refused(items);
        assert!(err.contains("is a device file"), "{err}");
    }

    #[test]
    fn a_binary_that_is_a_symlink_does_not_count() {
        let items = vec![
            Item::Dir("keadm-v1.21.0-linux-amd64/"),
            Item::Dir("keadm-v1.21.0-linux-amd64/keadm/"),
            Item::File("keadm-v1.21.0-linux-amd64/real", b"#!/bin/sh\n", 0o755),
            Item::Symlink("keadm-v1.21.0-linux-amd64/keadm/keadm", "real"),
        ];
        let err = refused(items);
        assert!(err.contains("has no keadm binary"), "{err}");
    }

    #[test]
    fn a_flood_of_empty_entries_is_stopped_by_the_decompressed_size() {
        // Each entry is only a 512-byte header, so no single one looks large.
        let names: Vec<String> = (0..200)
            .map(|i| format!("keadm-v1.21.0-linux-amd64/f{i}"))
            .collect();
        let mut items = good_items();
        items.extend(names.iter().map(|n| Item::File(n, b"", 0o644)));
        let tmp = tempfile::tempdir().unwrap();
        let bin = bin_dir(tmp.path());
        let tarball = tarball(tmp.path(), &items);
        let err = unpack_package(&tarball, "pkg", &bin, TOP, None, 32 * 1024)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("decompressed, it holds more than the limit"),
            "{err}"
        );
        assert!(err.contains("32768 bytes"), "{err}");
        assert_eq!(fs::read_dir(&bin).unwrap().count(), 0);
        // The same archive under a limit it fits in unpacks.
        unpack_package(&tarball, "pkg", &bin, TOP, None, 1 << 20).unwrap();
    }

    #[test]
    fn garbage_is_a_readable_archive_error() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = bin_dir(tmp.path());
        let path = tmp.path().join("x.tar.gz");
        fs::write(&path, b"<html>Not Found</html>").unwrap();
        let err = unpack_package(&path, "pkg", &bin, TOP, None, NO_LIMIT)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("as a gzip-compressed tar archive"),
            "{err}"
        );
    }
}
