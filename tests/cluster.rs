//! Joins verified from the cluster (`--kubeconfig`), on real sshd nodes, against the
//! stand-in API server of tests/common/apiserver.rs: a Node registers once the node's
//! keadm has exited, as edgecore makes it appear, and then turns Ready, stays NotReady,
//! or never appears.

use std::time::Duration;

use crate::common::apiserver::{Behaviour, FakeApiServer, keadm_exited};
use crate::common::fake_keadm::FakeKeadm;
use crate::common::fleet::{Fleet, Node, closing_port};
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::Output;

/// Every node of `fleet` has its Node register once its keadm has exited, and turn Ready
/// `after` that, as edgecore's does.
pub(crate) fn nodes_ready_after_keadm(api: &FakeApiServer, fleet: &Fleet, after: Duration) {
    for (i, node) in fleet.nodes().iter().enumerate() {
        api.node_on(
            &Scenario::name(i),
            after_keadm(node),
            Behaviour::ReadyAfter(after),
        );
    }
}

/// When the fake keadm on `node` has exited, as edgecore registers a node after the join.
pub(crate) fn after_keadm(node: &Node) -> impl Fn() -> bool + Send + 'static {
    let calls = remote_keadm(node).with_extension("calls");
    move || keadm_exited(&calls)
}

fn kubeconfig_args(api: &FakeApiServer) -> Vec<String> {
    vec![
        "--kubeconfig".to_string(),
        api.kubeconfig().display().to_string(),
    ]
}

fn run(sc: &Scenario, api: &FakeApiServer, extra: &[&str]) -> Output {
    let mut args = kubeconfig_args(api);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sc.run(&args)
}

#[test]
fn a_join_whose_node_turns_ready_succeeds_with_its_times_from_one_watch() {
    let fleet = Fleet::builder().nodes(3).start();
    let api = FakeApiServer::start();
    nodes_ready_after_keadm(&api, &fleet, Duration::from_millis(1500));
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let out = run(&sc, &api, &["--max-run-num", "1"]);
    out.status(0);
    let summary = out.summary();
    for i in 0..3 {
        let node = &summary["nodes"][i];
        assert_eq!(node["phase"], "succeeded", "{node}");
        let cluster = &node["cluster"];
        assert_eq!(cluster["node_name"], Scenario::name(i));
        let registered = cluster["registered_after"].as_f64().unwrap();
        let ready = cluster["ready_after"].as_f64().unwrap();
        assert!((0.0..10.0).contains(&registered), "{cluster}");
        assert!(
            (1.4..20.0).contains(&ready),
            "Ready 1.5 s after registering: {cluster}"
        );
        assert_eq!(cluster["version"], "v1.32.10-kubeedge-v1.23.1");
        // From the node's start (before its connect) to Ready: at least its own steps
        // and the wait after keadm.
        let since_start = cluster["ready_after_start"].as_f64().unwrap();
        let steps: f64 = ["connect", "prepare", "upload", "run"]
            .iter()
            .filter_map(|s| node["steps"][s].as_f64())
            .sum();
        assert!(steps > 0.0, "{node}");
        assert!(since_start >= steps + ready - 0.05, "{node}");
        assert!(since_start < 60.0, "{node}");
        let transcript = out.transcript(i);
        let line = format!(
            "[keadm-batch] the cluster has the Node {}: registered {registered:.1} s and Ready {ready:.1} s after keadm exited, Ready {since_start:.1} s after the node's start (v1.32.10-kubeedge-v1.23.1)",
            Scenario::name(i)
        );
        assert!(transcript.contains(&line), "{line}\n{transcript}");
    }
    // The recap gives each node's time to Ready, from keadm's exit and from its start.
    out.stderr_has("Ready in the cluster: 3 node(s), after keadm exited: median ")
        .stderr_has("; from the node's start: median ")
        .stderr_has("s after keadm (")
        .stderr_has("s after its start)");
    // One list and one watch follow every node: no request per node.
    let requests = api.requests();
    let per_node: Vec<&String> = requests
        .iter()
        .filter(|r| r.contains("/api/v1/nodes/"))
        .collect();
    assert!(per_node.is_empty(), "{per_node:?}");
    let watches = requests.iter().filter(|r| r.contains("watch=true")).count();
    assert_eq!(watches, 1, "{requests:?}");
    // The wait holds no worker: with one worker, node 1 started before node 0 was Ready.
    let first_ready = summary["nodes"][0]["finished_at"].as_f64().unwrap();
    let second_started = summary["nodes"][1]["started_at"].as_f64().unwrap();
    assert!(second_started < first_ready, "{summary}");
}

