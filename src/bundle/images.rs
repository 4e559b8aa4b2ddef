//! Which container images a node needs before `keadm join` can work without a registry.
//!
//! keadm join asks the node's runtime (over CRI) for
//! `<--image-repository or "kubeedge">/installation-package:<version>` (keadm's `EdgeSet`:
//! the repository replaces everything before the image's last path component), where the
//! version is `--kubeedge-version` when it looks like a release (`v` added when missing),
//! and otherwise, with no network, the keadm binary's own version: the config's
//! keadmVersion. It then copies edgecore out of that image in a pod sandbox, which the
//! runtime starts from its own sandbox ("pause") image: keadm sets none, so it is the
//! runtime's setting (containerd's `sandbox_image`), which differs by runtime version and
//! cannot be seen from the connected machine; `--sandbox-image` names it.

use super::reference::ImageRef;
use crate::config::Config;

/// The sandbox image bundled when `--sandbox-image` is not given: the one containerd asked
/// for in a real air-gapped join (pause:3.9, the version kubeadm used for several
/// Kubernetes releases and many containerd configs set; containerd's built-in default is
/// pause:3.6 in 1.6, 3.8 in 1.7, 3.10 in 2.0 and 2.1).
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.9";

/// keadm's default `--image-repository` path for the installation package.
const INSTALLATION_PACKAGE: &str = "kubeedge/installation-package";

/// The images every node of `arch` needs for the joins in `config`, installation packages
/// first, without duplicates. Commands that are not joins need none of their own; a config
/// with no join at all still gets the images of a join with keadmVersion, so the kit can
/// serve joins added later.
pub(crate) fn for_config(
    config: &Config,
    keadm_version: &str,
    sandbox: &[ImageRef],
) -> Result<Vec<ImageRef>, String> {
    let mut joins: Vec<(String, Option<String>)> = Vec::new();
    for node in config.nodes.iter().filter(|n| n.keadm_args.is_join()) {
        let version = node
            .keadm_args
            .value("kubeedge-version")
            .and_then(release_version)
            .unwrap_or_else(|| release_version(keadm_version).unwrap_or(keadm_version.into()));
        let repository = node
            .keadm_args
            .value("image-repository")
            .map(str::to_string);
        if !joins.contains(&(version.clone(), repository.clone())) {
            joins.push((version, repository));
        }
    }
    if joins.is_empty() {
        joins.push((
            release_version(keadm_version).unwrap_or(keadm_version.into()),
            None,
        ));
    }
    let mut images: Vec<ImageRef> = Vec::new();
    for (version, repository) in &joins {
        for image in required(version, repository.as_deref(), sandbox)? {
            if !images.contains(&image) {
                images.push(image);
            }
        }
    }
    Ok(images)
}

/// The images one join needs: the installation package for `version` from
/// `image_repository` (keadm's default when `None`), and the sandbox images.
fn required(
    version: &str,
    image_repository: Option<&str>,
    sandbox: &[ImageRef],
) -> Result<Vec<ImageRef>, String> {
    let package = match image_repository.map(|r| r.trim_end_matches('/')) {
        Some(repository) if !repository.is_empty() => {
            let basename = INSTALLATION_PACKAGE.rsplit('/').next().unwrap_or_default();
            format!("{repository}/{basename}:{version}")
        }
        _ => format!("{INSTALLATION_PACKAGE}:{version}"),
    };
    let package = ImageRef::parse(&package).map_err(|e| {
        format!("keadm would ask for the image {package:?}, which cannot be pulled: {e}")
    })?;
    let mut images = vec![package];
    images.extend(sandbox.iter().cloned());
    Ok(images)
}

/// `version` as keadm uses it when it matches keadm's release pattern
/// (`v?MAJOR.MINOR.PATCH` and an optional suffix of `-`, `.`, `+` and word characters),
/// with `v` in front; `None` otherwise (keadm then falls back to its own version).
fn release_version(version: &str) -> Option<String> {
    let bare = version.strip_prefix('v').unwrap_or(version);
    let mut rest = bare;
    for i in 0..3 {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let number = &rest[..digits];
        if number.is_empty() || (number.len() > 1 && number.starts_with('0')) {
            return None;
        }
        rest = &rest[digits..];
        if i < 2 {
            rest = rest.strip_prefix('.')?;
        }
    }
    rest.chars()
        .all(|c| c.is_alphanumeric() || "-_.+".contains(c))
        .then(|| format!("v{bare}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(images: &[ImageRef]) -> Vec<String> {
        images.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn release_versions_follow_keadms_pattern() {
        assert_eq!(release_version("v1.23.1").as_deref(), Some("v1.23.1"));
        assert_eq!(release_version("1.23.1").as_deref(), Some("v1.23.1"));
        assert_eq!(
            release_version("v1.23.1-rc.1+build").as_deref(),
            Some("v1.23.1-rc.1+build")
        );
        for bad in ["", "v1.23", "latest", "v01.2.3", "v1.2.3/x", "1.2.3 "] {
            assert_eq!(release_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_installation_package_follows_the_image_repository_flag() {
        let pause = [ImageRef::parse(DEFAULT_SANDBOX_IMAGE).unwrap()];
        assert_eq!(
            names(&required("v1.23.1", None, &pause).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.9"
            ]
        );
        assert_eq!(
            names(&required("v1.22.0", Some("harbor.example:8443/edge/"), &[]).unwrap()),
            ["harbor.example:8443/edge/installation-package:v1.22.0"]
        );
        let err = required("v1.22.0", Some("Bad Repo"), &[]).unwrap_err();
        assert!(
            err.contains("\"Bad Repo/installation-package:v1.22.0\""),
            "{err}"
        );
    }
}
