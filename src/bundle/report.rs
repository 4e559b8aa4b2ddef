//! What `batch bundle` wrote, for the operator: a line per kit file and the closing
//! summary (kit.json's sha256, the archive and how to carry it) on stderr, and with
//! `--output json` one JSON document on stdout for scripts (its shape is in
//! docs/summary.md, "batch bundle --output json").

use std::path::PathBuf;

use serde::Serialize;

use super::kit_dir::Placed;
use super::kit_tar::Packed;
use crate::arch::Arch;

/// What one kit file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holds {
    /// keadm's release tarball for `arch`.
    Release { arch: Arch },
    /// The release's checksum file for `arch`: the tarball's sha512.
    Checksum { arch: Arch },
    /// The archive of `image`, pulled for `arch`.
    Image { arch: Arch, image: String },
}

/// One file of the kit: what it holds, and whether this bundle wrote it.
#[derive(Debug, Clone)]
pub struct KitEntry {
    pub holds: Holds,
    pub placed: Placed,
}

/// What `write_kit` did.
#[derive(Debug)]
pub struct KitReport {
    /// The kit directory; `None` when the kit was made only for its archive.
    pub dir: Option<PathBuf>,
    pub keadm_version: String,
    pub arches: Vec<Arch>,
    /// The sandbox images the kit carries, as kit.json records them.
    pub sandbox_images: Vec<String>,
    /// Every file of the kit, in the order it was placed.
    pub files: Vec<KitEntry>,
    /// Files of an earlier kit in the directory that this one no longer has.
    pub removed: Vec<String>,
    /// kit.json's sha256, lowercase hex: what `--verify` prints where the kit arrives.
    pub manifest_sha256: String,
    /// The kit as one file, when `--archive` asked for it.
    pub archive: Option<Packed>,
}

