//! Which images a kit carries: those the joins of the config need, by
//! `kubeedge::images::required` (the rules of keadm's join, docs/kubeedge.md), with the
//! sandbox images the operator named (`--sandbox-image`) or
//! `kubeedge::images::DEFAULT_SANDBOX_IMAGE`: the connected machine cannot see the
//! nodes' runtimes, whose setting the sandbox image is. Then the site's own images
//! (`keadm.extraImages`, `--image`), which are pulled and archived as keadm's are: the
//! run imports every archive of a node's arch alike.

use super::error::BundleError;
use std::path::Path;

use crate::config::Config;
use crate::config::environment::StandIn;
use crate::image_ref::ImageRef;
use crate::keadm_cmd::KeadmCommand;
use crate::kubeedge::images::{join_version, keadm_extras, own_release, required, upgrade_image};

/// The images every node of an arch needs for the joins in `config`, installation
/// packages first, without duplicates. The version of a join is its `--kubeedge-version`
/// or else `keadm_version` (keadm's own, with no network), trimmed as keadm trims it.
/// Commands that are not joins need none of their own; a config with no join at all still
/// gets the images of a join with `keadm_version`, so the kit can serve joins added later.
/// The error says which reference keadm would ask for and why it is no image that can be
/// pulled; a run and its
/// dry run refuse the config with it too (`app`), so all three say the same.
pub(crate) fn for_config(
    config: &Config,
    keadm_version: &str,
    sandbox: &[ImageRef],
) -> Result<Vec<ImageRef>, BundleError> {
    let own = own_release(keadm_version).unwrap_or_else(|| keadm_version.to_string());
    let mut joins: Vec<(String, Option<&str>, Vec<&str>)> = Vec::new();
    for node in config.nodes.iter().filter(|n| n.keadm_args.is_join()) {
        let version = join_version(&node.keadm_args, Some(&own)).unwrap_or_else(|| own.clone());
        let repository = node.keadm_args.value("image-repository");
        let join = (
            version,
            repository,
            keadm_extras(Some(&own), &node.keadm_args),
        );
        if !joins.contains(&join) {
            joins.push(join);
        }
    }
    if joins.is_empty() {
        let extras = keadm_extras(Some(&own), &KeadmCommand::parse("join"));
        joins.push((own, None, extras));
    }
    let mut images: Vec<ImageRef> = Vec::new();
    for (version, repository, extras) in &joins {
        let needed =
            required(version, *repository, extras, sandbox).map_err(|e| BundleError::BadImage {
                reason: format!(
                    "keadm would ask for an image that is not a valid image reference: {e}"
                ),
                source_name: format!("the keadmCmd of {}", config.path.display()),
            })?;
        for image in needed {
            if !images.contains(&image) {
                images.push(image);
            }
        }
    }
    // An upgrade pulls the installation-package of its target; on an air-gapped site the
    // kit must carry it.
    for node in config.nodes.iter() {
        let Some(image) = upgrade_image(&node.keadm_args, Some(keadm_version)) else {
            continue;
        };
        let image = image.map_err(|e| BundleError::BadImage {
            reason: format!(
                "keadm upgrade edge would ask for an image that is not a valid image reference: {e}"
            ),
            source_name: format!("the keadmCmd of {}", config.path.display()),
        })?;
        if !images.contains(&image) {
            images.push(image);
        }
    }
    Ok(images)
}

/// `own` (keadm's images, from [`for_config`]) followed by the site's own images: those
/// the config lists (`keadm.extraImages`), then `added` (`--image`), each image once.
pub(crate) fn with_extras(
    mut own: Vec<ImageRef>,
    config: &Config,
    added: &[ImageRef],
) -> Vec<ImageRef> {
    for image in config.extra_images.iter().chain(added) {
        if !own.contains(image) {
            own.push(image.clone());
        }
    }
    own
}

