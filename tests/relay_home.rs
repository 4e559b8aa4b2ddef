//! The relay's serve and clear scripts against a home its login user made hostile, on a
//! real sshd node under sudo, run as the tool runs them (the serve line inside
//! `sudo -n sh -c`, the clearing as the login user on `sh -s`'s stdin), in a UTF-8
//! locale and with no awk: root never writes through the login user's symlinks, and
//! the operator's lines come out byte for byte.

use std::io::Cursor;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::fleet::{
    Fleet, Node, NodeOpt, Sudo, TEST_USER, TEST_USER_ID, TEST_USER_PASSWORD,
};
use keadm_batch::redact::Secret;
use keadm_batch::remote::relay::{Login, Serve, clear_script, serve_script, tag_from};
use keadm_batch::remote::{Privilege, wrap};
use keadm_batch::transport::{Auth, Connection, SshConnection};

const UPLOAD_DIR: &str = "/tmp/kubeedge/keadm";
const TMP: &str = ".keadm.t-1.tmp";
const PAYLOAD: &[u8] = b"the payload\n";
/// sha256 of [`PAYLOAD`].
const SHA256: &str = "4dc21b974cc293d0dfbb25326f0df4ac461f29d69ccc2c2dc5391f4f39a45aed";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnlyForTheTest";

/// One sudo node whose exec channels run in a UTF-8 locale and whose awk cannot run,
/// with the payload in its upload dir (root's, as under sudo) and a directory only root
/// may change in the test user's home (the node's /tmp).
fn hostile_node() -> Fleet {
    let fleet = Fleet::builder()
        .nodes(1)
        .node_option(0, NodeOpt::Sudo(Sudo::Passwordless))
        .node_option(
            0,
            NodeOpt::SshdConfig("SetEnv LANG=C.UTF-8 LC_ALL=C.UTF-8".to_string()),
        )
        .start();
    let noawk = fleet.dir().join("noawk");
    std::fs::write(&noawk, "").unwrap();
    let node = fleet.node(0);
    let setup = node.shell(&format!(
        "set -e\n\
         mount --bind '{}' \"$(readlink -f /usr/bin/awk)\"\n\
         mkdir -p -m 700 {UPLOAD_DIR}\n\
         mkdir -m 700 /tmp/vault\n\
         echo root-only > /tmp/vault/secret\n",
        noawk.display()
    ));
    assert!(setup.status.success(), "{setup:?}");
    std::fs::write(node.tmp_path(&format!("kubeedge/keadm/{TMP}")), PAYLOAD).unwrap();
    fleet
}

fn connect(node: &Node, fleet: &Fleet) -> SshConnection {
    let mut spec = fleet.root_password_spec(node);
    spec.username = TEST_USER.to_string();
    spec.auth = Auth::Password(Secret::new(TEST_USER_PASSWORD));
    SshConnection::connect(&spec).unwrap_or_else(|e| panic!("connect as {TEST_USER}: {e}"))
}

/// Runs `command` (with `stdin`) and returns what it printed; it must succeed.
fn exec(conn: &mut SshConnection, command: &str, stdin: Option<&str>) -> String {
    let mut out = Vec::new();
    let mut input = stdin.map(|s| Cursor::new(s.as_bytes().to_vec()));
    let exit = conn
        .exec(
            command,
            input.as_mut().map(|i| i as &mut dyn std::io::Read),
            Instant::now() + Duration::from_secs(30),
            &mut out,
        )
        .unwrap_or_else(|e| panic!("run {command:.60}: {e}"));
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(exit.success(), "{exit}: {out}");
    out
}

fn serve_line(tag: &str) -> String {
    let from = vec!["127.0.0.1".to_string()];
    let serve = Serve {
        dir: UPLOAD_DIR,
        tmp: TMP,
        name: "keadm",
        sha256: SHA256,
        size: PAYLOAD.len() as u64,
        public_key: KEY,
        from: &from,
        tag,
        lifetime_secs: 600,
        login: Login::Sudo(TEST_USER),
    };
    wrap(&serve_script(&serve).unwrap(), Privilege::SudoNoPassword)
}

