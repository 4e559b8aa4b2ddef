//! Container images built by the tests themselves, with no network, in one place: a
//! one-layer [`TestImage`] (layer, config, manifest) that the local registry pushes
//! (tests/common/registry.rs) and that is written here as an image archive: a tiny image
//! whose one layer is busybox-static (a shell, `sleep` and `cp`, what keadm's copy
//! container runs) for the machine's own platform, saved as `docker save` writes it
//! (docker-archive: `manifest.json`, a config, an uncompressed `layer.tar`) or as an OCI
//! archive (`ctr export`, `skopeo copy`: `oci-layout`, `index.json`, blobs with a gzip
//! layer).
//!
//! ```ignore
//! image_archive::docker_archive(&dir.join("package.tar"), "kubeedge/installation-package:v1.23.1");
//! image_archive::oci_archive(&dir.join("pause.tar"), "registry.k8s.io/pause:3.6");
//! ```

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

/// busybox-static, as Debian's package installs it.
const BUSYBOX: &str = "/bin/busybox";

/// The release arch of this machine, as keadm names it (`uname -m` mapped).
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        other => panic!("no keadm release for {other}"),
    }
}

/// `sha256:<hex>` of `bytes`, as digests are written.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The hex of [`sha256`], as blob and file names spell it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The name the archive at `path` has on a node: `image-<sha256>.tar`, made by the tool.
pub fn upload_name(path: &Path) -> String {
    format!("image-{}.tar", sha256_hex(&std::fs::read(path).unwrap()))
}

/// Docker's media types (schema 2, manifest lists) or OCI's (manifests, indexes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Docker,
    Oci,
}

impl Format {
    pub fn manifest(self) -> &'static str {
        match self {
            Format::Docker => "application/vnd.docker.distribution.manifest.v2+json",
            Format::Oci => "application/vnd.oci.image.manifest.v1+json",
        }
    }

    pub fn index(self) -> &'static str {
        match self {
            Format::Docker => "application/vnd.docker.distribution.manifest.list.v2+json",
            Format::Oci => "application/vnd.oci.image.index.v1+json",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Format::Docker => "application/vnd.docker.container.image.v1+json",
            Format::Oci => "application/vnd.oci.image.config.v1+json",
        }
    }

    fn layer(self) -> &'static str {
        match self {
            Format::Docker => "application/vnd.docker.image.rootfs.diff.tar.gzip",
            Format::Oci => "application/vnd.oci.image.layer.v1.tar+gzip",
        }
    }
}

/// A one-layer image for one arch, built in memory.
pub struct TestImage {
    /// The layer as a tar, as `docker save` keeps it.
    pub layer_tar: Vec<u8>,
    /// The layer gzip-compressed, as registries and OCI archives keep it.
    pub layer: Vec<u8>,
    pub config: Vec<u8>,
    /// The manifest of `config` and `layer`, with `format`'s media types.
    pub manifest: Vec<u8>,
}

impl TestImage {
    /// The image of `layer_tar` for linux/`arch`, whose config runs `process` (the
    /// config's `config` object, e.g. `{"Cmd": ["/bin/sh"]}`).
    pub fn new(
        layer_tar: Vec<u8>,
        arch: &str,
        process: serde_json::Value,
        format: Format,
    ) -> TestImage {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&layer_tar).unwrap();
        let layer = gz.finish().unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": arch,
            "os": "linux",
            "config": process,
            "rootfs": {"type": "layers", "diff_ids": [sha256(&layer_tar)]},
        }))
        .unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": format.manifest(),
            "config": {"mediaType": format.config(), "digest": sha256(&config), "size": config.len()},
            "layers": [{"mediaType": format.layer(), "digest": sha256(&layer), "size": layer.len()}],
        }))
        .unwrap();
        TestImage {
            layer_tar,
            layer,
            config,
            manifest,
        }
    }

    /// An image whose layer holds only `etc/image` with `<repo> for <arch>` in it, so a
    /// test can tell which build an archive got (what the local registry serves).
    pub fn marked(repo: &str, arch: &str, format: Format) -> TestImage {
        let content = format!("{repo} for {arch}\n");
        let layer = tar_of(&[("etc/image", content.as_bytes(), 0o644)], &[]);
        TestImage::new(layer, arch, serde_json::json!({"Cmd": ["/bin/sh"]}), format)
    }

    /// The busybox image for this machine (see the module doc), whose command keeps
    /// running.
    fn busybox() -> TestImage {
        TestImage::busybox_with(layer().to_vec())
    }

    /// The image of `layer` (busybox inside) for this machine, as [`TestImage::busybox`].
    fn busybox_with(layer: Vec<u8>) -> TestImage {
        TestImage::new(
            layer,
            host_arch(),
            serde_json::json!({"Entrypoint": ["/bin/sleep"], "Cmd": ["3600"]}),
            Format::Oci,
        )
    }
}

