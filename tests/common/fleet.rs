//! A fleet of real OpenSSH `sshd` "edge nodes" on loopback, for integration tests.
//!
//! ```ignore
//! let fleet = Fleet::builder().nodes(3).node_option(1, NodeOpt::Uname("aarch64")).start();
//! let node = fleet.node(0);
//! // connect to node.host():node.port() as root with fleet.root_password()
//! // or fleet.private_key(KeyKind::Ed25519); read node.tmp_path("kubeedge/x") afterwards.
//! ```
//!
//! Each node is one `sshd -D` started as
//! `unshare --mount --pid --fork --kill-child --mount-proc --propagation private -- sh -c '...'`,
//! whose script bind-mounts, inside that node's private mount namespace only:
//! the node's own dir over `/tmp` (keadm's fixed remote dir would collide otherwise), a
//! copy of `/etc/shadow` with a known root password, an empty dir over `/root` (a small,
//! pristine HOME), and optionally a `uname`/`arch` wrapper that reports another machine
//! name. `sh` then execs sshd, which becomes pid 1 of the node's pid namespace: killing it
//! from outside takes every session and command of that node with it.
//!
//! Addresses: node n of this process listens on `127.B.C.D:22` where B is derived from
//! the process id (10..=249) and C.D from a process-wide counter, so test threads and
//! concurrently running test binaries pick different addresses. Before use the address
//! is probed by binding it; if sshd still fails to start (someone took it meanwhile) the
//! node is retried on the next address. Port 22 keeps configs realistic ("host only").
//! `NodeOpt::Ipv6` nodes listen on `[::1]:<free port>` instead.
//!
//! Site LANs (`Fleet::builder().nodes(4).site_lans(&[0, 0, 0, 1])`, the relay tests):
//! each node's sshd also runs in a network namespace of its own (`nsenter --net` before
//! the `unshare` above), whose `eth0` is a veth to its LAN's bridge; each LAN's bridge is
//! in a namespace the fixture made, and the test process (the control host, in the root
//! namespace) reaches each LAN through one veth pair, whose root end holds `.1` of the
//! LAN's subnet. Rules (tests/common/lan.rs): addresses only from 198.18.0.0/15, one
//! /24 per LAN picked under a lock among those the root namespace does not use; a node
//! listens on `.(10 + i):22` and its only route is its LAN's /24 (no default route, so
//! nodes of two LANs cannot reach each other); nothing is bridged or routed to the
//! machine's interfaces; every namespace and root-side interface is named
//! `kbf<pid>-<fleet>...`, removed when the fleet drops, and what a crashed test process
//! left is removed by the next one. A machine that cannot make them fails the test,
//! saying what it needs (root, iproute2, veth and bridge support).
//!
//! State lives in a temp dir under `/var/tmp` (never under `/tmp`, which each node
//! replaces with its own). Dropping the fleet kills exactly the processes it started,
//! by pid, and removes the dir.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::lan::SiteLans;
use keadm_batch::redact::Secret;
use keadm_batch::transport::{Auth, ConnectSpec, Endpoint, HostKeyPolicy};

const SSHD: &str = "/usr/sbin/sshd";
const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";
/// How long a node may take to accept TCP after its sshd was spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const ROOT_PASSWORD: &str = "edge-root-pw-1";
const KEY_PASSPHRASE: &str = "edge-key-passphrase";

/// Per-node options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeOpt {
    /// `uname -m` (and `uname -a`, `arch`) report this machine name instead of the real one.
    Uname(&'static str),
    /// No `Subsystem sftp` line: SFTP requests are refused, as on images without sftp-server.
    NoSftp,
    /// Listen on `[::1]` and a free port instead of `127.x.y.z:22`.
    Ipv6,
    /// An extra sshd_config line, e.g. `"MaxSessions 2"`; it overrides the fleet's defaults
    /// (a `Subsystem sftp` line replaces the fleet's sftp-server).
    SshdConfig(String),
    /// The non-root user [`TEST_USER`] may use sudo on this node (a sudoers copy
    /// bind-mounted in the node's namespace only).
    Sudo(Sudo),
}

