//! Faults on real loopback sshd nodes. Each case puts one faulty node among healthy ones
//! and checks three things: the faulty node's line says what happened, every healthy
//! node still enrolls, and every node gets exactly one line in batch_process_log.txt.
//!
//! Per-node keadm behaviour comes from marker files: each node has its own /tmp, so the
//! fake keadm's `if [ -e /tmp/<marker> ]` is true on the faulty node only.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, NodeOpt, Tarpit};
use crate::common::image_archive::sha256_hex;
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::Output;

/// Asserts one line per node of `0..nodes` and that every node but `faulty` succeeded;
/// returns the faulty node's reason.
fn one_fault(out: &Output, nodes: usize, faulty: usize) -> String {
    every_node_has_one_line(out, nodes, Some(faulty));
    let prefix = format!("Failed to process node {}: ", Scenario::name(faulty));
    let line = out.log_line_starting(&prefix);
    eprintln!("faulty node's line: {line}");
    line[prefix.len()..].to_string()
}

fn every_node_has_one_line(out: &Output, nodes: usize, faulty: Option<usize>) {
    let lines = out.log_lines();
    assert_eq!(
        lines.len(),
        nodes,
        "one line per node:\n{}\n--- stderr:\n{}",
        lines.join("\n"),
        out.stderr
    );
    for i in 0..nodes {
        let name = Scenario::name(i);
        let success = format!("Successfully processed node {name}");
        let failure = format!("Failed to process node {name}: ");
        let mine: Vec<&String> = lines
            .iter()
            .filter(|l| **l == success || l.starts_with(&failure))
            .collect();
        assert_eq!(mine.len(), 1, "node {name}: {lines:#?}");
        if Some(i) != faulty {
            assert_eq!(
                *mine[0], success,
                "a healthy node was hurt\n--- stderr:\n{}",
                out.stderr
            );
        }
    }
}

/// What the scenario's offline package holds as the amd64 keadm.
fn staged_keadm(fake: &FakeKeadm) -> String {
    format!("{}# arch=amd64\n", fake.script())
}

/// Temporary upload files left in a node's upload dir.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sshd_killed_mid_upload_fails_that_node_only() {
    let fleet = Fleet::builder().nodes(3).start();
    // Uploads stream over exec; without tar on the node the 32 MiB binary goes as it is
    // (not as a small tarball), which leaves a window of a few hundred ms to hit.
    fleet.node(1).hide_tool("tar");
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().padded_to(32 << 20));
    let running = sc.command(&[]).spawn();
    let upload_dir = fleet.node(1).tmp_path("kubeedge/keadm");
    // Kill once a part of the file is on the node.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !temporaries(&upload_dir)
        .iter()
        .any(|t| std::fs::metadata(upload_dir.join(t)).is_ok_and(|m| m.len() >= 64 * 1024))
    {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the upload to start"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = fleet.node(1).kill_session_sshds();
    assert!(!killed.is_empty(), "no session sshd found");
    let out = running.wait();
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason.starts_with("Cannot upload the file keadm"),
        "{reason}"
    );
    assert_eq!(out.summary()["nodes"][1]["phase"], "failed");
    assert!(
        !remote_keadm(fleet.node(1)).exists(),
        "no half file in place"
    );
    for i in [0, 2] {
        assert_eq!(
            std::fs::read_to_string(remote_keadm(fleet.node(i))).unwrap(),
            staged_keadm(&sc.keadm)
        );
    }
}

#[test]
fn sshd_killed_while_keadm_runs_fails_that_node_only() {
    let fleet = Fleet::builder().nodes(3).start();
    std::fs::write(fleet.node(1).tmp_path("slow-keadm"), "").unwrap();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("if [ -e /tmp/slow-keadm ]; then sleep 30; fi"));
    let running = sc.command(&[]).spawn();
    let script = remote_keadm(fleet.node(1));
    wait_for("keadm to start on node 1", Duration::from_secs(20), || {
        !fake_keadm::calls(&script).is_empty()
    });
    let started = Instant::now();
    assert!(!fleet.node(1).kill_session_sshds().is_empty());
    let out = running.wait();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the dead connection was noticed in {:?}",
        started.elapsed()
    );
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason
            .starts_with("failed to execute keadm command cd /tmp/kubeedge/keadm && ./keadm join"),
        "{reason}"
    );
    assert_eq!(out.summary()["nodes"][1]["failed_in"], "running");
}

