//! `--drain` on real sshd nodes against the stand-in API server (tests/common/apiserver.rs):
//! each node that is not a join has its Node cordoned and its pods evicted before its
//! command, honouring PodDisruptionBudgets, and uncordoned once it succeeded (after the
//! Ready gate on the new version: the upgrades here are the stand-in keadm of
//! tests/common/fake_upgrade.rs with a real small edgecore per node); a failed drain stops
//! the node before anything runs on it; a node that fails stays cordoned.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::apiserver::{Behaviour, Eviction, FakeApiServer, Owner, keadm_exited};
use crate::common::edge_state::edge_etc;
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fake_upgrade::{self, edgecore_running, fault};
use crate::common::fleet::{Fleet, Node};
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::Output;

const DAY: Duration = Duration::from_secs(86_400);
const UPGRADE: &str = "upgrade edge --toVersion v1.23.1";
const CORDONED_BY: &str = "keadm-batch/cordoned-by-run";

fn run(sc: &Scenario, api: &FakeApiServer, extra: &[&str]) -> Output {
    let kubeconfig = api.kubeconfig().display().to_string();
    let mut args = vec!["--kubeconfig", kubeconfig.as_str(), "--drain"];
    args.extend_from_slice(extra);
    sc.run(&args)
}

/// Fleet node `i` runs edgecore v1.23.0, and the cluster has its Node, Ready on the
/// version its edgecore runs (as cloudcore shows it).
fn upgradable(api: &FakeApiServer, fleet: &Fleet, i: usize) {
    edgecore_running(fleet.node(i), &Scenario::name(i), "v1.23.0");
    fake_upgrade::node_in_cluster(api, fleet.node(i), &Scenario::name(i));
}

/// edge-00's Node, there from before the run, Ready on v1.23.0: below the upgrade's
/// target (a Node already on it would not be drained).
fn node_below_target(api: &FakeApiServer) {
    api.existing_node("edge-00", true, 3 * DAY);
    api.node_runs("edge-00", "v1.23.0");
}

/// The upgrade to v1.23.1 on every node but `cmd_for`'s.
fn upgrades(fleet: &Fleet) -> Scenario<'_> {
    Scenario::new(fleet)
        .keadm(fake_upgrade::keadm())
        .cmd(UPGRADE)
}

/// The eviction requests so far, as `POST path`.
fn evictions(api: &FakeApiServer) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.starts_with("POST ") && r.contains("/eviction"))
        .collect()
}

/// The one run of the fake keadm on `node`.
fn the_keadm_call(node: &Node) -> fake_keadm::Call {
    let calls = fake_keadm::calls(&remote_keadm(node));
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls[0].clone()
}

