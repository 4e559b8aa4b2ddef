//! One copy per site on real sshd nodes, a site's nodes on a LAN of their own (network
//! namespaces joined by a bridge; the test process is the control host, with one link to
//! each LAN): the first node to need keadm gets it from the control host, the others read
//! it from a node of the site with their own ssh client, checked by sha256; any failure
//! of that sends the node keadm directly; no key is left on any node.

use crate::common::fake_keadm::FakeKeadm;
use std::os::unix::fs::MetadataExt;

use crate::common::fleet::{
    Fleet, Node, NodeOpt, Sudo, TEST_USER, TEST_USER_ID, TEST_USER_PASSWORD,
};
use crate::common::scenario::{Login, Scenario, remote_keadm};
use crate::common::test::Output;

/// Large enough that an upload shows in the byte counts, small enough to be quick.
const PADDED: usize = 2 << 20;

fn keadm() -> FakeKeadm {
    FakeKeadm::new().padded_to(PADDED)
}

/// The relay's lines in a login's authorized_keys on `node` (under `home`, relative to
/// the node's root, or root's own home).
fn relay_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("keadm-batch-relay-"))
        .map(str::to_string)
        .collect()
}

/// Asserts that no node of `fleet` serves any more: no relay line in root's
/// authorized_keys, or with `user_home` the test user's (its home is the node's /tmp) and
/// no copy a sudo node served there, and no relay file left in the upload dir.
pub(crate) fn no_node_serves(fleet: &Fleet, user_home: bool, context: &str) {
    for (i, node) in fleet.nodes().iter().enumerate() {
        let keys = if user_home {
            node.tmp_path(".ssh/authorized_keys")
        } else {
            node.root_home_path(".ssh/authorized_keys")
        };
        assert_eq!(
            relay_lines(&keys),
            Vec::<String>::new(),
            "node {i} still serves\n{context}"
        );
        assert_eq!(relay_leftovers(node), Vec::<String>::new(), "node {i}");
        if user_home {
            let copies: Vec<String> = std::fs::read_dir(node.tmp_path(""))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".keadm-batch-relay-"))
                .collect();
            assert_eq!(
                copies,
                Vec::<String>::new(),
                "node {i} keeps its served copy"
            );
        }
    }
}

/// Files the relay writes beside its copy (the key, the source's host key, ssh's
/// errors), left in the upload dir.
fn relay_leftovers(node: &Node) -> Vec<String> {
    std::fs::read_dir(node.tmp_path("kubeedge/keadm"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".key") || n.ends_with(".hosts") || n.ends_with(".err"))
                .collect()
        })
        .unwrap_or_default()
}

/// Which nodes got keadm from the control host (bytes uploaded) and which from a peer
/// (their transcript says so).
fn sources_of_keadm(out: &Output, nodes: usize) -> (Vec<usize>, Vec<usize>) {
    let mut direct = Vec::new();
    let mut from_peer = Vec::new();
    for i in 0..nodes {
        let summary = out.node_summary(i);
        if summary["bytes_uploaded"].as_u64().unwrap_or(0) > 0 {
            direct.push(i);
        }
        if out.transcript(i).contains("keadm came from ") {
            from_peer.push(i);
        }
    }
    (direct, from_peer)
}

/// Every node ends with the same keadm the control host staged.
fn same_keadm_everywhere(fleet: &Fleet, nodes: usize) {
    let first = std::fs::read(remote_keadm(fleet.node(0))).unwrap();
    assert!(first.len() >= PADDED);
    for i in 1..nodes {
        assert_eq!(
            std::fs::read(remote_keadm(fleet.node(i))).unwrap(),
            first,
            "node {i}'s keadm differs"
        );
    }
}

#[test]
fn a_site_gets_keadm_over_its_uplink_once_and_the_rest_from_its_nodes() {
    let fleet = Fleet::builder().nodes(4).site_lans(&[0, 0, 0, 0]).start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(4)
        .top_yaml("site: store-1");
    let out = sc.run(&[]);
    out.status(0);
    let (direct, from_peer) = sources_of_keadm(&out, 4);
    assert_eq!(direct.len(), 1, "one copy over the uplink: {direct:?}");
    assert_eq!(from_peer.len(), 3, "three from peers: {from_peer:?}");
    same_keadm_everywhere(&fleet, 4);
    no_node_serves(&fleet, false, "");
    let stdout_json = out.summary();
    let site = &stdout_json["sites"][0];
    assert_eq!(site["site"], "store-1", "{stdout_json}");
    assert_eq!(site["uplink_copies"], 1, "{site}");
    assert_eq!(site["peer_copies"], 3, "{site}");
    assert!(
        out.stderr
            .contains("site store-1: 4 nodes, 1 copy over the uplink"),
        "{}",
        out.stderr
    );
}