/// A tar of `(path, bytes, mode)` files and `(path, target)` symlinks.
pub fn tar_of(files: &[(&str, &[u8], u32)], links: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data, mode) in files {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(0);
        header.set_cksum();
        builder.append_data(&mut header, path, *data).unwrap();
    }
    for (path, target) in links {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        header.set_mtime(0);
        builder.append_link(&mut header, path, target).unwrap();
    }
    builder.into_inner().unwrap()
}

/// The stand-in edgecore the installation-package carries. Run on a node (by a real
/// keadm's join, through its systemd unit), it leaves what a real edgecore leaves after
/// its certificate exchange with cloudcore: the CA, certificate and key files at
/// edgecore's default paths, which keadm join waits for before it reports success.
pub const EDGECORE: &[u8] = b"#!/bin/sh
echo 'edgecore (test stand-in)'
mkdir -p /etc/kubeedge/ca /etc/kubeedge/certs
for f in ca/rootCA.crt certs/server.crt certs/server.key; do
  echo 'written by the edgecore stand-in' > /etc/kubeedge/$f
done
";

/// The one layer every test image shares: busybox and the applets keadm's copy runs,
/// plus a stand-in edgecore where keadm copies it from.
fn layer() -> &'static [u8] {
    static LAYER: OnceLock<Vec<u8>> = OnceLock::new();
    LAYER.get_or_init(|| layer_carrying(EDGECORE))
}

/// busybox and its applets, and `edgecore` where keadm copies it from.
fn layer_carrying(edgecore: &[u8]) -> Vec<u8> {
    let busybox = std::fs::read(BUSYBOX)
        .unwrap_or_else(|e| panic!("{BUSYBOX}: {e} (install busybox-static)"));
    tar_of(
        &[
            ("bin/busybox", &busybox, 0o755),
            ("usr/local/bin/edgecore", edgecore, 0o755),
        ],
        &[
            ("bin/sh", "busybox"),
            ("bin/sleep", "busybox"),
            ("bin/cp", "busybox"),
        ],
    )
}

/// Writes the image as `docker save <name>` does.
pub fn docker_archive(path: &Path, name: &str) {
    write_docker_archive(path, name, TestImage::busybox());
}

/// As [`docker_archive`], the image carrying `edgecore` instead of the stand-in: an
/// installation-package with a real edgecore (tests/cloud_e2e.rs).
pub fn docker_archive_carrying(path: &Path, name: &str, edgecore: &[u8]) {
    write_docker_archive(
        path,
        name,
        TestImage::busybox_with(layer_carrying(edgecore)),
    );
}

fn write_docker_archive(path: &Path, name: &str, image: TestImage) {
    let config_name = format!("{}.json", sha256_hex(&image.config));
    let layer_name = format!("{}/layer.tar", sha256_hex(&image.layer_tar));
    let manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_name,
        "RepoTags": [name],
        "Layers": [layer_name],
    }]))
    .unwrap();
    write(
        path,
        &tar_of(
            &[
                (&layer_name, &image.layer_tar, 0o644),
                (&config_name, &image.config, 0o644),
                ("manifest.json", &manifest, 0o644),
            ],
            &[],
        ),
    );
}

/// Writes the image as `ctr export` does: an OCI layout whose index names the image in
/// full (`io.containerd.image.name`) and by tag (`org.opencontainers.image.ref.name`).
pub fn oci_archive(path: &Path, name: &str) {
    let TestImage {
        layer: layer_gz,
        config,
        manifest,
        ..
    } = TestImage::busybox();
    let tag = name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": Format::Oci.manifest(),
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))
    .unwrap();
    let blob = |bytes: &[u8]| format!("blobs/sha256/{}", sha256_hex(bytes));
    let (manifest_blob, config_blob, layer_blob) =
        (blob(&manifest), blob(&config), blob(&layer_gz));
    write(
        path,
        &tar_of(
            &[
                ("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, 0o644),
                ("index.json", &index, 0o644),
                (&manifest_blob, &manifest, 0o644),
                (&config_blob, &config, 0o644),
                (&layer_blob, &layer_gz, 0o644),
            ],
            &[],
        ),
    );
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The image archives (and their sidecars, and their temporary names) left in `node`'s
/// upload dir, the default one.
pub fn archives_left(node: &crate::common::fleet::Node) -> Vec<String> {
    std::fs::read_dir(node.tmp_path("kubeedge/keadm"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("image-") || n.starts_with(".image-"))
                .collect()
        })
        .unwrap_or_default()
}
