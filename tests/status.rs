//! Issue 30, `batch status`: each node of the config asked over SSH, read-only, whether
//! edgecore runs and which versions of edgecore and keadm it has, beside the node's
//! outcome in the latest run; a table, or one JSON document. A fleet of three real sshd
//! nodes: one with a fake edgecore running and both versions, one with neither, one
//! unreachable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::edge_state::{clean_etc, private_etc, start_edgecore};
use crate::common::fake_keadm::FakeKeadm;
use crate::common::fleet::{Fleet, Sudo, TEST_USER, TEST_USER_PASSWORD, Tarpit, refused_endpoint};
use crate::common::http_server::self_signed;
use crate::common::scenario::{Login, Scenario, remote_keadm};
use crate::common::test::{Output, Test};

/// Every file under `dir` with its mode, size, mtime and contents: a node's /tmp, where
/// a run (and anything keadm-batch might write) lands.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, u64, i64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let contents = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                todo.push(path.clone());
            }
            files.insert(path, (meta.mode(), meta.size(), meta.mtime(), contents));
        }
    }
    files
}

/// `batch status` against the scenario's config, in its directory.
fn status(sc: &Scenario, extra: &[&str]) -> Output {
    Test::in_dir(sc.dir.path())
        .env("HOME", sc.dir.path())
        .args(["batch", "status", "-c", "config.yaml", "--known-hosts"])
        .arg(sc.fleet.known_hosts())
        .args(extra)
        .run()
}

