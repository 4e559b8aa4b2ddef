//! A real KubeEdge cloud and real edge nodes, end to end, when the real binaries are at
//! hand: set `KECLOUD_BIN` to a directory holding `etcd`, `kube-apiserver`, `kubectl`,
//! `cloudcore`, `keadm` and `edgecore` (built from their projects' sources, of one
//! KubeEdge release), `KECLOUD_CRDS` to that release's `build/crds`, and run
//! `cargo test --test main cloud_e2e -- --ignored --nocapture`. It is ignored otherwise
//! (no cluster ships with the tests), and fails when asked for without `KECLOUD_BIN`.
//!
//! What is real: etcd, kube-apiserver and cloudcore on loopback (tests/common/
//! real_cloud.rs), keadm, keadm-batch, sshd, containerd and runc, and the edgecore keadm
//! join copies out of the installation-package (the real one, inside the image the test
//! writes) and starts through its unit; the Node objects it registers, their Ready
//! condition, and the watch keadm-batch follows them with. What stands in: systemd (the
//! stand-in `systemctl` of tests/keadm_e2e.rs) and the registries (none: the images come
//! from the offline directory, as in keadm_e2e).
//!
//! Each edge node is a fleet node (its own mount and pid namespaces, the host's network,
//! so it reaches cloudcore on 127.0.0.1) with an /etc of its own (tests/common/
//! edge_state.rs: keadm's reset removes /etc/kubeedge, which the tool then checks), the
//! rest of what keadm join writes on tmpfs as in keadm_e2e, what edgecore's kubelet
//! writes kept private to the node (/var/lib/edged, /var/lib/kubelet, /var/log/pods),
//! and a containerd with a CNI bridge config (Debian's plugins, in
//! containerd's own network namespace, no gateway): CRI reports the network ready, and
//! the node turns Ready. One node's containerd has no CNI config: CRI says its CNI plugin
//! is not initialized, and edgecore keeps its Node NotReady, with that message. Two
//! edgecores on one machine share its network, so each node's kubelet gets a read-only
//! port of its own (`--set` on keadm join; edged serves its healthz there too). They
//! share the machine's cgroup root, `/kubepods`, which holds nothing: no pod is scheduled
//! (a cgroup root of a node's own would have to exist in every cgroup v1 hierarchy
//! before edged starts, or edged exits before it registers).
//!
//! Each run has a config of its own listing just its nodes. The run: the two good
//! nodes join and the tool waits, through the cluster, until both are Ready (exit 0;
//! each node's times to registered and to Ready in summary.json, its kubelet version
//! checked against the API server's Node); the node without CNI fails `not_ready` with
//! the Node's own condition; a node on a site LAN, where cloudcore's loopback ports are
//! not routed, is stopped by pre-flight under `strict` with exactly the two
//! `cloudcore_unreachable_from_node` findings, untouched, and no Node of its name
//! appears; then `keadm reset` of the three joined nodes with `--delete-nodes` leaves no
//! Node object and no edgecore on any of them.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::containerd::{Containerd, ENDPOINT, SANDBOX_IMAGE};
use crate::common::edge_state::clean_etc;
use crate::common::fake_release::{ChecksumFile, FakeRelease};
use crate::common::fleet::{Fleet, Node};
use crate::common::image_archive::{
    archives_left, docker_archive_carrying, host_arch, oci_archive,
};
use crate::common::real_cloud::{CloudBinaries, RealCloud, Release, ready_condition};
use crate::common::scenario::{Scenario, VERSION};
use crate::common::test::Output;
use crate::keadm_e2e::{MadeMountPoints, keadm_version, usr_local_bin_with_systemctl};

/// What keadm join writes outside /etc (which is the node's own, [`clean_etc`]): a tmpfs
/// each in the node's mount namespace.
const TMPFS_DIRS: [&str; 3] = ["/var/lib/kubeedge", "/var/log/kubeedge", "/run/systemd"];

/// What edgecore's kubelet writes, bound from the node's /tmp in its mount namespace
/// (two edgecores on one machine would share them otherwise).
const KUBELET_DIRS: [&str; 3] = ["/var/lib/edged", "/var/lib/kubelet", "/var/log/pods"];

