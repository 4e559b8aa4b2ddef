//! Image archive names (security review, finding 2): whoever fills `keadm.offlineImages`,
//! puts archives in an offline directory or writes a kit chooses their file names, and a
//! name once became the upload name on the node and a relay's forced command in
//! `authorized_keys`. Names outside the accepted set are refused before any node is
//! touched, shown escaped; every archive reaches a node under a name the tool makes from
//! its sha256; and the dry run shows every archive path escaped.

use std::fs;
use std::path::Path;

use crate::common::containerd::{Containerd, ENDPOINT, SANDBOX_IMAGE};
use crate::common::fleet::{Fleet, Node};
use crate::common::image_archive::{docker_archive, host_arch, oci_archive, upload_name};
use crate::common::scenario::Scenario;
use crate::common::test::{Output, Test};
use crate::relay::no_node_serves;

const PACKAGE: &str = "docker.io/kubeedge/installation-package:v1.23.1";

/// A join of `{name}` through the node's own containerd.
fn join() -> String {
    format!(
        "join --cloudcore-ipport=127.0.0.1:10000 --edgenode-name={{name}} --token=abc.def --remote-runtime-endpoint={ENDPOINT}"
    )
}

/// Asserts that `node` was not touched: its sshd accepted no login, and nothing of
/// keadm-batch is in its /tmp.
fn untouched(node: &Node, context: &str) {
    let log = node.log();
    assert!(
        !log.contains("Accepted "),
        "{context}: the node saw a login:\n{log}"
    );
    assert!(
        !node.tmp_path("kubeedge").exists(),
        "{context}: the node has an upload directory"
    );
}

