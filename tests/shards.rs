//! `--shard I/N` against one fleet of real sshd nodes, then `batch merge` of the shards'
//! run directories: every node exactly once, and the same node set as one unsharded run.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use keadm_batch::plan::shard_of;

use keadm_batch::outcome::{NodeOutcome, Phase};
use keadm_batch::report::summary::{SUMMARY_VERSION, Summary, Totals};

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::Fleet;
use crate::common::pod::Pod;
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::{Output, Test};
use crate::docs::one_block;

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
    // Each transcript is where it is now, in its shard's run directory, under its name.
    for node in merged["nodes"].as_array().unwrap() {
        let transcript = node["transcript"].as_str().unwrap();
        assert!(
            transcript.starts_with("shard") && transcript.contains("/nodes/"),
            "{transcript}"
        );
        assert!(sc.path(transcript).is_file(), "{transcript}");
    }

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

/// The node name an outside review forged into a shard's summary: a made-up success line
/// for the merged batch_process_log.txt and a terminal escape for the console.
const FORGED: &str = "edge-7\nSuccessfully processed node edge-99\u{1b}]0;pwned\u{7}";

/// A node that succeeded at `address`, as a shard run records it.
fn succeeded(index: usize, name: &str, address: &str) -> NodeOutcome {
    let mut node = NodeOutcome::not_run(index, name, address, Phase::Succeeded, "");
    node.error = None;
    node
}

/// A shard run's summary.json with `nodes`.
fn summary_json(run_id: &str, nodes: Vec<NodeOutcome>) -> String {
    serde_json::to_string_pretty(&Summary {
        version: SUMMARY_VERSION,
        tool: "keadm-batch".into(),
        run_id: run_id.into(),
        config: "config.yaml".into(),
        command_line: None,
        started_at: 1.0,
        finished_at: 2.0,
        interrupted: false,
        totals: Totals::of(&nodes),
        packages: Vec::new(),
        nodes,
        sites: Vec::new(),
        waves: Vec::new(),
        merged_from: Vec::new(),
    })
    .unwrap()
}

/// A refused merge printed nothing on stdout and wrote nothing: no merged directory, and
/// no terminal escape reached the console.
fn refused_without_a_trace(out: &Output) {
    out.status(2);
    assert_eq!(out.stdout, "", "a refused merge prints no result");
    assert!(!out.path("merged").exists(), "a refused merge wrote files");
    assert!(
        !out.stderr.contains(['\u{1b}', '\u{7}']),
        "{:?}",
        out.stderr
    );
}

/// Whoever can write one shard's results (a shared volume) must not be able to forge
/// results for nodes that never ran: the forged name is refused, naming file and field.
#[test]
fn a_forged_name_in_a_shard_summary_is_refused_and_nothing_is_written() {
    let forged = summary_json(
        "s2",
        vec![
            succeeded(1, "edge-1", "10.0.0.2:22"),
            succeeded(7, FORGED, "10.0.0.8:22"),
        ],
    );
    let out = Test::new()
        .file(
            "shard1/summary.json",
            &summary_json("s1", vec![succeeded(0, "edge-0", "10.0.0.1:22")]),
        )
        .file("shard2/summary.json", &forged)
        .args(["batch", "merge", "shard1", "shard2", "--into", "merged"])
        .run();
    refused_without_a_trace(&out);
    // Line 38, column 15: where the forged name's value starts in the pretty-printed file.
    out.stderr_has(
        "keadm-batch: error: shard2/summary.json:38:15: nodes[1].name `edge-7\\x0aSuccessfully processed node edge-99\\x1b]0;pwned\\x07` contains control characters",
    );
    assert_eq!(
        one_block("docs/summary.md", "merge-refusal"),
        out.stderr,
        "docs/summary.md's refused merge is not what this one prints"
    );
}

