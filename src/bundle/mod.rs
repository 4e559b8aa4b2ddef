//! `batch bundle`: on a connected machine, the whole kit an air-gapped run needs, written
//! into one directory that `keadm.download.enable: false` with `keadm.offlinePackageDir`
//! consumes as it is:
//!
//! - `<arch>/keadm-<ver>-linux-<arch>.tar.gz` and its checksum file, for every archGroup
//!   arch, staged (downloaded, verified against the pin or the release's checksum file,
//!   unpacked) exactly as a run stages them;
//! - `<arch>/images/*.tar`: the images a join needs and the site's own (`images`), pulled
//!   for the arch from a registry (`registry`) into OCI archives (`archive`);
//! - `kit.json`: every file with its sha256 (`crate::kit`), checked by runs before use.
//!
//! With `--archive FILE.tar` the kit is also written as one file, its sha512 beside it
//! (`kit_tar`), and at the site `--verify` checks a copied kit, directory or archive, and
//! `--extract` unpacks an archive into a new directory (`verify`, `extract`).
//!
//! What was written is reported (`report`) as a line per file and a summary, and with
//! `--output json` as one JSON document.
//!
//! Image manifests are resolved first, with the config of each image that is not
//! multi-platform (only the config says its arch), so an image that is missing or lacks
//! one of the arches fails the bundle before any release or layer is downloaded. Files
//! are reported once the kit is complete: a bundle that fails removes what it wrote.

mod archive;
mod credentials;
mod error;
mod images;
mod kit_dir;
mod kit_tar;
mod registry;
mod report;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::arch::Arch;
use crate::config::environment::StandIn;
use crate::config::{Config, PackageMode};
use crate::image_ref::ImageRef;
use crate::kit::Whole;
use crate::options::BundleOptions;
use crate::plan::StagingPlan;
use crate::stage::{Meters, StageSettings, Stager};
use archive::Blob;
use kit_dir::KitDir;
use registry::{Platform, Registry, Resolved};
use report::{human_size, manifest_line};
use tempfile::NamedTempFile;

pub use error::{BundleError, Failure};
pub(crate) use images::for_config as join_images;
pub use kit_dir::Placed;
pub use kit_tar::Packed;
pub use registry::RegistrySettings;
pub use report::{Holds, KitEntry, KitReport};

/// The host Docker Hub's registry API answers on, for images of `docker.io`.
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// The name prefix of every temporary the bundle makes in the kit directory; left over
/// by a crash, they are removed by the next bundle.
const TEMPORARY_PREFIX: &str = ".bundle-";

/// The docker client's config file, where registry logins are read: in `docker_config`
/// (`$DOCKER_CONFIG`), else in `home`'s `.docker`.
pub fn docker_config_path(
    docker_config: Option<PathBuf>,
    home: Option<PathBuf>,
) -> Option<PathBuf> {
    credentials::Credentials::default_path(docker_config, home)
}

/// Everything `write_kit` needs, resolved from the config and the options.
#[derive(Debug)]
pub struct BundleSettings {
    /// The kit directory (`--into`); `None` when only `archive` is wanted (the kit is then
    /// made in a temporary directory beside it).
    pub into: Option<PathBuf>,
    /// `--archive FILE.tar`: the kit as one file, with its sha512 beside it.
    pub archive: Option<PathBuf>,
    /// How the keadm releases are staged: download mode, the config's archGroup and pins.
    pub stage: StageSettings,
    /// The images every arch gets: keadm's, installation packages first, then the site's
    /// own (`keadm.extraImages`, `--image`).
    pub images: Vec<ImageRef>,
    /// The sandbox images among them, in full, recorded in kit.json.
    pub sandbox: Vec<String>,
    /// What became of the sandbox images an earlier kit in the directory records, when
    /// they were kept or replaced.
    pub sandbox_note: Option<String>,
    pub registry: RegistrySettings,
}

