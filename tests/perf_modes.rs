//! Bytes on the wire: a keadm package that compresses well travels as the binary's xz copy
//! (unpacked and checked by sha256 on the node), or as its release tarball (checked by
//! sha512 and unpacked) to nodes without xz, and nodes that can unpack neither get the
//! plain binary. Real sshd nodes on loopback.

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fake_release::{ChecksumFile, FakeRelease};
use crate::common::fleet::{Fleet, Sudo, TEST_USER_PASSWORD};
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
    // Neither node has a working `xz`, and node 1's `tar` is a stub that fails too: it
    // must get the plain binary.
    for (node, tools) in [(0, "xz"), (1, "xz tar")] {
        for tool in tools.split(' ') {
            let hidden = fleet
                .node(node)
                .shell(&format!("mount --bind /bin/false /usr/bin/{tool}"));
            assert!(hidden.status.success(), "{hidden:?}");
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

#[test]
fn a_node_with_xz_gets_the_xz_copy_and_keeps_the_binary_only_with_its_sha256() {
    let fleet = Fleet::builder().nodes(1).start();
    let binary = compressible_keadm();
    let sc = Scenario::new(&fleet);
    write_package(&sc, &binary);
    let tarball_size = std::fs::metadata(
        sc.path("packages")
            .join(format!("amd64/keadm-{VERSION}-linux-amd64.tar.gz")),
    )
    .unwrap()
    .len();
    let out = sc.run(&[]);
    out.status(0);
    let node = node_summary(&out.summary(), &Scenario::name(0));
    let sent = node["bytes_uploaded"].as_u64().unwrap();
    assert!(
        sent > 0 && sent < tarball_size && sent < binary.len() as u64,
        "xz sent {sent} bytes for a {}-byte binary (tarball {tarball_size})",
        binary.len()
    );
    assert!(
        out.transcript(0).contains("sent the xz copy of the binary"),
        "{}",
        out.transcript(0)
    );
    assert_eq!(std::fs::read(remote_keadm(fleet.node(0))).unwrap(), binary);
    let sidecar =
        std::fs::read_to_string(fleet.node(0).tmp_path("kubeedge/keadm/keadm.sha256")).unwrap();
    let sha256 = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&binary))
    };
    assert_eq!(sidecar.trim(), sha256);
    assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(0))).len(), 1);
}