/// The journal a crashed shard left is read line by line: a forged line is refused with
/// its line number, and only a torn last line (what a crash leaves) is skipped.
#[test]
fn a_forged_journal_line_is_refused_with_its_line_number() {
    let line = |node: &NodeOutcome| serde_json::to_string(node).unwrap() + "\n";
    let forged = line(&succeeded(3, FORGED, "10.0.0.4:22"));
    let column = forged.find("\"edge-7").unwrap() + 1;
    let journal = line(&succeeded(0, "edge-0", "10.0.0.1:22")) + &forged + "{\"index\":4,\"na";
    let out = Test::new()
        .file("shard1/journal.jsonl", &journal)
        .args(["batch", "merge", "shard1", "--into", "merged"])
        .run();
    refused_without_a_trace(&out);
    out.stderr_has(&format!(
        "keadm-batch: error: shard1/journal.jsonl:2:{column}: name `edge-7\\x0aSuccessfully"
    ));

    let phase = line(&succeeded(0, "edge-0", "10.0.0.1:22")).replace("succeeded", "succeded");
    let out = Test::new()
        .file("shard1/journal.jsonl", &phase)
        .args(["batch", "merge", "shard1", "--into", "merged"])
        .run();
    refused_without_a_trace(&out);
    out.stderr_has("shard1/journal.jsonl:1:")
        .stderr_has(": phase cannot be read: unknown variant `succeded`");
}

/// A shard's file is read only when it is a regular file of at most 256 MiB, and no
/// further: a huge one (sparse here: it costs no disk) is refused before it is read, a
/// FIFO (which would block the merge for good) and a symbolic link (which could lead to
/// another run's results, or to /dev/zero) are not opened at all.
#[test]
fn a_huge_fifo_or_linked_shard_file_is_refused_unread() {
    let good = summary_json("s1", vec![succeeded(0, "edge-0", "10.0.0.1:22")]);
    let test = || {
        Test::new()
            .file("shard1/keep", "")
            .file("elsewhere/summary.json", &good)
            .args(["batch", "merge", "shard1", "--into", "merged"])
    };

    let huge = test();
    let file = std::fs::File::create(huge.path().join("shard1/summary.json")).unwrap();
    file.set_len(1 << 30).unwrap();
    let (out, peak_kib) = huge
        .spawn()
        .wait_measured(std::time::Duration::from_secs(60));
    refused_without_a_trace(&out);
    out.stderr_has("shard1/summary.json is 1073741824 bytes, more than the 256 MiB a shard's file may be, so it was not read: a run writes its summary.json and journal.jsonl as regular files of at most 256 MiB.");
    assert!(peak_kib < 64 * 1024, "the merge took {peak_kib} KiB");

    let fifo = test();
    let path = fifo.path().join("shard1/journal.jsonl");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let (out, _) = fifo
        .spawn()
        .wait_measured(std::time::Duration::from_secs(20));
    refused_without_a_trace(&out);
    out.stderr_has("shard1/journal.jsonl is a FIFO, so it was not read");

    let linked = test();
    std::os::unix::fs::symlink(
        "../elsewhere/summary.json",
        linked.path().join("shard1/summary.json"),
    )
    .unwrap();
    let out = linked.run();
    refused_without_a_trace(&out);
    out.stderr_has("shard1/summary.json is a symbolic link, so it was not read");
}

