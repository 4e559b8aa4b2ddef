//! Rollouts in waves on real sshd nodes: `--wave N|P%`, `--max-fail N|P%` per wave,
//! `--wave-pause` and its Ctrl-C, a retry that goes on where the rollout stopped, the
//! upgrades' default of 10% waves in the plan, and the flags' bad values.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::apiserver::{Behaviour, FakeApiServer, keadm_exited};
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fake_upgrade;
use crate::common::fleet::Fleet;
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::{Output, Test};

/// A keadm that fails on a node whose /tmp has a `fail` file (each node has its own).
fn fails_where_marked() -> FakeKeadm {
    FakeKeadm::new().runs("if [ -e /tmp/fail ]; then exit 1; fi")
}

fn mark_failing(fleet: &Fleet, i: usize) {
    std::fs::write(fleet.node(i).tmp_path("fail"), "").unwrap();
}

/// How often keadm ran on fleet node `i`.
fn keadm_runs(fleet: &Fleet, i: usize) -> usize {
    fake_keadm::calls(&remote_keadm(fleet.node(i))).len()
}

/// Each summary node's name, phase and wave, in config order.
fn phases_and_waves(summary: &Value) -> Vec<(String, String, Option<u64>)> {
    summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["phase"].as_str().unwrap().to_string(),
                n["wave"].as_u64(),
            )
        })
        .collect()
}

