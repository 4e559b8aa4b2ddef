//! Container image archives written by the tests themselves, with no network: a tiny image
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

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A tar of `(path, bytes, mode)` files and `(path, target)` symlinks.
fn tar_of(files: &[(&str, &[u8], u32)], links: &[(&str, &str)]) -> Vec<u8> {
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

/// The one layer every test image shares: busybox and the applets keadm's copy runs,
/// plus a stand-in edgecore where keadm copies it from.
fn layer() -> &'static [u8] {
    static LAYER: OnceLock<Vec<u8>> = OnceLock::new();
    LAYER.get_or_init(|| {
        let busybox = std::fs::read(BUSYBOX)
            .unwrap_or_else(|e| panic!("{BUSYBOX}: {e} (install busybox-static)"));
        tar_of(
            &[
                ("bin/busybox", &busybox, 0o755),
                (
                    "usr/local/bin/edgecore",
                    b"#!/bin/sh\necho 'edgecore (test stand-in)'\n",
                    0o755,
                ),
            ],
            &[
                ("bin/sh", "busybox"),
                ("bin/sleep", "busybox"),
                ("bin/cp", "busybox"),
            ],
        )
    })
}

/// The image config: this platform, the shared layer, and a command that keeps running.
fn config() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": host_arch(),
        "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep"], "Cmd": ["3600"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(layer()))]},
    }))
    .unwrap()
}

/// Writes the image as `docker save <name>` does.
pub fn docker_archive(path: &Path, name: &str) {
    let config = config();
    let config_name = format!("{}.json", sha256_hex(&config));
    let layer_name = format!("{}/layer.tar", sha256_hex(layer()));
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
                (&layer_name, layer(), 0o644),
                (&config_name, &config, 0o644),
                ("manifest.json", &manifest, 0o644),
            ],
            &[],
        ),
    );
}

/// Writes the image as `ctr export` does: an OCI layout whose index names the image in
/// full (`io.containerd.image.name`) and by tag (`org.opencontainers.image.ref.name`).
pub fn oci_archive(path: &Path, name: &str) {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(layer()).unwrap();
    let layer_gz = gz.finish().unwrap();
    let config = config();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{}", sha256_hex(&config)),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{}", sha256_hex(&layer_gz)),
            "size": layer_gz.len(),
        }],
    }))
    .unwrap();
    let tag = name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", sha256_hex(&manifest)),
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
