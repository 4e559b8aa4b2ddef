//! Per-arch keadm binaries on the control host: download (checksum, cache) or offline
//! package, safe unpack, and one shared, verified binary per arch for every worker.
//!
//! Layout follows keadm so its caches and ours are interchangeable: tarballs and their
//! checksum files in `BASE/package/<arch>`, extractions in `BASE/bin/<arch>`. Unlike keadm,
//! every package is checked against a digest (the config's pin, else the release's
//! checksum file; neither is an error unless the operator accepts unverified packages),
//! a plain-HTTP mirror is trusted only for pinned arches, downloads and extractions are
//! size-capped, a cache hit is checked like a download, and the binary is never taken
//! from a directory another user could write.

mod dirs;
mod download;
mod error;
mod images;
mod meter;
mod recompress;
mod temporary;
mod unpack;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::arch::Arch;
use download::Http;
use temporary::{Temporary, write_atomically};
use unpack::{Expected, Extracted, unpack_package};

pub(crate) use dirs::{effective_uid, not_private};
/// An error and its causes on one line, for messages about HTTP failures.
pub(crate) use download::error_chain;
pub use error::StageError;
pub use images::{ArchivedImage, Gzipped, ImageArchive, ImageSources, OfflineImages, Selector};
pub(crate) use meter::Meter;
pub use meter::{Lines, Meters};
#[cfg(test)]
pub(crate) use recompress::pretend_being_made;
pub use recompress::{
    CopyFormat, CopyMaking, CopySlot, Gate, PACK_COMMAND, PackedCopy, make_copy_here,
};
/// Unpacking a tar safely, for the kit's archive (`bundle`).
pub(crate) use unpack::{Admitted, HashingReader, Links, Refusal, admit, unpack_tar};

/// keadm's BASE, the same on the control host and on the nodes.
pub const DEFAULT_BASE_DIR: &str = "/tmp/kubeedge/keadm";

/// Extra attempts for transient HTTP failures (2 retries, 1 s then 2 s, as for connections).
pub const DEFAULT_RETRIES: u32 = 2;

/// The default `--max-package-bytes`: keadm's tarball is about 25 MB and its binary about
/// 83 MB, so this leaves room for years of growth and still stops a mirror or offline
/// package that would fill the disk.
pub const DEFAULT_MAX_PACKAGE_BYTES: u64 = 512 << 20;

/// The config setting that names the download URL, as messages name it.
pub const CONFIG_DOWNLOAD_URL: &str = "keadm.download.url";

/// Where release tarballs come from when the config sets no `download.url`.
const GITHUB_RELEASES: &str = "https://github.com/kubeedge/kubeedge/releases/download";

/// Where packages come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackageSource {
    /// `keadm.download.enable` (default). `url` is `keadm.download.url`: the directory that
    /// holds the tarballs; `None` means GitHub releases. An empty string counts as `None`.
    Download { url: Option<String> },
    /// `keadm.download.enable: false`: `dir/<arch>/keadm-<ver>-linux-<arch>.tar.gz`.
    Offline { dir: PathBuf },
}

/// A digest the operator pinned for one arch's tarball.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// sha512, lowercase hex.
    pub digest: String,
    /// Where it was written, for messages: `keadm.download.sha512.amd64 (config.yaml:5:14)`.
    pub source: String,
}

/// What to stage and how.
#[derive(Clone, Debug)]
pub struct StageSettings {
    /// BASE; `BASE/package/<arch>` and `BASE/bin/<arch>` as in keadm.
    pub base_dir: PathBuf,
    /// `keadmVersion`, verbatim (release tags start with `v`).
    pub version: String,
    pub source: PackageSource,
    /// Staged up front by [`Stager::stage_all`], in this order.
    pub arch_group: Vec<Arch>,
    /// `keadm.download.sha512`: the digest each arch's tarball must have, whatever its
    /// source (download, cache or offline package).
    pub pins: BTreeMap<Arch, Pin>,
    /// A package with neither a pin nor a checksum file is used, marked unverified, instead
    /// of refused (`--allow-unverified`).
    pub allow_unverified: bool,
    /// An `http://` mirror may serve arches that have no pin (`--insecure-http`).
    pub insecure_http: bool,
    /// The most bytes a download may have, and the most an unpacked package may hold
    /// (`--max-package-bytes`).
    pub max_package_bytes: u64,
    /// Where the download URL was given, for messages: [`CONFIG_DOWNLOAD_URL`] unless a
    /// command-line flag overrode it.
    pub url_setting: &'static str,
    /// Where downloads say how far they are.
    pub progress: Meters,
    /// How each binary's packed copies are made when no earlier run made them: not at all
    /// unless asked (a run asks for [`CopyMaking::Process`]).
    pub copies: CopyMaking,
    /// Extra attempts after a transient HTTP failure.
    pub retries: u32,
    /// First backoff delay; it doubles on each retry.
    pub retry_base_delay: Duration,
}

