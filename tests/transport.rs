//! The SSH transport against real OpenSSH sshd nodes on loopback (see tests/common/fleet.rs).

use std::fs;
use std::io::Cursor;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::fake_keadm::{self, FakeKeadm};
use crate::common::fleet::{Fleet, KeyKind, Node, NodeOpt, Tarpit, refused_endpoint};
use crate::common::ssh_agent::Agent;
use keadm_batch::redact::Secret;
use keadm_batch::transport::{
    Auth, ConnectSpec, Connection, Endpoint, HostKeyPolicy, RemoteExit, SshConnection,
    TransportError,
};

fn spec_for(endpoint: Endpoint, auth: Auth, known_hosts: PathBuf) -> ConnectSpec {
    ConnectSpec {
        endpoint,
        username: "root".to_string(),
        auth,
        host_key_policy: HostKeyPolicy::AcceptNew,
        known_hosts,
        connect_timeout: Duration::from_secs(10),
        keepalive_secs: 15,
        jump_connections: 1,
        jump: None,
        handshakes_per_host: keadm_batch::transport::DEFAULT_HANDSHAKES_PER_HOST,
    }
}

fn password_spec(fleet: &Fleet, node: &Node) -> ConnectSpec {
    fleet.root_password_spec(node)
}

fn connect(spec: &ConnectSpec) -> SshConnection {
    SshConnection::connect(spec).unwrap_or_else(|e| panic!("connect to {}: {e}", spec.endpoint))
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// Runs `command` and returns its exit and merged output.
fn run(conn: &mut SshConnection, command: &str) -> (RemoteExit, String) {
    let mut out = Vec::new();
    let exit = conn
        .exec(command, None, far(), &mut out)
        .unwrap_or_else(|e| panic!("exec {command:?}: {e}"));
    (exit, String::from_utf8_lossy(&out).into_owned())
}

/// Uploads `data` to `dir/name` with `mode` as the pipeline does: its receive script over
/// exec, the file on stdin.
fn upload(
    conn: &mut SshConnection,
    data: &mut dyn std::io::Read,
    size: u64,
    dir: &str,
    name: &str,
    mode: u32,
) -> (RemoteExit, String) {
    let mut out = Vec::new();
    let exit = conn
        .exec(
            &keadm_batch::remote::receive_script(
                dir,
                name,
                mode,
                size,
                None,
                keadm_batch::remote::Encoding::Plain,
            ),
            Some(data),
            far(),
            &mut out,
        )
        .unwrap_or_else(|e| panic!("upload {dir}/{name}: {e}"));
    (exit, String::from_utf8_lossy(&out).into_owned())
}

/// Deterministic pseudo-random bytes (xorshift), so no test needs a `rand` dependency.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn password_login_runs_a_command_and_reports_exit_status_and_output() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let mut conn = connect(&password_spec(&fleet, node));
    assert_eq!(conn.host_key_fingerprint(), node.host_key_fingerprint());

    let (exit, out) = run(&mut conn, "echo to-stdout; echo to-stderr >&2; exit 3");
    assert_eq!(exit, RemoteExit::Code(3));
    assert_eq!(exit.to_string(), "exit status 3");
    assert!(out.contains("to-stdout\n"), "{out:?}");
    assert!(out.contains("to-stderr\n"), "{out:?}");

    // The connection is reusable, HOME is the node's pristine one, /tmp is the node's.
    let (exit, out) = run(
        &mut conn,
        "echo $HOME; ls -A /root | wc -l; touch /tmp/marker",
    );
    assert!(exit.success());
    assert_eq!(out, "/root\n0\n");
    assert!(node.tmp_path("marker").exists());
}

/// Whether this machine's CPU has AES instructions and the carry-less multiply GCM needs,
/// as the kernel lists them in /proc/cpuinfo (x86's `flags`, ARMv8's `Features`).
fn cpu_has_aes() -> bool {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("flags") || l.starts_with("Features"))
        .is_some_and(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.contains(&"aes") && (words.contains(&"pclmulqdq") || words.contains(&"pmull"))
        })
}

#[test]
fn algorithms_prefer_curve25519_and_aes_gcm_where_the_cpu_has_aes() {
    let fleet = Fleet::builder().nodes(1).start();
    let conn = connect(&password_spec(&fleet, fleet.node(0)));
    let (kex, cipher) = conn.negotiated();
    assert_eq!(kex, "curve25519-sha256");
    let expected = if cpu_has_aes() {
        "aes128-gcm@openssh.com"
    } else {
        "chacha20-poly1305@openssh.com"
    };
    assert_eq!(cipher, expected);
}