fn evicted(summary_node: &serde_json::Value) -> Vec<String> {
    let mut pods: Vec<String> = summary_node["drain"]["evicted"]
        .as_array()
        .map(|a| a.iter().map(|p| p.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    pods.sort();
    pods
}

#[test]
fn a_node_is_drained_before_its_command_and_uncordoned_once_it_succeeds_and_a_join_is_not_drained()
{
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    // Node 0 joins (its Node appears once keadm exits); node 1 is upgraded.
    let calls0 = remote_keadm(fleet.node(0)).with_extension("calls");
    api.node_on(
        "edge-00",
        move || keadm_exited(&calls0),
        Behaviour::ReadyAfter(Duration::from_millis(300)),
    );
    upgradable(&api, &fleet, 1);
    api.pod(
        "edge-01",
        "default",
        "web-1",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::from_millis(1500)),
    );
    // A budget that refuses once, then allows: asked again.
    api.pod(
        "edge-01",
        "default",
        "web-2",
        Owner::ReplicaSet,
        Eviction::RefusedTimes(1),
    );
    api.pod(
        "edge-01",
        "default",
        "bare",
        Owner::Bare,
        Eviction::Allowed(Duration::ZERO),
    );
    for (name, owner) in [
        ("proxy", Owner::DaemonSet),
        ("static", Owner::Mirror),
        ("job-done", Owner::Finished),
    ] {
        api.pod(
            "edge-01",
            "kube-system",
            name,
            owner,
            Eviction::Refused("none".into()),
        );
    }
    api.pod(
        "edge-77",
        "default",
        "elsewhere",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::ZERO),
    );
    let sc = upgrades(&fleet).cmd_for(
        0,
        "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-00 --token=abc.def",
    );
    let out = run(&sc, &api, &[]);
    out.status(0);
    let summary = out.summary();
    let upgraded = &summary["nodes"][1];
    assert_eq!(upgraded["phase"], "succeeded", "{upgraded}");
    // It passed the Ready gate on the new version before it was uncordoned.
    assert_eq!(
        upgraded["cluster"]["version"], "v1.32.10-kubeedge-v1.23.1",
        "{upgraded}"
    );
    // Every pod a drain evicts is gone; the DaemonSet's, the mirror and the finished
    // pods stay, and another node's pods are not touched.
    assert_eq!(
        api.pods_on("edge-01"),
        [
            "kube-system/job-done",
            "kube-system/proxy",
            "kube-system/static"
        ]
    );
    assert_eq!(api.pods_on("edge-77"), ["default/elsewhere"]);
    let asked = evictions(&api);
    assert_eq!(
        asked
            .iter()
            .filter(|r| r.contains("/namespaces/default/pods/web-2/eviction"))
            .count(),
        2,
        "refused once, asked again: {asked:?}"
    );
    assert!(
        !asked.iter().any(|r| r.contains("kube-system")),
        "{asked:?}"
    );
    assert!(
        api.requests()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/pods?")
                && r.contains("fieldSelector=spec.nodeName%3Dedge-01")),
        "{:?}",
        api.requests()
    );
    // Cordoned with the run's id, then uncordoned: the Node is as before.
    let run_id = summary["run_id"].as_str().unwrap();
    let patches = api.patches();
    assert_eq!(
        patches,
        [
            (
                "edge-01".to_string(),
                json!({"metadata": {"annotations": {CORDONED_BY: run_id}}, "spec": {"unschedulable": true}})
            ),
            (
                "edge-01".to_string(),
                json!({"metadata": {"annotations": {CORDONED_BY: null}}, "spec": {"unschedulable": null}})
            ),
        ]
    );
    assert!(!api.cordoned("edge-01"));
    assert!(api.annotations("edge-01").get(CORDONED_BY).is_none());
    // In that order around keadm: the cordon and every eviction before it started, and
    // the uncordon after it ended.
    let call = the_keadm_call(fleet.node(1));
    let timed = api.requests_at();
    let at = |what: &str| -> Vec<f64> {
        timed
            .iter()
            .filter(|(_, r)| r.contains(what))
            .map(|(t, _)| *t)
            .collect()
    };
    let patched = at("PATCH /api/v1/nodes/edge-01");
    assert!(patched[0] < call.start, "{timed:?} {call:?}");
    assert!(patched[1] > call.end.unwrap(), "{timed:?} {call:?}");
    assert!(at("/eviction").iter().all(|t| *t < call.start), "{timed:?}");
    // The summary and the transcripts say so.
    let drain = &upgraded["drain"];
    assert_eq!(drain["node_name"], "edge-01");
    assert_eq!(drain["cordoned"], true);
    assert_eq!(drain["already_cordoned"], false);
    assert_eq!(drain["uncordoned"], true);
    assert_eq!(
        evicted(upgraded),
        ["default/bare", "default/web-1", "default/web-2"]
    );
    let transcript = out.transcript(1);
    for line in [
        "[keadm-batch] drain: cordoned the Node edge-01",
        "[keadm-batch] drain: the Node edge-01 has 3 pod(s) to evict (default/bare, default/web-1, default/web-2); left alone: kube-system/job-done (finished), kube-system/proxy (a DaemonSet's, which ignores the cordon), kube-system/static (a mirror pod, which the node's own config runs)",
        "[keadm-batch] drain: evicted the pod default/bare (no controller owns it: nothing recreates it elsewhere)",
        "[keadm-batch] drain: the eviction of default/web-2 was refused, asking again every 5 s: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 1 healthy pods and has 1 currently",
        "[keadm-batch] drain: evicted the pod default/web-2\n",
        "[keadm-batch] drain: the pods evicted are gone from the Node edge-01",
        "[keadm-batch] drain: uncordoned the Node edge-01: the node succeeded",
    ] {
        assert!(transcript.contains(line), "{line:?} not in:\n{transcript}");
    }
    // Uncordoned only once the Ready gate had passed.
    let ready = transcript
        .find("the cluster has the Node edge-01 Ready on the new version")
        .unwrap_or_else(|| panic!("{transcript}"));
    assert!(
        ready
            < transcript
                .find("drain: uncordoned the Node edge-01")
                .unwrap(),
        "{transcript}"
    );
    // The join's Node did not exist: it is not drained, and says so.
    let joined = &summary["nodes"][0];
    assert_eq!(joined["phase"], "succeeded", "{joined}");
    assert_eq!(
        joined["drain"]["not_drained"],
        "a join, whose Node does not exist before it runs"
    );
    assert!(
        out.transcript(0)
            .contains("[keadm-batch] drain: the node is not drained (--drain): a join"),
        "{}",
        out.transcript(0)
    );
    assert!(!patches.iter().any(|(name, _)| name == "edge-00"));
    assert!(!out.stderr.contains("left cordoned"), "{}", out.stderr);
}