#[test]
fn relay_off_sends_every_node_its_own_copy() {
    let fleet = Fleet::builder().nodes(3).site_lans(&[0, 0, 0]).start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(3)
        .top_yaml("site: store-1");
    let out = sc.run(&["--relay", "off"]);
    out.status(0);
    let (direct, from_peer) = sources_of_keadm(&out, 3);
    assert_eq!(direct, vec![0, 1, 2]);
    assert!(from_peer.is_empty());
    for i in 0..3 {
        assert!(
            !out.transcript(i).contains("relay"),
            "node {i}'s transcript mentions the relay"
        );
    }
}

/// A source whose sshd serves other bytes: the receiver's hash check refuses them, and
/// the node still joins with keadm from the control host.
#[test]
fn a_source_that_serves_wrong_bytes_cannot_get_them_installed() {
    // Node 0 seeds (one node at a time, in config order). Its sshd answers the relay's
    // fetch with other bytes of the same size; every other command runs as it is.
    let tamper = format!(
        "ForceCommand if [ \"$SSH_ORIGINAL_COMMAND\" = fetch ]; then head -c {} /dev/zero; else exec sh -c \"$SSH_ORIGINAL_COMMAND\"; fi",
        PADDED
    );
    let fleet = Fleet::builder()
        .nodes(3)
        .site_lans(&[0, 0, 0])
        .node_option(0, NodeOpt::SshdConfig(tamper))
        .start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let out = sc.run(&[]);
    out.status(0);
    let t1 = out.transcript(1);
    assert!(
        t1.contains(&format!("reading keadm from {}", fleet.node(0).host())),
        "{t1}"
    );
    assert!(
        t1.contains("getting it from this machine instead"),
        "node 1 did not fall back:\n{t1}"
    );
    same_keadm_everywhere(&fleet, 3);
    for i in 0..3 {
        assert!(
            !remote_keadm(fleet.node(i))
                .parent()
                .unwrap()
                .join(".keadm.tmp")
                .exists()
        );
    }
}

/// A receiver on another LAN than its source (one `site:` in the config, but no route
/// between the two LANs): its `ssh -b` to the source fails, and it falls back to this
/// machine, with one line saying why, and joins.
#[test]
fn a_receiver_that_cannot_reach_the_source_falls_back() {
    let fleet = Fleet::builder().nodes(2).site_lans(&[0, 1]).start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let out = sc.run(&[]);
    out.status(0);
    let source = fleet.node(0).host();
    let t1 = out.transcript(1);
    assert!(
        t1.contains(&format!("reading keadm from {source} of the site store-1")),
        "node 1 did not try node 0:\n{t1}"
    );
    let fell_back: Vec<&str> = t1
        .lines()
        .filter(|l| l.contains("getting it from this machine instead"))
        .collect();
    assert_eq!(
        fell_back.len(),
        1,
        "node 1 says once why it fell back:\n{t1}"
    );
    assert!(
        fell_back[0].contains(&format!("reading keadm from {source} failed"))
            && fell_back[0].contains("Network is unreachable"),
        "node 1's line names the source and the unreachable network: {}",
        fell_back[0]
    );
    let (direct, from_peer) = sources_of_keadm(&out, 2);
    assert_eq!(direct, vec![0, 1], "both copies crossed the uplink");
    assert!(from_peer.is_empty(), "{from_peer:?}");
    same_keadm_everywhere(&fleet, 2);
    no_node_serves(&fleet, false, &out.stderr);
    let summary = out.summary();
    let site = &summary["sites"][0];
    assert_eq!(site["uplink_copies"], 2, "{site}");
    assert_eq!(site["peer_copies"], 0, "{site}");
}

