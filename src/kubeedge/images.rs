//! The images `keadm join` asks the node's container runtime for (docs/kubeedge.md,
//! "The images a join needs"), and the pre-flight finding when the runtime lacks one that
//! no offline archive provides.
//!
//! keadm join's step 5 ("Pull Images") asks the runtime over CRI for
//! `kubeedge/installation-package:<version>` (`<--image-repository>/installation-package:
//! <version>` when that flag is set) and pulls it only when `ImageStatus` finds nothing;
//! step 6 runs a pod sandbox and a container from it to copy edgecore out, so the runtime
//! also needs its own sandbox ("pause") image, which keadm does not choose: containerd's
//! `sandbox_image`, CRI-O's `pause_image`, iSulad's `pod-sandbox-image`.

use crate::arch::Arch;
use crate::image_ref::ImageRef;
use crate::keadm_cmd::KeadmCommand;
use crate::kubeedge::preflight::{Finding, FindingId};

/// keadm's installation-package image without its tag (keadm's `util.EdgeSet`).
const INSTALLATION_PACKAGE: &str = "kubeedge/installation-package";

/// The sandbox image of containerd 1.7, the most common runtime on edge nodes, for a kit
/// made before any node is seen (`bundle`). On a node the pre-flight probe reads the
/// runtime's own setting instead: containerd 1.6 asks for `registry.k8s.io/pause:3.6`,
/// 2.x for `pause:3.10`, and any runtime may be configured otherwise.
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.9";

/// The images a join with KubeEdge `version` needs on a node of `arch`: the
/// installation-package image (with `--image-repository`, when given) and
/// [`DEFAULT_SANDBOX_IMAGE`]. The references are the same for every arch (they name
/// multi-arch images); `arch` says which platform's image an archive must hold.
pub fn required(version: &str, image_repository: Option<&str>, arch: Arch) -> Vec<ImageRef> {
    let _ = arch;
    installation_package(version, image_repository)
        .into_iter()
        .chain(ImageRef::parse(DEFAULT_SANDBOX_IMAGE))
        .collect()
}

/// `<repository>/installation-package:<version>` as keadm builds it (`Set.Current`): the
/// repository replaces the first path component, `kubeedge`. `None` when that makes no
/// valid reference (an `--image-repository` ending in `/`, say).
pub fn installation_package(version: &str, image_repository: Option<&str>) -> Option<ImageRef> {
    let image = match image_repository.filter(|r| !r.is_empty()) {
        Some(repository) => format!("{repository}/installation-package:{version}"),
        None => format!("{INSTALLATION_PACKAGE}:{version}"),
    };
    ImageRef::parse(&image)
}

/// The KubeEdge version keadm join will ask for: `--kubeedge-version` when it is a release
/// version (keadm adds a missing `v`), else keadm's own version, which is what keadm
/// falls back to on a node that cannot reach GitHub to learn the latest release: the
/// staged keadm's `keadmVersion`. `None` when neither is known (keadm from keadmBinDir
/// without `--kubeedge-version`).
pub fn join_version(command: &KeadmCommand, keadm_version: Option<&str>) -> Option<String> {
    let flag = command
        .is_join()
        .then(|| command.value("kubeedge-version"))
        .flatten();
    flag.and_then(release_version)
        .or_else(|| keadm_version.and_then(release_version))
}

/// keadm's `GetCurrentVersion` for a version it accepts as written: `1.23.1` becomes
/// `v1.23.1`; anything that is not `[v]MAJOR.MINOR.PATCH[suffix]` is `None`.
fn release_version(text: &str) -> Option<String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let number = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
    };
    let mut parts = bare.splitn(3, '.');
    let (major, minor, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let patch_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (patch, suffix) = rest.split_at(patch_len);
    let suffix_ok = suffix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    (number(major) && number(minor) && number(patch) && suffix_ok).then(|| format!("v{bare}"))
}

/// The images this node's join needs: the installation-package image for the command's
/// version and repository, and the runtime's sandbox image as the node reported it. The
/// second item says what could not be told, for the transcript.
pub fn needed_by_join(
    command: &KeadmCommand,
    keadm_version: Option<&str>,
    sandbox: Option<&ImageRef>,
) -> (Vec<ImageRef>, Vec<&'static str>) {
    let mut needed = Vec::new();
    let mut unknown = Vec::new();
    let repository = command.value("image-repository");
    match join_version(command, keadm_version)
        .and_then(|version| installation_package(&version, repository))
    {
        Some(image) => needed.push(image),
        None => unknown.push(
            "which installation-package tag keadm will ask for (pass --kubeedge-version in keadmCmd)",
        ),
    }
    match sandbox {
        Some(image) => needed.push(image.clone()),
        None => unknown.push("which sandbox image the runtime is configured with"),
    }
    (needed, unknown)
}

