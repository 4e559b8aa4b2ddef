//! Issue 31's upgrade path against real binaries: a real keadm upgrading a real edgecore
//! from one KubeEdge release to the next, both built from KubeEdge's source, on the real
//! cloud of tests/common/real_cloud.rs. Set `KECLOUD_BIN` and `KECLOUD_CRDS` as for
//! tests/cloud_e2e.rs (the newer release: the cloud, the keadm that upgrades, the edgecore
//! upgraded to) and `KECLOUD_OLD_BIN` to a directory holding the older release's `keadm`
//! and `edgecore`, then run `cargo test --test main cloud_upgrade_e2e -- --nocapture`.
//! The test is ignored unless run with `--ignored`; then it fails without `KECLOUD_BIN`
//! or `KECLOUD_OLD_BIN`.
//!
//! The nodes are tests/cloud_e2e.rs's (fleet nodes with an /etc of their own, the stand-in
//! systemctl, a containerd whose registries are none). Two join at the older release
//! through the tool; then one run of `upgrade edge --toVersion <newer>`, without `--force`
//! (the tool answers keadm's `[y/N]`), with `--backup`, `--rollback-on-failure` and the
//! kubeconfig. Node 0's containerd holds the newer installation-package (imported by hand,
//! as an operator of a registry-less site would; the offline kit is imported by joins
//! only), so keadm's pull finds it and the upgrade runs: its report says success, edgecore
//! runs the newer release, the Node is Ready on it, and keadm's backup of the older
//! release is on the node. Node 1's containerd lacks the image and has no registry to pull
//! it from: keadm's report says the pull failed, the tool rolls it back to its backup, and
//! it runs the older release again, Ready on it.

use std::fs;

use crate::cloud_e2e::{
    READY_TIMEOUT, installation_package, joins, mount_points, scenario, share_upgrade_dir, tail,
    upgradable_edge_node, write_join_images, write_keadm_package,
};
use crate::common::containerd::Containerd;
use crate::common::fleet::{Fleet, Node};
use crate::common::image_archive::sha256;
use crate::common::real_cloud::{CloudBinaries, RealCloud, Release, ready_condition};
use crate::common::scenario::Scenario;
use crate::keadm_e2e::keadm_version;