#[test]
fn a_tarpit_hits_the_connect_deadline() {
    let fleet = Fleet::builder().nodes(3).start();
    let tarpit = Tarpit::start();
    let sc = Scenario::new(&fleet)
        .endpoint_for(1, tarpit.endpoint())
        .node_yaml_for(1, "  connectTimeoutSeconds: 1")
        .node_yaml_for(1, "retries: 1");
    let started = Instant::now();
    let out = sc.run(&[]);
    assert!(started.elapsed() < Duration::from_secs(15));
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason.contains("timed out after 1.0 s") && reason.contains("after 2 attempts"),
        "{reason}"
    );
    assert_eq!(out.summary()["nodes"][1]["connect_attempts"], 2);
    assert_eq!(out.summary()["nodes"][1]["failed_in"], "connecting");
}

#[test]
fn a_full_remote_dir_says_no_space_left() {
    let fleet = Fleet::builder().nodes(3).start();
    let mount = fleet
        .node(1)
        .shell("mkdir -p /tmp/full && mount -t tmpfs -o size=64k,mode=1777 tmpfs /tmp/full");
    assert!(mount.status.success(), "{mount:?}");
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().padded_to(256 << 10))
        .node_yaml_for(1, "remoteDir: /tmp/full/keadm");
    let out = sc.run(&[]);
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason.starts_with(
            "Cannot upload the file keadm: no space left on device in /tmp/full/keadm on the node (257 KiB needed, "
        ),
        "{reason}"
    );
    // The partial file was removed, so the node's disk is not left full.
    let left = fleet.node(1).shell("ls -a /tmp/full/keadm");
    let listing = String::from_utf8_lossy(&left.stdout);
    assert!(!listing.contains(".tmp"), "{listing}");
}

#[test]
fn a_node_without_sftp_gets_files_over_exec() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_option(1, NodeOpt::NoSftp)
        .start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().padded_to(300 << 10));
    let out = sc.run(&[]);
    out.status(0);
    every_node_has_one_line(&out, 3, None);
    // Uploads stream over exec on every node, so a node without SFTP needs nothing else.
    assert!(
        out.transcript(1).contains("uploaded keadm"),
        "{}",
        out.transcript(1)
    );
    let arrived = std::fs::read(remote_keadm(fleet.node(1))).unwrap();
    assert_eq!(arrived, staged_keadm(&sc.keadm).as_bytes());
    let sidecar =
        std::fs::read_to_string(fleet.node(1).tmp_path("kubeedge/keadm/keadm.sha256")).unwrap();
    assert_eq!(sidecar.trim(), sha256_hex(&arrived));
    assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(1))).len(), 1);
}

#[test]
fn megabytes_of_output_go_to_the_transcript_in_bounded_memory() {
    const OUTPUT: u64 = 48_000_000;
    let fleet = Fleet::builder().nodes(3).start();
    std::fs::write(fleet.node(1).tmp_path("chatty"), "").unwrap();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().runs(&format!(
        "if [ -e /tmp/chatty ]; then yes 'I0806 12:00:00.000000 1234 join.go:78] pulling image kubeedge/installation-package, please wait' | head -c {OUTPUT}; fi"
    )));
    let (out, rss_kib) = sc
        .command(&[])
        .spawn()
        .wait_measured(Duration::from_secs(60));
    out.status(0);
    every_node_has_one_line(&out, 3, None);
    let transcript = std::fs::metadata(
        out.latest_run()
            .join("nodes")
            .join(format!("2-{}.log", Scenario::name(1))),
    )
    .unwrap()
    .len();
    assert!(transcript >= OUTPUT, "transcript has {transcript} bytes");
    eprintln!(
        "{OUTPUT} bytes of keadm output: peak RSS of keadm-batch {} MiB",
        rss_kib / 1024
    );
    assert!(
        rss_kib * 1024 < OUTPUT * 3 / 4,
        "peak RSS {rss_kib} KiB: the output was held in memory"
    );
}

