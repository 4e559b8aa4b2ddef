//! Issue 31, upgrades an operator can trust, on real sshd nodes with the stand-in keadm of
//! tests/common/fake_upgrade.rs (which does what keadm v1.23.1's upgrade, backup and
//! rollback do, report file included) and a real small edgecore executable per node:
//! keadm's prompt answered, the report removed before and read after, the running
//! edgecore's version checked, `--backup` first, `--rollback-on-failure`, and with the
//! stand-in API server the Ready gate on the new version.

use crate::common::apiserver::FakeApiServer;
use crate::common::fake_keadm::calls;
use crate::common::fake_upgrade::{
    self, edgecore_running, fault, running_version, version_on_node,
};
use crate::common::fleet::{Fleet, Node};
use crate::common::scenario::{Scenario, remote_keadm};

const UPGRADE: &str = "upgrade edge --toVersion v1.23.1";

fn fleet_at(n: usize, version: &str) -> Fleet {
    let fleet = Fleet::builder().nodes(n).start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        edgecore_running(node, &Scenario::name(i), version);
    }
    fleet
}

fn upgrade(fleet: &Fleet) -> Scenario<'_> {
    Scenario::new(fleet)
        .keadm(fake_upgrade::keadm())
        .cmd(UPGRADE)
}

/// The subcommands the fake keadm ran on `node`, in order (`upgrade edge`, ...).
fn ran(node: &Node) -> Vec<String> {
    calls(&remote_keadm(node))
        .iter()
        .map(|c| c.args.iter().take(2).cloned().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn an_upgrade_answers_keadms_prompt_reads_its_report_and_checks_the_running_edgecore() {
    let fleet = fleet_at(2, "v1.23.0");
    // A report left by an earlier upgrade must not be taken for this one's.
    fleet.node(0).shell_ok(
        "printf '{\"event\":\"Upgrade\",\"success\":false,\"fromVersion\":\"v1.22.0\",\"toVersion\":\"v1.23.0\",\"errorMessage\":\"old\"}' > /etc/kubeedge/upgrade_report.json",
    );
    let sc = upgrade(&fleet);
    let out = sc.run(&[]);
    out.status(0);
    for i in 0..2 {
        let node = out.node_summary(i);
        assert_eq!(node["phase"], "succeeded", "{node}");
        let upgrade = &node["upgrade"];
        assert_eq!(upgrade["task"], "Upgrade");
        assert_eq!(upgrade["report"]["success"], true, "{upgrade}");
        assert_eq!(upgrade["report"]["fromVersion"], "v1.23.0");
        assert_eq!(upgrade["report"]["toVersion"], "v1.23.1");
        assert_eq!(upgrade["target_version"], "v1.23.1");
        assert_eq!(upgrade["running_version"], "v1.23.1");
        assert_eq!(upgrade["node_name"], Scenario::name(i));
        assert_eq!(version_on_node(fleet.node(i)), "v1.23.1");
        let transcript = out.transcript(i);
        assert!(
            transcript.contains("Are you sure you want to proceed? [y/N]"),
            "{transcript}"
        );
        assert!(
            transcript.contains(
                "keadm upgrade edge verified on the node: its report says success and edgecore runs v1.23.1"
            ),
            "{transcript}"
        );
    }
    assert_eq!(ran(fleet.node(0)), ["upgrade edge"]);

    // Run again: both nodes already run v1.23.1, so keadm is not run (nor backed up).
    let again = sc.run(&["--backup"]);
    again.status(0);
    for i in 0..2 {
        let node = again.node_summary(i);
        assert_eq!(node["phase"], "succeeded", "{node}");
        assert_eq!(node["upgrade"]["unchanged"], true, "{node}");
        assert!(node["upgrade"].get("report").is_none(), "{node}");
        assert_eq!(ran(fleet.node(i)), ["upgrade edge"]);
        let transcript = again.transcript(i);
        assert!(
            transcript.contains(
                "keadm-batch: edgecore already runs v1.23.1, so keadm upgrade edge was not run"
            ),
            "{transcript}"
        );
        assert!(
            transcript.contains("nothing to do: edgecore already runs v1.23.1"),
            "{transcript}"
        );
    }
}

#[test]
fn an_unanswered_prompt_is_not_a_success() {
    let fleet = fleet_at(1, "v1.23.0");
    // keadmCmd itself takes keadm's input from elsewhere: keadm sees no `y`.
    let sc = Scenario::new(&fleet)
        .keadm(fake_upgrade::keadm())
        .cmd("upgrade edge --toVersion v1.23.1 < /dev/null");
    let out = sc.run(&[]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["phase"], "failed");
    assert_eq!(node["failure_class"], "upgrade_not_done");
    assert_eq!(node["exit_status"], 0);
    assert_eq!(
        node["error"],
        "keadm upgrade edge exited with status 0 but printed `aborted upgrade operation` and wrote no /etc/kubeedge/upgrade_report.json: its [y/N] prompt was not answered `y`, so nothing was done"
    );
    assert!(node["upgrade"].get("report").is_none(), "{node}");
    assert_eq!(version_on_node(fleet.node(0)), "v1.23.0");
    out.stderr_has("Upgrade not done");
}

/// An upgrade our deadline cut off while keadm pulled its image (after `Begin to
/// download`) is a stalled pull, not `unknown`, and the recap's fix for it is an
/// upgrade's: no `--reset-first`, which only joins take.
#[test]
fn an_upgrade_cut_off_during_its_download_is_a_stalled_pull_with_an_upgrade_s_fix() {
    let fleet = fleet_at(1, "v1.23.0");
    fault(fleet.node(0), "kb-upgrade-hangs", "");
    let sc = upgrade(&fleet);
    let out = sc.run(&["--timeout", "3", "--kill-grace", "1"]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["phase"], "timed_out", "{node}");
    assert_eq!(node["failure_class"], "image_pull_stalled", "{node}");
    assert_eq!(node["task"], "upgrade", "{node}");
    out.stderr_has("Image pull failed or stalled [image_pull_stalled]")
        .stderr_has("keadm pulls before it stops edgecore, so the old edgecore still runs")
        .stderr_lacks("--reset-first");
    assert_eq!(version_on_node(fleet.node(0)), "v1.23.0");
}

#[test]
fn a_failed_upgrade_fails_with_its_reports_message_and_is_rolled_back_to_its_backup() {
    let fleet = fleet_at(2, "v1.23.0");
    fault(fleet.node(1), "kb-upgrade-fails", "");
    let sc = upgrade(&fleet);
    let out = sc.run(&["--backup", "--rollback-on-failure"]);
    out.status(1);
    let ok = out.node_summary(0);
    assert_eq!(ok["phase"], "succeeded", "{ok}");
    assert_eq!(ok["upgrade"]["backup_exit_status"], 0);
    assert!(ok["upgrade"].get("rollback").is_none(), "{ok}");
    assert_eq!(ran(fleet.node(0)), ["backup edge", "upgrade edge"]);

    let failed = out.node_summary(1);
    assert_eq!(failed["phase"], "failed", "{failed}");
    assert_eq!(failed["failure_class"], "image_pull_stalled", "{failed}");
    assert_eq!(failed["exit_status"], 1);
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .starts_with("failed to execute keadm command cd /tmp/kubeedge/keadm && rm -f /etc/kubeedge/upgrade_report.json && yes | ./keadm upgrade edge --toVersion v1.23.1: Process exited with status 1"),
        "{failed}"
    );
    assert!(
        failed["last_output"]
            .as_str()
            .unwrap()
            .starts_with("failed to get edgecore binary, err: failed to pull image kubeedge/installation-package:v1.23.1"),
        "{failed}"
    );
    let upgrade = &failed["upgrade"];
    assert_eq!(upgrade["report"]["success"], false);
    let rollback = &upgrade["rollback"];
    assert_eq!(rollback["succeeded"], true, "{rollback}");
    assert_eq!(rollback["to_version"], "v1.23.0");
    assert_eq!(rollback["running_version"], "v1.23.0");
    assert_eq!(rollback["report"]["event"], "Rollback");
    assert_eq!(
        ran(fleet.node(1)),
        ["backup edge", "upgrade edge", "rollback edge"]
    );
    let args = &calls(&remote_keadm(fleet.node(1)))[2].args;
    assert_eq!(args, &["rollback", "edge", "--historical-version=v1.23.0"]);
    assert_eq!(version_on_node(fleet.node(1)), "v1.23.0");
    let transcript = out.transcript(1);
    assert!(
        transcript.contains("rolled back: edgecore runs v1.23.0 again"),
        "{transcript}"
    );
    out.stderr_has(
        "Rolled back (--rollback-on-failure): 1 node(s), 1 back on their old version, 0 not",
    )
    .stderr_has(&format!("  {:<24} back on v1.23.0\n", Scenario::name(1)));
}

#[test]
fn an_upgrade_that_runs_another_version_is_a_version_mismatch() {
    let fleet = fleet_at(1, "v1.23.0");
    fault(fleet.node(0), "kb-installs", "v1.22.9");
    let sc = upgrade(&fleet);
    let out = sc.run(&["--backup", "--rollback-on-failure"]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["failure_class"], "version_mismatch", "{node}");
    assert_eq!(
        node["error"],
        "keadm upgrade edge reports success to v1.23.1, but the edgecore that runs on the node is v1.22.9, so the node does not run v1.23.1"
    );
    assert_eq!(node["upgrade"]["running_version"], "v1.22.9");
    assert_eq!(node["upgrade"]["rollback"]["succeeded"], true);
    assert_eq!(version_on_node(fleet.node(0)), "v1.23.0");
    out.stderr_has("Running edgecore is not the target version");
}

#[test]
fn a_failed_backup_stops_the_node_before_anything_changes() {
    let fleet = fleet_at(1, "v1.23.0");
    fault(fleet.node(0), "kb-backup-fails", "");
    let sc = upgrade(&fleet);
    let out = sc.run(&["--backup", "--rollback-on-failure"]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["failure_class"], "backup_failed", "{node}");
    assert_eq!(
        node["error"],
        "failed to execute keadm command cd /tmp/kubeedge/keadm && rm -f /etc/kubeedge/upgrade_report.json && yes | ./keadm backup edge: Process exited with status 1"
    );
    assert_eq!(
        node["last_output"],
        "Error: cannot get the required current version"
    );
    assert_eq!(node["upgrade"]["backup_exit_status"], 1);
    // Neither the upgrade nor a rollback ran.
    assert_eq!(ran(fleet.node(0)), ["backup edge"]);
    assert_eq!(version_on_node(fleet.node(0)), "v1.23.0");
}

#[test]
fn the_dry_run_says_what_is_checked_after_an_upgrade_and_what_a_failure_does() {
    let fleet = Fleet::builder().nodes(1).start();
    let out = upgrade(&fleet).run(&["--dry-run", "--backup", "--rollback-on-failure"]);
    out.status(0)
        .stdout_has("  first:     cd /tmp/kubeedge/keadm && rm -f /etc/kubeedge/upgrade_report.json && yes | ./keadm backup edge (--backup; the command runs only if it exits with 0)")
        .stdout_has("  command:   cd /tmp/kubeedge/keadm && rm -f /etc/kubeedge/upgrade_report.json && yes | ./keadm upgrade edge --toVersion v1.23.1")
        .stdout_has("  after:     /etc/kubeedge/upgrade_report.json is read: its success decides the node; the running edgecore must be v1.23.1; on a failed upgrade: cd /tmp/kubeedge/keadm && rm -f /etc/kubeedge/upgrade_report.json && yes | ./keadm rollback edge (--rollback-on-failure)");
}

/// With a kubeconfig: an upgrade is done when its Node is Ready on the new version; one
/// that is not within --ready-timeout is rolled back and waits for Ready on the old one.
#[test]
fn an_upgrade_waits_for_its_node_ready_on_the_new_version_and_a_late_one_is_rolled_back() {
    let fleet = fleet_at(2, "v1.23.0");
    let api = FakeApiServer::start();
    for (i, node) in fleet.nodes().iter().enumerate() {
        fake_upgrade::node_in_cluster(&api, node, &Scenario::name(i));
    }
    fault(fleet.node(1), "kb-sick-on-v1.23.1", "");
    let sc = upgrade(&fleet);
    let kubeconfig = api.kubeconfig().display().to_string();
    let out = sc.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        "4",
        "--backup",
        "--rollback-on-failure",
    ]);
    out.status(1);
    let ok = out.node_summary(0);
    assert_eq!(ok["phase"], "succeeded", "{ok}");
    assert_eq!(
        ok["cluster"]["version"], "v1.32.10-kubeedge-v1.23.1",
        "{ok}"
    );
    assert!(ok["cluster"]["ready_after"].as_f64().is_some(), "{ok}");
    assert_eq!(
        api.node_kubeedge_version(&Scenario::name(0)).as_deref(),
        Some("v1.23.1")
    );

    let late = out.node_summary(1);
    assert_eq!(late["phase"], "failed", "{late}");
    assert_eq!(late["failure_class"], "not_ready", "{late}");
    let error = late["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "keadm upgrade edge succeeded on the node (edgecore runs v1.23.1), but the Node {} was not Ready on v1.23.1 within 4 s of keadm's exit: the Node shows version v1.32.10-kubeedge-v1.23.1 and EdgeNotReady: edge is not posting ready status",
            Scenario::name(1)
        )),
        "{error}"
    );
    let rollback = &late["upgrade"]["rollback"];
    assert_eq!(rollback["succeeded"], true, "{rollback}");
    assert_eq!(rollback["ready"], true, "{rollback}");
    assert_eq!(rollback["running_version"], "v1.23.0");
    assert_eq!(running_version(fleet.node(1)).as_deref(), Some("v1.23.0"));
    out.stderr_has(&format!(
        "  {:<24} back on v1.23.0, Ready in the cluster",
        Scenario::name(1)
    ));
    assert_eq!(
        api.node_kubeedge_version(&Scenario::name(1)).as_deref(),
        Some("v1.23.0")
    );
    let transcript = out.transcript(1);
    assert!(
        transcript.contains(&format!(
            "rolled back: the Node {} is Ready on v1.23.0 again",
            Scenario::name(1)
        )),
        "{transcript}"
    );
}

