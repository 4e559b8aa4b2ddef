//! Non-root logins on real sshd nodes: keadm runs as root through one `sudo sh -c`, with
//! or without a sudo password, and the password never shows or leaks into uploads.

use crate::common::cloudcore::{now, token};
use crate::common::containerd::{Containerd, ENDPOINT, SANDBOX_IMAGE};
use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{
    Fleet, KeyKind, Sudo, TEST_USER_PASSWORD, closing_port, refused_endpoint,
};
use crate::common::image_archive::{docker_archive, host_arch, oci_archive};
use crate::common::scenario::{Login, Scenario, remote_keadm};

#[test]
fn passwordless_sudo_runs_keadm_as_root() {
    let fleet = Fleet::with_sudo(Sudo::Passwordless);
    let sc =
        Scenario::new(&fleet).login_as_test_user(Login::Key(fleet.private_key(KeyKind::Ed25519)));
    let out = sc.run(&[]);
    out.status(0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].uid, Some(0), "keadm ran as root");
    assert!(
        out.transcript(0).contains("under passwordless sudo"),
        "{}",
        out.transcript(0)
    );
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(fleet.node(0).tmp_path("kubeedge/keadm")).unwrap();
    assert_eq!(meta.uid(), 0, "the upload dir belongs to root under sudo");
}

#[test]
fn password_sudo_gets_the_login_password_on_stdin_only() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    // The reset is checked clean afterwards: the node's /etc is its own.
    crate::common::edge_state::clean_etc(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()))
        .keadm(FakeKeadm::new().reads_stdin_line())
        .cmd("reset edge");
    let out = sc.run(&[]);
    out.status(0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(calls[0].uid, Some(0));
    assert_eq!(
        calls[0].stdin_line.as_deref(),
        Some("y"),
        "reset still gets `yes`, not the password"
    );
    assert!(
        out.transcript(0)
            .contains("under sudo with the login password")
    );
    // The check after the reset ran under sudo too, the password on its stdin only.
    assert!(
        out.transcript(0)
            .contains("reset verified: no edgecore process"),
        "{}",
        out.transcript(0)
    );
    // Prepare, upload and run in one channel: the password first, then the answer.
    assert!(
        out.transcript(0).contains(
            "one exec channel: the run's script and keadm follows the node's facts on the prepare step's channel"
        ),
        "{}",
        out.transcript(0)
    );
    // The upload went through `sudo sh -c 'cat >'`: the password line must not be in the file.
    let uploaded = std::fs::read(remote_keadm(fleet.node(0))).unwrap();
    assert!(!String::from_utf8_lossy(&uploaded).contains(TEST_USER_PASSWORD));
    assert!(
        uploaded.starts_with(b"#!/bin/sh"),
        "the binary arrived intact"
    );
    for file in [
        out.latest_run().join("summary.json"),
        out.latest_run().join("journal.jsonl"),
        out.dir.join("batch_process_log.txt"),
    ] {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains(TEST_USER_PASSWORD),
            "{} leaks the password",
            file.display()
        );
    }
    assert!(!out.transcript(0).contains(TEST_USER_PASSWORD));
    assert!(!out.stderr.contains(TEST_USER_PASSWORD));
}

#[test]
fn sudo_that_needs_a_password_with_a_key_login_is_a_clear_error() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let sc =
        Scenario::new(&fleet).login_as_test_user(Login::Key(fleet.private_key(KeyKind::Ed25519)));
    let out = sc.run(&[]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("Sudo on node edge-00 needs a password, but "),
        "{line}"
    );
    assert!(!remote_keadm(fleet.node(0)).exists());
}

#[test]
fn sudo_off_runs_as_the_login_user_in_its_own_dir() {
    let fleet = Fleet::builder().nodes(1).start();
    let sc = Scenario::new(&fleet)
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()))
        .ssh_yaml("sudo: false")
        .node_yaml("remoteDir: /tmp/kbuser-keadm");
    let out = sc.run(&[]);
    out.status(0);
    let calls = fake_keadm::calls(&fleet.node(0).tmp_path("kbuser-keadm/keadm"));
    assert_eq!(calls[0].uid, Some(1500));
    assert_eq!(calls[0].cwd, "/tmp/kbuser-keadm");
}

#[test]
fn a_planted_symlink_at_the_remote_dir_is_refused() {
    let fleet = Fleet::builder().nodes(2).start();
    let node = fleet.node(1);
    std::fs::create_dir_all(node.tmp_path("kubeedge")).unwrap();
    std::fs::create_dir_all(node.tmp_path("attacker")).unwrap();
    std::os::unix::fs::symlink("/tmp/attacker", node.tmp_path("kubeedge/keadm")).unwrap();
    let sc = Scenario::new(&fleet);
    let out = sc.run(&[]);
    out.status(1);
    out.log_has("Successfully processed node edge-00");
    let line = out.log_line_starting("Failed to process node edge-01: ");
    assert!(
        line.contains("/tmp/kubeedge/keadm is a symbolic link"),
        "{line}"
    );
    assert!(
        std::fs::read_dir(node.tmp_path("attacker"))
            .unwrap()
            .next()
            .is_none(),
        "nothing was written through the link"
    );
}

#[test]
fn a_remote_dir_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let fleet = Fleet::builder().nodes(1).start();
    let dir = fleet.node(0).tmp_path("kubeedge/keadm");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sc = Scenario::new(&fleet);
    let out = sc.run(&[]);
    out.status(1);
    let line = out.log_line_starting("Failed to process node edge-00: ");
    assert!(
        line.contains("/tmp/kubeedge/keadm is writable by other users (mode 777)"),
        "{line}"
    );
}

