//! The images `keadm join` asks the node's container runtime for (docs/kubeedge.md,
//! "The images a join needs"), and the pre-flight finding when the runtime lacks one that
//! no offline archive provides. The one home of these rules: the pre-flight check asks
//! with the sandbox image the node's runtime reports, `batch bundle` with the one the
//! operator names (or [`DEFAULT_SANDBOX_IMAGE`]).
//!
//! keadm join's step 5 ("Pull Images") asks the runtime over CRI for
//! `kubeedge/installation-package:<version>` (`<--image-repository>/installation-package:
//! <version>` when that flag is set) and pulls it only when `ImageStatus` finds nothing;
//! step 6 runs a pod sandbox and a container from it to copy edgecore out, so the runtime
//! also needs its own sandbox ("pause") image, which keadm does not choose: containerd's
//! `sandbox_image`, CRI-O's `pause_image`, iSulad's `pod-sandbox-image`.

use crate::arch::Arch;
use crate::image_ref::{ImageRef, ParseError};
use crate::keadm_cmd::{KeadmCommand, major_minor, release_version};
use crate::kubeedge::preflight::{Finding, FindingId};

/// keadm's installation-package image without its tag (keadm's `util.EdgeSet`).
const INSTALLATION_PACKAGE: &str = "kubeedge/installation-package";

/// The sandbox image a kit carries when the operator names none (`bundle
/// --sandbox-image`), since the connected machine cannot see the nodes' runtimes:
/// `pause:3.9`, the one containerd asked for in a real air-gapped join, which kubeadm used
/// for several Kubernetes releases and many containerd configs set. Built in, containerd
/// 1.6 asks for `registry.k8s.io/pause:3.6`, 1.7 for `pause:3.8`, 2.0 and 2.1 for
/// `pause:3.10`; on a node the pre-flight probe reads the runtime's own setting instead.
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.9";

/// keadm's own pause image (`constants.DefaultPodSandboxImage`), which its join pulls up
/// to v1.15 besides the runtime's sandbox image.
const KEADM_PAUSE: &str = "kubeedge/pause:3.6";

/// The MQTT broker image (`constants.DefaultMosquittoImage`) keadm's join pulls up to
/// v1.20 when MQTT is on.
const MOSQUITTO: &str = "eclipse-mosquitto:1.6.15";

/// The images a join with KubeEdge `version` needs: the installation-package image, then
/// keadm's own `extras` (see [`keadm_extras`]), both from `--image-repository` when
/// given, then `sandbox`, the runtime's sandbox images. The references are the same for
/// every arch (they name multi-arch images).
pub fn required(
    version: &str,
    image_repository: Option<&str>,
    extras: &[&str],
    sandbox: &[ImageRef],
) -> Result<Vec<ImageRef>, ParseError> {
    let mut images = vec![installation_package(version, image_repository)?];
    images.extend(extra_images(extras, image_repository)?);
    images.extend(sandbox.iter().cloned());
    Ok(images)
}

/// keadm's `extras` (see [`keadm_extras`]) from `--image-repository`, when given.
fn extra_images(
    extras: &[&str],
    image_repository: Option<&str>,
) -> Result<Vec<ImageRef>, ParseError> {
    extras
        .iter()
        .map(|extra| ImageRef::parse(&from_repository(extra, image_repository)))
        .collect()
}

/// The images keadm's join pulls besides the installation-package (its `EdgeSet`'s
/// third-party set), which depend on the keadm release that runs, not on
/// `--kubeedge-version`: up to v1.15 its own pause image always, and the MQTT broker
/// unless `--with-mqtt=false` (MQTT was on by default); v1.16 to v1.20 the broker only
/// with `--with-mqtt`; from v1.21 none. Nothing when keadm's version is unknown.
pub fn keadm_extras(keadm_version: Option<&str>, command: &KeadmCommand) -> Vec<&'static str> {
    let Some((major, minor)) = keadm_version.and_then(major_minor) else {
        return Vec::new();
    };
    let mqtt = command.bool_flag("with-mqtt");
    match (major, minor) {
        (0, _) | (1, ..=15) if mqtt == Some(false) => vec![KEADM_PAUSE],
        (0, _) | (1, ..=15) => vec![KEADM_PAUSE, MOSQUITTO],
        (1, 16..=20) if mqtt == Some(true) => vec![MOSQUITTO],
        _ => Vec::new(),
    }
}