/// A seed that cannot get keadm (its disk is full) hands its role to the next node of
/// the site: that node gets keadm over the uplink and serves it, the others read it from
/// that node, and every node but the failed seed joins.
#[test]
fn a_seed_that_fails_hands_its_role_to_the_next_node() {
    let fleet = Fleet::builder().nodes(4).site_lans(&[0, 0, 0, 0]).start();
    // Node 0 seeds (one node at a time, in config order). Its upload dir is a 1 MiB
    // tmpfs in its own mount namespace: keadm, twice that, cannot be written there.
    let full = fleet.node(0).shell(
        "mkdir -p /tmp/kubeedge/keadm && mount -t tmpfs -o size=1m,mode=700 tmpfs /tmp/kubeedge/keadm",
    );
    assert!(full.status.success(), "{full:?}");
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let out = sc.run(&[]);
    out.status(1);
    let seed = out.node_summary(0);
    assert_eq!(
        seed["phase"], "failed",
        "the seed whose disk is full fails: {seed}"
    );
    assert!(
        seed["error"]
            .as_str()
            .is_some_and(|e| e.contains("no space left on device")),
        "the seed failed for its full disk, not for another reason: {seed}"
    );
    for i in 1..4 {
        assert_eq!(
            out.node_summary(i)["phase"],
            "succeeded",
            "node {i} joins:\n{}",
            out.transcript(i)
        );
    }
    // Node 1 took the seed's role: it got keadm from this machine, 2 and 3 from it.
    let (direct, from_peer) = sources_of_keadm(&out, 4);
    assert!(
        direct.contains(&1) && !direct.contains(&2) && !direct.contains(&3),
        "only node 1 got keadm over the uplink (the failed seed's bytes may count too): {direct:?}"
    );
    assert_eq!(from_peer, vec![2, 3], "nodes 2 and 3 read from a peer");
    let source = fleet.node(1).host();
    for i in [2, 3] {
        let t = out.transcript(i);
        assert!(
            t.contains(&format!("keadm came from {source} of the site")),
            "node {i} read from node 1, the new seed:\n{t}"
        );
    }
    let summary = out.summary();
    let site = &summary["sites"][0];
    assert_eq!(
        site["uplink_copies"], 1,
        "one copy arrived over the uplink: {site}"
    );
    assert_eq!(site["peer_copies"], 2, "{site}");
    let first = std::fs::read(remote_keadm(fleet.node(1))).unwrap();
    for i in [2, 3] {
        assert_eq!(
            std::fs::read(remote_keadm(fleet.node(i))).unwrap(),
            first,
            "node {i}'s keadm differs"
        );
    }
    no_node_serves(&fleet, false, &out.stderr);
}

/// The LANs are what the tests above claim: a node's one route is its LAN, so it reaches
/// a node of its LAN and not one of another.
#[test]
fn a_node_of_a_site_lan_routes_to_its_lan_only() {
    let fleet = Fleet::builder().nodes(3).site_lans(&[0, 0, 1]).start();
    let lans = fleet.lans().unwrap();
    let routes = fleet
        .node(0)
        .shell("ip -4 route show table all | grep -v '^local\\|^broadcast'");
    assert!(routes.status.success(), "{routes:?}");
    let routes = String::from_utf8_lossy(&routes.stdout);
    let (subnet, _) = lans.subnet(0);
    assert_eq!(
        routes.lines().map(str::trim_end).collect::<Vec<_>>(),
        vec![format!(
            "{subnet} dev eth0 proto kernel scope link src {}",
            fleet.node(0).host()
        )],
        "node 0 has its LAN's route and no other"
    );
    let same = fleet
        .node(0)
        .shell(&format!("ip route get {}", fleet.node(1).host()));
    assert!(same.status.success(), "node 0 routes to node 1: {same:?}");
    let other = fleet
        .node(0)
        .shell(&format!("ip route get {}", fleet.node(2).host()));
    assert!(
        !other.status.success()
            && String::from_utf8_lossy(&other.stderr).contains("Network is unreachable"),
        "node 0 has no route to node 2 on the other LAN: {other:?}"
    );
}

/// Under sudo the source serves from the login user's own authorized_keys, and the
/// receiver's fetch runs as root; both are cleaned up.
#[test]
fn sudo_nodes_relay_too() {
    let fleet = Fleet::builder()
        .nodes(3)
        .site_lans(&[0, 0, 0])
        .all_nodes(NodeOpt::Sudo(Sudo::Passwordless))
        .start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(3)
        .top_yaml("site: store-1")
        .login_as_test_user(Login::Password(
            crate::common::fleet::TEST_USER_PASSWORD.to_string(),
        ));
    let out = sc.run(&[]);
    out.status(0);
    let (direct, from_peer) = sources_of_keadm(&out, 3);
    assert_eq!(
        direct.len(),
        1,
        "{direct:?}\n{}\n{}",
        out.transcript(1),
        out.transcript(2)
    );
    assert_eq!(from_peer.len(), 2, "{from_peer:?}");
    same_keadm_everywhere(&fleet, 3);
    no_node_serves(&fleet, true, "");
}