/// Security finding 6: when `sudo -S` does not prompt (here: `sh` needs no password,
/// `true` does, so the probe learns "password"), the password line must reach neither an
/// uploaded file nor keadm's stdin.
#[test]
fn a_sudo_that_does_not_prompt_never_passes_the_password_on() {
    let fleet = Fleet::with_sudo(Sudo::Rules(&[
        "ALL=(ALL) ALL",
        "ALL=(ALL) NOPASSWD: /usr/bin/sh, /bin/sh",
    ]));
    let sc = Scenario::new(&fleet)
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()))
        .keadm(FakeKeadm::new().reads_stdin_line());
    let files = sc.path("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("pre-run.sh"), "#!/bin/sh\necho pre-run\n").unwrap();
    let sc = sc.node_yaml(&format!("copyFrom: {}", files.display()));
    let out = sc.run(&[]);
    out.status(0);
    let calls = fake_keadm::calls(&remote_keadm(fleet.node(0)));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].uid, Some(0));
    assert_eq!(
        calls[0].stdin_line.as_deref(),
        Some(""),
        "keadm's stdin is /dev/null"
    );
    let uploaded = std::fs::read(remote_keadm(fleet.node(0))).unwrap();
    assert!(
        uploaded.starts_with(b"#!/bin/sh"),
        "the binary arrived intact"
    );
    assert_eq!(
        std::fs::read_to_string(fleet.node(0).tmp_path("kubeedge/keadm/pre-run.sh")).unwrap(),
        "#!/bin/sh\necho pre-run\n"
    );
}

/// The README's air-gapped walk-through on a node whose login needs the password for
/// sudo: the kit was bundled without `--sandbox-image`, so it carries pause:3.9 while the
/// node's containerd asks for pause:3.6. The runtime's socket is root's, so the pre-flight
/// image check asks it under sudo with the login password, as the run will, and stops
/// the walk-through there, naming the image and the bundle flag that adds it.
#[test]
fn pre_flight_asks_the_runtime_under_sudo_and_names_the_missing_image_and_the_bundle_flag() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let runtime = Containerd::start(fleet.node(0));
    let token = token(
        "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07",
        now() + 86_400,
    );
    // cloudcore's ports answer the node, and the checks before the run ask nothing.
    let cmd = format!(
        "join --cloudcore-ipport=127.0.0.1:{port} --certport={port} --edgenode-name={{name}} --token={token} --remote-runtime-endpoint={ENDPOINT}",
        port = closing_port()
    );
    let sc = Scenario::new(&fleet)
        .cmd(&cmd)
        .login_as_test_user(Login::Password(TEST_USER_PASSWORD.into()))
        .preflight("warn");
    let images = sc.images_dir();
    docker_archive(
        &images.join("installation-package_v1.23.1.tar"),
        "kubeedge/installation-package:v1.23.1",
    );
    oci_archive(&images.join("pause_3.9.tar"), "registry.k8s.io/pause:3.9");

    let out = sc.run(&["--preflight-only"]);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    out.status(1)
        .stdout_has(&format!(
            "({SANDBOX_IMAGE} is not in containerd (/tmp/containerd/containerd.sock), and no offline image archive for {} provides it; `keadm-batch batch bundle` writes it into the kit when run again adding --sandbox-image {SANDBOX_IMAGE} (the runtime's sandbox image))",
            host_arch()
        ))
        .stderr_has("1 of 1 nodes have pre-flight findings");
    assert!(!out.stdout.contains("probe_incomplete"), "{}", out.stdout);
    assert!(!out.stdout.contains(TEST_USER_PASSWORD) && !out.stderr.contains(TEST_USER_PASSWORD));
    assert!(runtime.images().is_empty(), "the probe imported nothing");

    // The kit gets the runtime's sandbox image: nothing is missing, which the check could
    // only tell by listing the runtime's images as root.
    oci_archive(&images.join("pause_3.6.tar"), SANDBOX_IMAGE);
    sc.run(&["--preflight-only"])
        .status(0)
        .preflight_found_nothing();
}

/// A key login whose sudo needs a password cannot run the image check as the run would:
/// a `probe_incomplete` finding says so, never "none".
#[test]
fn an_image_check_sudo_cannot_run_is_a_finding() {
    let fleet = Fleet::with_sudo(Sudo::WithPassword);
    let _runtime = Containerd::start(fleet.node(0));
    let sc = Scenario::new(&fleet)
        .cmd(&format!(
            "join --cloudcore-ipport=127.0.0.1:10000 --certport={} --edgenode-name={{name}} --token={} --remote-runtime-endpoint={ENDPOINT}",
            refused_endpoint().port,
            token(
                "0814fda185db6ddb8324d682653b1b389fb6b41ed2eac2235897e47e3496ee07",
                now() + 86_400,
            )
        ))
        .login_as_test_user(Login::Key(fleet.private_key(KeyKind::Ed25519)))
        .preflight("warn");
    oci_archive(&sc.images_dir().join("pause_3.6.tar"), SANDBOX_IMAGE);
    let out = sc.run(&["--preflight-only"]);
    eprintln!("--preflight-only table:\n{}", out.stdout);
    out.status(1).stdout_has(
        "one of its checks could not run, so its findings are incomplete (the images keadm join needs were not checked: it runs under sudo as the run does, and sudo on the node wants a password, which kbuser logs in without)",
    );
}
