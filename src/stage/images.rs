//! Container image archives for air-gapped nodes, on the control host: which archives
//! each arch gets, what images each one provides, and their size and sha256 for the
//! upload sidecars.
//!
//! An archive is a tar written by `docker save` (docker-archive: `manifest.json` with
//! `RepoTags`), `ctr export`, `nerdctl save` or `skopeo copy` (OCI: `index.json`, whose
//! manifests name their image in the annotations `io.containerd.image.name` or
//! `org.opencontainers.image.ref.name`); newer tools write both. The names are read the
//! way `ctr images import` reads them, so what an archive provides here is what the
//! runtime lists after the import: a `RepoTags` entry, an `io.containerd.image.name`, or an
//! `org.opencontainers.image.ref.name` that is a whole reference (a bare tag there would
//! be imported under a made-up name keadm never asks for, so it does not count). An
//! archive that names no image is refused: keadm could not find what it holds.
//!
//! Each archive is read once, in one pass that hashes it while the tar reader looks for
//! the two manifests, so a large archive costs one sequential read.
//!
//! On the wire, an archive goes gzip-compressed where that pays: `docker save` writes
//! layers uncompressed, and keadm's installation-package is mostly one Go binary that
//! gzip shrinks to about a third, while the blobs of an OCI archive (`ctr export`,
//! `skopeo`, what `bundle` pulls from a registry) are gzip already. A sample of each
//! archive decides; a compressible one is compressed once per run, into a private
//! temporary directory, and every node gets that copy.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::StageError;
use crate::arch::Arch;
use crate::image_ref::ImageRef;

/// The largest manifest (`manifest.json`, `index.json`) read from an archive: real ones
/// are a few KiB; anything near this is not a manifest.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Where the image archives come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSources {
    /// The offline directory's layout: `<dir>/<arch>/images/*.tar`, for every arch that
    /// has such a directory.
    Layout { dir: PathBuf },
    /// `keadm.offlineImages`: per arch, archive files and directories of `*.tar` files.
    Listed { paths: BTreeMap<Arch, Vec<PathBuf>> },
}

/// How an archive names an image, for tools that copy one image out of it by name
/// (`skopeo copy docker-archive:FILE:NAME`, `oci-archive:FILE:NAME`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// A `RepoTags` entry of `manifest.json`, as written.
    DockerTag(String),
    /// The `org.opencontainers.image.ref.name` annotation of an `index.json` manifest.
    OciRefName(String),
    /// Named only by `io.containerd.image.name`: no copy tool can pick it out by name.
    None,
}

/// One image an archive provides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedImage {
    /// The name the runtime will list after the import, in full.
    pub reference: ImageRef,
    pub selector: Selector,
}

/// An image archive to put on the nodes of one arch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageArchive {
    /// The file on the control host.
    pub path: PathBuf,
    /// Its name in the node's upload directory.
    pub remote_name: String,
    pub size: u64,
    /// Lowercase hex; recorded in the sidecar on the node.
    pub sha256: String,
    /// What it provides, in the order the archive names them (each image once).
    pub images: Vec<ArchivedImage>,
    /// A gzip-compressed copy to send instead, when compressing pays.
    pub gzipped: Option<Gzipped>,
}

/// An archive's gzip-compressed copy on the control host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gzipped {
    pub path: PathBuf,
    pub size: u64,
}

/// Compress an archive for the wire only when that saves at least this share of its
/// bytes: otherwise the nodes would spend gunzip time for little.
const GZIP_MAX_RATIO: f64 = 0.8;

/// How much of an archive the compressibility sample reads, in three slices (start,
/// middle, end): enough to see whether its layers are compressed already.
const SAMPLE_BYTES: u64 = 3 << 20;

/// Every arch's image archives, listed and hashed once per run.
#[derive(Debug, Default)]
pub struct OfflineImages {
    by_arch: BTreeMap<Arch, Vec<ImageArchive>>,
    /// Holds the compressed copies; removed with them when the run ends.
    compressed: Option<tempfile::TempDir>,
}

