//! Nodes behind a jump host share one authenticated connection to it (the hub), against
//! real OpenSSH sshd nodes on loopback: the bastion's own log counts its logins.

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, Node, NodeOpt};
use crate::common::scenario::{Scenario, remote_keadm};
use keadm_batch::transport::{ConnectSpec, Connection, SshConnection, TransportError};

/// The logins `node`'s sshd has accepted so far (`LogLevel VERBOSE` logs each one).
fn logins(node: &Node) -> usize {
    node.log()
        .lines()
        .filter(|l| l.contains("Accepted ") && l.contains(" for "))
        .count()
}

/// The `proxyJump` block for `hops`, the nearest first, each inside the one before, to
/// go under a node's `ssh:` (whose keys are indented 6 spaces).
fn proxy_jump_yaml(fleet: &Fleet, hops: &[&Node]) -> String {
    let mut yaml = String::new();
    for (depth, hop) in hops.iter().enumerate() {
        let pad = " ".repeat(6 + 2 * depth);
        // The scenario indents the first line; every later one carries its own.
        let key = if depth == 0 {
            String::new()
        } else {
            pad.clone()
        };
        yaml += &format!(
            "{key}proxyJump:\n{pad}  ip: '{}'\n{pad}  port: {}\n{pad}  username: root\n{pad}  auth:\n{pad}    type: password\n{pad}    passwordAuth:\n{pad}      password: '{}'\n",
            hop.host(),
            hop.port(),
            fleet.root_password().expose()
        );
    }
    yaml.trim_end().to_string()
}

/// The run of `targets` (fleet indexes) behind the fleet's node 0, `at_once` at a time,
/// each keadm sleeping `sleep` seconds.
fn behind_bastion<'f>(
    fleet: &'f Fleet,
    targets: &[usize],
    at_once: usize,
    sleep: f64,
) -> Scenario<'f> {
    Scenario::new(fleet)
        .only_nodes(targets)
        .max_run_num(at_once)
        .keadm(FakeKeadm::new().sleeps(sleep))
        .ssh_yaml(&proxy_jump_yaml(fleet, &[fleet.node(0)]))
}

fn through(fleet: &Fleet, target: &Node, jump: &Node) -> ConnectSpec {
    let mut spec = fleet.root_password_spec(target);
    spec.jump = Some(Box::new(fleet.root_password_spec(jump)));
    spec
}

fn echo(conn: &mut SshConnection, word: &str) -> Result<String, TransportError> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    conn.exec(&format!("echo {word}"), None, deadline, &mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn twelve_nodes_behind_one_bastion_cost_it_one_login_or_one_per_connection_asked_for() {
    let fleet = Fleet::builder().nodes(13).start();
    let bastion = fleet.node(0);
    let targets: Vec<usize> = (1..=12).collect();
    let sc = behind_bastion(&fleet, &targets, 12, 1.5);

    sc.run(&[]).status(0);
    for &i in &targets {
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
    }
    assert_eq!(
        logins(bastion),
        1,
        "twelve nodes, one login on the bastion:\n{}",
        bastion.log()
    );

    sc.run(&["--jump-connections", "2"]).status(0);
    for &i in &targets {
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 2);
    }
    assert_eq!(
        logins(bastion),
        1 + 2,
        "--jump-connections 2: two more logins:\n{}",
        bastion.log()
    );
}

#[test]
fn a_lost_bastion_connection_is_made_again_once_then_its_nodes_fail_naming_it() {
    let fleet = Fleet::builder().nodes(5).start();
    let bastion = fleet.node(0);
    let mut first = SshConnection::connect(&through(&fleet, fleet.node(1), bastion)).unwrap();
    assert_eq!(echo(&mut first, "one").unwrap(), "one\n");
    assert_eq!(logins(bastion), 1);

    // The bastion's sshd serving the shared connection dies: the node on it loses its
    // session, and the next nodes get a new shared connection, one for both.
    assert!(!bastion.kill_session_sshds().is_empty());
    let err = echo(&mut first, "lost").unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let mut second = SshConnection::connect(&through(&fleet, fleet.node(2), bastion)).unwrap();
    let mut third = SshConnection::connect(&through(&fleet, fleet.node(3), bastion)).unwrap();
    assert_eq!(echo(&mut second, "two").unwrap(), "two\n");
    assert_eq!(echo(&mut third, "three").unwrap(), "three\n");
    assert_eq!(
        logins(bastion),
        2,
        "re-established once:\n{}",
        bastion.log()
    );

    // A second death is final for the nodes that still need it, and says where it was.
    assert!(!bastion.kill_session_sshds().is_empty());
    let err = SshConnection::connect(&through(&fleet, fleet.node(4), bastion)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TransportError::Jump { .. }), "{err:?}");
    assert!(
        msg.contains(&format!("through the jump host {}", bastion.endpoint()))
            && msg.contains("lost again"),
        "{msg}"
    );
    assert_eq!(logins(bastion), 2, "no third login:\n{}", bastion.log());
}