/// The pre-flight finding for the images of `needed` that the runtime (`runtime`, which
/// listed `in_runtime`) lacks and no offline archive for `arch` provides; `None` when
/// every one is there or on its way.
pub fn missing_finding(
    needed: &[ImageRef],
    in_runtime: &[ImageRef],
    provided: &[&ImageRef],
    runtime: &str,
    arch: Option<Arch>,
) -> Option<Finding> {
    let missing: Vec<String> = needed
        .iter()
        .filter(|image| !in_runtime.contains(image) && !provided.contains(image))
        .map(ImageRef::to_string)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let archives = match arch {
        Some(arch) => format!("no offline image archive for {arch}"),
        None => "no offline image archive".to_string(),
    };
    Some(Finding {
        id: FindingId::ImageMissing,
        detail: format!(
            "{} {} not in {runtime}, and {archives} provides {}",
            missing.join(" and "),
            if missing.len() == 1 { "is" } else { "are" },
            if missing.len() == 1 { "it" } else { "them" },
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(text: &str) -> ImageRef {
        ImageRef::parse(text).unwrap()
    }

    fn join(flags: &str) -> KeadmCommand {
        KeadmCommand::parse(&format!("join --cloudcore-ipport=1.2.3.4:10000 {flags}"))
    }

    /// keadm's own cases (`TestEdgeSet`), written out in full as the runtime stores them.
    #[test]
    fn the_installation_package_as_keadm_builds_it() {
        assert_eq!(
            installation_package("v1.10.0", None).unwrap().to_string(),
            "docker.io/kubeedge/installation-package:v1.10.0"
        );
        assert_eq!(
            installation_package("v1.10.0", Some("my-registry.io"))
                .unwrap()
                .to_string(),
            "my-registry.io/installation-package:v1.10.0"
        );
        assert_eq!(
            installation_package("v1.23.1", Some("127.0.0.1:5000/kubeedge"))
                .unwrap()
                .to_string(),
            "127.0.0.1:5000/kubeedge/installation-package:v1.23.1"
        );
        assert_eq!(installation_package("v1", Some("bad/")), None);
        assert_eq!(
            required("v1.23.1", None, Arch::Arm64)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.9"
            ]
        );
    }

    #[test]
    fn the_version_is_the_flag_s_else_keadm_s_own() {
        let v = |flags: &str, keadm: Option<&str>| join_version(&join(flags), keadm);
        assert_eq!(
            v("--kubeedge-version=v1.22.0", Some("v1.23.1")).as_deref(),
            Some("v1.22.0")
        );
        assert_eq!(
            v("--kubeedge-version 1.22.0", None).as_deref(),
            Some("v1.22.0")
        );
        assert_eq!(v("", Some("v1.23.1")).as_deref(), Some("v1.23.1"));
        assert_eq!(v("", Some("1.23.1")).as_deref(), Some("v1.23.1"));
        // keadm ignores a version it cannot read and uses its own.
        assert_eq!(
            v("--kubeedge-version=latest", Some("v1.23.1")).as_deref(),
            Some("v1.23.1")
        );
        assert_eq!(
            v("--kubeedge-version=v1.23.1-rc.0", None).as_deref(),
            Some("v1.23.1-rc.0")
        );
        assert_eq!(v("--kubeedge-version=v01.2.3", None), None);
        assert_eq!(v("", None), None);
        assert_eq!(
            join_version(
                &KeadmCommand::parse("reset --kubeedge-version=v1.2.3"),
                None
            ),
            None
        );
    }

    #[test]
    fn what_a_join_needs_and_what_cannot_be_told() {
        let sandbox = image("registry.k8s.io/pause:3.6");
        let (needed, unknown) = needed_by_join(
            &join("--image-repository=127.0.0.1:5000/kubeedge"),
            Some("v1.23.1"),
            Some(&sandbox),
        );
        assert_eq!(
            needed,
            [
                image("127.0.0.1:5000/kubeedge/installation-package:v1.23.1"),
                sandbox
            ]
        );
        assert!(unknown.is_empty());
        let (needed, unknown) = needed_by_join(&join(""), None, None);
        assert!(needed.is_empty());
        assert_eq!(unknown.len(), 2);
    }

    #[test]
    fn a_finding_names_what_is_neither_there_nor_provided() {
        let ip = image("kubeedge/installation-package:v1.23.1");
        let pause = image("registry.k8s.io/pause:3.6");
        let needed = [ip.clone(), pause.clone()];
        let f = missing_finding(
            &needed,
            &[],
            &[],
            "containerd (/run/containerd/containerd.sock)",
            Some(Arch::Amd64),
        )
        .unwrap();
        assert_eq!(f.id, FindingId::ImageMissing);
        assert_eq!(
            f.detail,
            "docker.io/kubeedge/installation-package:v1.23.1 and registry.k8s.io/pause:3.6 are not in containerd (/run/containerd/containerd.sock), and no offline image archive for amd64 provides them"
        );
        let f = missing_finding(
            &needed,
            std::slice::from_ref(&pause),
            &[],
            "containerd",
            None,
        )
        .unwrap();
        assert_eq!(
            f.detail,
            "docker.io/kubeedge/installation-package:v1.23.1 is not in containerd, and no offline image archive provides it"
        );
        assert_eq!(
            missing_finding(&needed, &[pause], &[&ip], "containerd", None),
            None
        );
    }
}