#[test]
fn a_join_that_never_registers_fails_as_not_registered_with_the_cause_from_edgecores_log() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    // edgecore's log lives on the node (its own tmpfs over /var/log, in its namespace).
    node.shell_ok("mount -t tmpfs kb-test-log /var/log && mkdir -p /var/log/kubeedge");
    let api = FakeApiServer::start();
    let refused = "E1201 10:00:01.000000 4242 certmanager.go:82] failed to apply the edge certs, err: failed to get CA certificate, err: Get \"https://127.0.0.1:10002/ca.crt\": dial tcp 127.0.0.1:10002: connect: connection refused";
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!").runs(
        &format!("echo '{refused}' >> /var/log/kubeedge/edgecore.log"),
    ));
    let out = run(&sc, &api, &["--ready-timeout", "2"]);
    out.status(1);
    let summary = out.summary();
    let n = &summary["nodes"][0];
    assert_eq!(n["phase"], "failed");
    assert_eq!(n["failed_in"], "verifying");
    assert_eq!(n["failure_class"], "not_registered");
    assert_eq!(n["exit_status"], 0, "keadm's own exit status stays");
    assert_eq!(n["cluster"]["node_name"], "edge-00");
    assert!(n["cluster"].get("registered_after").is_none(), "{n}");
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("keadm join exited 0, but no Node named edge-00 appeared in the cluster within 2 s of its exit; edgecore's log names the cause (cloudcore unreachable): "),
        "{line}"
    );
    assert!(
        line.contains("dial tcp 127.0.0.1:10002: connect: connection refused"),
        "{line}"
    );
    let transcript = out.transcript(0);
    assert!(
        transcript.contains("[keadm-batch] asking the node for edgecore's state"),
        "{transcript}"
    );
    assert!(
        transcript.contains("kb-edgecore: not running"),
        "{transcript}"
    );
    out.stderr_has("not_registered");
}

/// A real kube-apiserver sends nothing on a watch while no Node changes (its first
/// bookmark comes about a minute in): the watch must outlive the 15 s that any other
/// request may take, and a node that never registers is not told of watch trouble.
#[test]
fn a_quiet_watch_is_held_past_the_request_timeout_and_is_no_trouble() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    api.quiet_watches();
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let out = run(&sc, &api, &["--ready-timeout", "20"]);
    out.status(1);
    let summary = out.summary();
    assert_eq!(summary["nodes"][0]["failure_class"], "not_registered");
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(!line.contains("watch"), "{line}");
    assert_eq!(api.watches(), 1, "{:?}", api.requests());
}

/// Connections drop (load balancers, an API server's restart): the watch resumes from
/// the last version it saw, a node that turns Ready meanwhile is seen, and a node that
/// never registers is not told of trouble that was routine.
#[test]
fn a_dropped_watch_is_resumed_without_a_word() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    api.quiet_watches();
    api.drop_watches_after(Duration::from_millis(700));
    api.node_on(
        &Scenario::name(0),
        after_keadm(fleet.node(0)),
        Behaviour::ReadyAfter(Duration::from_millis(1500)),
    );
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let out = run(&sc, &api, &["--ready-timeout", "6"]);
    out.status(1);
    let summary = out.summary();
    assert_eq!(summary["nodes"][0]["phase"], "succeeded", "{summary}");
    assert_eq!(summary["nodes"][1]["failure_class"], "not_registered");
    let line = out.log_line_starting("Failed to process node edge-01: ");
    assert!(!line.contains("watch"), "{line}");
    assert!(api.watches() >= 3, "{:?}", api.requests());
}

