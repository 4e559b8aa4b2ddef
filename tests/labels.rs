//! Labels and taints from the config (all < site < node), on real sshd nodes: what keadm
//! join receives as its arguments, the Ready gate's check of the Node against the stand-in
//! API server (`labels_mismatch`), `batch status`'s view of it, and `--only` by site and
//! label.

use std::time::Duration;

use crate::cluster::nodes_ready_after_keadm;
use crate::common::apiserver::FakeApiServer;
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::Fleet;
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::Test;

const TAINT_SET: &str = "Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Key=\"dedicated\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Value=\"edge\",Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Effect=\"NoSchedule\"";

/// Two nodes in site berlin-1, one in paris: labels for all, for berlin-1 and for node 0.
fn scenario(fleet: &Fleet) -> Scenario<'_> {
    Scenario::new(fleet)
        .keadm(FakeKeadm::new().prints("Install Complete!"))
        .top_yaml("labels: {zone: eu, tier: edge}")
        .top_yaml("taints: [dedicated=edge:NoSchedule]")
        .top_yaml("sites:\n  berlin-1:\n    labels: {zone: berlin}")
        .node_yaml_for(0, "site: berlin-1")
        .node_yaml_for(0, "labels: {tier: gpu, num: '123'}")
        .node_yaml_for(1, "site: berlin-1")
        .node_yaml_for(2, "site: paris")
}

#[test]
fn a_join_carries_its_merged_labels_and_taints_each_as_one_argument() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = scenario(&fleet);
    let out = sc.run(&[]);
    out.status(0);
    let args = |i: usize| {
        fake_keadm::calls(&remote_keadm(fleet.node(i)))[0]
            .args
            .clone()
    };
    let expect = |labels: &[&str]| {
        let mut want = vec!["join".to_string()];
        for label in labels {
            want.push("--labels".into());
            want.push(label.to_string());
        }
        want.extend(["--set".to_string(), TAINT_SET.to_string()]);
        want
    };
    let head = |i: usize| args(i)[..args(i).len() - 3].to_vec();
    assert_eq!(head(0), expect(&["num=123", "tier=gpu", "zone=berlin"]));
    assert_eq!(head(1), expect(&["tier=edge", "zone=berlin"]));
    assert_eq!(head(2), expect(&["tier=edge", "zone=eu"]));
    // keadmCmd's own flags follow, as written.
    assert_eq!(args(2)[args(2).len() - 3..][2], "--token=abc.def");
}

#[test]
fn the_dry_run_shows_the_flags_labels_and_taints_per_node() {
    let fleet = Fleet::builder().nodes(3).start();
    let out = scenario(&fleet).run(&["--dry-run", "--only", "site=berlin-*"]);
    out.status(0)
        .stdout_has("  command:   cd /tmp/kubeedge/keadm && ./keadm join --labels num=123 --labels tier=gpu --labels zone=berlin --set 'Modules.Edged.TailoredKubeletConfig.RegisterWithTaints[0].Key=\"dedicated\"")
        .stdout_has("  labels:    num=123, tier=gpu, zone=berlin\n")
        .stdout_has("  taints:    dedicated=edge:NoSchedule (set when the Node first registers; changing them later needs a reset and a new join)\n")
        .stdout_has("  labels:    tier=edge, zone=berlin\n");
    assert!(!out.stdout.contains("edge-02"), "{}", out.stdout);
}

#[test]
fn only_selects_by_site_and_by_label() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = scenario(&fleet);
    let out = sc.run(&["--only", "label:tier=gpu,site=paris"]);
    out.status(0);
    let summary = out.summary();
    let names: Vec<&str> = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["edge-00", "edge-02"]);
    let none = sc.run(&["--only", "label:zone=mars"]);
    none.status(2)
        .stderr_has("--only label:zone=mars matches no node in the config, so nothing was run.");
}

