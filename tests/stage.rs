//! The package stager against a real HTTP server on 127.0.0.1 and real files on disk.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::fake_release::{Built, ChecksumFile, FakeRelease};
use crate::common::http_server::{HttpServer, Route};
use keadm_batch::arch::Arch;
use keadm_batch::stage::{PackageSource, Pin, StageError, StageSettings, Stager};

const VERSION: &str = "v1.21.0";
const MIRROR: &str = "/mirror/kubeedge";

struct Env {
    server: HttpServer,
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            server: HttpServer::start(),
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn base(&self) -> PathBuf {
        self.tmp.path().join("staging/keadm")
    }

    /// Download settings for the mirror (with a trailing slash, which must be harmless).
    fn settings(&self, arch_group: &[Arch]) -> StageSettings {
        let mut settings = StageSettings::new(
            VERSION,
            PackageSource::Download {
                url: Some(format!("{}/", self.server.url(MIRROR))),
            },
        );
        settings.base_dir = self.base();
        settings.arch_group = arch_group.to_vec();
        settings.retry_base_delay = Duration::from_millis(5);
        // The loopback mirror is plain HTTP; most tests here are about downloads, caches and
        // checksum files, not about that rule, which its own tests switch back on.
        settings.insecure_http = true;
        settings
    }

    fn open(&self, arch_group: &[Arch]) -> Stager {
        Stager::open(self.settings(arch_group)).unwrap()
    }

    fn tarball_path(arch: &str) -> String {
        format!("{MIRROR}/keadm-{VERSION}-linux-{arch}.tar.gz")
    }

    fn checksum_path(arch: &str) -> String {
        format!("{MIRROR}/checksum_keadm-{VERSION}-linux-{arch}.tar.gz.txt")
    }

    fn tarball_url(&self, arch: &str) -> String {
        self.server.url(&Env::tarball_path(arch))
    }

    fn checksum_url(&self, arch: &str) -> String {
        self.server.url(&Env::checksum_path(arch))
    }

    /// Serves a release (and, when asked, its checksum file) on the mirror.
    fn publish(&self, release: &FakeRelease, with_checksum: bool) -> Built {
        let built = release.build();
        self.server.route(
            &Env::tarball_path(&release.arch),
            Route::ok(built.bytes.clone()),
        );
        if with_checksum {
            self.server.route(
                &Env::checksum_path(&release.arch),
                Route::ok(format!("{}\n", built.sha512)),
            );
        }
        built
    }

    fn tarball_hits(&self, arch: &str) -> usize {
        self.server.hits(&Env::tarball_path(arch))
    }

    fn checksum_hits(&self, arch: &str) -> usize {
        self.server.hits(&Env::checksum_path(arch))
    }

    fn package_dir(&self, arch: &str) -> PathBuf {
        self.base().join("package").join(arch)
    }

    fn bin_dir(&self, arch: &str) -> PathBuf {
        self.base().join("bin").join(arch)
    }
}

fn release(arch: &str) -> FakeRelease {
    FakeRelease::new(VERSION, arch)
}

/// File names in `dir`, hidden ones included, sorted; empty when `dir` is missing.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn expect_err(result: Result<Arc<keadm_batch::stage::StagedBinary>, StageError>) -> String {
    match result {
        Ok(staged) => panic!("expected an error, staged {staged:?}"),
        Err(error) => {
            eprintln!("observed error: {error}");
            error.to_string()
        }
    }
}

#[test]
fn download_stages_a_verified_executable_and_caches_tarball_and_checksum() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    let stager = env.open(&[Arch::Amd64]);

    let staged = stager.stage_all().unwrap();
    assert_eq!(staged.len(), 1);
    let staged = &staged[0];
    let binary = env
        .bin_dir("amd64")
        .join("keadm-v1.21.0-linux-amd64/keadm/keadm");
    assert_eq!(staged.arch, Arch::Amd64);
    assert_eq!(staged.binary, binary);
    assert_eq!(fs::read(&binary).unwrap(), built.binary);
    assert_eq!(mode(&binary), 0o755);
    assert_eq!(staged.binary_size, built.binary.len() as u64);
    assert_eq!(staged.binary_sha256, built.binary_sha256);
    assert_eq!(staged.tarball_sha512, built.sha512);
    assert!(staged.verified);

    let package_dir = env.package_dir("amd64");
    assert_eq!(
        staged.tarball,
        package_dir.join("keadm-v1.21.0-linux-amd64.tar.gz")
    );
    assert_eq!(fs::read(&staged.tarball).unwrap(), built.bytes);
    let cached_checksum = package_dir.join("checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt");
    assert_eq!(
        fs::read_to_string(cached_checksum).unwrap(),
        format!("{}\n", built.sha512)
    );
    // Nothing else: no partial downloads, no scratch dirs.
    assert_eq!(
        names(&package_dir),
        [
            "checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt",
            "keadm-v1.21.0-linux-amd64.tar.gz"
        ]
    );
    assert_eq!(names(&env.bin_dir("amd64")), ["keadm-v1.21.0-linux-amd64"]);
    assert_eq!(names(&env.base()), [".lock", "bin", "package"]);
    for dir in [env.base(), env.base().join("bin"), env.package_dir("amd64")] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    assert_eq!(env.tarball_hits("amd64"), 1);
    assert_eq!(env.checksum_hits("amd64"), 1);

    // A node reporting the arch gets the same binary from memory.
    let again = stager.for_node(Arch::Amd64).unwrap();
    assert!(Arc::ptr_eq(&again, &staged_arc(&stager)));
    assert_eq!(env.server.total_hits(), 2);
    assert_eq!(stager.package_url(Arch::Amd64), env.tarball_url("amd64"));
}

