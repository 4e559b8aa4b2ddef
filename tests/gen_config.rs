//! Issue 45, `batch gen-config --from FILE`: a config written from a CSV file or an
//! Ansible inventory (INI or YAML), each node under a comment naming its source line,
//! that a dry run reads as it is (once the template's REQUIRED token is filled in); and a
//! row that cannot become a node refused at its line, with nothing written.

use std::fmt::Write as _;
use std::path::Path;

use crate::common::test::{Output, Test};

/// A join token that expires in 2100, as the gen-config template test fills it in.
const TOKEN: &str = "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07.eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjQxMDI0NDQ4MDB9.bm90LWEtcmVhbC1zaWduYXR1cmU";

/// A scratch directory with `name` holding `text` and a private key `id_edge`.
fn dir_with(name: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(name), text).unwrap();
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(dir.path().join("id_edge"))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::create_dir(dir.path().join("home")).unwrap();
    dir
}

fn keadm_batch(dir: &Path, args: &[&str]) -> Output {
    Test::in_dir(dir)
        .env("HOME", dir.join("home"))
        .args(args)
        .run()
}

/// Writes the config from `source`, fills in the token, dry-runs it, and returns the
/// config's text and the dry run.
fn generate_and_dry_run(dir: &Path, source: &str, extra: &[&str]) -> (String, Output) {
    let mut args = vec!["batch", "gen-config", "--from", source, "-o", "config.yaml"];
    args.extend_from_slice(extra);
    let out = keadm_batch(dir, &args);
    out.status(0);
    let text = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    let filled = text.replacen("token: \"\"", &format!("token: {TOKEN}"), 1);
    std::fs::write(dir.join("config.yaml"), filled).unwrap();
    let dry = keadm_batch(dir, &["batch", "-c", "config.yaml", "--dry-run"]);
    (text, dry)
}

/// The names of the nodes a dry run lists (its `node N NAME` lines).
fn planned(dry: &Output) -> Vec<String> {
    dry.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("node "))
        .filter_map(|l| l.split_once(' ').map(|(_, name)| name.to_string()))
        .collect()
}

#[test]
fn a_thousand_host_ini_inventory_becomes_a_config_whose_dry_run_lists_them() {
    // 500 hosts from two range patterns in groups under a parent, 500 on lines of their
    // own with their variables, and group variables at every level.
    let mut inv = String::from(
        "[all:vars]\nansible_ssh_private_key_file=./id_edge\n\n\
         [berlin]\ncam[001:250].berlin ansible_host=192.0.2.1\n\n\
         [munich]\ncam[001:250].munich ansible_become=true\n\n\
         [germany:children]\nberlin\nmunich\n\n[germany:vars]\nansible_user=edge\narch=aarch64\n\n\
         [stores]\n",
    );
    for i in 0..500 {
        let _ = writeln!(
            inv,
            "store-{i:03} ansible_host=10.1.{}.{} ansible_port=2222 labels=\"zone=eu,tier=store\"",
            i / 250,
            i % 250 + 1
        );
    }
    let dir = dir_with("inventory", &inv);
    let (text, dry) = generate_and_dry_run(dir.path(), "inventory", &[]);
    dry.status(0);
    let names = planned(&dry);
    assert_eq!(names.len(), 1000, "{}", dry.stdout);
    assert_eq!(names[0], "cam001.berlin");
    assert_eq!(names[999], "store-499");
    assert!(
        dry.stdout.contains("1000 of 1000 selected"),
        "{}",
        dry.stdout
    );
    // Each node under its source line; groups as sites, variables resolved.
    assert!(
        text.contains(
            "  # inventory:5\n  - nodeName: cam002.berlin\n    keadmCmd: join --cloudcore-ipport={{.cloudcore}} --kubeedge-version={{.version}} --edgenode-name=cam002.berlin --token={{.token}}\n    site: berlin\n    ssh:\n      ip: 192.0.2.1\n      port: 22\n      username: edge\n      auth:\n        type: privateKey\n        privateKeyAuth:\n          privateKeyPath: ./id_edge\n"
        ),
        "{}",
        &text[..3000]
    );
    assert!(
        text.contains("  # inventory:20\n  - nodeName: store-001\n"),
        "{text}"
    );
    assert!(text.contains("    labels:\n      tier: \"store\"\n      zone: \"eu\"\n"));
    assert!(text.contains("      sudo: true\n"));
    assert!(
        text.contains("  archGroup:\n    - arm64\n  #"),
        "the arches the nodes name"
    );
}

