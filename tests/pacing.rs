//! Handshakes paced to what sshd admits: a connection that sshd drops before its banner
//! (as it does past MaxStartups) is retried within the connect deadline and, if it is
//! never admitted, fails as `ssh_admission_refused`; many config nodes on one sshd stay
//! within `--handshakes-per-host`.

use crate::common::fleet::{Fleet, NodeOpt, closing_port};
use crate::common::scenario::Scenario;
use crate::common::test::{Output, Test};

/// What libssh2 makes of a real sshd's drop past MaxStartups: sshd writes `Exceeded
/// MaxStartups` and resets the connection before its SSH banner.
#[test]
fn a_real_sshd_past_max_startups_is_told_apart_from_a_network_fault() {
    let fleet = Fleet::builder()
        .nodes(1)
        .node_option(0, NodeOpt::SshdConfig("MaxStartups 1:100:1".into()))
        .start();
    let node = fleet.node(0);
    let spec = fleet.root_password_spec(node);
    // One unauthenticated connection fills sshd's only startup.
    // The fleet's own readiness probe may hold it for a moment: until sshd's listener has
    // seen that connection go, it drops ours too.
    let held = (0..50)
        .find_map(|_| {
            let held = std::net::TcpStream::connect((node.host(), node.port())).unwrap();
            let mut banner = [0u8; 4];
            let ok =
                std::io::Read::read_exact(&mut &held, &mut banner).is_ok() && &banner == b"SSH-";
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            ok.then_some(held)
        })
        .expect("sshd admitted one connection");
    let err = keadm_batch::transport::SshConnection::connect(&spec).unwrap_err();
    assert!(err.is_admission_refused(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "The sshd at {} closed the connection before the SSH handshake (",
            node.endpoint()
        )),
        "{text}"
    );
    let log = node.log();
    assert!(log.contains("past MaxStartups"), "{log}");
    // Once the startup is free, the same connect is admitted.
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(keadm_batch::transport::SshConnection::connect(&spec).is_ok());
}

#[test]
fn a_listener_that_closes_before_the_banner_fails_the_node_as_ssh_admission_refused() {
    let fleet = Fleet::builder().nodes(2).start();
    let closing = keadm_batch::transport::Endpoint::new("127.0.0.1", closing_port());
    let sc = Scenario::new(&fleet)
        .endpoint_for(1, closing.clone())
        .node_yaml_for(1, "  connectTimeoutSeconds: 2");
    let out = sc.run(&[]);
    // As for any node that could not be reached: the run fails, the other node is done.
    out.status(1);
    out.log_has("Successfully processed node edge-00");
    let line = out.log_line_starting("Failed to process node edge-01: ");
    assert!(
        line.contains(&format!(
            "The sshd at {closing} closed the connection before the SSH handshake (it sent no SSH banner)"
        )) && line.ends_with(
            "Raise MaxStartups (and PerSourceMaxStartups) on 127.0.0.1, or lower --handshakes-per-host."
        ),
        "{line}"
    );
    let node = out.node_summary(1);
    assert_eq!(node["failure_class"], "ssh_admission_refused", "{node}");
    assert_eq!(node["failed_in"], "connecting");
    let attempts = node["connect_attempts"].as_u64().unwrap();
    // Retries 0.25 s, 0.5 s, 1 s... (with jitter) within the 2 s deadline, not `retries`.
    assert!((3..=10).contains(&attempts), "{attempts}");
    let transcript = out.transcript(1);
    for attempt in 1..attempts {
        assert!(
            transcript.contains(&format!("Attempt {attempt} was not admitted.")),
            "{transcript}"
        );
    }
    assert!(
        transcript.contains("(within the connect deadline of 2 s)"),
        "{transcript}"
    );
    // The recap groups it under its own class, with its fix.
    assert!(
        out.stderr
            .contains("sshd refused to admit the connection (MaxStartups)")
            && out
                .stderr
                .contains("lower --handshakes-per-host (default 8)"),
        "{}",
        out.stderr
    );
}