impl KitReport {
    /// A line per kit file: its path, what it holds, its size, and whether it was written.
    pub fn lines(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|entry| {
                let what = match &entry.holds {
                    Holds::Release { arch } => format!("keadm {} for {arch}", self.keadm_version),
                    Holds::Checksum { .. } => "its sha512".to_string(),
                    Holds::Image { arch, image } => format!("{image} for linux/{arch}"),
                };
                let placed = &entry.placed;
                format!(
                    "{}  {what}  {}  {}",
                    placed.file.path,
                    human_size(placed.file.size),
                    if placed.written {
                        "written"
                    } else {
                        "already in place"
                    }
                )
            })
            .collect()
    }

    /// The closing lines for the operator.
    pub fn summary(&self) -> String {
        let bytes: u64 = self.files.iter().map(|e| e.placed.file.size).sum();
        let size = human_size(bytes);
        let written = self.files.iter().filter(|e| e.placed.written).count();
        let arches: Vec<&str> = self.arches.iter().map(|a| a.as_str()).collect();
        let place = match (&self.dir, &self.archive) {
            (Some(dir), _) => format!("to {}", dir.display()),
            (None, Some(packed)) => format!("as {}", packed.path.display()),
            (None, None) => String::new(),
        };
        let mut text = format!(
            "Wrote the air-gapped kit for keadm {} ({}) {place}: {} files, {size}",
            self.keadm_version,
            arches.join(", "),
            self.files.len(),
        );
        if self.dir.is_some() {
            text.push_str(&format!(
                " ({written} written, {} already in place",
                self.files.len() - written,
            ));
            if !self.removed.is_empty() {
                text.push_str(&format!(
                    "; {} outdated file(s) removed",
                    self.removed.len()
                ));
            }
            text.push(')');
        }
        text.push_str(&format!(".\n{}", manifest_line(&self.manifest_sha256)));
        match (&self.dir, &self.archive) {
            (_, Some(packed)) => {
                let archive = packed.path.display();
                if self.dir.is_some() {
                    text.push_str(&format!(
                        "Wrote it as one file too: {archive} ({}), with its sha512 in {}.\n",
                        human_size(packed.size),
                        packed.sidecar.display()
                    ));
                } else {
                    text.push_str(&format!("Its sha512 is in {}.\n", packed.sidecar.display()));
                }
                text.push_str(&format!(
                    "Carry {archive} and {} to the air-gapped side. There, `keadm-batch batch \
                     bundle --verify {archive}` checks them and prints the same kit.json \
                     sha256, and `keadm-batch batch bundle --extract {archive} -o DIR` unpacks \
                     the kit for keadm.download.enable: false and keadm.offlinePackageDir: DIR \
                     in the config.\n",
                    packed.sidecar.display()
                ));
            }
            (Some(dir), None) => text.push_str(&format!(
                "On the air-gapped side, `keadm-batch batch bundle --verify {dir}` checks the \
                 copy and prints the same kit.json sha256; set keadm.download.enable: false \
                 and keadm.offlinePackageDir: {dir} in the config.\n",
                dir = dir.display()
            )),
            (None, None) => {}
        }
        text
    }

    /// `--output json`: the kit as one pretty JSON document with a final newline.
    pub fn json(&self) -> String {
        let checksum_of = |wanted: Arch| {
            self.files.iter().find_map(|entry| match entry.holds {
                Holds::Checksum { arch } if arch == wanted => Some(entry.placed.file.path.as_str()),
                _ => None,
            })
        };
        let mut releases = Vec::new();
        let mut image_archives = Vec::new();
        for entry in &self.files {
            match &entry.holds {
                Holds::Release { arch } => releases.push(JsonRelease {
                    file: JsonFile::of(*arch, entry),
                    checksum_file: checksum_of(*arch),
                }),
                Holds::Checksum { .. } => {}
                Holds::Image { arch, image } => image_archives.push(JsonArchive {
                    file: JsonFile::of(*arch, entry),
                    images: vec![image],
                }),
            }
        }
        let document = JsonKit {
            version: 1,
            kit: self.dir.as_ref().map(|dir| dir.display().to_string()),
            keadm_version: &self.keadm_version,
            arches: &self.arches,
            sandbox_images: &self.sandbox_images,
            releases,
            image_archives,
            kit_json: JsonManifest {
                path: self
                    .dir
                    .as_ref()
                    .map(|dir| dir.join(crate::kit::KIT_FILE).display().to_string()),
                sha256: &self.manifest_sha256,
            },
            archive: self.archive.as_ref().map(|packed| JsonPacked {
                path: packed.path.display().to_string(),
                size: packed.size,
                sha512: &packed.sha512,
                sha512_file: packed.sidecar.display().to_string(),
            }),
            removed: &self.removed,
        };
        let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
        text.push('\n');
        text
    }
}

#[derive(Serialize)]
struct JsonKit<'a> {
    /// The format version: it changes when a field changes meaning.
    version: u32,
    /// The kit directory; null when the kit was written only as an archive.
    kit: Option<String>,
    keadm_version: &'a str,
    arches: &'a [Arch],
    sandbox_images: &'a [String],
    releases: Vec<JsonRelease<'a>>,
    image_archives: Vec<JsonArchive<'a>>,
    kit_json: JsonManifest<'a>,
    /// `--archive`: the kit as one file; null without it.
    archive: Option<JsonPacked<'a>>,
    removed: &'a [String],
}

/// A kit file as the document lists it, its path relative to the kit directory.
#[derive(Serialize)]
struct JsonFile<'a> {
    arch: Arch,
    file: &'a str,
    size: u64,
    sha256: &'a str,
    written: bool,
}

impl JsonFile<'_> {
    fn of(arch: Arch, entry: &KitEntry) -> JsonFile<'_> {
        JsonFile {
            arch,
            file: &entry.placed.file.path,
            size: entry.placed.file.size,
            sha256: &entry.placed.file.sha256,
            written: entry.placed.written,
        }
    }
}

#[derive(Serialize)]
struct JsonRelease<'a> {
    #[serde(flatten)]
    file: JsonFile<'a>,
    checksum_file: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonArchive<'a> {
    #[serde(flatten)]
    file: JsonFile<'a>,
    images: Vec<&'a str>,
}

/// kit.json: its path in the kit directory (null when there is none: it is then only in
/// the archive) and its sha256, the one `--verify` prints at the site.
#[derive(Serialize)]
struct JsonManifest<'a> {
    path: Option<String>,
    sha256: &'a str,
}

