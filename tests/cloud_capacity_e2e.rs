//! CloudCore's capacity and the joins' pace on a real cloud (tests/common/real_cloud.rs)
//! with real edge nodes (tests/cloud_e2e.rs's), when the real binaries are at hand: run
//! `cargo test --test main cloud_capacity_e2e -- --ignored --nocapture` with
//! `KECLOUD_BIN` and `KECLOUD_CRDS` set (as tests/cloud_e2e.rs says). Ignored otherwise.
//!
//! 1. cloudcore with `nodeLimit` 2, its ConfigMap and Deployment made as the Helm chart
//!    makes them, 3 edge nodes: under `--preflight strict` the run stops before any node
//!    is touched, naming the figures; under `warn` the three join, two are Ready, and
//!    the third (cloudhub refused its session, "reach node limit" in cloudcore's log) names
//!    the limit in its cause: on v1.23.1 its Node registers and stays NotReady
//!    (`not_ready`, `CSINode is not yet initialized`).
//! 2. The figures behind `--joins-in-flight`'s default: three joins at once, then three
//!    one at a time, on fresh nodes each, against cloudcore's default limit; each run's
//!    wall time and its nodes' times from start to Ready are printed (a measurement, not a
//!    goal: nothing here asserts a speed).

use std::time::Instant;

use crate::cloud_e2e::{
    READY_TIMEOUT, edge_node, join_cmd, mount_points, scenario, tail, write_kit,
};
use crate::common::containerd::Containerd;
use crate::common::fleet::Fleet;
use crate::common::real_cloud::{CloudBinaries, RealCloud, ready_condition};
use crate::common::scenario::{Scenario, VERSION};
use crate::common::test::Output;
use crate::keadm_e2e::{MadeMountPoints, keadm_version};

/// The real binaries `KECLOUD_BIN` names, of the release the tests expect.
pub(crate) fn binaries() -> CloudBinaries {
    let bins = CloudBinaries::from_env().expect(
        "KECLOUD_BIN is not set. Point it at real etcd, kube-apiserver, kubectl, cloudcore, keadm and edgecore binaries (and KECLOUD_CRDS at KubeEdge's build/crds).",
    );
    let version = keadm_version(&bins.path("keadm"));
    assert_eq!(version, VERSION, "KECLOUD_BIN's keadm is {version}");
    bins
}

/// `n` edge nodes (tests/cloud_e2e.rs's, each with a CNI bridge) and the offline kit
/// their joins read; what it made goes, runtimes first, when it is dropped.
pub(crate) struct EdgeFleet {
    _runtimes: Vec<Containerd>,
    _made: MadeMountPoints,
    pub(crate) kit: tempfile::TempDir,
    pub(crate) fleet: Fleet,
}

impl EdgeFleet {
    pub(crate) fn start(bins: &CloudBinaries, n: usize) -> EdgeFleet {
        let fleet = Fleet::builder().nodes(n).start();
        let made = mount_points();
        let runtimes = (0..n).map(|i| edge_node(fleet.node(i), true)).collect();
        let kit = tempfile::Builder::new()
            .prefix("cloud-capacity-kit-")
            .tempdir_in("/var/tmp")
            .unwrap();
        write_kit(kit.path(), bins);
        EdgeFleet {
            _runtimes: runtimes,
            _made: made,
            kit,
            fleet,
        }
    }
}

/// Joins of fleet nodes `nodes` to `cloud`, each with its own kubelet port.
fn joins<'f>(
    fleet: &'f Fleet,
    nodes: &[usize],
    kit: &std::path::Path,
    cloud: &RealCloud,
    token: &str,
) -> Scenario<'f> {
    let mut sc = scenario(fleet, nodes, kit);
    for &i in nodes {
        sc = sc.cmd_for(i, &join_cmd(cloud, token, i, VERSION));
    }
    sc
}

fn show(what: &str, out: &Output) {
    eprintln!(
        "cloud_capacity_e2e: {what}: exit {}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.code(),
        out.stdout,
        out.stderr
    );
}