#[test]
fn a_thousand_row_csv_becomes_a_config_whose_dry_run_lists_them() {
    let mut csv = String::from("Node Name,IP,SSH Port,User,Key File,Arch,Site,Labels\n");
    for i in 0..1000 {
        let _ = writeln!(
            csv,
            "edge-{i:04},10.2.{}.{},22,root,./id_edge,amd64,store-{:02},\"zone=eu,rack=r{}\"",
            i / 250,
            i % 250 + 1,
            i / 100,
            i % 4
        );
    }
    let dir = dir_with("fleet.csv", &csv);
    let (text, dry) = generate_and_dry_run(dir.path(), "fleet.csv", &[]);
    dry.status(0);
    assert_eq!(planned(&dry).len(), 1000, "{}", dry.stdout);
    assert!(
        dry.stdout.contains("1000 of 1000 selected"),
        "{}",
        dry.stdout
    );
    assert!(text.contains("  # fleet.csv:1001\n  - nodeName: edge-0999\n"));
    assert!(
        text.contains("    site: store-09\n    labels:\n      rack: \"r3\"\n      zone: \"eu\"\n")
    );
}

#[test]
fn a_yaml_inventory_with_groups_as_labels() {
    let inv = "\
all:
  vars:
    ansible_ssh_private_key_file: ./id_edge
  children:
    europe:
      children:
        berlin:
          hosts:
            b[1:3]:
              ansible_host: 192.0.2.7
";
    let dir = dir_with("hosts.yml", inv);
    let (text, dry) = generate_and_dry_run(dir.path(), "hosts.yml", &["--groups", "labels"]);
    dry.status(0);
    assert_eq!(planned(&dry), ["b1", "b2", "b3"]);
    assert!(
        text.contains("  # hosts.yml:9\n  - nodeName: b2\n")
            && text.contains("    labels:\n      berlin: \"true\"\n      europe: \"true\"\n"),
        "{text}"
    );
    assert!(!text.contains("site:"), "{text}");
}

#[test]
fn a_bad_row_is_an_error_at_its_line_and_nothing_is_written() {
    let csv = "name,address,port\nedge-1,10.0.0.1,22\nedge-2,10.0.0.2,70000\nEdge_3,10.0.0.3,22\nedge-1,10.0.0.4,22\n";
    let dir = dir_with("fleet.csv", csv);
    let out = keadm_batch(dir.path(), &["batch", "gen-config", "--from", "fleet.csv"]);
    out.status(2);
    assert_eq!(
        out.stderr
            .lines()
            .filter_map(|l| l.strip_prefix("keadm-batch: error: "))
            .collect::<Vec<_>>(),
        [
            "fleet.csv:3:1: row 2: the port `70000` is not a port; write the node's SSH port as a number from 1 to 65535, or leave it out for 22.",
            "fleet.csv:4:1: row 3: the name `Edge_3` cannot be a Kubernetes Node name: it has uppercase letters; use a name of lowercase letters, digits, '-' and '.', at most 253 characters, in dot-separated parts of at most 63 that start and end with a letter or digit, such as `edge-3`.",
            "fleet.csv:5:1: row 4: the name `edge-1` is already the name of the node on line 2; give every node its own name: results and the cluster's Nodes are keyed by it.",
            "fleet.csv has 3 problems; no config was written.",
        ],
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("config.yaml").exists());

    // An INI line, with an existing output: it is left as it was.
    let dir = dir_with(
        "hosts.ini",
        "[web]\nw1 ansible_host=10.0.0.1\nw2 ansible_port\n",
    );
    std::fs::write(dir.path().join("config.yaml"), "precious").unwrap();
    let out = keadm_batch(
        dir.path(),
        &["batch", "gen-config", "--from", "hosts.ini", "--force"],
    );
    out.status(2).stderr_has(
        "hosts.ini:3:1: `ansible_port` after the host is not key=value; write each host variable as key=value, such as ansible_host=10.0.0.1, and quote a value with spaces.\nkeadm-batch: error: hosts.ini has 1 problem; no config was written.",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("config.yaml")).unwrap(),
        "precious"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