impl OfflineImages {
    /// Lists, reads and hashes the archives `sources` name. `None` for a layout without
    /// any `<arch>/images` directory: that offline directory is not set up for images
    /// (keadm's own layout has none), so nothing about images changes for its nodes.
    pub fn list(sources: &ImageSources) -> Result<Option<OfflineImages>, StageError> {
        let mut by_arch = BTreeMap::new();
        match sources {
            ImageSources::Layout { dir } => {
                if !Arch::ALL
                    .iter()
                    .any(|arch| dir.join(arch.as_str()).join("images").is_dir())
                {
                    return Ok(None);
                }
                for arch in Arch::ALL {
                    let archives = offline_images(dir, arch)?;
                    if !archives.is_empty() {
                        by_arch.insert(arch, archives);
                    }
                }
            }
            ImageSources::Listed { paths } => {
                for (arch, paths) in paths {
                    let archives = listed_images(*arch, paths)?;
                    if !archives.is_empty() {
                        by_arch.insert(*arch, archives);
                    }
                }
            }
        }
        let images = OfflineImages {
            by_arch,
            compressed: None,
        };
        for (arch, archives) in &images.by_arch {
            log::info!(
                "offline images for {arch}: {}",
                archives
                    .iter()
                    .map(|a| format!("{} ({} bytes)", a.path.display(), a.size))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(Some(images))
    }

    /// Makes a gzip-compressed copy of each archive that compresses well, for the
    /// uploads (see the module doc). An archive listed for several arches is compressed
    /// once.
    pub fn compress_for_the_wire(&mut self) -> Result<(), StageError> {
        let mut done: BTreeMap<String, Option<Gzipped>> = BTreeMap::new();
        for archive in self.by_arch.values_mut().flatten() {
            if let Some(copy) = done.get(&archive.sha256) {
                archive.gzipped = copy.clone();
                continue;
            }
            let copy = if pays_to_compress(&archive.path, archive.size)? {
                if self.compressed.is_none() {
                    let dir = tempfile::Builder::new()
                        .prefix("keadm-batch-images-")
                        .tempdir()
                        .map_err(|e| {
                            StageError::io(
                                "create a temporary directory in",
                                std::env::temp_dir(),
                                e,
                            )
                        })?;
                    self.compressed = Some(dir);
                }
                let dir = self
                    .compressed
                    .as_ref()
                    .map(|d| d.path())
                    .unwrap_or(Path::new(""));
                gzip_copy(archive, dir)?
            } else {
                None
            };
            if let Some(copy) = &copy {
                log::info!(
                    "{} goes compressed: {} bytes for its {}",
                    archive.path.display(),
                    copy.size,
                    archive.size
                );
            }
            done.insert(archive.sha256.clone(), copy.clone());
            archive.gzipped = copy;
        }
        Ok(())
    }

    /// The archives for nodes of `arch` (none for an arch without any).
    pub fn for_arch(&self, arch: Arch) -> &[ImageArchive] {
        self.by_arch.get(&arch).map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_arch.is_empty()
    }

    /// The upload names of every arch's archives, each once: the prepare step asks the
    /// node for their sidecars before it knows the node's arch.
    pub fn remote_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for archive in self.by_arch.values().flatten() {
            if !names.contains(&archive.remote_name.as_str()) {
                names.push(&archive.remote_name);
            }
        }
        names
    }

    /// Whether any archive goes compressed (the nodes then need a working gzip).
    pub fn any_gzipped(&self) -> bool {
        self.by_arch.values().flatten().any(|a| a.gzipped.is_some())
    }

    /// The most bytes one node may be sent: the largest arch's archives together.
    pub fn largest_arch_bytes(&self) -> u64 {
        self.by_arch
            .values()
            .map(|archives| archives.iter().map(|a| a.size).sum())
            .max()
            .unwrap_or(0)
    }
}

/// Whether gzip shrinks a sample of the archive at `path` (three slices) below
/// [`GZIP_MAX_RATIO`].
fn pays_to_compress(path: &Path, size: u64) -> Result<bool, StageError> {
    let slice = SAMPLE_BYTES / 3;
    let mut file = File::open(path).map_err(|e| StageError::io("read", path, e))?;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut sampled = 0u64;
    let mut buf = vec![0u8; slice as usize];
    for offset in [0, size / 2, size.saturating_sub(slice)] {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| StageError::io("read", path, e))?;
        let n = read_full(&mut file, &mut buf).map_err(|e| StageError::io("read", path, e))?;
        encoder
            .write_all(&buf[..n])
            .map_err(|e| StageError::io("read", path, e))?;
        sampled += n as u64;
    }
    let compressed = encoder
        .finish()
        .map_err(|e| StageError::io("read", path, e))?
        .len();
    Ok(sampled > 0 && (compressed as f64) < GZIP_MAX_RATIO * sampled as f64)
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            read => n += read,
        }
    }
    Ok(n)
}