/// A watch dropped again and again as soon as it begins is trouble worth naming.
#[test]
fn a_watch_that_breaks_as_soon_as_it_begins_is_named_in_the_verdict() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    api.quiet_watches();
    api.drop_watches_after(Duration::ZERO);
    let sc = Scenario::new(&fleet).keadm(FakeKeadm::new().prints("Install Complete!"));
    let out = run(&sc, &api, &["--ready-timeout", "10"]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("the cluster's watch had trouble meanwhile: the cluster's node watch broke as soon as it began, ")
            && line.contains(" times in a row: Error reading events stream: "),
        "{line}"
    );
}

#[test]
fn a_node_that_registers_but_stays_not_ready_fails_with_the_nodes_condition() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    let cni = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";
    api.node_on(
        "edge-00",
        after_keadm(fleet.node(0)),
        Behaviour::NotReady {
            reason: "KubeletNotReady".into(),
            message: cni.into(),
        },
    );
    api.node_on(
        "edge-01",
        after_keadm(fleet.node(1)),
        Behaviour::ReadyAfter(Duration::from_millis(200)),
    );
    let sc = Scenario::new(&fleet);
    let out = run(&sc, &api, &["--ready-timeout", "3"]);
    eprintln!("{}", out.stderr);
    out.status(1);
    let summary = out.summary();
    let n = &summary["nodes"][0];
    assert_eq!(n["failure_class"], "not_ready", "{n}");
    assert_eq!(n["cluster"]["condition"], format!("KubeletNotReady: {cni}"));
    assert!(n["cluster"]["registered_after"].as_f64().is_some(), "{n}");
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("but it was not Ready within 3 s of keadm's exit: KubeletNotReady: container runtime network not ready"),
        "{line}"
    );
    assert_eq!(summary["nodes"][1]["phase"], "succeeded");
    // The recap groups it with its fix.
    out.stderr_has("Registered, but not Ready")
        .stderr_has("/etc/cni/net.d");
    // And --retry-failed --class not_ready takes exactly that node again.
    let again = run(
        &sc,
        &api,
        &[
            "--retry-failed",
            "--class",
            "not_ready",
            "--ready-timeout",
            "1",
        ],
    );
    again.stderr_has("Retrying 1 node(s)");
    assert_eq!(again.summary()["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(again.summary()["nodes"][0]["name"], "edge-00");
}

#[test]
fn the_dry_run_asks_the_cluster_and_says_what_is_verified() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    let sc = Scenario::new(&fleet);
    let out = run(&sc, &api, &["--dry-run", "--ready-timeout", "120"]);
    out.status(0).stdout_has(&format!(
        "  cluster:     joins verified in https://127.0.0.1:{}/ (context stand-in, v1.32.13): each join's Node must register and be Ready within 120 s of keadm's exit",
        api.port
    ));
    let reviews = api
        .requests()
        .iter()
        .filter(|r| r.contains("selfsubjectaccessreviews"))
        .count();
    assert_eq!(reviews, 3, "get, list and watch on nodes");
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "a dry run touches no node"
    );
    // Without a kubeconfig the plan says verification is off.
    Scenario::new(&fleet)
        .run(&["--dry-run"])
        .status(0)
        .stdout_has("  cluster:     verification off (no kubeconfig, or no join selected)");
}

#[test]
fn a_kubeconfig_without_the_permissions_stops_the_run_before_any_node() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    api.deny("watch", "nodes");
    let sc = Scenario::new(&fleet);
    let out = run(&sc, &api, &[]);
    out.status(2).stderr_has(&format!(
        "keadm-batch: error: The kubeconfig's user may not watch nodes (https://127.0.0.1:{}/ answered the access review so). Every run with a kubeconfig needs get, list and watch on nodes",
        api.port
    ));
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "no node was touched"
    );
}

#[test]
fn an_unreachable_api_server_or_a_bad_kubeconfig_stops_the_run_with_what_to_fix() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    let sc = Scenario::new(&fleet);
    // A context the kubeconfig does not have.
    run(&sc, &api, &["--context", "prod"])
        .status(2)
        .stderr_has("it has no context named prod (it has: stand-in)");
    // A server that does not answer: the same kubeconfig, at a port that closes.
    let text = std::fs::read_to_string(api.kubeconfig()).unwrap().replace(
        &format!("127.0.0.1:{}", api.port),
        &format!("127.0.0.1:{}", closing_port()),
    );
    std::fs::write(sc.path("gone.kubeconfig"), text).unwrap();
    let out = sc.run(&["--kubeconfig", "gone.kubeconfig"]);
    out.status(2)
        .stderr_has("could not be asked for its version");
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "no node was touched"
    );
}