/// The files in the node's upload directory.
fn uploaded(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(node.tmp_path("kubeedge/keadm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Asserts that `out` ended with `code` before any node, naming the archive `file` (the
/// path as shown, escaped) and the name to rename it to.
fn refused(out: &Output, code: i32, shown: &str, instead: &str, context: &str) {
    assert_eq!(out.code(), code, "{context}: {}", out.stderr);
    assert_eq!(out.stdout, "", "{context}: no plan");
    out.stderr_has(shown)
        .stderr_has(&format!("(to `{instead}`, say)"))
        .stderr_has("ASCII letters, digits, `.`, `_`, `+` and `-` only");
}

/// An archive in the offline directory whose name holds a newline, or a `"`, is refused
/// by the dry run and by the run with exit 3 (staging) before any node is touched, its
/// name shown escaped; listed by name in keadm.offlineImages, it is a config error at its
/// line (exit 2).
#[test]
fn an_archive_named_outside_the_set_is_refused_before_any_node_and_shown_escaped() {
    let fleet = Fleet::builder().nodes(1).start();
    let cases = [
        ("a\nb.tar", "a\\nb.tar", "holds `\\n`", "a_b.tar"),
        ("a\"b.tar", "a\"b.tar", "holds `\"`", "a_b.tar"),
    ];
    for (name, shown, problem, instead) in cases {
        let sc = Scenario::new(&fleet).cmd(&join());
        let images = sc.images_dir();
        oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
        docker_archive(&images.join(name), "kubeedge/installation-package:v1.23.1");
        let message = format!(
            "The image archive `{}/{shown}` was not used: its file name `{shown}` {problem}",
            images.display()
        );
        for extra in [&["--dry-run"][..], &[]] {
            let out = sc.run(extra);
            let context = format!("{name:?} {extra:?}");
            refused(&out, 3, &message, instead, &context);
            eprintln!("{context}: {}", out.stderr.trim());
            out.stderr_has("No node was touched.");
            assert!(
                name == shown || !out.stderr.contains(name),
                "{context}: shown raw"
            );
            untouched(fleet.node(0), &context);
        }

        // Named in keadm.offlineImages: the config's own error, at its line.
        let listed = Scenario::new(&fleet)
            .cmd(&join())
            .keadm_yaml("offlineImages:")
            .keadm_yaml(&format!("  {}:", host_arch()))
            .keadm_yaml(&format!(
                "    - {}",
                serde_json::to_string(images.join(name).to_str().unwrap()).unwrap()
            ));
        for extra in [&["--dry-run"][..], &[]] {
            let out = listed.run(extra);
            let context = format!("listed {name:?} {extra:?}");
            refused(
                &out,
                2,
                &format!(
                    "keadm.offlineImages.{}: the image archive `{}/{shown}` cannot be used: its file name `{shown}` {problem}",
                    host_arch(),
                    images.display()
                ),
                instead,
                &context,
            );
            assert!(
                name == shown || !out.stderr.contains(name),
                "{context}: shown raw"
            );
            untouched(fleet.node(0), &context);
            eprintln!("{context}: {}", out.stderr.trim());
        }
    }
}

/// An odd name inside the set (`a+b-1.2_x.tar`) works; and every archive reaches the node
/// under `image-<sha256>.tar`, the name the tool made, whether this machine sent it or a
/// node of the site relayed it: no operator's name is on any node.
#[test]
fn every_archive_reaches_the_nodes_under_a_name_made_from_its_sha256() {
    let fleet = Fleet::builder().nodes(2).site_lans(&[0, 0]).start();
    let runtimes: Vec<Containerd> = fleet.nodes().iter().map(Containerd::start).collect();
    let sc = Scenario::new(&fleet)
        .cmd(&join())
        .max_run_num(1)
        .top_yaml("site: store-1");
    let images = sc.images_dir();
    let odd = images.join("a+b-1.2_x.tar");
    let pause = images.join("pause_3.6.tar");
    docker_archive(&odd, "kubeedge/installation-package:v1.23.1");
    oci_archive(&pause, SANDBOX_IMAGE);
    let (odd_name, pause_name) = (upload_name(&odd), upload_name(&pause));

    let planned = sc.run(&["--dry-run"]);
    planned
        .status(0)
        .stdout_has(&format!("{}: {} (", host_arch(), odd.display()))
        .stdout_has(&format!(
            "  images:    if {}: a+b-1.2_x.tar, pause_3.6.tar; those whose images the runtime lacks are sent to /tmp/kubeedge/keadm as image-<sha256>.tar and imported before keadm runs\n",
            host_arch()
        ));

    let out = sc.run(&[]);
    out.status(0);
    for (i, runtime) in runtimes.iter().enumerate() {
        runtime.assert_has(&[PACKAGE, SANDBOX_IMAGE]);
        // Both went by the names the tool made (the transcript's import lines say so) and
        // were removed from the upload dir once their images were in containerd.
        let on_node = uploaded(fleet.node(i));
        assert!(
            !on_node.contains(&odd_name) && !on_node.contains(&pause_name),
            "node {i}: {on_node:?}"
        );
        assert!(
            !on_node
                .iter()
                .any(|n| n.contains("a+b") || n.contains("pause")),
            "node {i}: an operator's name on the node: {on_node:?}"
        );
        let transcript = out.transcript(i);
        assert!(
            transcript.contains(&format!(
                "imported a+b-1.2_x.tar ({odd_name}) into containerd (/tmp/containerd/containerd.sock): {PACKAGE}"
            )) && transcript.contains(&format!("imported pause_3.6.tar ({pause_name}) into containerd"))
                && transcript.contains("removed the image archives from /tmp/kubeedge/keadm (2 files, "),
            "node {i}: {transcript}"
        );
    }
    // The second node read both from the first, by the names the tool made: those are
    // what the forced command on the first node's authorized_keys line named.
    let second = out.transcript(1);
    for name in [&odd_name, &pause_name] {
        assert!(second.contains(&format!("{name} came from ")), "{second}");
    }
    no_node_serves(&fleet, false, &out.stderr);
}

/// The dry run shows every archive path escaped: a newline in a directory keadm.offlineImages
/// lists shows as `\n` on the plan's one line.
#[test]
fn the_dry_run_shows_every_archive_path_escaped() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet).cmd(&join());
    let odd_dir = sc.path("we\nird");
    oci_archive(&odd_dir.join("pause_3.6.tar"), SANDBOX_IMAGE);
    let sc = sc
        .keadm_yaml("offlineImages:")
        .keadm_yaml(&format!("  {}:", host_arch()))
        .keadm_yaml(&format!(
            "    - {}",
            serde_json::to_string(odd_dir.to_str().unwrap()).unwrap()
        ));
    let out = sc.run(&["--dry-run"]);
    out.status(0).stdout_has(&format!(
        "  images:      {}: {}/we\\nird/pause_3.6.tar (",
        host_arch(),
        sc.dir.path().display()
    ));
    assert!(!out.stdout.contains("we\nird"), "{}", out.stdout);
}

/// Writes a kit directory into `dir` by hand: `files` (path, bytes) and a kit.json that
/// lists each with its sha256 and size, as `batch bundle` writes it.
fn hand_made_kit(dir: &Path, files: &[(&str, &[u8])]) {
    let mut listed = Vec::new();
    for (path, bytes) in files {
        let file = dir.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, bytes).unwrap();
        listed.push(serde_json::json!({
            "path": path,
            "sha256": &crate::common::image_archive::sha256(bytes)[7..],
            "size": bytes.len(),
        }));
    }
    let kit = serde_json::json!({
        "format": "keadm-batch-kit/1",
        "keadmVersion": "v1.23.1",
        "created": "2026-01-01T00:00:00Z",
        "files": listed,
    });
    fs::write(dir.join("kit.json"), serde_json::to_vec(&kit).unwrap()).unwrap();
}

/// The kit check holds kits to the same names: `--verify` refuses a kit whose kit.json
/// lists a name outside the set, and one that holds such a file, with exit 3 and the
/// name shown escaped.
#[test]
fn the_kit_check_refuses_names_outside_the_set_shown_escaped() {
    let site = tempfile::tempdir().unwrap();
    let verify = |kit: &str| {
        Test::in_dir(site.path())
            .env("HOME", site.path())
            .args(["batch", "bundle", "--verify", kit])
            .run()
    };

    hand_made_kit(
        &site.path().join("listed"),
        &[("amd64/images/a\nb.tar", b"x")],
    );
    let out = verify("listed");
    out.status(3).stderr_has(
        "The kit manifest listed/kit.json cannot be read: it lists `amd64/images/a\\nb.tar`: its file name `a\\nb.tar` holds `\\n`",
    );
    assert!(!out.stderr.contains("a\nb"), "{}", out.stderr);

    hand_made_kit(&site.path().join("found"), &[("amd64/images/ok.tar", b"x")]);
    fs::write(site.path().join("found/amd64/images/a\"b\r.tar"), b"x").unwrap();
    let out = verify("found");
    out.status(3).stderr_has(
        "The kit file `found/amd64/images/a\"b\\r.tar` is not part of the kit: its file name `a\"b\\r.tar` holds `\"`, `\\r`",
    );
    assert!(!out.stderr.contains('\r'), "{}", out.stderr);
}