impl StageSettings {
    /// Settings with the defaults: keadm's BASE, no arch group, no pins, every package
    /// verified, https only, 512 MiB packages, no progress shown, no xz copy made, 2
    /// retries starting at 1 s.
    pub fn new(version: impl Into<String>, source: PackageSource) -> StageSettings {
        StageSettings {
            base_dir: PathBuf::from(DEFAULT_BASE_DIR),
            version: version.into(),
            source,
            arch_group: Vec::new(),
            pins: BTreeMap::new(),
            allow_unverified: false,
            insecure_http: false,
            max_package_bytes: DEFAULT_MAX_PACKAGE_BYTES,
            url_setting: CONFIG_DOWNLOAD_URL,
            progress: Meters::Off,
            copies: CopyMaking::Off,
            retries: DEFAULT_RETRIES,
            retry_base_delay: Duration::from_secs(1),
        }
    }

    /// The plain-HTTP rule, before anything is downloaded: over an `http://` mirror, every
    /// arch staged up front needs a pin, unless `--insecure-http`. Without an arch group
    /// every arch is staged on demand; with no pin either, every node would fail, so that
    /// is refused here too.
    pub fn check_plain_http(&self) -> Result<(), StageError> {
        let arches = if self.arch_group.is_empty() && self.pins.is_empty() {
            &Arch::ALL[..]
        } else {
            &self.arch_group[..]
        };
        self.refuse_unpinned_over_plain_http(arches)
    }

    /// Whether `arch`'s package and checksum file may come over plain HTTP: with a pin
    /// (which alone decides) or `--insecure-http`.
    fn plain_http_ok(&self, arch: Arch) -> bool {
        self.insecure_http || self.pins.contains_key(&arch)
    }

    /// An error naming the arches of `arches` that have no pin, when they would come from
    /// an `http://` mirror without `--insecure-http`: the checksum file travels the same
    /// unprotected way as the tarball, so only a pin can vouch for it.
    fn refuse_unpinned_over_plain_http(&self, arches: &[Arch]) -> Result<(), StageError> {
        let PackageSource::Download { url: Some(url) } = &self.source else {
            return Ok(());
        };
        if !is_plain_http(url) {
            return Ok(());
        }
        let mut unpinned: Vec<&str> = Vec::new();
        for &arch in arches {
            if !self.plain_http_ok(arch) && !unpinned.contains(&arch.as_str()) {
                unpinned.push(arch.as_str());
            }
        }
        if unpinned.is_empty() {
            return Ok(());
        }
        Err(StageError::PlainHttp {
            setting: self.url_setting,
            url: url.trim().to_string(),
            arches: unpinned.join(", "),
        })
    }
}

/// Whether `url` (a `keadm.download.url`) is unencrypted `http://`, in any case.
pub fn is_plain_http(url: &str) -> bool {
    url.trim()
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

/// A keadm binary ready to upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedBinary {
    pub arch: Arch,
    /// `BASE/bin/<arch>/keadm-<ver>-linux-<arch>/keadm/keadm`, mode 0755.
    pub binary: PathBuf,
    pub binary_size: u64,
    /// Lowercase hex; the node pipeline records it in the remote sidecar.
    pub binary_sha256: String,
    /// The tarball it came from: the cached download, or the offline package.
    pub tarball: PathBuf,
    pub tarball_size: u64,
    /// Lowercase hex.
    pub tarball_sha512: String,
    /// Where the binary sits inside the tarball: `keadm-<ver>-linux-<arch>/keadm/keadm`.
    pub tarball_entry: String,
    /// The binary's packed copies, one per [`CopyFormat::PREFERRED`] in its order, when
    /// gzip already shrinks the binary well (see `recompress`): each cached by an earlier
    /// run, or being made while nodes get another form, or none (when it cannot be made);
    /// no slot at all for an incompressible binary.
    pub copies: Vec<CopySlot>,
    /// False only under `allow_unverified`, when there was neither a pin nor a checksum
    /// file (warned, marked "unverified").
    pub verified: bool,
}

