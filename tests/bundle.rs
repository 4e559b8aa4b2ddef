//! `batch bundle` against real parts: a real registry (Debian's docker-registry) on
//! loopback holding images the tests push, keadm releases from the fake release server,
//! and an offline run consuming the kit on a fleet of real sshd nodes, each with a real
//! containerd (tests/common/containerd.rs) that the kit's images are imported into.

mod hostile;

use std::path::{Path, PathBuf};

use crate::common::containerd::{
    Containerd, ENDPOINT, SANDBOX_IMAGE, images_seen_by_keadm, keadm_listing_images,
};
use crate::common::fake_release::{ChecksumFile, FakeRelease};
use crate::common::fleet::{Fleet, NodeOpt};
use crate::common::http_server::{HttpServer, Route};
use crate::common::image_archive::{Format, TestImage, oci_archive, sha256};
use crate::common::registry::{
    LocalRegistry, TOKEN_SERVICE, TokenIssuer, check_archive, files_under,
};
use crate::common::scenario::{Scenario, VERSION, remote_keadm};
use crate::common::test::{Output, Test};

const INSTALLATION_PACKAGE: &str = "kubeedge/installation-package";
/// What keadm join v1.23.1 asks the runtime for, as containerd names it.
const PACKAGE: &str = "docker.io/kubeedge/installation-package:v1.23.1";

/// A connected machine's sources: the release server with keadm for amd64 and arm64,
/// and a registry with the images keadm's join needs (multi-arch).
struct Sources {
    releases: HttpServer,
    registry: LocalRegistry,
}

impl Sources {
    /// Releases whose keadm is `keadm_script` (with the arch in a comment), and the
    /// installation package (an OCI index) and pause (a Docker manifest list) for both
    /// arches, unless `with_pause` is false.
    fn new(keadm_script: &str, with_pause: bool) -> Sources {
        let releases = release_server(keadm_script);
        let registry = LocalRegistry::start();
        registry.push_index(
            INSTALLATION_PACKAGE,
            VERSION,
            Format::Oci,
            &["amd64", "arm64"],
        );
        if with_pause {
            registry.push_index("pause", "3.9", Format::Docker, &["amd64", "arm64"]);
        }
        Sources { releases, registry }
    }

    /// `batch bundle -c config.yaml -o <out>` in `dir`, with both registries mapped to
    /// the local one and releases from the release server.
    fn bundle(&self, dir: &Path, out: &str, extra: &[&str]) -> Output {
        bundle_command(dir, out, &self.releases, &self.registry)
            .args(extra)
            .run()
    }

    /// As [`Sources::bundle`], with the kit directory given by `kit` (`--into DIR`, say).
    fn bundle_spelt(&self, dir: &Path, kit: &[&str]) -> Output {
        let registry = self.registry.url();
        fetching(dir, &self.releases, &registry, &registry)
            .args(kit)
            .run()
    }
}

/// The release server, with keadm for amd64 and arm64 whose script is `keadm_script`
/// (with the arch in a comment).
fn release_server(keadm_script: &str) -> HttpServer {
    let releases = HttpServer::start();
    for arch in ["amd64", "arm64"] {
        let release = FakeRelease::new(VERSION, arch)
            .with_binary(format!("{keadm_script}# arch={arch}\n").as_bytes());
        let built = release.build();
        releases.route(
            &format!("/releases/{}", release.file_name()),
            Route::ok(built.bytes),
        );
        releases.route(
            &format!("/releases/{}", release.checksum_name()),
            Route::ok(format!("{}\n", built.sha512)),
        );
    }
    releases
}

fn bundle_command(dir: &Path, out: &str, releases: &HttpServer, registry: &LocalRegistry) -> Test {
    bundle_via(dir, out, releases, &registry.url(), &registry.url())
}

/// `batch bundle` as [`bundle_command`] runs it, with docker.io's images from the
/// registry at `docker_io` and registry.k8s.io's from the one at `k8s_io`.
fn bundle_via(dir: &Path, out: &str, releases: &HttpServer, docker_io: &str, k8s_io: &str) -> Test {
    fetching(dir, releases, docker_io, k8s_io).args(["-o", out])
}

/// `batch bundle -c config.yaml` in `dir` with its sources as [`bundle_via`] gives them,
/// and no kit directory yet.
fn fetching(dir: &Path, releases: &HttpServer, docker_io: &str, k8s_io: &str) -> Test {
    Test::in_dir(dir)
        .env("HOME", dir)
        .args(["batch", "bundle", "-c", "config.yaml"])
        .arg("--download-url")
        .arg(releases.url("/releases"))
        .arg("--insecure-http")
        .arg("--registry-mirror")
        .arg(format!("docker.io={docker_io}"))
        .arg("--registry-mirror")
        .arg(format!("registry.k8s.io={k8s_io}"))
        .arg("--staging-dir")
        .arg(dir.join("bundle-staging"))
}

/// A config for the air-gapped side whose one node is never reached: staging comes first.
fn offline_config(dir: &Path, arch_group: &str, keadm_cmd: &str) {
    offline_config_with(dir, arch_group, keadm_cmd, "");
}

/// [`offline_config`] with `keadm_lines` (each indented two spaces, ending in a newline)
/// at the end of its `keadm` section, from line 7 on.
fn offline_config_with(dir: &Path, arch_group: &str, keadm_cmd: &str, keadm_lines: &str) {
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            "keadm:\n  download:\n    enable: false\n  keadmVersion: {VERSION}\n  archGroup: {arch_group}\n  offlinePackageDir: {}\n{keadm_lines}maxRunNum: 1\nnodes:\n  - nodeName: edge-0\n    keadmCmd: '{keadm_cmd}'\n    ssh:\n      ip: 127.0.0.1\n      port: 1\n      username: root\n      auth:\n        type: password\n        passwordAuth:\n          password: x\n",
            dir.join("kit").display()
        ),
    )
    .unwrap();
}

/// The air-gapped run of `offline_config`, staging in `dir/run-staging`.
fn offline_run(dir: &Path) -> Output {
    Test::in_dir(dir)
        .env("HOME", dir)
        .args(["batch", "-c", "config.yaml", "--staging-dir"])
        .arg(dir.join("run-staging"))
        .run()
}

const JOIN: &str = "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-0 --token=abc.def";
/// A join of the scenario's node `{name}`.
const JOIN_TEMPLATE: &str =
    "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={name} --token=abc.def";

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("keadm-batch-bundle")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// kit.json, checked: the right format and version, and exactly the files on disk, each
/// with its sha256 and size.
fn check_kit_manifest(kit: &Path) -> serde_json::Value {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(kit.join("kit.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "keadm-batch-kit/1");
    assert_eq!(manifest["keadmVersion"], VERSION);
    assert!(manifest["created"].as_str().unwrap().ends_with('Z'));
    let listed: Vec<String> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let path = f["path"].as_str().unwrap();
            let bytes = std::fs::read(kit.join(path)).unwrap();
            assert_eq!(
                f["sha256"].as_str().unwrap(),
                &sha256(&bytes)[7..],
                "{path}"
            );
            assert_eq!(f["size"].as_u64().unwrap(), bytes.len() as u64, "{path}");
            path.to_string()
        })
        .collect();
    let mut on_disk = files_under(kit);
    on_disk.retain(|f| f != "kit.json");
    assert_eq!(
        listed, on_disk,
        "kit.json lists exactly the kit's files, sorted"
    );
    manifest
}

/// A scratch directory with the one-node air-gapped config for `arch_group` and the kit
/// `bundle` wrote for it into `kit`, the sources it came from, and the kit's path.
fn bundled_kit(arch_group: &str) -> (tempfile::TempDir, Sources, PathBuf) {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config(tmp.path(), arch_group, JOIN);
    sources.bundle(tmp.path(), "kit", &[]).status(0);
    let kit = tmp.path().join("kit");
    (tmp, sources, kit)
}