/// The kit archive and its sha512 file, beside it.
#[derive(Serialize)]
struct JsonPacked<'a> {
    path: String,
    size: u64,
    sha512: &'a str,
    sha512_file: String,
}

/// The line that gives kit.json's sha256, the same wherever it is printed (the bundle's
/// summary, `--verify`, `--extract`), so that the operator compares like with like.
pub(super) fn manifest_line(sha256: &str) -> String {
    format!("kit.json sha256: {sha256}\n")
}

pub(super) use crate::human::size as human_size;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::KitFile;

    #[test]
    fn sizes_read_at_a_glance() {
        assert_eq!(human_size(812), "812 B");
        assert_eq!(human_size(2458), "2.4 KiB");
        assert_eq!(human_size(43_200_000), "41.2 MiB");
    }

    #[test]
    fn each_release_names_its_checksum_file_and_each_archive_its_images() {
        let entry = |holds: Holds, path: &str, written: bool| KitEntry {
            holds,
            placed: Placed {
                file: KitFile {
                    path: path.into(),
                    sha256: "ab".into(),
                    size: 2048,
                },
                written,
            },
        };
        let arch = Arch::Arm64;
        let report = KitReport {
            dir: Some("kit".into()),
            keadm_version: "v1.23.1".into(),
            arches: vec![arch],
            sandbox_images: vec!["registry.k8s.io/pause:3.9".into()],
            files: vec![
                entry(Holds::Release { arch }, "arm64/keadm.tar.gz", true),
                entry(Holds::Checksum { arch }, "arm64/checksum.txt", true),
                entry(
                    Holds::Image {
                        arch,
                        image: "registry.k8s.io/pause:3.9".into(),
                    },
                    "arm64/images/pause_3.9.tar",
                    false,
                ),
            ],
            removed: Vec::new(),
            manifest_sha256: "cd".into(),
            archive: None,
        };
        assert_eq!(
            report.lines(),
            [
                "arm64/keadm.tar.gz  keadm v1.23.1 for arm64  2.0 KiB  written",
                "arm64/checksum.txt  its sha512  2.0 KiB  written",
                "arm64/images/pause_3.9.tar  registry.k8s.io/pause:3.9 for linux/arm64  2.0 KiB  already in place",
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(
            json["releases"],
            serde_json::json!([{"arch": "arm64", "file": "arm64/keadm.tar.gz", "size": 2048,
                "sha256": "ab", "written": true, "checksum_file": "arm64/checksum.txt"}])
        );
        assert_eq!(
            json["image_archives"][0]["images"],
            serde_json::json!(["registry.k8s.io/pause:3.9"])
        );
        assert_eq!(json["kit_json"]["path"], "kit/kit.json");
        assert_eq!(json["archive"], serde_json::Value::Null);

        // --archive alone: no kit directory, kit.json only inside the archive.
        let report = KitReport {
            dir: None,
            archive: Some(Packed {
                path: "out/kit.tar".into(),
                sidecar: "out/kit.tar.sha512".into(),
                size: 10_240,
                sha512: "ef".into(),
                whole: crate::kit::Whole {
                    keadm_version: "v1.23.1".into(),
                    files: 3,
                    bytes: 6144,
                    manifest_sha256: "cd".into(),
                },
            }),
            ..report
        };
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(json["kit"], serde_json::Value::Null);
        assert_eq!(
            json["kit_json"],
            serde_json::json!({"path": null, "sha256": "cd"})
        );
        assert_eq!(
            json["archive"],
            serde_json::json!({"path": "out/kit.tar", "size": 10240, "sha512": "ef",
                "sha512_file": "out/kit.tar.sha512"})
        );
        assert!(
            report.summary().starts_with(
                "Wrote the air-gapped kit for keadm v1.23.1 (arm64) as out/kit.tar: 3 files, \
                 6.0 KiB.\nkit.json sha256: cd\nIts sha512 is in out/kit.tar.sha512.\n"
            ),
            "{}",
            report.summary()
        );
    }
}
