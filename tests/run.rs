//! The whole tool against real sshd nodes on loopback: each case asserts files on the
//! node, lines in batch_process_log.txt, and the exit code.

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, KeyKind, NodeOpt, Sudo, TEST_USER_PASSWORD};
use crate::common::scenario::{Login, Scenario, remote_keadm};
use crate::common::ssh_agent::Agent;

#[test]
fn password_login_enrolls_every_node() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().prints("I0806 join.go:78] 10. Install Complete!"));
    let out = sc.run(&[]);
    out.status(0);
    for i in 0..3 {
        out.log_has(&format!(
            "Successfully processed node {}",
            Scenario::name(i)
        ));
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i)));
        assert_eq!(calls.len(), 1, "node {i} ran keadm once");
        assert_eq!(calls[0].cwd, "/tmp/kubeedge/keadm");
        assert_eq!(
            calls[0].args,
            [
                "join",
                "--cloudcore-ipport=127.0.0.1:10000",
                &format!("--edgenode-name={}", Scenario::name(i)),
                "--token=abc.def"
            ]
        );
        let transcript = out.transcript(i);
        assert!(transcript.contains("Install Complete!"), "{transcript}");
        assert!(transcript.contains("--token=***"), "{transcript}");
        assert!(
            !transcript.contains("abc.def"),
            "the token leaked into the transcript"
        );
    }
    assert_eq!(out.log_lines().len(), 3);
    let summary = out.summary();
    assert_eq!(summary["totals"]["succeeded"], 3);
    assert_eq!(summary["nodes"][0]["arch"], "amd64");
}

#[test]
fn key_logins_work_plain_pem_and_with_passphrase() {
    let fleet = Fleet::builder().nodes(3).start();
    for (i, login) in [
        Login::Key(fleet.private_key(KeyKind::Ed25519)),
        Login::Key(fleet.private_key(KeyKind::RsaPem)),
        Login::KeyWithPassphrase(
            fleet.private_key(KeyKind::Ed25519Passphrase),
            fleet.key_passphrase().expose().to_string(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let sc = Scenario::new(&fleet).login(login).only_nodes(&[i]);
        let out = sc.run(&[]);
        out.status(0).log_has(&format!(
            "Successfully processed node {}",
            Scenario::name(i)
        ));
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
        let transcript = std::fs::read_to_string(
            out.latest_run()
                .join("nodes")
                .join(format!("1-{}.log", Scenario::name(i))),
        )
        .unwrap();
        assert!(
            !transcript.contains(fleet.key_passphrase().expose()),
            "passphrase leaked"
        );
    }
}

#[test]
fn agent_login_uses_ssh_auth_sock() {
    let fleet = Fleet::builder().nodes(1).start();
    let agent = Agent::start(fleet.dir(), &fleet.private_key(KeyKind::Ed25519));
    let sc = Scenario::new(&fleet).login(Login::Agent);
    let out = sc.command(&[]).env("SSH_AUTH_SOCK", &agent.socket).run();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(0))).len(), 1);
}

#[test]
fn wrong_password_fails_without_retry() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).login(Login::Password("not-the-password".into()));
    let out = sc.run(&[]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(line.contains("Cannot connect to node edge-00. "), "{line}");
    assert!(
        line.contains("rejected the password for user root"),
        "{line}"
    );
    assert!(!line.contains("not-the-password"), "{line}");
    assert_eq!(
        out.summary()["nodes"][0]["connect_attempts"],
        1,
        "auth failures are not retried"
    );
    // keadm-batch's own class, with its own fix in the recap, not edgecore's journal.
    assert_eq!(out.summary()["nodes"][0]["failure_class"], "auth");
    out.stderr_has("SSH login rejected [auth]: 1 node(s): edge-00")
        // The config as given with -c, so the line can be pasted as it is.
        .stderr_has("then, once the causes above are fixed: keadm-batch batch -c config.yaml --retry-failed --known-hosts ")
        .stderr_lacks("journalctl");
    assert!(!remote_keadm(fleet.node(0)).exists());
}