/// The vendored libssh2 encrypts a packet's AES blocks in one OpenSSL call: every cipher
/// keadm-batch may negotiate carries 10 MiB byte-exact to an sshd that offers only it
/// (sshd drops a connection at the first packet that does not decrypt and authenticate).
#[test]
fn every_cipher_carries_10_mib_byte_exact() {
    const CIPHERS: [&str; 6] = [
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        "aes128-ctr",
        "aes192-ctr",
        "aes256-ctr",
        "chacha20-poly1305@openssh.com",
    ];
    let mut builder = Fleet::builder().nodes(CIPHERS.len());
    for (i, cipher) in CIPHERS.iter().enumerate() {
        builder = builder.node_option(i, NodeOpt::SshdConfig(format!("Ciphers {cipher}")));
    }
    let fleet = builder.start();
    let data = random_bytes((10 << 20) + 7, 11);
    for (i, cipher) in CIPHERS.iter().enumerate() {
        let node = fleet.node(i);
        let mut conn = connect(&password_spec(&fleet, node));
        assert_eq!(conn.negotiated().1, *cipher);
        let mut out = Vec::new();
        let exit = conn
            .exec(
                "cat > /tmp/in.bin && echo done",
                Some(&mut Cursor::new(&data)),
                far(),
                &mut out,
            )
            .unwrap();
        assert!(exit.success(), "{cipher}");
        assert_eq!(out, b"done\n", "{cipher}");
        assert!(
            fs::read(node.tmp_path("in.bin")).unwrap() == data,
            "{cipher}: the file differs"
        );
    }
}

#[test]
fn key_logins_ed25519_passphrase_and_rsa_pem() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let cases = [
        (KeyKind::Ed25519, None),
        (KeyKind::Ed25519Passphrase, Some(fleet.key_passphrase())),
        (KeyKind::RsaPem, None),
    ];
    for (kind, passphrase) in cases {
        let auth = Auth::PrivateKey {
            path: fleet.private_key(kind),
            passphrase,
        };
        let mut conn = connect(&spec_for(node.endpoint(), auth, fleet.known_hosts()));
        let (exit, out) = run(&mut conn, "id -un");
        assert!(exit.success(), "{kind:?}");
        assert_eq!(out, "root\n", "{kind:?}");
    }
}

#[test]
fn wrong_passphrase_is_a_clear_final_error() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let key = fleet.private_key(KeyKind::Ed25519Passphrase);
    let auth = Auth::PrivateKey {
        path: key.clone(),
        passphrase: Some(Secret::new("not-the-passphrase")),
    };
    let err =
        SshConnection::connect(&spec_for(node.endpoint(), auth, fleet.known_hosts())).unwrap_err();
    assert!(matches!(err, TransportError::AuthSetup { .. }), "{err:?}");
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.contains(&key.display().to_string()) && msg.contains("passphrase"),
        "{msg}"
    );
    assert!(!msg.contains("not-the-passphrase"), "{msg}");

    let missing = Auth::PrivateKey {
        path: fleet.dir().join("no-such-key"),
        passphrase: None,
    };
    let err = SshConnection::connect(&spec_for(node.endpoint(), missing, fleet.known_hosts()))
        .unwrap_err();
    assert!(err.to_string().contains("no-such-key"), "{err}");
}

#[test]
fn ssh_agent_login_through_an_explicit_socket() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let agent = Agent::start(fleet.dir(), &fleet.private_key(KeyKind::Ed25519));
    let auth = Auth::Agent {
        socket: Some(agent.socket.clone()),
    };
    let mut conn = connect(&spec_for(node.endpoint(), auth, fleet.known_hosts()));
    assert_eq!(run(&mut conn, "echo via-agent").1, "via-agent\n");

    let auth = Auth::Agent {
        socket: Some(fleet.dir().join("no-agent.sock")),
    };
    let err =
        SshConnection::connect(&spec_for(node.endpoint(), auth, fleet.known_hosts())).unwrap_err();
    assert!(err.to_string().contains("no-agent.sock"), "{err}");
    assert!(!err.is_transient());
}

#[test]
fn wrong_password_is_rejected_with_a_sentence_and_not_retried() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let mut spec = password_spec(&fleet, node);
    spec.auth = Auth::Password(Secret::new("wrong-password"));
    let err = SshConnection::connect(&spec).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "The node at {}:22 rejected the password for user root.",
            node.host()
        )
    );
    assert!(!err.is_transient());
}

#[test]
fn refused_port_is_transient() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_for(
        refused_endpoint(),
        Auth::Password(Secret::new("x")),
        dir.path().join("known_hosts"),
    );
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::Refused { .. }),
        "{err:?}: {err}"
    );
    assert!(err.is_transient());
    assert!(err.to_string().contains("refused the connection"), "{err}");
}

