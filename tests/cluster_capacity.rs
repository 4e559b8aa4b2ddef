//! CloudCore's capacity before any node is touched, and joins paced to the cloud, against
//! the stand-in API server of tests/common/apiserver.rs: cloudcore's `nodeLimit` read
//! from the ConfigMap and Deployment the Helm chart makes (or `--cloud-node-limit`), the
//! edge Nodes already registered plus the joins planned counted against it, and at most
//! `--joins-in-flight` joins between keadm's start and their Node's Ready.

use std::time::Duration;

use crate::common::apiserver::{Behaviour, CLOUDCORE_CONFIGMAP, FakeApiServer, keadm_exited};
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, closing_port};
use crate::common::scenario::{Scenario, remote_keadm};
use crate::common::test::Output;
use crate::waves::registering_after_keadm;

/// A token keadm-batch can read (its CA hash is nobody's; it expires in 2100).
const TOKEN: &str = "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07.eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjQxMDI0NDQ4MDB9.bm90LWEtcmVhbC1zaWduYXR1cmU";

/// Joins to cloudcore ports that close every connection (so the token's CA check
/// cannot ask it, a warning), with a token whose lifetime is no finding.
fn scenario<'f>(fleet: &'f Fleet, preflight: &str) -> Scenario<'f> {
    Scenario::new(fleet)
        .cmd(&format!(
            "join --cloudcore-ipport=127.0.0.1:{} --certport={} --edgenode-name={{name}} --token={TOKEN}",
            closing_port(),
            closing_port()
        ))
        .preflight(preflight)
}

fn run(sc: &Scenario, api: &FakeApiServer, extra: &[&str]) -> Output {
    let kubeconfig = api.kubeconfig().display().to_string();
    let mut args = vec!["--kubeconfig", kubeconfig.as_str()];
    args.extend(extra);
    sc.run(&args)
}

/// A cloud whose cloudcore serves 2 (nodeLimit 2, one replica) with 2 edge Nodes already.
fn full_cloud() -> FakeApiServer {
    let api = FakeApiServer::start();
    api.cloudcore(Some("2"), 1);
    api.existing_node("old-1", true, Duration::from_secs(86_400));
    api.existing_node("old-2", true, Duration::from_secs(86_400));
    api
}

fn untouched(fleet: &Fleet) {
    for node in fleet.nodes() {
        assert!(
            fake_keadm::calls(&remote_keadm(node)).is_empty(),
            "keadm ran on {}",
            node.host()
        );
        assert!(
            !node.tmp_path("kubeedge").exists(),
            "{} was touched",
            node.host()
        );
    }
}

const FINDING: &str = "CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore); 2 edge Node(s) are registered in the cluster at https://127.0.0.1:";

#[test]
fn strict_refuses_joins_past_the_clouds_limit_before_any_node_is_touched() {
    let fleet = Fleet::builder().nodes(2).start();
    let api = full_cloud();
    let out = run(&scenario(&fleet, "strict"), &api, &[]);
    out.status(2).stderr_has(FINDING).stderr_has(
        "and 2 of these joins would add theirs, 2 more than it serves: cloudhub would refuse the session of the joins past the limit (\"reach node limit\")",
    ).stderr_has("Raise cloudcore's nodeLimit or add cloudcore replicas").stderr_has("No node was touched.");
    untouched(&fleet);
}