/// The sandbox images the kit carries, and what to tell the operator about the choice.
/// The sandbox image is the site's runtime setting, which the connected machine cannot
/// see, so once named it stays with the kit: `named` (`--sandbox-image`) when given,
/// saying so when it replaces what the earlier kit's `manifest` records; else what that
/// kit `recorded`, saying so; else none, and the caller carries
/// `kubeedge::images::DEFAULT_SANDBOX_IMAGE`.
pub(crate) fn choose_sandbox(
    named: Vec<ImageRef>,
    recorded: Vec<ImageRef>,
    manifest: &Path,
) -> (Vec<ImageRef>, Option<String>) {
    let listed = |images: &[ImageRef]| {
        let names: Vec<String> = images.iter().map(ToString::to_string).collect();
        names.join(", ")
    };
    let noun = match recorded.len() {
        1 => "sandbox image",
        _ => "sandbox images",
    };
    let same = named.len() == recorded.len() && named.iter().all(|i| recorded.contains(i));
    if recorded.is_empty() || same {
        (named, None)
    } else if named.is_empty() {
        let note = format!(
            "Keeping the {noun} {} that {} records; pass --sandbox-image to bundle another.",
            listed(&recorded),
            manifest.display()
        );
        (recorded, Some(note))
    } else {
        let note = format!(
            "Replacing the {noun} {} that {} records with {} (--sandbox-image).",
            listed(&recorded),
            manifest.display(),
            listed(&named)
        );
        (named, Some(note))
    }
}

/// The keadmCmd flags that choose which images a join asks for.
const IMAGE_FLAGS: [&str; 3] = ["image-repository", "kubeedge-version", "with-mqtt"];

