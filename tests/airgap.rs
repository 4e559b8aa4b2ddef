//! Air-gapped joins on real parts: each node has a real containerd of its own (Debian's
//! package, tests/common/containerd.rs, with no way to reach a registry), and the image
//! archives are written by the tests (tests/common/image_archive.rs): keadm's
//! installation-package as `docker save` writes it, the sandbox image as `ctr export`
//! does. keadm itself is the fake script; it records which images the runtime held when
//! it ran.

use std::fs;

use crate::common::cloudcore::{now, token};
use crate::common::containerd::{
    Containerd, ENDPOINT, SANDBOX_IMAGE, images_seen_by_keadm, keadm_listing_images,
};
use crate::common::fake_keadm;
use crate::common::fleet::{Fleet, NodeOpt, Sudo, TEST_USER_PASSWORD};
use crate::common::image_archive::{
    archives_left, docker_archive, host_arch, oci_archive, tar_of, upload_name,
};
use crate::common::scenario::{Login, Scenario, remote_keadm};
use crate::relay::no_node_serves;

/// What keadm join v1.23.1 asks the runtime for, as containerd names it.
const PACKAGE: &str = "docker.io/kubeedge/installation-package:v1.23.1";

/// An OCI layout whose one manifest carries a bare tag: `ctr` would import it under a
/// made-up name that keadm never asks for.
const UNNAMED_INDEX: &[u8] = br#"{"schemaVersion":2,"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"v1.23.1"}}]}"#;

/// A join of `{name}` through the node's own containerd.
fn join() -> String {
    format!(
        "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={{name}} --token=abc.def --remote-runtime-endpoint={ENDPOINT}"
    )
}

/// A join of `{name}` through the runtime at `endpoint` that pre-flight can check: its
/// token is well-formed and valid for a day, and its cloudcore's ports answer the node's
/// connect and close it at once (`closing_port`), so the checks before the run ask nothing.
fn checked_join(endpoint: &str) -> String {
    let token = token(
        "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07",
        now() + 86_400,
    );
    format!(
        "join --cloudcore-ipport=127.0.0.1:{port} --certport={port} --edgenode-name={{name}} --token={token} --remote-runtime-endpoint={endpoint}",
        port = crate::common::fleet::closing_port()
    )
}

/// Writes both images a join needs into `dir` and returns their sizes: the
/// installation-package as `docker save` writes it (its layer uncompressed), the sandbox
/// image as `ctr export` does (its layer gzip-compressed).
fn write_images(dir: &std::path::Path) -> (u64, u64) {
    docker_archive(
        &dir.join("installation-package_v1.23.1.tar"),
        "kubeedge/installation-package:v1.23.1",
    );
    oci_archive(&dir.join("pause_3.6.tar"), SANDBOX_IMAGE);
    let size = |f: &str| fs::metadata(dir.join(f)).unwrap().len();
    (
        size("installation-package_v1.23.1.tar"),
        size("pause_3.6.tar"),
    )
}