/// Writes the gzip-compressed copy of `archive` into `dir`; `None` when the whole file
/// did not compress as well as its sample promised.
fn gzip_copy(archive: &ImageArchive, dir: &Path) -> Result<Option<Gzipped>, StageError> {
    let path = dir.join(format!("{}.tar.gz", archive.sha256));
    let mut input =
        File::open(&archive.path).map_err(|e| StageError::io("read", &archive.path, e))?;
    let output = File::create(&path).map_err(|e| StageError::io("write", &path, e))?;
    let mut encoder =
        flate2::write::GzEncoder::new(io::BufWriter::new(output), flate2::Compression::fast());
    io::copy(&mut input, &mut encoder).map_err(|e| StageError::io("compress", &archive.path, e))?;
    encoder
        .finish()
        .and_then(|mut w| w.flush())
        .map_err(|e| StageError::io("write", &path, e))?;
    let size = fs::metadata(&path)
        .map_err(|e| StageError::io("read", &path, e))?
        .len();
    if (size as f64) < GZIP_MAX_RATIO * archive.size as f64 {
        Ok(Some(Gzipped { path, size }))
    } else {
        let _ = fs::remove_file(&path);
        Ok(None)
    }
}

/// The offline directory's image archives for `arch`: every `*.tar` file in
/// `<dir>/<arch>/images`, in name order. None when that directory does not exist. In a
/// kit `batch bundle` wrote (a `kit.json` in `dir`), each archive must be listed there
/// with its sha256 and size, as the keadm tarball must: one that is not, or was altered
/// on the way to the site, is refused before it is read.
pub fn offline_images(dir: &Path, arch: Arch) -> Result<Vec<ImageArchive>, StageError> {
    let images_dir = dir.join(arch.as_str()).join("images");
    if !images_dir.is_dir() {
        return Ok(Vec::new());
    }
    // kit.json is read once for all of this arch's archives.
    let kit = crate::kit::Kit::read(dir)?;
    let mut archives = Vec::new();
    for path in tar_files_in(&images_dir)? {
        if let Some(kit) = &kit {
            kit.check(dir, path.strip_prefix(dir).unwrap_or(&path))?;
        }
        archives.push(read_archive(&path)?);
    }
    Ok(archives)
}

/// `keadm.offlineImages` for one arch: each path is an archive, or a directory whose
/// `*.tar` files are archives.
fn listed_images(arch: Arch, paths: &[PathBuf]) -> Result<Vec<ImageArchive>, StageError> {
    let mut archives: Vec<ImageArchive> = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            tar_files_in(path)?
        } else {
            vec![path.clone()]
        };
        for file in files {
            let archive = read_archive(&file)?;
            if let Some(other) = archives
                .iter()
                .find(|a| a.remote_name == archive.remote_name)
            {
                return Err(StageError::ImageNameClash {
                    arch,
                    name: archive.remote_name.clone(),
                    first: other.path.clone(),
                    second: archive.path,
                });
            }
            archives.push(archive);
        }
    }
    Ok(archives)
}