/// The pid of the node's process named edgecore.
fn edgecore_pid(fleet: &Fleet, i: usize) -> u32 {
    let out = fleet.node(i).shell(
        "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = edgecore ] && echo ${p#/proc/}; done",
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn status_shows_each_node_read_only_as_a_table_and_as_json() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet)
        .keadm(FakeKeadm::new().prints("joined"))
        .endpoint_for(2, refused_endpoint())
        .node_yaml_for(2, "retries: 0");
    // A run first: its journal is what the LAST RUN column reads.
    sc.run(&[]).status(1);

    // Node 0: a keadm that tells its version where the run put it, edgecore installed
    // where keadm installs it (/usr/local/bin, the node's own) and running.
    let keadm = remote_keadm(fleet.node(0));
    std::fs::write(
        &keadm,
        "#!/bin/sh\necho 'version: version.Info{Major:\"1\", Minor:\"23\", GitVersion:\"v1.23.1\", GitCommit:\"0123abc\"}'\n",
    )
    .unwrap();
    fleet.node(0).shell_ok(
        "set -e\n\
         mkdir -p /tmp/usr-local-bin\n\
         printf '#!/bin/sh\\ntouch /tmp/edgecore-ran\\n' > /tmp/usr-local-bin/edgecore\n\
         chmod 755 /tmp/usr-local-bin/edgecore\n\
         mount --bind /tmp/usr-local-bin /usr/local/bin\n",
    );
    start_edgecore(fleet.node(0));
    let pid = edgecore_pid(&fleet, 0);
    // The version it logged as it started, as edgecore v1.23 does (in a /var/log of the
    // node's own): edgecore has no --version, so status never runs it.
    fleet.node(0).shell_ok(&format!(
        "mkdir -p /tmp/var-log/kubeedge && mount --bind /tmp/var-log /var/log\n\
         echo 'I1202 10:00:00.000000    {pid} server.go:107] Version: v1.23.1' > /var/log/kubeedge/edgecore.log"
    ));
    // Node 1: no keadm (the run's is gone), no edgecore.
    std::fs::remove_file(remote_keadm(fleet.node(1))).unwrap();

    let before: Vec<_> = (0..2)
        .map(|i| snapshot(&fleet.node(i).tmp_path("")))
        .collect();
    let runs_before = snapshot(&sc.path("batch_runs"));

    let out = status(&sc, &[]);
    out.status(1)
        .stderr_has("1 of 3 nodes did not answer; the lines below the table say why. Nothing was changed on any node.");
    eprintln!("batch status:\n{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let cells = |line: &str| -> Vec<String> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect()
    };
    assert_eq!(
        cells(lines[0]),
        [
            "NODE",
            "ADDRESS",
            "SSH",
            "EDGECORE",
            "EDGECORE VERSION",
            "KEADM",
            "CERT EXPIRES",
            "LAST RUN",
            "CLUSTER"
        ]
    );
    let address = |i: usize| format!("{}:{}", fleet.node(i).host(), fleet.node(i).port());
    assert_eq!(
        cells(lines[1]),
        [
            "edge-00".to_string(),
            address(0),
            "ok".into(),
            format!("running (pid {pid})"),
            "v1.23.1".into(),
            "v1.23.1".into(),
            "-".into(),
            "succeeded".into(),
            "-".into()
        ]
    );
    assert_eq!(
        cells(lines[2]),
        [
            "edge-01",
            &address(1),
            "ok",
            "not running",
            "-",
            "-",
            "-",
            "succeeded",
            "-"
        ]
    );
    let row2 = cells(lines[3]);
    assert_eq!(row2[0], "edge-02");
    assert_eq!(
        row2[2..],
        [
            "unreachable",
            "-",
            "-",
            "-",
            "-",
            "failed (unreachable)",
            "-"
        ]
    );
    let why = lines
        .iter()
        .find(|l| l.starts_with("edge-02: "))
        .unwrap_or_else(|| panic!("no line says why edge-02 did not answer:\n{}", out.stdout));
    assert!(why.contains("refused"), "{why}");
    assert!(
        out.stdout.contains("\nLast run: batch_runs/"),
        "{}",
        out.stdout
    );

    let out = status(&sc, &["--output", "json"]);
    out.status(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.stdout));
    assert_eq!(json["version"], 1);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let n0 = &nodes[0];
    assert_eq!(n0["name"], "edge-00");
    assert_eq!(n0["address"], address(0).as_str());
    assert_eq!(n0["ssh"], "answered");
    assert_eq!(n0["error"], serde_json::Value::Null);
    assert_eq!(n0["edgecore_running"], true);
    assert_eq!(n0["edgecore_pids"], serde_json::json!([pid]));
    assert_eq!(n0["edgecore_path"], "/usr/local/bin/edgecore");
    assert_eq!(n0["edgecore_version"], "v1.23.1");
    assert!(
        !fleet.node(0).tmp_path("edgecore-ran").exists(),
        "batch status ran edgecore"
    );
    assert_eq!(n0["keadm_version"], "v1.23.1");
    assert_eq!(n0["last_run"]["phase"], "succeeded");
    assert_eq!(n0["cluster"], serde_json::Value::Null);
    let n1 = &nodes[1];
    assert_eq!(n1["edgecore_running"], false);
    assert_eq!(n1["edgecore_pids"], serde_json::json!([]));
    assert_eq!(n1["edgecore_version"], serde_json::Value::Null);
    assert_eq!(n1["keadm_version"], serde_json::Value::Null);
    let n2 = &nodes[2];
    assert_eq!(n2["ssh"], "unreachable");
    assert!(n2["error"].as_str().unwrap().contains("refused"), "{n2}");
    assert_eq!(n2["edgecore_running"], serde_json::Value::Null);
    assert_eq!(n2["last_run"]["phase"], "failed");
    assert_eq!(n2["last_run"]["failure_class"], "unreachable");
    // Every node carries every field.
    let keys = |n: &serde_json::Value| {
        let mut k: Vec<String> = n.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(n0), keys(n2));
    crate::docs::documented_fields("docs/summary.md", "status-json", &json);

    // Nothing changed on the nodes, and no run directory was written here.
    for (i, before) in before.iter().enumerate() {
        assert_eq!(
            &snapshot(&fleet.node(i).tmp_path("")),
            before,
            "node {i}'s files changed"
        );
    }
    assert_eq!(snapshot(&sc.path("batch_runs")), runs_before);
    assert_eq!(edgecore_pid(&fleet, 0), pid);

    // --only as a run reads it: the reachable nodes alone answer, so exit 0.
    let out = status(&sc, &["--only", "edge-0[01]"]);
    out.status(0);
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("edge-"))
            .count(),
        2
    );
}