#[test]
fn images_are_imported_before_keadm_runs_and_a_rerun_sends_and_imports_nothing() {
    let fleet = Fleet::builder().nodes(2).start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .keadm(keadm_listing_images());
    let (docker_bytes, oci_bytes) = write_images(&sc.images_dir());
    let image_bytes = docker_bytes + oci_bytes;

    let out = sc.run(&[]);
    out.status(0);
    for (i, runtime) in runtimes.iter().enumerate() {
        runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
        // keadm ran after the import.
        let seen = images_seen_by_keadm(fleet.node(i));
        assert!(
            seen.contains(PACKAGE) && seen.contains(SANDBOX_IMAGE),
            "{seen}"
        );
        let node = out.node_summary(i);
        let sent = node["bytes_uploaded"].as_u64().unwrap();
        // The docker-archive goes gzip-compressed (busybox shrinks to about half), the
        // OCI archive, whose layer is gzip already, as it is; keadm is a small script.
        assert!(
            sent > oci_bytes + docker_bytes / 3 && sent < oci_bytes + docker_bytes * 3 / 4,
            "node {i}: {sent} bytes sent for {docker_bytes} + {oci_bytes} bytes of images"
        );
        assert_eq!(node["uploads_skipped"], 0);
        let transcript = out.transcript(i);
        let (package, pause) = (
            upload_name(&sc.images_dir().join("installation-package_v1.23.1.tar")),
            upload_name(&sc.images_dir().join("pause_3.6.tar")),
        );
        assert!(
            transcript.contains(&format!("sent {package} gzip-compressed"))
                && transcript.contains(&format!("uploaded {pause} ("))
                && !transcript.contains(&format!("sent {pause} gzip-compressed")),
            "{transcript}"
        );
        assert!(
            transcript.contains(&format!(
                "imported installation-package_v1.23.1.tar ({package}) into containerd (/tmp/containerd/containerd.sock): {PACKAGE}"
            )),
            "{transcript}"
        );
        assert!(
            transcript.contains("unpacking"),
            "ctr's own words: {transcript}"
        );
        // Imported and listed by the runtime: the archives are gone, keadm stays.
        assert_eq!(
            archives_left(fleet.node(i)),
            Vec::<String>::new(),
            "node {i}"
        );
        assert!(remote_keadm(fleet.node(i)).is_file(), "node {i}");
        assert!(
            transcript.contains("removed the image archives from /tmp/kubeedge/keadm (2 files, ")
                && transcript.contains("): their images are in containerd"),
            "{transcript}"
        );
        eprintln!(
            "first run, node {i}: {sent} bytes sent (image archives: {docker_bytes} docker-archive + {oci_bytes} OCI = {image_bytes} bytes)"
        );
    }
    let before: Vec<Vec<String>> = runtimes.iter().map(Containerd::images).collect();

    let again = sc.run(&[]);
    again.status(0);
    for (i, runtime) in runtimes.iter().enumerate() {
        let node = again.node_summary(i);
        assert_eq!(node["bytes_uploaded"], 0, "node {i}: {node}");
        // keadm, and both archives, whose images the runtime lists.
        assert_eq!(node["uploads_skipped"], 3, "node {i}: {node}");
        let transcript = again.transcript(i);
        assert!(
            transcript.contains(&format!("already has {PACKAGE}, so the image archive"))
                && transcript.contains("neither uploaded nor imported"),
            "{transcript}"
        );
        assert!(!transcript.contains(" into containerd ("), "{transcript}");
        assert!(!transcript.contains("unpacking"), "{transcript}");
        assert_eq!(runtime.images(), before[i]);
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 2);
        eprintln!(
            "rerun, node {i}: {} bytes sent, {} uploads skipped",
            node["bytes_uploaded"], node["uploads_skipped"]
        );
    }
}

/// The node checks each archive's sha256 before it is moved into place: on a node whose
/// only hash tool reports another digest (as it would for bytes damaged on the way or on
/// its disk), the archive is removed, nothing is imported, keadm does not run, and the
/// node fails alone on one line with both digests; the other node joins.
#[test]
fn an_archive_that_does_not_hash_to_what_was_sent_is_not_imported() {
    let fleet = Fleet::builder().nodes(2).start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let zeros = "0".repeat(64);
    let lying = fleet.node(0).tmp_path("lying-sha256sum");
    fs::write(
        &lying,
        format!("#!/bin/sh\ncat > /dev/null\necho '{zeros}  -'\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&lying, fs::Permissions::from_mode(0o755)).unwrap();
    let tools = fleet.node(0).shell(
        "mount --bind /bin/false /usr/bin/openssl && mount --bind /tmp/lying-sha256sum /usr/bin/sha256sum",
    );
    assert!(tools.status.success(), "{tools:?}");
    let sc = Scenario::new(&fleet).cmd(&join());
    write_images(&sc.images_dir());
    let first = sc.images_dir().join("installation-package_v1.23.1.tar");
    let sha256 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(fs::read(&first).unwrap()))
    };

    let out = sc.run(&[]);
    out.status(1);
    out.log_has("Successfully processed node edge-01");
    runtimes[1].assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    let failed = out.log_line_starting("Failed to process node edge-00: ");
    eprintln!("{failed}");
    assert!(
        failed.contains(&format!(
            "The file image-{sha256}.tar arrived on the node with sha256 {zeros}, but what was sent has sha256 {sha256}"
        )),
        "{failed}"
    );
    assert!(runtimes[0].images().is_empty(), "nothing was imported");
    assert!(fake_keadm::calls(&remote_keadm(fleet.node(0))).is_empty());
    let upload_dir = fleet.node(0).tmp_path("kubeedge/keadm");
    let left: Vec<String> = fs::read_dir(&upload_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("image-"))
        .collect();
    assert!(
        left.is_empty(),
        "the received archive was removed: {left:?}"
    );
    assert_eq!(out.node_summary(0)["failed_in"], "uploading");
}

