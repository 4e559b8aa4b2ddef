//! The `keadm` section's staging settings: the release to stage, where packages come
//! from (download or offline directory), the arches staged up front, the sha512 pins, the
//! offline image archives, and the extra images a kit carries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::validator::Validator;
use crate::arch::Arch;
use crate::config::model::{KNOWN_ARCHES, PackageMode, PinnedDigest};
use crate::config::schema::{KeadmSection, non_empty};
use crate::image_ref::ImageRef;
use crate::safe_name;

/// What the keadm section says about staging.
pub(super) struct Staging {
    /// None when nothing needs staging (every node has a keadmBinDir), or when the
    /// version is missing (reported).
    pub(super) keadm_version: Option<String>,
    pub(super) package_mode: PackageMode,
    pub(super) arch_group: Vec<String>,
}

/// Where packages come from and which are staged up front. `needs_staging`: whether any
/// node lacks a keadmBinDir, so a version is required.
pub(super) fn staging(v: &mut Validator, keadm: &KeadmSection, needs_staging: bool) -> Staging {
    let download = keadm.download_enable.as_ref().is_none_or(|e| e.value);
    let mut arch_group = Vec::new();
    for arch in &keadm.arch_group {
        if KNOWN_ARCHES.contains(&arch.value.as_str()) {
            if !arch_group.contains(&arch.value) {
                arch_group.push(arch.value.clone());
            }
        } else {
            v.error(
                Some(arch.pos),
                None,
                format!(
                    "keadm.archGroup lists `{}`, for which keadm publishes no build",
                    arch.value
                ),
                "use amd64, arm64 or arm (armv7)",
            );
        }
    }
    let package_mode = if download {
        PackageMode::Download {
            url: non_empty(&keadm.download_url).map(|u| u.value.clone()),
        }
    } else {
        match non_empty(&keadm.offline_package_dir) {
            Some(dir) => PackageMode::Offline {
                dir: v.local_path(&dir.value),
            },
            None => {
                if needs_staging {
                    v.error(
                        keadm.download_enable.as_ref().map(|e| e.pos),
                        None,
                        "keadm.download.enable is false but keadm.offlinePackageDir is not set",
                        "set offlinePackageDir to the directory holding <arch>/keadm-<version>-linux-<arch>.tar.gz, or enable downloads",
                    );
                }
                PackageMode::Offline {
                    dir: PathBuf::new(),
                }
            }
        }
    };
    if !needs_staging {
        return Staging {
            keadm_version: None,
            package_mode,
            arch_group,
        };
    }
    let version = match &keadm.keadm_version {
        Some(ver) if !ver.value.trim().is_empty() => {
            if !ver.value.starts_with('v') {
                v.warn(
                    Some(ver.pos),
                    None,
                    format!("keadm.keadmVersion `{}` has no leading `v`; release files are named like keadm-v{}-linux-amd64.tar.gz", ver.value, ver.value),
                    Some(format!("write `v{}` unless your mirror names files without the v", ver.value)),
                );
            }
            Some(ver.value.trim().to_string())
        }
        other => {
            v.error(
                other.as_ref().map(|s| s.pos),
                None,
                "keadm.keadmVersion is empty, and at least one node needs a keadm binary staged",
                "set keadmVersion to a KubeEdge release such as v1.23.1, or give every node a keadmBinDir",
            );
            None
        }
    };
    Staging {
        keadm_version: version,
        package_mode,
        arch_group,
    }
}

/// `keadm.download.sha512`: one digest per release arch, 128 hex characters in any case.
pub(super) fn sha512_pins(v: &mut Validator, keadm: &KeadmSection) -> BTreeMap<Arch, PinnedDigest> {
    let version = keadm
        .keadm_version
        .as_ref()
        .map(|v| v.value.trim())
        .filter(|v| !v.is_empty())
        .unwrap_or("<version>");
    let mut pins = BTreeMap::new();
    for (arch_name, digest) in &keadm.download_sha512 {
        let Some(arch) = Arch::from_name(&arch_name.value) else {
            v.error(
                Some(arch_name.pos),
                None,
                format!(
                    "keadm.download.sha512 pins a digest for `{}`, for which keadm publishes no build",
                    arch_name.value
                ),
                "name the arch as the release files do: amd64, arm64 or arm (x86_64 is amd64, aarch64 is arm64)",
            );
            continue;
        };
        let text = digest.value.trim();
        match crate::digest::sha512_hex_problem(text) {
            Some(problem) => v.error(
                Some(digest.pos),
                None,
                format!("keadm.download.sha512.{arch} {problem}"),
                format!(
                    "write the sha512 of keadm-{version}-linux-{arch}.tar.gz: the content of the release's checksum_keadm-{version}-linux-{arch}.tar.gz.txt, or the output of `sha512sum` on a tarball you trust"
                ),
            ),
            None => {
                pins.insert(
                    arch,
                    PinnedDigest {
                        digest: text.to_ascii_lowercase(),
                        pos: digest.pos,
                    },
                );
            }
        }
    }
    pins
}

