//! Labels and taints on a real cloud (tests/common/real_cloud.rs) with a real edge node
//! (tests/cloud_e2e.rs's), when the real binaries are at hand: run
//! `cargo test --test main labels_e2e -- --ignored --nocapture` with `KECLOUD_BIN` and
//! `KECLOUD_CRDS` set (as tests/cloud_e2e.rs says). Ignored otherwise.
//!
//! A join whose config gives the node labels (for all, for its site, its own) and a
//! taint turns Ready, and the real Node has both: the labels that keadm's `--labels`
//! wrote into edgecore.yaml's `nodeLabels`, the taint that keadm's `--set` wrote into
//! `registerWithTaints`, as edgecore registered them. Then a label changed on the cluster
//! side (`kubectl label --overwrite`) shows in `batch status` as differing from the
//! config.

use crate::cloud_capacity_e2e::{EdgeFleet, binaries};
use crate::cloud_e2e::{READY_TIMEOUT, joins, tail};
use crate::common::real_cloud::RealCloud;
use crate::common::scenario::VERSION;
use crate::common::test::{Output, Test};

fn show(what: &str, out: &Output) {
    eprintln!(
        "labels_e2e: {what}: exit {}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.code(),
        out.stdout,
        out.stderr
    );
}

#[test]
#[ignore = "needs a real KubeEdge cloud's binaries: run with --ignored and KECLOUD_BIN, KECLOUD_CRDS set (README, Tests)"]
fn a_real_join_registers_its_node_with_the_configs_labels_and_taint() {
    let bins = binaries();
    let cloud = RealCloud::start(&bins);
    let token = cloud.token();
    let kubeconfig = cloud.kubeconfig.display().to_string();
    let edges = EdgeFleet::start(&bins, 1);
    let (fleet, kit) = (&edges.fleet, &edges.kit);

    let sc = joins(fleet, &[0], kit.path(), &cloud, &token, VERSION)
        .top_yaml("labels: {tier: edge, num: '123'}")
        .top_yaml("taints: [dedicated=edge:NoSchedule]")
        .top_yaml("sites:\n  berlin-1:\n    labels: {topology.kubernetes.io/zone: berlin}")
        .node_yaml("site: berlin-1")
        .node_yaml("labels: {accelerator: none}");
    let dry = sc.run(&["--kubeconfig", &kubeconfig, "--dry-run"]);
    show("the dry run", &dry);
    dry.status(0)
        .stdout_has("  labels:    accelerator=none, num=123, tier=edge, topology.kubernetes.io/zone=berlin\n")
        .stdout_has("  taints:    dedicated=edge:NoSchedule");
    let out = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        READY_TIMEOUT,
    ]);
    show("the join", &out);
    eprintln!("labels_e2e: edge-00's transcript ends:\n{}", tail(&out, 0));
    out.status(0);
    assert_eq!(out.summary()["nodes"][0]["phase"], "succeeded");

    let node = cloud.node("edge-00").expect("the Node exists");
    let labels = &node["metadata"]["labels"];
    let taints = &node["spec"]["taints"];
    eprintln!("labels_e2e: the Node's labels: {labels}\nlabels_e2e: its taints: {taints}");
    for (key, value) in [
        ("accelerator", "none"),
        ("num", "123"),
        ("tier", "edge"),
        ("topology.kubernetes.io/zone", "berlin"),
    ] {
        assert_eq!(labels[key], value, "{key} in {labels}");
    }
    assert!(
        taints
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "dedicated"
                && t["value"] == "edge"
                && t["effect"] == "NoSchedule"),
        "{taints}"
    );

    // Changed on the cluster side: `batch status` names the difference.
    cloud.kubectl_ok(&["label", "node", "edge-00", "tier=core", "--overwrite"]);
    let status = Test::in_dir(sc.dir.path())
        .env("HOME", sc.dir.path())
        .args(["batch", "status", "-c", "config.yaml", "--known-hosts"])
        .arg(fleet.known_hosts())
        .args(["--kubeconfig", &kubeconfig])
        .run();
    show("batch status", &status);
    status
        .stdout_has("Ready")
        .stdout_has("labels_mismatch (label tier is `core`, not `edge`)");
}