/// `--into` that is a shard's run directory, inside one or around one would overwrite or
/// mix with that shard's own results (an outside review saw `--into shard1` replace
/// shard1's summary.json). It is refused before anything is read or written, paths
/// compared as they resolve (a link, `..`, a directory that does not exist yet); a sibling
/// whose name only starts like a shard's is not refused.
#[test]
fn merge_refuses_an_into_that_is_inside_or_around_a_shard() {
    let shard = summary_json("s1", vec![succeeded(0, "edge-0", "10.0.0.1:22")]);
    let cases = [
        ("shard1", "is the run directory"),
        ("./shard1/", "is the run directory"),
        ("link", "is the run directory"),
        ("new/../shard1", "is the run directory"),
        ("shard1/merged", "is inside the run directory"),
        ("link/new/deeper", "is inside the run directory"),
        ("new/../link/sub", "is inside the run directory"),
        (".", "contains the run directory"),
        ("link/..", "contains the run directory"),
    ];
    // The last again with -c naming a config that is not there: the refusal comes first.
    let with_config = [("link/..", "contains the run directory")];
    for (i, (into, relation)) in cases.into_iter().chain(with_config).enumerate() {
        let test = Test::new().file("shard1/summary.json", &shard);
        std::os::unix::fs::symlink("shard1", test.path().join("link")).unwrap();
        let config: &[&str] = if i < cases.len() {
            &[]
        } else {
            &["-c", "absent.yaml"]
        };
        let out = test
            .args(["batch", "merge"])
            .args(config)
            .args(["shard1", "--into", into])
            .run();
        out.status(2);
        assert_eq!(
            out.stdout, "",
            "--into {into}: a refused merge prints no result"
        );
        out.stderr_has(&format!(
            "keadm-batch: error: --into {into} {relation} shard1 given to merge, so the merged summary.json and batch_process_log.txt written there would overwrite or mix with that shard's own results. Give --into a directory outside every shard's run directory and not around one. Nothing was read or written."
        ));
        assert_eq!(
            std::fs::read_to_string(out.path("shard1/summary.json")).unwrap(),
            shard,
            "--into {into} changed shard1's summary.json"
        );
        for made in [
            "shard1/batch_process_log.txt",
            "shard1/merged",
            "shard1/new",
            "new",
            "summary.json",
        ] {
            assert!(!out.path(made).exists(), "--into {into} made {made}");
        }
    }

    let beside = Test::new()
        .file("shard1/summary.json", &shard)
        .args(["batch", "merge", "shard1", "--into", "shard1-merged"])
        .run();
    beside.status(0);
    assert!(beside.path("shard1-merged/summary.json").is_file());
}

/// A summary that claims success for a node whose journal, beside it, says it failed is
/// refused: a run writes both with the same outcome.
#[test]
fn a_summary_that_contradicts_its_own_journal_is_refused() {
    let mut failed = NodeOutcome::not_run(1, "edge-1", "10.0.0.2:22", Phase::Failed, "boom");
    failed.transcript = None;
    let journal = serde_json::to_string(&succeeded(0, "edge-0", "10.0.0.1:22")).unwrap()
        + "\n"
        + &serde_json::to_string(&failed).unwrap()
        + "\n";
    let out = Test::new()
        .file(
            "shard1/summary.json",
            &summary_json(
                "s1",
                vec![
                    succeeded(0, "edge-0", "10.0.0.1:22"),
                    succeeded(1, "edge-1", "10.0.0.2:22"),
                ],
            ),
        )
        .file("shard1/journal.jsonl", &journal)
        .args(["batch", "merge", "shard1", "--into", "merged"])
        .run();
    refused_without_a_trace(&out);
    out.stderr_has(
        ": nodes[1].phase is succeeded, but shard1/journal.jsonl:2 records node edge-1 as failed.",
    );
}

/// `batch merge -c config.yaml`: every merged node must be a node of that config, at the
/// address the config gives it.
#[test]
fn merge_with_the_config_refuses_nodes_the_config_does_not_have() {
    let config = "keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64]\nnodes:\n".to_string()
        + &(0..3)
            .map(|i| {
                format!(
                    "- nodeName: edge-{i}\n  keadmCmd: join --edgenode-name=edge-{i}\n  ssh:\n    ip: 10.0.0.{}\n    username: root\n    auth:\n      type: agent\n",
                    i + 1
                )
            })
            .collect::<String>();
    let merge_with = |nodes: Vec<NodeOutcome>| {
        Test::new()
            .config(&config)
            .file(
                "shard1/summary.json",
                &summary_json("s1", vec![succeeded(0, "edge-0", "10.0.0.1:22")]),
            )
            .file("shard2/summary.json", &summary_json("s2", nodes))
            .args(["batch", "merge", "-c", "config.yaml", "shard1", "shard2"])
            .args(["--into", "merged"])
            .run()
    };

    let stranger = merge_with(vec![
        succeeded(1, "edge-1", "10.0.0.2:22"),
        succeeded(2, "edge-99", "10.0.0.3:22"),
    ]);
    refused_without_a_trace(&stranger);
    stranger
        .stderr_has("shard2/summary.json:")
        .stderr_has(": nodes[1].name is edge-99, which is not a node of config.yaml");

    let moved = merge_with(vec![succeeded(1, "edge-1", "10.9.9.9:22")]);
    refused_without_a_trace(&moved);
    moved
        .stderr_has(": nodes[0].address is 10.9.9.9:22, but config.yaml gives node edge-1 the address 10.0.0.2:22");

    let honest = merge_with(vec![
        succeeded(1, "edge-1", "10.0.0.2:22"),
        succeeded(2, "edge-2", ""),
    ]);
    honest.status(0);
    let log = std::fs::read_to_string(honest.path("merged/batch_process_log.txt")).unwrap();
    assert_eq!(log.lines().count(), 3, "{log}");
}