/// The `*.tar` files directly in `dir`, in name order (hidden files left out).
fn tar_files_in(dir: &Path) -> Result<Vec<PathBuf>, StageError> {
    let entries = fs::read_dir(dir).map_err(|e| StageError::ImageDir {
        path: dir.to_path_buf(),
        error: e.to_string(),
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StageError::ImageDir {
            path: dir.to_path_buf(),
            error: e.to_string(),
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.ends_with(".tar") && !name.starts_with('.') && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The upload name of an archive: its file name behind a prefix, so it cannot take the
/// name of keadm or of a copyFrom file beside it in the upload directory.
pub fn remote_name(file_name: &str) -> String {
    format!("image-{file_name}")
}

/// Reads `path` as an image archive: the images it names, its size and sha256.
pub fn read_archive(path: &Path) -> Result<ImageArchive, StageError> {
    let unreadable = |reason: String| StageError::ImageArchiveUnreadable {
        path: path.to_path_buf(),
        reason,
    };
    let file = File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let mut reader = Hashing {
        inner: file,
        hasher: Sha256::new(),
        count: 0,
    };
    let mut docker_manifest = None;
    let mut oci_index = None;
    {
        let mut archive = tar::Archive::new(&mut reader);
        let entries = archive
            .entries()
            .map_err(|e| unreadable(format!("it is not a tar archive ({e})")))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| unreadable(format!("its tar structure is damaged ({e})")))?;
            let name = entry
                .path()
                .map(|p| p.to_string_lossy().trim_start_matches("./").to_string())
                .unwrap_or_default();
            let slot = match name.as_str() {
                "manifest.json" => &mut docker_manifest,
                "index.json" => &mut oci_index,
                _ => continue,
            };
            if entry.size() > MAX_MANIFEST_BYTES {
                return Err(unreadable(format!(
                    "its {name} is {} bytes, too large for a manifest",
                    entry.size()
                )));
            }
            let mut text = Vec::new();
            entry
                .read_to_end(&mut text)
                .map_err(|e| unreadable(format!("its {name} cannot be read ({e})")))?;
            *slot = Some(text);
        }
    }
    // The tar reader stops at the end-of-archive marker; the padding after it counts too.
    io::copy(&mut reader, &mut io::sink()).map_err(|e| unreadable(e.to_string()))?;
    if docker_manifest.is_none() && oci_index.is_none() {
        return Err(unreadable(
            "it has neither a manifest.json (docker-archive) nor an index.json (OCI archive)"
                .to_string(),
        ));
    }
    let mut images = Vec::new();
    if let Some(text) = &docker_manifest {
        images.extend(docker_archive_images(text).map_err(unreadable)?);
    }
    if let Some(text) = &oci_index {
        let (oci_images, short_names) = oci_archive_images(text).map_err(unreadable)?;
        for name in short_names {
            log::warn!(
                "The image archive {} names {name} in short in its index.json. containerd imports it under that name, and keadm asks for the full one ({}), so the import would not serve the join. Save the image under its full name.",
                path.display(),
                ImageRef::parse(&name)
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            );
        }
        for image in oci_images {
            if !images
                .iter()
                .any(|i: &ArchivedImage| i.reference == image.reference)
            {
                images.push(image);
            }
        }
    }
    if images.is_empty() {
        return Err(StageError::ImageArchiveUnnamed {
            path: path.to_path_buf(),
        });
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(ImageArchive {
        path: path.to_path_buf(),
        remote_name: remote_name(&file_name),
        size: reader.count,
        sha256: hex::encode(reader.hasher.finalize()),
        images,
        gzipped: None,
    })
}

/// docker-archive's `manifest.json`: `[{"Config": ..., "RepoTags": [...], "Layers": [...]}]`.
fn docker_archive_images(text: &[u8]) -> Result<Vec<ArchivedImage>, String> {
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "RepoTags", default)]
        repo_tags: Option<Vec<String>>,
    }
    let entries: Vec<Entry> = serde_json::from_slice(text)
        .map_err(|e| format!("its manifest.json is not a docker-archive manifest ({e})"))?;
    let mut images: Vec<ArchivedImage> = Vec::new();
    for tag in entries
        .into_iter()
        .flat_map(|e| e.repo_tags.unwrap_or_default())
    {
        if let Some(reference) = ImageRef::parse(&tag).ok()
            && !images.iter().any(|i| i.reference == reference)
        {
            images.push(ArchivedImage {
                reference,
                selector: Selector::DockerTag(tag),
            });
        }
    }
    Ok(images)
}