#[test]
fn a_bad_label_or_taint_is_an_error_at_its_line_with_the_node_and_the_fix() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet)
        .node_yaml("labels: {zone: 'e u;reboot'}")
        .node_yaml("taints: ['gpu=yes:noschedule']");
    let out = sc.run(&["--dry-run"]);
    out.status(2)
        .stderr_has(": node 1 \"edge-00\": labels.zone is `e u;reboot`, which is not a label value: it has characters other than letters, digits, `-`, `_` and `.`; write a value of at most 63")
        .stderr_has(": node 1 \"edge-00\": taints has an entry whose effect `noschedule` is none of NoSchedule, PreferNoSchedule and NoExecute; write the taint as kubectl taint takes it");
    assert!(out.stderr.contains("config.yaml:"), "{}", out.stderr);
}

#[test]
fn a_ready_node_without_the_labels_asked_fails_as_labels_mismatch() {
    let fleet = Fleet::builder().nodes(3).start();
    let api = FakeApiServer::start();
    nodes_ready_after_keadm(&api, &fleet, Duration::from_millis(300));
    // What edgecore registers each Node with: node 0 as asked; node 1 in the wrong zone;
    // node 2 without the taint.
    api.registers_with(
        "edge-00",
        &[("num", "123"), ("tier", "gpu"), ("zone", "berlin")],
        &["dedicated=edge:NoSchedule"],
    );
    api.registers_with(
        "edge-01",
        &[("tier", "edge"), ("zone", "eu")],
        &["dedicated=edge:NoSchedule"],
    );
    api.registers_with("edge-02", &[("tier", "edge"), ("zone", "eu")], &[]);
    let kubeconfig = api.kubeconfig().display().to_string();
    let sc = scenario(&fleet);
    // A cluster without NodeGroups (the CRD absent: 404) gets nothing said of groups.
    let plain = sc.run(&["--kubeconfig", &kubeconfig, "--dry-run"]);
    plain.status(0);
    assert!(!plain.stdout.contains("NodeGroups"), "{}", plain.stdout);
    api.node_groups(&[
        ("berlin", &[], &[("zone", "berlin")]),
        ("named", &["edge-02"], &[]),
        ("gpus", &[], &[("tier", "gpu"), ("vendor", "x")]),
    ]);
    // The plan says which NodeGroup each join will be in, by its labels or its name.
    sc.run(&["--kubeconfig", &kubeconfig, "--dry-run"])
        .status(0)
        .stdout_has(
            "; the joins will be in the NodeGroups berlin (edge-00, edge-01), named (edge-02)\n",
        );
    let out = sc.run(&["--kubeconfig", &kubeconfig]);
    out.status(1);
    let summary = out.summary();
    assert_eq!(summary["nodes"][0]["phase"], "succeeded");
    for (i, difference) in [
        (1, "label zone is `eu`, not `berlin`"),
        (2, "taint dedicated=edge:NoSchedule is missing"),
    ] {
        let node = &summary["nodes"][i];
        assert_eq!(node["failure_class"], "labels_mismatch", "{node}");
        let error = node["error"].as_str().unwrap();
        assert!(
            error.contains(&format!(
                "keadm join exited 0 and the Node {} is Ready, but it does not have the labels and taints the config asks for: {difference}",
                Scenario::name(i)
            )),
            "{error}"
        );
        assert!(
            out.transcript(i)
                .contains("labels_mismatch: keadm join exited 0")
        );
    }
    out.stderr_has("labels_mismatch")
        .stderr_has("kubectl label node NAME KEY=VALUE --overwrite")
        .stderr_has(
            "NodeGroups the joins' Nodes are in (by name or by the labels the config gives them)",
        )
        .stderr_has("  berlin: edge-00 joined; edge-01 did not\n")
        .stderr_has("  named: edge-02 did not\n");

    // A label changed on the cluster side shows in `batch status`, against the config.
    api.label_node("edge-00", "zone", "munich");
    let status = Test::in_dir(sc.dir.path())
        .env("HOME", sc.dir.path())
        .args(["batch", "status", "-c", "config.yaml", "--known-hosts"])
        .arg(sc.fleet.known_hosts())
        .args(["--kubeconfig", &kubeconfig, "--only", "site=berlin-1"])
        .run();
    status
        .stdout_has("Ready")
        .stdout_has(", labels_mismatch (label zone is `munich`, not `berlin`)");
}