type Slot = Arc<OnceLock<Result<Arc<StagedBinary>, StageError>>>;

/// Stages keadm binaries and hands them out to worker threads. Holds the lock on
/// `BASE/.lock` until dropped, so two runs on one control host never share BASE at once.
pub struct Stager {
    settings: StageSettings,
    http: Option<Http>,
    /// One slot per arch: the first caller stages, concurrent callers wait on the slot,
    /// later ones read it. A failure is kept too, so a broken mirror is asked once per run,
    /// not once per node.
    slots: Mutex<HashMap<Arch, Slot>>,
    /// Stagings of different arches run one at a time: progress lines stay readable and
    /// the mirror sees one download at a time, as with keadm.
    one_at_a_time: Mutex<()>,
    _lock: File,
    /// The directory of our own that `settings.base_dir` reaches as `/proc/self/fd/N`,
    /// when the staging directory given is not private; open as long as BASE is used.
    _staging_dir: Option<File>,
}

impl std::fmt::Debug for Stager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Stager {
    /// Checks the settings, creates BASE owner-only (or a directory of our own in it, when
    /// others could change BASE), and takes the staging lock, waiting for another run that
    /// holds it.
    pub fn open(mut settings: StageSettings) -> Result<Stager, StageError> {
        if settings.version.is_empty() {
            return Err(StageError::EmptyVersion);
        }
        // The version becomes part of file names under BASE.
        if settings.version.contains(['/', '\0']) {
            return Err(StageError::BadVersion {
                version: settings.version.clone(),
            });
        }
        if let PackageSource::Download { url } = &mut settings.source
            && url.as_deref().is_some_and(|u| u.trim().is_empty())
        {
            *url = None;
        }
        let staging_dir = dirs::open_staging_dir(&settings.base_dir)?;
        settings.base_dir = staging_dir.path;
        let lock = dirs::lock(&settings.base_dir)?;
        let http = match settings.source {
            PackageSource::Download { .. } => Some(Http::new(
                settings.retries,
                settings.retry_base_delay,
                settings.progress.clone(),
                settings.max_package_bytes,
            )?),
            PackageSource::Offline { .. } => None,
        };
        Ok(Stager {
            settings,
            http,
            slots: Mutex::new(HashMap::new()),
            one_at_a_time: Mutex::new(()),
            _lock: lock,
            _staging_dir: staging_dir.held,
        })
    }

    /// Stages every `arch_group` arch, in order (duplicates once); stops at the first error.
    pub fn stage_all(&self) -> Result<Vec<Arc<StagedBinary>>, StageError> {
        let mut staged: Vec<Arc<StagedBinary>> = Vec::new();
        for &arch in &self.settings.arch_group {
            if staged.iter().all(|s| s.arch != arch) {
                staged.push(self.for_node(arch)?);
            }
        }
        Ok(staged)
    }