/// The OCI image layout's `index.json`: the names of its manifests, as `ctr images
/// import` takes them (see the module doc), and those written in short (`kubeedge/x:1`),
/// which containerd keeps as written where CRI asks for the full name.
fn oci_archive_images(text: &[u8]) -> Result<(Vec<ArchivedImage>, Vec<String>), String> {
    #[derive(serde::Deserialize)]
    struct Index {
        #[serde(default)]
        manifests: Vec<Descriptor>,
    }
    #[derive(serde::Deserialize)]
    struct Descriptor {
        #[serde(default)]
        annotations: BTreeMap<String, String>,
    }
    let index: Index = serde_json::from_slice(text)
        .map_err(|e| format!("its index.json is not an OCI image index ({e})"))?;
    let mut images: Vec<ArchivedImage> = Vec::new();
    let mut short_names = Vec::new();
    for descriptor in index.manifests {
        let ref_name = descriptor
            .annotations
            .get("org.opencontainers.image.ref.name");
        let named = descriptor
            .annotations
            .get("io.containerd.image.name")
            .or(ref_name.filter(|r| r.contains(['/', ':', '@'])));
        let Some(reference) = named.and_then(|n| ImageRef::parse(n).ok()) else {
            continue;
        };
        if let Some(name) = named.filter(|n| **n != reference.to_string()) {
            short_names.push(name.clone());
        }
        if images.iter().any(|i| i.reference == reference) {
            continue;
        }
        images.push(ArchivedImage {
            reference,
            selector: match ref_name {
                Some(name) => Selector::OciRefName(name.clone()),
                None => Selector::None,
            },
        });
    }
    Ok((images, short_names))
}