#[test]
#[ignore = "needs a real KubeEdge cloud's binaries: run with --ignored and KECLOUD_BIN, KECLOUD_CRDS set (README, Tests)"]
fn a_real_cloud_at_its_node_limit_is_found_before_any_node_and_names_the_refused_node() {
    let bins = binaries();
    let cloud = RealCloud::start_with(&bins, Some(2));
    cloud.chart_objects(2, 1);
    let token = cloud.token();
    let kubeconfig = cloud.kubeconfig.display().to_string();
    let edges = EdgeFleet::start(&bins, 3);
    let (fleet, kit) = (&edges.fleet, &edges.kit);
    let all = [0, 1, 2];

    // The dry run (under warn) shows the figures and warns; strict stops before any node
    // is touched.
    // Each run's scenario is kept while its output is read: its directory holds the run.
    let plan = joins(fleet, &all, kit.path(), &cloud, &token).preflight("warn");
    let out = plan.run(&["--kubeconfig", &kubeconfig, "--dry-run"]);
    show("the dry run", &out);
    out.status(0)
        .stdout_has("CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore), and 0 edge Node(s) are registered")
        .stderr_has("and 3 of these joins would add theirs, 1 more than it serves");
    let strict = joins(fleet, &all, kit.path(), &cloud, &token);
    let out = strict.run(&["--kubeconfig", &kubeconfig]);
    show("strict", &out);
    out.status(2).stderr_has(
        "CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore); 0 edge Node(s) are registered in the cluster at ",
    ).stderr_has("and 3 of these joins would add theirs, 1 more than it serves").stderr_has("No node was touched.");
    for i in all {
        assert!(
            !fleet.node(i).tmp_path("kubeedge").exists(),
            "edge-0{i} was touched"
        );
    }
    assert!(cloud.nodes().is_empty(), "no Node registered");

    // Warn: the three join; cloudhub refuses the third session, whose cause says why. On
    // KubeEdge v1.23.1 that node's Node still registers (its first messages reach the
    // cloud) and stays NotReady: `not_ready`; a release that drops them would make it
    // `not_registered`. Either names the limit.
    let warn = joins(fleet, &all, kit.path(), &cloud, &token).preflight("warn");
    let out = warn.run(&["--kubeconfig", &kubeconfig, "--ready-timeout", "150"]);
    show("warn", &out);
    for i in all {
        eprintln!(
            "cloud_capacity_e2e: edge-0{i}'s transcript ends:\n{}",
            tail(&out, i)
        );
    }
    out.status(1)
        .stderr_has("and 3 of these joins would add theirs, 1 more than it serves");
    let summary = out.summary();
    let nodes = summary["nodes"].as_array().unwrap();
    let ready = nodes.iter().filter(|n| n["phase"] == "succeeded").count();
    let refused: Vec<&serde_json::Value> =
        nodes.iter().filter(|n| n["phase"] != "succeeded").collect();
    assert_eq!((ready, refused.len()), (2, 1), "{summary}");
    let class = refused[0]["failure_class"].as_str().unwrap();
    assert!(
        ["not_ready", "not_registered"].contains(&class),
        "{summary}"
    );
    let error = refused[0]["error"].as_str().unwrap();
    let name = refused[0]["name"].as_str().unwrap();
    assert!(
        error.contains(&format!("CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore) and 2 other edge Nodes are registered: cloudhub refuses node {name} (\"reach node limit\") and serves it nothing. Raise nodeLimit or add cloudcore replicas")),
        "{error}"
    );
    let log = cloud.log("cloudcore");
    let limit_line = log
        .lines()
        .find(|l| l.contains("reach node limit"))
        .unwrap_or_else(|| panic!("cloudcore never refused a node:\n{log}"));
    eprintln!("cloud_capacity_e2e: cloudcore: {limit_line}");
    assert!(
        limit_line.contains(&format!("Fail to serve node {name}, reach node limit")),
        "{limit_line}"
    );
    let node = cloud.node(name);
    eprintln!(
        "cloud_capacity_e2e: {name} ({class}): its Node: {:?}",
        node.as_ref().and_then(ready_condition)
    );
}

/// Each run's wall time and its nodes' start-to-Ready times, as printed.
fn timed(label: &str, out: &Output, wall: f64) {
    let summary = out.summary();
    let mut times: Vec<f64> = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            assert_eq!(n["phase"], "succeeded", "{n}");
            n["finished_at"].as_f64().unwrap() - n["started_at"].as_f64().unwrap()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    eprintln!(
        "cloud_capacity_e2e: {label}: wall {wall:.1} s; start to Ready per node: {}",
        times
            .iter()
            .map(|t| format!("{t:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[test]
#[ignore = "needs a real KubeEdge cloud's binaries: run with --ignored and KECLOUD_BIN, KECLOUD_CRDS set (README, Tests)"]
fn three_joins_at_once_and_one_at_a_time_on_a_real_cloudcore() {
    let bins = binaries();
    let cloud = RealCloud::start(&bins);
    let token = cloud.token();
    let kubeconfig = cloud.kubeconfig.display().to_string();
    let edges = EdgeFleet::start(&bins, 6);
    let (fleet, kit) = (&edges.fleet, &edges.kit);
    for (label, nodes, pace) in [
        ("3 joins at once (--joins-in-flight 3)", [0, 1, 2], "3"),
        (
            "3 joins one at a time (--joins-in-flight 1)",
            [3, 4, 5],
            "1",
        ),
    ] {
        let sc = joins(fleet, &nodes, kit.path(), &cloud, &token);
        let cpu = (
            cloud.cpu_seconds("cloudcore"),
            cloud.cpu_seconds("kube-apiserver"),
        );
        let started = Instant::now();
        let out = sc.run(&[
            "--kubeconfig",
            &kubeconfig,
            "--ready-timeout",
            READY_TIMEOUT,
            "--joins-in-flight",
            pace,
        ]);
        let wall = started.elapsed().as_secs_f64();
        if out.code() != 0 {
            show(label, &out);
        }
        out.status(0);
        timed(label, &out, wall);
        eprintln!(
            "cloud_capacity_e2e: {label}: CPU used meanwhile: cloudcore {:.2} s, kube-apiserver {:.2} s",
            cloud.cpu_seconds("cloudcore") - cpu.0,
            cloud.cpu_seconds("kube-apiserver") - cpu.1
        );
    }
    assert_eq!(cloud.nodes().len(), 6);
}