#[test]
fn a_bastion_killed_mid_run_is_reconnected_for_the_nodes_that_had_not_started() {
    let fleet = Fleet::builder().nodes(7).start();
    let bastion = fleet.node(0);
    let targets: Vec<usize> = (1..=6).collect();
    let sc = behind_bastion(&fleet, &targets, 3, 3.0);
    let running = sc.command(&[]).spawn();
    let started = |i: &usize| !fake_keadm::calls(&remote_keadm(fleet.node(*i))).is_empty();
    let until = Instant::now() + Duration::from_secs(60);
    while targets.iter().filter(|i| started(i)).count() < 3 {
        assert!(Instant::now() < until, "three nodes never started keadm");
        std::thread::sleep(Duration::from_millis(50));
    }
    let first: Vec<usize> = targets.iter().copied().filter(started).collect();
    assert!(!bastion.kill_session_sshds().is_empty());
    let out = running.wait();
    for i in targets.iter().filter(|i| !first.contains(i)) {
        let line = out.log_line_starting(&format!(
            "Successfully processed node {}",
            Scenario::name(*i)
        ));
        assert!(!line.is_empty(), "node {i} got the new connection");
    }
    assert_eq!(
        logins(bastion),
        2,
        "re-established once:\n{}",
        bastion.log()
    );
}

#[test]
fn a_chain_of_two_jump_hosts_costs_one_login_on_each() {
    // At DEBUG, sshd logs the target of each forwarded connection it opens.
    let fleet = Fleet::builder()
        .nodes(5)
        .node_option(0, NodeOpt::SshdConfig("LogLevel DEBUG".into()))
        .node_option(1, NodeOpt::SshdConfig("LogLevel DEBUG".into()))
        .start();
    let (outer, inner) = (fleet.node(0), fleet.node(1));
    let targets = [2, 3, 4];
    let sc = Scenario::new(&fleet)
        .only_nodes(&targets)
        .max_run_num(3)
        .ssh_yaml(&proxy_jump_yaml(&fleet, &[inner, outer]));
    sc.run(&[]).status(0);
    for i in targets {
        assert_eq!(fake_keadm::calls(&remote_keadm(fleet.node(i))).len(), 1);
    }
    assert_eq!(logins(inner), 1, "{}", inner.log());
    assert_eq!(logins(outer), 1, "{}", outer.log());
    // The outer host carried the inner one's connection; the inner one the nodes'.
    let relayed = |log: &str, node: &Node| {
        log.contains(&format!("to {} port {}", node.host(), node.port()))
            || log.contains(&format!("target {} port {}", node.host(), node.port()))
    };
    assert!(relayed(&outer.log(), inner), "{}", outer.log());
    for i in targets {
        assert!(relayed(&inner.log(), fleet.node(i)), "{}", inner.log());
        assert!(!relayed(&outer.log(), fleet.node(i)), "{}", outer.log());
    }
}

/// Accepts TCP connections, counts them and never answers: a bastion whose sshd hangs.
fn counting_tarpit() -> (String, u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
            // Reap the ones the client has closed, so a long test holds few.
            held.retain_mut(|s| {
                let _ = s.set_nonblocking(true);
                !matches!(s.read(&mut [0u8; 64]), Ok(0))
            });
        }
    });
    ("127.0.0.1".to_string(), port, count)
}

#[test]
fn nodes_behind_an_unreachable_bastion_wait_on_one_attempt_and_name_it() {
    let fleet = Fleet::builder().nodes(6).start();
    let (host, port, attempts) = counting_tarpit();
    let targets: Vec<usize> = (0..6).collect();
    let sc = Scenario::new(&fleet)
        .max_run_num(6)
        .top_yaml("retries: 0")
        .ssh_yaml(&format!(
            "proxyJump:\n        ip: '{host}'\n        port: {port}\n        username: root\n        auth:\n          type: password\n          passwordAuth:\n            password: x"
        ));
    // Without the site relay, which lets a site's first node connect before the rest.
    let out = sc.run(&["--connect-timeout", "2", "--relay", "off"]);
    out.status(1);
    for i in targets {
        let line = out.log_line_starting(&format!("Failed to process node {}", Scenario::name(i)));
        assert!(
            line.contains(&format!("through the jump host {host}:{port}"))
                && line.contains(&format!(
                    "Connecting to the node at {host}:{port} timed out"
                )),
            "{line}"
        );
    }
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "six nodes waited on one connection attempt to the bastion"
    );
}