fn staged_arc(stager: &Stager) -> Arc<keadm_batch::stage::StagedBinary> {
    stager.for_node(Arch::Amd64).unwrap()
}

#[test]
fn a_missing_tarball_is_an_error_with_url_and_status_and_is_not_retried() {
    let env = Env::new();
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(err.contains("HTTP status 404 Not Found"), "{err}");
    assert!(err.contains("keadmVersion"), "{err}");
    assert_eq!(env.tarball_hits("amd64"), 1);
    assert_eq!(
        env.checksum_hits("amd64"),
        0,
        "no checksum request for a missing package"
    );
    assert!(names(&env.package_dir("amd64")).is_empty());
}

#[test]
fn server_errors_are_retried_then_reported_with_the_status() {
    let env = Env::new();
    env.server
        .route(&Env::tarball_path("amd64"), Route::status(503, "busy"));
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(
        err.contains("503 Service Unavailable (after 3 attempts)"),
        "{err}"
    );
    assert!(err.contains("The server is failing"), "{err}");
    assert_eq!(env.tarball_hits("amd64"), 3);
    assert!(names(&env.package_dir("amd64")).is_empty());
}

#[test]
fn a_checksum_mismatch_leaves_nothing_in_the_cache() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), false);
    let wrong = "0123456789abcdef".repeat(8);
    env.server.route(
        &Env::checksum_path("amd64"),
        Route::ok(format!("{wrong}\n")),
    );
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&built.sha512), "actual digest: {err}");
    assert!(err.contains(&wrong), "expected digest: {err}");
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(err.contains(&env.checksum_url("amd64")), "{err}");
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
}

#[test]
fn a_truncated_body_is_retried() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    env.server.route(
        &Env::tarball_path("amd64"),
        Route::ok(built.bytes.clone()).truncated(1),
    );
    // With a download bar, which must survive a broken transfer.
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.progress = keadm_batch::stage::Meters::Bars(indicatif::MultiProgress::new());
    let stager = Stager::open(settings).unwrap();

    let staged = stager.for_node(Arch::Amd64).unwrap();
    assert!(staged.verified);
    assert_eq!(fs::read(&staged.tarball).unwrap(), built.bytes);
    assert_eq!(env.tarball_hits("amd64"), 2);
    assert_eq!(env.checksum_hits("amd64"), 1);
}

#[test]
fn a_body_truncated_every_time_fails_after_the_retries_and_leaves_no_file() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    env.server.route(
        &Env::tarball_path("amd64"),
        Route::ok(built.bytes.clone()).truncated(u32::MAX),
    );
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(err.contains("failed after 3 attempt(s)"), "{err}");
    assert_eq!(env.tarball_hits("amd64"), 3);
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());

    // The failure is remembered: other workers asking for the arch get it without traffic.
    let again = expect_err(stager.for_node(Arch::Amd64));
    assert_eq!(again, err);
    assert_eq!(env.tarball_hits("amd64"), 3);
}

#[test]
fn a_good_cache_is_reused_without_any_request() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    let first = env.open(&[Arch::Amd64]).stage_all().unwrap();
    assert_eq!(env.server.total_hits(), 2);

    // The mirror could even be gone now.
    env.server.remove(&Env::tarball_path("amd64"));
    env.server.remove(&Env::checksum_path("amd64"));
    let second = env.open(&[Arch::Amd64]).stage_all().unwrap();
    assert_eq!(
        env.server.total_hits(),
        2,
        "a verified cache hit needs no request"
    );
    assert!(second[0].verified);
    assert_eq!(second[0].tarball_sha512, built.sha512);
    assert_eq!(second[0].binary_sha256, first[0].binary_sha256);
    assert_eq!(mode(&second[0].binary), 0o755);
}

#[test]
fn a_corrupt_cache_entry_is_replaced_by_a_fresh_download() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    let first = env.open(&[Arch::Amd64]).stage_all().unwrap();
    let tarball = first[0].tarball.clone();
    fs::write(&tarball, b"<html>not a tarball</html>").unwrap();

    let second = env.open(&[Arch::Amd64]).stage_all().unwrap();
    assert!(second[0].verified);
    assert_eq!(fs::read(&tarball).unwrap(), built.bytes);
    assert_eq!(env.tarball_hits("amd64"), 2);
    assert_eq!(env.checksum_hits("amd64"), 2);
    assert_eq!(names(&env.package_dir("amd64")).len(), 2);
}

#[test]
fn a_cached_tarball_without_its_checksum_file_costs_one_checksum_request() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    let first = env.open(&[Arch::Amd64]).stage_all().unwrap();
    let checksum_file = env
        .package_dir("amd64")
        .join("checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt");
    fs::remove_file(&checksum_file).unwrap();

    let second = env.open(&[Arch::Amd64]).stage_all().unwrap();
    assert!(second[0].verified);
    assert_eq!(second[0].tarball, first[0].tarball);
    assert_eq!(env.tarball_hits("amd64"), 1);
    assert_eq!(env.checksum_hits("amd64"), 2);
    assert_eq!(
        fs::read_to_string(checksum_file).unwrap(),
        format!("{}\n", built.sha512)
    );
}