#[test]
fn a_runtime_that_cannot_take_images_fails_alone_with_its_message() {
    let fleet = Fleet::builder().nodes(3).start();
    let runtime = Containerd::start(fleet.node(0));
    let other = |endpoint: &str| {
        format!(
            "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={{name}} --token=abc.def --remote-runtime-endpoint={endpoint}"
        )
    };
    // Node 2's socket is held by a process named isulad (perl, started through a link of
    // that name): told by the socket's owner, since no CLI answers on it.
    let out = fleet.node(2).shell(
        "ln -s \"$(command -v perl)\" /tmp/isulad\n\
         /tmp/isulad -MIO::Socket::UNIX -e 'my $s = IO::Socket::UNIX->new(Type => 1, Local => \"/tmp/isulad.sock\", Listen => 1) or die \"$!\"; sleep 300' >/dev/null 2>&1 </dev/null &\n\
         for _ in $(seq 200); do [ -S /tmp/isulad.sock ] && exit 0; sleep 0.01; done\n\
         exit 1\n",
    );
    assert!(
        out.status.success(),
        "the fake isulad did not start: {out:?}"
    );
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .cmd_for(1, &other("unix:///tmp/rt/frakti.sock"))
        .cmd_for(2, &other("unix:///tmp/isulad.sock"));
    write_images(&sc.images_dir());
    let out = sc.run(&[]);
    out.status(1);
    out.log_has("Successfully processed node edge-00");
    runtime.assert_has(&[PACKAGE]);
    let unknown = out.log_line_starting("Failed to process node edge-01: ");
    assert!(
        unknown.contains(
            "keadm-batch cannot tell which container runtime serves /tmp/rt/frakti.sock ("
        ) && unknown.contains("nothing is at /tmp/rt/frakti.sock: no runtime listens there)")
            && unknown.contains("Import the archives on the node by hand"),
        "{unknown}"
    );
    assert!(
        out.transcript(2).contains(
            "the runtime keadm join will use is iSulad (its socket is held by isulad (pid "
        ),
        "{}",
        out.transcript(2)
    );
    let isulad = out.log_line_starting("Failed to process node edge-02: ");
    assert!(
        isulad.contains("keadm-batch cannot import the offline images into iSulad: isula is not installed on the node")
            // Nothing was sent: by hand names the operator's own archives.
            && isulad.contains("isula load -i FILE, FILE being each of these copied to the node: ")
            && isulad.contains("/packages/amd64/images/installation-package_v1.23.1.tar"),
        "{isulad}"
    );
    for i in [1, 2] {
        let node = out.node_summary(i);
        assert_eq!(node["failed_in"], "preparing");
        // keadm never ran: keadm-batch's own class, not one read from keadm's output.
        assert_eq!(node["failure_class"], "runtime_missing", "{node}");
        assert_eq!(node["bytes_uploaded"], 0, "nothing was sent: {node}");
        assert!(fake_keadm::calls(&remote_keadm(fleet.node(i))).is_empty());
    }
}

