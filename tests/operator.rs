//! What an operator with many nodes relies on, on real sshd nodes: reruns of failed nodes,
//! failure policies, Ctrl-C, bastions, and secrets that never reach any output.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, KeyKind, NodeOpt};
use crate::common::scenario::{Login, Scenario, remote_keadm};

/// Makes node `i` fail in its prepare step: its remote dir is writable by others.
fn break_node(fleet: &Fleet, i: usize) {
    let dir = fleet.node(i).tmp_path("kubeedge/keadm");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
}

fn repair_node(fleet: &Fleet, i: usize) {
    let dir = fleet.node(i).tmp_path("kubeedge/keadm");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn retry_failed_processes_exactly_the_failed_nodes() {
    let fleet = Fleet::builder().nodes(4).start();
    break_node(&fleet, 1);
    break_node(&fleet, 3);
    let sc = Scenario::new(&fleet);
    let first = sc.run(&[]);
    first.status(1);
    assert_eq!(
        first
            .log_lines()
            .iter()
            .filter(|l| l.starts_with("Failed"))
            .count(),
        2
    );
    repair_node(&fleet, 1);
    repair_node(&fleet, 3);
    let second = sc.run(&["--retry-failed"]);
    second.status(0);
    let mut lines = second.log_lines();
    lines.sort();
    assert_eq!(
        lines,
        [
            "Successfully processed node edge-01",
            "Successfully processed node edge-03"
        ]
        .map(String::from)
    );
    for (i, runs) in [(0, 1), (1, 1), (2, 1), (3, 1)] {
        assert_eq!(
            fake_keadm::calls(&remote_keadm(fleet.node(i))).len(),
            runs,
            "node {i}"
        );
    }
    // Everything has succeeded along the chain of runs: nothing is left to retry.
    let third = sc.run(&["--retry-failed"]);
    third.status(0);
    assert!(
        third.stderr.contains("Nothing to retry"),
        "{}",
        third.stderr
    );
}

/// `--max-fail N` tolerates N failures: the run stops starting nodes once more than N
/// did not succeed (it used to stop once N had).
#[test]
fn max_fail_stops_starting_nodes_and_lists_the_rest() {
    let fleet = Fleet::builder().nodes(4).start();
    let sc = Scenario::new(&fleet)
        .login(Login::Password("wrong".into()))
        .max_run_num(1);
    let out = sc.run(&["--max-fail", "1"]);
    out.status(1);
    let lines = out.log_lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[0].contains("rejected the password") && lines[1].contains("rejected the password")
    );
    for line in &lines[2..] {
        assert!(
            line.contains("skipped: 2 nodes did not succeed, more than the run allows (--max-fail 1), so no further node was started; nothing was done on this node"),
            "{line}"
        );
    }
    assert_eq!(out.summary()["totals"]["skipped"], 2);
    // Not a rollout in waves: no wave numbers.
    assert!(out.summary().get("waves").is_none());
    assert!(out.node_summary(3).get("wave").is_none());
}

#[test]
fn a_failed_canary_holds_back_the_rest() {
    let fleet = Fleet::builder().nodes(4).start();
    break_node(&fleet, 0);
    let sc = Scenario::new(&fleet);
    let out = sc.run(&["--canary", "1"]);
    out.status(1);
    // The header says how the canary runs, not "4 at once".
    out.stderr_has(
        "Processing 4 nodes (first 1 as a canary, 1 at once; then the other 3, 3 at once)",
    );
    let lines = out.log_lines();
    assert!(
        lines[0].starts_with("Failed to process node edge-00: The upload directory"),
        "{lines:?}"
    );
    assert_eq!(out.summary()["nodes"][0]["failure_class"], "upload");
    for line in &lines[1..] {
        assert!(
            line.contains("skipped: wave 1 of 2 (the canary) stopped the rollout: 1 of its 1 node did not succeed (--canary: every canary node must succeed)"),
            "{line}"
        );
    }
    out.stderr_has("Wave 1 of 2 stopped the rollout: 1 of its 1 node did not succeed, more than its tolerance of 0. 3 nodes of wave 2 were not touched.");
    // Nodes that never started show no duration, and never `-0.0s`.
    out.stderr_lacks("-0.0s");
    // The untouched nodes: one line while the run ends, their names once in the recap.
    out.stderr_has("[4/4] SKIPPED 3 nodes, not started: skipped: wave 1 of 2 (the canary)");
    out.stderr_has("  3 nodes skipped, never started: edge-01..edge-03\n");
    for i in 1..4 {
        assert!(
            !remote_keadm(fleet.node(i)).exists(),
            "node {i} was not touched"
        );
    }
    // A good canary lets the rest go; with -q the run still ends with its one-line result.
    repair_node(&fleet, 0);
    let out = sc.run(&["--canary", "1", "-q"]);
    out.status(0);
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "4 of 4 selected nodes succeeded. See batch_process_log.txt and {}.",
            std::fs::canonicalize(sc.path("batch_runs/latest"))
                .unwrap()
                .display()
        ),
        "-q prints the result and nothing else"
    );
}

