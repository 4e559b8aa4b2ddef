//! KubeEdge-aware runs on real sshd nodes: pre-flight findings, the join token's lifetime
//! and CA hash, node names cloudcore already has, failure classes, and reruns by class.
//! cloudcore is a local stand-in on 127.0.0.1 (tests/common/cloudcore.rs).

use crate::common::cloudcore::{FakeCloudcore, now, token};
use crate::common::edge_state::{RuntimeSocket, start_edgecore};
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::Fleet;
use crate::common::scenario::{Scenario, remote_keadm};

/// A join command against the fake cloudcore (or a refused loopback port).
fn join_cmd(port: u16, token: &str) -> String {
    format!(
        "join --cloudcore-ipport=127.0.0.1:10000 --certport={port} --edgenode-name={{name}} --token={token}"
    )
}

fn refused_port() -> u16 {
    crate::common::fleet::refused_endpoint().port
}

/// A join command whose cloudcore ports are one `closing_port`: they answer
/// pre-flight's check from the node, and the checks before the run ask nothing.
fn join_cmd_answering(token: &str) -> String {
    let port = crate::common::fleet::closing_port();
    join_cmd(port, token).replace("127.0.0.1:10000", &format!("127.0.0.1:{port}"))
}

const A_CA_HASH: &str = "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07";

#[test]
fn an_expired_token_stops_the_batch_before_any_node() {
    let fleet = Fleet::builder().nodes(2).start();
    let expired = token(A_CA_HASH, now() - 3600);
    // Every spelling keadm join accepts for its flags (security finding 2): a short `-t`
    // must not slip past the check.
    let port = refused_port();
    for cmd in [
        join_cmd(port, &expired),
        format!("join -e 127.0.0.1:10000 -s {port} -i {{name}} -t {expired}"),
        format!("join -e=127.0.0.1:10000 -s={port} -i={{name}} -t={expired}"),
        format!("join -e127.0.0.1:10000 -s{port} -i{{name}} -t{expired}"),
        format!("join --cloudcore-ipport 127.0.0.1:10000 --certport {port} --token \"{expired}\""),
    ] {
        let sc = Scenario::new(&fleet).cmd(&cmd).preflight("warn");
        let out = sc.run(&[]);
        out.status(2);
        assert!(
            out.stderr.contains("The join token (--token) expired at"),
            "{cmd}: {}",
            out.stderr
        );
        assert!(out.stderr.contains("keadm gettoken"), "{}", out.stderr);
        assert!(
            !out.stderr.contains(&expired) && !out.stderr.contains("signature"),
            "the token is never printed"
        );
        assert!(
            !fleet.node(0).tmp_path("kubeedge").exists(),
            "no node was touched"
        );
        assert!(out.log_lines().is_empty(), "no result file was started");
    }
}