#[test]
fn a_budget_that_never_allows_fails_the_node_before_anything_runs_and_lifts_the_cordon() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    node_below_target(&api);
    edge_etc(node, "edge-00");
    api.pod(
        "edge-00",
        "default",
        "web-1",
        Owner::ReplicaSet,
        Eviction::Refused("web-pdb".into()),
    );
    let sc = Scenario::new(&fleet).cmd(UPGRADE);
    let out = run(&sc, &api, &["--drain-timeout", "6s"]);
    out.status(1);
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["phase"], "failed", "{n}");
    assert_eq!(n["failed_in"], "draining");
    assert_eq!(n["failure_class"], "drain_failed");
    out.log_has("Failed to process node edge-00: the Node edge-00 was not drained, so nothing ran on the node; it was uncordoned again: it was not drained within 6 s (--drain-timeout): 1 pod(s) left: default/web-1 (its eviction was refused: Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web-pdb needs 1 healthy pods and has 1 currently)");
    // Nothing ran on the node: keadm was not even sent.
    assert!(!remote_keadm(node).exists());
    assert!(!node.tmp_path("kubeedge").exists());
    // The cordon is lifted again, and the pod is where it was.
    assert!(!api.cordoned("edge-00"));
    assert_eq!(api.patches().len(), 2, "{:?}", api.patches());
    assert_eq!(api.pods_on("edge-00"), ["default/web-1"]);
    // The refusal is asked again every few seconds, not in kube-rs's own quick retries.
    let asked = evictions(&api).len();
    assert!((2..=3).contains(&asked), "{:?}", evictions(&api));
    assert_eq!(n["drain"]["cordoned"], true);
    assert_eq!(n["drain"]["uncordoned"], true);
    assert!(n["drain"].get("evicted").is_none(), "{n}");
    let transcript = out.transcript(0);
    assert!(
        transcript.contains("[keadm-batch] failure class: drain_failed"),
        "{transcript}"
    );
    assert!(
        transcript.contains("[keadm-batch] drain: uncordoned the Node edge-00 again"),
        "{transcript}"
    );
    out.stderr_has("Not drained (nothing ran on the node)")
        .stderr_has("kubectl get pdb -A");
    // The class is one --retry-failed --class takes.
    let again = run(
        &sc,
        &api,
        &[
            "--retry-failed",
            "--class",
            "drain_failed",
            "--drain-timeout",
            "1",
        ],
    );
    again.stderr_has("Retrying 1 node(s)");
}

#[test]
fn a_node_whose_node_cannot_be_cordoned_fails_untouched() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    node_below_target(&api);
    edge_etc(node, "edge-00");
    api.fail_patches();
    let sc = Scenario::new(&fleet).cmd(UPGRADE);
    let out = run(&sc, &api, &[]);
    out.status(1);
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["failure_class"], "drain_failed", "{n}");
    assert_eq!(n["failed_in"], "draining");
    out.log_has(&format!(
        "Failed to process node edge-00: the Node edge-00 could not be cordoned (--drain), so nothing ran on the node: the API server https://127.0.0.1:{}/ could not be asked to cordon the node edge-00: 500 InternalError: etcdserver: request timed out",
        api.port
    ));
    assert!(!api.cordoned("edge-00"));
    assert_eq!(n["drain"]["cordoned"], false);
    assert!(!remote_keadm(node).exists());
}

