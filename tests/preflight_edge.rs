//! Pre-flight from the edge's side, on real sshd nodes through the binary under
//! `--preflight strict`: what only the node can see of a join. cloudcore's ports answer
//! the control host but not a node on a site LAN (its own network namespace, where the
//! control host's loopback is not routed); a node whose `date` runs two hours behind; a
//! node whose containerd config says `SystemdCgroup = true` while keadmCmd leaves
//! `--cgroupdriver` at keadm's default. Every change to a node is in its own mount
//! namespace.

use std::net::{TcpListener, TcpStream};

use crate::common::cloudcore::{FakeCloudcore, now, token};
use crate::common::edge_state::RuntimeSocket;
use crate::common::fleet::{Fleet, Node};
use crate::common::scenario::Scenario;
use crate::common::test::Output;

/// A join of `{name}` through the node's stand-in runtime socket, to cloudhub's port
/// `hub_port` and the stand-in cloudcore's certificate port, with a token of its CA that
/// has a day to live; `extra` is appended.
fn join(hub_port: u16, cloudcore: &FakeCloudcore, extra: &str) -> String {
    format!(
        "join --cloudcore-ipport=127.0.0.1:{hub_port} --certport={} --edgenode-name={{name}} --token={} --remote-runtime-endpoint=unix:///tmp/containerd.sock{extra}",
        cloudcore.port,
        token(&cloudcore.ca_hash(), now() + 86_400),
    )
}

/// The pre-flight findings of node 0 in summary.json, as (id, detail).
fn findings(out: &Output) -> Vec<(String, String)> {
    out.summary()["nodes"][0]["preflight"]
        .as_array()
        .unwrap_or_else(|| panic!("no preflight in summary.json: {}", out.summary()))
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Node 0 was skipped by pre-flight, untouched, with `message` first in its log line.
fn skipped(out: &Output, node: &Node, message: &str) -> String {
    out.status(1);
    assert_eq!(out.summary()["nodes"][0]["phase"], "skipped");
    let line = out.log_line_starting("Failed to process node edge-00: Skipped by pre-flight: ");
    assert!(line.contains(message), "{line}");
    assert!(
        !node.tmp_path("kubeedge").exists(),
        "the skipped node was touched"
    );
    line
}

#[test]
fn cloudcore_reachable_from_the_control_host_but_not_from_the_node_stops_the_join() {
    let fleet = Fleet::builder().nodes(1).site_lans(&[0]).start();
    let node = fleet.node(0);
    let _runtime = RuntimeSocket::create(node);
    let cloudcore = FakeCloudcore::start();
    let hub = TcpListener::bind("127.0.0.1:0").unwrap();
    let hub_port = hub.local_addr().unwrap().port();
    // The control host reaches both ports.
    TcpStream::connect(("127.0.0.1", hub_port)).expect("the control host reaches cloudhub");
    TcpStream::connect(("127.0.0.1", cloudcore.port)).expect("the control host reaches 10002");

    let sc = Scenario::new(&fleet)
        .cmd(&join(hub_port, &cloudcore, ""))
        .preflight("strict");
    let out = sc.run(&[]);
    let line = skipped(
        &out,
        node,
        "cloudcore does not answer a TCP connection from the node",
    );
    assert!(
        line.contains("(and 1 more finding(s)). Make --cloudcore-ipport name an address of cloudcore the node can reach"),
        "{line}"
    );
    let mut found = findings(&out);
    found.sort();
    eprintln!("{found:?}");
    let ids: Vec<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "cloudcore_unreachable_from_node",
            "cloudcore_unreachable_from_node"
        ]
    );
    // The node's own loopback has nothing on those ports; the control host's is not routed there.
    let why = "Connection refused";
    let mut expected = vec![
        format!("127.0.0.1:{hub_port} (cloudhub's port, from --cloudcore-ipport): {why}"),
        format!(
            "127.0.0.1:{} (the certificate port, --certport): {why}",
            cloudcore.port
        ),
    ];
    expected.sort();
    let details: Vec<String> = found.into_iter().map(|(_, d)| d).collect();
    assert_eq!(details, expected);
    drop(hub);
}

#[test]
fn a_node_clock_two_hours_behind_stops_the_join() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let _runtime = RuntimeSocket::create(node);
    let cloudcore = FakeCloudcore::start();
    // The node's date: the real one, two hours back.
    std::fs::copy("/usr/bin/date", node.tmp_path("date.real")).unwrap();
    std::fs::write(
        node.tmp_path("date"),
        "#!/bin/sh\nexec /tmp/date.real -d \"@$(( $(/tmp/date.real +%s) - 7200 ))\" \"$@\"\n",
    )
    .unwrap();
    node.shell_ok("chmod 755 /tmp/date && mount --bind /tmp/date /usr/bin/date");
    let shifted = node.shell("date +%s");
    let shifted: u64 = String::from_utf8_lossy(&shifted.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(
        now() - shifted >= 7199,
        "the wrapper shifts the node's clock"
    );

    let sc = Scenario::new(&fleet)
        .cmd(&join(cloudcore.port, &cloudcore, ""))
        .preflight("strict");
    let out = sc.run(&[]);
    skipped(
        &out,
        node,
        "The node's clock is more than a minute off the control host's",
    );
    let found = findings(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "clock_skew");
    let detail = &found[0].1;
    let (said, rest) = detail
        .strip_prefix("the node's clock said ")
        .and_then(|d| d.split_once(", the control host's "))
        .unwrap_or_else(|| panic!("{detail}"));
    let (ours, rest) = rest
        .split_once(" when the probe ran: the node is ")
        .unwrap_or_else(|| panic!("{detail}"));
    let secs: u64 = rest
        .strip_suffix(" s behind, more than 60 s")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    // Two hours, less at most the round trip's few seconds.
    assert!((7190..=7200).contains(&secs), "{detail}");
    let parse = |t: &str| {
        humantime::parse_rfc3339(t)
            .unwrap_or_else(|e| panic!("{t}: {e}"))
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert!(parse(ours) - parse(said) >= secs, "{detail}");
}

#[test]
fn a_systemd_cgroup_containerd_with_keadms_default_driver_stops_the_join() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let _runtime = RuntimeSocket::create(node);
    let cloudcore = FakeCloudcore::start();
    std::fs::write(
        node.tmp_path("containerd-config.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
    )
    .unwrap();
    node.shell_ok("mount --bind /tmp/containerd-config.toml /etc/containerd/config.toml");

    let sc = Scenario::new(&fleet)
        .cmd(&join(cloudcore.port, &cloudcore, ""))
        .preflight("strict");
    let out = sc.run(&[]);
    let line = skipped(
        &out,
        node,
        "The container runtime uses another cgroup driver than the one keadm join will write for edgecore",
    );
    assert!(
        line.contains("pass --cgroupdriver=systemd in keadmCmd"),
        "{line}"
    );
    assert_eq!(
        findings(&out),
        [(
            "cgroup_driver_mismatch".to_string(),
            "containerd uses systemd (SystemdCgroup = true in containerd config dump); keadm will write cgroupfs for edgecore (keadm's default without --cgroupdriver)".to_string()
        )]
    );

    // With the driver keadm is told to write, the node joins.
    let sc = Scenario::new(&fleet)
        .cmd(&join(cloudcore.port, &cloudcore, " --cgroupdriver=systemd"))
        .preflight("strict");
    let out = sc.run(&[]);
    out.status(0);
    let summary = out.summary();
    assert_eq!(summary["nodes"][0]["phase"], "succeeded");
    assert!(summary["nodes"][0].get("preflight").is_none(), "{summary}");
}