/// The seed's keadm holds on while the seed serves; returns the run once the seed's
/// authorized_keys has the relay's line.
fn seed_serving(fleet: &Fleet, sc: &Scenario) -> crate::common::test::Running {
    std::fs::write(fleet.node(0).tmp_path("hold"), "").unwrap();
    let running = sc.command(&[]).spawn();
    let ak = fleet.node(0).root_home_path(".ssh/authorized_keys");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while relay_lines(&ak).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the seed never served"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    running
}

fn holding_keadm() -> FakeKeadm {
    keadm().runs("if [ -e /tmp/hold ]; then sleep 60; fi")
}

/// A control host killed while a seed serves leaves a line that expires by itself. A
/// later run leaves it while it may still serve (it may be another run's, going on at
/// the same time), and removes it once it has expired, leaving nothing of its own.
#[test]
fn a_later_run_removes_what_a_killed_control_host_left_once_it_has_expired() {
    let fleet = Fleet::builder().nodes(2).site_lans(&[0, 0]).start();
    let sc = Scenario::new(&fleet)
        .keadm(holding_keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let mut running = seed_serving(&fleet, &sc);
    running.kill();
    let _ = running.wait();
    let ak = fleet.node(0).root_home_path(".ssh/authorized_keys");
    let left = relay_lines(&ak);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("expiry-time=\""), "{}", left[0]);

    std::fs::remove_file(fleet.node(0).tmp_path("hold")).unwrap();
    // Node 0 already has keadm, so it claims no role this time: only the start of the
    // run, which clears expired lines, can remove it.
    let out = sc.run(&[]);
    out.status(0);
    assert_eq!(relay_lines(&ak), left, "a line that may still serve stays");

    // Its expiry, as sshd reads it (the node's local time), is past.
    let text = std::fs::read_to_string(&ak).unwrap();
    let at = text.find("expiry-time=\"").unwrap() + "expiry-time=\"".len();
    let expired = format!("{}20000101000000{}", &text[..at], &text[at + 14..]);
    std::fs::write(&ak, expired).unwrap();
    let out = sc.run(&[]);
    out.status(0);
    no_node_serves(&fleet, false, &out.stderr);
}

/// The operator's Ctrl-C (twice: the second kills what runs) mid-fan-out: the run ends,
/// and no node still serves.
#[test]
fn ctrl_c_mid_fan_out_leaves_no_node_serving() {
    let fleet = Fleet::builder().nodes(3).site_lans(&[0, 0, 0]).start();
    let sc = Scenario::new(&fleet)
        .keadm(holding_keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let running = seed_serving(&fleet, &sc);
    running.interrupt_twice();
    let out = running.wait();
    out.status(130);
    no_node_serves(&fleet, false, &out.stderr);
}

/// `--dry-run` shows the sites of two or more nodes, their seed order and what is
/// relayed; a node of its own site is in none.
#[test]
fn the_dry_run_shows_the_sites_and_what_is_relayed() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .top_yaml("site: store-1")
        .node_yaml_for(2, "site: store-2");
    let out = sc.run(&["--dry-run"]);
    out.status(0);
    assert!(
        out.stdout.contains(
            "\n  relay:       auto: in each site the first node to need keadm or an image archive gets it from this machine"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "\n  site store-1: 2 nodes, seed order edge-00, edge-01; keadm relayed among 2 nodes\n"
        ),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("site store-2"), "{}", out.stdout);
    let off = sc.run(&["--dry-run", "--relay", "off"]);
    off.status(0);
    assert!(
        off.stdout
            .contains("\n  relay:       off: every node gets keadm from this machine\n")
            && off.stdout.contains(
                "\n  site store-1: 2 nodes, seed order edge-00, edge-01; nothing relayed\n"
            ),
        "{}",
        off.stdout
    );
}