#[test]
fn pre_flight_reports_a_missing_image_and_nothing_once_it_is_provided() {
    let fleet = Fleet::builder().nodes(1).start();
    let runtime = Containerd::start(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .cmd(&checked_join(ENDPOINT))
        .preflight("warn");
    // The kit has the sandbox image only.
    let images = sc.images_dir();
    oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
    let out = sc.run(&["--preflight-only"]);
    out.status(1);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    assert!(
        out.stdout.contains(&format!(
            "The container runtime lacks an image keadm join needs or keadm.extraImages lists, and no offline image archive provides it, so it would have to be pulled from a registry ({PACKAGE} is not in containerd (/tmp/containerd/containerd.sock), and no offline image archive for {} provides it; `keadm-batch batch bundle` writes it into the kit when run again with this keadmCmd and keadmVersion (keadm's own images))",
            host_arch()
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("-> Put an archive of each missing image")
            && out.stdout.contains("a registry that has the image"),
        "both ways out: {}",
        out.stdout
    );
    assert!(runtime.images().is_empty(), "the probe imported nothing");

    // The archive is provided: nothing to report.
    docker_archive(
        &images.join("installation-package_v1.23.1.tar"),
        "kubeedge/installation-package:v1.23.1",
    );
    sc.run(&["--preflight-only"])
        .status(0)
        .preflight_found_nothing();

    // The runtime has both, imported by hand, and the kit has none: nothing either.
    runtime.import(&images.join("installation-package_v1.23.1.tar"));
    runtime.import(&images.join("pause_3.6.tar"));
    for file in fs::read_dir(&images).unwrap() {
        fs::remove_file(file.unwrap().path()).unwrap();
    }
    let out = sc.run(&["--preflight-only"]);
    out.status(0);
    assert!(!sc.path("batch_process_log.txt").exists());
}

/// The site's own images (`keadm.extraImages`) go the way keadm's own do: pre-flight
/// reports one that neither the runtime nor an archive of the kit has, saying how the kit
/// gets it; once the kit has it, the dry run lists its archive for the node, the run
/// imports it into the node's runtime before keadm runs, and a rerun imports nothing.
#[test]
fn extra_images_are_checked_by_pre_flight_imported_and_not_imported_again() {
    const EDGEMESH: &str = "docker.io/kubeedge/edgemesh-agent:v1.15.0";
    let fleet = Fleet::builder().nodes(1).start();
    let runtime = Containerd::start(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .cmd(&checked_join(ENDPOINT))
        .preflight("warn")
        .keadm(keadm_listing_images())
        .keadm_yaml("extraImages:")
        .keadm_yaml(&format!("  - {EDGEMESH}"));
    // The kit has keadm's images only.
    let images = sc.images_dir();
    write_images(&images);
    let out = sc.run(&["--preflight-only"]);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    out.status(1).stdout_has(&format!(
        "({EDGEMESH} is not in containerd (/tmp/containerd/containerd.sock), and no offline image archive for {} provides it; `keadm-batch batch bundle` writes it into the kit when run again with keadm.extraImages as this config lists them)",
        host_arch()
    ));

    sc.run(&["--dry-run"]).status(0).stdout_has(&format!(
        "  extras:      {EDGEMESH} (keadm.extraImages); no archive for {arch} provides {EDGEMESH}; pre-flight expects those in the nodes' runtimes\n",
        arch = host_arch()
    ));

    oci_archive(&images.join("edgemesh-agent_v1.15.0.tar"), EDGEMESH);
    sc.run(&["--preflight-only"])
        .status(0)
        .preflight_found_nothing();
    sc.run(&["--dry-run"])
        .status(0)
        .stdout_has(&format!(
            "  extras:      {EDGEMESH} (keadm.extraImages); the archives provide them\n"
        ))
        .stdout_has(&format!(
            "  images:    if {}: edgemesh-agent_v1.15.0.tar, installation-package_v1.23.1.tar, pause_3.6.tar;",
            host_arch()
        ));

    let out = sc.run(&[]);
    out.status(0);
    runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE, EDGEMESH]);
    let seen = images_seen_by_keadm(fleet.node(0));
    assert!(seen.contains(EDGEMESH), "imported before keadm ran: {seen}");
    let transcript = out.transcript(0);
    assert!(
        transcript.contains(&format!(
            "imported edgemesh-agent_v1.15.0.tar ({}) into containerd (/tmp/containerd/containerd.sock): {EDGEMESH}",
            upload_name(&images.join("edgemesh-agent_v1.15.0.tar"))
        )),
        "{transcript}"
    );
    let before = runtime.images();

    let again = sc.run(&[]);
    again.status(0);
    let node = again.node_summary(0);
    assert_eq!(node["bytes_uploaded"], 0, "{node}");
    // keadm, and the three archives, whose images the runtime lists.
    assert_eq!(node["uploads_skipped"], 4, "{node}");
    let transcript = again.transcript(0);
    assert!(
        transcript.contains(&format!("already has {EDGEMESH}, so the image archive"))
            && !transcript.contains(" into containerd ("),
        "{transcript}"
    );
    assert_eq!(runtime.images(), before);
}

#[test]
fn archives_listed_in_offline_images_are_imported() {
    let fleet = Fleet::builder().nodes(1).start();
    let runtime = Containerd::start(fleet.node(0));
    let kit = tempfile::tempdir().unwrap();
    // An OCI archive of the installation-package by itself, named in full as `ctr export`
    // names it, and a directory for the rest.
    oci_archive(&kit.path().join("package.tar"), PACKAGE);
    docker_archive(&kit.path().join("more/pause.tar"), SANDBOX_IMAGE);
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .keadm_yaml("offlineImages:")
        .keadm_yaml(&format!("  {}:", host_arch()))
        .keadm_yaml(&format!("    - {}/package.tar", kit.path().display()))
        .keadm_yaml(&format!("    - {}/more", kit.path().display()));
    let out = sc.run(&[]);
    out.status(0);
    runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    assert!(
        out.transcript(0).contains("imported pause.tar (image-"),
        "{}",
        out.transcript(0)
    );
}

#[test]
fn a_non_root_login_imports_under_sudo_with_its_password() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let runtime = Containerd::start(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()));
    write_images(&sc.images_dir());
    let out = sc.run(&[]);
    out.status(0);
    runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    let transcript = out.transcript(0);
    assert!(
        transcript.contains("under sudo with the login password")
            && transcript.contains("imported pause_3.6.tar (image-"),
        "{transcript}"
    );
    assert!(!transcript.contains(TEST_USER_PASSWORD));
    use std::os::unix::fs::MetadataExt;
    let archive = fleet.node(0).tmp_path(&format!(
        "kubeedge/keadm/{}",
        upload_name(&sc.images_dir().join("installation-package_v1.23.1.tar"))
    ));
    // The archive (root's, owner-only, in root's upload dir) was removed as root once its
    // images were in containerd: the login user could not have removed it there.
    assert!(!archive.exists(), "{transcript}");
    let dir = fs::metadata(fleet.node(0).tmp_path("kubeedge/keadm")).unwrap();
    assert_eq!(dir.uid(), 0, "the upload dir is root's");
    assert!(
        transcript.contains("removed the image archives from /tmp/kubeedge/keadm (2 files, "),
        "{transcript}"
    );
}