/// How every refusal by the kit check ends.
const KIT_FIX: &str = "so it was not used. Copy the kit again from the machine that ran `keadm-batch batch bundle`, or run bundle again there.";

/// The image bytes a node's transcript says were sent: the `uploaded image-...` notes.
fn image_bytes_sent(transcript: &str) -> u64 {
    transcript
        .lines()
        .filter_map(|line| line.split_once("uploaded image-"))
        .map(|(_, rest)| {
            let bytes = rest
                .split_once(" (")
                .unwrap()
                .1
                .split_once(" bytes")
                .unwrap()
                .0;
            bytes.parse::<u64>().unwrap()
        })
        .sum()
}

/// The whole air-gapped story on real parts: `bundle` on the connected side, then the
/// offline run of the same config on a fresh fleet whose nodes each have a real
/// containerd that can reach no registry. keadm is staged for each node's arch, and both
/// images keadm's join asks the runtime for are in it, under those names, before keadm
/// runs; a rerun sends and imports nothing.
#[test]
fn bundle_writes_a_kit_that_an_offline_run_on_a_fresh_fleet_consumes() {
    let fleet = Fleet::builder()
        .nodes(2)
        .node_option(1, NodeOpt::Uname("aarch64"))
        .start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let sc = Scenario::new(&fleet)
        .arch_group("[amd64, arm64]")
        .cmd(&format!(
            "{JOIN_TEMPLATE} --remote-runtime-endpoint={ENDPOINT}"
        ))
        .keadm(keadm_listing_images());
    // The nodes' containerd asks for containerd 1.6's sandbox image, which the operator
    // reads on a node (`crictl info`) and names to the bundle.
    let sources = Sources::new(&sc.keadm.script(), false);
    sources
        .registry
        .push_index("pause", "3.6", Format::Docker, &["amd64", "arm64"]);
    // The air-gapped run's own config (downloads off, offlinePackageDir = the kit).
    std::fs::write(sc.path("config.yaml"), sc.config_text()).unwrap();

    let out = sources.bundle(
        sc.dir.path(),
        "packages",
        &["--sandbox-image", SANDBOX_IMAGE],
    );
    out.status(0)
        .stderr_has("amd64/images/installation-package_v1.23.1.tar")
        .stderr_has(&format!(
            "Wrote the air-gapped kit for keadm {VERSION} (amd64, arm64) to packages: 8 files"
        ))
        .stderr_has("(8 written, 0 already in place)")
        .stderr_has("keadm.offlinePackageDir: packages");
    let kit = sc.path("packages");
    assert_eq!(
        files_under(&kit),
        [
            "amd64/checksum_keadm-v1.23.1-linux-amd64.tar.gz.txt",
            "amd64/images/installation-package_v1.23.1.tar",
            "amd64/images/pause_3.6.tar",
            "amd64/keadm-v1.23.1-linux-amd64.tar.gz",
            "arm64/checksum_keadm-v1.23.1-linux-arm64.tar.gz.txt",
            "arm64/images/installation-package_v1.23.1.tar",
            "arm64/images/pause_3.6.tar",
            "arm64/keadm-v1.23.1-linux-arm64.tar.gz",
            "kit.json",
        ]
    );
    check_kit_manifest(&kit);
    let mut archive_bytes = Vec::new();
    for arch in ["amd64", "arm64"] {
        let package_file = kit.join(format!("{arch}/images/installation-package_v1.23.1.tar"));
        let package = check_archive(&package_file);
        assert_eq!(package.name, PACKAGE);
        assert_eq!(package.tag.as_deref(), Some(VERSION));
        assert_eq!(package.architecture, arch);
        assert_eq!(
            package.layer_file,
            format!("{INSTALLATION_PACKAGE} for {arch}\n")
        );
        assert_eq!(package.blobs, 3, "manifest, config, one layer");
        let pause_file = kit.join(format!("{arch}/images/pause_3.6.tar"));
        let pause = check_archive(&pause_file);
        assert_eq!(pause.name, SANDBOX_IMAGE);
        assert_eq!(pause.architecture, arch);
        assert_eq!(pause.layer_file, format!("pause for {arch}\n"));
        archive_bytes.push(
            std::fs::metadata(&package_file).unwrap().len()
                + std::fs::metadata(&pause_file).unwrap().len(),
        );
        // The checksum file is the release's: the tarball's sha512.
        let tarball =
            std::fs::read(kit.join(format!("{arch}/keadm-{VERSION}-linux-{arch}.tar.gz"))).unwrap();
        let checksum = std::fs::read_to_string(kit.join(format!(
            "{arch}/checksum_keadm-{VERSION}-linux-{arch}.tar.gz.txt"
        )))
        .unwrap();
        use sha2::Digest;
        assert_eq!(
            checksum,
            format!("{}\n", hex::encode(sha2::Sha512::digest(&tarball)))
        );
    }

    // The air-gapped run: the scenario finds `packages` present and uses it as it is.
    drop(sources);
    let run = sc.run(&[]);
    run.status(0);
    let mut first = Vec::new();
    for (i, arch) in [(0, "amd64"), (1, "arm64")] {
        let keadm = std::fs::read_to_string(remote_keadm(fleet.node(i))).unwrap();
        assert!(keadm.ends_with(&format!("# arch={arch}\n")), "{keadm}");
        runtimes[i].assert_has(&[PACKAGE, SANDBOX_IMAGE]);
        // They were there when keadm ran.
        let seen = images_seen_by_keadm(fleet.node(i));
        assert!(
            seen.contains(PACKAGE) && seen.contains(SANDBOX_IMAGE),
            "{seen}"
        );
        let transcript = run.transcript(i);
        for archive in ["installation-package_v1.23.1.tar", "pause_3.6.tar"] {
            assert!(
                transcript.contains(&format!("imported {archive} (image-")),
                "{transcript}"
            );
        }
        let node = run.node_summary(i);
        let images_sent = image_bytes_sent(&transcript);
        assert!(images_sent > 0, "{transcript}");
        assert!(
            node["bytes_uploaded"].as_u64().unwrap() > images_sent,
            "keadm and the images: {node}"
        );
        eprintln!(
            "first run, node {i} ({arch}): {images_sent} bytes sent for images (archives: {} bytes), {} bytes in all",
            archive_bytes[i], node["bytes_uploaded"]
        );
        first.push(runtimes[i].images());
    }

    // A rerun uploads and imports nothing.
    let again = sc.run(&[]);
    again.status(0);
    for (i, arch) in [(0, "amd64"), (1, "arm64")] {
        let node = again.node_summary(i);
        assert_eq!(node["bytes_uploaded"], 0, "node {i}: {node}");
        assert_eq!(
            node["uploads_skipped"], 3,
            "keadm and both archives: {node}"
        );
        let transcript = again.transcript(i);
        assert!(!transcript.contains(" into containerd ("), "{transcript}");
        assert_eq!(image_bytes_sent(&transcript), 0);
        assert_eq!(runtimes[i].images(), first[i]);
        eprintln!(
            "rerun, node {i} ({arch}): {} bytes sent, {} uploads skipped",
            node["bytes_uploaded"], node["uploads_skipped"]
        );
    }
}