#[test]
fn the_config_files_kubeconfig_key_turns_verification_on() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    api.node_on(
        "edge-00",
        after_keadm(fleet.node(0)),
        Behaviour::ReadyAfter(Duration::from_millis(100)),
    );
    let sc = Scenario::new(&fleet).top_yaml(&format!("kubeconfig: {}", api.kubeconfig().display()));
    let out = sc.run(&[]);
    out.status(0);
    assert!(
        out.summary()["nodes"][0]["cluster"]["ready_after"]
            .as_f64()
            .is_some()
    );
    // And so does $KUBECONFIG, as kubectl reads it.
    let out = Scenario::new(&fleet)
        .command(&["--dry-run"])
        .env("KUBECONFIG", api.kubeconfig())
        .run();
    out.status(0)
        .stdout_has("  cluster:     joins verified in https://127.0.0.1:");
    // A kubeconfig that does not exist is a config error at its line.
    let bad = Scenario::new(&fleet).top_yaml("kubeconfig: /nonexistent/kubeconfig");
    bad.run(&["--dry-run"])
        .status(2)
        .stderr_has("kubeconfig is /nonexistent/kubeconfig, which is not a file on this machine");
}

#[test]
fn a_second_ctrl_c_ends_the_wait_for_ready_and_says_so() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let api = FakeApiServer::start();
    let sc = Scenario::new(&fleet);
    let kubeconfig = api.kubeconfig();
    let running = sc
        .command(&["--kubeconfig", kubeconfig.to_str().unwrap()])
        .spawn();
    // The join is done and nothing registers: the run waits for Ready (300 s by default).
    let calls = remote_keadm(node).with_extension("calls");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !keadm_exited(&calls) {
        assert!(std::time::Instant::now() < deadline, "keadm never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    running.interrupt_twice();
    let out = running.wait();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "cancelled promptly"
    );
    out.status(130);
    let n = &out.summary()["nodes"][0];
    assert_eq!(n["phase"], "interrupted", "{n}");
    assert_eq!(n["failed_in"], "verifying");
    assert_eq!(
        n["error"],
        "keadm join exited 0; the wait for the Node edge-00 to be Ready was cancelled by the operator (it had not registered yet)"
    );
}

#[test]
fn a_node_left_ready_by_an_earlier_join_is_not_taken_for_this_one() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = FakeApiServer::start();
    // Both names are in the cluster, Ready, before the run. edge-01's new edgecore
    // connects and cloudcore writes its Node; edge-00's stays as it was.
    api.existing_node("edge-00", true, Duration::from_secs(3600));
    api.existing_node("edge-01", true, Duration::from_secs(3600));
    api.node_on(
        "edge-01",
        after_keadm(fleet.node(1)),
        Behaviour::ReadyAfter(Duration::from_millis(300)),
    );
    // (The scenario's directory lives as long as `sc`.)
    let sc = Scenario::new(&fleet);
    let out = run(&sc, &api, &["--ready-timeout", "3"]);
    out.status(1);
    let summary = out.summary();
    assert_eq!(
        summary["nodes"][0]["failure_class"], "not_ready",
        "{summary}"
    );
    assert_eq!(
        summary["nodes"][0]["cluster"]["condition"],
        "Ready, but unchanged since before this run: the Node is an earlier join's, and nothing has written it since (this node's edgecore would when it connects)"
    );
    assert_eq!(summary["nodes"][0]["cluster"]["registered_after"], 0.0);
    assert_eq!(summary["nodes"][1]["phase"], "succeeded", "{summary}");
}

