//! The join pre-flight probe on real sshd nodes (tests/common/fleet.rs), run through
//! `SshConnection` exactly as the pipeline would. Every change a test makes to a node
//! (a fake edgecore, /etc/kubeedge leftovers, noexec and tiny mounts) lives in that node's
//! own pid and mount namespaces: the host's /etc and processes are never touched.
//! `--preflight-only`'s JSON document and its sandbox images per site run the binary
//! against such nodes.

use std::time::{Duration, Instant};

use crate::common::cloudcore::{FakeCloudcore, now, token};
use crate::common::containerd::{Containerd, ENDPOINT};
use crate::common::edge_state::{RuntimeSocket, private_etc, start_edgecore};
use crate::common::fleet::{Fleet, Node, refused_endpoint};
use crate::common::image_archive::docker_archive;
use crate::common::scenario::Scenario;
use keadm_batch::kubeedge::preflight::{self, Finding, FindingId};
use keadm_batch::remote::{JoinSide, Privilege, preflight_probe_script, wrap};
use keadm_batch::transport::{Connection, SshConnection};

const UPLOAD_DIR: &str = "/tmp/kubeedge/keadm";
/// About the size of a keadm binary.
const KEADM_BYTES: u64 = 60 * 1024 * 1024;

/// Runs the probe on `node` over SSH and returns what it found.
fn probe(fleet: &Fleet, node: &Node, upload_dir: &str, socket: &str, needed: u64) -> Vec<Finding> {
    let spec = fleet.root_password_spec(node);
    let mut conn = SshConnection::connect(&spec).unwrap_or_else(|e| panic!("connect: {e}"));
    let script = wrap(
        &preflight_probe_script(upload_dir, socket, needed, &JoinSide::default()),
        Privilege::Login,
    );
    let mut out = Vec::new();
    let exit = conn
        .exec(
            &script,
            None,
            Instant::now() + Duration::from_secs(30),
            &mut out,
        )
        .unwrap_or_else(|e| panic!("run the probe: {e}"));
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(exit.success(), "{exit}: {out}");
    // Nothing but findings and the end marker: no stray errors from any shell or tool.
    for line in out.lines() {
        assert!(
            line.starts_with("KB_PF"),
            "unexpected output {line:?} in {out}"
        );
    }
    preflight::parse(&out)
}

fn ids(findings: &[Finding]) -> Vec<FindingId> {
    findings.iter().map(|f| f.id).collect()
}

#[test]
fn a_clean_node_has_no_findings_and_the_default_socket_is_checked() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let runtime = RuntimeSocket::create(node);
    let socket = runtime.path_on_node();
    let findings = probe(&fleet, node, UPLOAD_DIR, socket, KEADM_BYTES);
    assert_eq!(findings, [], "expected a clean node");
    // The probe wrote nothing, not even the upload dir.
    assert!(!node.tmp_path("kubeedge").exists());

    // Without --remote-runtime-endpoint keadm dials containerd's default socket. Nodes
    // share the machine's /run, so the probe must report it exactly when it is missing.
    let socket = preflight::runtime_socket(&keadm_batch::keadm_cmd::KeadmCommand::parse(
        "join --cloudcore-ipport=127.0.0.1:10000",
    ));
    assert_eq!(socket, "/run/containerd/containerd.sock");
    if std::path::Path::new(&socket).exists() {
        let findings = probe(&fleet, node, UPLOAD_DIR, &socket, KEADM_BYTES);
        assert!(ids(&findings).is_empty(), "{findings:?}");
    } else {
        let findings = probe(&fleet, node, UPLOAD_DIR, &socket, KEADM_BYTES);
        assert_eq!(ids(&findings), [FindingId::RuntimeSocketMissing]);
        assert!(
            findings[0]
                .detail
                .starts_with("/run/containerd/containerd.sock does not exist"),
            "{}",
            findings[0].detail
        );
    }
}