/// `-q` prints the errors: one line per node that did not succeed, then the final
/// result, and nothing else (no banner, no recap), as README.md and `--help` say.
#[test]
fn quiet_prints_a_line_per_failed_node_and_the_result() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).login(Login::Password("not-the-password".into()));
    let out = sc.run(&["-q"]);
    out.status(1);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(lines[0].contains("[1/1] FAILED  edge-00 ("), "{}", lines[0]);
    assert!(
        lines[1].starts_with("keadm-batch: error: 1 of 1 selected nodes did not succeed."),
        "{}",
        lines[1]
    );
}

#[test]
fn refused_port_is_retried_then_reported() {
    let fleet = Fleet::builder().nodes(1).start();
    let refused = crate::common::fleet::refused_endpoint();
    let sc = Scenario::new(&fleet).top_yaml("retries: 1");
    std::fs::write(
        sc.path("config.yaml"),
        sc.config_text()
            .replace(
                &format!("port: {}", fleet.node(0).port()),
                &format!("port: {}", refused.port),
            )
            .replace(
                &format!("ip: '{}'", fleet.node(0).host()),
                &format!("ip: '{}'", refused.host),
            ),
    )
    .unwrap();
    let out = sc.run(&[]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(line.contains("refused the connection"), "{line}");
    assert!(line.contains("after 2 attempts"), "{line}");
    assert_eq!(out.summary()["nodes"][0]["connect_attempts"], 2);
    assert!(out.transcript(0).contains("Attempt 1 of 2 failed."));
    assert_eq!(out.summary()["nodes"][0]["failure_class"], "unreachable");
    out.stderr_has("Node unreachable over SSH [unreachable]: 1 node(s): edge-00");
    // The class is one --retry-failed --class can pick.
    let retry = sc.run(&["--retry-failed", "--class", "unreachable", "--dry-run"]);
    retry.status(0).stdout_has("node 1 edge-00");
}

#[test]
fn changed_host_key_fails_under_accept_new_and_unknown_fails_under_strict() {
    let mut fleet = Fleet::builder().nodes(1).start();
    {
        let sc = Scenario::new(&fleet);
        sc.run(&[]).status(0);
        let known = std::fs::read_to_string(fleet.known_hosts()).unwrap();
        assert!(
            known.contains(fleet.node(0).host()),
            "accept-new recorded the host: {known}"
        );
    }
    fleet.node_mut(0).restart_with_new_host_key();
    let new_fp = fleet.node(0).host_key_fingerprint();
    {
        let sc = Scenario::new(&fleet);
        let out = sc.run(&[]);
        out.status(1);
        let line = out.log_line_starting("Failed to process node edge-00: ");
        assert!(line.contains("host key of the node"), "{line}");
        assert!(
            line.contains(&new_fp),
            "names the new fingerprint {new_fp}: {line}"
        );
        assert!(line.contains("ssh-keygen -R"), "{line}");
        assert_eq!(
            out.summary()["nodes"][0]["connect_attempts"],
            1,
            "never retried"
        );
    }
    std::fs::remove_file(fleet.known_hosts()).unwrap();
    let sc = Scenario::new(&fleet);
    let out = sc.run(&["--host-key-policy", "strict"]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(line.contains("host-key policy is strict"), "{line}");
    assert!(
        !fleet.known_hosts().exists()
            || !std::fs::read_to_string(fleet.known_hosts())
                .unwrap()
                .contains(fleet.node(0).host())
    );
}

#[test]
fn keadm_failure_puts_its_exit_status_in_the_log() {
    let fleet = Fleet::builder().nodes(2).start();
    let sc = Scenario::new(&fleet).keadm(
        FakeKeadm::new()
            .prints_stderr("Error: EdgeCore is already running on this node")
            .exits_with(3),
    );
    let out = sc.run(&[]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-01: ");
    // keadm's line exactly: a parser anchored on `status N` at the end of it works.
    assert_eq!(
        line,
        "Failed to process node edge-01: failed to execute keadm command cd /tmp/kubeedge/keadm && ./keadm join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name=edge-01 --token=***: Process exited with status 3"
    );
    assert!(line.ends_with("status 3"));
    // What keadm printed last is kept everywhere else.
    let node = &out.summary()["nodes"][1];
    assert_eq!(node["exit_status"], 3);
    assert_eq!(
        node["last_output"],
        "Error: EdgeCore is already running on this node"
    );
    let journal = std::fs::read_to_string(out.latest_run().join("journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""last_output":"Error: EdgeCore is already running on this node""#),
        "{journal}"
    );
    out.stderr_has("Process exited with status 3 (last output: Error: EdgeCore is already running on this node)");
    assert!(
        out.transcript(1)
            .contains("Error: EdgeCore is already running on this node")
    );
    assert!(
        out.stderr.contains("2 of 2 selected nodes did not succeed"),
        "{}",
        out.stderr
    );
}

#[test]
fn reset_receives_yes_on_stdin() {
    let fleet = Fleet::builder().nodes(1).start();
    // The reset is checked clean afterwards: the node's /etc is its own.
    crate::common::edge_state::clean_etc(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().reads_stdin_line())
        .cmd("reset edge");
    sc.run(&[]).status(0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(calls[0].args, ["reset", "edge"]);
    assert_eq!(calls[0].stdin_line.as_deref(), Some("y"));
}

#[test]
fn copy_from_files_arrive_with_their_modes() {
    use std::os::unix::fs::PermissionsExt;
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    let files = sc.path("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("install.sh"), "#!/bin/sh\necho pre-run\n").unwrap();
    std::fs::set_permissions(
        files.join("install.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    std::fs::write(files.join("ca.crt"), "CERT").unwrap();
    std::fs::set_permissions(files.join("ca.crt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let sc = sc.node_yaml(&format!("copyFrom: {}", files.display()));
    sc.run(&[]).status(0);
    let node = fleet.node(0);
    for (name, mode, content) in [
        ("install.sh", 0o750, "#!/bin/sh\necho pre-run\n"),
        ("ca.crt", 0o600, "CERT"),
    ] {
        let path = node.tmp_path(&format!("kubeedge/keadm/{name}"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            mode,
            "{name}"
        );
    }
    let keadm_mode = std::fs::metadata(remote_keadm(node))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(keadm_mode, 0o755);
    let dir_mode = std::fs::metadata(node.tmp_path("kubeedge/keadm"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700, "the upload dir is owner-only");
}

#[test]
fn keadm_bin_dir_skips_the_upload() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let preinstalled = node.tmp_path("preinstalled/keadm");
    FakeKeadm::new().write_to(&preinstalled).unwrap();
    let sc = Scenario::new(&fleet).node_yaml("keadmBinDir: /tmp/preinstalled");
    let out = sc.run(&[]);
    out.status(0);
    let calls = fake_keadm::calls(&preinstalled);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].cwd, "/tmp/preinstalled");
    assert!(!remote_keadm(node).exists(), "nothing uploaded");
    assert!(
        node.tmp_path("kubeedge/keadm").is_dir(),
        "the dir is still made, as keadm does"
    );
    assert_eq!(out.summary()["nodes"][0]["bytes_uploaded"], 0);
    assert!(!sc.staging_dir().join("bin").exists(), "nothing staged");
}

#[test]
fn each_arch_gets_its_own_build() {
    let fleet = Fleet::builder()
        .nodes(3)
        .node_option(1, NodeOpt::Uname("aarch64"))
        .node_option(2, NodeOpt::Uname("armv7l"))
        .start();
    let sc = Scenario::new(&fleet).arch_group("[amd64, arm64, arm]");
    let out = sc.run(&[]);
    out.status(0);
    for (i, arch) in [(0, "amd64"), (1, "arm64"), (2, "arm")] {
        let script = std::fs::read_to_string(remote_keadm(fleet.node(i))).unwrap();
        assert!(
            script.ends_with(&format!("# arch={arch}\n")),
            "node {i}: {script}"
        );
        assert_eq!(out.summary()["nodes"][i]["arch"], arch);
    }
}

#[test]
fn a_command_past_its_deadline_is_killed_on_the_node() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints("waiting for certificates")
                .sleeps(60.0),
        )
        .node_yaml("timeoutSeconds: 2");
    let started = std::time::Instant::now();
    let out = sc.run(&[]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("ran past its 2 s deadline and was stopped on the node (SIGTERM)"),
        "{line}"
    );
    assert_eq!(out.summary()["nodes"][0]["phase"], "timed_out");
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].end, None, "keadm never finished");
    // Nothing of the command is left running on the node.
    let ps = fleet
        .node(0)
        .shell("ps -eo args | grep -c '[s]leep 60' || true");
    assert_eq!(
        String::from_utf8_lossy(&ps.stdout).trim(),
        "0",
        "the sleep was killed"
    );
}

/// At the deadline the command's process group gets SIGTERM first: a keadm (or a
/// --pre-run script) that traps it cleans up before it exits, as root and under sudo
/// (whose command only root can signal), and the transcript says SIGTERM ended it.
#[test]
fn a_command_past_its_deadline_gets_sigterm_and_cleans_up() {
    for sudo in [false, true] {
        let fleet = if sudo {
            Fleet::with_sudo(Sudo::WithPassword)
        } else {
            Fleet::builder().nodes(1).start()
        };
        let mut sc = Scenario::new(&fleet)
            .keadm(
                FakeKeadm::new()
                    .runs("trap 'echo \"cleaned up as $(id -u)\" > /tmp/cleanup; exit 143' TERM")
                    .sleeps(60.0),
            )
            .node_yaml("timeoutSeconds: 2");
        if sudo {
            sc = sc.login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()));
        }
        let out = sc.run(&[]);
        out.status(1);
        assert_eq!(
            out.summary()["nodes"][0]["phase"],
            "timed_out",
            "sudo {sudo}"
        );
        let cleanup =
            std::fs::read_to_string(fleet.node(0).tmp_path("cleanup")).unwrap_or_else(|e| {
                panic!("sudo {sudo}: no cleanup file ({e}): {}", out.transcript(0))
            });
        assert_eq!(cleanup, "cleaned up as 0\n");
        let transcript = out.transcript(0);
        assert!(
            transcript.contains(
                "the deadline passed: sent SIGTERM to the command's process group; it exited within the grace period"
            ),
            "sudo {sudo}: {transcript}"
        );
        assert!(!transcript.contains("SIGKILL"), "{transcript}");
        let line = out.log_line_starting("Failed to process node edge-00: ");
        assert!(
            line.contains("ran past its 2 s deadline and was stopped on the node (SIGTERM)"),
            "{line}"
        );
    }
}

/// A command that ignores SIGTERM gets SIGKILL once the grace period (`--kill-grace`)
/// has passed: nothing of it runs grace + 2 s after its deadline, and the transcript says
/// SIGKILL ended it.
#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("echo $$ > /tmp/keadm.pid; trap '' TERM; sleep 1000"))
        .node_yaml("timeoutSeconds: 2");
    let out = sc.run(&["--kill-grace", "1"]);
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    out.status(1);
    assert_eq!(out.summary()["nodes"][0]["phase"], "timed_out");
    let node = fleet.node(0);
    let pid = std::fs::read_to_string(node.tmp_path("keadm.pid")).unwrap();
    let gone = node.shell(&format!(
        "kill -0 {} 2>/dev/null && echo alive; ps -eo stat=,args= | grep '[s]leep 1000' | grep -v '^Z' || true",
        pid.trim()
    ));
    assert_eq!(
        String::from_utf8_lossy(&gone.stdout).trim(),
        "",
        "keadm was left running"
    );
    // The deadline passed 2 s after keadm started, or a little later (it started after the
    // deadline's clock did); the run ended once nothing of the command was left.
    let started = fake_keadm::calls(&remote_keadm(node))[0].start;
    eprintln!(
        "timeoutSeconds 2, --kill-grace 1: {:.2} s from keadm's start to the run's end",
        ended - started
    );
    assert!(
        ended - started <= 2.0 + 1.0 + 2.0,
        "{:.2} s from keadm's start to the run's end",
        ended - started
    );
    let transcript = out.transcript(0);
    assert!(
        transcript.contains(
            "the deadline passed: sent SIGTERM to the command's process group; it did not exit within 1 s of SIGTERM: sent SIGKILL"
        ),
        "{transcript}"
    );
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains(
            "ran past its 2 s deadline and was killed on the node (SIGKILL, 1 s after SIGTERM)"
        ),
        "{line}"
    );
}

/// The grace period is `--kill-grace`, 10 s unless given, and never more than the
/// command's own deadline: the dry run shows each node's.
#[test]
fn the_kill_grace_is_at_most_the_command_deadline() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).node_yaml("timeoutSeconds: 3");
    sc.run(&["--dry-run"])
        .status(0)
        .stdout_has("deadlines: connect 10s, command 3s, kill grace 3s, retries");
    sc.run(&["--dry-run", "--timeout", "60"])
        .status(0)
        .stdout_has("deadlines: connect 10s, command 60s, kill grace 10s, retries");
    sc.run(&["--dry-run", "--timeout", "60", "--kill-grace", "0"])
        .status(0)
        .stdout_has("deadlines: connect 10s, command 60s, kill grace 0s, retries");
}