#[test]
fn a_rollback_without_a_backup_says_it_did_not_bring_the_node_back() {
    let fleet = fleet_at(1, "v1.23.0");
    fault(fleet.node(0), "kb-installs", "v1.22.9");
    let sc = upgrade(&fleet);
    let out = sc.run(&["--rollback-on-failure"]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["failure_class"], "version_mismatch");
    let rollback = &node["upgrade"]["rollback"];
    assert_eq!(rollback["succeeded"], false, "{rollback}");
    assert_eq!(rollback["exit_status"], 1);
    assert_eq!(
        rollback["error"],
        "keadm rollback edge exited with status 1: no historical version is found in backup dir /etc/kubeedge/backup/"
    );
    out.stderr_has(
        "Rolled back (--rollback-on-failure): 1 node(s), 0 back on their old version, 1 not",
    )
    .stderr_has(&format!(
        "  {:<24} NOT brought back: keadm rollback edge exited with status 1",
        Scenario::name(0)
    ));
    assert_eq!(version_on_node(fleet.node(0)), "v1.22.9");
}

/// The Ready gate waits on the config's name: a node whose edgecore.yaml names another
/// Node (here a Ready one on the target version) is not passed by that Node's state, it
/// fails as `name_mismatch`.
#[test]
fn an_upgrade_whose_edgecore_names_another_node_fails_as_a_name_mismatch() {
    let fleet = Fleet::builder().nodes(1).start();
    edgecore_running(fleet.node(0), "control-plane-1", "v1.23.0");
    let api = FakeApiServer::start();
    api.existing_node(
        &Scenario::name(0),
        false,
        std::time::Duration::from_secs(600),
    );
    api.edge_node("control-plane-1", || Some("v1.23.1".to_string()), || false);
    let sc = upgrade(&fleet);
    let kubeconfig = api.kubeconfig().display().to_string();
    let out = sc.run(&["--kubeconfig", &kubeconfig, "--ready-timeout", "3"]);
    out.status(1);
    let node = out.node_summary(0);
    assert_eq!(node["phase"], "failed", "{node}");
    assert_eq!(node["failure_class"], "name_mismatch", "{node}");
    assert_eq!(node["cluster"]["node_name"], Scenario::name(0), "{node}");
    let error = node["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "names the Node control-plane-1 (hostnameOverride), not {}",
            Scenario::name(0)
        )),
        "{error}"
    );
    assert!(
        out.transcript(0)
            .contains("name_mismatch: keadm upgrade edge succeeded"),
        "{}",
        out.transcript(0)
    );
    out.stderr_has("name_mismatch");
}