#[test]
fn silent_listener_hits_the_connect_deadline() {
    let tarpit = Tarpit::start();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_for(
        tarpit.endpoint(),
        Auth::Password(Secret::new("x")),
        dir.path().join("known_hosts"),
    );
    spec.connect_timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let err = SshConnection::connect(&spec).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, TransportError::ConnectTimeout { .. }),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(2500),
        "took {took:?}"
    );
}

#[test]
fn accept_new_records_the_key_then_a_changed_key_is_refused_with_the_fix() {
    let mut fleet = Fleet::builder().nodes(1).start();
    let known_hosts = fleet.dir().join("nested/dir/known_hosts");
    let spec = {
        let node = fleet.node(0);
        spec_for(
            node.endpoint(),
            Auth::Password(fleet.root_password()),
            known_hosts.clone(),
        )
    };
    connect(&spec);
    connect(&spec);
    let text = fs::read_to_string(&known_hosts).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with(&format!("{} ssh-ed25519 ", fleet.node(0).host())),
        "{text}"
    );
    let dir_mode = fs::metadata(known_hosts.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    fleet.node_mut(0).restart_with_new_host_key();
    let new_fp = fleet.node(0).host_key_fingerprint();
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyChanged { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let msg = err.to_string();
    let host = fleet.node(0).host().to_string();
    assert!(msg.contains(&format!("{host}:22")), "{msg}");
    assert!(msg.contains(&new_fp), "{msg}");
    assert!(msg.contains(&known_hosts.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!(
            "ssh-keygen -R '{host}' -f {}",
            known_hosts.display()
        )),
        "{msg}"
    );
    // Nothing was added for the impostor key.
    assert_eq!(fs::read_to_string(&known_hosts).unwrap(), text);

    // Following the advice works.
    let status = Command::new("ssh-keygen")
        .args(["-q", "-R", &host, "-f"])
        .arg(&known_hosts)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    connect(&spec);
}

#[test]
fn strict_refuses_unknown_hosts_and_off_accepts_anything() {
    let mut fleet = Fleet::builder().nodes(1).start();
    let mut spec = password_spec(&fleet, fleet.node(0));
    spec.host_key_policy = HostKeyPolicy::Strict;
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyUnknown { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains(&fleet.node(0).host_key_fingerprint()), "{msg}");
    assert!(msg.contains("ssh-keyscan"), "{msg}");
    assert!(!fleet.known_hosts().exists());

    // Once recorded, strict accepts it.
    spec.host_key_policy = HostKeyPolicy::AcceptNew;
    connect(&spec);
    spec.host_key_policy = HostKeyPolicy::Strict;
    connect(&spec);

    // Off: even a changed key is accepted, and nothing is written.
    fleet.node_mut(0).restart_with_new_host_key();
    let before = fs::read_to_string(fleet.known_hosts()).unwrap();
    spec.host_key_policy = HostKeyPolicy::Off;
    connect(&spec);
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), before);
}

#[test]
fn parallel_accept_new_workers_lose_no_entries() {
    let fleet = Fleet::builder().nodes(6).start();
    // A pre-existing line libssh2 cannot parse, and a comment, must survive.
    fs::write(
        fleet.known_hosts(),
        "# mine\n@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFake",
    )
    .unwrap();
    std::thread::scope(|s| {
        for node in fleet.nodes() {
            let spec = password_spec(&fleet, node);
            s.spawn(move || connect(&spec));
        }
    });
    let text = fs::read_to_string(fleet.known_hosts()).unwrap();
    assert!(text.starts_with("# mine\n@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFake\n"), "{text}");
    for node in fleet.nodes() {
        let n = text
            .lines()
            .filter(|l| l.starts_with(&format!("{} ", node.host())))
            .count();
        assert_eq!(n, 1, "{}: {text}", node.host());
    }
}

#[test]
fn ipv6_node_uses_bracketed_known_hosts_entries() {
    let fleet = Fleet::builder().nodes(1).all_nodes(NodeOpt::Ipv6).start();
    let node = fleet.node(0);
    assert_eq!(node.host(), "::1");
    let mut conn = connect(&password_spec(&fleet, node));
    assert!(run(&mut conn, "true").0.success());
    let text = fs::read_to_string(fleet.known_hosts()).unwrap();
    assert!(
        text.starts_with(&format!("[::1]:{} ssh-ed25519 ", node.port())),
        "{text}"
    );
}