/// The CNI config of a node that can turn Ready: a bridge without a gateway, in
/// containerd's own network namespace; `{ipam}` is where host-local keeps its leases.
const CNI_BRIDGE: &str = r#"{"cniVersion":"1.0.0","name":"cloud-e2e","plugins":[
 {"type":"bridge","bridge":"cloude2e0","isGateway":false,"ipMasq":false,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"198.19.242.0/24"}]],"dataDir":"{ipam}"}}]}
"#;

/// How long the tool may wait for a good node to be Ready after keadm exits: about
/// 10 s on an idle machine, and a 2-core machine shared with builds is slower.
pub(crate) const READY_TIMEOUT: &str = "240";

/// How long the node that cannot turn Ready is given: it registers within seconds, and
/// its Ready condition is False from the start.
const NOT_READY_TIMEOUT: &str = "45";

/// The mount points [`edge_node`] binds over that the machine lacks, made now and removed
/// when dropped.
pub(crate) fn mount_points() -> MadeMountPoints {
    MadeMountPoints(
        TMPFS_DIRS
            .iter()
            .chain(&KUBELET_DIRS)
            .map(PathBuf::from)
            .filter(|dir| !dir.exists())
            .collect(),
    )
}

/// Where keadm's upgrade puts the new edgecore, `<this>/<version>/edgecore`: it copies it
/// there out of the installation-package through a container's host-path mount, which
/// containerd resolves in its own mount namespace, not the node's.
pub(crate) const UPGRADE_DIR: &str = "/etc/kubeedge/upgrade";

/// The node's directory (in its /tmp) that both it and its containerd see at
/// [`UPGRADE_DIR`] ([`upgradable_edge_node`]).
const UPGRADE_DIR_ON_NODE: &str = "kubeedge-upgrade";

/// Sets `node` up as an edge node for a real join: an /etc of its own (keadm's reset
/// removes /etc/kubeedge, and the tool checks it is gone), keadm's other paths and the
/// kubelet's private to it, the stand-in systemctl, and a containerd whose CNI configs
/// are a bridge (`cni`) or none. The containerd is returned; it stops when dropped.
pub(crate) fn edge_node(node: &Node, cni: bool) -> Containerd {
    edge_node_sharing(node, cni, false)
}

/// As [`edge_node`] with a bridge, for keadm's upgrade too: its containerd sees the
/// node's /tmp/kubeedge-upgrade at [`UPGRADE_DIR`], where the node binds it once joined
/// ([`share_upgrade_dir`]), so the edgecore keadm copies out of the image is where keadm
/// looks for it.
pub(crate) fn upgradable_edge_node(node: &Node) -> Containerd {
    edge_node_sharing(node, true, true)
}

/// Binds the node's /tmp/kubeedge-upgrade at [`UPGRADE_DIR`] on `node`, as its
/// containerd has it ([`upgradable_edge_node`]). After the join only: keadm join and
/// reset want no /etc/kubeedge of anyone else's making, and a reset could not remove a
/// mount point.
pub(crate) fn share_upgrade_dir(node: &Node) {
    node.shell_ok(&format!(
        "mkdir -p {UPGRADE_DIR} && mount --bind /tmp/{UPGRADE_DIR_ON_NODE} {UPGRADE_DIR}"
    ));
}

fn edge_node_sharing(node: &Node, cni: bool, upgrade_dir: bool) -> Containerd {
    clean_etc(node);
    let usr_local_bin = usr_local_bin_with_systemctl(node);
    let binds: String = KUBELET_DIRS
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            format!("mkdir -p /tmp/kubelet-{i} {dir} && mount --bind /tmp/kubelet-{i} {dir}\n")
        })
        .collect();
    node.shell_ok(&format!(
        "set -e
         for d in {dirs}; do mkdir -p $d; mount -t tmpfs cloud-e2e $d; done
         mkdir /run/systemd/system
         mount --bind /tmp/usr-local-bin /usr/local/bin
         {binds}",
        dirs = TMPFS_DIRS.join(" ")
    ));
    let cni_dir = node.tmp_path("cni");
    fs::create_dir_all(&cni_dir).unwrap();
    if cni {
        let ipam = node.tmp_path("cni-ipam");
        fs::write(
            cni_dir.join("10-cloud-e2e.conflist"),
            CNI_BRIDGE.replace("{ipam}", &ipam.display().to_string()),
        )
        .unwrap();
    }
    let upgrades = node.tmp_path(UPGRADE_DIR_ON_NODE);
    let mut shared = vec![(usr_local_bin.as_path(), "/usr/local/bin")];
    if upgrade_dir {
        fs::create_dir_all(&upgrades).unwrap();
        shared.push((upgrades.as_path(), UPGRADE_DIR));
    }
    Containerd::start_with_cni(node, &shared, &cni_dir)
}