fn wait_for_starts(fleet: &Fleet, count: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let started: usize = (0..fleet.nodes().len())
            .map(|i| fake_keadm::calls(&remote_keadm(fleet.node(i))).len())
            .sum();
        if started >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {started} keadm runs started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctrl_c_lets_running_nodes_finish_and_writes_every_result() {
    let fleet = Fleet::builder().nodes(4).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().sleeps(2.0))
        .max_run_num(2);
    let running = sc.command(&[]).spawn();
    wait_for_starts(&fleet, 2, Duration::from_secs(20));
    running.interrupt();
    let out = running.wait();
    assert_eq!(out.status.code(), Some(130));
    let log = std::fs::read_to_string(sc.path("batch_process_log.txt")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("Successfully processed node"))
            .count(),
        2,
        "{log}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with(": not started: run interrupted"))
            .count(),
        2,
        "{log}"
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sc.path("batch_runs/latest/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["totals"]["interrupted"], 2);
}

#[test]
fn a_second_ctrl_c_cancels_running_commands_on_the_nodes() {
    let fleet = Fleet::builder().nodes(2).start();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().sleeps(60.0));
    let running = sc.command(&[]).spawn();
    wait_for_starts(&fleet, 2, Duration::from_secs(20));
    let started = Instant::now();
    running.interrupt_twice();
    let out = running.wait();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "cancelled promptly"
    );
    assert_eq!(out.status.code(), Some(130));
    let log = std::fs::read_to_string(sc.path("batch_process_log.txt")).unwrap();
    assert_eq!(log.lines().count(), 2);
    for line in log.lines() {
        assert!(
            line.contains("Cancelled by the operator; the keadm command was killed on the node."),
            "{line}"
        );
    }
    for i in 0..2 {
        let ps = fleet
            .node(i)
            .shell("ps -eo args | grep -c '[s]leep 60' || true");
        assert_eq!(
            String::from_utf8_lossy(&ps.stdout).trim(),
            "0",
            "node {i}: the command was killed"
        );
    }
}

#[test]
fn a_bastion_relays_to_nodes_behind_it() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_option(0, NodeOpt::SshdConfig("LogLevel DEBUG".into()))
        .start();
    let bastion = fleet.node(0);
    let key = fleet.private_key(KeyKind::Ed25519);
    let sc = Scenario::new(&fleet).only_nodes(&[1, 2]).login(Login::Key(key.clone())).ssh_yaml(&format!(
        "proxyJump:\n        ip: '{}'\n        port: {}\n        username: root\n        auth:\n          type: password\n          passwordAuth:\n            password: '{}'",
        bastion.host(),
        bastion.port(),
        fleet.root_password().expose()
    ));
    let out = sc.run(&[]);
    out.status(0);
    for i in [1, 2] {
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
        assert!(
            !remote_keadm(bastion).exists(),
            "nothing runs on the bastion"
        );
    }
    let log = bastion.log();
    for i in [1, 2] {
        let target = fleet.node(i).host();
        assert!(
            log.contains(&format!("target {target} port 22"))
                || log.contains(&format!("to {target} port 22")),
            "the bastion relayed to {target}:\n{log}"
        );
    }
}

/// Security finding 3: `--host-key-policy` on the command line reaches the jump host too;
/// a file default of `off` must not hand the bastion's credentials to whoever answers.
#[test]
fn the_host_key_flag_reaches_the_jump_host() {
    let mut fleet = Fleet::builder().nodes(2).start();
    let key = fleet.private_key(KeyKind::Ed25519);
    let bastion_yaml = |fleet: &Fleet| {
        let bastion = fleet.node(0);
        format!(
            "proxyJump:\n        ip: '{}'\n        port: {}\n        username: root\n        auth:\n          type: password\n          passwordAuth:\n            password: '{}'",
            bastion.host(),
            bastion.port(),
            fleet.root_password().expose()
        )
    };
    let yaml = bastion_yaml(&fleet);
    fn scenario<'f>(fleet: &'f Fleet, key: &std::path::Path, yaml: &str) -> Scenario<'f> {
        Scenario::new(fleet)
            .only_nodes(&[1])
            .top_yaml("hostKeyPolicy: off")
            .login(Login::Key(key.to_path_buf()))
            .ssh_yaml(yaml)
    }
    // The flag's accept-new records both keys; then the bastion is reinstalled.
    scenario(&fleet, &key, &yaml)
        .run(&["--host-key-policy", "accept-new"])
        .status(0);
    fleet.node_mut(0).restart_with_new_host_key();
    let sc = scenario(&fleet, &key, &yaml);
    let out = sc.run(&["--host-key-policy", "strict"]);
    out.status(1);
    let bastion = fleet.node(0);
    let line = out.log_line_starting(&format!("Failed to process node {}", Scenario::name(1)));
    assert!(
        line.contains(&format!("{}:{}", bastion.host(), bastion.port()))
            && line.contains("has changed"),
        "the bastion is checked under the flag's strict policy: {line}"
    );
    assert!(fake_keadm::calls(&remote_keadm(fleet.node(1))).len() == 1);
    // Without the flag the file's `off` applies to the bastion, as the operator wrote it.
    sc.run(&[]).status(0);
}