#[test]
fn an_archive_that_names_no_image_stops_the_run_before_any_node() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).cmd(&join());
    let images = sc.images_dir();
    fs::create_dir_all(&images).unwrap();
    fs::write(
        images.join("unnamed.tar"),
        tar_of(&[("index.json", UNNAMED_INDEX, 0o644)], &[]),
    )
    .unwrap();
    let out = sc.run(&[]);
    out.status(3);
    out.stderr_has(&format!(
        "The image archive {} names no image",
        images.join("unnamed.tar").display()
    ));
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "no node was touched"
    );
}

/// Writes `kit.json` into the offline directory `dir`, listing every file under it with
/// its sha256 and size, as `batch bundle` writes it.
fn write_kit_manifest(dir: &std::path::Path) {
    fn walk(dir: &std::path::Path, base: &std::path::Path, files: &mut Vec<serde_json::Value>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, files);
            } else if path.file_name().unwrap() != "kit.json" {
                let bytes = fs::read(&path).unwrap();
                files.push(serde_json::json!({
                    "path": path.strip_prefix(base).unwrap().to_str().unwrap(),
                    "sha256": &crate::common::image_archive::sha256(&bytes)[7..],
                    "size": bytes.len(),
                }));
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    let kit = serde_json::json!({
        "format": "keadm-batch-kit/1",
        "keadmVersion": "v1.23.1",
        "created": "2026-01-01T00:00:00Z",
        "files": files,
    });
    fs::write(dir.join("kit.json"), serde_json::to_vec(&kit).unwrap()).unwrap();
}

/// The `keadm-batch: error:` lines of a run's stderr.
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("keadm-batch: error:"))
        .collect()
}

