//! Issue 30, the cluster beyond joins' verification, on real sshd nodes against the
//! stand-in API server: `--delete-nodes` after resets checked clean (and, without it, the
//! Node objects left behind in the recap), `name_taken` from one list of Nodes before any
//! node is touched, the join token read from the cluster and masked everywhere, and
//! `batch status --kubeconfig`.

use std::path::Path;
use std::time::Duration;

use crate::common::apiserver::FakeApiServer;
use crate::common::cloudcore;
use crate::common::edge_state::{clean_etc, edge_etc, private_etc};
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, closing_port};
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::{Output, Test};

const DAY: Duration = Duration::from_secs(86_400);

fn with_kubeconfig(sc: &Scenario, api: &FakeApiServer, extra: &[&str]) -> Output {
    let kubeconfig = api.kubeconfig().display().to_string();
    let mut args = vec!["--kubeconfig", kubeconfig.as_str()];
    args.extend_from_slice(extra);
    sc.run(&args)
}

fn deletes(api: &FakeApiServer) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.starts_with("DELETE "))
        .collect()
}

/// Node 0's `cluster.delete_error`: why its Node was not deleted (and it was not).
fn not_deleted_because(out: &Output) -> String {
    let cluster = &out.node_summary(0)["cluster"];
    assert!(cluster.get("deleted").is_none(), "{cluster}");
    cluster["delete_error"].as_str().unwrap().to_string()
}

/// Every file under `dir`, with its text, for a search of what the run wrote.
fn files_under(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_symlink() {
                continue;
            }
            if path.is_dir() {
                todo.push(path);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string();
                out.push((path.display().to_string(), text));
            }
        }
    }
    out
}