/// Every spelling keadm join accepts for its token (security finding 2).
const TOKEN_SPELLINGS: [(&str, &str); 5] = [
    ("--token=", "--token=***"),
    ("--token ", "--token ***"),
    ("-t ", "-t ***"),
    ("-t=", "-t=***"),
    ("-t", "-t***"),
];

#[test]
fn secrets_never_reach_any_output() {
    for (spelling, masked) in TOKEN_SPELLINGS {
        secrets_never_reach_any_output_with(spelling, masked);
    }
}

fn secrets_never_reach_any_output_with(spelling: &str, masked: &str) {
    let fleet = Fleet::builder().nodes(2).start();
    let password = fleet.root_password().expose().to_string();
    let passphrase = fleet.key_passphrase().expose().to_string();
    let token = "3f2e1d0c9b8a.eyJleHAiOjE3OTk5OTk5OTl9.c2lnbmF0dXJl";
    // A token that is in no config: masked for its shape alone.
    let stray_token = format!(
        "{}.eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjE4MDAwMDAwMDB9.c3RyYXktc2lnbmF0dXJl",
        "ab".repeat(32)
    );
    let env_secret = "value-from-the-environment-42";
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints("received --token and the extra flag")
                .runs("echo \"keadm got: $*\"")
                .runs(&format!(
                    "echo 'edgecore: token {stray_token} is not valid' >&2"
                ))
                .exits_with(1),
        )
        .cmd(&format!(
            "join --edgenode-name={{name}} {spelling}{token} --extra={{{{env \"KB_TEST_SECRET\"}}}}"
        ));
    std::fs::write(
        sc.path("config.yaml"),
        sc.config_text().replacen(
            &format!("passwordAuth:\n          password: '{password}'"),
            "privateKeyAuth:\n          privateKeyPath: KEYPATH\n          passphraseEnv: KB_TEST_PASSPHRASE",
            1,
        )
        .replacen("type: password", "type: privateKey", 1)
        .replace("KEYPATH", &fleet.private_key(KeyKind::Ed25519Passphrase).display().to_string()),
    )
    .unwrap();
    let dry_run = sc
        .command(&["--dry-run"])
        .env("KB_TEST_SECRET", env_secret)
        .env("KB_TEST_PASSPHRASE", &passphrase)
        .run();
    assert_eq!(dry_run.status.code(), Some(0), "{spelling}: {dry_run:?}");
    let out = sc
        .command(&["--output", "json", "-v"])
        .env("KB_TEST_SECRET", env_secret)
        .env("KB_TEST_PASSPHRASE", &passphrase)
        .run();
    assert_eq!(out.status.code(), Some(1), "{spelling}: {}", out.stderr);
    let mut everything = [&dry_run.stdout, &dry_run.stderr, &out.stdout, &out.stderr]
        .map(|text| text.as_str())
        .concat();
    for entry in walk(sc.dir.path()) {
        if entry.extension().is_some_and(|e| e == "gz")
            || entry.starts_with(sc.path("packages"))
            || entry.starts_with(sc.path("staging"))
        {
            continue;
        }
        everything.push_str(&String::from_utf8_lossy(&std::fs::read(&entry).unwrap()));
    }
    // The config itself holds the token, as it does for keadm; everything we wrote must not.
    let config = std::fs::read_to_string(sc.path("config.yaml")).unwrap();
    let everything = everything.replace(&config, "");
    assert!(
        everything.contains(masked),
        "{spelling}: the masked form {masked:?} is shown"
    );
    assert!(
        everything.contains("keadm got: join"),
        "{spelling}: the node's output is in the transcript"
    );
    for secret in [
        password.as_str(),
        passphrase.as_str(),
        token,
        env_secret,
        "eyJleHAiOjE3OTk5OTk5OTl9",
        &stray_token,
        "c3RyYXktc2lnbmF0dXJl",
    ] {
        assert!(
            !everything.contains(secret),
            "{spelling}: {secret:?} leaked"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            out.extend(walk(&path));
        } else if meta.is_file() {
            out.push(path);
        }
    }
    out
}