#[test]
fn a_tampered_kit_file_is_refused_by_the_manifest_check_before_use() {
    let (tmp, sources, kit) = bundled_kit("[amd64]");
    let listed = check_kit_manifest(&kit);
    let tarball_rel = format!("amd64/keadm-{VERSION}-linux-amd64.tar.gz");
    let expected = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == tarball_rel.as_str())
        .unwrap()["sha256"]
        .as_str()
        .unwrap()
        .to_string();

    // Someone swaps the release for another one with a matching checksum file, which
    // the release's own checksum check cannot tell.
    let (swapped, path) = FakeRelease::new(VERSION, "amd64")
        .with_binary(b"#!/bin/sh\necho swapped\n")
        .write_offline(&kit, ChecksumFile::Matching);
    let actual = &sha256(&swapped.bytes)[7..];
    offline_run(tmp.path())
        .status(3)
        .stderr_has(&format!(
            "The kit file {} does not match the kit manifest {}: its sha256 is {actual} ({} bytes), but the manifest lists {expected} (",
            path.display(),
            kit.join("kit.json").display(),
            swapped.bytes.len()
        ))
        .stderr_has(KIT_FIX);
    assert!(
        !tmp.path()
            .join("run-staging/bin/amd64")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "nothing was unpacked"
    );

    // A file the kit does not list is refused too, by name.
    sources.bundle(tmp.path(), "kit", &[]).status(0);
    std::fs::write(
        kit.join("kit.json"),
        br#"{"format":"keadm-batch-kit/1","keadmVersion":"v1.23.1","created":"x","files":[]}"#,
    )
    .unwrap();
    offline_run(tmp.path()).status(3).stderr_has(&format!(
        "The kit file {} is not listed in the kit manifest",
        kit.join(&tarball_rel).display()
    ));
}

#[test]
fn a_tampered_image_archive_is_refused_by_the_manifest_check_before_any_node() {
    let (tmp, sources, kit) = bundled_kit("[amd64]");
    let archive = kit.join("amd64/images/pause_3.9.tar");
    // Someone swaps in another image under the same name: a well-formed archive that
    // names registry.k8s.io/pause:3.9, which the archive's own contents cannot tell.
    oci_archive(&archive, "registry.k8s.io/pause:3.9");
    offline_run(tmp.path())
        .status(3)
        .stderr_has(&format!(
            "The kit file {} does not match the kit manifest {}: its sha256 is ",
            archive.display(),
            kit.join("kit.json").display()
        ))
        .stderr_has(KIT_FIX);
    assert!(
        !tmp.path().join("batch_process_log.txt").exists(),
        "the run stopped before any node"
    );

    // An image archive the kit does not list is refused by name too.
    sources.bundle(tmp.path(), "kit", &[]).status(0);
    let extra = kit.join("amd64/images/extra.tar");
    oci_archive(&extra, "registry.k8s.io/pause:3.9");
    offline_run(tmp.path()).status(3).stderr_has(&format!(
        "The kit file {} is not listed in the kit manifest",
        extra.display()
    ));
}

#[test]
fn a_rerun_into_the_same_directory_changes_nothing_and_foreign_files_are_refused() {
    let (tmp, sources, kit) = bundled_kit("[amd64, arm64]");
    let manifest = std::fs::read(kit.join("kit.json")).unwrap();
    let mtimes = |kit: &Path| -> Vec<(String, std::time::SystemTime)> {
        files_under(kit)
            .into_iter()
            .map(|f| {
                let modified = std::fs::metadata(kit.join(&f)).unwrap().modified().unwrap();
                (f, modified)
            })
            .collect()
    };
    let before = mtimes(&kit);

    sources
        .bundle(tmp.path(), "kit", &[])
        .status(0)
        .stderr_has("(0 written, 8 already in place)")
        .stderr_lacks("  written");
    assert_eq!(std::fs::read(kit.join("kit.json")).unwrap(), manifest);
    assert_eq!(mtimes(&kit), before, "no file was rewritten");

    // A kit for fewer arches: arm64's files are the earlier kit's and go.
    offline_config(tmp.path(), "[amd64]", JOIN);
    sources
        .bundle(tmp.path(), "kit", &[])
        .status(0)
        .stderr_has("4 outdated file(s) removed");
    assert!(!kit.join("arm64").exists());
    check_kit_manifest(&kit);

    // A file no bundle wrote: refused by name, and left alone.
    std::fs::write(kit.join("amd64/images/mine.tar"), b"mine").unwrap();
    sources
        .bundle(tmp.path(), "kit", &[])
        .status(2)
        .stderr_has(
            "Refusing to write the kit into kit: it holds amd64/images/mine.tar, which no earlier `batch bundle` wrote",
        );
    assert!(kit.join("amd64/images/mine.tar").exists());
}

#[test]
fn a_missing_image_is_an_error_naming_the_image_and_the_registry() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", false);
    offline_config(tmp.path(), "[amd64]", JOIN);
    let out = sources.bundle(tmp.path(), "kit", &[]);
    out.status(3).stderr_has(&format!(
        "The registry {} (the mirror for registry.k8s.io) has no image registry.k8s.io/pause:3.9 (it answered 404 Not Found (MANIFEST_UNKNOWN)). Check the name and tag",
        sources.registry.url()
    ));
    // Manifests are resolved first: no release was downloaded, nothing is in the kit.
    assert_eq!(files_under(&tmp.path().join("kit")), Vec::<String>::new());
    assert_eq!(sources.releases.total_hits(), 0);

    // An image with no build for an archGroup arch: named with the arches it has. A
    // single-platform image tells its arch only in its config, which is fetched with the
    // manifests: nothing large was downloaded, and no file is reported that does not stay.
    sources
        .registry
        .push_image("pause", "3.9", "amd64", Format::Docker);
    offline_config(tmp.path(), "[amd64, arm64]", JOIN);
    sources
        .bundle(tmp.path(), "kit", &[])
        .status(3)
        .stderr_has("The image registry.k8s.io/pause:3.9 at ")
        .stderr_has("has no linux/arm64 build (it has only linux/amd64)")
        .stderr_lacks("written");
    assert_eq!(files_under(&tmp.path().join("kit")), Vec::<String>::new());
    assert_eq!(sources.releases.total_hits(), 0);
}

#[test]
fn the_join_flags_choose_the_installation_package_and_sandbox_images_can_be_named() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", false);
    // keadm asks for <--image-repository>/installation-package:<--kubeedge-version, v added>.
    sources
        .registry
        .push_image("edge/installation-package", "v1.22.0", "amd64", Format::Oci);
    sources
        .registry
        .push_image("pause", "3.6", "amd64", Format::Docker);
    offline_config(
        tmp.path(),
        "[amd64]",
        &format!("{JOIN} --image-repository=my-registry.example/edge --kubeedge-version=1.22.0"),
    );
    let out = sources.bundle(
        tmp.path(),
        "kit",
        &[
            "--registry-mirror",
            &format!("my-registry.example={}", sources.registry.url()),
            "--sandbox-image",
            "registry.k8s.io/pause:3.6",
        ],
    );
    out.status(0);
    let kit = tmp.path().join("kit");
    let package = check_archive(&kit.join("amd64/images/installation-package_v1.22.0.tar"));
    assert_eq!(
        package.name,
        "my-registry.example/edge/installation-package:v1.22.0"
    );
    let pause = check_archive(&kit.join("amd64/images/pause_3.6.tar"));
    assert_eq!(pause.name, "registry.k8s.io/pause:3.6");
    assert_eq!(pause.architecture, "amd64");
    check_kit_manifest(&kit);
}