/// Hashes and counts what is read through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(name, bytes)` entries.
    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut header = tar::Header::new_ustar();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        path
    }

    fn names(archive: &ImageArchive) -> Vec<String> {
        archive
            .images
            .iter()
            .map(|i| i.reference.to_string())
            .collect()
    }

    const DOCKER_MANIFEST: &str = r#"[{"Config":"c.json","RepoTags":["kubeedge/installation-package:v1.23.1","kubeedge/installation-package:v1.23.1"],"Layers":["l/layer.tar"]}]"#;

    #[test]
    fn a_docker_archive_provides_its_repo_tags_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(&[
            ("l/layer.tar", b"layer"),
            ("c.json", b"{}"),
            ("manifest.json", DOCKER_MANIFEST.as_bytes()),
        ]);
        let path = write(dir.path(), "ip.tar", &bytes);
        let archive = read_archive(&path).unwrap();
        assert_eq!(
            names(&archive),
            ["docker.io/kubeedge/installation-package:v1.23.1"]
        );
        assert_eq!(
            archive.images[0].selector,
            Selector::DockerTag("kubeedge/installation-package:v1.23.1".into())
        );
        assert_eq!(archive.size, bytes.len() as u64);
        assert_eq!(archive.sha256, crate::digest::sha256_file(&path).unwrap().1);
        assert_eq!(archive.remote_name, "image-ip.tar");
    }

    #[test]
    fn an_oci_archive_provides_what_ctr_would_name() {
        let dir = tempfile::tempdir().unwrap();
        let index = r#"{"schemaVersion":2,"manifests":[
            {"digest":"sha256:1","annotations":{"io.containerd.image.name":"registry.k8s.io/pause:3.9","org.opencontainers.image.ref.name":"3.9"}},
            {"digest":"sha256:2","annotations":{"org.opencontainers.image.ref.name":"docker.io/kubeedge/installation-package:v1.23.1"}},
            {"digest":"sha256:3","annotations":{"org.opencontainers.image.ref.name":"latest"}},
            {"digest":"sha256:4"}]}"#;
        let path = write(
            dir.path(),
            "two.tar",
            &tar_of(&[
                ("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
                ("./index.json", index.as_bytes()),
            ]),
        );
        let archive = read_archive(&path).unwrap();
        assert_eq!(
            names(&archive),
            [
                "registry.k8s.io/pause:3.9",
                "docker.io/kubeedge/installation-package:v1.23.1"
            ]
        );
        assert_eq!(
            archive.images[0].selector,
            Selector::OciRefName("3.9".into())
        );
    }

    #[test]
    fn both_manifests_name_one_image_once() {
        let dir = tempfile::tempdir().unwrap();
        let index = r#"{"manifests":[{"annotations":{"io.containerd.image.name":"docker.io/kubeedge/installation-package:v1.23.1"}}]}"#;
        let path = write(
            dir.path(),
            "both.tar",
            &tar_of(&[
                ("index.json", index.as_bytes()),
                ("manifest.json", DOCKER_MANIFEST.as_bytes()),
            ]),
        );
        assert_eq!(
            names(&read_archive(&path).unwrap()),
            ["docker.io/kubeedge/installation-package:v1.23.1"]
        );
    }

    #[test]
    fn archives_that_cannot_serve_are_refused_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let unnamed = write(
            dir.path(),
            "unnamed.tar",
            &tar_of(&[(
                "index.json",
                br#"{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"v1"}}]}"#,
            )]),
        );
        let err = read_archive(&unnamed).unwrap_err().to_string();
        assert!(err.contains("unnamed.tar names no image"), "{err}");
        let plain = write(dir.path(), "plain.tar", &tar_of(&[("a.txt", b"x")]));
        let err = read_archive(&plain).unwrap_err().to_string();
        assert!(
            err.contains("plain.tar") && err.contains("neither a manifest.json"),
            "{err}"
        );
        let bad_json = write(
            dir.path(),
            "bad.tar",
            &tar_of(&[("manifest.json", b"{not json")]),
        );
        let err = read_archive(&bad_json).unwrap_err().to_string();
        assert!(err.contains("not a docker-archive manifest"), "{err}");
        let not_tar = write(dir.path(), "not.tar", &[7u8; 700]);
        assert!(read_archive(&not_tar).is_err());
    }

    #[test]
    fn archives_go_compressed_only_where_that_pays() {
        let dir = tempfile::tempdir().unwrap();
        // Uncompressed layers (docker save) compress; random bytes (gzip blobs) do not.
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {i} of an uncompressed layer\n").into_bytes())
            .collect();
        let mut noise = vec![0u8; 3 << 20];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        write(
            dir.path(),
            "amd64/images/docker.tar",
            &tar_of(&[
                ("l/layer.tar", &text),
                ("manifest.json", DOCKER_MANIFEST.as_bytes()),
            ]),
        );
        write(
            dir.path(),
            "amd64/images/oci.tar",
            &tar_of(&[
                ("blobs/sha256/x", &noise),
                ("manifest.json", DOCKER_MANIFEST.as_bytes()),
            ]),
        );
        let layout = ImageSources::Layout {
            dir: dir.path().to_path_buf(),
        };
        let mut images = OfflineImages::list(&layout).unwrap().unwrap();
        assert!(!images.any_gzipped());
        images.compress_for_the_wire().unwrap();
        let [docker, oci] = images.for_arch(Arch::Amd64) else {
            panic!("two archives")
        };
        let copy = docker.gzipped.as_ref().unwrap();
        assert!(copy.size * 3 < docker.size, "{copy:?} for {}", docker.size);
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(File::open(&copy.path).unwrap())
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, fs::read(&docker.path).unwrap());
        assert_eq!(oci.gzipped, None);
        assert!(images.any_gzipped());
        // The copies live as long as the listing.
        let path = copy.path.clone();
        drop(images);
        assert!(!path.exists());
    }

    #[test]
    fn a_kit_s_archives_are_checked_against_its_manifest_before_they_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tar_of(&[("manifest.json", DOCKER_MANIFEST.as_bytes())]);
        let path = write(dir.path(), "amd64/images/ip.tar", &archive);
        let (size, sha256) = crate::digest::sha256_file(&path).unwrap();
        let kit = crate::kit::Kit {
            format: crate::kit::FORMAT.into(),
            keadm_version: "v1.23.1".into(),
            created: "2026-01-01T00:00:00Z".into(),
            files: vec![crate::kit::KitFile {
                path: "amd64/images/ip.tar".into(),
                sha256,
                size,
            }],
        };
        write(
            dir.path(),
            crate::kit::KIT_FILE,
            &serde_json::to_vec(&kit).unwrap(),
        );
        assert_eq!(offline_images(dir.path(), Arch::Amd64).unwrap().len(), 1);

        // Altered on the way: refused by the kit check, naming the file.
        let mut altered = archive.clone();
        altered.extend_from_slice(&[0u8; 512]);
        write(dir.path(), "amd64/images/ip.tar", &altered);
        let err = offline_images(dir.path(), Arch::Amd64).unwrap_err();
        assert!(
            matches!(err, StageError::Kit(crate::kit::KitError::Mismatch { .. })),
            "{err}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );

        // An archive the kit does not list is refused too.
        write(dir.path(), "amd64/images/ip.tar", &archive);
        write(dir.path(), "amd64/images/extra.tar", &archive);
        let err = offline_images(dir.path(), Arch::Amd64).unwrap_err();
        assert!(
            matches!(err, StageError::Kit(crate::kit::KitError::NotListed { .. })),
            "{err}"
        );
    }

    #[test]
    fn the_layout_and_the_listing_find_each_arch_s_archives() {
        let dir = tempfile::tempdir().unwrap();
        let archive = tar_of(&[("manifest.json", DOCKER_MANIFEST.as_bytes())]);
        write(dir.path(), "amd64/images/b.tar", &archive);
        write(dir.path(), "amd64/images/a.tar", &archive);
        write(dir.path(), "amd64/images/.hidden.tar", &archive);
        write(dir.path(), "amd64/images/notes.txt", b"x");
        write(dir.path(), "arm64/keadm.tar.gz", b"x");
        let layout = ImageSources::Layout {
            dir: dir.path().to_path_buf(),
        };
        let images = OfflineImages::list(&layout).unwrap().unwrap();
        let amd64: Vec<&str> = images
            .for_arch(Arch::Amd64)
            .iter()
            .map(|a| a.remote_name.as_str())
            .collect();
        assert_eq!(amd64, ["image-a.tar", "image-b.tar"]);
        assert!(images.for_arch(Arch::Arm64).is_empty());
        assert_eq!(images.largest_arch_bytes(), 2 * archive.len() as u64);
        assert_eq!(images.remote_names(), ["image-a.tar", "image-b.tar"]);

        let listed = OfflineImages::list(&ImageSources::Listed {
            paths: BTreeMap::from([(
                Arch::Arm,
                vec![
                    dir.path().join("amd64/images/b.tar"),
                    dir.path().join("amd64/images"),
                ],
            )]),
        });
        // b.tar twice: the second one would overwrite the first on the node.
        let err = listed.unwrap_err().to_string();
        assert!(err.contains("image-b.tar"), "{err}");
        let listed = OfflineImages::list(&ImageSources::Listed {
            paths: BTreeMap::from([(Arch::Arm, vec![dir.path().join("amd64/images")])]),
        })
        .unwrap()
        .unwrap();
        assert_eq!(listed.for_arch(Arch::Arm).len(), 2);
        assert!(!listed.is_empty());
        // An offline directory in keadm's own layout is not set up for images.
        let keadm_only = tempfile::tempdir().unwrap();
        write(
            keadm_only.path(),
            "amd64/keadm-v1.23.1-linux-amd64.tar.gz",
            b"x",
        );
        let layout = ImageSources::Layout {
            dir: keadm_only.path().to_path_buf(),
        };
        assert!(OfflineImages::list(&layout).unwrap().is_none());
        // Set up for images, with none yet: the pre-flight check still runs.
        fs::create_dir_all(keadm_only.path().join("arm64/images")).unwrap();
        let images = OfflineImages::list(&layout).unwrap().unwrap();
        assert!(images.is_empty());
    }
}