/// A host key that is not the one known is refused, as a run refuses it: the node does
/// not answer, and the known key is not replaced.
#[test]
fn status_checks_host_keys_as_a_run_does() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet);
    std::fs::write(sc.path("config.yaml"), sc.config_text()).unwrap();
    // The node's name in the known-hosts file with another key: a changed host key.
    let other = sc.path("other_key");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap();
    assert!(made.success());
    let line = fleet.node(0).known_hosts_line();
    let name = line.split(' ').next().unwrap();
    let key = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let known = format!("{name} {}", key.trim());
    std::fs::write(fleet.known_hosts(), format!("{known}\n")).unwrap();
    let out = status(&sc, &["--output", "json"]);
    out.status(1);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["ssh"], "unreachable");
    let error = node["error"].as_str().unwrap();
    assert!(error.contains("host key"), "{error}");
    assert_eq!(
        std::fs::read_to_string(fleet.known_hosts()).unwrap(),
        format!("{known}\n")
    );
    // With the node's own key known, it answers.
    std::fs::write(fleet.known_hosts(), line).unwrap();
    status(&sc, &[]).status(0);
}

/// The first Ctrl-C stops further nodes, as it stops a run: the node being asked
/// finishes (here, at its connect deadline), the rest are not asked, and the exit is 130
/// after the table.
#[test]
fn ctrl_c_stops_asking_further_nodes() {
    let fleet = Fleet::builder().nodes(3).start();
    let tarpit = Tarpit::start();
    let sc = Scenario::new(&fleet)
        .max_run_num(1)
        .endpoint_for(0, tarpit.endpoint())
        .node_yaml_for(0, "  connectTimeoutSeconds: 3")
        .node_yaml_for(0, "retries: 0");
    std::fs::write(sc.path("config.yaml"), sc.config_text()).unwrap();
    let running = Test::in_dir(sc.dir.path())
        .env("HOME", sc.dir.path())
        .args(["batch", "status", "-c", "config.yaml", "--known-hosts"])
        .arg(fleet.known_hosts())
        .spawn();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    running.interrupt();
    let out = running.wait();
    out.status(130).stderr_has(
        "batch status was interrupted: 1 of 3 nodes were asked, and the table marks the rest as not asked.",
    );
    // The table's rows: the lines after its header, up to the blank line.
    let rows: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 3, "{}", out.stdout);
    assert!(rows[0].contains("unreachable"), "{}", out.stdout);
    for row in &rows[1..] {
        assert!(row.contains("not asked"), "{}", out.stdout);
    }
}

/// A non-root login asks under sudo, as its run's keadm ran, with the login password on
/// stdin only: the keadm in the root-owned upload dir, which the login user cannot read,
/// tells its version.
#[test]
fn a_sudo_node_is_asked_under_sudo() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let sc = Scenario::new(&fleet).login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()));
    sc.run(&[]).status(0);
    std::fs::write(
        remote_keadm(fleet.node(0)),
        "#!/bin/sh\necho 'version: version.Info{Major:\"1\", GitVersion:\"v1.23.1\"}'\n",
    )
    .unwrap();
    // The login user cannot run it itself.
    let own = fleet.node(0).shell(&format!(
        "su -s /bin/sh {TEST_USER} -c 'test -x /tmp/kubeedge/keadm/keadm'"
    ));
    assert!(
        !own.status.success(),
        "the test user reaches root's upload dir"
    );
    let out = status(&sc, &["--output", "json"]);
    out.status(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["nodes"][0]["ssh"], "answered");
    assert_eq!(json["nodes"][0]["keadm_version"], "v1.23.1");
    assert!(!out.stdout.contains(TEST_USER_PASSWORD) && !out.stderr.contains(TEST_USER_PASSWORD));
}