#[test]
fn a_registry_that_wants_a_login_gets_the_one_in_the_docker_config() {
    let tmp = scratch();
    let releases = release_server("#!/bin/sh\n");
    let registry = LocalRegistry::start_with_login("puller", "s3cret");
    registry.push_index(INSTALLATION_PACKAGE, VERSION, Format::Oci, &["amd64"]);
    registry.push_index("pause", "3.9", Format::Oci, &["amd64"]);
    offline_config(tmp.path(), "[amd64]", JOIN);

    bundle_command(tmp.path(), "kit", &releases, &registry)
        .run()
        .status(3)
        .stderr_has(&format!(
            "The registry {} (the mirror for docker.io) wants credentials for the image docker.io/{INSTALLATION_PACKAGE}:{VERSION}, and {} (which does not exist) has none for it.",
            registry.url(),
            tmp.path().join(".docker/config.json").display()
        ));

    let docker = tmp.path().join("docker-config");
    std::fs::create_dir(&docker).unwrap();
    use base64::Engine;
    let write_login = |password: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("puller:{password}"));
        std::fs::write(
            docker.join("config.json"),
            format!(
                r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
                registry.host()
            ),
        )
        .unwrap();
    };
    write_login("wrong");
    bundle_command(tmp.path(), "kit", &releases, &registry)
        .env("DOCKER_CONFIG", &docker)
        .run()
        .status(3)
        .stderr_has("refused the image docker.io/kubeedge/installation-package:v1.23.1 (401 Unauthorized) with the credentials from");
    write_login("s3cret");
    bundle_command(tmp.path(), "kit", &releases, &registry)
        .env("DOCKER_CONFIG", &docker)
        .run()
        .status(0);
    check_archive(&tmp.path().join("kit/amd64/images/pause_3.9.tar"));
    check_kit_manifest(&tmp.path().join("kit"));
}

#[test]
fn a_registry_with_token_auth_gets_a_bearer_token_from_the_realm_it_names() {
    let tmp = scratch();
    let releases = release_server("#!/bin/sh\n");
    let tokens = HttpServer::start();
    let issuer = TokenIssuer::new();
    let repositories = [INSTALLATION_PACKAGE, "pause"];
    let registry = LocalRegistry::start_with_tokens(&tokens.url("/token"), &issuer, &repositories);
    registry.push_index(INSTALLATION_PACKAGE, VERSION, Format::Docker, &["amd64"]);
    registry.push_index("pause", "3.9", Format::Oci, &["amd64"]);
    // The token service answers the request the registry's challenge asks for: one pull
    // scope per repository, for this service.
    let mut token_paths = Vec::new();
    for repository in repositories {
        let url = reqwest::Url::parse_with_params(
            &tokens.url("/token"),
            &[
                ("scope", format!("repository:{repository}:pull")),
                ("service", TOKEN_SERVICE.to_string()),
            ],
        )
        .unwrap();
        let path = format!("{}?{}", url.path(), url.query().unwrap());
        let token = issuer.token(&[repository], &["pull"]);
        tokens.route(&path, Route::ok(format!(r#"{{"token": "{token}"}}"#)));
        token_paths.push(path);
    }
    offline_config(tmp.path(), "[amd64]", JOIN);
    bundle_command(tmp.path(), "kit", &releases, &registry)
        .run()
        .status(0);
    let pause = check_archive(&tmp.path().join("kit/amd64/images/pause_3.9.tar"));
    assert_eq!(pause.layer_file, "pause for amd64\n");
    check_kit_manifest(&tmp.path().join("kit"));
    for path in token_paths {
        assert_eq!(
            tokens.hits(&path),
            1,
            "one token per repository, reused for its manifests and blobs: {path}"
        );
    }
}

/// A plain-HTTP release URL given with --download-url is refused naming that flag, not
/// the config's keadm.download.url, which the operator did not set.
#[test]
fn a_plain_http_download_url_flag_is_named_in_the_refusal() {
    let tmp = scratch();
    offline_config(tmp.path(), "[amd64]", JOIN);
    Test::in_dir(tmp.path())
        .env("HOME", tmp.path())
        .args(["batch", "bundle", "-c", "config.yaml", "-o"])
        .arg(tmp.path().join("kit"))
        .args(["--download-url", "http://127.0.0.1:1/releases"])
        .run()
        .status(2)
        .stderr_has("--download-url http://127.0.0.1:1/releases is plain HTTP")
        .stderr_lacks("keadm.download.url http");
}

#[test]
fn registry_mirrors_over_plain_http_need_insecure_http() {
    let tmp = scratch();
    offline_config(tmp.path(), "[amd64]", JOIN);
    let pin = "ab".repeat(64);
    let config = std::fs::read_to_string(tmp.path().join("config.yaml"))
        .unwrap()
        .replace(
            "    enable: false\n",
            &format!("    enable: false\n    sha512:\n      amd64: {pin}\n"),
        );
    std::fs::write(tmp.path().join("config.yaml"), config).unwrap();
    let out: PathBuf = tmp.path().join("kit");
    Test::in_dir(tmp.path())
        .env("HOME", tmp.path())
        .args(["batch", "bundle", "-c", "config.yaml", "-o"])
        .arg(&out)
        .args([
            "--download-url",
            "http://127.0.0.1:1/releases",
            "--registry-mirror",
            "docker.io=http://127.0.0.1:1",
        ])
        .run()
        .status(2)
        .stderr_has("The registry mirror http://127.0.0.1:1 for docker.io is plain HTTP");
}

/// The connected machine has none of the site's secrets, and bundling needs none: the
/// variables a config names for the nodes' password and the join token may be unset.
/// Every other check stays, and a variable that decides which images the kit carries
/// must be set.
#[test]
fn bundling_needs_none_of_the_site_s_secrets() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    let config = |keadm_cmd: &str, password: &str| {
        format!(
            "keadm:\n  download:\n    enable: false\n  keadmVersion: {VERSION}\n  archGroup: [amd64]\n  offlinePackageDir: kit\nnodes:\n  - nodeName: edge-0\n    keadmCmd: '{keadm_cmd}'\n    ssh:\n      ip: 127.0.0.1\n      username: root\n      auth:\n        type: password\n        passwordAuth:\n{password}"
        )
    };
    let secret_token = "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-0 --token={{env \"KEADM_BATCH_TEST_UNSET\"}}";
    let from_env = "          passwordEnv: KEADM_BATCH_TEST_UNSET\n";
    let bundle = |keadm_cmd: &str, password: &str| {
        std::fs::write(tmp.path().join("config.yaml"), config(keadm_cmd, password)).unwrap();
        sources.bundle(tmp.path(), "kit", &[])
    };
    bundle(secret_token, from_env)
        .status(0)
        .stderr_lacks("KEADM_BATCH_TEST_UNSET")
        .stderr_has("Wrote the air-gapped kit");
    check_kit_manifest(&tmp.path().join("kit"));

    // Other checks stay: an empty password written in the file is still an error.
    bundle(secret_token, "          password: ''\n")
        .status(2)
        .stderr_has("ssh.auth.passwordAuth.password is empty");

    // A variable that chooses the images cannot be stood in for.
    let repository =
        format!("{secret_token} --image-repository={{{{env \"KEADM_BATCH_TEST_REPO\"}}}}");
    bundle(&repository, from_env)
        .status(2)
        .stderr_has("takes --image-repository from the environment variable KEADM_BATCH_TEST_REPO, which is not set");
}

/// The sandbox image is the site's setting: kit.json records it, a bundle into the same
/// kit without `--sandbox-image` keeps it (and says so), and a different flag replaces it
/// (and says so).
#[test]
fn a_kit_remembers_its_sandbox_image() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    sources
        .registry
        .push_index("pause", "3.6", Format::Docker, &["amd64"]);
    offline_config(tmp.path(), "[amd64]", JOIN);
    let kit = tmp.path().join("kit");
    let recorded = |kit: &Path| check_kit_manifest(kit)["sandboxImages"].clone();
    let pause = |kit: &Path| -> Vec<String> {
        files_under(&kit.join("amd64/images"))
            .into_iter()
            .filter(|f| f.starts_with("pause"))
            .collect()
    };

    sources
        .bundle(
            tmp.path(),
            "kit",
            &["--sandbox-image", "registry.k8s.io/pause:3.6"],
        )
        .status(0);
    assert_eq!(
        recorded(&kit),
        serde_json::json!(["registry.k8s.io/pause:3.6"])
    );
    assert_eq!(pause(&kit), ["pause_3.6.tar"]);

    sources
        .bundle(tmp.path(), "kit", &[])
        .status(0)
        .stderr_has("Keeping the sandbox image registry.k8s.io/pause:3.6 that kit/kit.json records")
        .stderr_has("(0 written, 4 already in place)");
    assert_eq!(
        recorded(&kit),
        serde_json::json!(["registry.k8s.io/pause:3.6"])
    );
    assert_eq!(pause(&kit), ["pause_3.6.tar"]);

    sources
        .bundle(tmp.path(), "kit", &["--sandbox-image", "registry.k8s.io/pause:3.9"])
        .status(0)
        .stderr_has("Replacing the sandbox image registry.k8s.io/pause:3.6 that kit/kit.json records with registry.k8s.io/pause:3.9 (--sandbox-image)");
    assert_eq!(
        recorded(&kit),
        serde_json::json!(["registry.k8s.io/pause:3.9"])
    );
    assert_eq!(pause(&kit), ["pause_3.9.tar"]);
}

/// The site's own images (`keadm.extraImages`, and `--image` for one bundle) are pulled
/// as keadm's are: for every archGroup arch, through the registry mirrors, each checked
/// for every arch before anything large is downloaded, one archive per image and arch,
/// each listed in kit.json; a rerun keeps them as it keeps the others.
#[test]
fn extra_images_are_bundled_for_every_arch_like_keadm_s_own() {
    const EDGEMESH: &str = "docker.io/kubeedge/edgemesh-agent:v1.15.0";
    const APP: &str = "registry.example:5000/site/app:1.2";
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    sources.registry.push_index(
        "kubeedge/edgemesh-agent",
        "v1.15.0",
        Format::Oci,
        &["amd64", "arm64"],
    );
    // The site's own image has an amd64 build only, at first.
    sources
        .registry
        .push_image("site/app", "1.2", "amd64", Format::Docker);
    offline_config_with(
        tmp.path(),
        "[amd64, arm64]",
        JOIN,
        &format!("  extraImages:\n    - {EDGEMESH}\n"),
    );
    let mirror = format!("registry.example:5000={}", sources.registry.url());
    let flags = ["--image", APP, "--registry-mirror", &mirror];
    let kit = tmp.path().join("kit");

    sources
        .bundle(tmp.path(), "kit", &flags)
        .status(3)
        .stderr_has(&format!("The image {APP} at "))
        .stderr_has("has no linux/arm64 build (it has only linux/amd64)")
        .stderr_lacks("written");
    assert_eq!(files_under(&kit), Vec::<String>::new());
    assert_eq!(
        sources.releases.total_hits(),
        0,
        "no release was downloaded"
    );

    sources
        .registry
        .push_index("site/app", "1.2", Format::Docker, &["amd64", "arm64"]);
    let out = sources.bundle(tmp.path(), "kit", &flags);
    out.status(0).stderr_has("(12 written, 0 already in place)");
    for arch in ["amd64", "arm64"] {
        out.stderr_has(&format!(
            "{arch}/images/edgemesh-agent_v1.15.0.tar  {EDGEMESH} for linux/{arch}"
        ))
        .stderr_has(&format!(
            "{arch}/images/app_1.2.tar  {APP} for linux/{arch}"
        ));
        for (file, name, repository) in [
            (
                "edgemesh-agent_v1.15.0.tar",
                EDGEMESH,
                "kubeedge/edgemesh-agent",
            ),
            ("app_1.2.tar", APP, "site/app"),
        ] {
            let archive = check_archive(&kit.join(format!("{arch}/images/{file}")));
            assert_eq!(archive.name, name);
            assert_eq!(archive.architecture, arch);
            assert_eq!(archive.layer_file, format!("{repository} for {arch}\n"));
        }
    }
    let manifest = check_kit_manifest(&kit);
    let listed: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .filter(|path| path.contains("/images/"))
        .collect();
    assert_eq!(
        listed,
        [
            "amd64/images/app_1.2.tar",
            "amd64/images/edgemesh-agent_v1.15.0.tar",
            "amd64/images/installation-package_v1.23.1.tar",
            "amd64/images/pause_3.9.tar",
            "arm64/images/app_1.2.tar",
            "arm64/images/edgemesh-agent_v1.15.0.tar",
            "arm64/images/installation-package_v1.23.1.tar",
            "arm64/images/pause_3.9.tar",
        ]
    );

    let before = std::fs::read(kit.join("kit.json")).unwrap();
    sources
        .bundle(tmp.path(), "kit", &flags)
        .status(0)
        .stderr_has("(0 written, 12 already in place)");
    assert_eq!(std::fs::read(kit.join("kit.json")).unwrap(), before);
}

/// An extra image that is no image reference is refused before anything is fetched: in
/// the config at its line and column, and from `--image` by the flag's name (exit 2).
#[test]
fn an_invalid_extra_image_is_refused_at_its_line_before_anything_is_fetched() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config_with(
        tmp.path(),
        "[amd64]",
        JOIN,
        "  extraImages:\n    - docker.io/kubeedge/edgemesh-agent:v1.15.0\n    - kubeedge/EdgeMesh-agent:v1.15.0\n",
    );
    sources
        .bundle(tmp.path(), "kit", &[])
        .status(2)
        .stderr_has(
            "config.yaml:9:7: keadm.extraImages lists `kubeedge/EdgeMesh-agent:v1.15.0`, which is not an image reference: the repository \"kubeedge/EdgeMesh-agent\" in \"kubeedge/EdgeMesh-agent:v1.15.0\" is not a valid name",
        );

    offline_config(tmp.path(), "[amd64]", JOIN);
    sources
        .bundle(tmp.path(), "kit", &["--image", "site/app:1.2+3"])
        .status(2)
        .stderr_has(
            "The image \"site/app:1.2+3\" is not a valid image reference: the tag \"1.2+3\"",
        )
        .stderr_has("Fix the image reference in --image.");
    assert_eq!(sources.releases.total_hits(), 0);
    assert!(!tmp.path().join("kit").exists());
}