impl BundleSettings {
    /// The settings for `config` and `options`. `stand_ins` are the variables the config
    /// was read without (`config::environment::WithoutSecrets`); `docker_config` is the
    /// docker client's config file (logins); `progress` is where downloads and image
    /// pulls say how far they are.
    pub fn new(
        config: &Config,
        options: &BundleOptions,
        stand_ins: &[StandIn],
        docker_config: Option<PathBuf>,
        progress: Meters,
    ) -> Result<BundleSettings, BundleError> {
        let Some(version) = config.keadm_version.clone() else {
            return Err(BundleError::NoVersion {
                config: config.path.clone(),
            });
        };
        let mut arch_group: Vec<Arch> = Vec::new();
        for arch in config
            .arch_group
            .iter()
            .filter_map(|name| Arch::from_name(name))
        {
            if !arch_group.contains(&arch) {
                arch_group.push(arch);
            }
        }
        if arch_group.is_empty() {
            return Err(BundleError::NoArchGroup {
                config: config.path.clone(),
            });
        }
        // The config of the air-gapped run usually has downloads off; its download.url,
        // when downloads are on, is where this machine gets releases too.
        let url = options.download_url.clone().or(match &config.package_mode {
            PackageMode::Download { url } => url.clone(),
            PackageMode::Offline { .. } => None,
        });
        let max_package_bytes = options
            .max_package_bytes
            .unwrap_or(crate::stage::DEFAULT_MAX_PACKAGE_BYTES);
        let staging = StagingPlan {
            version: version.clone(),
            mode: PackageMode::Download { url },
            arch_group,
            base_dir: options
                .staging_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::stage::DEFAULT_BASE_DIR)),
            pins: config.sha512_pins.clone(),
            // Every release in a kit is verified: a run must be able to trust it.
            allow_unverified: false,
            insecure_http: options.insecure_http,
            max_package_bytes,
        };
        let mut stage = staging.stage_settings(&config.path, progress.clone());
        if options.download_url.is_some() {
            stage.url_setting = "--download-url";
        }
        stage
            .check_plain_http()
            .map_err(BundleError::UnsafeDownload)?;

        // `what` the images are, as the message names them, and the flag they came from.
        let parse_images = |texts: &[String], what: &str, flag: &str| {
            texts
                .iter()
                .map(|text| {
                    ImageRef::parse(text).map_err(|reason| BundleError::BadImage {
                        reason: format!("{what} {text:?} is not a valid image reference: {reason}"),
                        source_name: flag.into(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let parse_sandbox =
            |texts: &[String]| parse_images(texts, "The sandbox image", "--sandbox-image");
        // Refused before anything is fetched, as the config's own list is when it loads.
        let added = parse_images(&options.extra_images, "The image", "--image")?;
        // Only a kit directory that stays can hold an earlier kit's choice.
        let (mut sandbox, sandbox_note) = match &options.into {
            Some(into) => images::choose_sandbox(
                parse_sandbox(&options.sandbox_images)?,
                recorded_sandbox(into),
                &into.join(crate::kit::KIT_FILE),
            ),
            None => (parse_sandbox(&options.sandbox_images)?, None),
        };
        if sandbox.is_empty() {
            sandbox = parse_sandbox(&[crate::kubeedge::images::DEFAULT_SANDBOX_IMAGE.into()])?;
        }
        images::check_stand_ins(config, stand_ins)?;
        let images = images::with_extras(
            images::for_config(config, &version, &sandbox)?,
            config,
            &added,
        );
        let registry = RegistrySettings {
            mirrors: options
                .registry_mirrors
                .iter()
                .map(|m| (m.registry.clone(), m.url.clone()))
                .collect(),
            insecure_http: options.insecure_http,
            max_image_bytes: max_package_bytes,
            retries: crate::stage::DEFAULT_RETRIES,
            retry_base_delay: Duration::from_secs(1),
            timeout: Duration::from_secs(60),
            docker_config,
            meters: progress,
        };
        registry.check_plain_http()?;
        Ok(BundleSettings {
            into: options.into.clone(),
            archive: options.archive.clone(),
            stage,
            images,
            sandbox: sandbox.iter().map(ToString::to_string).collect(),
            sandbox_note,
            registry,
        })
    }
}

/// The sandbox images an earlier kit in `dir` records; none when there is no such kit (a
/// kit.json that cannot be read is refused when the kit directory is opened).
fn recorded_sandbox(dir: &Path) -> Vec<ImageRef> {
    let kit = crate::kit::Kit::read(dir).ok().flatten();
    kit.iter()
        .flat_map(|kit| &kit.sandbox_images)
        .filter_map(|text| ImageRef::parse(text).ok())
        .collect()
}

/// A kit that `--verify` or `--extract` found whole, and where.
#[derive(Debug)]
pub struct Checked {
    pub whole: Whole,
    pub place: Checking,
}

/// Where [`Checked`]'s kit was.
#[derive(Debug)]
pub enum Checking {
    /// A kit directory.
    Dir(PathBuf),
    /// A kit archive, read without unpacking; `pinned` when its sha512 was the one
    /// `--expect-sha512` gave, else its sha512 file's.
    Archive { archive: PathBuf, pinned: bool },
    /// A kit archive, unpacked into the directory.
    Extracted { archive: PathBuf, into: PathBuf },
}

impl Checked {
    /// The lines for the operator: what was checked, and kit.json's sha256 as `batch
    /// bundle` printed it.
    pub fn summary(&self) -> String {
        let whole = &self.whole;
        let files = format!(
            "its {} files ({}, keadm {}) are the ones its kit.json lists",
            whole.files,
            human_size(whole.bytes),
            whole.keadm_version
        );
        let sha256 = manifest_line(&whole.manifest_sha256);
        match &self.place {
            Checking::Dir(dir) => format!("The kit {} is whole: {files}.\n{sha256}", dir.display()),
            Checking::Archive { archive, pinned } => format!(
                "The kit archive {} is whole: its sha512 is the one {} gives, and {files}.\n\
                 {sha256}",
                archive.display(),
                if *pinned {
                    "--expect-sha512".to_string()
                } else {
                    kit_tar::sidecar_of(archive).display().to_string()
                }
            ),
            Checking::Extracted { archive, into } => format!(
                "Extracted the kit archive {} into {} and checked it: {files}.\n{sha256}\
                 Set keadm.download.enable: false and keadm.offlinePackageDir: {} in the \
                 config of the air-gapped run.\n",
                archive.display(),
                into.display(),
                into.display()
            ),
        }
    }
}

/// `batch bundle --verify PATH`: the kit directory or kit archive at `path`, checked where
/// it arrived, with the check a run makes of each file before it uses it; an archive's
/// sha512 against `expect_sha512` when given (`--expect-sha512`), else its sha512 file.
pub fn verify(path: &Path, expect_sha512: Option<&str>) -> Result<Checked, BundleError> {
    let (whole, place) = if path.is_dir() {
        if expect_sha512.is_some() {
            return Err(BundleError::PinForDirectory {
                path: path.to_path_buf(),
            });
        }
        let whole = crate::kit::check_dir(path).map_err(BundleError::broken)?;
        (whole, Checking::Dir(path.to_path_buf()))
    } else if path.is_file() {
        (
            kit_tar::verify(path, expect_sha512)?,
            Checking::Archive {
                archive: path.to_path_buf(),
                pinned: expect_sha512.is_some(),
            },
        )
    } else {
        return Err(BundleError::NoKit {
            path: path.to_path_buf(),
        });
    };
    Ok(Checked { whole, place })
}

/// `batch bundle --extract FILE --into DIR`: the kit archive `archive` verified (against
/// `expect_sha512` when given, else its sha512 file), unpacked into the new directory
/// `into` and checked there.
pub fn extract(
    archive: &Path,
    into: &Path,
    expect_sha512: Option<&str>,
) -> Result<Checked, BundleError> {
    Ok(Checked {
        whole: kit_tar::extract(archive, into, expect_sha512)?,
        place: Checking::Extracted {
            archive: archive.to_path_buf(),
            into: into.to_path_buf(),
        },
    })
}

/// Writes the kit `settings` describes, then its archive when one is asked for. `note`
/// receives how the sandbox images were chosen, first; the files are in the report, once
/// the kit is complete (a bundle that fails removes the files it wrote, so it reports
/// none).
pub fn write_kit(
    settings: &BundleSettings,
    note: &mut dyn FnMut(String),
) -> Result<KitReport, BundleError> {
    if let Some(archive) = &settings.archive {
        kit_tar::check_place(archive, settings.into.as_deref())?;
    }
    // The kit directory; with an archive alone, a temporary one beside the archive, gone
    // once the kit is archived.
    let scratch;
    let dir: &Path = match &settings.into {
        Some(dir) => dir,
        None => {
            let parent = kit_tar::parent_of(settings.archive.as_deref().unwrap_or(Path::new("")));
            scratch = tempfile::Builder::new()
                .prefix(TEMPORARY_PREFIX)
                .tempdir_in(parent)
                .map_err(|e| BundleError::io("create a temporary directory in", parent, e))?;
            scratch.path()
        }
    };
    let mut kit = KitDir::open(dir)?;
    if let Some(line) = &settings.sandbox_note {
        note(line.clone());
    }
    let holdings = match fill(&mut kit, settings) {
        Ok(holdings) => holdings,
        Err(error) => {
            kit.abandon();
            return Err(error);
        }
    };
    let (placed, removed) = kit.finish(&settings.stage.version, &settings.sandbox)?;
    let files = holdings
        .into_iter()
        .filter_map(|(rel, holds)| {
            let placed = placed.iter().find(|p| p.file.path == rel)?.clone();
            Some(KitEntry { holds, placed })
        })
        .collect();
    let manifest = dir.join(crate::kit::KIT_FILE);
    let (_, manifest_sha256) =
        crate::digest::sha256_file(&manifest).map_err(|e| BundleError::io("read", &manifest, e))?;
    let archive = settings
        .archive
        .as_deref()
        .map(|archive| kit_tar::write(dir, archive))
        .transpose()?;
    Ok(KitReport {
        dir: settings.into.clone(),
        keadm_version: settings.stage.version.clone(),
        arches: settings.stage.arch_group.clone(),
        sandbox_images: settings.sandbox.clone(),
        files,
        removed,
        manifest_sha256,
        archive,
    })
}

/// One image archive the kit gets: what the registry resolved for the arch, and the
/// config blob when it was fetched already.
struct Wanted<'a> {
    arch: Arch,
    image: &'a ImageRef,
    /// The archive's path in the kit.
    rel: String,
    resolved: Resolved,
    platform: Platform,
    config: Option<NamedTempFile>,
}

/// Places every file of the kit; returns, for each file placed, its path in the kit and
/// what it holds.
fn fill(kit: &mut KitDir, settings: &BundleSettings) -> Result<Vec<(String, Holds)>, BundleError> {
    let arches = &settings.stage.arch_group;
    let mut holdings = Vec::new();
    let mut registry = Registry::new(settings.registry.clone())?;
    let scratch = tempfile::Builder::new()
        .prefix(TEMPORARY_PREFIX)
        .tempdir_in(kit.path())
        .map_err(|e| BundleError::io("create a temporary directory in", kit.path(), e))?;
    // Every manifest first, with the config of an image that is not multi-platform (only
    // its config says which arch it is for), all small: an image missing, or without a
    // build for one of the arches, fails the bundle before any release or layer is
    // downloaded.
    let mut wanted = Vec::new();
    for &arch in arches {
        let names = archive_names(&settings.images);
        for (image, name) in settings.images.iter().zip(names) {
            let resolved = registry.resolve(image, arch)?;
            let (platform, config) = match &resolved.platform {
                Some(platform) => (platform.clone(), None),
                None => {
                    let config = registry.config(image, &resolved.config, scratch.path())?;
                    let bytes = std::fs::read(config.path())
                        .map_err(|e| BundleError::io("read", config.path(), e))?;
                    let platform = registry::platform_for(arch, registry::config_platform(&bytes))
                        .map_err(|declared| BundleError::NoPlatform {
                            image: image.to_string(),
                            registry: resolved.registry.clone(),
                            arch,
                            available: format!("only {declared}"),
                        })?;
                    (platform, Some(config))
                }
            };
            wanted.push(Wanted {
                arch,
                image,
                rel: format!("{arch}/images/{name}"),
                resolved,
                platform,
                config,
            });
        }
    }

    let stager = Stager::open(settings.stage.clone())?;
    for staged in stager.stage_all()? {
        let arch = staged.arch;
        let tarball = format!("{arch}/{}", stager.tarball_name(arch));
        kit.copy(&tarball, &staged.tarball)?;
        holdings.push((tarball, Holds::Release { arch }));
        // The digest staging verified the tarball with (the pin, or the release's checksum
        // file), in the release's format.
        let checksum = format!("{arch}/{}", stager.checksum_name(arch));
        kit.put(
            &checksum,
            crate::stage::checksum_text(&staged.tarball_sha512).as_bytes(),
        )?;
        holdings.push((checksum, Holds::Checksum { arch }));
    }
    drop(stager);

    for wanted in wanted {
        let path = kit.path().join(&wanted.rel);
        if let Some(entry) = kit.intact(&wanted.rel)
            && archive::archived(&path)
                == Some((
                    wanted.image.to_string(),
                    wanted.resolved.manifest.digest.clone(),
                ))
        {
            kit.keep(entry);
        } else {
            pull(kit, &mut registry, &wanted, scratch.path())?;
        }
        let holds = Holds::Image {
            arch: wanted.arch,
            image: wanted.image.to_string(),
        };
        holdings.push((wanted.rel, holds));
    }
    Ok(holdings)
}

/// Downloads the blobs of one wanted image (its config unless it is there already) and
/// writes its archive.
fn pull(
    kit: &mut KitDir,
    registry: &mut Registry,
    wanted: &Wanted,
    scratch: &Path,
) -> Result<(), BundleError> {
    let Wanted {
        image,
        rel,
        resolved,
        platform,
        ..
    } = wanted;
    let fetched;
    let config = match &wanted.config {
        Some(config) => config,
        None => {
            fetched = registry.config(image, &resolved.config, scratch)?;
            &fetched
        }
    };
    let mut layers = Vec::new();
    for (i, layer) in resolved.layers.iter().enumerate() {
        let what = format!("layer {} for {platform}", i + 1);
        layers.push(registry.layer(image, layer, &what, scratch)?);
    }
    let mut blobs = vec![Blob {
        digest: &resolved.config.digest,
        path: config.path(),
    }];
    for (layer, file) in resolved.layers.iter().zip(&layers) {
        blobs.push(Blob {
            digest: &layer.digest,
            path: file.path(),
        });
    }
    let temporary = kit.temporary_for(rel)?;
    archive::write(
        temporary.as_file(),
        image,
        &resolved.manifest,
        platform,
        &blobs,
    )
    .map_err(|e| BundleError::io("write", temporary.path(), e))?;
    kit.persist(rel, temporary)
}

/// The archive file name of each image: short (`pause_3.9.tar`) unless two images would
/// share it, then spelled out with registry and repository.
fn archive_names(images: &[ImageRef]) -> Vec<String> {
    images
        .iter()
        .map(|image| {
            let short = image.archive_name(false);
            let shared = images
                .iter()
                .filter(|other| other.archive_name(false) == short)
                .count()
                > 1;
            image.archive_name(shared)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reference `ImageRef::parse` accepts gets archive names, short and spelled
    /// out, that staging accepts (`safe_name`): thousands of texts made at random from the
    /// characters references hold, and of parts joined as references are.
    #[test]
    fn every_reference_parse_accepts_gets_archive_names_staging_accepts() {
        let mut rng = fastrand::Rng::with_seed(29);
        let mut texts: Vec<String> = Vec::new();
        let alphabet: Vec<char> = "ab09AZ._-_/:@+".chars().collect();
        for _ in 0..200_000 {
            let len = rng.usize(1..14);
            texts.push(
                (0..len)
                    .map(|_| alphabet[rng.usize(..alphabet.len())])
                    .collect(),
            );
        }
        let part_alphabet: Vec<char> = "az09._-".chars().collect();
        let part = |rng: &mut fastrand::Rng| -> String {
            let len = rng.usize(1..8);
            (0..len)
                .map(|_| part_alphabet[rng.usize(..part_alphabet.len())])
                .collect()
        };
        let registries = [
            "",
            "localhost/",
            "localhost:5000/",
            "127.0.0.1:5000/",
            "registry.k8s.io/",
            "Upper-Case.Example/",
            "a-b.c/",
            "-a.io/",
            ".a.io/",
            "a./",
        ];
        let tag_alphabet: Vec<char> = "aZ9_.-".chars().collect();
        let digest = format!("@sha256:{}", "0a".repeat(32));
        for _ in 0..50_000 {
            let registry = registries[rng.usize(..registries.len())];
            let path: Vec<String> = (0..rng.usize(1..4)).map(|_| part(&mut rng)).collect();
            let tag: String = match rng.u8(..3) {
                0 => String::new(),
                n => {
                    let len = if n == 1 { rng.usize(1..6) } else { 128 };
                    let tag: String = (0..len)
                        .map(|_| tag_alphabet[rng.usize(..tag_alphabet.len())])
                        .collect();
                    format!(":{tag}")
                }
            };
            let pinned = if rng.bool() { digest.as_str() } else { "" };
            texts.push(format!("{registry}{}{tag}{pinned}", path.join("/")));
        }
        let mut parsed = 0;
        for text in &texts {
            let Ok(image) = ImageRef::parse(text) else {
                continue;
            };
            parsed += 1;
            // Alone it gets its short name; twice, the spelled-out one.
            let short = archive_names(std::slice::from_ref(&image));
            let long = archive_names(&[image.clone(), image.clone()]);
            for name in short.iter().chain(&long) {
                assert_eq!(
                    crate::safe_name::problem(std::ffi::OsStr::new(name)),
                    None,
                    "{text:?} parsed as {image} and is archived as {name:?}"
                );
            }
        }
        assert!(parsed > 10_000, "only {parsed} of the texts parsed");
    }

    #[test]
    fn archive_names_are_spelled_out_only_when_they_would_collide() {
        let images: Vec<ImageRef> = [
            "kubeedge/installation-package:v1.23.1",
            "registry.k8s.io/pause:3.9",
            "kubeedge/pause:3.9",
            "registry.k8s.io/pause:3.10",
        ]
        .iter()
        .map(|t| ImageRef::parse(t).unwrap())
        .collect();
        assert_eq!(
            archive_names(&images),
            [
                "installation-package_v1.23.1.tar",
                "registry.k8s.io_pause_3.9.tar",
                "docker.io_kubeedge_pause_3.9.tar",
                "pause_3.10.tar"
            ]
        );
    }
}