#[test]
fn a_running_edgecore_is_found_in_the_nodes_own_pid_namespace_only() {
    let fleet = Fleet::builder().nodes(2).start();
    let (busy, idle) = (fleet.node(0), fleet.node(1));
    let busy_runtime = RuntimeSocket::create(busy);
    let _idle_runtime = RuntimeSocket::create(idle);
    let socket = busy_runtime.path_on_node();
    start_edgecore(busy);
    let findings = probe(&fleet, busy, UPLOAD_DIR, socket, KEADM_BYTES);
    assert_eq!(ids(&findings), [FindingId::EdgecoreRunning]);
    assert!(
        findings[0].detail.starts_with("pid "),
        "{}",
        findings[0].detail
    );
    // The other node's namespace has no such process.
    assert_eq!(probe(&fleet, idle, UPLOAD_DIR, socket, KEADM_BYTES), []);

    // Only argv[0] says edgecore (`exec -a`): keadm's own `pidof edgecore` matches it.
    if std::path::Path::new("/usr/bin/pidof").exists()
        || std::path::Path::new("/bin/pidof").exists()
    {
        idle.shell_ok("bash -c 'exec -a edgecore sleep 300' >/dev/null 2>&1 </dev/null &");
        let findings = probe(&fleet, idle, UPLOAD_DIR, socket, KEADM_BYTES);
        assert_eq!(ids(&findings), [FindingId::EdgecoreRunning]);
    }
}

#[test]
fn leftovers_in_etc_kubeedge_are_found() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let runtime = RuntimeSocket::create(node);
    let socket = runtime.path_on_node();
    // The node's own /etc (an overlay whose writes land in its /tmp, hiding whatever the
    // machine's /etc has of KubeEdge's), with leftovers in it.
    private_etc(
        node,
        "mkdir -p /etc/kubeedge/config /etc/kubeedge/ca\n: > /etc/kubeedge/idempotency_record",
    );
    assert!(
        !std::path::Path::new("/etc/kubeedge/idempotency_record").exists(),
        "the host's /etc was changed"
    );
    let findings = probe(&fleet, node, UPLOAD_DIR, socket, KEADM_BYTES);
    assert_eq!(ids(&findings), [FindingId::ManagementDirNotClean]);
    assert_eq!(
        findings[0].detail,
        "3 entries: ca config idempotency_record"
    );

    // An empty /etc/kubeedge is clean, as keadm sees it.
    node.shell_ok("rm -rf /etc/kubeedge/* && test -d /etc/kubeedge");
    assert_eq!(probe(&fleet, node, UPLOAD_DIR, socket, KEADM_BYTES), []);
}

#[test]
fn a_noexec_upload_dir_is_found_and_really_is_noexec() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let runtime = RuntimeSocket::create(node);
    let socket = runtime.path_on_node();
    node.shell_ok("mkdir -p /tmp/noexec && mount -t tmpfs -o noexec,size=512m tmpfs /tmp/noexec");
    // The upload dir does not exist yet; its nearest parent decides.
    let findings = probe(
        &fleet,
        node,
        "/tmp/noexec/kubeedge/keadm",
        socket,
        KEADM_BYTES,
    );
    assert_eq!(ids(&findings), [FindingId::UploadDirNoexec]);
    assert_eq!(
        findings[0].detail,
        "/tmp/noexec is on /tmp/noexec, mounted noexec"
    );
    // What the finding predicts: a script there cannot be run.
    let out = node.shell(
        "printf '#!/bin/sh\\necho ran\\n' > /tmp/noexec/x && chmod 700 /tmp/noexec/x && /tmp/noexec/x",
    );
    assert!(!out.status.success(), "{out:?}");
    // A dir beside it, on an exec mount, is fine.
    assert_eq!(probe(&fleet, node, UPLOAD_DIR, socket, KEADM_BYTES), []);
}

#[test]
fn too_little_disk_for_the_binary_is_found() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let runtime = RuntimeSocket::create(node);
    let socket = runtime.path_on_node();
    node.shell_ok(
        "mkdir -p /tmp/small/kubeedge && mount -t tmpfs -o size=1m tmpfs /tmp/small/kubeedge",
    );
    let findings = probe(
        &fleet,
        node,
        "/tmp/small/kubeedge/keadm",
        socket,
        KEADM_BYTES,
    );
    assert_eq!(ids(&findings), [FindingId::LowDisk]);
    assert_eq!(
        findings[0].detail,
        "1024 KiB free in /tmp/small/kubeedge, 60 MiB needed"
    );
    // A small file fits, and nothing to upload needs no space.
    assert_eq!(
        probe(
            &fleet,
            node,
            "/tmp/small/kubeedge/keadm",
            socket,
            100 * 1024
        ),
        []
    );
    assert_eq!(
        probe(&fleet, node, "/tmp/small/kubeedge/keadm", socket, 0),
        []
    );
}