/// Under warn the finding is a warning and the run goes on; a join that misses Ready
/// while the cloud is full names the limit in its cause: one whose Node never registers
/// (with edgecore's own line), and one whose Node registers and stays NotReady, as a
/// refused KubeEdge v1.23.1 node does (seen on the real cloud, tests/cloud_capacity_e2e.rs).
#[test]
fn warn_goes_on_and_the_refused_nodes_name_the_limit_in_their_cause() {
    let fleet = Fleet::builder().nodes(2).start();
    for node in fleet.nodes() {
        node.shell_ok("mount -t tmpfs kb-test-log /var/log && mkdir -p /var/log/kubeedge");
    }
    let api = full_cloud();
    let calls = fake_keadm::calls_path(&remote_keadm(fleet.node(1)));
    api.node_on(
        &Scenario::name(1),
        move || keadm_exited(&calls),
        Behaviour::NotReady {
            reason: "KubeletNotReady".into(),
            message: "CSINode is not yet initialized".into(),
        },
    );
    let refused =
        "W1206 05:00:01.000000 4242 edgehub.go:178] connection is broken, will reconnect after 30s";
    let sc = scenario(&fleet, "warn").keadm(FakeKeadm::new().prints("Install Complete!").runs(
        &format!("echo '{refused}' >> /var/log/kubeedge/edgecore.log"),
    ));
    let out = run(&sc, &api, &["--ready-timeout", "3"]);
    out.status(1)
        .stderr_has(FINDING)
        .stderr_has("and 2 of these joins would add theirs, 2 more than it serves");
    for node in fleet.nodes() {
        assert_eq!(fake_keadm::calls(&remote_keadm(node)).len(), 1, "keadm ran");
    }
    let limit = "CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore) and";
    assert_eq!(out.node_summary(0)["failure_class"], "not_registered");
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("keadm join exited 0, but no Node named edge-00 appeared in the cluster within 3 s of its exit;"),
        "{line}"
    );
    assert!(
        line.contains(&format!("{limit} 3 other edge Nodes are registered: cloudhub refuses node edge-00 (\"reach node limit\") and serves it nothing. Raise nodeLimit or add cloudcore replicas")),
        "{line}"
    );
    assert!(
        line.contains("edgehub.go:178] connection is broken, will reconnect after 30s"),
        "edgecore's own line stays: {line}"
    );
    assert_eq!(out.node_summary(1)["failure_class"], "not_ready");
    let line = out.log_line_starting("Failed to process node edge-01: ");
    assert!(
        line.contains("but it was not Ready within 3 s of keadm's exit: KubeletNotReady: CSINode is not yet initialized. ")
            && line.contains(&format!("{limit} 2 other edge Nodes are registered: cloudhub refuses node edge-01 (\"reach node limit\") and serves it nothing.")),
        "{line}"
    );
}

/// `--cloud-node-limit` wins over the ConfigMap either way: a lower total makes the
/// finding, a higher one takes it away.
#[test]
fn the_flag_wins_over_the_configmap() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = FakeApiServer::start();
    api.cloudcore(Some("\"1000\""), 1);
    api.existing_node("old-1", true, Duration::from_secs(60));
    let sc = scenario(&fleet, "strict");
    let out = run(&sc, &api, &["--dry-run", "--cloud-node-limit", "1"]);
    out.status(2).stderr_has(
        "CloudCore serves at most 1 edge node (--cloud-node-limit, over nodeLimit 1000 × 1 read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore); 1 edge Node(s) are registered",
    );
    let full = full_cloud();
    let out = run(&sc, &full, &["--dry-run", "--cloud-node-limit", "10"]);
    out.status(0)
        .stderr_lacks("reach node limit")
        .stdout_has("CloudCore serves at most 10 edge nodes (--cloud-node-limit, over nodeLimit 2 × 1 read from");
    untouched(&fleet);
}