/// `image` as keadm's `Set.Current` rewrites it for an `--image-repository`: the
/// repository replaces the first path component (`kubeedge/pause:3.6` becomes
/// `R/pause:3.6`), or is put in front of a one-component name
/// (`R/eclipse-mosquitto:1.6.15`), as written: keadm trims nothing, so a repository
/// ending in `/` makes no valid reference.
fn from_repository(image: &str, image_repository: Option<&str>) -> String {
    match image_repository.filter(|r| !r.is_empty()) {
        Some(repository) => {
            let rest = image.split_once('/').map_or(image, |(_, rest)| rest);
            format!("{repository}/{rest}")
        }
        None => image.to_string(),
    }
}

/// `<repository>/installation-package:<version>` as keadm builds it (`Set.Current`, see
/// [`from_repository`]); an invalid result is an error that names it.
pub fn installation_package(
    version: &str,
    image_repository: Option<&str>,
) -> Result<ImageRef, ParseError> {
    ImageRef::parse(&from_repository(
        &format!("{INSTALLATION_PACKAGE}:{version}"),
        image_repository,
    ))
}

/// The image `keadm upgrade edge` takes the new edgecore from: `<--image, default
/// kubeedge/installation-package>:<--toVersion>` (keadm's `getEdgeCoreBinary`; the image
/// flag names the whole repository, unlike join's `--image-repository`). Without
/// `--toVersion`, keadm goes to a version built into its source, which for every release
/// from v1.21 to v1.23 is its minor release's first (`v1.23.0` for keadm v1.23.1): that
/// is taken from `keadm_version`. `None` for a command that is not an upgrade, or when
/// neither version is known.
pub fn upgrade_image(
    command: &KeadmCommand,
    keadm_version: Option<&str>,
) -> Option<Result<ImageRef, ParseError>> {
    if !command.is_edge_upgrade() {
        return None;
    }
    let version = match command.value("toVersion") {
        Some(version) => version.to_string(),
        None => {
            let own = own_release(keadm_version?)?;
            let mut parts = own.splitn(3, '.');
            format!("{}.{}.0", parts.next()?, parts.next()?)
        }
    };
    let repository = command
        .value("image")
        .unwrap_or("kubeedge/installation-package");
    Some(ImageRef::parse(&format!("{repository}:{version}")))
}

/// The KubeEdge version keadm join will ask for: `--kubeedge-version` when it is a release
/// version (keadm adds a missing `v`), else keadm's own version, which is what keadm
/// falls back to on a node that cannot reach GitHub to learn the latest release: the
/// staged keadm's `keadmVersion`, trimmed as keadm trims it ([`own_release`]). `None`
/// when neither is known (keadm from keadmBinDir without `--kubeedge-version`), and for a
/// command that is not a join.
pub fn join_version(command: &KeadmCommand, keadm_version: Option<&str>) -> Option<String> {
    let flag = command
        .is_join()
        .then(|| command.value("kubeedge-version"))
        .flatten();
    flag.and_then(release_version)
        .or_else(|| keadm_version.and_then(own_release))
}