/// `keadm.offlineImages`: per release arch, image archives (files) and directories of
/// `*.tar` archives, each resolved and required to exist. `None` when the key is absent.
pub(super) fn offline_images(
    v: &mut Validator,
    keadm: &KeadmSection,
) -> Option<BTreeMap<Arch, Vec<PathBuf>>> {
    let section = keadm.offline_images.as_ref()?;
    let mut images: BTreeMap<Arch, Vec<PathBuf>> = BTreeMap::new();
    for entry in &section.value {
        let Some(arch) = Arch::from_name(&entry.arch.value) else {
            v.error(
                Some(entry.arch.pos),
                None,
                format!(
                    "keadm.offlineImages lists images for `{}`, for which keadm publishes no build",
                    entry.arch.value
                ),
                "name the arch as the release files do: amd64, arm64 or arm (x86_64 is amd64, aarch64 is arm64)",
            );
            continue;
        };
        let paths = images.entry(arch).or_default();
        for raw in &entry.paths {
            if raw.value.trim().is_empty() {
                v.error(
                    Some(raw.pos),
                    None,
                    format!("keadm.offlineImages.{arch} has an empty path"),
                    "write the path of an image archive (.tar) or of a directory of them, or remove the entry",
                );
                continue;
            }
            let path = v.local_path(raw.value.trim());
            if let Some(problem) = image_path_problem(&path) {
                v.error(
                    Some(raw.pos),
                    None,
                    format!(
                        "keadm.offlineImages.{arch}: {} {problem}",
                        safe_name::shown_path(&path)
                    ),
                    "point it at an image archive (.tar, as `docker save` or `ctr export` write it) or a directory of them",
                );
                continue;
            }
            // Staging refuses it too (exit 3), as it refuses such a name in a directory
            // listed here; named here, it is this line's error.
            if let Some(refused) = safe_name::refusal(&path).filter(|_| path.is_file()) {
                v.error(
                    Some(raw.pos),
                    None,
                    format!(
                        "keadm.offlineImages.{arch}: the image archive `{}` cannot be used: {}",
                        safe_name::shown_path(&path),
                        refused.why
                    ),
                    format!(
                        "rename the file (to `{}`, say) and list it by that name",
                        refused.instead
                    ),
                );
                continue;
            }
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    Some(images)
}

/// `keadm.extraImages`: each entry read as `batch bundle` reads every image it pulls
/// (`ImageRef`), so one it could not pull is refused here at its line; an image listed
/// twice, in any spelling, is kept once.
pub(super) fn extra_images(v: &mut Validator, keadm: &KeadmSection) -> Vec<ImageRef> {
    let mut images: Vec<ImageRef> = Vec::new();
    for entry in &keadm.extra_images {
        match ImageRef::parse(&entry.value) {
            Ok(image) => {
                if !images.contains(&image) {
                    images.push(image);
                }
            }
            Err(reason) => v.error(
                Some(entry.pos),
                None,
                format!(
                    "keadm.extraImages lists `{}`, which is not an image reference: {reason}",
                    safe_name::shown(&entry.value)
                ),
                "write the image as you would pull it, such as docker.io/kubeedge/edgemesh-agent:v1.15.0 or registry.example:5000/site/app:1.2",
            ),
        }
    }
    images
}

/// Why `path` cannot name image archives, if it cannot.
fn image_path_problem(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() || meta.is_dir() => None,
        Ok(_) => Some("is neither a file nor a directory".to_string()),
        Err(e) => Some(format!("cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::arch::Arch;
    use crate::config::model::PackageMode;
    use crate::config::validate::tests::{GOOD, check, rendered};

    #[test]
    fn offline_images_are_resolved_per_arch_and_checked_at_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::create_dir(dir.path().join("arm64")).unwrap();
        std::fs::write(dir.path().join("ip.tar"), "x").unwrap();
        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            &format!(
                "  archGroup: [amd64]\n  offlineImages:\n    amd64:\n      - {d}/ip.tar\n      - {d}/ip.tar\n    arm64: {d}/arm64\n"
            ),
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let images = config.unwrap().offline_images.unwrap();
        assert_eq!(images[&Arch::Amd64], [dir.path().join("ip.tar")]);
        assert_eq!(images[&Arch::Arm64], [dir.path().join("arm64")]);

        let (config, _) = check(&GOOD.replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  offlineImages: {}\n",
        ));
        assert_eq!(config.unwrap().offline_images, Some(Default::default()));
        let (config, _) = check(GOOD);
        assert_eq!(config.unwrap().offline_images, None);

        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            &format!(
                "  archGroup: [amd64]\n  offlineImages:\n    x86_64: {d}/ip.tar\n    arm: [{d}/missing.tar, '']\n    amd64: {{a: b}}\n"
            ),
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let all = rendered(&diags);
        for needle in [
            "c.yaml:5:5: keadm.offlineImages lists images for `x86_64`, for which keadm publishes no build",
            &format!(
                "c.yaml:6:11: keadm.offlineImages.arm: {d}/missing.tar cannot be read: No such file or directory"
            ),
            "c.yaml:6:",
            "keadm.offlineImages.arm has an empty path",
            "c.yaml:7:12: keadm.offlineImages.amd64 must be a path or a list of paths, but it is a mapping",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
    }

    /// Security (review finding 2): an archive named here whose file name is outside the
    /// accepted set is this line's error, shown escaped with a name that would do; a
    /// directory is listed later, where its archives' names are checked (staging).
    #[test]
    fn an_offline_image_named_outside_the_accepted_set_is_refused_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::write(dir.path().join("a\nb.tar"), "x").unwrap();
        std::fs::write(dir.path().join("a+b-1.2_x.tar"), "x").unwrap();
        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            &format!(
                "  archGroup: [amd64]\n  offlineImages:\n    amd64:\n      - \"{d}/a\\nb.tar\"\n      - {d}/a+b-1.2_x.tar\n      - {d}\n"
            ),
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let all = rendered(&diags);
        assert_eq!(diags.len(), 1, "{all}");
        assert!(
            all.contains(&format!(
                "c.yaml:6:9: keadm.offlineImages.amd64: the image archive `{d}/a\\nb.tar` cannot be used: its file name `a\\nb.tar` holds `\\n`, and an accepted name has "
            )) && all.contains("rename the file (to `a_b.tar`, say)"),
            "{all}"
        );
    }

    #[test]
    fn extra_images_are_read_in_full_once_and_bad_ones_refused_at_their_lines() {
        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  extraImages:\n    - kubeedge/edgemesh-agent:v1.15.0\n    - registry.example:5000/site/app:1.2\n    - docker.io/kubeedge/edgemesh-agent:v1.15.0\n",
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let images: Vec<String> = config
            .unwrap()
            .extra_images
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            images,
            [
                "docker.io/kubeedge/edgemesh-agent:v1.15.0",
                "registry.example:5000/site/app:1.2"
            ]
        );
        let (config, _) = check(GOOD);
        assert!(config.unwrap().extra_images.is_empty());

        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  extraImages:\n    - ''\n    - site/app:1.2+3\n    - [a]\n",
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let all = rendered(&diags);
        for needle in [
            "c.yaml:5:7: keadm.extraImages lists ``, which is not an image reference: an image reference is empty; write the image as you would pull it, such as docker.io/kubeedge/edgemesh-agent:v1.15.0",
            "c.yaml:6:7: keadm.extraImages lists `site/app:1.2+3`, which is not an image reference: the tag \"1.2+3\"",
            "c.yaml:7:7: keadm.extraImages entries must be image references, but one is a list",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        // A component the distribution spec forbids (which `batch bundle` would have named
        // an archive after: `-agent_v1.15.0.tar`), and an entry with a control character,
        // shown escaped in the whole line as in its reason.
        let text = GOOD.replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  extraImages:\n    - kubeedge/-agent:v1.15.0\n    - \"site/a\\e[2Jpp:1\"\n",
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let all = rendered(&diags);
        for needle in [
            "c.yaml:5:7: keadm.extraImages lists `kubeedge/-agent:v1.15.0`, which is not an image reference: the repository \"kubeedge/-agent\" in \"kubeedge/-agent:v1.15.0\" is not a valid name: its component \"-agent\" does not follow the distribution spec's rule for a path component, ",
            "c.yaml:6:7: keadm.extraImages lists `site/a\\u{1b}[2Jpp:1`, which is not an image reference: the repository \"site/a\\u{1b}[2Jpp\"",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        assert!(!all.contains('\u{1b}'), "{all}");
        let (config, diags) = check(&GOOD.replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  extraImages: docker.io/kubeedge/edgemesh-agent:v1.15.0\n",
        ));
        assert!(config.is_none());
        assert!(
            rendered(&diags).starts_with("c.yaml:4:16: keadm.extraImages must be a list such as [docker.io/kubeedge/edgemesh-agent:v1.15.0], but it is "),
            "{}",
            rendered(&diags)
        );
    }

    #[test]
    fn offline_mode_needs_a_directory_only_when_something_is_staged() {
        let offline = GOOD.replace("keadm:\n", "keadm:\n  download:\n    enable: false\n");
        let (config, diags) = check(&offline);
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:3:13: keadm.download.enable is false but keadm.offlinePackageDir is not set; set offlinePackageDir to the directory holding <arch>/keadm-<version>-linux-<arch>.tar.gz, or enable downloads."
        );
        let bin_dir = offline.replace("  keadmVersion: v1.23.1\n", "  keadmBinDir: /opt/bin\n");
        let (config, diags) = check(&bin_dir);
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let config = config.unwrap();
        assert_eq!(config.keadm_version, None);
        assert_eq!(
            config.package_mode,
            PackageMode::Offline {
                dir: PathBuf::new()
            }
        );
        let with_dir = offline.replace("keadm:\n", "keadm:\n  offlinePackageDir: pkgs\n");
        let (config, _) = check(&with_dir);
        assert_eq!(
            config.unwrap().package_mode,
            PackageMode::Offline {
                dir: PathBuf::from("/work/here/pkgs")
            }
        );
    }

    #[test]
    fn arches_are_deduplicated_and_unknown_ones_refused() {
        let text = GOOD.replace("[amd64]", "[arm64, amd64, arm64]");
        let (config, _) = check(&text);
        assert_eq!(config.unwrap().arch_group, ["arm64", "amd64"]);
        let (config, diags) = check(&GOOD.replace("[amd64]", "[x86_64]"));
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:3:15: keadm.archGroup lists `x86_64`, for which keadm publishes no build; use amd64, arm64 or arm (armv7)."
        );
    }

    #[test]
    fn a_version_without_v_is_a_warning_and_a_missing_one_an_error() {
        let (config, diags) = check(&GOOD.replace("v1.23.1", "1.23.1"));
        assert_eq!(config.unwrap().keadm_version.as_deref(), Some("1.23.1"));
        assert!(
            rendered(&diags)
                .contains("write `v1.23.1` unless your mirror names files without the v"),
            "{}",
            rendered(&diags)
        );
        let (config, diags) = check(&GOOD.replace("  keadmVersion: v1.23.1\n", ""));
        assert!(config.is_none());
        assert!(
            rendered(&diags).starts_with("c.yaml: keadm.keadmVersion is empty, and at least one node needs a keadm binary staged"),
            "{}",
            rendered(&diags)
        );
    }

    #[test]
    fn pins_must_name_a_release_arch_and_be_a_sha512() {
        let text = GOOD.replace(
            "  keadmVersion: v1.23.1\n",
            &format!(
                "  keadmVersion: v1.23.1\n  download:\n    sha512:\n      riscv64: x\n      amd64: {}\n      arm: {}z\n",
                "ab".repeat(32),
                "ab".repeat(63)
            ),
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let all = rendered(&diags);
        for needle in [
            "c.yaml:5:7: keadm.download.sha512 pins a digest for `riscv64`, for which keadm publishes no build",
            "c.yaml:6:14: keadm.download.sha512.amd64 is 64 hex characters long, but a sha512 digest has 128 (64 is the length of a sha256); write the sha512 of keadm-v1.23.1-linux-amd64.tar.gz",
            "keadm.download.sha512.arm contains `z`, which is not a hex digit",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
    }
}