/// A kubeconfig that may not read the ConfigMap: the flag alone decides; without it the
/// check is skipped, and the plan says why.
#[test]
fn a_configmap_the_kubeconfig_may_not_read_falls_back_to_the_flag_or_is_skipped_with_a_note() {
    let fleet = Fleet::builder().nodes(1).start();
    let api = full_cloud();
    api.forbid(CLOUDCORE_CONFIGMAP);
    let sc = scenario(&fleet, "strict");
    let out = run(&sc, &api, &["--dry-run"]);
    out.status(0).stderr_lacks("reach node limit").stdout_has(
        "cloudcore's capacity was not checked: the kubeconfig's user may not get configmaps in namespace kubeedge, and no --cloud-node-limit was given",
    );
    assert!(
        api.requests()
            .iter()
            .any(|r| r == &format!("GET {CLOUDCORE_CONFIGMAP}")),
        "the ConfigMap was asked for"
    );
    let out = run(&sc, &api, &["--dry-run", "--cloud-node-limit", "2"]);
    out.status(2).stderr_has(
        "CloudCore serves at most 2 edge nodes (--cloud-node-limit); 2 edge Node(s) are registered",
    );
    // A cloud not installed by the chart (no ConfigMap): the same note, its own reason.
    let bare = FakeApiServer::start();
    run(&sc, &bare, &["--dry-run"]).status(0).stdout_has(
        "cloudcore's capacity was not checked: there is no ConfigMap kubeedge/cloudcore (cloudcore was not installed by keadm init or the Helm chart)",
    );
    untouched(&fleet);
}

/// The dry run shows the finding and the figures, and the joins' pace.
#[test]
fn the_dry_run_shows_the_capacity_and_the_joins_pace() {
    let fleet = Fleet::builder().nodes(3).start();
    let api = FakeApiServer::start();
    api.cloudcore(None, 2);
    let sc = scenario(&fleet, "warn");
    let out = run(&sc, &api, &["--dry-run", "--joins-in-flight", "4"]);
    out.status(0)
        .stdout_has("CloudCore serves at most 1000 edge nodes (nodeLimit 500 × 2 replicas, read from the ConfigMap kubeedge/cloudcore, whose cloudcore.yaml sets no nodeLimit (cloudcore's default 500) and the Deployment kubeedge/cloudcore), and 0 edge Node(s) are registered")
        .stdout_has("  joins:       at most 4 in flight to the cloud at once (--joins-in-flight), each from its start to its Node's Ready or the end of its wait; a join past it waits for its turn");
    let out = scenario(&fleet, "warn").run(&["--dry-run"]);
    out.status(0).stdout_has("  joins:       at most 10 in flight to the cloud at once (--joins-in-flight, the default), each from its start to keadm's exit (no Ready wait in this run)");
    // Past the limit, the dry run warns as the run would.
    let full = full_cloud();
    run(&sc, &full, &["--dry-run"])
        .status(0)
        .stderr_has(FINDING);
    untouched(&fleet);
}

/// At most N joins between keadm's start and their Node's Ready at once, though
/// maxRunNum would let all start: each node's keadm start (its own record) and its
/// verdict (the summary's finish) bound its time in flight.
#[test]
fn no_more_joins_than_the_bound_are_in_flight_between_keadms_start_and_ready() {
    let fleet = Fleet::builder().nodes(4).start();
    let api = registering_after_keadm(&fleet, |_| {
        Behaviour::ReadyAfter(Duration::from_millis(1500))
    });
    let sc = scenario(&fleet, "off")
        .keadm(FakeKeadm::new().prints("Install Complete!"))
        .max_run_num(4);
    let out = run(&sc, &api, &["--joins-in-flight", "2"]);
    out.status(0);
    let summary = out.summary();
    let mut spans = Vec::new();
    for (i, node) in fleet.nodes().iter().enumerate() {
        let calls = fake_keadm::calls(&remote_keadm(node));
        assert_eq!(calls.len(), 1, "{calls:?}");
        let ready = summary["nodes"][i]["finished_at"].as_f64().unwrap();
        spans.push((calls[0].start, ready));
    }
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 2, "joins in flight at once: {spans:?}");
    let waited: Vec<String> = (0..4)
        .map(|i| out.transcript(i))
        .filter(|t| t.contains("[keadm-batch] waited "))
        .collect();
    assert!(
        waited.len() >= 2
            && waited[0].contains(
                "for its turn before it started: 2 joins were in flight to the cloud (--joins-in-flight 2)"
            ),
        "{waited:?}"
    );
}