/// A bundle that fails after it placed files reports none of them: the files it wrote
/// are removed again, and only what stays is ever reported as written.
#[test]
fn a_bundle_that_fails_midway_reports_no_file_as_written() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", false);
    // pause comes from a mirror that has its manifest and config, but not its layer.
    let mirror = HttpServer::start();
    let pause = TestImage::marked("pause", "amd64", Format::Docker);
    mirror.route("/v2/pause/manifests/3.9", Route::ok(pause.manifest.clone()));
    mirror.route(
        &format!("/v2/pause/blobs/{}", sha256(&pause.config)),
        Route::ok(pause.config.clone()),
    );
    offline_config(tmp.path(), "[amd64]", JOIN);
    let registry = sources.registry.url();
    bundle_via(
        tmp.path(),
        "kit",
        &sources.releases,
        &registry,
        &mirror.base_url(),
    )
    .run()
    .status(3)
    .stderr_has("its layer 1 for linux/amd64 is missing from the registry (404 Not Found)")
    .stderr_lacks("written");
    assert!(sources.releases.total_hits() > 0, "the release was fetched");
    assert_eq!(files_under(&tmp.path().join("kit")), Vec::<String>::new());
}

/// A layer that takes seconds to arrive is not pulled in silence: progress lines on
/// stderr (which is no terminal here) say how far it is, and -q keeps them quiet.
#[test]
fn a_slow_layer_pull_shows_progress_unless_quiet() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", false);
    // A 1 MiB layer of noise (gzip cannot shrink it), sent in 4 s.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..1 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let pause = TestImage::new(noise, "amd64", serde_json::json!({}), Format::Docker);
    let mirror = HttpServer::start();
    mirror.route("/v2/pause/manifests/3.9", Route::ok(pause.manifest.clone()));
    mirror.route(
        &format!("/v2/pause/blobs/{}", sha256(&pause.config)),
        Route::ok(pause.config.clone()),
    );
    mirror.route(
        &format!("/v2/pause/blobs/{}", sha256(&pause.layer)),
        Route::ok(pause.layer.clone()).paced(64 << 10, std::time::Duration::from_millis(250)),
    );
    offline_config(tmp.path(), "[amd64]", JOIN);
    let registry = sources.registry.url();
    let bundle = |out: &str, extra: &[&str]| {
        bundle_via(
            tmp.path(),
            out,
            &sources.releases,
            &registry,
            &mirror.base_url(),
        )
        .args(extra)
        .run()
    };
    let out = bundle("kit", &[]);
    out.status(0)
        .stderr_has("registry.k8s.io/pause:3.9 layer 1 for linux/amd64  ")
        .stderr_has("/1.0 MiB  ");
    let lines = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("registry.k8s.io/pause:3.9 layer 1"))
        .count();
    assert!(
        lines >= 2,
        "a line on the way and the last one:\n{}",
        out.stderr
    );
    bundle("quiet", &["-q"])
        .status(0)
        .stderr_lacks("layer 1 for linux/amd64");
}