/// summary.json's `waves`: each wave's number, succeeded, failed, tolerance and result.
fn wave_results(summary: &Value) -> Vec<(u64, u64, u64, Value, String)> {
    summary["waves"]
        .as_array()
        .unwrap_or_else(|| panic!("no waves in {summary}"))
        .iter()
        .map(|w| {
            (
                w["number"].as_u64().unwrap(),
                w["succeeded"].as_u64().unwrap(),
                w["failed"].as_u64().unwrap(),
                w["tolerance"].clone(),
                w["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// An API server on which fleet node `i`'s Node registers once keadm exited on it, and
/// then does as `behaviour(i)` says.
pub(crate) fn registering_after_keadm(
    fleet: &Fleet,
    behaviour: impl Fn(usize) -> Behaviour,
) -> FakeApiServer {
    let api = FakeApiServer::start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        let calls = fake_keadm::calls_path(&remote_keadm(node));
        api.node_on(
            &Scenario::name(i),
            move || keadm_exited(&calls),
            behaviour(i),
        );
    }
    api
}

/// The log line of fleet node `i`.
fn log_line(out: &Output, i: usize) -> String {
    out.log_line_starting(&format!("Failed to process node {}: ", Scenario::name(i)))
}

/// The walk-through: 20 nodes in waves of 25% with no failure tolerated, one
/// node of the second wave fails. Wave 1 succeeds, wave 2 stops the rollout, waves 3
/// and 4 are not touched, and the recap and summary.json say so; once the fault is
/// fixed, `--retry-failed` finishes the rest in waves 2, 3 and 4, each gated.
#[test]
fn a_failed_wave_stops_the_rollout_and_a_retry_finishes_it() {
    let fleet = Fleet::builder().nodes(20).start();
    mark_failing(&fleet, 6);
    let sc = Scenario::new(&fleet).keadm(fails_where_marked());
    let out = sc.run(&["--wave", "25%", "--max-fail", "0"]);
    out.status(1);
    out.stderr_has("Processing 20 nodes in 4 waves of 5 (at most 0 failed per wave), 5 at once;");
    out.stderr_has("wave 2 of 4: 5 nodes, at most 0 may fail (--max-fail 0)");
    let summary = out.summary();
    let nodes = phases_and_waves(&summary);
    for (i, (name, phase, wave)) in nodes.iter().enumerate() {
        assert_eq!(*wave, Some(i as u64 / 5 + 1), "{name}'s wave");
        match i {
            0..5 => assert_eq!(phase, "succeeded", "{name}"),
            6 => assert_eq!(phase, "failed", "{name}"),
            // Wave 2's other nodes started with node 6 (5 at once) or were skipped.
            5..10 => {}
            _ => assert_eq!(phase, "skipped", "{name}"),
        }
    }
    assert_eq!(out.node_summary(6)["exit_status"], 1);
    for i in 0..5 {
        assert_eq!(keadm_runs(&fleet, i), 1, "node {i} of wave 1 ran");
    }
    let reason = "skipped: wave 2 of 4 stopped the rollout: 1 of its 5 nodes did not succeed (--max-fail 0); nothing was done on this node";
    for i in 10..20 {
        assert!(
            !fake_keadm::calls_path(&remote_keadm(fleet.node(i))).exists()
                && !remote_keadm(fleet.node(i)).exists(),
            "node {i} of a later wave was not touched"
        );
        assert_eq!(
            log_line(&out, i),
            format!("Failed to process node {}: {reason}", Scenario::name(i))
        );
    }
    // Each untouched node once (in a range), not a SKIPPED line each and again in the recap.
    // (Wave 2's nodes that had not started when node 6 failed are among them.)
    out.stderr_has(" nodes, not started: skipped: wave 2 of 4")
        .stderr_has("..edge-19\n")
        .stderr_lacks("SKIPPED edge-");
    let zero = Value::from(0);
    let waves = wave_results(&summary);
    assert_eq!(waves[0], (1, 5, 0, zero.clone(), "passed".to_string()));
    assert_eq!(
        (waves[1].0, waves[1].2, &waves[1].4),
        (2, 1, &"stopped the rollout".to_string())
    );
    assert_eq!(waves[2], (3, 0, 0, zero.clone(), "not started".to_string()));
    assert_eq!(waves[3], (4, 0, 0, zero.clone(), "not started".to_string()));
    assert_eq!(
        summary["waves"][3]["nodes"],
        serde_json::json!(["edge-15", "edge-16", "edge-17", "edge-18", "edge-19"])
    );
    out.stderr_has("Wave 2 of 4 stopped the rollout: 1 of its 5 nodes did not succeed, more than its tolerance of 0. 10 nodes of waves 3 to 4 were not touched.");
    out.stderr_has("--retry-failed --wave '25%' --max-fail 0");
    // What a rollout in waves writes is documented.
    crate::docs::documented_fields("docs/summary.md", "summary-example", &summary);
    let journal = std::fs::read_to_string(out.latest_run().join("journal.jsonl")).unwrap();
    assert!(journal.contains("\"name\":\"edge-19\"") && journal.contains("\"wave\":4"));

    // The fault is fixed: the retry goes on from wave 2, each node in the wave it had.
    std::fs::remove_file(fleet.node(6).tmp_path("fail")).unwrap();
    let ran_in_wave_2: Vec<usize> = (5..10).filter(|&i| keadm_runs(&fleet, i) == 1).collect();
    let retry = sc.run(&["--retry-failed", "--wave", "25%", "--max-fail", "0"]);
    retry.status(0);
    retry.stderr_has("in waves 2 to 4 of the earlier run");
    let summary = retry.summary();
    let nodes = phases_and_waves(&summary);
    let retried: Vec<usize> = (5..20)
        .filter(|i| !ran_in_wave_2.contains(i) || *i == 6)
        .collect();
    assert_eq!(nodes.len(), retried.len(), "{nodes:?}");
    for ((name, phase, wave), i) in nodes.iter().zip(&retried) {
        assert_eq!(*name, Scenario::name(*i));
        assert_eq!(phase, "succeeded", "{name}");
        assert_eq!(*wave, Some(*i as u64 / 5 + 1), "{name} kept its wave");
    }
    let numbers: Vec<u64> = wave_results(&summary).iter().map(|w| w.0).collect();
    assert_eq!(numbers, [2, 3, 4]);
    assert!(
        wave_results(&summary)
            .iter()
            .all(|w| w.4 == "passed" && w.2 == 0)
    );
    for i in 0..5 {
        assert_eq!(
            keadm_runs(&fleet, i),
            1,
            "node {i} of wave 1 was not run again"
        );
    }
    assert_eq!(keadm_runs(&fleet, 6), 2);
    for i in 10..20 {
        assert_eq!(keadm_runs(&fleet, i), 1, "node {i} ran once, in the retry");
    }
}

/// The same with upgrades, which go in waves without being asked (`--wave 25%` here, to
/// match the case): the failed upgrade of wave 2 is rolled back to its backup
/// (`--backup --rollback-on-failure`), the nodes of
/// waves 3 and 4 keep their old edgecore untouched, and once the fault is gone a retry
/// upgrades the rest.
#[test]
fn an_upgrade_rollout_stops_at_its_failed_wave_and_a_retry_finishes_it() {
    let fleet = Fleet::builder().nodes(20).start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        fake_upgrade::edgecore_running(node, &Scenario::name(i), "v1.23.0");
    }
    // The cluster's gate: each Node Ready on the version its edgecore runs.
    let api = FakeApiServer::start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        fake_upgrade::node_in_cluster(&api, node, &Scenario::name(i));
    }
    let kubeconfig = api.kubeconfig().display().to_string();
    fake_upgrade::fault(fleet.node(7), "kb-upgrade-fails", "");
    let sc = Scenario::new(&fleet)
        .keadm(fake_upgrade::keadm())
        .cmd("upgrade edge --toVersion v1.23.1");
    let out = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--wave",
        "25%",
        "--max-fail",
        "0",
        "--backup",
        "--rollback-on-failure",
    ]);
    out.status(1);
    let failed = out.node_summary(7);
    assert_eq!(failed["phase"], "failed", "{failed}");
    assert_eq!(failed["wave"], 2);
    assert_eq!(failed["upgrade"]["rollback"]["succeeded"], true, "{failed}");
    // Back on its old version, and Ready on it in the cluster.
    assert_eq!(failed["upgrade"]["rollback"]["ready"], true, "{failed}");
    assert_eq!(
        api.node_kubeedge_version(&Scenario::name(7)).as_deref(),
        Some("v1.23.0")
    );
    for i in 0..5 {
        let node = out.node_summary(i);
        assert_eq!(node["phase"], "succeeded");
        // Wave 1 passed its gate: Ready in the cluster on the new version.
        assert_eq!(
            node["cluster"]["version"], "v1.32.10-kubeedge-v1.23.1",
            "{node}"
        );
        assert_eq!(
            api.node_kubeedge_version(&Scenario::name(i)).as_deref(),
            Some("v1.23.1")
        );
        assert_eq!(
            fake_upgrade::running_version(fleet.node(i)).as_deref(),
            Some("v1.23.1")
        );
    }
    assert_eq!(
        fake_upgrade::running_version(fleet.node(7)).as_deref(),
        Some("v1.23.0")
    );
    for i in 10..20 {
        assert!(
            !remote_keadm(fleet.node(i)).exists(),
            "node {i} was not touched"
        );
        assert_eq!(
            fake_upgrade::running_version(fleet.node(i)).as_deref(),
            Some("v1.23.0")
        );
        assert_eq!(out.node_summary(i)["phase"], "skipped");
    }
    let results: Vec<String> = wave_results(&out.summary())
        .into_iter()
        .map(|w| w.4)
        .collect();
    assert_eq!(
        results,
        [
            "passed",
            "stopped the rollout",
            "not started",
            "not started"
        ]
    );
    out.stderr_has("Wave 2 of 4 stopped the rollout: 1 of its 5 nodes did not succeed, more than its tolerance of 0. 10 nodes of waves 3 to 4 were not touched.");

    std::fs::remove_file(fleet.node(7).tmp_path("kb-upgrade-fails")).unwrap();
    let retry = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--retry-failed",
        "--max-fail",
        "0",
        "--backup",
        "--rollback-on-failure",
    ]);
    retry.status(0);
    let numbers: Vec<u64> = wave_results(&retry.summary()).iter().map(|w| w.0).collect();
    assert_eq!(numbers, [2, 3, 4]);
    for i in 0..20 {
        assert_eq!(
            fake_upgrade::running_version(fleet.node(i)).as_deref(),
            Some("v1.23.1"),
            "node {i}"
        );
        assert_eq!(
            api.node_kubeedge_version(&Scenario::name(i)).as_deref(),
            Some("v1.23.1"),
            "node {i}"
        );
    }
}