#[test]
fn a_token_that_expires_mid_batch_warns_or_stops_under_strict() {
    let fleet = Fleet::builder().nodes(3).start();
    // 3 nodes one at a time at the default 60 s each, plus edgecore's 5 minutes: ~7 min.
    let short = token(A_CA_HASH, now() + 200);
    let sc = Scenario::new(&fleet)
        .cmd(&join_cmd(refused_port(), &short))
        .max_run_num(1)
        .preflight("warn");
    let out = sc.run(&["--dry-run"]);
    out.status(0);
    assert!(
        out.stderr
            .contains("warning: The join token (--token) expires at"),
        "{}",
        out.stderr
    );
    let strict = Scenario::new(&fleet)
        .cmd(&join_cmd(refused_port(), &short))
        .max_run_num(1)
        .preflight("strict");
    let out = strict.run(&["--dry-run"]);
    out.status(2);
    assert!(
        out.stderr
            .contains("error: The join token (--token) expires at"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_token_from_another_cluster_is_caught_against_cloudcores_ca() {
    let fleet = Fleet::builder().nodes(1).start();
    let cloudcore = FakeCloudcore::start();
    let wrong = token(A_CA_HASH, now() + 86_400);
    let sc = Scenario::new(&fleet)
        .cmd(&join_cmd(cloudcore.port, &wrong))
        .preflight("warn");
    let out = sc.run(&[]);
    out.status(2);
    assert!(
        out.stderr.contains("is not the sha256 of cloudcore's CA"),
        "{}",
        out.stderr
    );
    assert!(!fleet.node(0).tmp_path("kubeedge").exists());
    // The right CA hash passes, and the batch runs.
    let right = token(&cloudcore.ca_hash(), now() + 86_400);
    let sc = Scenario::new(&fleet)
        .cmd(&join_cmd(cloudcore.port, &right))
        .preflight("warn");
    let out = sc.run(&[]);
    out.status(0);
}

#[test]
fn names_cloudcore_already_has_are_reported_before_any_node() {
    let fleet = Fleet::builder().nodes(3).start();
    let cloudcore = FakeCloudcore::start();
    cloudcore.register("edge-01");
    let good = token(&cloudcore.ca_hash(), now() + 86_400);
    let strict = Scenario::new(&fleet)
        .cmd(&join_cmd(cloudcore.port, &good))
        .preflight("strict");
    let out = strict.run(&[]);
    out.status(2);
    assert!(
        out.stderr
            .contains("already has 1 of these --edgenode-name values"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("edge-01"), "{}", out.stderr);
    for i in 0..3 {
        assert!(
            !fleet.node(i).tmp_path("kubeedge").exists(),
            "node {i} was not touched"
        );
    }
    let warn = Scenario::new(&fleet)
        .cmd(&join_cmd(cloudcore.port, &good))
        .preflight("warn");
    let out = warn.run(&[]);
    assert!(
        out.stderr
            .contains("warning: cloudcore at https://127.0.0.1"),
        "{}",
        out.stderr
    );
}

#[test]
fn strict_pre_flight_skips_a_node_untouched_and_warn_goes_on() {
    let fleet = Fleet::builder().nodes(2).start();
    let _sockets: Vec<RuntimeSocket> = fleet.nodes().iter().map(RuntimeSocket::create).collect();
    start_edgecore(fleet.node(1));
    let cmd = format!(
        "{} --remote-runtime-endpoint=unix:///tmp/containerd.sock",
        join_cmd_answering(&token(A_CA_HASH, now() + 86_400))
    );
    let strict = Scenario::new(&fleet).cmd(&cmd).preflight("strict");
    let out = strict.run(&[]);
    out.status(1);
    out.log_has("Successfully processed node edge-00");
    let line = out.log_line_starting("Failed to process node edge-01: ");
    assert!(
        line.contains("Skipped by pre-flight: edgecore is already running on this node"),
        "{line}"
    );
    assert_eq!(out.summary()["nodes"][1]["phase"], "skipped");
    assert_eq!(
        out.summary()["nodes"][1]["preflight"][0]["id"],
        "edgecore_running"
    );
    assert!(
        !remote_keadm(fleet.node(1)).exists(),
        "nothing was uploaded to the skipped node"
    );
    assert!(
        !fleet.node(1).tmp_path("kubeedge").exists(),
        "not even the dir was made"
    );

    let warn = Scenario::new(&fleet).cmd(&cmd).preflight("warn");
    let out = warn.run(&["-v"]);
    out.status(0);
    assert!(
        out.stderr
            .contains("edge-01: pre-flight: edgecore is already running"),
        "{}",
        out.stderr
    );
    // Once, as a warning: -v does not repeat it as an info line.
    assert_eq!(
        out.stderr
            .matches("pre-flight: edgecore is already running")
            .count(),
        1,
        "{}",
        out.stderr
    );
    assert!(
        out.transcript(1)
            .contains("pre-flight: edgecore is already running"),
        "the transcript keeps it"
    );
}

#[test]
fn preflight_only_prints_a_table_and_changes_nothing() {
    let fleet = Fleet::builder().nodes(2).start();
    let _socket = RuntimeSocket::create(fleet.node(0));
    start_edgecore(fleet.node(1));
    let cmd = format!(
        "{} --remote-runtime-endpoint=unix:///tmp/containerd.sock",
        join_cmd_answering(&token(A_CA_HASH, now() + 86_400))
    );
    let sc = Scenario::new(&fleet).cmd(&cmd).preflight("warn");
    let out = sc.run(&["--preflight-only"]);
    out.status(1);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    assert!(out.stdout.starts_with("NODE"), "{}", out.stdout);
    let row0 = out
        .stdout
        .lines()
        .find(|l| l.starts_with("edge-00"))
        .unwrap();
    assert!(row0.ends_with("none"), "{row0}");
    assert!(
        out.stdout
            .contains("edgecore is already running on this node"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("The container runtime socket keadm join will use does not exist"),
        "node 1 has no socket: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("1 of 2 nodes have pre-flight findings"),
        "{}",
        out.stderr
    );
    for i in 0..2 {
        assert!(
            !fleet.node(i).tmp_path("kubeedge").exists(),
            "node {i} unchanged"
        );
    }
    assert!(!sc.path("batch_process_log.txt").exists());
}

#[test]
fn failures_are_classified_and_retried_by_class_with_reset_first() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().already_joined_until_reset());
    let first = sc.run(&[]);
    first.status(1);
    eprintln!("first run's stderr:\n{}", first.stderr);
    let summary = first.summary();
    for i in 0..3 {
        assert_eq!(summary["nodes"][i]["failure_class"], "already_joined");
    }
    assert!(first.stderr.contains("By cause:"), "{}", first.stderr);
    assert!(
        first
            .stderr
            .contains("Already joined (edgecore running) [already_joined]: 3 node(s)"),
        "{}",
        first.stderr
    );
    // One command to go on with, not one per class.
    assert_eq!(
        first.stderr.matches("--retry-failed").count(),
        1,
        "{}",
        first.stderr
    );
    first.stderr_has(
        "then, once the causes above are fixed: keadm-batch batch -c config.yaml --retry-failed",
    );
    // No node failed with this class: nothing to retry.
    let none = sc.run(&["--retry-failed", "--class", "token_invalid"]);
    none.status(0);
    assert!(none.stderr.contains("Nothing to retry"), "{}", none.stderr);
    let bad = sc.run(&["--retry-failed", "--class", "sunspots"]);
    bad.status(2);
    assert!(
        bad.stderr.contains("`sunspots` is not a failure class"),
        "{}",
        bad.stderr
    );
    // Reset first, then join: every node recovers.
    let retry = sc.run(&[
        "--retry-failed",
        "--class",
        "already-joined",
        "--reset-first",
    ]);
    retry.status(0);
    for i in 0..3 {
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i)));
        let args: Vec<&str> = calls.iter().map(|c| c.args[0].as_str()).collect();
        assert_eq!(args, ["join", "reset", "join"], "node {i}");
        assert_eq!(calls[1].args, ["reset", "edge", "--force"]);
    }
}