#[test]
fn with_allow_unverified_a_mirror_without_checksum_files_gives_an_unverified_binary() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), false);
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.allow_unverified = true;
    let stager = Stager::open(settings).unwrap();

    let staged = stager.for_node(Arch::Amd64).unwrap();
    assert!(!staged.verified);
    assert_eq!(staged.tarball_sha512, built.sha512);
    assert_eq!(staged.binary_sha256, built.binary_sha256);
    assert_eq!(
        names(&env.package_dir("amd64")),
        ["keadm-v1.21.0-linux-amd64.tar.gz"]
    );
    assert_eq!(env.checksum_hits("amd64"), 1);
}

#[test]
fn a_mirror_without_checksum_files_is_fatal_by_default() {
    let env = Env::new();
    env.publish(&release("amd64"), false);
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.checksum_url("amd64")), "{err}");
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    // The two ways out: a pin, or accepting an unverified package.
    assert!(err.contains("keadm.download.sha512.amd64"), "{err}");
    assert!(err.contains("--allow-unverified"), "{err}");
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
}

/// A pin as the app builds it from the config.
fn pin(digest: &str, arch: &str) -> Pin {
    Pin {
        digest: digest.to_string(),
        source: format!("keadm.download.sha512.{arch} (config.yaml:5:14)"),
    }
}

const WRONG_DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn a_pinned_package_over_plain_http_is_staged_without_a_checksum_file() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), false);
    let mut settings = env.settings(&[Arch::Amd64]);
    // The pin alone makes the plain-HTTP mirror acceptable.
    settings.insecure_http = false;
    settings
        .pins
        .insert(Arch::Amd64, pin(&built.sha512, "amd64"));
    let stager = Stager::open(settings).unwrap();

    let staged = stager.stage_all().unwrap();
    assert!(staged[0].verified);
    assert_eq!(staged[0].tarball_sha512, built.sha512);
    assert_eq!(staged[0].binary_sha256, built.binary_sha256);
    assert_eq!(
        env.checksum_hits("amd64"),
        1,
        "the mirror's file is still asked for"
    );
    // The digest it was verified with is cached beside it, as a checksum file would be.
    assert_eq!(
        names(&env.package_dir("amd64")),
        [
            "checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt",
            "keadm-v1.21.0-linux-amd64.tar.gz"
        ]
    );
}

#[test]
fn a_download_that_does_not_match_its_pin_is_refused_and_not_cached() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), false);
    let mut settings = env.settings(&[Arch::Amd64]);
    settings
        .pins
        .insert(Arch::Amd64, pin(WRONG_DIGEST, "amd64"));
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&built.sha512), "actual digest: {err}");
    assert!(err.contains(WRONG_DIGEST), "pinned digest: {err}");
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(
        err.contains("keadm.download.sha512.amd64 (config.yaml:5:14)"),
        "{err}"
    );
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
}

#[test]
fn a_checksum_file_that_disagrees_with_the_pin_is_an_error() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), false);
    let other = "fedcba9876543210".repeat(8);
    env.server.route(
        &Env::checksum_path("amd64"),
        Route::ok(format!("{other}\n")),
    );
    let mut settings = env.settings(&[Arch::Amd64]);
    settings
        .pins
        .insert(Arch::Amd64, pin(&built.sha512, "amd64"));
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&built.sha512), "pinned digest: {err}");
    assert!(err.contains(&other), "the file's digest: {err}");
    assert!(err.contains(&env.checksum_url("amd64")), "{err}");
    assert!(
        err.contains("keadm.download.sha512.amd64 (config.yaml:5:14)"),
        "{err}"
    );
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
}

#[test]
fn a_cached_tarball_is_checked_against_the_pin() {
    let env = Env::new();
    let built = env.publish(&release("amd64"), true);
    env.open(&[Arch::Amd64]).stage_all().unwrap();
    env.server.remove(&Env::checksum_path("amd64"));
    let hits = env.server.total_hits();

    // The right pin: the cache is used as it is, without a request.
    let mut settings = env.settings(&[Arch::Amd64]);
    settings
        .pins
        .insert(Arch::Amd64, pin(&built.sha512, "amd64"));
    let staged = Stager::open(settings).unwrap().stage_all().unwrap();
    assert!(staged[0].verified);
    assert_eq!(env.server.total_hits(), hits);

    // A pin the cached tarball does not match: it is not used, and the fresh download
    // (the same bytes) is refused too.
    let mut settings = env.settings(&[Arch::Amd64]);
    settings
        .pins
        .insert(Arch::Amd64, pin(WRONG_DIGEST, "amd64"));
    let err = expect_err(Stager::open(settings).unwrap().for_node(Arch::Amd64));
    assert!(err.contains(WRONG_DIGEST), "{err}");
    assert!(err.contains(&built.sha512), "{err}");
    assert_eq!(env.tarball_hits("amd64"), 2);
    assert!(names(&env.package_dir("amd64")).is_empty());
}