/// Refuses a join whose images depend on a variable the config was read without (see
/// `config::environment::WithoutSecrets`): the kit would carry the images of the
/// stand-in's value. Variables for passwords and the token may stay unset.
pub(crate) fn check_stand_ins(config: &Config, stand_ins: &[StandIn]) -> Result<(), BundleError> {
    for node in config.nodes.iter().filter(|n| n.keadm_args.is_join()) {
        for flag in IMAGE_FLAGS {
            let Some(value) = node.keadm_args.value(flag) else {
                continue;
            };
            if let Some(stand_in) = stand_ins.iter().find(|s| value.contains(&s.value)) {
                return Err(BundleError::UnsetVariable {
                    config: config.path.clone(),
                    node: format!("{} {:?}", node.index + 1, node.name),
                    flag: flag.to_string(),
                    variable: stand_in.variable.clone(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProcessEnvironment;

    /// The config with these nodes' keadmCmds, loaded as a run loads it.
    fn config(commands: &[&str]) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from(
            "keadm:\n  download:\n    enable: false\n  keadmVersion: 1.23.1\n  archGroup: [amd64]\n  offlinePackageDir: /kit\nnodes:\n",
        );
        for (i, command) in commands.iter().enumerate() {
            text.push_str(&format!(
                "  - nodeName: edge-{i}\n    keadmCmd: '{command}'\n    ssh:\n      ip: 127.0.0.1\n      username: root\n      auth:\n        type: password\n        passwordAuth:\n          password: x\n"
            ));
        }
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        crate::config::load(&path, &ProcessEnvironment)
            .unwrap()
            .config
    }

    fn names(images: Vec<ImageRef>) -> Vec<String> {
        images.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_join_of_the_config_gets_its_images_once() {
        let pause = [ImageRef::parse("registry.k8s.io/pause:3.6").unwrap()];
        let join = "join --cloudcore-ipport=10.0.0.1:10000 --token=abc.def";
        let config = config(&[
            &format!(
                "{join} --image-repository=my-registry.example/edge --kubeedge-version=1.22.0"
            ),
            join,
            &format!("{join} --kubeedge-version=latest"),
            "reset edge --force",
        ]);
        assert_eq!(
            names(for_config(&config, &config.keadm_version.clone().unwrap(), &pause).unwrap()),
            [
                "my-registry.example/edge/installation-package:v1.22.0",
                "registry.k8s.io/pause:3.6",
                // keadm's own version, with the `v` keadm adds; `latest` is not a release.
                "docker.io/kubeedge/installation-package:v1.23.1",
            ]
        );
        // No join at all: the images of a join with keadm's version, for joins added later.
        let config = self::config(&["reset edge --force"]);
        assert_eq!(
            names(for_config(&config, "v1.23.1", &pause).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.6"
            ]
        );
        let config = self::config(&[&format!("{join} --image-repository=Bad/")]);
        let err = for_config(&config, "v1.23.1", &pause)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("keadm would ask for an image that is not a valid image reference: ")
                && err.contains("\"Bad//installation-package:v1.23.1\""),
            "{err}"
        );
    }

    #[test]
    fn an_upgrade_gets_the_installation_package_of_its_target() {
        let pause = [ImageRef::parse("registry.k8s.io/pause:3.6").unwrap()];
        let config = config(&[
            "upgrade edge --toVersion v1.23.1",
            "upgrade edge --toVersion=v1.22.2 --image my-registry.example/ke/installation-package",
            // keadm's built-in default: its minor release's first.
            "upgrade edge --force",
        ]);
        assert_eq!(
            names(for_config(&config, "v1.23.1", &pause).unwrap()),
            [
                // The images of a join with keadm's version come first, as for any config
                // without a join; the upgrade to v1.23.1 needs the same image.
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.6",
                "my-registry.example/ke/installation-package:v1.22.2",
                "docker.io/kubeedge/installation-package:v1.23.0",
            ]
        );
    }

    #[test]
    fn the_site_s_own_images_follow_keadm_s_each_once() {
        let image = |text| ImageRef::parse(text).unwrap();
        let pause = [image("registry.k8s.io/pause:3.9")];
        let mut config = config(&["join --cloudcore-ipport=10.0.0.1:10000 --token=abc.def"]);
        config.extra_images = vec![
            image("kubeedge/edgemesh-agent:v1.15.0"),
            image("registry.k8s.io/pause:3.9"),
        ];
        let own = for_config(&config, "v1.23.1", &pause).unwrap();
        let added = [
            image("registry.example:5000/site/app:1.2"),
            image("docker.io/kubeedge/edgemesh-agent:v1.15.0"),
        ];
        assert_eq!(
            names(with_extras(own, &config, &added)),
            [
                "docker.io/kubeedge/installation-package:v1.23.1",
                "registry.k8s.io/pause:3.9",
                "docker.io/kubeedge/edgemesh-agent:v1.15.0",
                "registry.example:5000/site/app:1.2",
            ]
        );
    }

    /// A development keadm (`keadmVersion: v1.23.0-beta.0.150+16cd8548eedb81`) asks for
    /// the installation-package of the release it builds on, so the kit carries that one.
    #[test]
    fn a_kit_for_a_development_keadm_carries_the_image_keadm_asks_for() {
        let pause = [ImageRef::parse("registry.k8s.io/pause:3.6").unwrap()];
        let config = config(&["join --cloudcore-ipport=10.0.0.1:10000 --token=abc.def"]);
        assert_eq!(
            names(for_config(&config, "v1.23.0-beta.0.150+16cd8548eedb81", &pause).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.23.0-beta.0",
                "registry.k8s.io/pause:3.6",
            ]
        );
        assert_eq!(
            names(for_config(&config, "v1.23.1", &pause).unwrap())[0],
            "docker.io/kubeedge/installation-package:v1.23.1"
        );
    }

    #[test]
    fn the_sandbox_image_recorded_in_the_kit_stays_unless_the_flag_names_another() {
        let image = |text| ImageRef::parse(text).unwrap();
        let manifest = Path::new("kit/kit.json");
        let (p36, p39) = (image("registry.k8s.io/pause:3.6"), image("pause:3.9"));
        assert_eq!(choose_sandbox(vec![], vec![], manifest), (vec![], None));
        assert_eq!(
            choose_sandbox(vec![p36.clone()], vec![], manifest),
            (vec![p36.clone()], None)
        );
        assert_eq!(
            choose_sandbox(vec![p36.clone()], vec![p36.clone()], manifest),
            (vec![p36.clone()], None)
        );
        assert_eq!(
            choose_sandbox(vec![], vec![p36.clone()], manifest),
            (
                vec![p36.clone()],
                Some("Keeping the sandbox image registry.k8s.io/pause:3.6 that kit/kit.json records; pass --sandbox-image to bundle another.".into())
            )
        );
        assert_eq!(
            choose_sandbox(vec![p39.clone()], vec![p36.clone(), p39.clone()], manifest),
            (
                vec![p39],
                Some("Replacing the sandbox images registry.k8s.io/pause:3.6, docker.io/library/pause:3.9 that kit/kit.json records with docker.io/library/pause:3.9 (--sandbox-image).".into())
            )
        );
    }

    #[test]
    fn a_kit_for_keadm_1_15_carries_its_own_pause_and_mqtt_images() {
        let pause = [ImageRef::parse("registry.k8s.io/pause:3.6").unwrap()];
        let join = "join --cloudcore-ipport=10.0.0.1:10000 --token=abc.def";
        let config = config(&[join, &format!("{join} --with-mqtt=false")]);
        assert_eq!(
            names(for_config(&config, "v1.15.4", &pause).unwrap()),
            [
                "docker.io/kubeedge/installation-package:v1.15.4",
                "docker.io/kubeedge/pause:3.6",
                "docker.io/library/eclipse-mosquitto:1.6.15",
                "registry.k8s.io/pause:3.6",
            ]
        );
    }
}