/// The first Ctrl-C during `--wave-pause` stops the rollout: the run exits with 130 and
/// the next wave's nodes are never started.
#[test]
fn ctrl_c_during_the_pause_starts_no_later_wave() {
    let fleet = Fleet::builder().nodes(4).start();
    let sc = Scenario::new(&fleet);
    let running = sc.command(&["--wave", "2", "--wave-pause", "30s"]).spawn();
    // Wave 1 is recorded; the pause follows it at once.
    let log = sc.path("batch_process_log.txt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "wave 1 did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    running.interrupt();
    let out = running.wait();
    assert_eq!(out.status.code(), Some(130), "{}", out.stderr);
    out.stderr_has("Processing 4 nodes in 2 waves of 2 (at most 0 failed per wave), 2 at once, 30s between waves;");
    for i in [2, 3] {
        assert!(
            !remote_keadm(fleet.node(i)).exists(),
            "node {i} was not started"
        );
        assert_eq!(
            log_line(&out, i),
            format!(
                "Failed to process node {}: not started: run interrupted",
                Scenario::name(i)
            )
        );
    }
    let summary = out.summary();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["totals"]["succeeded"], 2);
    assert_eq!(summary["totals"]["interrupted"], 2);
    let results: Vec<String> = wave_results(&summary).into_iter().map(|w| w.4).collect();
    assert_eq!(results, ["passed", "not started"]);
    out.stderr_has(
        "The rollout was stopped before wave 2 of 2. 2 nodes of wave 2 were not touched.",
    );
}