#[test]
fn a_node_cordoned_before_the_run_is_drained_and_stays_cordoned() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    upgradable(&api, &fleet, 0);
    api.cordon("edge-00");
    api.pod(
        "edge-00",
        "default",
        "web-1",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::ZERO),
    );
    let sc = upgrades(&fleet);
    let out = run(&sc, &api, &[]);
    out.status(0);
    assert!(api.cordoned("edge-00"));
    assert!(api.patches().is_empty(), "{:?}", api.patches());
    assert!(api.pods_on("edge-00").is_empty());
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["drain"]["already_cordoned"], true);
    assert_eq!(n["drain"]["uncordoned"], false);
    assert_eq!(evicted(n), ["default/web-1"]);
    out.stderr_has("Nodes left cordoned in the cluster")
        .stderr_has("  edge-00 (node edge-00): cordoned before the run");
    let transcript = out.transcript(0);
    assert!(
        transcript.contains(
            "[keadm-batch] drain: the Node edge-00 stays cordoned, as it was before the run"
        ),
        "{transcript}"
    );
}

#[test]
fn a_failed_upgrade_leaves_its_node_cordoned_and_a_rerun_that_succeeds_uncordons_it() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    upgradable(&api, &fleet, 0);
    fault(node, "kb-upgrade-fails", "");
    let sc = upgrades(&fleet);
    let out = run(&sc, &api, &[]);
    out.status(1);
    let first_run = out.summary()["run_id"].as_str().unwrap().to_string();
    assert!(api.cordoned("edge-00"));
    assert_eq!(api.annotations("edge-00")[CORDONED_BY], first_run.as_str());
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["phase"], "failed");
    // keadm's report says the image pull failed.
    assert_eq!(n["failure_class"], "image_pull_stalled", "{n}");
    assert_eq!(n["drain"]["cordoned"], true);
    assert_eq!(n["drain"]["uncordoned"], false);
    out.stderr_has("Nodes left cordoned in the cluster")
        .stderr_has("  edge-00 (node edge-00): the node did not succeed");
    assert!(
        out.transcript(0).contains(
            "[keadm-batch] drain: the Node edge-00 stays cordoned: the node did not succeed"
        ),
        "{}",
        out.transcript(0)
    );
    // Fixed, and run again: the cordon this tool left is its own to lift.
    std::fs::remove_file(node.tmp_path("kb-upgrade-fails")).unwrap();
    let again = run(&sc, &api, &["--retry-failed"]);
    again.status(0);
    let n = &again.summary()["nodes"][0];
    assert_eq!(n["drain"]["earlier_run"], first_run.as_str(), "{n}");
    assert_eq!(n["drain"]["already_cordoned"], false);
    assert_eq!(n["drain"]["uncordoned"], true);
    assert!(!api.cordoned("edge-00"));
    assert!(api.annotations("edge-00").get(CORDONED_BY).is_none());
    assert!(
        again.transcript(0).contains(&format!(
            "[keadm-batch] drain: the Node edge-00 was left cordoned by the earlier run {first_run}; this run uncordons it if the node succeeds"
        )),
        "{}",
        again.transcript(0)
    );
}

/// A node that already runs the upgrade's target is left alone: its Node is neither
/// cordoned nor drained, and keadm does not run.
#[test]
fn a_node_already_on_the_target_is_neither_cordoned_nor_drained() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    edgecore_running(fleet.node(0), "edge-00", "v1.23.1");
    fake_upgrade::node_in_cluster(&api, fleet.node(0), "edge-00");
    api.pod(
        "edge-00",
        "default",
        "web-1",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::from_millis(100)),
    );
    let sc = upgrades(&fleet);
    let out = run(&sc, &api, &[]);
    out.status(0);
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["phase"], "succeeded", "{n}");
    assert_eq!(n["upgrade"]["unchanged"], true, "{n}");
    assert_eq!(n["drain"]["cordoned"], false, "{n}");
    assert_eq!(
        n["drain"]["not_drained"],
        "the Node edge-00 is Ready on v1.23.1 already, the upgrade's target, so the upgrade leaves it alone"
    );
    assert!(evictions(&api).is_empty());
    assert!(!api.cordoned("edge-00"));
    assert_eq!(api.pods_on("edge-00"), ["default/web-1"]);
    // keadm was uploaded but not run: the node already runs the target.
    assert!(fake_keadm::calls(&remote_keadm(fleet.node(0))).is_empty());
}