/// A self-signed certificate made by the openssl CLI, valid for `days` from now, in PEM.
fn certificate(dir: &Path, days: u32) -> String {
    let (key, cert) = (
        dir.join(format!("key-{days}.pem")),
        dir.join(format!("cert-{days}.pem")),
    );
    self_signed(&key, &cert, "127.0.0.1", days);
    std::fs::read_to_string(cert).unwrap()
}

/// Issue 45: each node's edge certificate (where keadm join has edgecore keep it),
/// read on the node without changing it, its notAfter read here; a warning for the one
/// that expires within --cert-warn-days (default 30), none for the one a year away, and
/// no certificate on a node that never joined.
#[test]
fn status_shows_each_edge_certificates_expiry_and_warns_before_it() {
    let fleet = Fleet::builder().nodes(3).start();
    let sc = Scenario::new(&fleet);
    std::fs::write(sc.path("config.yaml"), sc.config_text()).unwrap();
    for (i, days) in [(0, 10), (1, 400)] {
        let pem = certificate(sc.dir.path(), days);
        std::fs::write(fleet.node(i).tmp_path("server.crt"), pem).unwrap();
        private_etc(
            fleet.node(i),
            "mkdir -p /etc/kubeedge/certs && cp /tmp/server.crt /etc/kubeedge/certs/server.crt",
        );
    }
    clean_etc(fleet.node(2));
    let stat = |i: usize| {
        fleet
            .node(i)
            .shell("stat -c '%Y %s %a' /etc/kubeedge/certs/server.crt")
            .stdout
    };
    let before = (stat(0), stat(1));

    let out = status(&sc, &["--output", "json"]);
    out.status(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let nodes = json["nodes"].as_array().unwrap();
    let soon = &nodes[0]["edge_cert"];
    assert_eq!(soon["path"], "/etc/kubeedge/certs/server.crt");
    let days = soon["days_left"].as_i64().unwrap();
    assert!(days == 9 || days == 10, "{soon}");
    assert_eq!(soon["expiring"], true);
    assert_eq!(soon["error"], serde_json::Value::Null);
    let later = &nodes[1]["edge_cert"];
    let days = later["days_left"].as_i64().unwrap();
    assert!(days == 399 || days == 400, "{later}");
    assert_eq!(later["expiring"], false);
    assert_eq!(nodes[2]["edge_cert"], serde_json::Value::Null);
    crate::docs::documented_fields("docs/summary.md", "status-json", &json);
    out.stderr_has("edge-00: its edge certificate /etc/kubeedge/certs/server.crt expires in ")
        .stderr_has("within --cert-warn-days 30. KubeEdge renews it only while the node is connected to cloudcore, and a node still offline when it expires cannot reconnect")
        .stderr_lacks("edge-01: its edge certificate")
        .stderr_lacks("edge-02: its edge certificate");

    // The table: the day each expires, the one within the threshold marked.
    let out = status(&sc, &[]);
    out.status(0);
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{}", out.stdout))
            .to_string()
    };
    let day = |days: u64| {
        let at = std::time::SystemTime::now() + std::time::Duration::from_secs(days * 86_400);
        humantime::format_rfc3339_seconds(at).to_string()[..10].to_string()
    };
    assert!(
        row("edge-00").contains(&format!("{} (", day(10))),
        "{}",
        out.stdout
    );
    assert!(row("edge-00").contains("d) !"), "{}", out.stdout);
    assert!(
        row("edge-01").contains(&format!("{} (", day(400))),
        "{}",
        out.stdout
    );
    assert!(!row("edge-01").contains('!'), "{}", out.stdout);

    // A lower threshold: no warning.
    status(&sc, &["--cert-warn-days", "5"])
        .status(0)
        .stderr_lacks("its edge certificate");
    assert_eq!((stat(0), stat(1)), before, "the certificates were touched");
}