/// `--max-fail 20%` with waves of 5 tolerates one failure per wave, not two.
#[test]
fn a_share_of_each_wave_may_fail() {
    let fleet = Fleet::builder().nodes(11).start();
    for i in [2, 6, 7] {
        mark_failing(&fleet, i);
    }
    let sc = Scenario::new(&fleet).keadm(fails_where_marked());
    let out = sc.run(&["--wave", "5", "--max-fail", "20%"]);
    out.status(1);
    let summary = out.summary();
    let waves = wave_results(&summary);
    assert_eq!(waves[0], (1, 4, 1, Value::from(1), "passed".to_string()));
    assert_eq!(
        waves[1],
        (2, 3, 2, Value::from(1), "stopped the rollout".to_string())
    );
    // 20% of the last wave's one node, rounded down: none may fail.
    assert_eq!(
        waves[2],
        (3, 0, 0, Value::from(0), "not started".to_string())
    );
    assert!(
        !remote_keadm(fleet.node(10)).exists(),
        "wave 3 was not touched"
    );
    assert!(log_line(&out, 10).ends_with(
        "skipped: wave 2 of 3 stopped the rollout: 2 of its 5 nodes did not succeed (--max-fail 20%: at most 1 of 5); nothing was done on this node"
    ));
    for i in [0, 1, 3, 4, 5, 8, 9] {
        assert_eq!(out.node_summary(i)["phase"], "succeeded", "node {i}");
    }
}

/// With a kubeconfig a wave is done once its joins are Ready: the next wave starts only
/// after the verdicts, and a node that never turns Ready counts against the wave.
#[test]
fn with_a_cluster_a_wave_waits_for_ready_and_a_node_not_ready_stops_the_rollout() {
    let fleet = Fleet::builder().nodes(6).start();
    let api = registering_after_keadm(&fleet, |i| {
        if i == 2 {
            Behaviour::NotReady {
                reason: "KubeletNotReady".into(),
                message: "cni plugin not initialized".into(),
            }
        } else {
            Behaviour::ReadyAfter(Duration::from_millis(1500))
        }
    });
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let kubeconfig = api.kubeconfig().display().to_string();
    let out = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        "4",
        "--wave",
        "2",
        "--max-fail",
        "0",
    ]);
    out.status(1);
    let summary = out.summary();
    let results: Vec<String> = wave_results(&summary).into_iter().map(|w| w.4).collect();
    assert_eq!(results, ["passed", "stopped the rollout", "not started"]);
    for i in [0, 1, 3] {
        let node = out.node_summary(i);
        assert_eq!(node["phase"], "succeeded", "{node}");
        assert!(node["cluster"]["ready_after"].as_f64().is_some(), "{node}");
    }
    assert_eq!(out.node_summary(2)["failure_class"], "not_ready");
    for i in [4, 5] {
        assert!(
            !remote_keadm(fleet.node(i)).exists(),
            "node {i} was not touched"
        );
    }
    // Wave 2's keadm started only after wave 1's Nodes were Ready, 1.5 s after its
    // keadm exited: the wave waited for the verdicts, not only for keadm.
    let call = |i: usize| fake_keadm::calls(&remote_keadm(fleet.node(i)))[0].clone();
    let wave_1_exit = [0, 1]
        .map(|i| call(i).end.unwrap())
        .into_iter()
        .fold(0.0, f64::max);
    for i in [2, 3] {
        assert!(
            call(i).start > wave_1_exit + 1.4,
            "node {i} started before wave 1 was Ready: {} vs {wave_1_exit}",
            call(i).start
        );
    }
}