/// Without `site:`, the nodes behind one proxyJump host are one site; a node that names
/// its own site leaves it.
#[test]
fn nodes_behind_one_bastion_are_one_site() {
    let node = |name: &str, ip: &str, extra: &str| {
        format!(
            "  - nodeName: {name}\n    keadmCmd: join --cloudcore-ipport=192.0.2.10:10000 --edgenode-name={name}\n{extra}    ssh:\n      ip: {ip}\n      username: root\n      auth: {{type: agent}}\n      proxyJump: {{ip: 192.0.2.9, username: jump, auth: {{type: agent}}}}\n"
        )
    };
    let config = format!(
        "keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64]\nnodes:\n{}{}{}",
        node("edge-a", "10.1.0.1", ""),
        node("edge-b", "10.1.0.2", ""),
        node("edge-c", "10.1.0.3", "    site: elsewhere\n"),
    );
    let out = crate::common::test::Test::new()
        .config(&config)
        .args(["batch", "-c", "config.yaml", "--dry-run"])
        .run();
    out.status(0);
    assert!(
        out.stdout.contains(
            "\n  site behind 192.0.2.9:22: 2 nodes, seed order edge-a, edge-b; keadm relayed among 2 nodes\n"
        ),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("elsewhere"), "{}", out.stdout);
}

/// The run of the sudo-login tests: three nodes of one site, logged in as the test user
/// with sudo's password, keadm relayed among them.
fn three_sudo_nodes_of_one_site(fleet: &Fleet) -> Scenario<'_> {
    Scenario::new(fleet)
        .keadm(keadm())
        .max_run_num(3)
        .top_yaml("site: store-1")
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.to_string()))
}

/// The login user of three sudo-login nodes made its `~/.ssh/authorized_keys` a dangling
/// symlink into a directory only root may change (on a real node: `/etc/ld.so.preload`).
/// The run succeeds, and root neither created the link's target nor changed the
/// directory or the link: every step in the login user's home runs as that user, who
/// cannot write there, so the node serves nothing and says once why.
#[test]
fn a_login_users_symlink_cannot_make_root_write_for_it() {
    let fleet = Fleet::builder()
        .nodes(3)
        .site_lans(&[0, 0, 0])
        .all_nodes(NodeOpt::Sudo(Sudo::Passwordless))
        .start();
    for node in fleet.nodes() {
        // The test user's home is the node's /tmp.
        let planted = node.shell(&format!(
            "mkdir -m 700 /tmp/vault && mkdir -m 700 /tmp/.ssh && \
             ln -s /tmp/vault/authorized_keys /tmp/.ssh/authorized_keys && \
             chown -h {TEST_USER}: /tmp/.ssh /tmp/.ssh/authorized_keys"
        ));
        assert!(planted.status.success(), "{planted:?}");
    }
    let sc = three_sudo_nodes_of_one_site(&fleet);
    let out = sc.run(&[]);
    out.status(0);
    same_keadm_everywhere(&fleet, 3);
    for (i, node) in fleet.nodes().iter().enumerate() {
        let vault = node.tmp_path("vault");
        let inside: Vec<String> = std::fs::read_dir(&vault)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            inside,
            Vec::<String>::new(),
            "node {i}: root wrote into the root-only directory\n{}",
            out.transcript(i)
        );
        let meta = std::fs::metadata(&vault).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o700), "node {i}");
        let link = node.tmp_path(".ssh/authorized_keys");
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            std::path::PathBuf::from("/tmp/vault/authorized_keys"),
            "node {i}: the login user's symlink was replaced"
        );
        // What the relay made in the home (its served copies) is the login user's own.
        for entry in std::fs::read_dir(node.tmp_path("")).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".keadm-batch-relay-") {
                let owner = entry.metadata().unwrap().uid();
                assert_eq!(
                    owner, TEST_USER_ID,
                    "node {i}: {name} is not the login user's"
                );
            }
        }
        let t = out.transcript(i);
        let why: Vec<&str> = t.lines().filter(|l| l.contains("serves no copy")).collect();
        assert_eq!(
            why.len(),
            1,
            "node {i} says once why it serves nothing:\n{t}"
        );
        assert!(
            why[0].contains("the login user's .ssh/authorized_keys is a symbolic link"),
            "{}",
            why[0]
        );
    }
    no_node_serves(&fleet, true, &out.stderr);
}