#[test]
fn exec_streams_10_mib_of_stdin_byte_exact() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let mut conn = connect(&password_spec(&fleet, node));
    let data = random_bytes(10 << 20, 7);
    let mut out = Vec::new();
    let exit = conn
        .exec(
            "cat > /tmp/in.bin",
            Some(&mut Cursor::new(&data)),
            far(),
            &mut out,
        )
        .unwrap();
    assert!(exit.success());
    assert!(out.is_empty());
    assert!(fs::read(node.tmp_path("in.bin")).unwrap() == data);
}

#[test]
fn exec_with_large_input_and_output_at_once_does_not_deadlock() {
    let fleet = Fleet::builder().nodes(1).start();
    let mut conn = connect(&password_spec(&fleet, fleet.node(0)));
    let data = random_bytes(8 << 20, 11);
    let mut out = Vec::new();
    let exit = conn
        .exec("cat", Some(&mut Cursor::new(&data)), far(), &mut out)
        .unwrap();
    assert!(exit.success());
    assert!(out == data, "echoed {} of {} bytes", out.len(), data.len());
}

/// The contract the one-channel exchange stands on: a stdin with nothing yet
/// (`WouldBlock`) is asked again once output has arrived, so what goes in may depend on
/// what came out, in one channel; and the deadline may move while the command runs.
#[test]
fn exec_asks_a_waiting_stdin_again_after_output_and_reads_a_moved_deadline() {
    use std::cell::{Cell, RefCell};
    use std::io::{self, Read, Write};

    /// Output that answers "ready" with a line on stdin, and moves the deadline.
    struct Answering<'s> {
        seen: Vec<u8>,
        answer: &'s RefCell<Option<Cursor<Vec<u8>>>>,
        deadline: &'s Cell<Instant>,
    }
    impl Write for Answering<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.seen.extend_from_slice(buf);
            if self.answer.borrow().is_none() && self.seen.ends_with(b"ready\n") {
                *self.answer.borrow_mut() = Some(Cursor::new(b"42\n".to_vec()));
                self.deadline.set(Instant::now() + Duration::from_secs(2));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    struct Waiting<'s>(&'s RefCell<Option<Cursor<Vec<u8>>>>);
    impl Read for Waiting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.borrow_mut().as_mut() {
                Some(answer) => answer.read(buf),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    /// Runs `command` with the answering output and the waiting stdin, a minute's
    /// deadline until the answer; returns how it ended and what it printed.
    fn answered(
        conn: &mut SshConnection,
        command: &str,
    ) -> (Result<RemoteExit, TransportError>, String) {
        let answer = RefCell::new(None);
        let deadline = Cell::new(far());
        let mut out = Answering {
            seen: Vec::new(),
            answer: &answer,
            deadline: &deadline,
        };
        let result = conn.exec_until(command, Some(&mut Waiting(&answer)), &deadline, &mut out);
        (result, String::from_utf8_lossy(&out.seen).into_owned())
    }

    let fleet = Fleet::builder().nodes(1).start();
    let mut conn = connect(&password_spec(&fleet, fleet.node(0)));
    let (exit, printed) = answered(&mut conn, "echo ready; read x; echo \"got $x\"");
    let exit = exit.unwrap();
    assert!(exit.success(), "{exit}");
    assert_eq!(printed, "ready\ngot 42\n");

    // The answer moved the deadline from a minute away to 2 s: the sleep is cut there.
    let started = Instant::now();
    let err = answered(&mut conn, "echo ready; read x; sleep 50")
        .0
        .unwrap_err();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn exec_deadline_times_out_promptly_and_kills_the_command() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let mut conn = connect(&password_spec(&fleet, node));
    let started = Instant::now();
    let mut out = Vec::new();
    let err = conn
        .exec(
            "echo begun; sleep 30 & sleep 31; echo never",
            None,
            Instant::now() + Duration::from_secs(1),
            &mut out,
        )
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, TransportError::Timeout { .. }), "{err:?}");
    assert!(!err.is_transient());
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(2500),
        "took {took:?}\n{}",
        node.log()
    );
    assert_eq!(String::from_utf8_lossy(&out), "begun\n");
    assert!(err.to_string().contains("did not finish within"), "{err}");

    // The whole process group is gone on the node, and the connection still works.
    std::thread::sleep(Duration::from_millis(200));
    let (exit, out) = run(&mut conn, "ps -eo comm= | grep -c '^sleep$' || true");
    assert!(exit.success());
    assert_eq!(out, "0\n");
}

#[test]
fn exec_reports_a_killing_signal() {
    let fleet = Fleet::builder().nodes(1).start();
    let mut conn = connect(&password_spec(&fleet, fleet.node(0)));
    let (exit, _) = run(&mut conn, "kill -KILL $$");
    assert_eq!(exit, RemoteExit::Signal("KILL".to_string()));
    assert_eq!(exit.to_string(), "killed by signal KILL");
}