#[test]
fn drain_needs_its_permissions_and_a_kubeconfig_before_any_node_is_touched() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    node_below_target(&api);
    let sc = Scenario::new(&fleet).cmd(UPGRADE);
    // The dry run asks for every permission and says what the drain will do.
    run(&sc, &api, &["--dry-run", "--drain-timeout", "90s"])
        .status(0)
        .stdout_has("; each node that is not a join has its Node cordoned and drained before its command (--drain: evictions honour PodDisruptionBudgets, within 90 s) and uncordoned once it succeeded");
    let reviews = api
        .requests()
        .iter()
        .filter(|r| r.contains("selfsubjectaccessreviews"))
        .count();
    assert_eq!(
        reviews, 6,
        "get, list, watch and patch nodes, list pods, create pods/eviction"
    );
    for (verb, resource) in [
        ("patch", "nodes"),
        ("list", "pods"),
        ("create", "pods/eviction"),
    ] {
        let api = FakeApiServer::start();
        node_below_target(&api);
        api.deny(verb, resource);
        run(&sc, &api, &[]).status(2).stderr_has(&format!(
            "keadm-batch: error: The kubeconfig's user may not {verb} {resource} (https://127.0.0.1:{}/ answered the access review so).",
            api.port
        ));
        assert!(
            !api.requests().iter().any(|r| r.starts_with("PATCH ")),
            "{:?}",
            api.requests()
        );
    }
    assert!(!node.tmp_path("kubeedge").exists(), "no node was touched");
    // No kubeconfig at all: refused, with the fix.
    sc.command(&["--drain"])
        .env("KUBECONFIG", "")
        .run()
        .status(2)
        .stderr_has("keadm-batch: error: --drain needs the cluster, and no kubeconfig is given: add --kubeconfig FILE (or the config's kubeconfig, or set KUBECONFIG), or leave out --drain. No node was touched.");
    assert!(!node.tmp_path("kubeedge").exists(), "no node was touched");
}

#[test]
fn a_second_ctrl_c_ends_a_drain_that_waits_and_lifts_the_cordon() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    node_below_target(&api);
    edge_etc(node, "edge-00");
    // Evicted, but the node's edgecore never confirms: the drain waits (up to 10 min).
    api.pod(
        "edge-00",
        "default",
        "web-1",
        Owner::ReplicaSet,
        Eviction::Stuck,
    );
    let sc = Scenario::new(&fleet).cmd(UPGRADE);
    let kubeconfig = api.kubeconfig();
    let running = sc
        .command(&[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--drain",
            "--drain-timeout",
            "10m",
        ])
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Evicted, and listed since: the drain is waiting for the pod to go.
    while !api
        .requests()
        .iter()
        .skip_while(|r| !r.contains("/eviction"))
        .any(|r| r.starts_with("GET /api/v1/pods?"))
    {
        assert!(Instant::now() < deadline, "{:?}", api.requests());
        std::thread::sleep(Duration::from_millis(100));
    }
    running.interrupt_twice();
    let out = running.wait();
    out.status(130);
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["phase"], "interrupted", "{n}");
    assert_eq!(n["failed_in"], "draining");
    assert!(n.get("failure_class").is_none(), "{n}");
    assert_eq!(
        n["error"],
        "the drain of the Node edge-00 was cancelled by the operator before anything ran on the node; it was uncordoned again"
    );
    assert!(!api.cordoned("edge-00"));
    assert!(!remote_keadm(node).exists());
}

/// The requests that write to the cluster: cordons, uncordons, deletes, evictions.
fn writes(api: &FakeApiServer) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| {
            r.starts_with("PATCH ")
                || r.starts_with("DELETE ")
                || (r.starts_with("POST ") && r.contains("/eviction"))
        })
        .collect()
}