/// Operator keys whose comments hold Latin-1 bytes, in the login user's authorized_keys
/// on three sudo-login nodes whose exec channels run in a UTF-8 locale (what pam_env
/// gives them on Debian and Ubuntu): after a run that relayed, every operator line is
/// there byte for byte and no relay line is left.
#[test]
fn operator_keys_with_latin1_comments_survive_a_relayed_run_byte_for_byte() {
    let fleet = Fleet::builder()
        .nodes(3)
        .site_lans(&[0, 0, 0])
        .all_nodes(NodeOpt::Sudo(Sudo::Passwordless))
        .all_nodes(NodeOpt::SshdConfig(
            "SetEnv LANG=C.UTF-8 LC_ALL=C.UTF-8".to_string(),
        ))
        .start();
    let operator: &[u8] =
        b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDm8f2cQ0b0ZC5yq8Gm5n1op op\xe9rateur@r\xe9gie\n\
        # cl\xe9 de secours, \xa9 l'\xe9quipe\n\
        ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc1ZxQm9lTzF6a2pQ2secours secours\n";
    for node in fleet.nodes() {
        let ssh = node.tmp_path(".ssh");
        std::fs::create_dir(&ssh).unwrap();
        std::fs::write(ssh.join("authorized_keys"), operator).unwrap();
        let owned = node.shell(&format!(
            "chown -R {TEST_USER}: /tmp/.ssh && chmod 700 /tmp/.ssh && chmod 600 /tmp/.ssh/authorized_keys"
        ));
        assert!(owned.status.success(), "{owned:?}");
    }
    let sc = three_sudo_nodes_of_one_site(&fleet);
    let out = sc.run(&[]);
    out.status(0);
    let (direct, from_peer) = sources_of_keadm(&out, 3);
    assert_eq!(direct.len(), 1, "{direct:?}");
    assert_eq!(from_peer.len(), 2, "the run relayed: {from_peer:?}");
    for (i, node) in fleet.nodes().iter().enumerate() {
        let now = std::fs::read(node.tmp_path(".ssh/authorized_keys")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&now),
            String::from_utf8_lossy(operator),
            "node {i}'s authorized_keys is not what the operator wrote"
        );
        assert_eq!(now, operator, "node {i}");
    }
    no_node_serves(&fleet, true, &out.stderr);
}

/// A source that answers the fetch with endless bytes: each reader stops reading at
/// keadm's size plus one byte (its copy never grows past that on its disk), says why,
/// and joins with keadm from this machine.
#[test]
fn a_source_that_sends_endless_bytes_costs_a_reader_at_most_one_byte_more() {
    let endless = "ForceCommand if [ \"$SSH_ORIGINAL_COMMAND\" = fetch ]; then exec cat /dev/zero; else exec sh -c \"$SSH_ORIGINAL_COMMAND\"; fi";
    let fleet = Fleet::builder()
        .nodes(3)
        .site_lans(&[0, 0, 0])
        .node_option(0, NodeOpt::SshdConfig(endless.to_string()))
        .start();
    // The readers' upload dirs are small tmpfs of their own, so a read that does not stop
    // fills them and not this machine's disk.
    for i in [1, 2] {
        let mounted = fleet.node(i).shell(&format!(
            "mkdir -p /tmp/kubeedge/keadm && mount -t tmpfs -o size={},mode=700 tmpfs /tmp/kubeedge/keadm",
            4 * PADDED
        ));
        assert!(mounted.status.success(), "{mounted:?}");
    }
    // The largest file seen in each reader's upload dir while the run goes, through the
    // node's own view of its mounts.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dirs: Vec<std::path::PathBuf> = [1, 2]
        .iter()
        .map(|&i| {
            std::path::PathBuf::from(format!(
                "/proc/{}/root/tmp/kubeedge/keadm",
                fleet.node(i).sshd_pid()
            ))
        })
        .collect();
    let dirs_seen = dirs.clone();
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut largest = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for dir in &dirs {
                    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                        if let Ok(meta) = entry.metadata() {
                            largest = largest.max(meta.len());
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            largest
        })
    };
    let sc = Scenario::new(&fleet)
        .keadm(keadm())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let out = sc.run(&[]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let largest = watcher.join().unwrap();
    out.status(0);
    let size = std::fs::metadata(remote_keadm(fleet.node(0)))
        .unwrap()
        .len();
    assert!(
        largest <= size + 1,
        "a reader held {largest} bytes of a {size}-byte payload"
    );
    let source = fleet.node(0).host();
    for i in [1, 2] {
        let t = out.transcript(i);
        assert!(
            t.contains(&format!(
                "reading keadm from {source} failed (the source sent more than {size} bytes); getting it from this machine instead"
            )),
            "node {i}:\n{t}"
        );
    }
    // The readers' keadm is in their tmpfs, seen through the node's own mounts.
    let first = std::fs::read(remote_keadm(fleet.node(0))).unwrap();
    for dir in &dirs_seen {
        assert_eq!(
            std::fs::read(dir.join("keadm")).unwrap(),
            first,
            "{}",
            dir.display()
        );
    }
    no_node_serves(&fleet, false, &out.stderr);
}