/// A selection (`--only`, `--shard`, `--retry-failed`) holds fewer nodes than the config:
/// each verdict must find its node by its place in the config, not in the selection. (It
/// once took the selection's position: the deciding thread panicked out of bounds and the
/// run waited for it forever.)
#[test]
fn verdicts_of_a_selection_find_their_own_nodes() {
    let fleet = Fleet::builder().nodes(3).start();
    let api = FakeApiServer::start();
    api.node_on(
        "edge-02",
        after_keadm(fleet.node(2)),
        Behaviour::NotReady {
            reason: "KubeletNotReady".into(),
            message: "cni plugin not initialized".into(),
        },
    );
    // edge-01 never registers: it is asked over SSH, and it must be edge-01 that is asked.
    let sc = Scenario::new(&fleet);
    let mut args = kubeconfig_args(&api);
    args.extend(["--only", "edge-01,edge-02", "--ready-timeout", "2"].map(String::from));
    let (out, _) = sc
        .command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .spawn()
        .wait_measured(Duration::from_secs(120));
    out.status(1);
    let summary = out.summary();
    let nodes = summary["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{summary}");
    assert_eq!(nodes[0]["name"], "edge-01");
    assert_eq!(nodes[0]["failure_class"], "not_registered", "{summary}");
    assert_eq!(nodes[1]["name"], "edge-02");
    assert_eq!(nodes[1]["failure_class"], "not_ready", "{summary}");
    let asked = out.transcript(1);
    assert!(
        asked.contains("[keadm-batch] asking the node for edgecore's state"),
        "{asked}"
    );
    assert!(asked.contains("[keadm-batch] not_registered: "), "{asked}");
    let not_ready = out.transcript(2);
    assert!(!not_ready.contains("asking the node"), "{not_ready}");
    assert!(
        not_ready.contains("[keadm-batch] not_ready: "),
        "{not_ready}"
    );
    assert!(
        !fleet.node(0).tmp_path("kubeedge").exists(),
        "edge-00 was not selected"
    );
}

/// Review finding N7: a dry run runs nothing, a kubeconfig's exec credential plugin
/// included. The plan names the plugin and says the API server was not asked; the real
/// run runs it (and verifies the join). `--no-cluster` with $KUBECONFIG set to that
/// kubeconfig reads no kubeconfig, runs no plugin and says verification is off.
#[test]
fn a_dry_run_runs_no_exec_plugin_and_no_cluster_reads_no_kubeconfig() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    let scratch = tempfile::tempdir().unwrap();
    let ran = scratch.path().join("exec-plugin-ran");
    let (kubeconfig, plugin) = api.kubeconfig_with_exec_plugin(&ran);
    let kubeconfig_arg = kubeconfig.display().to_string();
    let sc = Scenario::new(&fleet);
    let dry = sc.run(&["--dry-run", "--kubeconfig", &kubeconfig_arg]);
    dry.status(0)
        .stdout_has(&format!(
            "  kubeconfig:  the kubeconfig {kubeconfig_arg} (--kubeconfig), context with-plugin\n"
        ))
        .stdout_has(&format!("  cluster:     not asked: the kubeconfig's user runs `{}` on this machine for its credentials (an exec credential plugin), and a dry run runs nothing, so it was not run and the API server was asked nothing", plugin.display()));
    assert!(!ran.exists(), "the dry run ran the exec plugin");
    assert!(api.requests().is_empty(), "{:?}", api.requests());

    // --no-cluster: $KUBECONFIG is set, and neither read nor run.
    let no_cluster = sc
        .command(&["--dry-run", "--no-cluster"])
        .env("KUBECONFIG", &kubeconfig)
        .run();
    no_cluster
        .status(0)
        .stdout_has(&format!(
            "  kubeconfig:  none read (--no-cluster; $KUBECONFIG={kubeconfig_arg} is ignored)\n"
        ))
        .stdout_has("  cluster:     verification off (--no-cluster): a join succeeds when keadm exits 0, and nothing is read from or written to a cluster\n");
    let run = sc
        .command(&["--no-cluster"])
        .env("KUBECONFIG", &kubeconfig)
        .run();
    run.status(0);
    assert!(!ran.exists(), "--no-cluster ran the exec plugin");
    assert!(api.requests().is_empty(), "{:?}", api.requests());
    // It conflicts with what needs the cluster.
    sc.command(&["--no-cluster", "--kubeconfig", &kubeconfig_arg])
        .run()
        .status(2)
        .stderr_has("'--no-cluster' cannot be used with '--kubeconfig <FILE>'");
    // The control: a run does run the plugin, so its absence above means something.
    sc.run(&["--kubeconfig", &kubeconfig_arg, "--no-wait"])
        .status(0);
    assert!(ran.exists(), "the run did not run the exec plugin");
}