/// keadm join of `version` to the real cloud for fleet node `i` (`{name}` is its node
/// name), with the token cloudcore made; the kubelet's read-only port is the node's own.
pub(crate) fn join_cmd(cloud: &RealCloud, token: &str, i: usize, version: &str) -> String {
    let kubelet = "modules.edged.tailoredKubeletConfig";
    format!(
        "join --cloudcore-ipport=127.0.0.1:{hub} --certport={cert} --kubeedge-version={version} \
         --edgenode-name={{name}} --remote-runtime-endpoint={ENDPOINT} --cgroupdriver=cgroupfs \
         --token={token} \
         --set {kubelet}.readOnlyPort={ro}",
        hub = cloud.hub_port,
        cert = cloud.cert_port,
        ro = 10350 + 10 * i,
    )
}

/// Writes the offline directory into `dir/packages` (and makes `dir/staging`): the real
/// keadm in its release package, and the two images keadm join runs, the
/// installation-package carrying the real edgecore.
pub(crate) fn write_kit(dir: &Path, bins: &CloudBinaries) {
    let packages = dir.join("packages");
    fs::create_dir_all(dir.join("staging")).unwrap();
    write_keadm_package(&packages, &bins.release(), VERSION);
    write_join_images(&packages, &bins.release(), VERSION);
}

/// `release`'s keadm in its release package of `version`, in the offline directory
/// `packages` (packages of several versions live side by side there).
pub(crate) fn write_keadm_package(packages: &Path, release: &Release, version: &str) {
    FakeRelease::new(version, host_arch())
        .with_binary(&fs::read(release.keadm()).unwrap())
        .write_offline(packages, ChecksumFile::Matching);
}

/// The two images keadm join of `version` runs, in the offline directory `packages`: the
/// installation-package carrying `release`'s edgecore, and the sandbox image.
pub(crate) fn write_join_images(packages: &Path, release: &Release, version: &str) {
    let images = packages.join(host_arch()).join("images");
    installation_package(
        &images.join(format!("installation-package_{version}.tar")),
        release,
        version,
    );
    oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
}

/// Writes `kubeedge/installation-package:<version>` carrying `release`'s edgecore (where
/// keadm copies it from) as a `docker save` archive at `path`.
pub(crate) fn installation_package(path: &Path, release: &Release, version: &str) {
    docker_archive_carrying(
        path,
        &format!("kubeedge/installation-package:{version}"),
        &fs::read(release.edgecore()).unwrap(),
    );
}

/// A run over fleet nodes `nodes` only, with the offline directory and the staging
/// directory of `kit` ([`write_kit`]'s), under `--preflight strict`: a config of their
/// own for each run (rather than `--only`), so each run's summary and transcripts number
/// just its nodes. One staging directory serves every run: keadm is staged, and its xz
/// copy made (in a process that outlives the run), once.
pub(crate) fn scenario<'f>(fleet: &'f Fleet, nodes: &[usize], kit: &Path) -> Scenario<'f> {
    let sc = Scenario::new(fleet)
        .arch_group(&format!("[{}]", host_arch()))
        .node_yaml("timeoutSeconds: 600")
        .preflight("strict")
        .max_run_num(3)
        .only_nodes(nodes)
        .staging_in(&kit.join("staging"));
    std::os::unix::fs::symlink(kit.join("packages"), sc.path("packages")).unwrap();
    sc
}

/// [`scenario`] joining `nodes` to `cloud` with keadm of `version` (the config's
/// `keadmVersion` and the join's `--kubeedge-version`).
pub(crate) fn joins<'f>(
    fleet: &'f Fleet,
    nodes: &[usize],
    kit: &Path,
    cloud: &RealCloud,
    token: &str,
    version: &str,
) -> Scenario<'f> {
    let mut sc = scenario(fleet, nodes, kit).keadm_version(version);
    for &i in nodes {
        sc = sc.cmd_for(i, &join_cmd(cloud, token, i, version));
    }
    sc
}

/// Seconds in `node`'s `cluster` object under `key`, which must be a number.
pub(crate) fn seconds(node: &serde_json::Value, key: &str) -> f64 {
    node["cluster"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("summary.json has no cluster.{key} number: {node}"))
}

