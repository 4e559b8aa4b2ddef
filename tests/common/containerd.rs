//! A real containerd (Debian's package) for one fleet node, started by the test harness.
//!
//! ```ignore
//! let runtime = Containerd::start(fleet.node(0));
//! // keadmCmd: join ... --remote-runtime-endpoint=unix:///tmp/containerd/containerd.sock
//! assert!(runtime.images().contains(&"docker.io/kubeedge/installation-package:v1.23.1".into()));
//! ```
//!
//! containerd runs outside the node's pid and mount namespaces (runc cannot start a
//! container from inside a node's own pid namespace), as a child of the test, with its
//! root, state and socket in the node's private /tmp: the node sees its socket at
//! `/tmp/containerd/containerd.sock`, and no two nodes share anything. Nothing it does can
//! reach a registry: it runs in a network namespace of its own that has nothing but a
//! loopback device that is down, and its CRI registry configuration sends every registry
//! (`_default`, docker.io, registry.k8s.io) to a loopback address besides.
//!
//! Inside the node, `/etc/containerd/config.toml` is this containerd's config (a bind
//! mount in the node's mount namespace only), so `containerd config dump` on the node
//! reports the sandbox image this containerd would ask for, as on a real node.
//!
//! Dropping it kills the containerd it started, by pid.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::fleet::Node;

/// The sandbox image these containerds are configured with (containerd 1.6's default).
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.6";

/// The runtime endpoint keadm join is given on a node with a [`Containerd`].
pub const ENDPOINT: &str = "unix:///tmp/containerd/containerd.sock";

/// Registries answer here: a loopback port nothing listens on.
const NOWHERE: &str = "http://127.0.0.1:9";

pub struct Containerd {
    child: Child,
    /// The host-side path of the socket.
    socket: PathBuf,
    log: PathBuf,
}

impl Containerd {
    /// Starts containerd for `node` and waits until its socket answers.
    pub fn start(node: &Node) -> Containerd {
        let base = node.tmp_path("containerd");
        let certs = base.join("certs.d");
        for host in ["_default", "docker.io", "registry.k8s.io"] {
            fs::create_dir_all(certs.join(host)).unwrap();
            fs::write(
                certs.join(host).join("hosts.toml"),
                format!("server = \"{NOWHERE}\"\n[host.\"{NOWHERE}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
            )
            .unwrap();
        }
        let socket = base.join("containerd.sock");
        let config = base.join("config.toml");
        fs::write(
            &config,
            format!(
                "version = 2\n\
                 root = \"{root}\"\n\
                 state = \"{state}\"\n\
                 disabled_plugins = [\"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.aufs\", \"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", \"io.containerd.tracing.processor.v1.otlp\"]\n\
                 [grpc]\n  address = \"{socket}\"\n\
                 [ttrpc]\n  address = \"{socket}.ttrpc\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{SANDBOX_IMAGE}\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"{certs}\"\n",
                root = base.join("root").display(),
                state = base.join("state").display(),
                socket = socket.display(),
                certs = certs.display(),
            ),
        )
        .unwrap();
        let log = base.join("containerd.log");
        let child = Command::new("unshare")
            .args(["--net", "--", "containerd", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start containerd (apt-get install containerd)");
        let runtime = Containerd { child, socket, log };
        runtime.wait_ready();
        // The node reads this containerd's config where containerd's tools look for it.
        let out = node.shell(&format!(
            "[ -e /etc/containerd/config.toml ] && mount --bind '{}' /etc/containerd/config.toml",
            config.display()
        ));
        if !out.status.success() {
            eprintln!(
                "containerd: /etc/containerd/config.toml could not be replaced on the node; it reports the host's sandbox image"
            );
        }
        runtime
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.socket.exists() && self.ctr(&["version"]).status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not start:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `ctr` against this containerd, in CRI's `k8s.io` namespace, from the host.
    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    }

    /// The image names it holds (`ctr images ls -q`), image ids left out.
    pub fn images(&self) -> Vec<String> {
        let out = self.ctr(&["images", "ls", "-q"]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("sha256:"))
            .map(str::to_string)
            .collect()
    }

    /// Imports the archive at `path` (a host path), as an operator would by hand.
    pub fn import(&self, path: &std::path::Path) {
        let out = self.ctr(&["images", "import", path.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
    }

    /// Its log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on the containerd this harness started.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
