//! Issue 30, resets verified: after `keadm reset` exits with 0, keadm-batch checks the node
//! clean over the same connection (no edgecore process or unit, no /etc/kubeedge); a node
//! that is not fails with `reset_incomplete`, and the transcript, the summary, the log
//! and the recap name what is left. Each node's /etc and processes are its own (see
//! tests/common/edge_state.rs), so what a fake reset leaves is left on that node only.

use crate::common::edge_state::{clean_etc, private_etc, start_edgecore};
use crate::common::fake_keadm::FakeKeadm;
use crate::common::fleet::Fleet;
use crate::common::scenario::Scenario;

/// The pid of the node's process named edgecore, as the node's /proc has it.
fn edgecore_pid(fleet: &Fleet, i: usize) -> String {
    let out = fleet.node(i).shell(
        "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = edgecore ] && echo ${p#/proc/}; done",
    );
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
        "{pid}"
    );
    pid
}

#[test]
fn a_reset_that_exits_0_but_leaves_edgecore_or_etc_kubeedge_fails_with_reset_incomplete() {
    let fleet = Fleet::builder().nodes(3).start();
    // Node 0 keeps /etc/kubeedge, node 1 a running edgecore, node 2 nothing.
    private_etc(
        fleet.node(0),
        "mkdir -p /etc/kubeedge/ca /etc/kubeedge/certs",
    );
    clean_etc(fleet.node(1));
    clean_etc(fleet.node(2));
    start_edgecore(fleet.node(1));
    let pid = edgecore_pid(&fleet, 1);
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().prints("Reset edge node successfully"))
        .cmd("reset edge --force");
    let out = sc.run(&[]);
    out.status(1);

    let node0 = out.node_summary(0);
    assert_eq!(node0["phase"], "failed");
    assert_eq!(node0["failure_class"], "reset_incomplete");
    assert_eq!(node0["exit_status"], 0);
    assert_eq!(
        node0["error"],
        "keadm reset exited with status 0, but the node is not clean: /etc/kubeedge (2 entries: ca certs) still exists. Stop and remove what is left, then retry the reset."
    );
    let node1 = out.node_summary(1);
    assert_eq!(node1["failure_class"], "reset_incomplete");
    assert_eq!(
        node1["error"],
        format!(
            "keadm reset exited with status 0, but the node is not clean: edgecore still runs (pid {pid}). Stop and remove what is left, then retry the reset."
        )
    );
    let node2 = out.node_summary(2);
    assert_eq!(node2["phase"], "succeeded");
    assert_eq!(node2["reset_verified"], true);
    assert!(node0.get("reset_verified").is_none(), "{node0}");

    out.log_has("Failed to process node edge-00: keadm reset exited with status 0, but the node is not clean: /etc/kubeedge (2 entries: ca certs) still exists. Stop and remove what is left, then retry the reset.");
    assert!(
        out.transcript(1).contains(&format!(
            "reset not verified: edgecore still runs (pid {pid})"
        )),
        "{}",
        out.transcript(1)
    );
    assert!(
        out.transcript(2)
            .contains("reset verified: no edgecore process")
    );
    // The recap groups both under the class's title and fix, each node with what is left.
    assert!(
        out.stderr.contains("Reset left the node unclean"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("/etc/kubeedge (2 entries: ca certs) still exists")
            && out
                .stderr
                .contains(&format!("edgecore still runs (pid {pid})")),
        "{}",
        out.stderr
    );
    // The check changed nothing: what was left is still there.
    fleet.node(0).shell_ok("test -d /etc/kubeedge/ca");
    assert_eq!(edgecore_pid(&fleet, 1), pid);

    // --retry-failed --class reset_incomplete runs the reset again on those two only.
    let out = sc.run(&["--retry-failed", "--class", "reset_incomplete"]);
    out.status(1);
    assert!(out.stderr.contains("Retrying 2 node(s)"), "{}", out.stderr);
}

#[test]
fn a_reset_that_cleans_the_node_is_verified_and_succeeds() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    private_etc(node, "mkdir -p /etc/kubeedge/config");
    start_edgecore(node);
    // What keadm's reset does, as far as the check looks: edgecore stopped, /etc/kubeedge
    // removed.
    let cleans = "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = edgecore ] && kill ${p#/proc/}; done\n\
                  while pidof edgecore >/dev/null 2>&1; do sleep 0.05; done\n\
                  rm -rf /etc/kubeedge";
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs(cleans))
        .cmd("reset");
    let out = sc.run(&[]);
    out.status(0);
    let summary = out.node_summary(0);
    assert_eq!(summary["phase"], "succeeded");
    assert_eq!(summary["reset_verified"], true);
    assert!(out.transcript(0).contains(
        "reset verified: no edgecore process, no edgecore unit, and no /etc/kubeedge or an empty one on the node"
    ));
}

/// keadm join accepts an /etc/kubeedge that is empty (a mount point, as on read-only-root
/// devices), so a reset that leaves it empty left the node clean.
#[test]
fn a_reset_that_leaves_etc_kubeedge_empty_is_clean_as_keadm_join_says() {
    let fleet = Fleet::builder().nodes(2).start();
    // Node 0's /etc/kubeedge is a mount point the reset empties; node 1's keeps a file
    // that no listing of names alone would show as more than a dot file.
    private_etc(
        fleet.node(0),
        "mkdir -p /etc/kubeedge && mount -t tmpfs kb-kubeedge /etc/kubeedge && mkdir /etc/kubeedge/config",
    );
    private_etc(
        fleet.node(1),
        "mkdir -p /etc/kubeedge && touch /etc/kubeedge/.kept",
    );
    let empties = "rm -rf /etc/kubeedge/config";
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints("Reset edge node successfully")
                .runs(empties),
        )
        .cmd("reset edge --force");
    let out = sc.run(&[]);
    out.status(1);
    let node0 = out.node_summary(0);
    assert_eq!(node0["phase"], "succeeded", "{node0}");
    assert_eq!(node0["reset_verified"], true);
    fleet.node(0).shell_ok("test -d /etc/kubeedge");
    let node1 = out.node_summary(1);
    assert_eq!(node1["failure_class"], "reset_incomplete", "{node1}");
    assert_eq!(
        node1["error"],
        "keadm reset exited with status 0, but the node is not clean: /etc/kubeedge (1 entries: .kept) still exists. Stop and remove what is left, then retry the reset."
    );
}