/// The last lines of fleet node `i`'s transcript, for failure messages and the log.
pub(crate) fn tail(out: &Output, i: usize) -> String {
    let text = match out.transcript_if_any(i) {
        Ok(text) => text,
        Err((path, e)) => return format!("(no transcript: {}: {e})", path.display()),
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The tests that need binaries no test ships are ignored, so the totals count them as
/// not run: a test that passed by skipping itself read as a pass.
#[test]
fn the_tests_that_need_real_binaries_are_ignored_unless_asked_for() {
    let listed = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--ignored", "--format", "terse"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for test in [
        "cloud_e2e::a_real_cloud_sees_every_joined_node_ready_and_none_after_a_reset_with_delete_nodes",
        "cloud_upgrade_e2e::a_real_keadm_upgrades_a_real_edgecore_with_a_backup_and_rolls_back_a_failed_pull",
        "keadm_e2e::a_real_keadm_joins_with_images_only_from_the_offline_directory",
        "cloud_capacity_e2e::a_real_cloud_at_its_node_limit_is_found_before_any_node_and_names_the_refused_node",
        "cloud_capacity_e2e::three_joins_at_once_and_one_at_a_time_on_a_real_cloudcore",
    ] {
        assert!(
            listed.contains(&format!("{test}: test")),
            "{test} is not ignored:\n{listed}"
        );
    }
}

#[test]
#[ignore = "needs a real KubeEdge cloud's binaries: run with --ignored and KECLOUD_BIN, KECLOUD_CRDS set (README, Tests)"]
fn a_real_cloud_sees_every_joined_node_ready_and_none_after_a_reset_with_delete_nodes() {
    let bins = CloudBinaries::from_env().expect(
        "KECLOUD_BIN is not set. Point it at real etcd, kube-apiserver, kubectl, cloudcore, keadm and edgecore binaries (and KECLOUD_CRDS at KubeEdge's build/crds) to run joins against a real cluster.",
    );
    let version = keadm_version(&bins.path("keadm"));
    assert_eq!(
        version, VERSION,
        "KECLOUD_BIN's keadm is {version}; this test's kit and config name {VERSION}."
    );
    let cloud = RealCloud::start(&bins);
    let token = cloud.token();
    let kubeconfig = cloud.kubeconfig.display().to_string();

    let fleet = Fleet::builder().nodes(3).start();
    let _made = mount_points();
    let runtimes: Vec<Containerd> = (0..3).map(|i| edge_node(fleet.node(i), i < 2)).collect();
    let kit = tempfile::Builder::new()
        .prefix("cloud-e2e-kit-")
        .tempdir_in("/var/tmp")
        .unwrap();
    write_kit(kit.path(), &bins);

    // 1. Two good nodes: joined, registered and Ready, seen by the tool and by the API server.
    let good = joins(&fleet, &[0, 1], kit.path(), &cloud, &token, VERSION);
    let out = good.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        READY_TIMEOUT,
    ]);
    assert_eq!(
        out.code(),
        0,
        "the join of the two good nodes failed:\n{}\n{}\ncloudcore:\n{}",
        out.stdout,
        out.stderr,
        cloud.log("cloudcore")
    );
    for i in 0..2 {
        eprintln!("cloud_e2e: edge-0{i}'s transcript ends:\n{}", tail(&out, i));
    }
    // The recap (on stderr): each node's line with its time to Ready, then the totals.
    eprintln!("cloud_e2e: the good nodes' run:\n{}", out.stderr);
    for i in 0..2 {
        let name = Scenario::name(i);
        let summary = out.node_summary(i);
        assert_eq!(summary["phase"], "succeeded", "{summary}");
        let registered = seconds(&summary, "registered_after");
        let ready = seconds(&summary, "ready_after");
        assert!(
            (0.0..=ready).contains(&registered),
            "{name}: registered after {registered} s, Ready after {ready} s"
        );
        let node = cloud
            .node(&name)
            .unwrap_or_else(|| panic!("the API server has no Node {name}"));
        let (status, reason, message) = ready_condition(&node).expect("a Ready condition");
        assert_eq!(status, "True", "{name}: {reason}: {message}");
        // Their images are in containerd: no archive is left in the upload dir.
        assert_eq!(
            archives_left(fleet.node(i)),
            Vec::<String>::new(),
            "{name}: {}",
            out.transcript(i)
        );
        assert_eq!(
            summary["cluster"]["version"], node["status"]["nodeInfo"]["kubeletVersion"],
            "{summary}"
        );
        eprintln!(
            "cloud_e2e: {name} Ready ({reason}: {message}), registered {registered:.1} s and Ready {ready:.1} s after keadm exited"
        );
    }

    // 2. The node whose runtime has no CNI config registers and stays NotReady: not_ready,
    //    with the message the Node itself carries.
    let bad = joins(&fleet, &[2], kit.path(), &cloud, &token, VERSION);
    let out = bad.run(&[
        "--kubeconfig",
        &kubeconfig,
        "--ready-timeout",
        NOT_READY_TIMEOUT,
    ]);
    out.status(1);
    let summary = out.node_summary(2);
    assert_eq!(summary["phase"], "failed", "{summary}");
    assert_eq!(summary["failure_class"], "not_ready", "{summary}");
    let node = cloud.node("edge-02").expect("edge-02 registered");
    let (status, reason, message) = ready_condition(&node).expect("a Ready condition");
    assert_ne!(status, "True", "{reason}: {message}");
    assert!(
        message.contains("cni plugin not initialized"),
        "edge-02's Ready condition: {status} {reason}: {message}"
    );
    let condition = summary["cluster"]["condition"].as_str().unwrap_or_default();
    assert!(
        condition.contains(&reason) && condition.contains(&message),
        "summary.json's cluster.condition is not the Node's ({reason}: {message}):\n{summary}"
    );
    assert!(
        out.stdout.contains(&message) || out.stderr.contains(&message),
        "the recap lacks the Node's message {message:?}:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    seconds(&summary, "registered_after");
    eprintln!("cloud_e2e: edge-02 not_ready: {reason}: {message}");

    // 3. A node that cannot reach cloudcore's ports (a site LAN: the control host's
    //    loopback is not routed there) is stopped by pre-flight, untouched, unregistered.
    let lan = Fleet::builder().nodes(1).site_lans(&[0]).start();
    let _lan_runtime = edge_node(lan.node(0), true);
    let blocked = joins(&lan, &[0], kit.path(), &cloud, &token, VERSION);
    // Its own name: edge-00 is a Node already (pre-flight would say name_taken too).
    fs::write(
        blocked.path("config.yaml"),
        blocked.config_text().replace("edge-00", "edge-lan"),
    )
    .unwrap();
    let out = blocked.run(&["--kubeconfig", &kubeconfig]);
    out.status(1);
    let summary = out.summary()["nodes"][0].clone();
    assert_eq!(summary["name"], "edge-lan", "{summary}");
    assert_eq!(summary["phase"], "skipped", "{summary}");
    let findings: Vec<String> = summary["preflight"]
        .as_array()
        .unwrap_or_else(|| panic!("no pre-flight findings: {summary}"))
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                f["id"].as_str().unwrap(),
                f["detail"].as_str().unwrap()
            )
        })
        .collect();
    let mut expected: Vec<String> = [cloud.hub_port, cloud.cert_port]
        .iter()
        .map(|port| format!("cloudcore_unreachable_from_node 127.0.0.1:{port}"))
        .collect();
    expected.sort();
    let mut found: Vec<String> = findings
        .iter()
        .map(|f| f.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    found.sort();
    assert_eq!(found, expected, "{findings:?}");
    assert!(
        !lan.node(0).tmp_path("kubeedge").exists(),
        "the node pre-flight stopped was touched"
    );
    assert_eq!(
        cloud.nodes().len(),
        3,
        "only the three joined nodes are Nodes"
    );

    // 4. keadm reset of the three with --delete-nodes: no Node object, no edgecore.
    let reset = scenario(&fleet, &[0, 1, 2], kit.path()).cmd("reset edge --force");
    let out = reset.run(&["--kubeconfig", &kubeconfig, "--delete-nodes"]);
    assert_eq!(out.code(), 0, "{}\n{}", out.stdout, out.stderr);
    let left: Vec<String> = cloud
        .nodes()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(left.is_empty(), "Nodes left after the reset: {left:?}");
    for i in 0..3 {
        let edgecore = fleet.node(i).shell("pgrep -x edgecore");
        assert!(
            !edgecore.status.success(),
            "edge-0{i} still runs edgecore after the reset: {}",
            String::from_utf8_lossy(&edgecore.stdout)
        );
    }
    drop(runtimes);
}