/// Sixteen config nodes, each with its own name and upload directory, that all point at
/// fleet node 0's sshd, run at maxRunNum 16 with `args`. The scenario holds the run's
/// directory that the output reads.
fn sixteen_on_one_sshd<'f>(fleet: &'f Fleet, args: &[&str]) -> (Scenario<'f>, Output) {
    let sc = Scenario::new(fleet)
        .max_run_num(NODES)
        .node_yaml("remoteDir: /tmp/{name}/keadm");
    let block = sc.node_block(0, fleet.node(0));
    let mut text = sc.config_text();
    for i in 1..NODES {
        text.push_str(&block.replace("edge-00", &Scenario::name(i)));
    }
    let text = (0..NODES).fold(text, |t, i| {
        t.replacen("/tmp/{name}/", &format!("/tmp/{}/", Scenario::name(i)), 1)
    });
    std::fs::write(sc.path("config.yaml"), text).unwrap();
    let out = sc.run(&[&["--relay", "off"], args].concat());
    out.status(0);
    for i in 0..NODES {
        out.log_has(&format!(
            "Successfully processed node {}",
            Scenario::name(i)
        ));
    }
    (sc, out)
}

const NODES: usize = 16;

/// `MaxStartups 4:100:4`: sshd drops every unauthenticated connection past four. Paced
/// to two, as the default 8 is to sshd's 10: sshd still counts a connection as a startup
/// for a moment after the client has seen its login succeed (until sshd's listener
/// reads that its child is done), so a pace equal to MaxStartups is not enough.
fn strict_sshd() -> Fleet {
    Fleet::builder()
        .nodes(1)
        .node_option(0, NodeOpt::SshdConfig("MaxStartups 4:100:4".into()))
        .start()
}

fn dropped(fleet: &Fleet) -> usize {
    fleet
        .node(0)
        .log()
        .lines()
        .filter(|l| l.contains("past MaxStartups"))
        .count()
}

#[test]
fn sixteen_nodes_on_one_sshd_of_max_startups_4_paced_to_two_are_all_admitted() {
    let fleet = strict_sshd();
    let (_sc, out) = sixteen_on_one_sshd(&fleet, &["--handshakes-per-host", "2"]);
    assert_eq!(out.log_lines().len(), NODES, "{}", out.stderr);
    for i in 0..NODES {
        assert!(
            !out.transcript(i).contains("was not admitted"),
            "{}",
            out.transcript(i)
        );
    }
    let log = fleet.node(0).log();
    assert_eq!(dropped(&fleet), 0, "sshd dropped connections:\n{log}");
    assert!(
        log.lines()
            .filter(|l| l.contains("Accepted password"))
            .count()
            >= NODES,
        "{log}"
    );
}

#[test]
fn sixteen_nodes_on_one_sshd_of_max_startups_4_unpaced_are_retried_until_admitted() {
    let fleet = strict_sshd();
    let (_sc, out) = sixteen_on_one_sshd(
        &fleet,
        &["--handshakes-per-host", "16", "--connect-timeout", "30"],
    );
    // How many handshakes overlap is up to the scheduler; each one sshd dropped is a
    // retry in some node's transcript.
    let retries: usize = (0..NODES)
        .map(|i| out.transcript(i).matches("was not admitted").count())
        .sum();
    assert_eq!(retries, dropped(&fleet), "{}", fleet.node(0).log());
}

#[test]
fn the_dry_run_says_the_pace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "keadm:\n  keadmVersion: v1.23.1\nnodes:\n  - nodeName: a\n    keadmCmd: 'join --token=x'\n    ssh:\n      ip: 192.0.2.1\n      username: root\n      auth:\n        type: password\n        passwordAuth:\n          password: pw\n",
    )
    .unwrap();
    let out = Test::in_dir(dir.path())
        .args([
            "batch",
            "-c",
            "config.yaml",
            "--dry-run",
            "--handshakes-per-host",
            "3",
        ])
        .run();
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(
            "  handshakes:  at most 3 SSH handshakes in flight to one sshd (--handshakes-per-host;"
        ),
        "{}",
        out.stdout
    );
}