#[test]
fn keadm_that_never_exits_is_killed_at_the_deadline() {
    let fleet = Fleet::builder().nodes(3).start();
    std::fs::write(fleet.node(1).tmp_path("hang"), "").unwrap();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("if [ -e /tmp/hang ]; then sleep 600; fi"))
        .node_yaml("timeoutSeconds: 3");
    let out = sc.run(&[]);
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert_eq!(
        reason,
        "The keadm command ran past its 3 s deadline and was stopped on the node (SIGTERM)."
    );
    assert_eq!(out.summary()["nodes"][1]["phase"], "timed_out");
    let ps = fleet
        .node(1)
        .shell("ps -eo args | grep -c '[s]leep 600' || true");
    assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "0");
}

#[test]
fn an_arch_keadm_has_no_build_for_fails_that_node_only() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_option(1, NodeOpt::Uname("riscv64"))
        .start();
    let sc = Scenario::new(&fleet);
    let out = sc.run(&[]);
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason.contains("keadm publishes no build for riscv64"),
        "{reason}"
    );
    assert_eq!(out.summary()["nodes"][1]["failed_in"], "preparing");
    assert!(!remote_keadm(fleet.node(1)).exists(), "nothing uploaded");
}

/// `Successfully processed node <name>` or `Failed to process node <name>: <reason>`.
fn is_keadm_line(line: &str) -> bool {
    let name_ok = |n: &str| !n.is_empty() && !n.contains(char::is_whitespace);
    if let Some(name) = line.strip_prefix("Successfully processed node ") {
        return name_ok(name);
    }
    line.strip_prefix("Failed to process node ")
        .and_then(|rest| rest.split_once(": "))
        .is_some_and(|(name, reason)| name_ok(name) && !reason.is_empty())
}

/// Runs 8 nodes two at a time and SIGKILLs the tool once some have finished. Returns
/// the scenario (to run again) and the names the journal records as succeeded.
fn run_and_sigkill(fleet: &Fleet) -> (Scenario<'_>, Vec<String>) {
    let sc = Scenario::new(fleet)
        .keadm(FakeKeadm::new().sleeps(0.3))
        .max_run_num(2);
    let mut running = sc.command(&[]).spawn();
    let log = sc.path("batch_process_log.txt");
    wait_for("three finished nodes", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 3)
    });
    running.kill();
    assert_eq!(running.wait().signal(), Some(libc::SIGKILL));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n'), "a torn last line: {text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3 && lines.len() < 8, "{text}");
    for line in &lines {
        assert!(is_keadm_line(line), "not a whole keadm line: {line:?}");
    }
    let journal =
        std::fs::read_to_string(sc.path("batch_runs").join("latest").join("journal.jsonl"))
            .unwrap();
    assert!(journal.ends_with('\n'), "a torn journal line");
    let mut succeeded = Vec::new();
    let mut journaled = Vec::new();
    for line in journal.lines() {
        let entry: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let name = entry["name"].as_str().unwrap().to_string();
        if entry["phase"] == "succeeded" {
            succeeded.push(name.clone());
        }
        journaled.push(name);
    }
    // Every node in the result log is in the journal. Both are written per node, the log
    // first, so only the last log line may have lost its journal line to the kill.
    for line in &lines[..lines.len() - 1] {
        let name = line
            .strip_prefix("Successfully processed node ")
            .or_else(|| {
                line.strip_prefix("Failed to process node ")
                    .and_then(|r| r.split(':').next())
            })
            .unwrap();
        assert!(
            journaled.iter().any(|j| j == name),
            "{name} is in the log but not the journal"
        );
    }
    (sc, succeeded)
}

#[test]
fn sigkill_mid_run_leaves_only_whole_lines() {
    let fleet = Fleet::builder().nodes(8).start();
    let (_sc, succeeded) = run_and_sigkill(&fleet);
    assert!(!succeeded.is_empty());
}