/// `batch merge` takes shards run in waves and shards that were not: the nodes keep
/// their waves, and no one list of waves is made of rollouts that were each their own.
#[test]
fn merge_takes_shards_with_and_without_waves() {
    let fleet = Fleet::builder().nodes(4).start();
    let sc = Scenario::new(&fleet);
    sc.run(&["--only", "edge-0[01]", "--wave", "1", "--run-dir", "a"])
        .status(0);
    sc.run(&["--only", "edge-0[23]", "--run-dir", "b"])
        .status(0);
    let merged = Test::in_dir(sc.dir.path())
        .args(["batch", "merge", "a", "b", "--output", "json"])
        .run();
    merged.status(0);
    let summary: Value = serde_json::from_str(&merged.stdout).unwrap();
    let waves: Vec<Option<u64>> = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["wave"].as_u64())
        .collect();
    assert_eq!(waves, [Some(1), Some(2), None, None]);
    assert!(summary.get("waves").is_none(), "{summary}");
    // The shard in waves has them in its own summary.
    let a: Value =
        serde_json::from_str(&std::fs::read_to_string(sc.path("a/summary.json")).unwrap()).unwrap();
    assert_eq!(a["waves"].as_array().unwrap().len(), 2);
}

/// A config of `count` nodes on loopback (a dry run connects to none) with `cmd`, in
/// which `{name}` is each node's name.
fn config(count: usize, cmd: &str) -> String {
    let mut yaml = "keadm:\n  keadmVersion: v1.23.1\nnodes:\n".to_string();
    for i in 0..count {
        let name = format!("edge-{i:02}");
        yaml.push_str(&format!(
            "  - nodeName: {name}\n    keadmCmd: {}\n    ssh: {{ip: 127.0.0.1, username: root, auth: {{type: agent}}}}\n",
            cmd.replace("{name}", &name)
        ));
    }
    yaml
}

fn dry_run(yaml: &str, extra: &[&str]) -> Output {
    Test::new()
        .config(yaml)
        .args(["batch", "-c", "config.yaml", "--dry-run"])
        .args(extra)
        .run()
}

/// Upgrades go in waves of 10% unless told otherwise, and the plan shows them, their
/// gate and what a failed wave does; `--wave 100%` is one wave, and joins go in none.
#[test]
fn upgrades_go_in_waves_of_ten_percent_by_default() {
    let upgrades = config(20, "upgrade edge --toVersion v1.23.1");
    let out = dry_run(&upgrades, &[]);
    out.status(0);
    out.stdout_has("  waves:       10, one after another\n");
    out.stdout_has(
        "  gate:        each node's keadm command exits 0; nothing is waited for in the cluster\n",
    );
    out.stdout_has("no node of a later wave is touched");
    out.stdout_has("  wave 1:      2 nodes, at most 0 may fail (none may fail without --max-fail): edge-00, edge-01\n");
    out.stdout_has("  wave 10:     2 nodes, at most 0 may fail (none may fail without --max-fail): edge-18, edge-19\n");
    let out = dry_run(&upgrades, &["--max-fail", "1", "--wave-pause", "2m"]);
    out.stdout_has("  waves:       10, one after another, 120s apart (--wave-pause)\n");
    out.stdout_has("  wave 3:      2 nodes, at most 1 may fail (--max-fail 1): edge-04, edge-05\n");
    for off in [
        dry_run(&upgrades, &["--wave", "100%"]),
        dry_run(&config(20, "join --edgenode-name={name} --token=a.b"), &[]),
    ] {
        off.status(0);
        assert!(!off.stdout.contains("waves:"), "{}", off.stdout);
        assert!(!off.stdout.contains("wave 1:"), "{}", off.stdout);
    }
    let joins = dry_run(
        &config(4, "join --edgenode-name={name} --token=a.b"),
        &["--wave", "3"],
    );
    joins.stdout_has(
        "  wave 2:      1 node, at most 0 may fail (none may fail without --max-fail): edge-03\n",
    );
}