/// [`bundled_kit`] for amd64, with the kit's archive `kit.tar` beside it, and kit.json's
/// sha256.
fn archived_kit() -> (tempfile::TempDir, PathBuf, String) {
    let (tmp, sources, kit) = bundled_kit("[amd64]");
    sources
        .bundle(tmp.path(), "kit", &["--archive", "kit.tar"])
        .status(0);
    let manifest_sha256 = sha256_of(&kit.join("kit.json"));
    (tmp, kit, manifest_sha256)
}

/// The hex sha256 of the file at `path`.
fn sha256_of(path: &Path) -> String {
    sha256(&std::fs::read(path).unwrap())[7..].to_string()
}

/// Flips one byte in the middle of `member`'s data inside the tar file `archive`; returns
/// the byte's offset in the archive.
fn flip_byte_inside(archive: &Path, member: &str) -> u64 {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let (start, size) = tar
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.path().unwrap().to_str() == Some(member))
        .map(|e| (e.raw_file_position(), e.size()))
        .unwrap_or_else(|| panic!("{} holds no {member}", archive.display()));
    let at = start + size / 2;
    let mut bytes = std::fs::read(archive).unwrap();
    bytes[at as usize] ^= 0x20;
    std::fs::write(archive, bytes).unwrap();
    at
}

/// `--archive FILE.tar` writes the kit as one plain tar with its sha512 beside it, in the
/// bare-hex form of KubeEdge's checksum files: every kit file and kit.json, sorted,
/// regular files only, relative paths, fixed times, owners and modes, so the same kit
/// gives the same bytes. Without `-o` the kit goes only into the archive.
#[test]
fn an_archive_holds_the_kit_byte_for_byte_the_same_with_its_sha512_beside_it() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config(tmp.path(), "[amd64, arm64]", JOIN);
    let out = sources.bundle(tmp.path(), "kit", &["--archive", "kit.tar"]);
    out.status(0);
    let kit = tmp.path().join("kit");
    check_kit_manifest(&kit);
    let manifest_sha256 = sha256_of(&kit.join("kit.json"));
    out.stderr_has(&format!("kit.json sha256: {manifest_sha256}"))
        .stderr_has("kit.tar.sha512")
        .stderr_has("--verify kit.tar");

    // The sidecar is the digest and a newline, and sha512sum agrees with it.
    let archive = tmp.path().join("kit.tar");
    let sidecar = std::fs::read_to_string(tmp.path().join("kit.tar.sha512")).unwrap();
    let sum = std::process::Command::new("sha512sum")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(sum.status.success(), "{sum:?}");
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert_eq!(
        sidecar,
        format!("{}\n", sum.split_whitespace().next().unwrap())
    );

    let mut names = Vec::new();
    let mut tar = tar::Archive::new(std::fs::File::open(&archive).unwrap());
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header();
        assert_eq!(header.entry_type(), tar::EntryType::Regular);
        assert_eq!(
            (
                header.mtime().unwrap(),
                header.uid().unwrap(),
                header.gid().unwrap()
            ),
            (0, 0, 0)
        );
        assert_eq!(header.mode().unwrap(), 0o644);
        let name = entry.path().unwrap().to_str().unwrap().to_string();
        assert!(!name.starts_with('/') && !name.split('/').any(|p| p == ".."));
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        assert_eq!(bytes, std::fs::read(kit.join(&name)).unwrap(), "{name}");
        names.push(name);
    }
    assert_eq!(names, files_under(&kit), "every kit file, sorted");

    // The same kit again: the same bytes.
    sources
        .bundle(tmp.path(), "kit", &["--archive", "again.tar"])
        .status(0);
    assert!(
        std::fs::read(&archive).unwrap() == std::fs::read(tmp.path().join("again.tar")).unwrap(),
        "two archives of one kit differ"
    );

    // Without -o: only the archive and its sha512, no directory left beside them.
    let alone = scratch();
    offline_config(alone.path(), "[amd64]", JOIN);
    let registry = sources.registry.url();
    fetching(alone.path(), &sources.releases, &registry, &registry)
        .args(["--archive", "site.tar"])
        .run()
        .status(0)
        .stderr_has("site.tar");
    let mut left: Vec<String> = std::fs::read_dir(alone.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "bundle-staging")
        .collect();
    left.sort();
    assert_eq!(left, ["config.yaml", "site.tar", "site.tar.sha512"]);
}

