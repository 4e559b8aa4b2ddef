//! Bytes on the wire: a keadm package that compresses well travels as the binary's zstd
//! copy, or its xz copy to nodes without zstd (either unpacked and checked by sha256 on the
//! node), or as its release tarball (checked by sha512 and unpacked) to nodes with
//! neither, and nodes that can unpack none of them get the plain binary. Real sshd nodes
//! on loopback.

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fake_release::{ChecksumFile, FakeRelease};
use crate::common::fleet::{Fleet, Node, Sudo, TEST_USER_PASSWORD};
use crate::common::image_archive::sha256_hex;
use crate::common::scenario::{Login, Scenario, VERSION, remote_keadm};

/// A fake keadm padded with 2 MiB of repetitive comment lines: it gzips to a few KiB.
fn compressible_keadm() -> Vec<u8> {
    let mut script = FakeKeadm::new().prints("joined").script();
    let line = "# padding: a long, highly repetitive line of text that gzip folds away\n";
    while script.len() < 2 << 20 {
        script.push_str(line);
    }
    script.into_bytes()
}

/// Writes the offline amd64 package with `binary` inside, before the scenario's first run
/// (which then keeps it).
fn write_package(sc: &Scenario, binary: &[u8]) {
    let (built, _) = FakeRelease::new(VERSION, "amd64")
        .with_binary(binary)
        .write_offline(&sc.path("packages"), ChecksumFile::Matching);
    assert!(
        (built.bytes.len() as f64) < 0.1 * binary.len() as f64,
        "the test package should compress well"
    );
}

fn node_summary(summary: &serde_json::Value, name: &str) -> serde_json::Value {
    summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in the summary"))
        .clone()
}

#[test]
fn a_compressible_package_travels_as_its_tarball_and_nodes_without_tar_get_the_binary() {
    let fleet = Fleet::builder().nodes(2).start();
    // Neither node has a working `xz` or `zstd` (else a copy made before its upload
    // starts would go instead), and node 1's `tar` is a stub that fails too: it must get
    // the plain binary.
    for (node, tools) in [(0, "xz zstd"), (1, "xz zstd tar")] {
        for tool in tools.split(' ') {
            fleet.node(node).hide_tool(tool);
        }
    }
    let binary = compressible_keadm();
    let sc = Scenario::new(&fleet);
    write_package(&sc, &binary);
    let out = sc.run(&[]);
    out.status(0);
    let summary = out.summary();

    let tarball_node = node_summary(&summary, &Scenario::name(0));
    let sent = tarball_node["bytes_uploaded"].as_u64().unwrap();
    assert!(
        sent > 0 && (sent as f64) < 0.5 * binary.len() as f64,
        "tarball mode sent {sent} bytes for a {}-byte binary",
        binary.len()
    );
    assert_eq!(
        std::fs::read(remote_keadm(fleet.node(0))).unwrap(),
        binary,
        "the unpacked binary is byte-identical"
    );
    assert!(out.transcript(0).contains("release tarball"));
    let leftovers: Vec<String> = std::fs::read_dir(fleet.node(0).tmp_path("kubeedge/keadm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let plain_node = node_summary(&summary, &Scenario::name(1));
    assert_eq!(plain_node["bytes_uploaded"], binary.len() as u64);
    assert_eq!(std::fs::read(remote_keadm(fleet.node(1))).unwrap(), binary);
    assert!(!out.transcript(1).contains("release tarball"));
    for i in 0..2 {
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
    }

    // The sidecar records the binary's sha256, so a second run skips the upload.
    let again = sc.run(&[]);
    again.status(0);
    let summary = again.summary();
    for i in 0..2 {
        let node = node_summary(&summary, &Scenario::name(i));
        assert_eq!(node["bytes_uploaded"], 0, "{node}");
        assert_eq!(node["uploads_skipped"], 1, "{node}");
    }
}

#[test]
fn tarball_mode_works_under_password_sudo() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let binary = compressible_keadm();
    let sc = Scenario::new(&fleet).login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()));
    write_package(&sc, &binary);
    let out = sc.run(&[]);
    out.status(0);
    let node = node_summary(&out.summary(), &Scenario::name(0));
    assert!(node["bytes_uploaded"].as_u64().unwrap() < binary.len() as u64 / 2);
    assert_eq!(std::fs::read(remote_keadm(fleet.node(0))).unwrap(), binary);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(remote_keadm(fleet.node(0))).unwrap();
    assert_eq!(meta.uid(), 0, "unpacked as root");
    assert_eq!(meta.mode() & 0o777, 0o755);
    assert_eq!(
        fake_keadm::calls(&remote_keadm(fleet.node(0)))[0].uid,
        Some(0)
    );
}