#[test]
fn twenty_nodes_never_exceed_max_run_num() {
    let fleet = Fleet::builder().nodes(20).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().sleeps(0.4))
        .max_run_num(5);
    let started = std::time::Instant::now();
    let out = sc.run(&[]);
    let wall = started.elapsed();
    out.status(0);
    assert_eq!(out.log_lines().len(), 20);
    let mut events = Vec::new();
    for i in 0..20 {
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i)));
        assert_eq!(calls.len(), 1);
        events.push((calls[0].start, 1));
        events.push((calls[0].end.unwrap(), -1));
    }
    events.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (mut running, mut peak) = (0, 0);
    for (_, delta) in events {
        running += delta;
        peak = peak.max(running);
    }
    assert!(peak <= 5, "{peak} keadm commands ran at once");
    assert!(peak >= 2, "the nodes did run in parallel ({peak})");
    eprintln!(
        "20 nodes, maxRunNum 5, keadm sleeping 0.4 s: {:.2} s wall",
        wall.as_secs_f64()
    );
}

#[test]
fn a_second_run_skips_the_identical_upload() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    let first = sc.run(&[]);
    first.status(0);
    assert!(
        first.summary()["nodes"][0]["bytes_uploaded"]
            .as_u64()
            .unwrap()
            > 0
    );
    let sidecar =
        std::fs::read_to_string(fleet.node(0).tmp_path("kubeedge/keadm/keadm.sha256")).unwrap();
    assert_eq!(sidecar.trim().len(), 64);
    let second = sc.run(&[]);
    second.status(0);
    assert_eq!(second.summary()["nodes"][0]["bytes_uploaded"], 0);
    assert_eq!(second.summary()["nodes"][0]["uploads_skipped"], 1);
    assert!(second.transcript(0).contains("already on the node"));
    assert_eq!(
        fake_keadm::calls(&remote_keadm(fleet.node(0))).len(),
        2,
        "keadm still ran twice"
    );
    // A tampered binary is noticed by size or sidecar and replaced.
    std::fs::write(remote_keadm(fleet.node(0)), "#!/bin/sh\nexit 9\n").unwrap();
    let third = sc.run(&[]);
    third.status(0);
    assert!(
        third.summary()["nodes"][0]["bytes_uploaded"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn staging_failure_exits_3_and_keeps_the_previous_log() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).arch_group("[amd64]");
    std::fs::write(
        sc.path("batch_process_log.txt"),
        "Successfully processed node earlier\n",
    )
    .unwrap();
    sc.run(&["--dry-run"]).status(0);
    std::fs::remove_dir_all(sc.path("packages/amd64")).unwrap();
    let out = sc.run(&[]);
    out.status(3);
    assert!(
        out.stderr
            .contains("keadm-v1.23.1-linux-amd64.tar.gz does not exist"),
        "{}",
        out.stderr
    );
    assert_eq!(out.log_lines(), ["Successfully processed node earlier"]);
    assert!(!remote_keadm(fleet.node(0)).exists());
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "no node was touched"
    );
}