#[test]
fn everything_at_once_in_one_round_trip() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    start_edgecore(node);
    node.shell_ok("set -e\n\
         mkdir -p /tmp/etc-overlay/up /tmp/etc-overlay/work /tmp/bad\n\
         cp /etc/shadow /tmp/etc-overlay/shadow\n\
         mount -t overlay overlay -o lowerdir=/etc,upperdir=/tmp/etc-overlay/up,workdir=/tmp/etc-overlay/work /etc\n\
         mount --bind /tmp/etc-overlay/shadow /etc/shadow\n\
         mkdir -p /etc/kubeedge/certs\n\
         mount -t tmpfs -o noexec,size=1m tmpfs /tmp/bad\n",
    );
    let findings = probe(&fleet, node, "/tmp/bad/keadm", "/tmp/no.sock", KEADM_BYTES);
    assert_eq!(
        ids(&findings),
        [
            FindingId::EdgecoreRunning,
            FindingId::ManagementDirNotClean,
            FindingId::RuntimeSocketMissing,
            FindingId::UploadDirNoexec,
            FindingId::LowDisk,
        ]
    );
    for f in &findings {
        assert!(!f.message().is_empty() && !f.suggested_action().is_empty());
    }
}

/// A join through the runtime at `endpoint`, with a token that has a day to live, of the
/// `cloudcore` stand-in on loopback: both its ports (here one) answer the node, and the
/// checks before the run find its CA the token's and the node names free.
fn join_through(endpoint: &str, cloudcore: &FakeCloudcore) -> String {
    format!(
        "join --cloudcore-ipport=127.0.0.1:{port} --certport={port} --edgenode-name={{name}} --token={} --remote-runtime-endpoint={endpoint}",
        token(&cloudcore.ca_hash(), now() + 86_400),
        port = cloudcore.port,
    )
}

/// `--preflight-only --output json` prints one JSON document on stdout: every node with
/// its address and its findings (id and detail), or why it could not be probed. The
/// exit status and stderr are the table's.
#[test]
fn preflight_only_prints_one_json_document_with_each_node_s_findings() {
    let fleet = Fleet::builder().nodes(3).start();
    let _socket = RuntimeSocket::create(fleet.node(0));
    start_edgecore(fleet.node(1));
    let cloudcore = FakeCloudcore::start();
    let sc = Scenario::new(&fleet)
        .cmd(&join_through("unix:///tmp/containerd.sock", &cloudcore))
        .preflight("warn")
        .endpoint_for(2, refused_endpoint())
        .node_yaml_for(2, "retries: 0");
    let out = sc.run(&["--preflight-only", "--output", "json"]);
    out.status(1)
        .stderr_has("2 of 3 nodes have pre-flight findings or could not be probed");
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.stdout));
    eprintln!("--preflight-only --output json:\n{}", out.stdout);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node["name"], Scenario::name(i).as_str());
    }
    assert_eq!(
        nodes[0]["address"],
        format!("{}:{}", fleet.node(0).host(), fleet.node(0).port()).as_str()
    );
    assert_eq!(nodes[0]["probe"], "ran");
    assert_eq!(nodes[0]["findings"], serde_json::json!([]));
    assert_eq!(nodes[1]["probe"], "ran");
    let found: Vec<&str> = nodes[1]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(found, ["edgecore_running", "runtime_socket_missing"]);
    assert!(
        nodes[1]["findings"][0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("pid "),
        "{}",
        nodes[1]
    );
    assert_eq!(nodes[2]["probe"], "failed");
    assert_eq!(nodes[2]["error"]["phase"], "connecting");
    assert!(
        nodes[2]["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("refused the connection"),
        "{}",
        nodes[2]
    );
    crate::docs::documented_fields("docs/summary.md", "preflight-json", &json);
    assert!(!sc.path("batch_process_log.txt").exists());
}

/// After the findings, `--preflight-only` gives each site the sandbox images its nodes'
/// runtimes are configured with, as the `--sandbox-image` flags of the next bundle; the
/// nodes of one site whose containerds want different pause images get both.
#[test]
fn preflight_only_lists_each_site_s_sandbox_images_as_bundle_flags() {
    let fleet = Fleet::builder().nodes(3).start();
    let pause = |tag: &str| format!("registry.k8s.io/pause:{tag}");
    let _runtimes = [
        Containerd::start_with_sandbox_image(fleet.node(0), &pause("3.9")),
        Containerd::start_with_sandbox_image(fleet.node(1), &pause("3.6")),
        Containerd::start_with_sandbox_image(fleet.node(2), &pause("3.6")),
    ];
    let cloudcore = FakeCloudcore::start();
    let sc = Scenario::new(&fleet)
        .cmd(&join_through(ENDPOINT, &cloudcore))
        .preflight("warn")
        .node_yaml_for(0, "site: store-1")
        .node_yaml_for(1, "site: store-1");
    // A kit with keadm's image only: the image check runs, and reads each runtime's
    // sandbox image, which the kit lacks.
    docker_archive(
        &sc.images_dir().join("installation-package_v1.23.1.tar"),
        "kubeedge/installation-package:v1.23.1",
    );
    let out = sc.run(&["--preflight-only"]);
    eprintln!("--preflight-only:\n{}", out.stdout);
    out.status(1)
        .stdout_has(&format!(
            "\nsite store-1: --sandbox-image {} --sandbox-image {}\n",
            pause("3.9"),
            pause("3.6")
        ))
        .stdout_has(&format!("\nno site: --sandbox-image {}\n", pause("3.6")));
    let table_end = out.stdout.find("\n\n").expect("a section after the table");
    assert!(
        out.stdout[..table_end].contains("The container runtime lacks an image keadm join needs"),
        "the table comes first: {}",
        out.stdout
    );

    let out = sc.run(&["--preflight-only", "--output", "json"]);
    out.status(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        json["sites"],
        serde_json::json!([
            {
                "site": "store-1",
                "sandbox_images": [pause("3.9"), pause("3.6")],
                "flags": format!("--sandbox-image {} --sandbox-image {}", pause("3.9"), pause("3.6")),
                "not_read": []
            },
            {
                "site": null,
                "sandbox_images": [pause("3.6")],
                "flags": format!("--sandbox-image {}", pause("3.6")),
                "not_read": []
            }
        ])
    );
    assert_eq!(json["nodes"][0]["site"], "store-1");
    assert_eq!(json["nodes"][0]["sandbox_image"], pause("3.9").as_str());
    assert_eq!(json["nodes"][2]["sandbox_image"], pause("3.6").as_str());
    crate::docs::documented_fields("docs/summary.md", "preflight-json", &json);
}

/// What the fix of `id` says, as the console prints it.
fn fix_of(id: FindingId) -> &'static str {
    Finding {
        id,
        detail: String::new(),
    }
    .suggested_action()
}