/// The version keadm asks images for when it falls back to its own: the release its
/// version builds on. keadm keeps `vMAJOR.MINOR.PATCH` and a pre-release `-NAME.N`
/// (`-beta.0`, `-rc.1`) and drops whatever follows, which only a development build has:
/// the commit count since the tag (`.150`, or `-3` after a release) and the build metadata
/// (`+16cd8548eedb81`, `-dirty`), since no image is tagged with those (and `+` is no tag
/// character). So `v1.23.0-beta.0.150+16cd8548eedb81` asks for `v1.23.0-beta.0`, and a
/// release such as `v1.23.1` for itself. `None` when the version is no release version
/// (see [`release_version`]).
pub fn own_release(keadm_version: &str) -> Option<String> {
    let version = release_version(keadm_version)?;
    let core_len = version
        .char_indices()
        .filter(|(_, c)| *c == '.')
        .nth(1)
        .map(|(dot, _)| {
            dot + 1
                + version[dot + 1..]
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .count()
        })?;
    let (core, rest) = version.split_at(core_len);
    let pre_release = rest.strip_prefix('-').and_then(|pre| {
        let name_len = pre.bytes().take_while(u8::is_ascii_alphabetic).count();
        let number = pre[name_len..].strip_prefix('.')?;
        let number_len = number.bytes().take_while(u8::is_ascii_digit).count();
        (name_len > 0 && number_len > 0).then(|| &pre[..name_len + 1 + number_len])
    });
    Some(match pre_release {
        Some(pre) => format!("{core}-{pre}"),
        None => core.to_string(),
    })
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
        .and_then(|version| installation_package(&version, repository).ok())
    {
        Some(image) => needed.push(image),
        None => unknown.push(
            "which installation-package tag keadm will ask for (pass --kubeedge-version in keadmCmd)",
        ),
    }
    // A repository that makes no valid reference makes no installation-package above
    // either (keadm builds both the same way): nothing of its to check.
    needed.extend(
        extra_images(&keadm_extras(keadm_version, command), repository).unwrap_or_default(),
    );
    match sandbox {
        Some(image) => needed.push(image.clone()),
        None => unknown.push("which sandbox image the runtime is configured with"),
    }
    (needed, unknown)
}