/// A dry run reads and hashes the kit's image archives as the run does: every kit problem
/// the run stops at (exit 3, before any node) stops the dry run too, with the same
/// message, and a good kit's plan lists the archives each node would get.
#[test]
fn a_dry_run_checks_the_kit_s_image_archives_as_the_run_does_and_lists_them() {
    let fleet = Fleet::builder().nodes(1).start();
    let kit = |sc: &Scenario| {
        let images = sc.images_dir();
        write_images(&images);
        write_kit_manifest(&sc.path("packages"));
        images
    };

    // A good kit: the plan names each archive, its size and images, and per node what
    // goes there.
    let sc = Scenario::new(&fleet).cmd(&join());
    let images = kit(&sc);
    let out = sc.run(&["--dry-run"]);
    out.status(0);
    eprintln!("{}", out.stdout);
    let package = images.join("installation-package_v1.23.1.tar");
    let package_size = fs::metadata(&package).unwrap().len();
    let arch = host_arch();
    out.stdout_has(&format!(
        "  images:      {arch}: {} ({package_size} bytes: {PACKAGE}), {} (",
        package.display(),
        images.join("pause_3.6.tar").display()
    ))
    .stdout_has(&format!(
        "  images:    if {arch}: installation-package_v1.23.1.tar, pause_3.6.tar; those whose images the runtime lacks are sent to /tmp/kubeedge/keadm as image-<sha256>.tar and imported before keadm runs\n"
    ));
    assert!(
        !sc.path("batch_process_log.txt").exists() && !sc.staging_dir().exists(),
        "the dry run wrote nothing"
    );

    type Spoil = fn(&std::path::Path);
    let problems: [(&str, Spoil); 4] = [
        ("swapped", |images| {
            // Each archive under the other's name: both well-formed, neither the kit's.
            let a = images.join("installation-package_v1.23.1.tar");
            let b = images.join("pause_3.6.tar");
            let (bytes_a, bytes_b) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
            fs::write(&a, bytes_b).unwrap();
            fs::write(&b, bytes_a).unwrap();
        }),
        ("unlisted", |images| {
            oci_archive(&images.join("extra.tar"), "registry.k8s.io/pause:3.9");
        }),
        ("nameless", |images| {
            fs::write(
                images.join("unnamed.tar"),
                tar_of(&[("index.json", UNNAMED_INDEX, 0o644)], &[]),
            )
            .unwrap();
            write_kit_manifest(images.parent().unwrap().parent().unwrap());
        }),
        ("not an image archive", |images| {
            fs::write(
                images.join("notes.tar"),
                tar_of(&[("notes.txt", b"x", 0o644)], &[]),
            )
            .unwrap();
            write_kit_manifest(images.parent().unwrap().parent().unwrap());
        }),
    ];
    for (problem, spoil) in problems {
        let sc = Scenario::new(&fleet).cmd(&join());
        spoil(&kit(&sc));
        let dry = sc.run(&["--dry-run"]);
        assert_eq!(dry.code(), 3, "{problem}: {}", dry.stderr);
        assert_eq!(
            dry.stdout, "",
            "{problem}: no plan for a kit the run refuses"
        );
        let run = sc.run(&[]);
        assert_eq!(run.code(), 3, "{problem}: {}", run.stderr);
        assert!(
            !sc.path("batch_process_log.txt").exists(),
            "{problem}: the run stopped before any node"
        );
        let errors = error_lines(&dry.stderr);
        assert!(!errors.is_empty(), "{problem}: {}", dry.stderr);
        assert_eq!(errors, error_lines(&run.stderr), "{problem}");
        eprintln!("{problem}: {}", errors.join("\n"));
    }
}