/// How [`TEST_USER`] may use sudo on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sudo {
    Passwordless,
    WithPassword,
    /// Exactly these sudoers rules (each line is prefixed with the user name), e.g. a
    /// password for everything but `sh`.
    Rules(&'static [&'static str]),
}

impl Sudo {
    fn rules(self) -> &'static [&'static str] {
        match self {
            Sudo::Passwordless => &["ALL=(ALL) NOPASSWD: ALL"],
            Sudo::WithPassword => &["ALL=(ALL) ALL"],
            Sudo::Rules(rules) => rules,
        }
    }
}

/// A non-root login present on every node (a passwd copy in each node's namespace; the
/// machine's own user database is never touched). Password [`TEST_USER_PASSWORD`].
pub const TEST_USER: &str = "kbuser";
pub const TEST_USER_PASSWORD: &str = "edge-user-pw-1";
pub const TEST_USER_ID: u32 = 1500;

/// The client keys a fleet authorizes for root (generated on first use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// OpenSSH-format ed25519, no passphrase.
    Ed25519,
    /// OpenSSH-format ed25519 encrypted with [`Fleet::key_passphrase`].
    Ed25519Passphrase,
    /// RSA 2048 in the old PEM format, no passphrase.
    RsaPem,
}

#[derive(Default)]
pub struct FleetBuilder {
    nodes: usize,
    all: Vec<NodeOpt>,
    per_node: HashMap<usize, Vec<NodeOpt>>,
    lans: Option<Vec<usize>>,
}

impl FleetBuilder {
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// An option for node `i` (0-based).
    pub fn node_option(mut self, i: usize, opt: NodeOpt) -> Self {
        self.per_node.entry(i).or_default().push(opt);
        self
    }

    /// An option for every node.
    pub fn all_nodes(mut self, opt: NodeOpt) -> Self {
        self.all.push(opt);
        self
    }

    /// Puts node `i` on site LAN `lans[i]` (numbered from 0), in network namespaces the
    /// fleet makes, instead of on loopback: see the module doc. One entry per node.
    pub fn site_lans(mut self, lans: &[usize]) -> Self {
        self.lans = Some(lans.to_vec());
        self
    }

    /// Starts every node and waits until each accepts TCP. Panics with the node's log if
    /// one cannot start: a test cannot proceed without its fleet.
    pub fn start(self) -> Fleet {
        let dir = tempfile::Builder::new()
            .prefix("keadm-fleet-")
            .tempdir_in("/var/tmp")
            .expect("create the fleet dir under /var/tmp");
        let root = dir.path().to_path_buf();
        fs::create_dir_all(root.join("keys")).unwrap();
        let authorized_keys = root.join("authorized_keys");
        fs::write(&authorized_keys, "").unwrap();
        let shadow = root.join("shadow");
        write_shadow_copy(&shadow, ROOT_PASSWORD);
        write_user_db_copies(&root);
        // sshd refuses to start without its privilege-separation dir. It is normally made
        // by the service manager; creating it is what starting sshd on this machine needs.
        fs::create_dir_all("/run/sshd").expect("create /run/sshd");

        let shared = Shared {
            root,
            authorized_keys,
            shadow,
        };
        // Made before the nodes, so that it drops after them should a node fail to start.
        let lans = self.lans.as_ref().map(|lans| {
            assert_eq!(
                lans.len(),
                self.nodes,
                "fleet: site_lans needs one LAN number per node"
            );
            SiteLans::create(lans)
        });
        let mut nodes = Vec::with_capacity(self.nodes);
        for i in 0..self.nodes {
            let mut opts = self.all.clone();
            opts.extend(self.per_node.get(&i).cloned().unwrap_or_default());
            let lan = lans
                .as_ref()
                .map(|l| (l.netns_path(i), l.address(i).to_string()));
            nodes.push(Node::create(&shared, i, opts, lan));
        }
        // Spawn all, then wait for all, so 20 nodes start in about the time of one.
        for node in &mut nodes {
            node.spawn();
        }
        for node in &mut nodes {
            node.wait_ready_or_retry();
        }
        Fleet {
            shared,
            nodes,
            lans,
            keys: Default::default(),
            _dir: dir,
        }
    }
}