#[test]
fn verify_remote_hashes_the_binary_on_the_node_instead_of_trusting_the_sidecar() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    sc.run(&[]).status(0);
    // Same size, same sidecar, different bytes: only a hash on the node can tell.
    let path = remote_keadm(fleet.node(0));
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 2;
    bytes[last] = if bytes[last] == b'x' { b'y' } else { b'x' };
    std::fs::write(&path, &bytes).unwrap();
    let trusting = sc.run(&[]);
    trusting.status(0);
    assert_eq!(
        trusting.summary()["nodes"][0]["uploads_skipped"],
        1,
        "the sidecar is trusted by default"
    );
    let verifying = sc.run(&["--verify-remote"]);
    verifying.status(0);
    assert_eq!(verifying.summary()["nodes"][0]["uploads_skipped"], 0);
    assert_ne!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the tampered binary was replaced"
    );
}

#[test]
fn the_host_key_flag_overrides_the_file() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).ssh_yaml("hostKeyPolicy: off");
    let out = sc.run(&["--host-key-policy", "strict"]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(line.contains("host-key policy is strict"), "{line}");
}

/// Security finding 1: a copyFrom file name is data on the node, never shell code, not
/// even under `"..."` and not as an option to `mv`; every such file arrives whole, is
/// skipped on the next run, and nothing else happens on the node.
#[test]
fn copy_from_file_names_stay_data_on_the_node() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    let files = sc.path("files");
    std::fs::create_dir_all(&files).unwrap();
    let names = [
        "a\"b",
        "it's",
        "a$(touch kb_pwned_dollar)b",
        "a`touch kb_pwned_tick`b",
        "-rf",
        "--target-directory=..",
        "with space",
        "new\nline",
        "ünïcødé-файл",
        "$HOME",
    ];
    for (i, name) in names.iter().enumerate() {
        std::fs::write(files.join(name), format!("content {i} of {name:?}\n")).unwrap();
    }
    let sc = sc.node_yaml(&format!("copyFrom: {}", files.display()));
    let node = fleet.node(0);
    let dir = node.tmp_path("kubeedge/keadm");
    for run in 1..=2 {
        let out = sc.run(&[]);
        out.status(0).log_has(&format!(
            "Successfully processed node {}",
            Scenario::name(0)
        ));
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                std::fs::read(dir.join(name)).unwrap_or_default(),
                format!("content {i} of {name:?}\n").as_bytes(),
                "run {run}: {name:?} arrived byte-identical"
            );
        }
        let node_summary = &out.summary()["nodes"][0];
        if run == 2 {
            assert_eq!(
                node_summary["uploads_skipped"],
                names.len() + 1,
                "every file and keadm are skipped on the rerun: {node_summary}"
            );
            assert_eq!(node_summary["bytes_uploaded"], 0);
        }
    }
    // Nothing else happened: the upload dir holds exactly the files, their sidecars,
    // keadm, the fake keadm's record and the run's process-group file; nothing was moved out or created elsewhere.
    let mut listed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let mut expected: Vec<String> = names
        .iter()
        .flat_map(|n| [n.to_string(), format!("{n}.sha256")])
        .chain(["keadm".into(), "keadm.sha256".into()])
        .chain([".keadm-batch.0.pgid".into(), "keadm.calls".into()])
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    let found = node.shell(
        "find /tmp /root \\( -name 'kb_pwned*' -o -name '*target-directory*' \\) ! -path '/tmp/kubeedge/keadm/*' -print; \
         ls -A /tmp/kubeedge",
    );
    assert_eq!(String::from_utf8_lossy(&found.stdout), "keadm\n");
}