/// `len` bytes that gzip cannot shrink.
fn incompressible(len: usize) -> Vec<u8> {
    use sha2::{Digest, Sha512};
    let mut bytes = Vec::with_capacity(len + 64);
    let mut block = Sha512::digest(b"seed").to_vec();
    while bytes.len() < len {
        block = Sha512::digest(&block).to_vec();
        bytes.extend_from_slice(&block);
    }
    bytes.truncate(len);
    bytes
}

const LIMIT: u64 = 64 * 1024;

#[test]
fn a_download_larger_than_the_limit_is_stopped_and_leaves_nothing() {
    for announced in [true, false] {
        let env = Env::new();
        let big = release("amd64").with_binary(&incompressible(256 * 1024));
        let built = env.publish(&big, true);
        assert!(built.bytes.len() as u64 > 2 * LIMIT);
        if !announced {
            env.server.route(
                &Env::tarball_path("amd64"),
                Route::ok(built.bytes.clone()).without_length(),
            );
        }
        let mut settings = env.settings(&[Arch::Amd64]);
        settings.max_package_bytes = LIMIT;
        let stager = Stager::open(settings).unwrap();

        let err = expect_err(stager.for_node(Arch::Amd64));
        assert!(err.contains(&env.tarball_url("amd64")), "{err}");
        assert!(err.contains("The limit is 65536 bytes"), "{err}");
        assert!(err.contains("--max-package-bytes"), "{err}");
        if announced {
            let size = built.bytes.len();
            assert!(err.contains(&format!("announces {size} bytes")), "{err}");
        } else {
            assert!(err.contains("stopped at 65536 bytes"), "{err}");
        }
        assert_eq!(env.tarball_hits("amd64"), 1, "a size limit is not retried");
        assert!(
            names(&env.package_dir("amd64")).is_empty(),
            "no partial file"
        );
        assert!(names(&env.bin_dir("amd64")).is_empty());
    }
}

#[test]
fn a_tarball_that_unpacks_beyond_the_limit_is_refused_and_leaves_nothing() {
    // 256 KiB of zeros gzip to a few hundred bytes: the download is well under the limit.
    let bomb = release("amd64").with_binary(&vec![0u8; 256 * 1024]);
    let env = Env::new();
    let built = env.publish(&bomb, true);
    assert!((built.bytes.len() as u64) < LIMIT / 8);
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.max_package_bytes = LIMIT;
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(
        err.contains("\"keadm-v1.21.0-linux-amd64/keadm/keadm\""),
        "the entry that crosses the limit: {err}"
    );
    assert!(err.contains("65536 bytes"), "{err}");
    assert!(err.contains("--max-package-bytes"), "{err}");
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(
        names(&env.bin_dir("amd64")).is_empty(),
        "no scratch dir left"
    );

    // Offline packages are held to the same limit.
    let (tmp, packages, mut settings) = offline_env(&[Arch::Amd64]);
    bomb.write_offline(&packages, ChecksumFile::Holding(&built.sha512));
    settings.max_package_bytes = LIMIT;
    let err = expect_err(Stager::open(settings).unwrap().for_node(Arch::Amd64));
    assert!(err.contains("--max-package-bytes"), "{err}");
    assert!(names(&tmp.path().join("keadm/bin/amd64")).is_empty());
}

#[test]
fn a_tarball_with_a_parent_dir_entry_is_refused() {
    let env = Env::new();
    env.publish(&release("amd64").with_evil_entry(), true);
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(err.contains("\"../evil\""), "{err}");
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
    assert!(!env.base().join("bin/evil").exists());
    assert!(!env.bin_dir("amd64").join("evil").exists());
}

#[test]
fn a_tarball_without_the_binary_is_refused() {
    let env = Env::new();
    env.publish(&release("amd64").without_binary(), true);
    let stager = env.open(&[Arch::Amd64]);

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&env.tarball_url("amd64")), "{err}");
    assert!(
        err.contains("keadm-v1.21.0-linux-amd64/keadm/keadm"),
        "{err}"
    );
    assert!(names(&env.package_dir("amd64")).is_empty());
    assert!(names(&env.bin_dir("amd64")).is_empty());
}

fn offline_env(arch_group: &[Arch]) -> (tempfile::TempDir, PathBuf, StageSettings) {
    let tmp = tempfile::tempdir().unwrap();
    let packages = tmp.path().join("offline");
    let mut settings = StageSettings::new(
        VERSION,
        PackageSource::Offline {
            dir: packages.clone(),
        },
    );
    settings.base_dir = tmp.path().join("keadm");
    settings.arch_group = arch_group.to_vec();
    (tmp, packages, settings)
}

#[test]
fn offline_packages_are_verified_and_extracted_into_bin() {
    let (tmp, packages, mut settings) = offline_env(&[Arch::Amd64, Arch::Arm64]);
    let amd64 = release("amd64").build();
    let (_, amd64_path) =
        release("amd64").write_offline(&packages, ChecksumFile::Holding(&amd64.sha512));
    let (arm64, arm64_path) = release("arm64").write_offline(&packages, ChecksumFile::Absent);
    settings.allow_unverified = true;
    let stager = Stager::open(settings).unwrap();

    let staged = stager.stage_all().unwrap();
    assert_eq!(staged.len(), 2);
    assert_eq!(staged[0].tarball, amd64_path);
    assert_eq!(staged[0].tarball_sha512, amd64.sha512);
    assert!(staged[0].verified);
    assert_eq!(
        staged[0].binary,
        tmp.path()
            .join("keadm/bin/amd64/keadm-v1.21.0-linux-amd64/keadm/keadm")
    );
    assert_eq!(mode(&staged[0].binary), 0o755);
    assert_eq!(staged[0].binary_sha256, amd64.binary_sha256);
    // No checksum file beside the arm64 package: staged, but marked unverified.
    assert_eq!(staged[1].tarball, arm64_path);
    assert!(!staged[1].verified);
    assert_eq!(staged[1].binary_sha256, arm64.binary_sha256);
    // keadm's behaviour: offline packages are not copied into BASE/package.
    assert!(!tmp.path().join("keadm/package").exists());
}