/// Everything in the root-only directory, with its owner and content.
fn vault(node: &Node) -> Vec<(String, u32, Vec<u8>)> {
    let mut found: Vec<_> = std::fs::read_dir(node.tmp_path("vault"))
        .unwrap()
        .flatten()
        .map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                meta.uid(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    found
}

fn untouched_vault() -> Vec<(String, u32, Vec<u8>)> {
    vec![("secret".to_string(), 0, b"root-only\n".to_vec())]
}

fn symlink_as_user(node: &Node, target: &str, link: &str) {
    let made = node.shell(&format!(
        "mkdir -p -m 700 /tmp/.ssh && chown {TEST_USER}: /tmp/.ssh && ln -sfn '{target}' '{link}' && chown -h {TEST_USER}: '{link}'"
    ));
    assert!(made.status.success(), "{made:?}");
}

#[test]
fn serve_and_clear_hold_against_a_hostile_home_under_sudo() {
    let fleet = hostile_node();
    let node = fleet.node(0);
    let mut conn = connect(node, &fleet);
    let tag = tag_from([1, 2, 3, 4, 5, 6, 7, 8]);
    let copy = node.tmp_path(&format!(".{tag}.{}", &SHA256[..16]));
    assert_eq!(
        exec(&mut conn, "command -v awk || echo no awk", None),
        "no awk\n"
    );
    assert_eq!(
        exec(&mut conn, "locale | grep LC_ALL", None),
        "LC_ALL=C.UTF-8\n"
    );

    // authorized_keys a symlink to a root-only file, then a dangling one into the
    // root-only directory: the node does not serve, and root changed nothing there.
    for target in ["/tmp/vault/secret", "/tmp/vault/authorized_keys"] {
        symlink_as_user(node, target, "/tmp/.ssh/authorized_keys");
        let said = exec(&mut conn, &serve_line(&tag), None);
        assert_eq!(
            said, "KB_RELAY_NOT_SERVING the login user's .ssh/authorized_keys is a symbolic link\n",
            "{target}"
        );
        assert_eq!(vault(node), untouched_vault(), "{target}");
        assert_eq!(
            std::fs::read_link(node.tmp_path(".ssh/authorized_keys")).unwrap(),
            Path::new(target)
        );
        assert!(!copy.exists(), "{target}");
    }

    // A plain file of operator keys with odd bytes and no final line break, and a
    // symlink planted at the served copy's name, pointing at root's file.
    std::fs::remove_file(node.tmp_path(".ssh/authorized_keys")).unwrap();
    let operator: &[u8] =
        b"ssh-ed25519 AAAA op\xe9rateur@r\xe9gie\nssh-rsa BBBB nul\0byte\nssh-ed25519 CCCC last";
    std::fs::write(node.tmp_path(".ssh/authorized_keys"), operator).unwrap();
    let owned = node.shell(&format!(
        "chown {TEST_USER}: /tmp/.ssh/authorized_keys && chmod 600 /tmp/.ssh/authorized_keys"
    ));
    assert!(owned.status.success(), "{owned:?}");
    symlink_as_user(
        node,
        "/tmp/vault/secret",
        &format!("/tmp/.{tag}.{}", &SHA256[..16]),
    );

    assert_eq!(exec(&mut conn, &serve_line(&tag), None), "");
    assert_eq!(vault(node), untouched_vault());
    let meta = std::fs::symlink_metadata(&copy).unwrap();
    assert!(meta.is_file(), "the planted symlink was replaced by a file");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (TEST_USER_ID, 0o400));
    assert_eq!(std::fs::read(&copy).unwrap(), PAYLOAD);
    let served = std::fs::read(node.tmp_path(".ssh/authorized_keys")).unwrap();
    let (before, line) = served.split_at(operator.len() + 1);
    assert_eq!(&before[..operator.len()], operator);
    assert_eq!(
        before[operator.len()],
        b'\n',
        "the line starts a line of its own"
    );
    let line = String::from_utf8_lossy(line);
    assert!(
        line.starts_with(&format!(
            "restrict,from=\"127.0.0.1\",command=\"cat -- '/tmp/.{tag}.{}'\",expiry-time=\"",
            &SHA256[..16]
        )) && line.ends_with(&format!(" {KEY} {tag}\n")),
        "{line}"
    );
    let meta = std::fs::metadata(node.tmp_path(".ssh/authorized_keys")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (TEST_USER_ID, 0o600));

    // The clearing, as the login user, script on stdin: the operator's bytes as they
    // were (the last line now ends), the copy gone.
    assert_eq!(
        exec(&mut conn, "sh -s", Some(&clear_script(Some(&tag)))),
        ""
    );
    let mut expected = operator.to_vec();
    expected.push(b'\n');
    assert_eq!(
        std::fs::read(node.tmp_path(".ssh/authorized_keys")).unwrap(),
        expected
    );
    assert!(!copy.exists());
    assert_eq!(vault(node), untouched_vault());
    let meta = std::fs::metadata(node.tmp_path(".ssh/authorized_keys")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (TEST_USER_ID, 0o600));
}

/// Without util-linux's `setpriv`, then without `runuser`, the serve line still runs as
/// the login user (through `runuser`, then `su`); with none of them the node does not
/// serve and says why, and root wrote nothing in the home.
#[test]
fn a_sudo_node_serves_as_the_login_user_with_each_tool_or_not_at_all() {
    let fleet = hostile_node();
    let node = fleet.node(0);
    let mut conn = connect(node, &fleet);
    let tag = tag_from([8, 7, 6, 5, 4, 3, 2, 1]);
    let copy = node.tmp_path(&format!(".{tag}.{}", &SHA256[..16]));
    let hidden = fleet.dir().join("hidden");
    std::fs::write(&hidden, "").unwrap();
    for tool in ["setpriv", "runuser", "su"] {
        let hide = node.shell(&format!(
            "mount --bind '{}' \"$(command -v {tool})\"",
            hidden.display()
        ));
        assert!(hide.status.success(), "{hide:?}");
        let said = exec(&mut conn, &serve_line(&tag), None);
        if tool == "su" {
            assert_eq!(
                said,
                format!(
                    "KB_RELAY_NOT_SERVING none of setpriv, runuser and su runs a command as {TEST_USER} here, and root does not work in its home\n"
                )
            );
            assert!(!copy.exists());
            assert!(
                !node.tmp_path(".ssh").exists(),
                "root made the login user's .ssh"
            );
            continue;
        }
        assert_eq!(said, "", "without {tool}");
        let meta = std::fs::metadata(&copy).unwrap();
        assert_eq!(meta.uid(), TEST_USER_ID, "without {tool}");
        let ak = node.tmp_path(".ssh/authorized_keys");
        assert_eq!(std::fs::metadata(&ak).unwrap().uid(), TEST_USER_ID);
        assert_eq!(
            std::fs::metadata(node.tmp_path(".ssh")).unwrap().uid(),
            TEST_USER_ID
        );
        assert_eq!(
            exec(&mut conn, "sh -s", Some(&clear_script(Some(&tag)))),
            ""
        );
        assert_eq!(std::fs::read(&ak).unwrap(), b"", "without {tool}");
        assert!(!copy.exists());
        std::fs::remove_dir_all(node.tmp_path(".ssh")).unwrap();
    }
}