#[test]
fn receive_script_over_exec_arrives_byte_exact_with_its_mode() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let mut conn = connect(&password_spec(&fleet, node));
    let data = random_bytes((5 << 20) + 12345, 3);
    let size = data.len() as u64;
    let (exit, _) = run(&mut conn, "mkdir -p /tmp/kubeedge/keadm");
    assert!(exit.success());
    // An existing longer file is truncated.
    fs::write(node.tmp_path("kubeedge/keadm/keadm"), vec![0u8; 6 << 20]).unwrap();
    let (exit, out) = upload(
        &mut conn,
        &mut Cursor::new(&data),
        size,
        "/tmp/kubeedge/keadm",
        "keadm",
        0o755,
    );
    assert!(exit.success(), "{exit}: {out}");
    let path = node.tmp_path("kubeedge/keadm/keadm");
    assert!(fs::read(&path).unwrap() == data);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o755
    );

    // A missing dir, and a stream shorter than announced, both fail the script.
    let (exit, _) = upload(
        &mut conn,
        &mut Cursor::new(b"x"),
        1,
        "/tmp/no/such/dir",
        "f",
        0o644,
    );
    assert!(!exit.success());
    let (exit, _) = upload(&mut conn, &mut Cursor::new(b"short"), 9, "/tmp", "f", 0o644);
    assert!(!exit.success());
}

#[test]
fn node_without_sftp_takes_uploads_over_exec() {
    let fleet = Fleet::builder().nodes(1).all_nodes(NodeOpt::NoSftp).start();
    let node = fleet.node(0);
    let mut conn = connect(&password_spec(&fleet, node));
    let (exit, out) = upload(&mut conn, &mut Cursor::new(b"data"), 4, "/tmp", "f", 0o600);
    assert!(exit.success(), "{exit}: {out}");
    assert_eq!(fs::read(node.tmp_path("f")).unwrap(), b"data");
}

#[test]
fn fake_architecture_via_uname_wrapper() {
    let fleet = Fleet::builder()
        .nodes(2)
        .node_option(1, NodeOpt::Uname("aarch64"))
        .start();
    let real = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout).unwrap();
    let mut conn = connect(&password_spec(&fleet, fleet.node(0)));
    assert_eq!(run(&mut conn, "uname -m").1, real);
    let mut conn = connect(&password_spec(&fleet, fleet.node(1)));
    assert_eq!(
        run(&mut conn, "uname -m; /bin/uname -m; arch").1,
        "aarch64\naarch64\naarch64\n"
    );
    assert!(run(&mut conn, "uname -a").1.contains("aarch64"));
}

#[test]
fn twenty_nodes_start_and_all_accept_a_connection() {
    let started = Instant::now();
    let fleet = Fleet::builder().nodes(20).start();
    let start_time = started.elapsed();
    let connected = Instant::now();
    std::thread::scope(|s| {
        for chunk in fleet.nodes().chunks(5) {
            let fleet = &fleet;
            s.spawn(move || {
                for node in chunk {
                    let mut conn = connect(&password_spec(fleet, node));
                    assert_eq!(run(&mut conn, "echo ok").1, "ok\n");
                }
            });
        }
    });
    eprintln!(
        "fleet of 20: started in {start_time:?}, all connected and ran a command in {:?}",
        connected.elapsed()
    );
    let mut hosts: Vec<_> = fleet.nodes().iter().map(|n| n.endpoint()).collect();
    hosts.sort_by_key(|e| e.to_string());
    hosts.dedup();
    assert_eq!(hosts.len(), 20);
    assert!(start_time < Duration::from_secs(10), "{start_time:?}");
}

#[test]
fn killed_node_is_refused_and_restart_brings_it_back() {
    let mut fleet = Fleet::builder().nodes(1).start();
    let spec = password_spec(&fleet, fleet.node(0));
    connect(&spec);
    fleet.node_mut(0).kill_sshd();
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    fleet.node_mut(0).restart();
    connect(&spec);
}