/// A node with `zstd` gets the zstd copy (a sixth of xz's CPU to unpack), one without it
/// the xz copy; each keeps the binary only with its sha256.
#[test]
fn a_node_with_zstd_gets_the_zstd_copy_one_with_only_xz_the_xz_copy() {
    let fleet = Fleet::builder().nodes(2).start();
    fleet.node(0).hide_tool("zstd");
    let binary = compressible_keadm();
    let sc = Scenario::new(&fleet);
    write_package(&sc, &binary);
    let tarball_size = std::fs::metadata(
        sc.path("packages")
            .join(format!("amd64/keadm-{VERSION}-linux-amd64.tar.gz")),
    )
    .unwrap()
    .len();
    // The first run of a version makes the copy while it sends the tarball; the next one
    // sends the copy.
    sc.run(&[]).status(0);
    let copies = [
        wait_for_copy(&sc, &binary, "xz"),
        wait_for_copy(&sc, &binary, "zst"),
    ];
    let sha256 = sha256_hex(&binary);
    for i in 0..2 {
        forget_keadm(fleet.node(i));
    }
    let out = sc.run(&[]);
    out.status(0);
    for (i, (format, copy)) in ["xz", "zstd"].iter().zip(&copies).enumerate() {
        let node = node_summary(&out.summary(), &Scenario::name(i));
        let sent = node["bytes_uploaded"].as_u64().unwrap();
        assert_eq!(sent, std::fs::metadata(copy).unwrap().len(), "{node}");
        assert!(
            sent < tarball_size && sent < binary.len() as u64,
            "{format} sent {sent} bytes for a {}-byte binary (tarball {tarball_size})",
            binary.len()
        );
        assert!(
            out.transcript(i)
                .contains(&format!("sent the {format} copy of the binary")),
            "{}",
            out.transcript(i)
        );
        assert_eq!(std::fs::read(remote_keadm(fleet.node(i))).unwrap(), binary);
        let sidecar =
            std::fs::read_to_string(fleet.node(i).tmp_path("kubeedge/keadm/keadm.sha256")).unwrap();
        assert_eq!(sidecar.trim(), sha256);
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
    }
}

/// A keadm that gzip packs to about half and xz takes seconds to pack, so the first
/// uploads of a cold run start long before its xz copy can be done: 8 MiB of lines of
/// words drawn from a small vocabulary by a fixed-seed generator.
fn slow_to_pack_keadm() -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let words: Vec<String> = (0..512)
        .map(|_| {
            let len = 3 + next() % 7;
            (0..len)
                .map(|_| (b'a' + (next() % 26) as u8) as char)
                .collect()
        })
        .collect();
    let mut script = FakeKeadm::new().prints("joined").script();
    script.push('#');
    while script.len() < 8 << 20 {
        script.push(' ');
        script.push_str(&words[next() % words.len()]);
        if next() % 12 == 0 {
            script.push_str("\n#");
        }
    }
    script.push('\n');
    script.into_bytes()
}

/// The staged binary's packed copy (`extension`: `xz`, `zst`) in the scenario's staging
/// dir, once a process of its own has made it (it may outlive the run that started it).
fn wait_for_copy(sc: &Scenario, binary: &[u8], extension: &str) -> std::path::PathBuf {
    let sha256 = sha256_hex(binary);
    let dir = sc.staging_dir().join("bin/amd64");
    let copy = dir.join(format!("keadm-{sha256}.{extension}"));
    let start = std::time::Instant::now();
    while !copy.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(180),
            "no copy at {} after 180 s",
            copy.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    copy
}

/// Removes keadm, its sidecar and its record of calls from the node, so a run sends it
/// again.
fn forget_keadm(node: &Node) {
    for name in ["keadm", "keadm.sha256", "keadm.calls"] {
        let path = node.tmp_path(&format!("kubeedge/keadm/{name}"));
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
fn a_cold_run_sends_the_tarball_while_the_copies_are_made_and_the_next_run_sends_one() {
    let fleet = Fleet::builder().nodes(2).start();
    let binary = slow_to_pack_keadm();
    let sc = Scenario::new(&fleet);
    let (built, _) = FakeRelease::new(VERSION, "amd64")
        .with_binary(&binary)
        .write_offline(&sc.path("packages"), ChecksumFile::Matching);
    assert!(
        (built.bytes.len() as f64) < 0.8 * binary.len() as f64,
        "the test package should gzip well enough for an xz copy: {} bytes for {}",
        built.bytes.len(),
        binary.len()
    );

    // Nothing staged, no xz copy cached: the nodes get the verified release tarball at
    // once instead of waiting for the copy.
    let cold = sc.run(&[]);
    cold.status(0);
    // The run did not wait for the copy, and says what goes on after it.
    assert!(
        cold.stderr.contains(&format!(
            "The zstd copy of keadm {VERSION} for amd64 is still being made (process "
        )),
        "{}",
        cold.stderr
    );
    for i in 0..2 {
        let transcript = cold.transcript(i);
        assert!(
            transcript.contains("sent the release tarball")
                && transcript.contains("the zstd copy of keadm is still being made"),
            "{transcript}"
        );
        assert!(!transcript.contains("sent the zstd copy"), "{transcript}");
        let node = cold.node_summary(i);
        assert_eq!(node["bytes_uploaded"], built.bytes.len() as u64, "{node}");
        assert_eq!(std::fs::read(remote_keadm(fleet.node(i))).unwrap(), binary);
    }

    // The copy lands in the staging dir under its final name only once it is whole.
    wait_for_copy(&sc, &binary, "xz");
    let copy = wait_for_copy(&sc, &binary, "zst");
    let unpacked = std::process::Command::new("zstd")
        .arg("-dcq")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(unpacked.status.success(), "{unpacked:?}");
    assert!(
        unpacked.stdout == binary,
        "the zstd copy unpacks to the binary"
    );
    let temporaries: Vec<String> = std::fs::read_dir(copy.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(temporaries.is_empty(), "{temporaries:?}");

    // The next run, with keadm gone from the nodes, sends the cached copy.
    for i in 0..2 {
        forget_keadm(fleet.node(i));
    }
    let warm = sc.run(&[]);
    warm.status(0);
    let copy_size = std::fs::metadata(&copy).unwrap().len();
    for i in 0..2 {
        let transcript = warm.transcript(i);
        assert!(
            transcript.contains("sent the zstd copy of the binary"),
            "{transcript}"
        );
        assert_eq!(warm.node_summary(i)["bytes_uploaded"], copy_size);
        assert_eq!(std::fs::read(remote_keadm(fleet.node(i))).unwrap(), binary);
    }
}