#[test]
fn a_missing_offline_package_names_the_expected_path() {
    let (_tmp, packages, settings) = offline_env(&[Arch::Arm]);
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Arm));
    let expected = packages.join("arm/keadm-v1.21.0-linux-arm.tar.gz");
    assert!(err.contains(&expected.display().to_string()), "{err}");
    let err = match stager.stage_all() {
        Err(error) => error.to_string(),
        Ok(_) => panic!("stage_all must fail too"),
    };
    assert!(err.contains(&expected.display().to_string()), "{err}");
}

#[test]
fn an_offline_checksum_mismatch_is_refused() {
    let (tmp, packages, settings) = offline_env(&[Arch::Amd64]);
    let wrong = "fedcba9876543210".repeat(8);
    let (built, path) = release("amd64").write_offline(&packages, ChecksumFile::Holding(&wrong));
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(err.contains(&built.sha512), "{err}");
    assert!(err.contains(&wrong), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(names(&tmp.path().join("keadm/bin/amd64")).is_empty());
}

#[test]
fn an_offline_package_without_a_checksum_file_needs_a_pin_or_allow_unverified() {
    let (_tmp, packages, settings) = offline_env(&[Arch::Amd64]);
    let (built, path) = release("amd64").write_offline(&packages, ChecksumFile::Absent);
    let checksum = packages.join("amd64/checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt");

    let err = expect_err(
        Stager::open(settings.clone())
            .unwrap()
            .for_node(Arch::Amd64),
    );
    assert!(err.contains(&checksum.display().to_string()), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("keadm.download.sha512.amd64"), "{err}");
    assert!(err.contains("--allow-unverified"), "{err}");

    let mut pinned = settings.clone();
    pinned.pins.insert(Arch::Amd64, pin(&built.sha512, "amd64"));
    let staged = Stager::open(pinned).unwrap().for_node(Arch::Amd64).unwrap();
    assert!(staged.verified);

    let mut allowed = settings;
    allowed.allow_unverified = true;
    let staged = Stager::open(allowed)
        .unwrap()
        .for_node(Arch::Amd64)
        .unwrap();
    assert!(!staged.verified);
    assert_eq!(staged.binary_sha256, built.binary_sha256);
}

#[test]
fn an_offline_package_that_does_not_match_its_pin_is_refused() {
    let (tmp, packages, mut settings) = offline_env(&[Arch::Amd64]);
    let (built, path) = release("amd64").write_offline(&packages, ChecksumFile::Absent);
    settings
        .pins
        .insert(Arch::Amd64, pin(WRONG_DIGEST, "amd64"));

    let err = expect_err(Stager::open(settings).unwrap().for_node(Arch::Amd64));
    assert!(err.contains(&built.sha512), "{err}");
    assert!(err.contains(WRONG_DIGEST), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(
        err.contains("keadm.download.sha512.amd64 (config.yaml:5:14)"),
        "{err}"
    );
    assert!(names(&tmp.path().join("keadm/bin/amd64")).is_empty());
}

#[test]
fn download_mode_stages_an_arch_outside_the_arch_group_on_demand() {
    let env = Env::new();
    env.publish(&release("amd64"), true);
    let arm64 = env.publish(&release("arm64"), true);
    let stager = env.open(&[Arch::Amd64]);

    stager.stage_all().unwrap();
    assert_eq!(
        env.tarball_hits("arm64"),
        0,
        "only archGroup is staged up front"
    );
    let staged = stager.for_node(Arch::Arm64).unwrap();
    assert_eq!(staged.arch, Arch::Arm64);
    assert_eq!(staged.binary_sha256, arm64.binary_sha256);
    assert!(
        staged
            .binary
            .ends_with("bin/arm64/keadm-v1.21.0-linux-arm64/keadm/keadm")
    );
    assert_eq!(env.tarball_hits("arm64"), 1);
}

#[test]
fn a_plain_http_mirror_needs_a_pin_for_every_arch_staged_up_front() {
    let env = Env::new();
    let amd64 = env.publish(&release("amd64"), true);
    env.publish(&release("arm64"), true);
    let mut settings = env.settings(&[Arch::Amd64, Arch::Arm64]);
    settings.insecure_http = false;
    settings
        .pins
        .insert(Arch::Amd64, pin(&amd64.sha512, "amd64"));

    let err = settings.check_plain_http().unwrap_err().to_string();
    eprintln!("observed error: {err}");
    let url = format!("{}/", env.server.url(MIRROR));
    assert!(
        err.contains(&format!("keadm.download.url {url} is plain HTTP")),
        "{err}"
    );
    assert!(err.contains("keadm.download.sha512 (for arm64)"), "{err}");
    assert!(err.contains("--insecure-http"), "{err}");
    // The stager holds to the rule too, arch by arch, before any request.
    let stager = Stager::open(settings.clone()).unwrap();
    let err = match stager.stage_all() {
        Err(error) => error.to_string(),
        Ok(_) => panic!("arm64 has no pin"),
    };
    assert!(err.contains("(for arm64)"), "{err}");
    assert_eq!(env.tarball_hits("arm64"), 0);
    assert_eq!(env.checksum_hits("arm64"), 0);
    drop(stager);

    // With no arch group and no pin at all, every node would fail: refused up front too.
    let mut bare = env.settings(&[]);
    bare.insecure_http = false;
    let err = bare.check_plain_http().unwrap_err().to_string();
    assert!(err.contains("(for amd64, arm64, arm)"), "{err}");
    // --insecure-http accepts the risk.
    settings.insecure_http = true;
    settings.check_plain_http().unwrap();
    bare.insecure_http = true;
    bare.check_plain_http().unwrap();
}

#[test]
fn an_arch_staged_on_demand_from_a_plain_http_mirror_needs_a_pin() {
    let env = Env::new();
    let amd64 = env.publish(&release("amd64"), false);
    let arm64 = env.publish(&release("arm64"), false);
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.insecure_http = false;
    settings
        .pins
        .insert(Arch::Amd64, pin(&amd64.sha512, "amd64"));
    settings.check_plain_http().unwrap();
    let stager = Stager::open(settings.clone()).unwrap();
    stager.stage_all().unwrap();

    let err = expect_err(stager.for_node(Arch::Arm64));
    assert!(err.contains("is plain HTTP"), "{err}");
    assert!(err.contains("keadm.download.sha512 (for arm64)"), "{err}");
    assert_eq!(env.tarball_hits("arm64"), 0);
    drop(stager);

    settings
        .pins
        .insert(Arch::Arm64, pin(&arm64.sha512, "arm64"));
    let stager = Stager::open(settings).unwrap();
    let staged = stager.for_node(Arch::Arm64).unwrap();
    assert!(staged.verified);
    assert_eq!(staged.binary_sha256, arm64.binary_sha256);
}

#[test]
fn offline_mode_refuses_an_arch_outside_the_arch_group_by_name() {
    let (_tmp, packages, settings) = offline_env(&[Arch::Amd64]);
    // Even a package in place is not used: the operator chose the arch group.
    release("arm").write_offline(&packages, ChecksumFile::Absent);
    let stager = Stager::open(settings).unwrap();

    let err = expect_err(stager.for_node(Arch::Arm));
    assert!(err.contains("reported arch arm,"), "{err}");
    assert!(err.contains("Add arm to keadm.archGroup"), "{err}");
    let path = packages.join("arm/keadm-v1.21.0-linux-arm.tar.gz");
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn concurrent_callers_for_one_arch_share_one_download() {
    let env = Env::new();
    let built = release("amd64").build();
    env.server.route(
        &Env::tarball_path("amd64"),
        Route::ok(built.bytes.clone()).delayed(Duration::from_millis(300)),
    );
    env.server.route(
        &Env::checksum_path("amd64"),
        Route::ok(format!("{}\n", built.sha512)),
    );
    let stager = env.open(&[]);

    let staged: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| stager.for_node(Arch::Amd64).unwrap()))
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert!(staged.iter().all(|s| Arc::ptr_eq(s, &staged[0])));
    assert_eq!(env.tarball_hits("amd64"), 1);
    assert_eq!(env.checksum_hits("amd64"), 1);
}

#[test]
fn a_staging_dir_that_is_a_symlink_is_refused() {
    let env = Env::new();
    let real = env.tmp.path().join("elsewhere");
    fs::create_dir(&real).unwrap();
    let link = env.tmp.path().join("keadm");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.base_dir = link.clone();

    let err = match Stager::open(settings) {
        Ok(_) => panic!("a symlinked staging dir must be refused"),
        Err(error) => error.to_string(),
    };
    eprintln!("observed error: {err}");
    assert!(err.contains(&link.display().to_string()), "{err}");
    assert!(err.contains("it is a symbolic link"), "{err}");
    assert!(err.contains("--staging-dir"), "{err}");
    assert!(names(&real).is_empty(), "nothing written through the link");
}

#[test]
fn a_second_run_waits_for_the_staging_lock() {
    let env = Env::new();
    let first = env.open(&[]);
    let settings = env.settings(&[]);
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let second = Stager::open(settings);
        done_tx.send(()).unwrap();
        second.map(|_| ())
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the second run must wait while the first holds the lock"
    );
    drop(first);
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the second run gets the lock once the first is gone");
    waiter.join().unwrap().unwrap();
}