/// A containerd listening on a socket whose name says nothing (`grpc.address` is the
/// operator's to choose) is asked what it is: the pre-flight check lists its images, and
/// the run imports into it.
#[test]
fn a_containerd_on_a_socket_named_for_nothing_is_asked_what_it_is() {
    const SOCKET: &str = "/tmp/ctd/ctd.sock";
    let fleet = Fleet::builder().nodes(1).start();
    let runtime = Containerd::start_at(fleet.node(0), SOCKET);
    let sc = Scenario::new(&fleet)
        .cmd(&checked_join(&format!("unix://{SOCKET}")))
        .preflight("warn");
    let images = sc.images_dir();
    oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
    let out = sc.run(&["--preflight-only"]);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    out.status(1).stdout_has(&format!(
        "({PACKAGE} is not in containerd ({SOCKET}), and no offline image archive for {} provides it;",
        host_arch()
    ));

    docker_archive(
        &images.join("installation-package_v1.23.1.tar"),
        "kubeedge/installation-package:v1.23.1",
    );
    let out = sc.run(&[]);
    out.status(0);
    runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    let transcript = out.transcript(0);
    assert!(
        transcript.contains(&format!(
            "the runtime keadm join will use is containerd ({SOCKET}) (ctr version answers on it)"
        )) && transcript.contains("imported installation-package_v1.23.1.tar (image-"),
        "{transcript}"
    );
    // The pre-flight probe and the import both ask the runtime: the transcript says which
    // it is once.
    assert_eq!(
        transcript
            .matches("the runtime keadm join will use is ")
            .count(),
        1,
        "{transcript}"
    );
}

/// A site's nodes (one LAN) get each image archive over the uplink once: the first node to need
/// an archive gets it from the control host and serves it, the others read it from a node
/// of the site, check its sha256 and import it; every runtime ends with the images, and
/// no node serves anything after the run. With sudo, as root imports them.
#[test]
fn a_site_gets_each_image_archive_over_its_uplink_once() {
    for sudo in [false, true] {
        let mut builder = Fleet::builder().nodes(3).site_lans(&[0, 0, 0]);
        if sudo {
            builder = builder.all_nodes(NodeOpt::Sudo(Sudo::WithPassword));
        }
        let fleet = builder.start();
        let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
        let mut sc = Scenario::new(&fleet)
            .cmd(&join())
            .keadm(keadm_listing_images())
            .max_run_num(3)
            .top_yaml("site: store-1");
        if sudo {
            sc = sc.login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()));
        }
        let (docker_bytes, oci_bytes) = write_images(&sc.images_dir());
        let planned = sc.run(&["--dry-run"]);
        planned.status(0);
        assert!(
            planned.stdout.contains(
                "\n  site store-1: 3 nodes, seed order edge-00, edge-01, edge-02; keadm relayed among 3 nodes, the image archives among 3\n"
            ),
            "{}",
            planned.stdout
        );
        let out = sc.run(&[]);
        out.status(0);
        let archives = ["installation-package_v1.23.1.tar", "pause_3.6.tar"]
            .map(|file| upload_name(&sc.images_dir().join(file)));
        for archive in archives {
            let from_peer: Vec<usize> = (0..3)
                .filter(|&i| out.transcript(i).contains(&format!("{archive} came from ")))
                .collect();
            assert_eq!(
                from_peer.len(),
                2,
                "sudo {sudo}: {archive} came from a peer on {from_peer:?}\n{}",
                out.transcript(0)
            );
        }
        let sent: u64 = (0..3)
            .map(|i| out.node_summary(i)["bytes_uploaded"].as_u64().unwrap())
            .sum();
        // One gzip-compressed docker archive, one OCI archive as it is, and keadm once.
        assert!(
            sent < oci_bytes + docker_bytes,
            "sudo {sudo}: {sent} bytes sent in all for {docker_bytes} + {oci_bytes} bytes of archives"
        );
        for (i, runtime) in runtimes.iter().enumerate() {
            runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
            let seen = images_seen_by_keadm(fleet.node(i));
            assert!(seen.contains(PACKAGE), "node {i}: {seen}");
        }
        no_node_serves(&fleet, sudo, &out.stderr);
        // Every node, the sources too once they served no more, removed its archives. A
        // source without sudo serves them from its upload dir, so they wait for its line
        // to go; under sudo it serves a copy in the login user's home and they go at once.
        let waited = (0..3)
            .filter(|&i| {
                out.transcript(i)
                    .contains("stay in /tmp/kubeedge/keadm (2 files) while it serves them")
            })
            .count();
        assert_eq!(waited > 0, !sudo, "sudo {sudo}: {waited} sources waited");
        for (i, node) in fleet.nodes().iter().enumerate() {
            assert_eq!(
                archives_left(node),
                Vec::<String>::new(),
                "sudo {sudo}: node {i}\n{}",
                out.transcript(i)
            );
            assert!(
                out.transcript(i)
                    .contains("removed the image archives from /tmp/kubeedge/keadm ("),
                "sudo {sudo}: node {i}\n{}",
                out.transcript(i)
            );
        }
        let summary = out.summary();
        let site = &summary["sites"][0];
        // keadm and the two archives, once each over the uplink; twice each from peers.
        assert_eq!(site["uplink_copies"], 3, "sudo {sudo}: {site}");
        assert_eq!(site["peer_copies"], 6, "sudo {sudo}: {site}");
    }
}