#[test]
fn retry_failed_finishes_what_a_sigkill_interrupted() {
    let fleet = Fleet::builder().nodes(8).start();
    let (sc, succeeded) = run_and_sigkill(&fleet);
    let out = sc.run(&["--retry-failed"]);
    out.status(0);
    for i in 0..8 {
        let name = Scenario::name(i);
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i))).len();
        if succeeded.contains(&name) {
            assert_eq!(calls, 1, "{name} succeeded before and was not run again");
        } else {
            assert!(calls >= 1, "{name} never ran");
            out.log_has(&format!("Successfully processed node {name}"));
        }
    }
    assert_eq!(out.log_lines().len(), 8 - succeeded.len());
}

#[test]
fn two_nodes_on_one_host_do_not_corrupt_each_others_upload() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().padded_to(4 << 20));
    let twin = sc
        .node_block(0, fleet.node(0))
        .replace("edge-00", "edge-03");
    std::fs::write(sc.path("config.yaml"), sc.config_text() + &twin).unwrap();
    let out = sc.run(&[]);
    out.status(0);
    assert!(
        out.stderr.contains(&format!(
            "{}:{} is also node 1's address, and both nodes upload into /tmp/kubeedge/keadm there (the default remoteDir: neither node sets one), so one node's files can replace the other's while they run; give this node a remoteDir of its own, such as remoteDir: /tmp/kubeedge/keadm-4, or remove the duplicate",
            fleet.node(0).host(),
            fleet.node(0).port()
        )),
        "{}",
        out.stderr
    );
    let warned_at = out.stderr.find("is also node 1's address").unwrap();
    let first_result = out.stderr.find("] ok ").expect("a node result on stderr");
    assert!(
        warned_at < first_result,
        "warned before the run: {}",
        out.stderr
    );
    every_node_has_one_line(&out, 4, None);
    let node = fleet.node(0);
    let arrived = std::fs::read(remote_keadm(node)).unwrap();
    assert!(
        arrived == staged_keadm(&sc.keadm).as_bytes(),
        "the keadm on the shared host differs from the staged one ({} bytes)",
        arrived.len()
    );
    let sidecar = std::fs::read_to_string(node.tmp_path("kubeedge/keadm/keadm.sha256")).unwrap();
    assert_eq!(sidecar.trim(), sha256_hex(&arrived));
    assert!(temporaries(&node.tmp_path("kubeedge/keadm")).is_empty());
    assert_eq!(fake_keadm::calls(&remote_keadm(node)).len(), 2);
}

/// Security finding 8: a node that answers `uname -m` with megabytes and terminal escape
/// sequences fails alone, and what it printed reaches the console, the log line and the
/// summary only as one short line with control characters escaped.
#[test]
fn a_hostile_machine_name_is_cut_and_escaped() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_option(1, NodeOpt::Uname("x86_64"))
        .start();
    std::fs::write(
        fleet.node(1).uname_wrapper(),
        "#!/bin/sh\nprintf '\\033]0;pwned\\007\\033[2J'\nhead -c 3000000 /dev/zero | tr '\\0' A\necho\n",
    )
    .unwrap();
    let sc = Scenario::new(&fleet);
    let out = sc.run(&[]);
    out.status(1);
    let reason = one_fault(&out, 3, 1);
    assert!(
        reason.len() < 600,
        "the log line has {} bytes",
        reason.len()
    );
    for text in [&out.stderr, &out.stdout, &reason] {
        assert!(
            !text.contains('\u{1b}'),
            "an escape sequence reached the output"
        );
        assert!(
            !text.contains(&"A".repeat(1000)),
            "the node's text was not cut"
        );
    }
    let summary = std::fs::read_to_string(out.latest_run().join("summary.json")).unwrap();
    assert!(
        summary.len() < 20_000,
        "summary.json has {} bytes",
        summary.len()
    );
    let log = std::fs::read_to_string(out.dir.join("batch_process_log.txt")).unwrap();
    assert!(
        log.len() < 2_000,
        "batch_process_log.txt has {} bytes",
        log.len()
    );
}