#[test]
fn temporaries_left_by_a_crashed_run_are_removed() {
    let env = Env::new();
    env.publish(&release("amd64"), true);
    let package_dir = env.package_dir("amd64");
    let bin_dir = env.bin_dir("amd64");
    for dir in [&package_dir, &bin_dir] {
        fs::create_dir_all(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    for dir in [
        env.base(),
        env.base().join("package"),
        env.base().join("bin"),
    ] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    fs::write(package_dir.join(".download-99999-0"), b"half a tarball").unwrap();
    fs::create_dir_all(bin_dir.join(".unpack-99999-1/keadm-v1.21.0-linux-amd64")).unwrap();
    fs::write(bin_dir.join("operator-notes.txt"), b"not ours to remove").unwrap();

    env.open(&[Arch::Amd64]).stage_all().unwrap();
    assert_eq!(
        names(&package_dir),
        [
            "checksum_keadm-v1.21.0-linux-amd64.tar.gz.txt",
            "keadm-v1.21.0-linux-amd64.tar.gz"
        ]
    );
    assert_eq!(
        names(&bin_dir),
        ["keadm-v1.21.0-linux-amd64", "operator-notes.txt"]
    );
}

#[test]
fn a_url_without_a_scheme_fails_at_once_without_retries() {
    let env = Env::new();
    let mut settings = env.settings(&[Arch::Amd64]);
    settings.source = PackageSource::Download {
        url: Some("mirror.example/kubeedge".into()),
    };
    settings.retry_base_delay = Duration::from_secs(30);
    let stager = Stager::open(settings).unwrap();

    let started = std::time::Instant::now();
    let err = expect_err(stager.for_node(Arch::Amd64));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no backoff for a bad URL"
    );
    assert!(
        err.contains("mirror.example/kubeedge/keadm-v1.21.0-linux-amd64.tar.gz"),
        "{err}"
    );
    assert!(err.contains("Fix keadm.download.url"), "{err}");
}

/// A release with another keadm inside, and its checksum file, as someone else would
/// plant them where a cache entry of `arch` would be in `dir`; owned by `nobody`.
fn plant_cache(dir: &Path, arch: &str) {
    use std::os::unix::fs::chown;
    let planted = FakeRelease::new(VERSION, arch)
        .with_binary(b"#!/bin/sh\necho planted\n")
        .build();
    let package = dir.join("package").join(arch);
    fs::create_dir_all(&package).unwrap();
    let tarball = package.join(format!("keadm-{VERSION}-linux-{arch}.tar.gz"));
    fs::write(&tarball, &planted.bytes).unwrap();
    let checksum = package.join(format!("checksum_keadm-{VERSION}-linux-{arch}.tar.gz.txt"));
    fs::write(&checksum, format!("{}\n", planted.sha512)).unwrap();
    for path in [&dir.join("package"), &package, &tarball, &checksum] {
        chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

/// Debian's `nobody`: another user of the control host.
const NOBODY: u32 = 65534;

/// Issue 33 item 6: keadm's default staging directory is shared with every user of the
/// machine. A cache entry another user planted in a shared one (anyone may write it, or
/// another user owns it) is never read: the run stages into a directory of its own inside
/// it, downloading and checking afresh.
#[test]
fn a_cache_another_user_planted_in_a_shared_staging_dir_is_not_used() {
    use std::os::unix::fs::chown;
    for (mode, owner) in [(0o1777, None), (0o755, Some(NOBODY))] {
        let env = Env::new();
        let built = env.publish(&release("amd64"), true);
        fs::create_dir_all(env.base()).unwrap();
        plant_cache(&env.base(), "amd64");
        chown(env.base(), owner, owner).unwrap();
        fs::set_permissions(env.base(), fs::Permissions::from_mode(mode)).unwrap();

        // Kept open: the staged paths lead through the directory it holds.
        let stager = env.open(&[Arch::Amd64]);
        let staged = stager.stage_all().unwrap();
        assert_eq!(
            env.tarball_hits("amd64"),
            1,
            "{mode:o}: downloaded, not the plant"
        );
        assert_eq!(staged[0].tarball_sha512, built.sha512, "{mode:o}");
        assert!(staged[0].verified);
        let binary = fs::read(&staged[0].binary).unwrap();
        assert!(
            !String::from_utf8_lossy(&binary).contains("planted"),
            "{mode:o}"
        );
        let own = env
            .base()
            .join(format!("keadm-batch-{}", crate::common::own_uid()));
        assert!(own.join("package/amd64").is_dir(), "{}", own.display());
        let planted = env
            .package_dir("amd64")
            .join(format!("keadm-{VERSION}-linux-amd64.tar.gz"));
        assert_ne!(
            fs::read(planted).unwrap(),
            built.bytes,
            "the plant is left alone"
        );
    }
}

/// The directory of its own, planted in the shared one by another user before the run
/// (with a cache in it), is refused with what to do, before anything in it is read.
#[test]
fn a_directory_of_our_own_another_user_planted_is_refused() {
    use std::os::unix::fs::chown;
    let env = Env::new();
    env.publish(&release("amd64"), true);
    fs::create_dir_all(env.base()).unwrap();
    fs::set_permissions(env.base(), fs::Permissions::from_mode(0o1777)).unwrap();
    let own = env
        .base()
        .join(format!("keadm-batch-{}", crate::common::own_uid()));
    fs::create_dir(&own).unwrap();
    plant_cache(&own, "amd64");
    chown(&own, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&own, fs::Permissions::from_mode(0o700)).unwrap();

    let err = match Stager::open(env.settings(&[Arch::Amd64])).and_then(|s| s.stage_all()) {
        Ok(staged) => panic!("staged from a directory nobody planted: {staged:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with("Refusing to use the staging directory"),
        "{err}"
    );
    assert!(err.contains(&own.display().to_string()), "{err}");
    assert_eq!(env.server.total_hits(), 0, "{err}");
}

/// A packed copy's process leaves the run's share of the CPU: it runs in a session of its
/// own (so Linux's autogroup gives it a group of its own, not the run's session's share),
/// that group at nice 19 where the kernel has autogroup, and still makes its copy.
#[test]
fn a_packed_copy_runs_in_a_session_of_its_own_at_autogroup_nice_19() {
    let dir = tempfile::tempdir().unwrap();
    let binary: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    fs::write(dir.path().join("keadm"), &binary).unwrap();
    let sha256 = crate::common::image_archive::sha256_hex(&binary);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keadm-batch"))
        .args(["pack-copy", "zstd", "keadm", &sha256])
        .env("RUST_LOG", "keadm_batch=debug")
        .stdin(fs::File::open(dir.path()).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        dir.path().join(format!("keadm-{sha256}.zst")).is_file(),
        "{stderr}: {:?}",
        names(dir.path())
    );
    let line = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("keadm-batch: debug: the copy runs in a session of its own (session ")
        })
        .unwrap_or_else(|| panic!("no session line: {stderr}"));
    let (sid, rest) = line.split_once(", process ").unwrap();
    let (pid, group) = rest.split_once("), in ").unwrap();
    assert_eq!(sid, pid, "the copy leads its own session: {stderr}");
    if Path::new("/proc/self/autogroup").exists() {
        assert!(
            group.starts_with("/autogroup-") && group.ends_with(" nice 19"),
            "{stderr}"
        );
    } else {
        assert!(group.starts_with("no autogroup"), "{stderr}");
    }
}

/// [`incompressible`] bytes, different in every test run (so no other copy of the same
/// binary on this host, another test's, is packed meanwhile), and their sha256.
fn unique_incompressible(n: usize) -> (Vec<u8>, String) {
    let mut bytes = incompressible(n);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    bytes[..16].copy_from_slice(&now.to_le_bytes());
    bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    let sha256 = crate::common::image_archive::sha256_hex(&bytes);
    (bytes, sha256)
}

/// `keadm-batch pack-copy xz keadm SHA256` in `dir`, as a run starts it.
fn start_copy(dir: &Path, sha256: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_keadm-batch"))
        .args(["pack-copy", "xz", "keadm", sha256])
        .env("RUST_LOG", "keadm_batch=debug")
        .stdin(fs::File::open(dir).unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The CPU time process `pid` has used so far, from /proc (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses: field 3 on; utime and stime are 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// A copy whose staging directory is removed (a test's scratch directory, an operator's
/// `rm -rf`) stops within seconds instead of packing for minutes into a file nobody can
/// reach, and leaves nothing behind.
#[test]
fn a_copy_whose_staging_directory_is_removed_stops() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("staging");
    fs::create_dir(&dir).unwrap();
    let (binary, sha256) = unique_incompressible(32 << 20);
    fs::write(dir.join("keadm"), &binary).unwrap();
    drop(binary);
    let mut copy = start_copy(&dir, &sha256);
    // Under way: it has used some CPU.
    let started = std::time::Instant::now();
    while cpu_seconds(copy.id()) < 0.5 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        copy.try_wait().unwrap().is_none(),
        "the copy ended too soon"
    );
    fs::remove_dir_all(&dir).unwrap();
    let removed = std::time::Instant::now();
    let status = loop {
        if let Some(status) = copy.try_wait().unwrap() {
            break status;
        }
        if removed.elapsed() > Duration::from_secs(5) {
            copy.kill().unwrap();
            panic!("the copy still ran 5 s after its staging directory was removed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut copy.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("was removed"),
        "it says why it stopped: {stderr}"
    );
}

/// Two stagings of the same binary in two directories (two operators' runs, two test
/// runs) pack it one at a time: the second copy waits, using no CPU, until the first is
/// done, and then makes its own.
#[test]
fn two_copies_of_one_binary_pack_one_at_a_time() {
    let (binary, sha256) = unique_incompressible(4 << 20);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    for dir in &dirs {
        fs::write(dir.path().join("keadm"), &binary).unwrap();
    }
    let mut first = start_copy(dirs[0].path(), &sha256);
    // The first has the binary to itself before the second starts.
    let started = std::time::Instant::now();
    while cpu_seconds(first.id()) < 0.3 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = start_copy(dirs[1].path(), &sha256);
    let (second_pid, mut second_cpu, mut first_cpu) = (second.id(), 0.0, 0.0);
    while first.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the first copy did not end"
        );
        // Read while the first still runs: a reading taken after its end may include
        // the start of the second's own turn.
        second_cpu = cpu_seconds(second_pid);
        first_cpu = cpu_seconds(first.id());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(first.wait().unwrap().success());
    assert!(first_cpu > 1.0, "the first copy took {first_cpu} s of CPU");
    assert!(
        second_cpu < 0.3,
        "the second copy packed alongside the first: {second_cpu} s of CPU against {first_cpu} s"
    );
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "waiting for another process on this host to finish packing the same binary as xz"
        ),
        "the second copy waited for the host's turn: {stderr}"
    );
    for dir in &dirs {
        assert!(
            dir.path().join(format!("keadm-{sha256}.xz")).is_file(),
            "{:?}",
            names(dir.path())
        );
    }
}