/// Two nodes of a site, one after the other: the first gets the archives from the control
/// host and serves them from its upload dir after its own join, until the second has
/// read them; then neither keeps an archive, and the first's transcript says, after its
/// join, that its archives went once it served no more.
#[test]
fn a_source_removes_its_archives_once_the_site_read_them() {
    let fleet = Fleet::builder().nodes(2).site_lans(&[0, 0]).start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .keadm(keadm_listing_images())
        .max_run_num(1)
        .top_yaml("site: store-1");
    write_images(&sc.images_dir());
    let out = sc.run(&[]);
    out.status(0);
    let (t0, t1) = (out.transcript(0), out.transcript(1));
    for file in ["installation-package_v1.23.1.tar", "pause_3.6.tar"] {
        let archive = upload_name(&sc.images_dir().join(file));
        assert!(
            t1.contains(&format!(
                "{archive} came from {} of the site",
                fleet.node(0).host()
            )),
            "{t1}"
        );
    }
    for runtime in &runtimes {
        runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    }
    for (i, node) in fleet.nodes().iter().enumerate() {
        assert_eq!(archives_left(node), Vec::<String>::new(), "node {i}");
    }
    let stayed = t0
        .find("stay in /tmp/kubeedge/keadm (2 files) while it serves them")
        .unwrap_or_else(|| panic!("{t0}"));
    let removed = t0
        .find("removed the image archives from /tmp/kubeedge/keadm (2 files, ")
        .unwrap_or_else(|| panic!("{t0}"));
    assert!(stayed < removed, "{t0}");
    assert!(
        t1.contains("removed the image archives from /tmp/kubeedge/keadm (2 files, "),
        "{t1}"
    );
    no_node_serves(&fleet, false, &out.stderr);
}

/// A source whose sshd answers the relay's reads with other bytes: each receiver's hash
/// check refuses every archive, and the receiver gets them from the control host instead,
/// imports them and joins; nothing the source sent is imported.
#[test]
fn an_archive_a_source_serves_altered_is_refused_and_sent_directly() {
    // Node 0 seeds (one node at a time, in config order).
    let tamper = "ForceCommand if [ \"$SSH_ORIGINAL_COMMAND\" = fetch ]; then head -c 65536 /dev/zero; else exec sh -c \"$SSH_ORIGINAL_COMMAND\"; fi";
    let fleet = Fleet::builder()
        .nodes(2)
        .site_lans(&[0, 0])
        .node_option(0, NodeOpt::SshdConfig(tamper.to_string()))
        .start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .keadm(keadm_listing_images())
        .max_run_num(1)
        .top_yaml("site: store-1");
    write_images(&sc.images_dir());
    let out = sc.run(&[]);
    out.status(0);
    let t1 = out.transcript(1);
    for file in ["installation-package_v1.23.1.tar", "pause_3.6.tar"] {
        let archive = upload_name(&sc.images_dir().join(file));
        assert!(
            t1.contains(&format!(
                "reading {archive} from {} failed (",
                fleet.node(0).host()
            )) && t1.contains(&format!("imported {file} ({archive}) into containerd")),
            "{t1}"
        );
    }
    assert!(
        t1.contains("getting it from this machine instead") && !t1.contains(" came from "),
        "{t1}"
    );
    for runtime in &runtimes {
        runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
    }
    no_node_serves(&fleet, false, &out.stderr);
    let site = &out.summary()["sites"][0];
    assert_eq!(site["uplink_copies"], 6, "{site}");
    assert_eq!(site["peer_copies"], 0, "{site}");
}