/// `cargo test --release --test main -- --ignored --nocapture throughput`
#[test]
#[ignore = "benchmark; run by hand"]
fn throughput_40_mib_exec_vs_openssh_cat() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let data = random_bytes(40 << 20, 5);
    let local = fleet.dir().join("blob");
    fs::write(&local, &data).unwrap();

    let mut conn = connect(&password_spec(&fleet, node));
    // How the pipeline uploads: the file streamed into `cat` over exec.
    for _ in 0..3 {
        let t = Instant::now();
        let exit = conn
            .exec(
                "cat > /tmp/blob3",
                Some(&mut fs::File::open(&local).unwrap()),
                far(),
                &mut Vec::new(),
            )
            .unwrap();
        assert!(exit.success());
        let s = t.elapsed().as_secs_f64();
        eprintln!("exec 'cat > f' 40 MiB: {s:.3} s = {:.0} MiB/s", 40.0 / s);
    }
    assert!(fs::read(node.tmp_path("blob3")).unwrap() == data);

    let key = fleet.private_key(KeyKind::Ed25519);
    // The first run is `true`: the connection set-up alone, to subtract by eye.
    for run in 0..4 {
        let t = Instant::now();
        let status = Command::new("ssh")
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                fleet.dir().join("kh-ssh").display()
            ))
            .args(["-o", "KexAlgorithms=curve25519-sha256"])
            .args(["-c", "aes128-gcm@openssh.com", "-i"])
            .arg(&key)
            .args(["-p", &node.port().to_string()])
            .arg(format!("root@{}", node.host()))
            .arg(if run == 0 { "true" } else { "cat > /tmp/blob2" })
            .stdin(if run == 0 {
                Stdio::null()
            } else {
                Stdio::from(fs::File::open(&local).unwrap())
            })
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let s = t.elapsed().as_secs_f64();
        if run == 0 {
            eprintln!("ssh connect + 'true': {s:.3} s");
        } else {
            eprintln!(
                "ssh -c aes128-gcm 'cat > f' 40 MiB (incl. connect): {s:.3} s = {:.0} MiB/s",
                40.0 / s
            );
        }
    }
}

#[test]
fn jump_host_carries_exec_and_upload_to_the_node_behind_it() {
    let mut fleet = Fleet::builder().nodes(2).start();
    let mut spec = password_spec(&fleet, fleet.node(1));
    spec.jump = Some(Box::new(password_spec(&fleet, fleet.node(0))));
    let mut conn = connect(&spec);
    assert_eq!(
        conn.host_key_fingerprint(),
        fleet.node(1).host_key_fingerprint()
    );
    let (exit, out) = run(&mut conn, "echo via-jump; exit 4");
    assert_eq!((exit, out.as_str()), (RemoteExit::Code(4), "via-jump\n"));
    let data = random_bytes(5 << 20, 9);
    let size = data.len() as u64;
    let (exit, out) = upload(
        &mut conn,
        &mut Cursor::new(&data),
        size,
        "/tmp",
        "blob",
        0o600,
    );
    assert!(exit.success(), "{exit}: {out}");
    assert!(fs::read(fleet.node(1).tmp_path("blob")).unwrap() == data);
    // Both hosts were recorded under their own entries.
    let text = fs::read_to_string(fleet.known_hosts()).unwrap();
    for i in 0..2 {
        let host = fleet.node(i).host().to_string();
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{host} "))),
            "{text}"
        );
    }

    // The traffic really goes through the jump host: without it the session is lost.
    fleet.node_mut(0).kill_sshd();
    let err = conn.exec("true", None, far(), &mut Vec::new()).unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

#[test]
fn jump_host_failures_name_both_hosts_and_keep_their_class() {
    let fleet = Fleet::builder().nodes(2).start();
    let mut jump = password_spec(&fleet, fleet.node(0));
    jump.auth = Auth::Password(Secret::new("wrong"));
    let mut spec = password_spec(&fleet, fleet.node(1));
    spec.jump = Some(Box::new(jump));
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(matches!(err, TransportError::Jump { .. }), "{err:?}");
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.contains(&fleet.node(1).endpoint().to_string())
            && msg.contains("rejected the password")
            && msg.contains(&fleet.node(0).endpoint().to_string()),
        "{msg}"
    );

    // A target that is not listening: the jump host's "connect failed" is transient.
    let mut spec = spec_for(
        refused_endpoint(),
        Auth::Password(fleet.root_password()),
        fleet.known_hosts(),
    );
    spec.jump = Some(Box::new(password_spec(&fleet, fleet.node(0))));
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(matches!(err, TransportError::Jump { .. }), "{err:?}");
    assert!(err.is_transient(), "{err:?}: {err}");
}

#[test]
fn hashed_known_hosts_entries_are_matched() {
    let mut fleet = Fleet::builder().nodes(1).start();
    let spec = password_spec(&fleet, fleet.node(0));
    connect(&spec);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-H", "-f"])
        .arg(fleet.known_hosts())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let hashed = fs::read_to_string(fleet.known_hosts()).unwrap();
    assert!(hashed.starts_with("|1|"), "{hashed}");
    connect(&spec);
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), hashed);

    fleet.node_mut(0).restart_with_new_host_key();
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyChanged { .. }),
        "{err:?}"
    );
}