#[test]
fn a_closed_stderr_and_stdout_lose_no_result() {
    // `keadm-batch batch ... 2>&1 | head` after head has quit: every console write fails
    // with EPIPE. The run still processes every node and writes every record of it.
    let fleet = Fleet::builder().nodes(4).start();
    let sc = Scenario::new(&fleet).max_run_num(2);
    let out = sc
        .command(&["-v", "--output", "json"])
        .closed_stderr()
        .closed_stdout()
        .run();
    out.status(0);
    for i in 0..4 {
        out.log_has(&format!(
            "Successfully processed node {}",
            Scenario::name(i)
        ));
        assert_eq!(out.node_summary(i)["phase"], "succeeded");
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
    }
    assert_eq!(out.summary()["totals"]["succeeded"], 4);
    let journal = std::fs::read_to_string(out.latest_run().join("journal.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 4, "{journal}");
    for i in 0..4 {
        assert!(journal.contains(&Scenario::name(i)), "{journal}");
    }
    let report = std::fs::read_to_string(out.latest_run().join("report.html")).unwrap();
    for i in 0..4 {
        assert!(report.contains(&Scenario::name(i)), "{report}");
    }

    // Nodes that fail: the error that says so cannot be printed, and the code is still 1.
    let failing = Scenario::new(&fleet).login(Login::Password("not-the-password".into()));
    let out = failing.command(&[]).closed_stderr().run();
    out.status(1);
    assert_eq!(out.summary()["totals"]["failed"], 4);
    assert_eq!(out.log_lines().len(), 4, "{:?}", out.log_lines());
}