/// The Node's kubelet version, which edgecore writes: KubeEdge's Kubernetes version
/// (v1.32.10 for both v1.23.0 and v1.23.1), `-kubeedge-`, its own.
fn kubelet_version_of(node: &serde_json::Value) -> String {
    node["status"]["nodeInfo"]["kubeletVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The sha256 of `path` on `node`, as `sha256sum` prints it (the hash alone).
fn sha256_on(node: &Node, path: &str) -> String {
    let out = node.shell(&format!("sha256sum {path}"));
    assert!(out.status.success(), "sha256sum {path}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The sha256 of the file at `path` here, as [`sha256_on`] gives it.
fn sha256_of(path: &std::path::Path) -> String {
    sha256(&fs::read(path).unwrap())
        .trim_start_matches("sha256:")
        .to_string()
}

/// The value of edgecore.yaml's `edgecoreVersion` on `node` (edgecore writes its own
/// version there when it starts).
fn config_version(node: &Node) -> String {
    let out = node
        .shell("sed -n 's/^edgecoreVersion:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Asserts the cluster's Node `name` is Ready on edgecore `version`.
fn assert_ready_on(cloud: &RealCloud, name: &str, version: &str) {
    let node = cloud
        .node(name)
        .unwrap_or_else(|| panic!("the API server has no Node {name}"));
    let (status, reason, message) = ready_condition(&node).expect("a Ready condition");
    assert_eq!(status, "True", "{name}: {reason}: {message}");
    let kubelet = kubelet_version_of(&node);
    assert!(
        kubelet.ends_with(&format!("-kubeedge-{version}")),
        "{name} is Ready on {kubelet}, not on edgecore {version}"
    );
}

#[test]
#[ignore = "needs a real KubeEdge cloud's binaries of two releases: run with --ignored and KECLOUD_BIN, KECLOUD_OLD_BIN, KECLOUD_CRDS set (README, Tests)"]
fn a_real_keadm_upgrades_a_real_edgecore_with_a_backup_and_rolls_back_a_failed_pull() {
    let (Some(bins), Some(old)) = (CloudBinaries::from_env(), Release::old_from_env()) else {
        panic!(
            "KECLOUD_BIN and KECLOUD_OLD_BIN are not both set. Point KECLOUD_BIN at real etcd, kube-apiserver, kubectl, cloudcore, keadm and edgecore binaries (KECLOUD_CRDS at KubeEdge's build/crds) and KECLOUD_OLD_BIN at an older release's keadm and edgecore to run an upgrade against a real cluster."
        );
    };
    let new = bins.release();
    let (from, to) = (keadm_version(&old.keadm()), keadm_version(&new.keadm()));
    assert_ne!(
        from, to,
        "KECLOUD_OLD_BIN's keadm and KECLOUD_BIN's are both {from}: the upgrade needs two releases."
    );
    let cloud = RealCloud::start(&bins);
    let token = cloud.token();
    let kubeconfig = cloud.kubeconfig.display().to_string();

    let fleet = Fleet::builder().nodes(2).start();
    let _made = mount_points();
    let runtimes: Vec<Containerd> = (0..2)
        .map(|i| upgradable_edge_node(fleet.node(i)))
        .collect();
    // The kit: both releases' keadm packages (the join stages the older, the upgrade the
    // newer), and the images of the older release's join only.
    let kit = tempfile::Builder::new()
        .prefix("cloud-upgrade-kit-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let packages = kit.path().join("packages");
    fs::create_dir_all(kit.path().join("staging")).unwrap();
    write_keadm_package(&packages, &old, &from);
    write_keadm_package(&packages, &new, &to);
    write_join_images(&packages, &old, &from);

    // 1. Both nodes join at the older release and are Ready on it.
    let out = joins(&fleet, &[0, 1], kit.path(), &cloud, &token, &from).run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        READY_TIMEOUT,
    ]);
    assert_eq!(
        out.code(),
        0,
        "the join at {from} failed:\n{}\n{}\ncloudcore:\n{}",
        out.stdout,
        out.stderr,
        cloud.log("cloudcore")
    );
    for i in 0..2 {
        assert_ready_on(&cloud, &Scenario::name(i), &from);
        assert_eq!(config_version(fleet.node(i)), from);
        share_upgrade_dir(fleet.node(i));
    }
    let old_edgecore = sha256_of(&old.edgecore());
    let new_edgecore = sha256_of(&new.edgecore());

    // 2. Node 0's runtime gets the newer installation-package; node 1's has none.
    let image = format!("docker.io/kubeedge/installation-package:{to}");
    let archive = kit.path().join(format!("installation-package_{to}.tar"));
    installation_package(&archive, &new, &to);
    runtimes[0].import(&archive);
    runtimes[0].assert_has(&[&image]);
    assert!(
        !runtimes[1].images().contains(&image),
        "edge-01's runtime has {image}"
    );

    // 3. The upgrade, its prompt answered by the tool, with a backup first and a rollback
    //    of what fails, in the default waves (10%): node 0 is wave 1, gated by its Node
    //    Ready on the new version; node 1 is wave 2.
    // No offline images for this run: node 0 has its installation-package already, and the
    // kit's would reach node 1 too.
    let upgrade = scenario(&fleet, &[0, 1], kit.path())
        .keadm_version(&to)
        .keadm_yaml("offlineImages: {}")
        .cmd(&format!("upgrade edge --toVersion {to}"));
    let out = upgrade.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--backup",
        "--rollback-on-failure",
        "--ready-timeout",
        READY_TIMEOUT,
    ]);
    for i in 0..2 {
        eprintln!(
            "cloud_upgrade_e2e: edge-0{i}'s transcript ends:\n{}",
            tail(&out, i)
        );
    }
    eprintln!("cloud_upgrade_e2e: the upgrade run:\n{}", out.stderr);
    assert_eq!(
        out.code(),
        1,
        "the upgrade run (one node must fail):\n{}\n{}",
        out.stdout,
        out.stderr
    );

    // Node 0: upgraded, its report says so, edgecore runs the newer release, the Node is
    // Ready on it, and keadm's backup holds the older release.
    let ok = out.node_summary(0);
    assert_eq!(ok["phase"], "succeeded", "{ok}");
    let record = &ok["upgrade"];
    assert_eq!(record["task"], "Upgrade", "{record}");
    let report = &record["report"];
    assert_eq!(report["event"], "Upgrade", "{record}");
    assert_eq!(report["success"], true, "{record}");
    assert_eq!(report["fromVersion"], from.as_str(), "{record}");
    assert_eq!(report["toVersion"], to.as_str(), "{record}");
    assert_eq!(record["target_version"], to.as_str(), "{record}");
    assert_eq!(record["running_version"], to.as_str(), "{record}");
    assert_eq!(record["backup_exit_status"], 0, "{record}");
    assert!(record.get("rollback").is_none(), "{record}");
    assert_ready_on(&cloud, "edge-00", &to);
    assert_eq!(
        ok["cluster"]["version"],
        kubelet_version_of(&cloud.node("edge-00").unwrap()).as_str(),
        "{ok}"
    );
    let node = fleet.node(0);
    assert_eq!(sha256_on(node, "/usr/local/bin/edgecore"), new_edgecore);
    assert_eq!(config_version(node), to);
    let backup = format!("/etc/kubeedge/backup/{from}");
    assert_eq!(
        sha256_on(node, &format!("{backup}/edgecore")),
        old_edgecore,
        "the backup's edgecore is not the older release's"
    );
    node.shell_ok(&format!(
        "test -s {backup}/edgecore.yaml && test -s {backup}/edgecore.db"
    ));

    // Node 1: the pull failed (no image, no registry), its report says why, and the
    // rollback brought it back to the older release, Ready on it.
    let summary = out.summary();
    let totals = &summary["totals"];
    assert_eq!(
        (&totals["succeeded"], &totals["failed"]),
        (&1.into(), &1.into()),
        "{totals}"
    );
    let waves: Vec<(String, String)> = summary["waves"]
        .as_array()
        .unwrap_or_else(|| panic!("no waves in the summary: {summary}"))
        .iter()
        .map(|w| (w["nodes"].to_string(), w["result"].to_string()))
        .collect();
    assert_eq!(
        waves,
        [
            (r#"["edge-00"]"#.into(), r#""passed""#.into()),
            (r#"["edge-01"]"#.into(), r#""stopped the rollout""#.into())
        ],
        "{}",
        summary["waves"]
    );
    let failed = out.node_summary(1);
    assert_eq!(failed["phase"], "failed", "{failed}");
    assert_eq!(failed["failure_class"], "image_pull_stalled", "{failed}");
    let record = &failed["upgrade"];
    let report = &record["report"];
    assert_eq!(report["event"], "Upgrade", "{record}");
    assert_eq!(report["success"], false, "{record}");
    let message = report["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "failed to pull image kubeedge/installation-package:{to}"
        )),
        "edge-01's report: {record}"
    );
    assert!(
        failed["last_output"]
            .as_str()
            .is_some_and(|line| line.contains("failed to pull image")),
        "{failed}"
    );
    let rollback = &record["rollback"];
    assert_eq!(rollback["succeeded"], true, "{rollback}");
    assert_eq!(rollback["to_version"], from.as_str(), "{rollback}");
    assert_eq!(rollback["report"]["event"], "Rollback", "{rollback}");
    assert_eq!(rollback["report"]["success"], true, "{rollback}");
    assert_eq!(rollback["running_version"], from.as_str(), "{rollback}");
    assert_eq!(rollback["ready"], true, "{rollback}");
    assert_ready_on(&cloud, "edge-01", &from);
    let node = fleet.node(1);
    assert_eq!(sha256_on(node, "/usr/local/bin/edgecore"), old_edgecore);
    assert_eq!(config_version(node), from);
    drop(runtimes);
}