#[test]
fn fake_keadm_records_args_stdin_and_exit_on_the_node() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let local = fleet.dir().join("fake-keadm");
    FakeKeadm::new()
        .prints("joining")
        .prints_stderr("it's a warning")
        .reads_stdin_line()
        .exits_with(5)
        .write_to(&local)
        .unwrap();
    let mut conn = connect(&password_spec(&fleet, node));
    assert!(run(&mut conn, "mkdir -p /tmp/kubeedge/keadm").0.success());
    let size = fs::metadata(&local).unwrap().len();
    let (exit, out) = upload(
        &mut conn,
        &mut fs::File::open(&local).unwrap(),
        size,
        "/tmp/kubeedge/keadm",
        "keadm",
        0o755,
    );
    assert!(exit.success(), "{exit}: {out}");
    let mut out = Vec::new();
    let exit = conn
        .exec(
            "cd /tmp/kubeedge/keadm && ./keadm join --token='a b' --x=1",
            Some(&mut Cursor::new(b"secret-line\nmore\n")),
            far(),
            &mut out,
        )
        .unwrap();
    assert_eq!(exit, RemoteExit::Code(5));
    assert_eq!(String::from_utf8_lossy(&out), "joining\nit's a warning\n");

    let calls = fake_keadm::calls(&node.tmp_path("kubeedge/keadm/keadm"));
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call.args, ["join", "--token=a b", "--x=1"]);
    assert_eq!(call.cwd, "/tmp/kubeedge/keadm");
    assert_eq!(call.stdin_line.as_deref(), Some("secret-line"));
    assert_eq!(call.exit_code, Some(5));
    assert!(
        call.end.unwrap() >= call.start && call.start > 1.0e9,
        "{call:?}"
    );
}

// ---- known-hosts features libssh2 ignores (markers, patterns, key types) ----

/// `<type> <base64>` of the node's host key of that type, as the node serves it.
fn scanned_key(node: &Node, key_type: &str) -> String {
    let out = Command::new("ssh-keyscan")
        .args([
            "-T",
            "5",
            "-t",
            key_type,
            "-p",
            &node.port().to_string(),
            node.host(),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .unwrap_or_else(|| panic!("ssh-keyscan found no {key_type} key on {}", node.host()));
    let fields: Vec<&str> = line.split_whitespace().collect();
    format!("{} {}", fields[1], fields[2])
}

/// A freshly generated key pair of that type in `dir`; returns the private key's path.
fn generate_key(dir: &Path, name: &str, key_type: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", key_type, "-N", "", "-C", name, "-f"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success(), "ssh-keygen -t {key_type}");
    path
}

/// `<type> <base64>` of a generated key's public half.
fn public_key(private: &Path) -> String {
    let text = fs::read_to_string(private.with_extension("pub")).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    format!("{} {}", fields[0], fields[1])
}

fn fingerprint_of(private: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(private.with_extension("pub"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string()
}

#[test]
fn revoked_key_is_refused_even_beside_a_normal_line_for_it() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let key = scanned_key(node, "ed25519");
    let host = node.host();
    let known = format!("# ops\n@revoked {host} {key}\n{host} {key}\n");
    fs::write(fleet.known_hosts(), &known).unwrap();
    for policy in [HostKeyPolicy::AcceptNew, HostKeyPolicy::Strict] {
        let mut spec = password_spec(&fleet, node);
        spec.host_key_policy = policy;
        let err = SshConnection::connect(&spec).expect_err("a revoked key must be refused");
        assert!(
            matches!(err, TransportError::HostKeyRevoked { line: 2, .. }),
            "{err:?}"
        );
        assert!(!err.is_transient(), "{err:?}");
        let msg = err.to_string();
        let path = fleet.known_hosts().display().to_string();
        assert!(msg.contains("@revoked"), "{msg}");
        assert!(msg.contains(&format!("line 2 of {path}")), "{msg}");
        assert!(msg.contains(&node.host_key_fingerprint()), "{msg}");
        assert!(msg.contains(&format!("{host}:22")), "{msg}");
    }
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), known);
}

#[test]
fn wildcard_line_with_another_key_is_refused_and_nothing_recorded() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let other = public_key(&generate_key(fleet.dir(), "other", "ed25519"));
    let known = format!("127.*.*.* {other}\n");
    fs::write(fleet.known_hosts(), &known).unwrap();
    let err = SshConnection::connect(&password_spec(&fleet, node))
        .expect_err("a host a pattern covers is not unknown");
    assert!(
        matches!(err, TransportError::HostKeyNotVerifiable { line: 1, .. }),
        "{err:?}"
    );
    assert!(!err.is_transient(), "{err:?}");
    let msg = err.to_string();
    let path = fleet.known_hosts().display().to_string();
    assert!(msg.contains("pattern `127.*.*.*`"), "{msg}");
    assert!(msg.contains(&format!("line 1 of {path}")), "{msg}");
    assert!(msg.contains(&node.host_key_fingerprint()), "{msg}");
    assert!(
        msg.contains(&format!("ssh-keyscan -p 22 {} >> {path}", node.host())),
        "{msg}"
    );
    assert!(msg.contains("--host-key-policy off"), "{msg}");
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), known);
}