/// The shards Job's own command, read from docs/kubernetes/shards-job.yaml, run as its pod
/// runs it: as uid 65532, with its volumes shaped as kubelet makes them (root:fsGroup,
/// mode 2777, no sticky bit) at the manifest's paths, against loopback nodes. The pod
/// stages keadm under its --staging-dir, in directories nobody else can write, and runs
/// its shard.
#[test]
fn the_shards_jobs_pod_stages_and_runs_its_shard() {
    const NODES: usize = 2;
    let fleet = Fleet::builder().nodes(NODES).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("joined"));
    let pod = Pod::from_manifest("docs/kubernetes/shards-job.yaml");
    // The keadm release comes with the pod's "image" here; a site downloads it or mounts it.
    pod.copy_in(&sc.packages_dir(), "/srv/keadm-packages");
    let config = sc.config_text().replace(
        &sc.packages_dir().display().to_string(),
        "/srv/keadm-packages",
    );
    pod.write_secret("config.yaml", &config);
    let known_hosts: String = fleet.nodes().iter().map(|n| n.known_hosts_line()).collect();
    pod.write_secret("known_hosts", &known_hosts);
    let shards: u64 = pod.env("SHARDS").parse().unwrap();
    // The pod whose shard holds the first node.
    let shard = shard_of(&Scenario::name(0), shards);
    let out = pod.run((shard - 1) as u32, &[("KEADM_TOKEN", "abc.def")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "--- stdout:\n{stdout}\n--- stderr:\n{stderr}"
    );

    let in_shard: Vec<usize> = (0..NODES)
        .filter(|i| shard_of(&Scenario::name(*i), shards) == shard)
        .collect();
    for i in 0..NODES {
        assert_eq!(
            fake_keadm::calls(&remote_keadm(fleet.node(i))).len(),
            usize::from(in_shard.contains(&i)),
            "node {i} (shard {}), the pod ran shard {shard}:\n{stderr}",
            shard_of(&Scenario::name(i), shards)
        );
    }
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(pod.path(&format!("/results/shard-{shard}/run/summary.json")))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(summary["totals"]["succeeded"], in_shard.len(), "{summary}");

    // keadm was staged on the staging volume, and every directory between the volume and
    // the binary is the pod user's and closed to others.
    let volume = pod.path("/var/cache/keadm-batch");
    let binary = find_file(&volume, "keadm")
        .unwrap_or_else(|| panic!("no keadm staged under {}", volume.display()));
    for dir in binary.ancestors().skip(1).take_while(|d| *d != volume) {
        let meta = std::fs::symlink_metadata(dir).unwrap();
        assert!(meta.is_dir(), "{}", dir.display());
        assert_eq!(meta.uid(), pod.uid(), "{}", dir.display());
        assert_eq!(
            meta.mode() & 0o022,
            0,
            "{} is writable by others",
            dir.display()
        );
    }
}

/// The first regular file called `name` under `dir`, depth first.
fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let kind = entry.file_type().ok()?;
        if kind.is_file() && entry.file_name() == name {
            return Some(path);
        }
        if kind.is_dir()
            && let Some(found) = find_file(&path, name)
        {
            return Some(found);
        }
    }
    None
}
