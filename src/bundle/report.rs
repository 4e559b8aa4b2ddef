//! What `batch bundle` wrote, for the operator: a line per kit file and the closing
//! summary on stderr.

use std::path::PathBuf;

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
}

/// The line that gives kit.json's sha256, the same wherever it is printed (the bundle's
/// summary, `--verify`, `--extract`), so that the operator compares like with like.
pub(super) fn manifest_line(sha256: &str) -> String {
    format!("kit.json sha256: {sha256}\n")
}

/// `812 B`, `2.4 KiB`, `41.2 MiB`.
pub(super) fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / (KIB * KIB)),
    }
}

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
    fn a_line_per_file_says_what_it_holds_and_whether_it_was_written() {
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
    }
}
