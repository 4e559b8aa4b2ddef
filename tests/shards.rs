//! `--shard I/N` against one fleet of real sshd nodes, then `batch merge` of the shards'
//! run directories: every node exactly once, and the same node set as one unsharded run.

use std::collections::BTreeSet;

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::Fleet;
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::{Output, Test};

const NODES: usize = 12;
const SHARDS: usize = 4;

fn names(summary: &serde_json::Value) -> Vec<String> {
    summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect()
}

fn merge(sc: &Scenario, args: &[&str]) -> Output {
    Test::in_dir(sc.dir.path())
        .args(["batch", "merge"])
        .args(args)
        .run()
}

#[test]
fn four_shards_merge_into_exactly_one_run() {
    let fleet = Fleet::builder().nodes(NODES).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().prints("joined"))
        .max_run_num(6);

    let dry = sc.run(&["--shard", "2/4", "--dry-run"]);
    dry.status(0);
    assert!(
        dry.stdout
            .contains("shard:       2/4 (the nodes whose sha256(nodeName) mod 4 is 1)"),
        "{}",
        dry.stdout
    );

    let mut per_shard = Vec::new();
    for i in 1..=SHARDS {
        let out = sc.run(&[
            "--shard",
            &format!("{i}/{SHARDS}"),
            "--run-dir",
            &format!("shard{i}"),
        ]);
        out.status(0);
        assert!(
            out.stderr.contains(&format!("of shard {i}/{SHARDS}")),
            "{}",
            out.stderr
        );
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(sc.path(&format!("shard{i}/summary.json"))).unwrap(),
        )
        .unwrap();
        per_shard.push(names(&summary));
    }
    // Shard runs placed with --run-dir leave batch_runs/latest alone (docs/summary.md):
    // on a shared directory they would otherwise race for it.
    assert!(
        !sc.path("batch_runs").exists(),
        "--run-dir runs created batch_runs/latest"
    );
    // The shards are disjoint on the fleet itself: keadm ran once on every node.
    for i in 0..NODES {
        assert_eq!(
            fake_keadm::calls(&remote_keadm(fleet.node(i))).len(),
            1,
            "node {i}"
        );
    }
    assert!(
        per_shard.iter().filter(|s| !s.is_empty()).count() >= 2,
        "12 names should spread over several shards: {per_shard:?}"
    );

    let whole = sc.run(&["--run-dir", "whole"]);
    whole.status(0);
    let whole_summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sc.path("whole/summary.json")).unwrap())
            .unwrap();
    let whole_names: BTreeSet<String> = names(&whole_summary).into_iter().collect();
    assert_eq!(whole_names.len(), NODES);

    let out = merge(
        &sc,
        &[
            "shard1", "shard2", "shard3", "shard4", "--output", "json", "--into", "merged",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let merged: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let merged_names = names(&merged);
    assert_eq!(merged_names.len(), NODES, "every node exactly once");
    let merged_set: BTreeSet<String> = merged_names.iter().cloned().collect();
    assert_eq!(merged_set.len(), NODES, "no node twice");
    assert_eq!(
        merged_set, whole_names,
        "the same nodes as one unsharded run"
    );
    assert_eq!(merged["totals"]["selected"], NODES);
    assert_eq!(merged["totals"]["succeeded"], NODES);
    assert!(
        merged["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["phase"] == "succeeded")
    );
    assert_eq!(merged["merged_from"].as_array().unwrap().len(), SHARDS);
    // In config order, like one run's summary.
    assert_eq!(merged_names, names(&whole_summary));
    let log = std::fs::read_to_string(sc.path("merged/batch_process_log.txt")).unwrap();
    let expected: Vec<String> = (0..NODES)
        .map(|i| format!("Successfully processed node {}", Scenario::name(i)))
        .collect();
    assert_eq!(log.lines().collect::<Vec<_>>(), expected);

    // Text output: the totals and the keadm-style listing.
    let text = merge(&sc, &["shard1", "shard2", "shard3", "shard4"]);
    assert_eq!(text.status.code(), Some(0));
    let stdout = &text.stdout;
    assert!(
        stdout.contains("Merged 4 run directories: 12 nodes: 12 succeeded"),
        "{stdout}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("Successfully processed node "))
            .count(),
        NODES
    );

    // Overlapping inputs: a node in two of them is an error naming it and both dirs.
    let overlap = merge(&sc, &["shard1", "shard2", "shard3", "shard4", "whole"]);
    assert_eq!(overlap.status.code(), Some(2));
    let stderr = &overlap.stderr;
    assert!(
        stderr.contains("appears in two run directories") && stderr.contains("whole"),
        "{stderr}"
    );
}