/// Twelve nodes with the same finding (no runtime socket). `--preflight-only` prints its
/// fix once, with the nodes it is for, not a fix paragraph under every node. A run under
/// `--preflight warn` groups the finding once at its end, with its count, its nodes once
/// (a range) and its fix once, instead of a warning line per node and finding; and
/// report.html has it.
#[test]
fn twelve_nodes_with_the_same_finding_get_it_once_with_its_nodes_and_its_fix() {
    let fleet = Fleet::builder().nodes(12).start();
    let cloudcore = FakeCloudcore::start();
    let sc = Scenario::new(&fleet)
        .cmd(&join_through("unix:///tmp/containerd.sock", &cloudcore))
        .preflight("warn");
    let fix = fix_of(FindingId::RuntimeSocketMissing);
    // What the finding's heading line says, here and in the run's recap.
    let heading_of = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.trim_start().starts_with("runtime_socket_missing"))
            .map(str::to_string)
            .collect()
    };

    let probe = sc.run(&["--preflight-only"]);
    probe.status(1);
    eprintln!("--preflight-only table:\n{}", probe.stdout);
    assert_eq!(probe.stdout.matches(fix).count(), 1, "{}", probe.stdout);
    for id in FindingId::ALL {
        assert!(
            probe.stdout.matches(fix_of(id)).count() <= 1,
            "{id}'s fix more than once:\n{}",
            probe.stdout
        );
    }
    let heading = heading_of(&probe.stdout);
    assert_eq!(heading.len(), 1, "{}", probe.stdout);
    assert!(
        heading[0].contains("12 nodes") && heading[0].contains("edge-00..edge-11"),
        "{heading:?}"
    );

    let out = sc.run(&[]);
    eprintln!("stderr:\n{}", out.stderr);
    for i in 0..12 {
        let node = out.node_summary(i);
        let ids: Vec<&str> = node["preflight"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap())
            .collect();
        assert!(ids.contains(&"runtime_socket_missing"), "node {i}: {ids:?}");
    }
    out.stderr_lacks(": pre-flight: ");
    assert_eq!(out.stderr.matches("runtime_socket_missing").count(), 1);
    let heading = heading_of(&out.stderr);
    assert_eq!(heading.len(), 1, "{}", out.stderr);
    assert!(
        heading[0].contains("12 nodes") && heading[0].contains("edge-00..edge-11"),
        "{heading:?}"
    );
    assert_eq!(out.stderr.matches(fix).count(), 1, "{}", out.stderr);
    let page = std::fs::read_to_string(out.latest_run().join("report.html")).unwrap();
    assert!(
        page.contains("runtime_socket_missing"),
        "report.html lacks the finding"
    );
}