struct Shared {
    root: PathBuf,
    authorized_keys: PathBuf,
    shadow: PathBuf,
}

pub struct Fleet {
    shared: Shared,
    nodes: Vec<Node>,
    /// After `nodes`: a namespace goes once no node runs in it.
    lans: Option<SiteLans>,
    keys: [OnceLock<PathBuf>; 3],
    // Dropped last (fields drop in order): the nodes are killed before their dirs go.
    _dir: tempfile::TempDir,
}

impl Fleet {
    pub fn builder() -> FleetBuilder {
        FleetBuilder::default()
    }

    /// One node on which [`TEST_USER`] may use sudo as `sudo` says.
    pub fn with_sudo(sudo: Sudo) -> Fleet {
        Fleet::builder()
            .nodes(1)
            .node_option(0, NodeOpt::Sudo(sudo))
            .start()
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    pub fn node_mut(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i]
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The fleet's site LANs, when it was built with [`FleetBuilder::site_lans`].
    pub fn lans(&self) -> Option<&SiteLans> {
        self.lans.as_ref()
    }

    /// Root's password on every node.
    pub fn root_password(&self) -> Secret {
        Secret::new(ROOT_PASSWORD)
    }

    /// How the transport logs in to `node` as root with the root password: the known-hosts
    /// file is the fleet's, new keys are recorded, no jump host.
    pub fn root_password_spec(&self, node: &Node) -> ConnectSpec {
        ConnectSpec {
            endpoint: node.endpoint(),
            username: "root".to_string(),
            auth: Auth::Password(self.root_password()),
            host_key_policy: HostKeyPolicy::AcceptNew,
            known_hosts: self.known_hosts(),
            connect_timeout: Duration::from_secs(10),
            keepalive_secs: 15,
            jump_connections: 1,
            jump: None,
            handshakes_per_host: keadm_batch::transport::DEFAULT_HANDSHAKES_PER_HOST,
        }
    }

    /// The passphrase of [`KeyKind::Ed25519Passphrase`].
    pub fn key_passphrase(&self) -> Secret {
        Secret::new(KEY_PASSPHRASE)
    }

    /// The fleet's own temp dir (outside every node's /tmp), for test files.
    pub fn dir(&self) -> &Path {
        &self.shared.root
    }

    /// A known-hosts path for the tool under test; not created. Nodes get fresh host
    /// keys every run, so they must never go to the real `~/.ssh/known_hosts`.
    pub fn known_hosts(&self) -> PathBuf {
        self.shared.root.join("known_hosts")
    }

    /// The private key of that kind, generated and authorized for root on first use.
    pub fn private_key(&self, kind: KeyKind) -> PathBuf {
        let slot = match kind {
            KeyKind::Ed25519 => 0,
            KeyKind::Ed25519Passphrase => 1,
            KeyKind::RsaPem => 2,
        };
        self.keys[slot]
            .get_or_init(|| {
                let (name, args): (&str, Vec<&str>) = match kind {
                    KeyKind::Ed25519 => ("id_ed25519", vec!["-t", "ed25519", "-N", ""]),
                    KeyKind::Ed25519Passphrase => (
                        "id_ed25519_pass",
                        vec!["-t", "ed25519", "-N", KEY_PASSPHRASE],
                    ),
                    KeyKind::RsaPem => (
                        "id_rsa_pem",
                        vec!["-t", "rsa", "-b", "2048", "-m", "PEM", "-N", ""],
                    ),
                };
                let path = self.shared.root.join("keys").join(name);
                run_ok(
                    Command::new("ssh-keygen")
                        .args(&args)
                        .args(["-q", "-C", name, "-f"])
                        .arg(&path),
                );
                let public = fs::read_to_string(path.with_extension("pub")).unwrap();
                // One short O_APPEND write per key: keys generated from several threads
                // at once cannot interleave.
                fs::OpenOptions::new()
                    .append(true)
                    .open(&self.shared.authorized_keys)
                    .unwrap()
                    .write_all(public.as_bytes())
                    .unwrap();
                path
            })
            .clone()
    }
}

/// One sshd "edge node".
pub struct Node {
    index: usize,
    host: String,
    port: u16,
    dir: PathBuf,
    opts: Vec<NodeOpt>,
    authorized_keys: PathBuf,
    shadow: PathBuf,
    child: Option<Child>,
    sshd_pid: Option<i32>,
    spawned_at: Instant,
    /// The node's network namespace (a path for `nsenter --net=`) on a site LAN; `None`
    /// on loopback.
    netns: Option<String>,
}

impl Node {
    fn create(
        shared: &Shared,
        index: usize,
        opts: Vec<NodeOpt>,
        lan: Option<(String, String)>,
    ) -> Node {
        let dir = shared.root.join(format!("node{index}"));
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        // A real /tmp: world-writable and sticky.
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
        let home = dir.join("home");
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).unwrap();
        let mut node = Node {
            index,
            host: String::new(),
            port: 0,
            dir,
            opts,
            authorized_keys: shared.authorized_keys.clone(),
            shadow: shared.shadow.clone(),
            child: None,
            sshd_pid: None,
            spawned_at: Instant::now(),
            netns: None,
        };
        node.new_host_key();
        node.write_uname_wrappers();
        let (host, port) = match lan {
            Some((netns, address)) => {
                assert!(
                    !node.opts.contains(&NodeOpt::Ipv6),
                    "fleet: a node on a site LAN has an IPv4 address"
                );
                // The LAN's address is the node's alone: nothing else can take it.
                node.netns = Some(netns);
                (address, 22)
            }
            None => allocate_address(node.opts.contains(&NodeOpt::Ipv6)),
        };
        node.host = host;
        node.port = port;
        node
    }