#[test]
fn bad_wave_values_are_usage_errors() {
    let yaml = config(2, "join --edgenode-name={name} --token=a.b");
    for (args, says) in [
        (&["--wave", "0"][..], "`0` is no wave size"),
        (&["--wave", "0%"][..], "`0%` is no wave size"),
        (
            &["--wave", "101%"][..],
            "a share of the selected nodes from 1% to 100% (25%)",
        ),
        (
            &["--wave-pause", "5x"][..],
            "`5x` is not a duration: write seconds (90 or 90s), minutes (5m) or hours (1h)",
        ),
        (
            &["--max-fail", "150%"][..],
            "`150%` is neither a number of nodes (5) nor a share of them from 0% to 100% (25%)",
        ),
    ] {
        let out = dry_run(&yaml, args);
        out.status(2);
        out.stderr_has(says);
        assert!(out.stdout.is_empty(), "{args:?}: no plan");
    }
}

/// At scale a stopped rollout says what matters first and each node once: the wave that
/// stopped it before any list of nodes, the untouched nodes once (as a range, not a line
/// each while running and again in the recap), the failed node with its class and a
/// short reason (not the whole keadm command), ONE command to go on that carries the
/// run's own flags with their values, and report.html named at the end.
#[test]
fn a_stopped_rollout_names_each_untouched_node_once_and_one_next_command_with_its_flags() {
    let fleet = Fleet::builder().nodes(12).start();
    let api = registering_after_keadm(&fleet, |_| {
        Behaviour::ReadyAfter(Duration::from_millis(100))
    });
    mark_failing(&fleet, 1);
    let sc = Scenario::new(&fleet).keadm(fails_where_marked());
    let kubeconfig = api.kubeconfig().display().to_string();
    let out = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--wave",
        "4",
        "--max-fail",
        "0",
    ]);
    out.status(1);
    eprintln!("stderr:\n{}", out.stderr);
    // Each untouched node once: the range's ends in the range, the others in it.
    for i in 4..12 {
        assert!(!remote_keadm(fleet.node(i)).exists(), "node {i} untouched");
        let name = Scenario::name(i);
        assert_eq!(
            out.stderr.matches(name.as_str()).count(),
            usize::from(i == 4 || i == 11),
            "{name} is named once: {}",
            out.stderr
        );
    }
    assert_eq!(out.stderr.matches("edge-04..edge-11").count(), 1);
    out.stderr_lacks("SKIPPED edge-");
    let head = out
        .stderr
        .find("Wave 1 of 3 stopped the rollout")
        .expect("the wave's verdict");
    let listed = out.stderr.find("edge-04..edge-11").unwrap();
    assert!(head < listed, "the verdict comes first:\n{}", out.stderr);
    // The failed node: its class and a short reason, never the keadm command.
    let failed: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("edge-01 ") || l.contains("edge-01,"))
        .collect();
    assert!(!failed.is_empty(), "{}", out.stderr);
    for line in &failed {
        assert!(!line.contains("./keadm join"), "{line}");
        assert!(line.len() < 200, "{line}");
    }
    out.stderr_has("[unknown]");
    // One command to go on, with the flags this run was given.
    let then: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("--retry-failed"))
        .collect();
    assert_eq!(then.len(), 1, "{}", out.stderr);
    for flags in [
        "--wave 4 --max-fail 0".to_string(),
        format!("--known-hosts {}", fleet.known_hosts().display()),
        format!("--kubeconfig {kubeconfig}"),
        format!("--staging-dir {}", sc.staging_dir().display()),
    ] {
        assert!(then[0].contains(&flags), "{flags} in {}", then[0]);
    }
    // report.html is named with the run's places, at the end.
    let latest = out.latest_run();
    let run = latest
        .parent()
        .unwrap()
        .join(std::fs::read_link(&latest).unwrap());
    let report = format!("Report: {}", run.join("report.html").display());
    let tail: Vec<&str> = out.stderr.lines().rev().take(4).collect();
    assert!(
        tail.iter().any(|l| *l == report),
        "{report} in the last lines: {tail:?}"
    );
}
