//! One image as an OCI image-layout archive: a tar of `oci-layout`, `index.json` and
//! `blobs/sha256/<hex>` (manifest, config, layers), as `skopeo copy ... oci-archive:` and
//! `docker save` (25 and later) write it, and as `ctr images import`, `nerdctl load`,
//! `podman load` and `docker load` read it. `index.json` names the image twice:
//! `io.containerd.image.name` carries the full normalized name (what containerd's CRI
//! finds when keadm asks), `org.opencontainers.image.ref.name` the tag (the OCI
//! convention, which other tools read). The output is deterministic (fixed order, times
//! and owners), so the same image gives the same bytes and a rerun can tell nothing changed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use super::registry::{Manifest, OCI_INDEX, Platform, sha256_hex};
use crate::image_ref::ImageRef;

/// containerd's annotation for the image name an import creates.
pub(crate) const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The OCI annotation for the reference name (the tag).
pub(crate) const OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// A blob to put in the archive: its digest and the verified file holding it.
pub(crate) struct Blob<'a> {
    pub digest: &'a str,
    pub path: &'a Path,
}

/// Writes the archive of `image` (its `manifest` for `platform` and the manifest's
/// `blobs`, config first) to `out`.
pub(crate) fn write(
    out: &File,
    image: &ImageRef,
    manifest: &Manifest,
    platform: &Platform,
    blobs: &[Blob<'_>],
) -> io::Result<()> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    append(&mut tar, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    append(
        &mut tar,
        "index.json",
        &index_json(image, manifest, platform),
    )?;
    append_dir(&mut tar, "blobs/")?;
    append_dir(&mut tar, "blobs/sha256/")?;
    append(&mut tar, &blob_path(&manifest.digest)?, &manifest.bytes)?;
    let mut written: Vec<&str> = vec![&manifest.digest];
    for blob in blobs {
        // An image may list one layer twice; the layout holds each blob once.
        if written.contains(&blob.digest) {
            continue;
        }
        written.push(blob.digest);
        let file = File::open(blob.path)?;
        let size = file.metadata()?.len();
        let mut header = file_header(size);
        tar.append_data(&mut header, blob_path(blob.digest)?, file)?;
    }
    tar.into_inner()?.flush()
}

/// The `index.json` of the archive of `image`.
fn index_json(image: &ImageRef, manifest: &Manifest, platform: &Platform) -> Vec<u8> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(CONTAINERD_NAME.into(), image.to_string().into());
    if let Some(tag) = image.tag() {
        annotations.insert(OCI_REF_NAME.into(), tag.into());
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": manifest.media_type,
            "digest": manifest.digest,
            "size": manifest.bytes.len(),
            "platform": platform,
            "annotations": annotations,
        }],
    });
    serde_json::to_vec(&index).unwrap_or_default()
}

/// What an archive this module wrote holds: the image name and manifest digest from its
/// `index.json`; `None` when the file is not such an archive.
pub(crate) fn archived(path: &Path) -> Option<(String, String)> {
    let mut archive = tar::Archive::new(File::open(path).ok()?);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.path().ok()?.as_os_str() != "index.json" {
            continue;
        }
        let mut text = Vec::new();
        entry.by_ref().take(1 << 20).read_to_end(&mut text).ok()?;
        let index: serde_json::Value = serde_json::from_slice(&text).ok()?;
        let first = index.get("manifests")?.as_array()?.first()?;
        let name = first.get("annotations")?.get(CONTAINERD_NAME)?.as_str()?;
        let digest = first.get("digest")?.as_str()?;
        return Some((name.to_string(), digest.to_string()));
    }
    None
}

fn blob_path(digest: &str) -> io::Result<String> {
    let hex = sha256_hex(digest).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{digest:?} is not a sha256 digest"),
        )
    })?;
    Ok(format!("blobs/sha256/{hex}"))
}

/// The header of a regular file of `size` bytes, the same whoever wrote it and when: mode
/// 0644, owned by root, time 0.
pub(crate) fn file_header(size: u64) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn append(tar: &mut tar::Builder<&File>, name: &str, data: &[u8]) -> io::Result<()> {
    let mut header = file_header(data.len() as u64);
    tar.append_data(&mut header, name, data)
}

fn append_dir(tar: &mut tar::Builder<&File>, name: &str) -> io::Result<()> {
    let mut header = file_header(0);
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    tar.append_data(&mut header, name, io::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn digest(bytes: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
    }

    #[test]
    fn an_archive_holds_the_layout_and_names_the_image_for_containerd() {
        let dir = tempfile::tempdir().unwrap();
        let config = br#"{"architecture":"arm64","os":"linux"}"#;
        let layer = b"layer bytes";
        std::fs::write(dir.path().join("config"), config).unwrap();
        std::fs::write(dir.path().join("layer"), layer).unwrap();
        let manifest_bytes = format!(
            r#"{{"schemaVersion":2,"config":{{"digest":"{}","size":{}}},"layers":[{{"digest":"{}","size":{}}}]}}"#,
            digest(config),
            config.len(),
            digest(layer),
            layer.len()
        )
        .into_bytes();
        let manifest = Manifest {
            digest: digest(&manifest_bytes),
            bytes: manifest_bytes,
            media_type: super::super::registry::OCI_MANIFEST.into(),
        };
        let image = ImageRef::parse("kubeedge/installation-package:v1.23.1").unwrap();
        let platform = Platform {
            architecture: "arm64".into(),
            os: "linux".into(),
            variant: None,
        };
        let (config_digest, layer_digest) = (digest(config), digest(layer));
        let blobs = [
            Blob {
                digest: &config_digest,
                path: &dir.path().join("config"),
            },
            Blob {
                digest: &layer_digest,
                path: &dir.path().join("layer"),
            },
            Blob {
                digest: &layer_digest,
                path: &dir.path().join("layer"),
            },
        ];
        let out_path = dir.path().join("out.tar");
        let write_out = || {
            let out = File::create(&out_path).unwrap();
            write(&out, &image, &manifest, &platform, &blobs).unwrap();
            std::fs::read(&out_path).unwrap()
        };
        let first = write_out();
        assert_eq!(first, write_out(), "deterministic");

        let mut names = Vec::new();
        let mut archive = tar::Archive::new(File::open(&out_path).unwrap());
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            if let Some(hex) = name.strip_prefix("blobs/sha256/").filter(|h| !h.is_empty()) {
                assert_eq!(digest(&bytes), format!("sha256:{hex}"));
            }
            if name == "index.json" {
                let index: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                let m = &index["manifests"][0];
                assert_eq!(m["annotations"][CONTAINERD_NAME], image.to_string());
                assert_eq!(m["annotations"][OCI_REF_NAME], "v1.23.1");
                assert_eq!(m["platform"]["architecture"], "arm64");
                assert_eq!(m["digest"], manifest.digest);
            }
            names.push(name);
        }
        assert_eq!(names.len(), 7, "{names:?}");
        assert_eq!(&names[..2], ["oci-layout", "index.json"]);
        assert_eq!(
            archived(&out_path),
            Some((image.to_string(), manifest.digest.clone()))
        );
        assert_eq!(archived(&dir.path().join("layer")), None);
    }
}