    /// For a node that reported `arch`: the staged binary. Arches staged earlier are
    /// returned from memory. An arch outside `arch_group` is staged on demand in download
    /// mode (over plain HTTP only with a pin or `--insecure-http`); in offline mode it is
    /// an error naming the arch, the setting and the path.
    /// Concurrent callers asking for the same arch wait for one staging.
    pub fn for_node(&self, arch: Arch) -> Result<Arc<StagedBinary>, StageError> {
        self.settings.refuse_unpinned_over_plain_http(&[arch])?;
        if let PackageSource::Offline { dir } = &self.settings.source
            && !self.settings.arch_group.contains(&arch)
        {
            return Err(StageError::OfflineArchNotInGroup {
                arch,
                path: self.offline_package(dir, arch),
            });
        }
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry(arch).or_default().clone()
        };
        slot.get_or_init(|| {
            let _turn = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
            self.stage(arch).map(Arc::new)
        })
        .clone()
    }

    /// Where the package for `arch` comes from: its URL in download mode, its path in
    /// offline mode. For messages and the dry-run plan.
    pub fn package_url(&self, arch: Arch) -> String {
        match &self.settings.source {
            PackageSource::Download { url } => {
                format!(
                    "{}/{}",
                    self.download_dir(url.as_deref()),
                    self.tarball_name(arch)
                )
            }
            PackageSource::Offline { dir } => self.offline_package(dir, arch).display().to_string(),
        }
    }

    /// The binary staged for `arch` so far in this run, if any (for the summary).
    pub fn staged(&self, arch: Arch) -> Option<Arc<StagedBinary>> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .get(&arch)
            .and_then(|slot| slot.get())
            .and_then(|result| result.as_ref().ok())
            .cloned()
    }

    /// The packed copies that processes this run started are still making, by arch and
    /// format, with the process's id: they go on after the run.
    pub fn copies_being_made(&self) -> Vec<(Arch, CopyFormat, u32)> {
        Arch::ALL
            .iter()
            .filter_map(|arch| self.staged(*arch))
            .flat_map(|staged| {
                staged
                    .copies
                    .iter()
                    .filter_map(|slot| Some((staged.arch, slot.format(), slot.process_id()?)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The settings in use, with BASE made absolute (or `/proc/self/fd/N`: see `dirs`).
    pub fn settings(&self) -> &StageSettings {
        &self.settings
    }

    fn download_dir(&self, url: Option<&str>) -> String {
        match url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("{GITHUB_RELEASES}/{}", self.settings.version),
        }
    }

    fn checksum_url(&self, arch: Arch, url: Option<&str>) -> String {
        format!("{}/{}", self.download_dir(url), self.checksum_name(arch))
    }

    /// `keadm-<ver>-linux-<arch>`: the tarball's top directory.
    fn top_dir(&self, arch: Arch) -> String {
        format!("keadm-{}-linux-{arch}", self.settings.version)
    }

    /// `keadm-<ver>-linux-<arch>.tar.gz`: the release tarball's file name.
    pub fn tarball_name(&self, arch: Arch) -> String {
        format!("{}.tar.gz", self.top_dir(arch))
    }

    /// `checksum_keadm-<ver>-linux-<arch>.tar.gz.txt`: its checksum file's name.
    pub fn checksum_name(&self, arch: Arch) -> String {
        format!("checksum_{}.txt", self.tarball_name(arch))
    }

    fn offline_package(&self, dir: &Path, arch: Arch) -> PathBuf {
        dir.join(arch.as_str()).join(self.tarball_name(arch))
    }

    fn stage(&self, arch: Arch) -> Result<StagedBinary, StageError> {
        let bin_root = dirs::ensure_private_subdir(&self.settings.base_dir, "bin")?;
        let bin_dir = dirs::ensure_private_subdir(&bin_root, arch.as_str())?;
        temporary::remove_stale(&bin_dir);
        let (extracted, tarball, verified) = match &self.settings.source {
            PackageSource::Download { url } => {
                self.stage_download(arch, url.as_deref(), &bin_dir)?
            }
            PackageSource::Offline { dir } => self.stage_offline(arch, dir, &bin_dir)?,
        };
        let (binary_size, binary_sha256) = sha256_file(&extracted.binary)?;
        let tarball_size = std::fs::metadata(&tarball)
            .map_err(|e| StageError::io("read", &tarball, e))?
            .len();
        log::info!(
            "staged keadm {} for {arch}: {} ({binary_size} bytes, sha256 {binary_sha256}{})",
            self.settings.version,
            extracted.binary.display(),
            if verified { "" } else { ", unverified" }
        );
        // Started, not waited for: nodes get another form until each is whole.
        let copies = if (tarball_size as f64) < recompress::WORTH_IT_BELOW * binary_size as f64 {
            CopyFormat::PREFERRED
                .into_iter()
                .map(|format| {
                    CopySlot::start(
                        format,
                        &bin_dir,
                        &extracted.binary,
                        &binary_sha256,
                        &self.settings.copies,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(StagedBinary {
            arch,
            binary: extracted.binary,
            binary_size,
            binary_sha256,
            tarball,
            tarball_size,
            tarball_sha512: extracted.tarball_sha512,
            tarball_entry: format!("{}/keadm/keadm", self.top_dir(arch)),
            copies,
            verified,
        })
    }

    fn stage_download(
        &self,
        arch: Arch,
        url: Option<&str>,
        bin_dir: &Path,
    ) -> Result<(Extracted, PathBuf, bool), StageError> {
        let http = self
            .http
            .as_ref()
            .expect("download mode always has an HTTP client");
        let package_root = dirs::ensure_private_subdir(&self.settings.base_dir, "package")?;
        let package_dir = dirs::ensure_private_subdir(&package_root, arch.as_str())?;
        temporary::remove_stale(&package_dir);
        let tarball = package_dir.join(self.tarball_name(arch));
        let checksum_file = package_dir.join(self.checksum_name(arch));
        let package_url = self.package_url(arch);
        let checksum_url = self.checksum_url(arch, url);
        let top = self.top_dir(arch);
        // What the mirror said about the checksum, once asked: Some(None) = it has none.
        let mut mirror_checksum: Option<Option<String>> = None;

        if fs::symlink_metadata(&tarball).is_ok_and(|m| m.is_file()) {
            let name = tarball.display().to_string();
            // A pin decides alone, so a pinned cache hit needs no request. Without one, the
            // checksum file cached beside the tarball, else the mirror's.
            let cached = read_cached_checksum(&checksum_file);
            let (file, file_source) = if self.settings.pins.contains_key(&arch) {
                (None, String::new())
            } else if let Some(digest) = cached.clone() {
                (Some(digest), checksum_file.display().to_string())
            } else {
                let fetched = self.fetch_checksum(http, arch, &checksum_url)?;
                mirror_checksum = Some(fetched.clone());
                (fetched, checksum_url.clone())
            };
            let expected = self.expectation(arch, &name, file, &file_source)?;
            let limit = self.settings.max_package_bytes;
            match unpack_package(&tarball, &name, bin_dir, &top, expected.as_ref(), limit) {
                Ok(extracted) => {
                    if let Some(expected) = &expected
                        && cached.as_ref() != Some(&expected.digest)
                    {
                        write_checksum_file(&checksum_file, &expected.digest)?;
                    }
                    log::info!("reused the cached package {name}");
                    return Ok((extracted, tarball, expected.is_some()));
                }
                Err(error) => {
                    log::warn!("the cached package cannot be used, downloading it again: {error}");
                    let _ = fs::remove_file(&tarball);
                    let _ = fs::remove_file(&checksum_file);
                }
            }
        }

        log::info!("downloading keadm for {arch} from {package_url}");
        // Removed on any failure below; renamed into the cache once verified and unpacked.
        let partial = Temporary::Download
            .file_in(&package_dir, 0o600)
            .map_err(|e| StageError::io("create a temporary file in", &package_dir, e))?;
        let actual = http.download(
            &package_url,
            &partial,
            &self.tarball_name(arch),
            self.settings.plain_http_ok(arch),
        )?;
        let file = match mirror_checksum {
            Some(known) => known,
            None => self.fetch_checksum(http, arch, &checksum_url)?,
        };
        let expected = self.expectation(arch, &package_url, file, &checksum_url)?;
        if let Some(expected) = &expected
            && expected.digest != actual
        {
            return Err(expected.mismatch(&package_url, actual));
        }
        // Unpack before caching, so a tarball that cannot be used never enters the cache.
        let extracted = unpack_package(
            partial.path(),
            &package_url,
            bin_dir,
            &top,
            expected.as_ref(),
            self.settings.max_package_bytes,
        )?;
        partial
            .persist(&tarball)
            .map_err(|e| StageError::io("move into place", &tarball, e.error))?;
        match &expected {
            // The digest the tarball was verified with, so a later cache hit is checked
            // locally (by keadm too, which reads the same file).
            Some(expected) => write_checksum_file(&checksum_file, &expected.digest)?,
            // A stale checksum file beside a new tarball would fail the next cache check.
            None => {
                let _ = fs::remove_file(&checksum_file);
            }
        }
        sync_dir(&package_dir);
        Ok((extracted, tarball, expected.is_some()))
    }

    fn stage_offline(
        &self,
        arch: Arch,
        dir: &Path,
        bin_dir: &Path,
    ) -> Result<(Extracted, PathBuf, bool), StageError> {
        let package = self.offline_package(dir, arch);
        if !package.is_file() {
            return Err(StageError::OfflineMissing {
                arch,
                path: package,
            });
        }
        let checksum_rel = Path::new(arch.as_str()).join(self.checksum_name(arch));
        let checksum_file = dir.join(&checksum_rel);
        // A kit written by `batch bundle` lists every file with its sha256 (kit.json): an
        // altered tarball, or a tarball and checksum file swapped together, is refused here
        // before either is read. A hand-made offline directory has no kit.json.
        let tarball_rel = Path::new(arch.as_str()).join(self.tarball_name(arch));
        if let Some(kit) = crate::kit::Kit::read(dir)? {
            kit.check(dir, &tarball_rel)?;
            if checksum_file.exists() {
                kit.check(dir, &checksum_rel)?;
            }
        }
        let checksum_source = checksum_file.display().to_string();
        let name = package.display().to_string();
        let file = match fs::read_to_string(&checksum_file) {
            Ok(text) => Some(digest_in(&text, &checksum_source)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StageError::io("read", &checksum_file, e)),
        };
        let expected = self.expectation(arch, &name, file, &checksum_source)?;
        let extracted = unpack_package(
            &package,
            &name,
            bin_dir,
            &self.top_dir(arch),
            expected.as_ref(),
            self.settings.max_package_bytes,
        )?;
        log::info!(
            "extracted the offline package {name} to {}",
            bin_dir.display()
        );
        Ok((extracted, package, expected.is_some()))
    }

    /// The checksum published beside the package; `None` when the mirror has none (404).
    fn fetch_checksum(
        &self,
        http: &Http,
        arch: Arch,
        url: &str,
    ) -> Result<Option<String>, StageError> {
        http.get_text(url, self.settings.plain_http_ok(arch))?
            .map(|text| digest_in(&text, url))
            .transpose()
    }

    /// What `arch`'s package (`package`, for messages) must hash to. A pin decides when
    /// there is one, and a checksum file that disagrees with it is an error, whichever of
    /// the two is wrong. Without a pin, the checksum file `file` found at `file_source`
    /// decides. With neither, the package is refused unless `--allow-unverified`.
    fn expectation(
        &self,
        arch: Arch,
        package: &str,
        file: Option<String>,
        file_source: &str,
    ) -> Result<Option<Expected>, StageError> {
        match (self.settings.pins.get(&arch), file) {
            (Some(pin), Some(digest)) if digest != pin.digest => Err(StageError::PinConflict {
                package: package.to_string(),
                checksum_source: file_source.to_string(),
                checksum: digest,
                pin_source: pin.source.clone(),
                pin: pin.digest.clone(),
            }),
            (Some(pin), _) => Ok(Some(Expected {
                digest: pin.digest.clone(),
                source: pin.source.clone(),
            })),
            (None, Some(digest)) => Ok(Some(Expected {
                digest,
                source: file_source.to_string(),
            })),
            (None, None) if self.settings.allow_unverified => {
                log::warn!(
                    "there is no checksum file at {file_source} and no pin for {arch}; using \
                     {package} unverified (--allow-unverified)"
                );
                Ok(None)
            }
            (None, None) => Err(StageError::ChecksumMissing {
                package: package.to_string(),
                checksum_source: file_source.to_string(),
                arch,
            }),
        }
    }
}

/// The digest in a checksum file: the first word, 128 hex characters (sha512), lowercased.
/// KubeEdge writes the bare digest and a newline; `sha512sum` output (digest, spaces,
/// file name) is accepted too.
pub(crate) fn parse_checksum(text: &str) -> Option<String> {
    let digest = text.split_whitespace().next()?;
    (digest.len() == 128 && digest.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| digest.to_ascii_lowercase())
}

/// The digest in the checksum file read from `source`; one that holds none is an error.
fn digest_in(text: &str, source: &str) -> Result<String, StageError> {
    parse_checksum(text).ok_or_else(|| StageError::BadChecksumFile {
        source_name: source.to_string(),
        content: shorten(text),
    })
}

/// A cached checksum file's digest; `None` (re-fetch) when missing or unreadable.
fn read_cached_checksum(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let digest = parse_checksum(&text);
    if digest.is_none() {
        log::warn!("ignoring the damaged checksum file {}", path.display());
    }
    digest
}

/// The first 80 characters of `text`, to quote in a message.
pub(crate) fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

/// Size and sha256 (lowercase hex) of a file.
fn sha256_file(path: &Path) -> Result<(u64, String), StageError> {
    crate::digest::sha256_file(path).map_err(|e| StageError::io("read", path, e))
}

/// Caches `digest` as the checksum file at `path`, in the release's format.
fn write_checksum_file(path: &Path, digest: &str) -> Result<(), StageError> {
    write_atomically(path, checksum_text(digest).as_bytes())
}

/// A checksum file holding `digest` as KubeEdge's releases write theirs: the bare hex
/// digest and a newline.
pub(crate) fn checksum_text(digest: &str) -> String {
    format!("{digest}\n")
}

/// Makes renames in `dir` durable. Best effort: a failure only weakens crash safety.
fn sync_dir(dir: &Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        log::debug!("could not fsync {}: {e}", dir.display());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn stager(source: PackageSource, version: &str) -> (tempfile::TempDir, Stager) {
        let tmp = tempfile::tempdir().unwrap();
        let mut settings = StageSettings::new(version, source);
        settings.base_dir = tmp.path().join("keadm");
        (tmp, Stager::open(settings).unwrap())
    }

    #[test]
    fn default_urls_point_at_github_releases() {
        let (_tmp, stager) = stager(PackageSource::Download { url: None }, "v1.21.0");
        assert_eq!(
            stager.package_url(Arch::Arm64),
            "https://github.com/kubeedge/kubeedge/releases/download/v1.21.0/keadm-v1.21.0-linux-arm64.tar.gz"
        );
        assert_eq!(
            stager.checksum_url(Arch::Arm64, None),
            "https://github.com/kubeedge/kubeedge/releases/download/v1.21.0/checksum_keadm-v1.21.0-linux-arm64.tar.gz.txt"
        );
    }

    #[test]
    fn mirror_urls_get_exactly_one_slash() {
        for url in [
            "http://mirror/keadm",
            "http://mirror/keadm/",
            "http://mirror/keadm//",
        ] {
            let source = PackageSource::Download {
                url: Some(url.into()),
            };
            let (_tmp, stager) = stager(source, "v1.20.0");
            assert_eq!(
                stager.package_url(Arch::Arm),
                "http://mirror/keadm/keadm-v1.20.0-linux-arm.tar.gz"
            );
            assert_eq!(
                stager.checksum_url(Arch::Arm, Some(url)),
                "http://mirror/keadm/checksum_keadm-v1.20.0-linux-arm.tar.gz.txt"
            );
        }
    }

    #[test]
    fn an_empty_mirror_url_means_github() {
        let source = PackageSource::Download {
            url: Some(" ".into()),
        };
        let (_tmp, stager) = stager(source, "v1.21.0");
        assert!(stager.package_url(Arch::Amd64).starts_with(GITHUB_RELEASES));
    }

    #[test]
    fn offline_package_paths_follow_keadm() {
        let source = PackageSource::Offline {
            dir: PathBuf::from("/pkgs"),
        };
        let (_tmp, stager) = stager(source, "v1.21.0");
        assert_eq!(
            stager.package_url(Arch::Amd64),
            "/pkgs/amd64/keadm-v1.21.0-linux-amd64.tar.gz"
        );
    }

    #[test]
    fn versions_that_cannot_be_file_names_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for (version, expected) in [
            ("", "keadmVersion is empty"),
            ("v1/../x", "cannot be part of a file name"),
        ] {
            let mut settings = StageSettings::new(version, PackageSource::Download { url: None });
            settings.base_dir = tmp.path().join("keadm");
            let err = Stager::open(settings).err().unwrap().to_string();
            assert!(err.contains(expected), "{err}");
        }
    }

    /// A staging dir with `..` is refused for that, with the fix, and not as if another
    /// user owned it.
    #[test]
    fn a_staging_dir_with_dot_dot_is_refused_for_that_reason() {
        let tmp = tempfile::tempdir().unwrap();
        let mut settings = StageSettings::new("v1.21.0", PackageSource::Download { url: None });
        settings.base_dir = tmp.path().join("a/../keadm");
        let err = Stager::open(settings).err().unwrap().to_string();
        assert!(err.contains("has '..' in its path"), "{err}");
        assert!(
            err.contains("Give --staging-dir a path without '..'."),
            "{err}"
        );
        assert!(!err.contains("Another user could swap"), "{err}");
    }

    #[test]
    fn checksum_files_are_parsed_leniently_but_must_hold_a_sha512() {
        let digest = "AB".repeat(64);
        assert_eq!(
            parse_checksum(&format!("{digest}\n")),
            Some("ab".repeat(64))
        );
        assert_eq!(
            parse_checksum(&format!("{digest}  keadm-v1.21.0-linux-amd64.tar.gz\n")),
            Some("ab".repeat(64))
        );
        assert_eq!(parse_checksum(""), None);
        assert_eq!(
            parse_checksum(&"ab".repeat(32)),
            None,
            "a sha256 is not enough"
        );
        assert_eq!(parse_checksum(&"zz".repeat(64)), None);
        assert_eq!(parse_checksum("<html>404</html>"), None);
    }

    /// An offline amd64 package in `dir` whose keadm is `binary`, with its checksum file.
    /// Returns the tarball's path.
    pub(crate) fn offline_package(dir: &Path, version: &str, binary: &[u8]) -> PathBuf {
        use sha2::Digest;
        let top = format!("keadm-{version}-linux-amd64");
        let arch_dir = dir.join("amd64");
        fs::create_dir_all(&arch_dir).unwrap();
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::best(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(binary.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        builder
            .append_data(&mut header, format!("{top}/keadm/keadm"), binary)
            .unwrap();
        let bytes = builder.into_inner().unwrap().finish().unwrap();
        let digest = hex::encode(sha2::Sha512::digest(&bytes));
        let tarball = arch_dir.join(format!("{top}.tar.gz"));
        fs::write(&tarball, bytes).unwrap();
        let checksum = format!("checksum_{top}.tar.gz.txt");
        fs::write(arch_dir.join(checksum), format!("{digest}\n")).unwrap();
        tarball
    }

    /// A cold stager (nothing staged, no copy cached) hands out the binary at once, its
    /// zstd and xz copies still being made (so uploads send the tarball), and each copy
    /// once it is whole; the next run finds them in place.
    #[test]
    fn a_cold_stager_hands_out_the_binary_before_its_copies_and_each_copy_once_made() {
        let tmp = tempfile::tempdir().unwrap();
        let binary = {
            let mut binary = b"#!/bin/sh\necho keadm\n".to_vec();
            binary.resize(256 << 10, b'#');
            binary
        };
        offline_package(&tmp.path().join("offline"), "v1.21.0", &binary);
        let source = PackageSource::Offline {
            dir: tmp.path().join("offline"),
        };
        let mut settings = StageSettings::new("v1.21.0", source);
        settings.base_dir = tmp.path().join("keadm");
        settings.arch_group = vec![Arch::Amd64];
        let gate = Gate::closed();
        settings.copies = CopyMaking::Thread(gate.clone());
        let stager = Stager::open(settings.clone()).unwrap();

        let staged = stager.for_node(Arch::Amd64).unwrap();
        let formats: Vec<CopyFormat> = staged.copies.iter().map(CopySlot::format).collect();
        assert_eq!(formats, [CopyFormat::Zstd, CopyFormat::Xz]);
        for slot in &staged.copies {
            assert!(slot.being_made(), "{slot:?}");
            assert_eq!(slot.ready(), None);
        }
        assert!(staged.tarball_size < staged.binary_size / 4);

        gate.open();
        let copies: Vec<PackedCopy> = staged
            .copies
            .iter()
            .map(|slot| slot.wait().expect("the copy, once made"))
            .collect();
        for (copy, extension) in copies.iter().zip(["zst", "xz"]) {
            assert_eq!(
                copy.path,
                tmp.path()
                    .join("keadm/bin/amd64")
                    .join(format!("keadm-{}.{extension}", staged.binary_sha256))
            );
            assert!(copy.size < staged.tarball_size, "{copy:?}");
        }
        // Every holder of the staged binary sees them: later uploads send them.
        let again = stager.for_node(Arch::Amd64).unwrap();
        let ready: Vec<Option<PackedCopy>> = again.copies.iter().map(CopySlot::ready).collect();
        assert_eq!(ready, copies.iter().cloned().map(Some).collect::<Vec<_>>());
        drop((again, staged, stager));

        // The next run, even one that would make no copy, finds them ready at once.
        settings.copies = CopyMaking::Off;
        let next = Stager::open(settings).unwrap();
        let ready: Vec<Option<PackedCopy>> = next
            .for_node(Arch::Amd64)
            .unwrap()
            .copies
            .iter()
            .map(CopySlot::ready)
            .collect();
        assert_eq!(ready, copies.into_iter().map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn the_stager_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Stager>();
        assert_send_sync::<StagedBinary>();
        assert_send_sync::<StageError>();
    }
}