/// Review finding N1, reproduced: a reset with --drain and --delete-nodes writes only to
/// the node's own edge Node. Node 0's Node of its name is a control-plane Node (with
/// coredns on it); node 1's edgecore.yaml names another Node than its Node; node 2's Node
/// lists an address node 2 does not have. None is cordoned, drained or deleted, and none
/// runs its reset. Node 3, whose edge Node is at its SSH address, is drained and deleted.
#[test]
fn drain_and_delete_nodes_write_only_to_the_nodes_own_edge_node() {
    let fleet = Fleet::builder().nodes(4).start();
    let api = FakeApiServer::start();
    edge_etc(fleet.node(0), "edge-00");
    api.kubelet_node("edge-00", "control-plane", "10.9.9.9");
    api.pod(
        "edge-00",
        "kube-system",
        "coredns-abc",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::ZERO),
    );
    edge_etc(fleet.node(1), "edge-99");
    api.existing_node("edge-01", true, DAY);
    api.node_runs("edge-01", "v1.23.0");
    edge_etc(fleet.node(2), "edge-02");
    api.existing_node("edge-02", true, DAY);
    api.node_runs("edge-02", "v1.23.0");
    api.node_address("edge-02", "10.9.9.9");
    edge_etc(fleet.node(3), "edge-03");
    api.existing_node("edge-03", true, DAY);
    api.node_runs("edge-03", "v1.23.0");
    api.node_address("edge-03", fleet.node(3).host());
    api.pod(
        "edge-03",
        "default",
        "web-3",
        Owner::ReplicaSet,
        Eviction::Allowed(Duration::ZERO),
    );
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("rm -rf /etc/kubeedge"))
        .cmd("reset edge --force");
    // The dry run says which Nodes are written to.
    run(&sc, &api, &["--delete-nodes", "--dry-run"])
        .status(0)
        .stdout_has("; a Node is written to only when it is the node's own: a KubeEdge edge Node that the node's edgecore.yaml, read over SSH before its command, names, at one of the node's addresses where it lists any (otherwise the node is refused as name_mismatch)\n");
    let out = run(&sc, &api, &["--delete-nodes"]);
    out.status(1);
    let written = writes(&api);
    assert_eq!(
        written,
        [
            "PATCH /api/v1/nodes/edge-03?",
            "POST /api/v1/namespaces/default/pods/web-3/eviction?",
            "DELETE /api/v1/nodes/edge-03?"
        ],
        "only node 3's Node, and the pod on it, are written to"
    );
    assert!(api.has_node("edge-00") && api.has_node("edge-01") && api.has_node("edge-02"));
    assert!(!api.has_node("edge-03"), "node 3's own Node is deleted");
    assert_eq!(api.pods_on("edge-00"), ["kube-system/coredns-abc"]);
    assert!(!api.cordoned("edge-00") && !api.cordoned("edge-01") && !api.cordoned("edge-02"));
    for (i, why) in [
        (
            0,
            "the Node edge-00 is not a KubeEdge edge Node (no node-role.kubernetes.io/edge label, kubelet version v1.31.0)",
        ),
        (
            1,
            "the node's /etc/kubeedge/config/edgecore.yaml says its Node is edge-99 (hostnameOverride), not edge-01",
        ),
        (
            2,
            "the Node edge-02 lists the address(es) 10.9.9.9, and the node has none of them",
        ),
    ] {
        let n = out.node_summary(i);
        assert_eq!(n["phase"], "failed", "{n}");
        assert_eq!(n["failure_class"], "name_mismatch", "{n}");
        assert_eq!(n["failed_in"], "draining", "{n}");
        let error = n["error"].as_str().unwrap();
        assert!(
            error.starts_with(&format!(
                "--drain writes only to this node's own Node, and {why}"
            )),
            "{error}"
        );
        assert!(
            error.ends_with("nothing was written to the cluster, and nothing ran on the node"),
            "{error}"
        );
        assert!(
            fake_keadm::calls(&remote_keadm(fleet.node(i))).is_empty(),
            "node {i}'s reset did not run"
        );
        assert!(out.transcript(i).contains(why), "{}", out.transcript(i));
    }
    out.stderr_has("name_mismatch");
    let ok = out.node_summary(3);
    assert_eq!(ok["phase"], "succeeded", "{ok}");
    assert_eq!(ok["cluster"]["deleted"], true, "{ok}");
    assert_eq!(evicted(&ok), ["default/web-3"]);
    let transcript = out.transcript(3);
    assert!(
        transcript.contains(&format!(
            "the Node edge-03 is a KubeEdge edge Node, named as the node's edgecore.yaml names it, at {}, an address of the node",
            fleet.node(3).host()
        )),
        "{transcript}"
    );
}