#[test]
fn reset_first_reports_the_resets_status_and_stops_before_the_join_when_it_fails() {
    let fleet = Fleet::builder().nodes(2).start();
    // On node 1 the reset fails; node 0 resets cleanly.
    let failing_reset = "if [ \"$1\" = reset ] && [ -e /tmp/reset-breaks ]; then echo 'Error: failed to stop edgecore' >&2; exit 4; fi";
    std::fs::write(fleet.node(1).tmp_path("reset-breaks"), "").unwrap();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().runs(failing_reset));
    let out = sc.run(&["--reset-first"]);
    out.status(1);
    let summary = out.summary();
    assert_eq!(summary["nodes"][0]["phase"], "succeeded");
    assert_eq!(summary["nodes"][0]["reset_exit_status"], 0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    let args: Vec<&str> = calls.iter().map(|c| c.args[0].as_str()).collect();
    assert_eq!(args, ["reset", "join"]);

    assert_eq!(summary["nodes"][1]["phase"], "failed");
    assert_eq!(summary["nodes"][1]["reset_exit_status"], 4);
    assert!(
        summary["nodes"][1].get("exit_status").is_none(),
        "the join never ran"
    );
    assert_eq!(
        summary["nodes"][1]["last_output"],
        "Error: failed to stop edgecore"
    );
    out.log_has("Failed to process node edge-01: failed to execute keadm command cd /tmp/kubeedge/keadm && ./keadm reset edge --force: Process exited with status 4");
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(1)));
    let args: Vec<&str> = calls.iter().map(|c| c.args[0].as_str()).collect();
    assert_eq!(args, ["reset"], "no join after a failed reset");
    let transcript = out.transcript(1);
    assert!(
        transcript.contains("keadm-batch: keadm reset edge --force exited with status 4")
            && transcript.contains("so the join was not run"),
        "{transcript}"
    );
    assert!(
        out.transcript(0)
            .contains("keadm-batch: keadm reset edge --force exited with status 0"),
        "the reset's status is in every transcript"
    );
}

#[test]
fn a_join_cut_off_while_pulling_images_is_image_pull_stalled() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints_stderr(
                    "I1130 12:00:01.000000    1 join.go:78] 4. Create the necessary directories",
                )
                .prints_stderr("I1130 12:00:02.000000    1 join.go:78] 5. Pull Images")
                .sleeps(60.0),
        )
        .node_yaml("timeoutSeconds: 2");
    let out = sc.run(&[]);
    out.status(1);
    assert_eq!(out.summary()["nodes"][0]["phase"], "timed_out");
    assert_eq!(
        out.summary()["nodes"][0]["failure_class"],
        "image_pull_stalled"
    );
    assert!(
        out.transcript(0)
            .contains("the last lines of edgecore's log follow")
    );
}