#[test]
fn delete_nodes_deletes_the_node_object_of_each_reset_verified_clean_only() {
    let fleet = Fleet::builder().nodes(2).start();
    // Node 0 is an edge node (its edgecore.yaml names its Node) whose reset leaves it
    // clean; node 1's reset leaves /etc/kubeedge: not verified, so its Node stays.
    edge_etc(fleet.node(0), "edge-00");
    private_etc(fleet.node(1), "mkdir -p /etc/kubeedge/ca");
    let api = FakeApiServer::start();
    api.existing_node("edge-00", false, 3 * DAY);
    api.existing_node("edge-01", false, 3 * DAY);
    let sc = Scenario::new(&fleet)
        .keadm(
            FakeKeadm::new()
                .prints("Reset edge node successfully")
                .runs("rm -rf /etc/kubeedge/config && rmdir /etc/kubeedge 2>/dev/null; true"),
        )
        .cmd("reset edge --force");
    // The dry run says what will be deleted, and deletes nothing.
    with_kubeconfig(&sc, &api, &["--delete-nodes", "--dry-run"])
        .status(0)
        .stdout_has(&format!(
            "  cluster:     https://127.0.0.1:{}/ (context stand-in, v1.32.13): no join or upgrade to verify; each reset checked clean has its Node object deleted (--delete-nodes); a Node is written to only when it is the node's own: a KubeEdge edge Node that the node's edgecore.yaml, read over SSH before its command, names, at one of the node's addresses where it lists any (otherwise the node is refused as name_mismatch)\n",
            api.port
        ));
    assert!(deletes(&api).is_empty());
    let reviews = api
        .requests()
        .iter()
        .filter(|r| r.contains("selfsubjectaccessreviews"))
        .count();
    assert_eq!(reviews, 4, "get, list, watch and delete on nodes");
    let out = with_kubeconfig(&sc, &api, &["--delete-nodes"]);
    out.status(1);
    assert!(
        !api.has_node("edge-00"),
        "the verified reset's Node is deleted"
    );
    assert!(api.has_node("edge-01"), "an unverified reset's Node stays");
    let deleted = deletes(&api);
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(
        deleted[0].starts_with("DELETE /api/v1/nodes/edge-00?"),
        "{deleted:?}"
    );
    let node0 = out.node_summary(0);
    assert_eq!(node0["phase"], "succeeded");
    assert_eq!(node0["cluster"]["node_name"], "edge-00");
    assert_eq!(node0["cluster"]["deleted"], true);
    assert_eq!(out.node_summary(1)["failure_class"], "reset_incomplete");
    assert!(out.node_summary(1).get("cluster").is_none());
    assert!(
        out.transcript(0)
            .contains("[keadm-batch] deleted the Node edge-00 from the cluster (--delete-nodes)"),
        "{}",
        out.transcript(0)
    );
    // Deleted, so not left behind; the unverified reset's Node is no reset's leftover.
    assert!(
        !out.stderr.contains("Node objects left in the cluster"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_delete_the_api_server_fails_is_a_warning_and_the_node_is_listed_as_left_behind() {
    let fleet = Fleet::builder().nodes(1).start();
    edge_etc(fleet.node(0), "edge-00");
    let api = FakeApiServer::start();
    api.existing_node("edge-00", true, DAY);
    api.fail_deletes();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().runs("rm -rf /etc/kubeedge"))
        .cmd("reset edge --force");
    let out = with_kubeconfig(&sc, &api, &["--delete-nodes"]);
    // The reset itself was verified: the node succeeded, its Node stays.
    out.status(0)
        .stderr_has("keadm-batch: warning: Node edge-00: its reset was verified, but its Node object edge-00 was not deleted:")
        .stderr_has("etcdserver: request timed out")
        .stderr_has("Node objects left in the cluster by resets")
        .stderr_has("  edge-00 (node edge-00): not deleted: ");
    let error = not_deleted_because(&out);
    assert!(error.contains("to delete the node edge-00"), "{error}");
    assert!(api.has_node("edge-00"));
    assert!(
        out.transcript(0)
            .contains("[keadm-batch] could not delete the Node edge-00: "),
        "{}",
        out.transcript(0)
    );
}

#[test]
fn delete_nodes_needs_a_kubeconfig_and_the_right_to_delete() {
    let fleet = Fleet::builder().nodes(1).start();
    clean_etc(fleet.node(0));
    let sc = Scenario::new(&fleet).cmd("reset edge --force");
    sc.run(&["--delete-nodes"]).status(2).stderr_has(
        "keadm-batch: error: --delete-nodes needs the cluster, and no kubeconfig is given: add --kubeconfig FILE (or the config's kubeconfig, or set KUBECONFIG), or leave out --delete-nodes. No node was touched.",
    );
    let api = FakeApiServer::start();
    api.deny("delete", "nodes");
    with_kubeconfig(&sc, &api, &["--delete-nodes"])
        .status(2)
        .stderr_has("may not delete nodes")
        .stderr_has("and this run also needs delete nodes");
    assert!(!remote_keadm(fleet.node(0)).exists(), "no node was touched");
}

#[test]
fn without_delete_nodes_the_recap_lists_the_node_objects_resets_left_behind() {
    let fleet = Fleet::builder().nodes(2).start();
    clean_etc(fleet.node(0));
    clean_etc(fleet.node(1));
    let api = FakeApiServer::start();
    api.existing_node("edge-00", true, 3 * DAY);
    let sc = Scenario::new(&fleet).cmd("reset edge --force");
    let out = with_kubeconfig(&sc, &api, &[]);
    out.status(0)
        .stderr_has("Node objects left in the cluster by resets (delete them with `kubectl delete node NAME`, or run the reset with --delete-nodes):")
        .stderr_has("  edge-00 (node edge-00): Ready, 3d old");
    assert!(
        !out.stderr.contains("edge-01 (node edge-01)"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.node_summary(0)["cluster"]["left_behind"],
        "Ready, 3d old"
    );
    assert!(out.node_summary(1).get("cluster").is_none());
    assert!(
        api.has_node("edge-00"),
        "nothing is deleted without the flag"
    );
    assert!(deletes(&api).is_empty());
    let lists = api
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/nodes") && !r.contains("watch=true"))
        .count();
    assert_eq!(lists, 1, "one list after the resets: {:?}", api.requests());
}

/// A join keadmCmd with a token whose lifetime checks clean. Its CA is not checked: the
/// certificate port is one that closes (another test's cloudcore may hold 10002), which
/// is only a warning.
fn join_with_good_token() -> String {
    let token = cloudcore::token(&"c".repeat(64), cloudcore::now() + DAY.as_secs());
    format!(
        "join --cloudcore-ipport=127.0.0.1:10000 --certport={} --edgenode-name={{name}} --token={token}",
        closing_port()
    )
}

#[test]
fn a_join_whose_node_name_the_cluster_has_is_refused_under_strict_and_warned_otherwise() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    api.existing_node("edge-00", false, 2 * 3600 * Duration::from_secs(1));
    let strict = Scenario::new(&fleet)
        .cmd(&join_with_good_token())
        .preflight("strict");
    let warn = Scenario::new(&fleet)
        .cmd(&join_with_good_token())
        .preflight("warn");
    let expected = format!(
        "The cluster at https://127.0.0.1:{}/ already has a Node named as 1 of these joins: edge-00 (NotReady, 2h old).",
        api.port
    );
    let out = with_kubeconfig(&strict, &api, &["--no-wait"]);
    out.status(2)
        .stderr_has(&format!("keadm-batch: error: {expected}"))
        .stderr_has("No node was touched.");
    for i in 0..2 {
        assert!(!remote_keadm(fleet.node(i)).exists(), "node {i} untouched");
    }
    // Under warn the run goes on, with the finding as a warning.
    let out = with_kubeconfig(&warn, &api, &["--no-wait"]);
    out.status(0)
        .stderr_has(&format!("keadm-batch: warning: {expected}"));
    // With --reset-first the join replaces the node: only a warning, even under strict, so
    // the batch goes on to the nodes (whose own strict pre-flight then finds no runtime).
    let out = with_kubeconfig(&strict, &api, &["--no-wait", "--reset-first"]);
    out.stderr_has(&format!("keadm-batch: warning: The cluster at https://127.0.0.1:{}/ already has a Node named as 1 of these joins: edge-00 (NotReady, 2h old). With --reset-first each join replaces its node", api.port))
        .stderr_has("Processing 2 nodes");
    assert!(
        !out.stderr.contains("No node was touched"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_empty_token_is_read_from_the_cluster_reaches_keadm_and_is_masked_everywhere() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    let token = cloudcore::token(&"d".repeat(64), cloudcore::now() + DAY.as_secs());
    api.set_token(&token);
    // Node 0 has an empty --token, node 1 none at all.
    let sc = Scenario::new(&fleet)
        .cmd_for(
            0,
            "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={name} --token=",
        )
        .cmd_for(
            1,
            "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={name}",
        );
    let dry = with_kubeconfig(&sc, &api, &["--dry-run", "--no-wait"]);
    dry.status(0);
    // A dry run reads no secret (review finding N7).
    assert!(
        !api.requests().iter().any(|r| r.contains("tokensecret")),
        "{:?}",
        api.requests()
    );
    dry.stdout_has(
        "2 join(s) take the token from the cluster (secret tokensecret in kubeedge; a dry run does not read it)",
    );
    let out = with_kubeconfig(&sc, &api, &["--no-wait"]);
    out.status(0);
    for i in 0..2 {
        let calls = fake_keadm::calls(&remote_keadm(fleet.node(i)));
        assert_eq!(calls.len(), 1, "node {i}");
        assert_eq!(
            calls[0].args.last().map(String::as_str),
            Some(format!("--token={token}").as_str()),
            "node {i}: {:?}",
            calls[0].args
        );
    }
    assert!(
        api.requests()
            .iter()
            .any(|r| r == "GET /api/v1/namespaces/kubeedge/secrets/tokensecret")
    );
    for output in [&dry, &out] {
        assert!(!output.stdout.contains(&token) && !output.stderr.contains(&token));
    }
    for (path, text) in files_under(sc.dir.path()) {
        assert!(!text.contains(&token), "{path} holds the token");
    }
}

#[test]
fn token_from_cluster_replaces_the_configs_token_and_its_lifetime_is_checked() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    // The token's lifetime is checked as pre-flight checks the config's.
    let sc = Scenario::new(&fleet)
        .cmd(&join_with_good_token())
        .preflight("warn");
    // No tokensecret: the run stops before any node.
    with_kubeconfig(&sc, &api, &["--token-from-cluster", "--no-wait"])
        .status(2)
        .stderr_has(
            "could not be asked for the join token (secret tokensecret in namespace kubeedge)",
        );
    // An expired one is refused as an expired --token is.
    api.set_token(&cloudcore::token(&"e".repeat(64), cloudcore::now() - 3600));
    with_kubeconfig(&sc, &api, &["--token-from-cluster", "--no-wait"])
        .status(2)
        .stderr_has("expired at");
    assert!(!remote_keadm(fleet.node(0)).exists(), "no node was touched");
    let fresh = cloudcore::token(&"f".repeat(64), cloudcore::now() + DAY.as_secs());
    api.set_token(&fresh);
    with_kubeconfig(&sc, &api, &["--token-from-cluster", "--no-wait"]).status(0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(
        calls[0].args.last().map(String::as_str),
        Some(format!("--token={fresh}").as_str())
    );
    // Without a kubeconfig the flag is a usage error.
    sc.run(&["--token-from-cluster"])
        .status(2)
        .stderr_has("--token-from-cluster needs the cluster, and no kubeconfig is given");
}

#[test]
fn status_with_a_kubeconfig_shows_each_nodes_ready_state_and_age_from_one_list() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    api.existing_node("edge-00", true, Duration::from_secs(3 * 3600 + 60));
    let sc = Scenario::new(&fleet);
    std::fs::write(sc.path("config.yaml"), sc.config_text()).unwrap();
    let status = |extra: &[&str]| {
        Test::in_dir(sc.dir.path())
            .env("HOME", sc.dir.path())
            .args(["batch", "status", "-c", "config.yaml", "--known-hosts"])
            .arg(sc.fleet.known_hosts())
            .args(["--kubeconfig"])
            .arg(api.kubeconfig())
            .args(extra)
            .run()
    };
    let out = status(&[]);
    out.status(0);
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{}", out.stdout))
            .to_string()
    };
    assert!(row("edge-00").ends_with("  Ready 3h"), "{}", out.stdout);
    assert!(row("edge-01").ends_with("  no Node"), "{}", out.stdout);
    let json = status(&["--output", "json"]);
    json.status(0);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        doc["nodes"][0]["cluster"],
        serde_json::json!({"node_name": "edge-00", "registered": true, "ready": "Ready", "age": "3h"})
    );
    assert_eq!(doc["nodes"][1]["cluster"]["registered"], false);
    let requests = api.requests();
    let lists = requests
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/nodes"))
        .count();
    assert_eq!(
        lists, 2,
        "one list per status, no request per node: {requests:?}"
    );
}

/// Review finding N1 without --drain: a reset on a host that never ran KubeEdge passes
/// its check, and the Node of its name (a control-plane Node) is not deleted: nothing is
/// written, and the recap and summary.json say why.
#[test]
fn delete_nodes_refuses_a_node_that_is_not_the_resets_own_edge_node() {
    let fleet = Fleet::builder().nodes(1).start();
    clean_etc(fleet.node(0));
    let api = FakeApiServer::start();
    api.kubelet_node("edge-00", "control-plane", "10.9.9.9");
    let sc = Scenario::new(&fleet).cmd("reset edge --force");
    let out = with_kubeconfig(&sc, &api, &["--delete-nodes"]);
    out.status(0)
        .stderr_has("keadm-batch: warning: Node edge-00: its reset was verified, but its Node object edge-00 was not deleted: --delete-nodes deletes only the node's own Node, and the node has no /etc/kubeedge/config/edgecore.yaml")
        .stderr_has("Node objects left in the cluster by resets")
        .stderr_has("  edge-00 (node edge-00): not deleted: refused: the node has no /etc/kubeedge/config/edgecore.yaml");
    assert!(deletes(&api).is_empty(), "{:?}", api.requests());
    assert!(api.has_node("edge-00"));
    let error = not_deleted_because(&out);
    assert!(
        error.starts_with("refused: the node has no /etc/kubeedge/config/edgecore.yaml"),
        "{error}"
    );
    assert!(
        out.transcript(0).contains("[keadm-batch] did not delete the Node edge-00 (--delete-nodes deletes only the node's own Node)"),
        "{}",
        out.transcript(0)
    );
}