    /// The address sshd listens on, unbracketed (`127.20.0.2`, `::1`).
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(self.host.clone(), self.port)
    }

    /// The host-side path of `rel` inside this node's `/tmp`.
    pub fn tmp_path(&self, rel: &str) -> PathBuf {
        self.dir.join("tmp").join(rel.trim_start_matches('/'))
    }

    /// A path under root's home on the node (its own, bind-mounted over /root), as seen
    /// from the test.
    pub fn root_home_path(&self, rel: &str) -> PathBuf {
        self.dir.join("home").join(rel.trim_start_matches('/'))
    }

    /// The host-side pid of this node's sshd (pid 1 of its pid namespace).
    pub fn sshd_pid(&self) -> i32 {
        self.sshd_pid.expect("the node is not running")
    }

    /// The node's sshd log (`sshd -E`), for assertions and failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    /// The host key's fingerprint as OpenSSH prints it (`SHA256:...`).
    pub fn host_key_fingerprint(&self) -> String {
        let out = run_ok(
            Command::new("ssh-keygen")
                .arg("-lf")
                .arg(self.host_key_path().with_extension("pub")),
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }

    /// The node's line for a known-hosts file (`host key` on port 22, `[host]:port key`
    /// elsewhere), for runs with `--host-key-policy strict`.
    pub fn known_hosts_line(&self) -> String {
        let public = fs::read_to_string(self.host_key_path().with_extension("pub")).unwrap();
        let key: Vec<&str> = public.split_whitespace().take(2).collect();
        let name = if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        };
        format!("{name} {}\n", key.join(" "))
    }

    /// Makes the node's `tool` a stub that fails (`/bin/false` bound over it, in the
    /// node's mount namespace only), as on a node whose tool is missing or broken.
    pub fn hide_tool(&self, tool: &str) {
        self.shell_ok(&format!("mount --bind /bin/false \"$(command -v {tool})\""));
    }

    /// [`Node::shell`], insisting that `script` worked (the test's own setup of the node).
    pub fn shell_ok(&self, script: &str) {
        let out = self.shell(script);
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `sh -c script` inside the node's namespaces (its /tmp, its uname, its network
    /// on a site LAN), as root.
    pub fn shell(&self, script: &str) -> Output {
        Command::new("nsenter")
            .args([
                "-t",
                &self.sshd_pid().to_string(),
                "-m",
                "-p",
                "-n",
                "--",
                "sh",
                "-c",
                script,
            ])
            .output()
            .expect("run nsenter")
    }

    /// The sshd processes serving this node's connections: every `sshd` below the
    /// listener (the per-connection monitor and its session child), not the listener.
    pub fn session_sshd_pids(&self) -> Vec<i32> {
        let listener = self.sshd_pid();
        let mut parents: HashMap<i32, Vec<(i32, String)>> = HashMap::new();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((head, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let comm = head
                .split_once('(')
                .map(|(_, c)| c)
                .unwrap_or("")
                .to_string();
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                parents.entry(ppid).or_default().push((pid, comm));
            }
        }
        let mut found = Vec::new();
        let mut queue = vec![listener];
        while let Some(parent) = queue.pop() {
            for (pid, comm) in parents.get(&parent).into_iter().flatten() {
                if comm == "sshd" {
                    found.push(*pid);
                    queue.push(*pid);
                }
            }
        }
        found
    }

    /// Kills the sshd processes serving this node's open connections (as an sshd crash
    /// or an OOM kill would), leaving the listener up. Returns the pids killed.
    pub fn kill_session_sshds(&self) -> Vec<i32> {
        let pids = self.session_sshd_pids();
        for pid in &pids {
            // SAFETY: plain kill(2) on sshd processes of a node this fleet started.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        pids
    }

    /// Kills the node (sshd and everything in its pid namespace) and waits for it.
    pub fn kill_sshd(&mut self) {
        let pid = self.sshd_pid.take();
        if let Some(pid) = pid {
            // SAFETY: plain kill(2) on a pid we started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if let Some(mut child) = self.child.take() {
            // `unshare --kill-child` forwards its death to sshd, should the pid above
            // not have been found.
            let _ = child.kill();
            let _ = child.wait();
        }
        // SIGKILL is asynchronous: wait until sshd is gone (or a zombie, whose sockets
        // are closed), so a restart never finds the old listener still answering.
        if let Some(pid) = pid {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                match fs::read_to_string(format!("/proc/{pid}/stat")) {
                    Ok(stat)
                        if !stat
                            .rsplit_once(')')
                            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')) =>
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    _ => break,
                }
            }
        }
    }

    /// Starts the node again on the same address, keeping its host key.
    pub fn restart(&mut self) {
        self.kill_sshd();
        self.spawn();
        self.wait_ready_or_retry();
    }

    /// Starts the node again on the same address with a freshly generated host key, as
    /// a reinstalled (or impersonated) node would present.
    pub fn restart_with_new_host_key(&mut self) {
        self.kill_sshd();
        self.new_host_key();
        self.spawn();
        self.wait_ready_or_retry();
    }

    fn host_key_path(&self) -> PathBuf {
        self.dir.join("ssh_host_ed25519_key")
    }

    fn new_host_key(&self) {
        let key = self.host_key_path();
        let _ = fs::remove_file(&key);
        let _ = fs::remove_file(key.with_extension("pub"));
        run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "node-host-key", "-f"])
                .arg(&key),
        );
    }

    /// The `uname` wrapper of a node started with [`NodeOpt::Uname`]; a test may rewrite
    /// it (the file is bind-mounted, so the node sees the new text at once).
    pub fn uname_wrapper(&self) -> PathBuf {
        self.dir.join("uname")
    }

    fn fake_uname(&self) -> Option<&'static str> {
        self.opts.iter().find_map(|o| match o {
            NodeOpt::Uname(m) => Some(*m),
            _ => None,
        })
    }

    fn write_uname_wrappers(&self) {
        let Some(machine) = self.fake_uname() else {
            return;
        };
        // Mount points for the real binary (bound here inside the namespace before the
        // wrapper hides it).
        fs::write(self.dir.join("uname.real"), "").unwrap();
        let real = self.dir.join("uname.real");
        let uname = format!(
            "#!/bin/sh\n# Fake machine name: the real uname's output with the real machine name replaced.\n\
             real_m=$('{real}' -m)\nout=$('{real}' \"$@\") || exit $?\nprintf '%s\\n' \"$out\" | sed \"s/$real_m/{machine}/g\"\n",
            real = real.display()
        );
        write_exec(&self.dir.join("uname"), &uname);
        write_exec(
            &self.dir.join("arch"),
            &format!("#!/bin/sh\necho {machine}\n"),
        );
    }

    fn write_config(&self) -> PathBuf {
        let listen = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        // sshd uses the first value it reads for each keyword, so the test's own lines
        // go first and override the defaults below.
        let mut cfg = String::new();
        for opt in &self.opts {
            if let NodeOpt::SshdConfig(line) = opt {
                cfg.push_str(line);
                cfg.push('\n');
            }
        }
        cfg.push_str(&format!(
            "ListenAddress {listen}\n\
             HostKey {hostkey}\n\
             PidFile none\n\
             UsePAM no\n\
             StrictModes no\n\
             PermitRootLogin yes\n\
             PasswordAuthentication yes\n\
             KbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\n\
             AuthorizedKeysFile {keys} .ssh/authorized_keys\n\
             UseDNS no\n\
             PrintMotd no\n\
             PrintLastLog no\n\
             MaxSessions 50\n\
             LogLevel VERBOSE\n",
            hostkey = self.host_key_path().display(),
            keys = self.authorized_keys.display(),
        ));
        // MaxStartups is the exception: sshd keeps the last value it reads, so the
        // default goes in only when the test gives none.
        let own_startups = self
            .opts
            .iter()
            .any(|o| matches!(o, NodeOpt::SshdConfig(line) if line.starts_with("MaxStartups")));
        if !own_startups {
            cfg.push_str("MaxStartups 200\n");
        }
        // sshd refuses a second `Subsystem sftp`: a test's own (a wrapper) replaces ours.
        let own_sftp = self
            .opts
            .iter()
            .any(|o| matches!(o, NodeOpt::SshdConfig(line) if line.starts_with("Subsystem sftp")));
        if !self.opts.contains(&NodeOpt::NoSftp) && !own_sftp {
            cfg.push_str(&format!("Subsystem sftp {SFTP_SERVER}\n"));
        }
        let path = self.dir.join("sshd_config");
        fs::write(&path, cfg).unwrap();
        path
    }

    fn script(&self, config: &Path) -> String {
        let d = self.dir.display();
        let mut s = format!(
            "set -e\n\
             mount --bind '{d}/tmp' /tmp\n\
             mount --bind '{shadow}' /etc/shadow\n\
             mount --bind '{d}/home' /root\n\
             mount --bind '{root}/passwd' /etc/passwd\n\
             mount --bind '{root}/group' /etc/group\n",
            shadow = self.shadow.display(),
            root = self.shadow.parent().unwrap().display(),
        );
        if let Some(rules) = self.opts.iter().find_map(|o| match o {
            NodeOpt::Sudo(sudo) => Some(sudo.rules()),
            _ => None,
        }) {
            let sudoers = self.dir.join("sudoers");
            write_sudoers_copy(&sudoers, rules);
            // sudo's credential cache (keyed by the parent's pid and start time) is the
            // node's own, as on a real machine: shared, one node's sudo could find the
            // record of another node's shell with the same pid in its own pid namespace,
            // started in the same clock tick, and skip the password that the next channel
            // then lacks.
            s.push_str(&format!(
                "mount --bind '{}' /etc/sudoers\n\
                 mkdir -p /run/sudo\n\
                 mount -t tmpfs -o mode=0711 keadm-batch-test-sudo /run/sudo\n",
                sudoers.display()
            ));
        }
        if self.fake_uname().is_some() {
            s.push_str(&format!(
                "mount --bind /usr/bin/uname '{d}/uname.real'\n\
                 mount --bind '{d}/uname' /usr/bin/uname\n\
                 mount --bind '{d}/arch' /usr/bin/arch\n"
            ));
        }
        s.push_str(&format!(
            "exec {SSHD} -D -f '{cfg}' -E '{d}/sshd.log'\n",
            cfg = config.display()
        ));
        s
    }

    fn spawn(&mut self) {
        let config = self.write_config();
        let script = self.script(&config);
        let stderr = fs::File::create(self.dir.join("start.log")).unwrap();
        // On a site LAN, nsenter joins the node's network namespace and execs unshare,
        // which stays the child this fixture waits for and kills.
        let mut command = match &self.netns {
            Some(netns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={netns}")).args(["--", "unshare"]);
                c
            }
            None => Command::new("unshare"),
        };
        let child = command
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child=SIGKILL",
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn unshare");
        self.child = Some(child);
        self.sshd_pid = None;
        self.spawned_at = Instant::now();
    }

    /// Waits until the node accepts TCP. If its sshd died (most likely someone else took
    /// the address between our probe and its bind), retries on a new address.
    fn wait_ready_or_retry(&mut self) {
        for attempt in 0..3 {
            match self.wait_ready() {
                Ok(()) => {
                    self.sshd_pid = Some(self.find_sshd_pid());
                    return;
                }
                // A site LAN's address is the node's alone: nobody can have taken it.
                Err(why) if attempt < 2 && self.netns.is_none() => {
                    eprintln!(
                        "fleet: node {} on {}:{} did not start ({why}); retrying on a new address",
                        self.index, self.host, self.port
                    );
                    self.kill_sshd();
                    let (host, port) = allocate_address(self.opts.contains(&NodeOpt::Ipv6));
                    self.host = host;
                    self.port = port;
                    self.spawn();
                }
                Err(why) => panic!(
                    "fleet: node {} on {}:{} did not start: {why}\nstart.log:\n{}\nsshd.log:\n{}",
                    self.index,
                    self.host,
                    self.port,
                    fs::read_to_string(self.dir.join("start.log")).unwrap_or_default(),
                    self.log()
                ),
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let addr: SocketAddr = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .unwrap()
            .next()
            .unwrap();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Err(format!("its process exited with {status}"));
            }
            if self.spawned_at.elapsed() > READY_TIMEOUT {
                return Err(format!("it did not accept TCP within {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The forked child of `unshare` is `sh`, which exec'd sshd.
    fn find_sshd_pid(&self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(pid) = self.try_find_sshd_pid() {
                return pid;
            }
            if Instant::now() > deadline {
                panic!("fleet: cannot find the sshd of node {}", self.index);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn try_find_sshd_pid(&self) -> Option<i32> {
        let parent = self.child.as_ref().unwrap().id() as i32;
        let children = fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
        {
            return Some(pid);
        }
        // Kernels without CONFIG_PROC_CHILDREN: scan for the process whose parent it is.
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Fields after the parenthesised command name: state, ppid, ...
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            if rest
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<i32>().ok())
                == Some(parent)
            {
                return Some(pid);
            }
        }
        None
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill_sshd();
    }
}

/// A listener that completes TCP handshakes (the kernel does, from its backlog) but never
/// accepts or speaks: an SSH client connecting to it waits for a banner forever.
pub struct Tarpit {
    listener: TcpListener,
}

impl Tarpit {
    pub fn start() -> Tarpit {
        Tarpit {
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        let addr = self.listener.local_addr().unwrap();
        Endpoint::new(addr.ip().to_string(), addr.port())
    }
}

/// A loopback endpoint nothing listens on, for "connection refused". It is a fresh node
/// address of this process (probed free, never given to a node), not a released
/// ephemeral port on 127.0.0.1, which a parallel test's bind(0) could pick up again.
/// A loopback port that accepts every TCP connection and closes it at once, for the
/// test process's life: a join's cloudcore ports there answer pre-flight's check from the
/// node, and the checks before the run get no answer from them, so they ask nothing.
pub fn closing_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    port
}

pub fn refused_endpoint() -> Endpoint {
    let (host, port) = allocate_address(false);
    Endpoint::new(host, port)
}

static NEXT_ADDRESS: AtomicU32 = AtomicU32::new(0);

/// Picks a free loopback address for a node; see the module doc.
fn allocate_address(ipv6: bool) -> (String, u16) {
    if ipv6 {
        let listener = TcpListener::bind("[::1]:0").expect("bind [::1]:0 (is IPv6 loopback up?)");
        return ("::1".to_string(), listener.local_addr().unwrap().port());
    }
    let b = 10 + std::process::id() % 240;
    for _ in 0..1000 {
        let n = NEXT_ADDRESS.fetch_add(1, Ordering::Relaxed);
        let host = format!("127.{b}.{}.{}", (n / 250) % 256, 2 + n % 250);
        match TcpListener::bind((host.as_str(), 22)) {
            Ok(_) => return (host, 22),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // Not root: any free port on that address.
                let l = TcpListener::bind((host.as_str(), 0)).unwrap();
                return (host, l.local_addr().unwrap().port());
            }
            Err(_) => continue,
        }
    }
    panic!("fleet: no free loopback address found");
}

/// Copies of /etc/passwd and /etc/group with [`TEST_USER`] added.
fn write_user_db_copies(root: &Path) {
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    fs::write(
        root.join("passwd"),
        format!("{passwd}{TEST_USER}:x:{TEST_USER_ID}:{TEST_USER_ID}:keadm-batch test user:/tmp:/bin/sh\n"),
    )
    .unwrap();
    let group = fs::read_to_string("/etc/group").unwrap();
    fs::write(
        root.join("group"),
        format!("{group}{TEST_USER}:x:{TEST_USER_ID}:\n"),
    )
    .unwrap();
    for name in ["passwd", "group"] {
        fs::set_permissions(root.join(name), fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// A sudoers copy granting [`TEST_USER`] sudo by `rules` (sudo applies the last match).
fn write_sudoers_copy(path: &Path, rules: &[&str]) {
    let original = fs::read_to_string("/etc/sudoers").unwrap_or_default();
    let rules: String = rules.iter().map(|r| format!("{TEST_USER} {r}\n")).collect();
    fs::write(path, format!("{original}\n{rules}")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o440)).unwrap();
}

fn password_hash(password: &str) -> String {
    let mut child = Command::new("openssl")
        .args(["passwd", "-6", "-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run openssl passwd");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let mut hash = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut hash)
        .unwrap();
    assert!(child.wait().unwrap().success(), "openssl passwd failed");
    hash.trim().to_string()
}

fn write_shadow_copy(path: &Path, password: &str) {
    let hash = password_hash(password);
    let original = fs::read_to_string("/etc/shadow").expect("read /etc/shadow (tests run as root)");
    let user_hash = password_hash(TEST_USER_PASSWORD);
    let mut out = String::new();
    for line in original.lines() {
        match line.split_once(':') {
            Some(("root", rest)) => {
                let rest = rest.split_once(':').map(|(_, r)| r).unwrap_or("");
                out.push_str(&format!("root:{hash}:{rest}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push_str(&format!("{TEST_USER}:{user_hash}:20000:0:99999:7:::\n"));
    fs::write(path, out).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o640)).unwrap();
}

fn write_exec(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