/// The pre-flight finding for the images of `needed` (keadm's own) and `extra` (the
/// site's own, `keadm.extraImages`) that the runtime (`runtime`, which listed `in_runtime`
/// and is configured with the sandbox image `sandbox`) lacks and no offline archive for
/// `arch` provides; `None` when every one is there or on its way. The detail says how
/// `batch bundle` puts each in a kit: the runtime's sandbox image only when named with
/// `--sandbox-image`, keadm's own images from the keadmCmd, the site's own from the
/// config's keadm.extraImages.
pub fn missing_finding(
    needed: &[ImageRef],
    extra: &[ImageRef],
    in_runtime: &[ImageRef],
    provided: &[&ImageRef],
    runtime: &str,
    arch: Option<Arch>,
    sandbox: Option<&ImageRef>,
) -> Option<Finding> {
    let mut missing: Vec<&ImageRef> = Vec::new();
    for image in needed.iter().chain(extra) {
        if !in_runtime.contains(image) && !provided.contains(&image) && !missing.contains(&image) {
            missing.push(image);
        }
    }
    if missing.is_empty() {
        return None;
    }
    let archives = match arch {
        Some(arch) => format!("no offline image archive for {arch}"),
        None => "no offline image archive".to_string(),
    };
    let mut bundle = Vec::new();
    if let Some(sandbox) = sandbox.filter(|s| missing.contains(s)) {
        bundle.push(format!(
            "adding --sandbox-image {sandbox} (the runtime's sandbox image)"
        ));
    }
    // An image both keadm and the config want is keadm's: the keadmCmd brings it.
    let (keadm_s, site_s): (Vec<&ImageRef>, Vec<&ImageRef>) = missing
        .iter()
        .filter(|m| Some(**m) != sandbox)
        .partition(|m| needed.contains(m));
    if !keadm_s.is_empty() {
        bundle.push("with this keadmCmd and keadmVersion (keadm's own images)".to_string());
    }
    if !site_s.is_empty() {
        bundle.push("with keadm.extraImages as this config lists them".to_string());
    }
    let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
    Some(Finding {
        id: FindingId::ImageMissing,
        detail: format!(
            "{} {} not in {runtime}, and {archives} provides {}; `keadm-batch batch bundle` writes {} into the kit when run again {}",
            names.join(" and "),
            if missing.len() == 1 { "is" } else { "are" },
            if missing.len() == 1 { "it" } else { "them" },
            if missing.len() == 1 { "it" } else { "them" },
            bundle.join(" and "),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(text: &str) -> ImageRef {
        ImageRef::parse(text).unwrap()
    }

    /// The references written out in full, as the runtime stores them.
    fn names(images: Vec<ImageRef>) -> Vec<String> {
        images.iter().map(ToString::to_string).collect()
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
        // keadm trims nothing: a repository ending in '/' makes no reference.
        let err = installation_package("v1.22.0", Some("harbor.example:8443/edge/"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"harbor.example:8443/edge//installation-package:v1.22.0\""),
            "{err}"
        );
    }

    #[test]
    fn a_join_needs_the_installation_package_and_the_sandbox_images() {
        let pause = [image(DEFAULT_SANDBOX_IMAGE)];
        assert_eq!(
            names(required("v1.23.1", None, &[], &pause).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.9"
            ]
        );
        assert_eq!(
            names(required("v1.22.0", Some("harbor.example:8443/edge"), &[], &[]).unwrap()),
            ["harbor.example:8443/edge/installation-package:v1.22.0"]
        );
        let err = required("v1.22.0", Some("Bad Repo"), &[], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"Bad Repo/installation-package:v1.22.0\""),
            "{err}"
        );
    }

    #[test]
    fn release_versions_follow_keadm_s_pattern() {
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

    /// Without `--kubeedge-version`, keadm asks for the release its own version builds
    /// on: a release as it is, a development build (`git describe` made semver) without
    /// its commit count and build metadata. The flag itself is taken as written.
    #[test]
    fn keadm_s_own_version_is_trimmed_as_keadm_trims_it() {
        let v = |flags: &str, keadm: &str| join_version(&join(flags), Some(keadm));
        for (keadm, asked) in [
            ("v1.23.1", "v1.23.1"),
            ("1.23.1", "v1.23.1"),
            ("v1.23.0-beta.0", "v1.23.0-beta.0"),
            ("v1.23.0-beta.0.150+16cd8548eedb81", "v1.23.0-beta.0"),
            ("v1.23.0-rc.1.7+16cd8548eedb81-dirty", "v1.23.0-rc.1"),
            ("v1.23.1-3+16cd8548eedb81", "v1.23.1"),
            ("v1.23.1+16cd8548eedb81", "v1.23.1"),
        ] {
            assert_eq!(v("", keadm).as_deref(), Some(asked), "{keadm}");
        }
        assert_eq!(
            v("--kubeedge-version=v1.22.0-beta.0.3+abc", "v1.23.1").as_deref(),
            Some("v1.22.0-beta.0.3+abc")
        );
        let (needed, _) =
            needed_by_join(&join(""), Some("v1.23.0-beta.0.150+16cd8548eedb81"), None);
        assert_eq!(
            names(needed),
            ["docker.io/kubeedge/installation-package:v1.23.0-beta.0"]
        );
        assert_eq!(own_release("latest"), None);
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

    /// keadm's `EdgeSet` per release line: v1.15.4 (`WithMQTT` on by default, its own
    /// pause image), v1.16 to v1.20 (MQTT off by default), v1.21 on (no third-party set).
    #[test]
    fn older_keadm_releases_also_pull_their_own_pause_and_mqtt_images() {
        let extras = |keadm: &str, flags: &str| keadm_extras(Some(keadm), &join(flags));
        assert_eq!(extras("v1.15.4", ""), [KEADM_PAUSE, MOSQUITTO]);
        assert_eq!(
            extras("1.15.4", "--with-mqtt=true"),
            [KEADM_PAUSE, MOSQUITTO]
        );
        assert_eq!(extras("v1.15.4", "--with-mqtt=false"), [KEADM_PAUSE]);
        assert_eq!(extras("v1.13.0", "--with-mqtt=0"), [KEADM_PAUSE]);
        assert!(extras("v1.16.0", "").is_empty());
        assert_eq!(extras("v1.20.0", "--with-mqtt"), [MOSQUITTO]);
        assert!(extras("v1.20.0", "--with-mqtt=false --with-mqtt=F").is_empty());
        assert!(extras("v1.21.0", "--with-mqtt").is_empty());
        assert!(extras("v1.23.1", "").is_empty());
        assert!(keadm_extras(None, &join("--with-mqtt")).is_empty());

        let (needed, _) = needed_by_join(
            &join("--image-repository=127.0.0.1:5000/kubeedge --kubeedge-version=v1.15.4"),
            Some("v1.15.4"),
            Some(&image("registry.k8s.io/pause:3.6")),
        );
        assert_eq!(
            names(needed),
            [
                "127.0.0.1:5000/kubeedge/installation-package:v1.15.4",
                "127.0.0.1:5000/kubeedge/pause:3.6",
                "127.0.0.1:5000/kubeedge/eclipse-mosquitto:1.6.15",
                "registry.k8s.io/pause:3.6",
            ]
        );
        assert_eq!(
            names(required("v1.15.4", None, &[KEADM_PAUSE, MOSQUITTO], &[]).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.15.4",
                "docker.io/kubeedge/pause:3.6",
                "docker.io/library/eclipse-mosquitto:1.6.15",
            ]
        );
    }

    #[test]
    fn a_finding_names_what_is_neither_there_nor_provided_and_how_a_kit_gets_it() {
        let ip = image("kubeedge/installation-package:v1.23.1");
        let pause = image("registry.k8s.io/pause:3.6");
        let needed = [ip.clone(), pause.clone()];
        let f = missing_finding(
            &needed,
            &[],
            &[],
            &[],
            "containerd (/run/containerd/containerd.sock)",
            Some(Arch::Amd64),
            Some(&pause),
        )
        .unwrap();
        assert_eq!(f.id, FindingId::ImageMissing);
        assert_eq!(
            f.detail,
            "docker.io/kubeedge/installation-package:v1.23.1 and registry.k8s.io/pause:3.6 are not in containerd (/run/containerd/containerd.sock), and no offline image archive for amd64 provides them; `keadm-batch batch bundle` writes them into the kit when run again adding --sandbox-image registry.k8s.io/pause:3.6 (the runtime's sandbox image) and with this keadmCmd and keadmVersion (keadm's own images)"
        );
        let f = missing_finding(
            &needed,
            &[],
            std::slice::from_ref(&pause),
            &[],
            "containerd",
            None,
            Some(&pause),
        )
        .unwrap();
        assert_eq!(
            f.detail,
            "docker.io/kubeedge/installation-package:v1.23.1 is not in containerd, and no offline image archive provides it; `keadm-batch batch bundle` writes it into the kit when run again with this keadmCmd and keadmVersion (keadm's own images)"
        );
        let f = missing_finding(&needed, &[], &[], &[&ip], "CRI-O", None, Some(&pause)).unwrap();
        assert!(
            f.detail.ends_with(
                "; `keadm-batch batch bundle` writes it into the kit when run again adding --sandbox-image registry.k8s.io/pause:3.6 (the runtime's sandbox image)"
            ),
            "{}",
            f.detail
        );
        // The site's own images are expected too, and come from the config's list.
        let edgemesh = image("kubeedge/edgemesh-agent:v1.15.0");
        let extra = [edgemesh.clone(), pause.clone()];
        let f = missing_finding(
            &needed,
            &extra,
            std::slice::from_ref(&pause),
            &[&ip],
            "containerd",
            Some(Arch::Arm64),
            Some(&pause),
        )
        .unwrap();
        assert_eq!(
            f.detail,
            "docker.io/kubeedge/edgemesh-agent:v1.15.0 is not in containerd, and no offline image archive for arm64 provides it; `keadm-batch batch bundle` writes it into the kit when run again with keadm.extraImages as this config lists them"
        );
        let f = missing_finding(&needed, &extra, &[], &[], "CRI-O", None, Some(&pause)).unwrap();
        assert!(
            f.detail.starts_with("docker.io/kubeedge/installation-package:v1.23.1 and registry.k8s.io/pause:3.6 and docker.io/kubeedge/edgemesh-agent:v1.15.0 are not in CRI-O")
                && f.detail.ends_with("adding --sandbox-image registry.k8s.io/pause:3.6 (the runtime's sandbox image) and with this keadmCmd and keadmVersion (keadm's own images) and with keadm.extraImages as this config lists them"),
            "{}",
            f.detail
        );
        assert_eq!(
            missing_finding(
                &needed,
                &[],
                std::slice::from_ref(&pause),
                &[&ip],
                "containerd",
                None,
                Some(&pause)
            ),
            None
        );
    }
}