/// At the site, `--verify` checks a copied kit, the directory or the archive, with no
/// config and no node: every file against kit.json as the run checks it, and the
/// archive against its sha512 first; it prints kit.json's sha256, which `bundle` printed
/// on the connected machine. What is wrong is named with the run's own messages (exit 3).
#[test]
fn verify_checks_a_copied_kit_or_its_archive_without_a_config() {
    let (tmp, kit, manifest_sha256) = archived_kit();

    // The site: a copy of both, and no config.
    let site = scratch();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .args([
            &kit,
            &tmp.path().join("kit.tar"),
            &tmp.path().join("kit.tar.sha512"),
        ])
        .arg(site.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let verify = |what: &str| {
        Test::in_dir(site.path())
            .env("HOME", site.path())
            .args(["batch", "bundle", "--verify", what])
            .run()
    };
    let sum_line = format!("kit.json sha256: {manifest_sha256}");
    verify("kit").status(0).stdout_has(&sum_line);
    verify("kit.tar")
        .status(0)
        .stdout_has(&sum_line)
        .stdout_has("kit.tar.sha512");

    // A file damaged in the directory, and one the kit does not list.
    let pause = site.path().join("kit/amd64/images/pause_3.9.tar");
    let mut bytes = std::fs::read(&pause).unwrap();
    bytes.push(b'\n');
    std::fs::write(&pause, bytes).unwrap();
    std::fs::write(site.path().join("kit/amd64/images/extra.tar"), b"x").unwrap();
    verify("kit")
        .status(3)
        .stderr_has(
            "The kit file kit/amd64/images/pause_3.9.tar does not match the kit manifest kit/kit.json: its sha256 is ",
        )
        .stderr_has(KIT_FIX)
        .stderr_has("The kit file kit/amd64/images/extra.tar is not listed in the kit manifest kit/kit.json");

    // A flipped byte in the archive: its sha512, and the kit file the byte is in.
    flip_byte_inside(
        &site.path().join("kit.tar"),
        "amd64/images/installation-package_v1.23.1.tar",
    );
    verify("kit.tar")
        .status(3)
        .stderr_has("The sha512 of the kit archive kit.tar is ")
        .stderr_has("but kit.tar.sha512 gives ")
        .stderr_has("amd64/images/installation-package_v1.23.1.tar");

    // Without its sha512 the archive cannot be verified.
    std::fs::remove_file(site.path().join("kit.tar.sha512")).unwrap();
    verify("kit.tar").status(3).stderr_has("kit.tar.sha512");
}

/// `--extract FILE.tar -o DIR` checks the archive, unpacks it into a new directory and
/// checks that, after which an offline dry run with offlinePackageDir: DIR passes; it
/// never extracts over a directory that holds anything, nor leaves anything behind from
/// an archive that fails its check.
#[test]
fn extract_unpacks_a_checked_archive_that_an_offline_dry_run_then_uses() {
    let (tmp, kit, manifest_sha256) = archived_kit();
    let site = scratch();
    for name in ["kit.tar", "kit.tar.sha512"] {
        std::fs::copy(tmp.path().join(name), site.path().join(name)).unwrap();
    }
    let extract = |into: &str| {
        Test::in_dir(site.path())
            .env("HOME", site.path())
            .args(["batch", "bundle", "--extract", "kit.tar", "-o", into])
            .run()
    };
    extract("kit")
        .status(0)
        .stderr_has(&format!("kit.json sha256: {manifest_sha256}"))
        .stderr_has("keadm.offlinePackageDir: kit");
    let extracted = site.path().join("kit");
    assert_eq!(files_under(&extracted), files_under(&kit));
    for file in files_under(&kit) {
        assert!(
            std::fs::read(kit.join(&file)).unwrap()
                == std::fs::read(extracted.join(&file)).unwrap(),
            "{file}"
        );
    }

    // The offline run's dry run takes the extracted kit as it is.
    offline_config(site.path(), "[amd64]", JOIN);
    Test::in_dir(site.path())
        .env("HOME", site.path())
        .args(["batch", "-c", "config.yaml", "--dry-run", "--staging-dir"])
        .arg(site.path().join("run-staging"))
        .run()
        .status(0)
        .stdout_has("pause_3.9.tar");

    // Not over a directory that holds anything.
    let before = files_under(&extracted);
    extract("kit")
        .status(2)
        .stderr_has("Refusing to extract the kit archive kit.tar into kit: ");
    assert_eq!(files_under(&extracted), before);

    // An archive that fails its check leaves nothing.
    flip_byte_inside(&site.path().join("kit.tar"), "kit.json");
    extract("other")
        .status(3)
        .stderr_has("The sha512 of the kit archive kit.tar is ");
    let mut left: Vec<String> = std::fs::read_dir(site.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["config.yaml", "kit", "kit.tar", "kit.tar.sha512"]);
}

/// The sha512 of the file at `path`, hex.
fn sha512_of(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha512::digest(std::fs::read(path).unwrap()))
}

/// The tar `archive` written again to `to` with every entry's mtime changed: the same
/// kit, whole, in other bytes, as anyone who can replace an archive can make one; its
/// sha512 file written beside it to match.
fn forge_with_its_sidecar(archive: &Path, to: &Path) {
    let mut source = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let mut forged = tar::Builder::new(std::fs::File::create(to).unwrap());
    for entry in source.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut header = entry.header().clone();
        header.set_mtime(1);
        header.set_cksum();
        let path = entry.path().unwrap().into_owned();
        forged.append_data(&mut header, path, &mut entry).unwrap();
    }
    forged.into_inner().unwrap();
    let mut sidecar = to.as_os_str().to_owned();
    sidecar.push(".sha512");
    std::fs::write(sidecar, format!("{}\n", sha512_of(to))).unwrap();
}

/// The `.tar.sha512` beside a kit archive checks integrity, not origin: an archive
/// replaced together with its sha512 file passes `--verify` alone. `--expect-sha512 HEX`
/// pins the digest the operator was given out of band, for `--verify` and `--extract`
/// (the sha512 file then is not needed): the right one passes, any other is refused (exit
/// 3) with both digests and nothing extracted, and a HEX that is no sha512 is a usage
/// error (exit 2).
#[test]
fn expect_sha512_pins_the_kit_archive_s_digest_for_verify_and_extract() {
    let (tmp, _kit, manifest_sha256) = archived_kit();
    let original = tmp.path().join("kit.tar");
    let pinned = sha512_of(&original);
    let site = scratch();
    // The site got the archive alone; its digest came another way.
    std::fs::copy(&original, site.path().join("kit.tar")).unwrap();
    let bundle = |args: &[&str]| {
        Test::in_dir(site.path())
            .env("HOME", site.path())
            .args(["batch", "bundle"])
            .args(args)
            .run()
    };
    let sum_line = format!("kit.json sha256: {manifest_sha256}");
    bundle(&["--verify", "kit.tar", "--expect-sha512", &pinned])
        .status(0)
        .stdout_has(&sum_line)
        .stdout_has("--expect-sha512");
    bundle(&[
        "--extract",
        "kit.tar",
        "-o",
        "kit",
        "--expect-sha512",
        &pinned.to_uppercase(),
    ])
    .status(0)
    .stderr_has(&sum_line);
    assert!(site.path().join("kit/kit.json").is_file());

    // Replaced with its sha512 file: whole, so --verify alone cannot tell.
    forge_with_its_sidecar(&original, &site.path().join("forged.tar"));
    let forged = sha512_of(&site.path().join("forged.tar"));
    assert_ne!(forged, pinned);
    bundle(&["--verify", "forged.tar"]).status(0);
    let refusal = format!(
        "The sha512 of the kit archive forged.tar is {forged}, but --expect-sha512 gives {pinned}"
    );
    bundle(&["--verify", "forged.tar", "--expect-sha512", &pinned])
        .status(3)
        .stderr_has(&refusal);
    bundle(&[
        "--extract",
        "forged.tar",
        "-o",
        "other",
        "--expect-sha512",
        &pinned,
    ])
    .status(3)
    .stderr_has(&refusal)
    .stderr_has("nothing was extracted");
    let mut left: Vec<String> = std::fs::read_dir(site.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["forged.tar", "forged.tar.sha512", "kit", "kit.tar"],
        "nothing extracted"
    );

    // Not a sha512, or no archive to pin: usage errors.
    for bad in ["abc", &format!("{}x", &pinned[1..]), &format!("{pinned}00")] {
        bundle(&["--verify", "kit.tar", "--expect-sha512", bad])
            .status(2)
            .stderr_has("is not a sha512 digest (128 hex characters)");
    }
    bundle(&["--verify", "kit", "--expect-sha512", &pinned])
        .status(2)
        .stderr_has("--expect-sha512 pins a kit archive's sha512, and kit is a directory");
}