#[test]
fn wildcard_line_with_the_right_key_is_trusted_and_negation_excludes_a_host() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let key = scanned_key(node, "ed25519");
    let mut spec = password_spec(&fleet, node);
    spec.host_key_policy = HostKeyPolicy::Strict;
    fs::write(
        fleet.known_hosts(),
        format!("10.0.0.1,127.*,!127.0.0.1 {key}\n"),
    )
    .unwrap();
    connect(&spec);

    // `!host` takes the node out of the pattern: it is unknown again.
    fs::write(
        fleet.known_hosts(),
        format!("127.*,!{} {key}\n", node.host()),
    )
    .unwrap();
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyUnknown { .. }),
        "{err:?}"
    );
}

#[test]
fn cert_authority_line_for_the_host_is_refused_and_nothing_recorded() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let ca = public_key(&generate_key(fleet.dir(), "ca", "ed25519"));
    let known = format!("# fleet CA\n\n@cert-authority 127.*,{} {ca}\n", node.host());
    fs::write(fleet.known_hosts(), &known).unwrap();
    let err = SshConnection::connect(&password_spec(&fleet, node))
        .expect_err("a host a CA line covers is not unknown");
    assert!(
        matches!(err, TransportError::HostKeyNotVerifiable { line: 3, .. }),
        "{err:?}"
    );
    assert!(!err.is_transient(), "{err:?}");
    let msg = err.to_string();
    let path = fleet.known_hosts().display().to_string();
    assert!(msg.contains("@cert-authority"), "{msg}");
    assert!(msg.contains(&format!("line 3 of {path}")), "{msg}");
    assert!(msg.contains("ssh-keyscan"), "{msg}");
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), known);
}

#[test]
fn recorded_ecdsa_key_is_asked_for_when_the_node_also_has_ed25519() {
    // The node's extra ECDSA host key lives outside the fleet dir, which only exists
    // once the fleet has started (and never under /tmp, which each node replaces).
    let keys = tempfile::tempdir_in("/var/tmp").unwrap();
    let ecdsa = generate_key(keys.path(), "ssh_host_ecdsa_key", "ecdsa");
    let fleet = Fleet::builder()
        .nodes(1)
        .node_option(
            0,
            NodeOpt::SshdConfig(format!("HostKey {}", ecdsa.display())),
        )
        .start();
    let node = fleet.node(0);
    let host = node.host();
    assert!(scanned_key(node, "ed25519").starts_with("ssh-ed25519 "));

    let mut spec = password_spec(&fleet, node);
    spec.host_key_policy = HostKeyPolicy::Strict;
    fs::write(
        fleet.known_hosts(),
        format!("{host} {}\n", public_key(&ecdsa)),
    )
    .unwrap();
    let conn = connect(&spec);
    assert_eq!(conn.host_key_fingerprint(), fingerprint_of(&ecdsa));
    drop(conn);

    // A different ECDSA key recorded: the node presents its own ECDSA key, which is a
    // changed key, not a reason to fall back to ed25519.
    let other = public_key(&generate_key(fleet.dir(), "other", "ecdsa"));
    fs::write(fleet.known_hosts(), format!("{host} {other}\n")).unwrap();
    let err = SshConnection::connect(&spec).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyChanged { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&fingerprint_of(&ecdsa)), "{err}");
}

#[test]
fn recorded_ecdsa_key_for_an_ed25519_only_node_is_a_changed_key() {
    let fleet = Fleet::builder().nodes(1).start();
    let node = fleet.node(0);
    let other = public_key(&generate_key(fleet.dir(), "other", "ecdsa"));
    let known = format!("{} {other}\n", node.host());
    fs::write(fleet.known_hosts(), &known).unwrap();
    let err = SshConnection::connect(&password_spec(&fleet, node)).unwrap_err();
    assert!(
        matches!(err, TransportError::HostKeyChanged { .. }),
        "{err:?}"
    );
    assert_eq!(fs::read_to_string(fleet.known_hosts()).unwrap(), known);
}