/// `--output json`: what the bundle wrote, as one JSON document on stdout (the console's
/// lines stay on stderr): each keadm release and image archive with its arch, file, size
/// and sha256, the images each archive holds, and kit.json's path and sha256.
#[test]
fn bundle_output_json_lists_the_releases_the_image_archives_and_kit_json() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config(tmp.path(), "[amd64, arm64]", JOIN);
    let out = sources.bundle(tmp.path(), "kit", &["--output", "json"]);
    out.status(0)
        .stderr_has("amd64/images/pause_3.9.tar  registry.k8s.io/pause:3.9 for linux/amd64")
        .stderr_has("Wrote the air-gapped kit");
    eprintln!("bundle --output json:\n{}", out.stdout);
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.stdout));
    let kit = tmp.path().join("kit");
    assert_eq!(json["version"], 1);
    assert_eq!(json["kit"], "kit");
    assert_eq!(json["keadm_version"], VERSION);
    assert_eq!(json["arches"], serde_json::json!(["amd64", "arm64"]));
    assert_eq!(
        json["sandbox_images"],
        serde_json::json!(["registry.k8s.io/pause:3.9"])
    );
    let manifest = std::fs::read(kit.join("kit.json")).unwrap();
    assert_eq!(json["kit_json"]["path"], "kit/kit.json");
    assert_eq!(json["kit_json"]["sha256"], &sha256(&manifest)[7..]);
    // Each file as it is on disk.
    let on_disk = |entry: &serde_json::Value| {
        let file = entry["file"].as_str().unwrap();
        let bytes = std::fs::read(kit.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(entry["size"], bytes.len() as u64, "{file}");
        assert_eq!(entry["sha256"], &sha256(&bytes)[7..], "{file}");
        assert_eq!(entry["written"], true, "{file}");
        (
            entry["arch"].as_str().unwrap().to_string(),
            file.to_string(),
        )
    };
    let releases: Vec<(String, String)> = json["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|release| {
            let arch = release["arch"].as_str().unwrap();
            assert_eq!(
                release["checksum_file"],
                format!("{arch}/checksum_keadm-{VERSION}-linux-{arch}.tar.gz.txt").as_str()
            );
            on_disk(release)
        })
        .collect();
    assert_eq!(
        releases,
        ["amd64", "arm64"].map(|arch| (
            arch.to_string(),
            format!("{arch}/keadm-{VERSION}-linux-{arch}.tar.gz")
        ))
    );
    let archives: Vec<(String, String, serde_json::Value)> = json["image_archives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|archive| {
            let (arch, file) = on_disk(archive);
            (arch, file, archive["images"].clone())
        })
        .collect();
    let mut expected = Vec::new();
    for arch in ["amd64", "arm64"] {
        expected.push((
            arch.to_string(),
            format!("{arch}/images/installation-package_{VERSION}.tar"),
            serde_json::json!([PACKAGE]),
        ));
        expected.push((
            arch.to_string(),
            format!("{arch}/images/pause_3.9.tar"),
            serde_json::json!(["registry.k8s.io/pause:3.9"]),
        ));
    }
    assert_eq!(archives, expected);
    crate::docs::documented_fields("docs/summary.md", "bundle-json", &json);

    // A rerun writes nothing and says so, file by file.
    let again = sources.bundle(tmp.path(), "kit", &["--output", "json"]);
    again.status(0);
    let json: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    for list in ["releases", "image_archives"] {
        for entry in json[list].as_array().unwrap() {
            assert_eq!(entry["written"], false, "{entry}");
        }
    }
    assert_eq!(json["kit_json"]["sha256"], &sha256(&manifest)[7..]);
}

/// The kit directory is `--into DIR` or `-o DIR`; `--output DIR`, its old spelling, still
/// writes the kit, with a warning that names `--into`. `--output json` is the format,
/// never a directory called json.
#[test]
fn the_kit_directory_is_into_or_o_and_the_old_output_spelling_warns() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config(tmp.path(), "[amd64]", JOIN);
    for (flag, dir) in [("--into", "a"), ("-o", "b"), ("--output", "c")] {
        let out = sources.bundle_spelt(tmp.path(), &[flag, dir]);
        out.status(0).stderr_has(&format!(
            "Wrote the air-gapped kit for keadm {VERSION} (amd64) to {dir}: 4 files"
        ));
        assert_eq!(out.stdout, "", "{flag}: text goes to stderr only");
        check_kit_manifest(&tmp.path().join(dir));
        let warning = format!(
            "keadm-batch: warning: --output {dir} names the kit directory, an old spelling that still works: write --into {dir} (or -o {dir})."
        );
        if flag == "--output" {
            out.stderr_has(&warning);
        } else {
            out.stderr_lacks("old spelling");
        }
    }
    let out = sources.bundle_spelt(tmp.path(), &["--output", "json", "--into", "d"]);
    out.status(0).stderr_lacks("old spelling");
    serde_json::from_str::<serde_json::Value>(&out.stdout).expect("--output json is the format");
    check_kit_manifest(&tmp.path().join("d"));
    assert!(!tmp.path().join("json").exists());
}

/// `--output json` with `--archive`: the archive with its size, its sha512 and the file
/// that holds it, beside the kit directory or alone (then no kit directory: kit.json is
/// only in the archive, and its sha256 is the one the site's `--extract` prints). The
/// directory `--extract` unpacks into is `--into DIR` as well, `--output DIR` its old
/// spelling with the warning.
#[test]
fn bundle_output_json_names_the_archive_and_its_sha512_file() {
    let tmp = scratch();
    let sources = Sources::new("#!/bin/sh\n", true);
    offline_config(tmp.path(), "[amd64]", JOIN);
    let out = sources.bundle(
        tmp.path(),
        "kit",
        &["--archive", "kit.tar", "--output", "json"],
    );
    out.status(0)
        .stderr_has("Wrote it as one file too: kit.tar (");
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.stdout));
    let manifest_sha256 = sha256_of(&tmp.path().join("kit/kit.json"));
    out.stderr_has(&format!("kit.json sha256: {manifest_sha256}"));
    assert_eq!(json["kit"], "kit");
    assert_eq!(
        json["kit_json"],
        serde_json::json!({"path": "kit/kit.json", "sha256": manifest_sha256})
    );
    let archived = |tar: &str| {
        let sidecar = std::fs::read_to_string(tmp.path().join(format!("{tar}.sha512"))).unwrap();
        serde_json::json!({
            "path": tar,
            "size": std::fs::metadata(tmp.path().join(tar)).unwrap().len(),
            "sha512": sidecar.trim_end(),
            "sha512_file": format!("{tar}.sha512"),
        })
    };
    assert_eq!(json["archive"], archived("kit.tar"));
    crate::docs::documented_fields("docs/summary.md", "bundle-json", &json);

    // The archive alone.
    let out = sources.bundle_spelt(
        tmp.path(),
        &["--archive", "alone/site.tar", "--output", "json"],
    );
    out.status(0)
        .stderr_has("Wrote the air-gapped kit for keadm ")
        .stderr_has(" as alone/site.tar: 4 files, ")
        .stderr_has("Its sha512 is in alone/site.tar.sha512.");
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.stdout));
    assert_eq!(json["kit"], serde_json::Value::Null);
    assert_eq!(json["kit_json"]["path"], serde_json::Value::Null);
    assert_eq!(json["archive"], archived("alone/site.tar"));
    for list in ["releases", "image_archives"] {
        assert!(!json[list].as_array().unwrap().is_empty(), "{list}");
    }
    let sha256 = json["kit_json"]["sha256"].as_str().unwrap().to_string();
    let extract = |into: &[&str]| {
        Test::in_dir(tmp.path())
            .env("HOME", tmp.path())
            .args(["batch", "bundle", "--extract", "alone/site.tar"])
            .args(into)
            .run()
    };
    extract(&["--into", "site"])
        .status(0)
        .stderr_has(&format!("kit.json sha256: {sha256}"))
        .stderr_lacks("old spelling");
    assert_eq!(sha256_of(&tmp.path().join("site/kit.json")), sha256);
    extract(&["--output", "old-site"])
        .status(0)
        .stderr_has(
            "keadm-batch: warning: --output old-site names the kit directory, an old spelling that still works: write --into old-site (or -o old-site).",
        );
    check_kit_manifest(&tmp.path().join("old-site"));
    extract(&[])
        .status(2)
        .stderr_has("the directory to unpack into is required");
}
