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
//! `restrict_oom_score_adj` keeps containers at containerd's own OOM score: CRI gives a
//! pod sandbox -998, and lowering a score needs CAP_SYS_RESOURCE, which root lacks on
//! some test machines (runc then fails with "can't get final child's PID from pipe").
//!
//! Inside the node, `/etc/containerd/config.toml` is this containerd's config (a bind
//! mount in the node's mount namespace only), so `containerd config dump` on the node
//! reports the sandbox image this containerd would ask for, as on a real node.
//!
//! A node that reports another machine than the host's (`NodeOpt::Uname("aarch64")`)
//! also gets a `ctr` as built for that arch: the host's, whose imports take that
//! platform's content by default (`--platform linux/<arch>`), as the node's own ctr would.
//! Otherwise ctr would import for the host's platform and find nothing in an arm64
//! archive.
//!
//! Without containerd, ctr, runc or unshare on the machine the test fails, saying what to
//! install (scripts/setup.sh installs them): it never passes unseen.
//!
//! Dropping it kills the containerd it started, by pid.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::fake_keadm::FakeKeadm;
use super::fleet::Node;

/// The sandbox image these containerds are configured with (containerd 1.6's default).
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.6";

/// The runtime endpoint keadm join is given on a node with a [`Containerd`].
pub const ENDPOINT: &str = "unix:///tmp/containerd/containerd.sock";

/// Registries answer here: a loopback port nothing listens on.
const NOWHERE: &str = "http://127.0.0.1:9";

/// Where [`keadm_listing_images`] writes, in the node's private /tmp.
const SEEN_BY_KEADM: &str = "images-seen-by-keadm";

/// The tools the harness runs, and the Debian package of each.
const TOOLS: [(&str, &str); 4] = [
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("unshare", "util-linux"),
];

/// Fails the test, naming the packages, when a tool the harness needs is missing.
fn assert_installed() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|(tool, _)| !std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        .map(|(tool, package)| format!("{tool} (package {package})"))
        .collect();
    assert!(
        missing.is_empty(),
        "The air-gapped tests need a real containerd, and {} not installed. Run scripts/setup.sh (or apt-get install containerd runc).",
        missing.join(", ")
    );
}

/// A fake keadm that writes down the images its node's runtime holds when it runs (read
/// them with [`images_seen_by_keadm`]).
pub fn keadm_listing_images() -> FakeKeadm {
    FakeKeadm::new().runs(&format!(
        "ctr --address {} -n k8s.io images ls -q > /tmp/{SEEN_BY_KEADM}",
        ENDPOINT.trim_start_matches("unix://")
    ))
}

/// What [`keadm_listing_images`] wrote on `node`: the runtime's images when keadm ran.
pub fn images_seen_by_keadm(node: &Node) -> String {
    fs::read_to_string(node.tmp_path(SEEN_BY_KEADM))
        .unwrap_or_else(|e| panic!("keadm did not list the images on the node: {e}"))
}

pub struct Containerd {
    child: Child,
    /// The host-side path of the socket.
    socket: PathBuf,
    log: PathBuf,
}

impl Containerd {
    /// Starts containerd for `node` and waits until its socket answers.
    pub fn start(node: &Node) -> Containerd {
        Containerd::start_sharing(node, &[])
    }

    /// As [`Containerd::start`], configured with `sandbox_image` instead of
    /// [`SANDBOX_IMAGE`]: nodes whose runtimes want different pause images.
    pub fn start_with_sandbox_image(node: &Node, sandbox_image: &str) -> Containerd {
        Containerd::launch(node, &[], None, sandbox_image, None)
    }

    /// As [`Containerd::start`], listening on `socket` (a path under the node's /tmp, as
    /// the node sees it) instead of [`ENDPOINT`]'s: a containerd whose socket's name says
    /// nothing about what it is, as `grpc.address` in its config allows.
    pub fn start_at(node: &Node, socket: &str) -> Containerd {
        let rel = socket
            .strip_prefix("/tmp/")
            .unwrap_or_else(|| panic!("{socket} is not under the node's /tmp"));
        Containerd::launch(node, &[], Some(node.tmp_path(rel)), SANDBOX_IMAGE, None)
    }

    /// As [`Containerd::start`], with `shared`, `(host directory, path)` pairs, bound at
    /// `path` in a mount namespace of containerd's own: a node that has the same
    /// directory bound at the same path then sees what containerd's containers write
    /// through a host-path mount there (keadm's copy of edgecore into /usr/local/bin),
    /// while neither touches the host's `path`. A `path` under /etc need not exist on
    /// the machine: containerd's /etc is then an overlay of the machine's whose writes land
    /// in the node's /tmp, and `path` is made in it (keadm's upgrade copies edgecore into
    /// /etc/kubeedge/upgrade/<version>, which the machine has not).
    pub fn start_sharing(node: &Node, shared: &[(&Path, &str)]) -> Containerd {
        Containerd::launch(node, shared, None, SANDBOX_IMAGE, None)
    }

    /// As [`Containerd::start_sharing`], its CNI network configs read from `cni_conf_dir`
    /// (a host path) with Debian's plugins: with a config there, CRI reports the network
    /// ready and a real edgecore's node can turn Ready; with the directory empty, CRI
    /// says its CNI plugin is not initialized, and the node stays NotReady.
    pub fn start_with_cni(
        node: &Node,
        shared: &[(&Path, &str)],
        cni_conf_dir: &Path,
    ) -> Containerd {
        Containerd::launch(node, shared, None, SANDBOX_IMAGE, Some(cni_conf_dir))
    }

    /// Starts it with `shared` binds (see [`Containerd::start_sharing`]), its socket at
    /// `socket` (a host path) or the usual one, `sandbox_image` as its pause image, and
    /// its CNI configs in `cni_conf_dir` (see [`Containerd::start_with_cni`]) or CRI's
    /// default place.
    fn launch(
        node: &Node,
        shared: &[(&Path, &str)],
        socket: Option<PathBuf>,
        sandbox_image: &str,
        cni_conf_dir: Option<&Path>,
    ) -> Containerd {
        assert_installed();
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
        let socket = socket.unwrap_or_else(|| base.join("containerd.sock"));
        fs::create_dir_all(socket.parent().unwrap()).unwrap();
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
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{sandbox_image}\"\n  restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"{certs}\"\n{cni}",
                root = base.join("root").display(),
                state = base.join("state").display(),
                socket = socket.display(),
                certs = certs.display(),
                cni = cni_conf_dir.map_or(String::new(), |dir| format!(
                    "[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/usr/lib/cni\"\n  conf_dir = \"{}\"\n",
                    dir.display()
                )),
            ),
        )
        .unwrap();
        let log = base.join("containerd.log");
        let mut unshare = Command::new("unshare");
        if shared.is_empty() {
            unshare
                .args(["--net", "--", "containerd", "--config"])
                .arg(&config);
        } else {
            let etc = base.join("etc-overlay");
            let overlay_etc = if shared.iter().any(|(_, path)| path.starts_with("/etc/")) {
                format!(
                    "mkdir -p '{o}/up' '{o}/work' && mount -t overlay overlay -o 'lowerdir=/etc,upperdir={o}/up,workdir={o}/work' /etc && ",
                    o = etc.display()
                )
            } else {
                String::new()
            };
            let binds: String = shared
                .iter()
                .map(|(dir, path)| {
                    let make = if path.starts_with("/etc/") {
                        format!("mkdir -p '{path}' && ")
                    } else {
                        String::new()
                    };
                    format!("{make}mount --bind '{}' '{path}' && ", dir.display())
                })
                .collect();
            unshare
                .args(["--net", "--mount", "--propagation", "private", "--"])
                .args(["sh", "-c"])
                .arg(format!(
                    "{overlay_etc}{binds}exec containerd --config '{}'",
                    config.display()
                ));
        }
        let child = unshare
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
        ctr_for_the_node_s_arch(node, &base);
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

    /// Fails, naming what it holds and showing its log, unless it holds every one of
    /// `images` (full names, as `ctr images ls` prints them).
    pub fn assert_has(&self, images: &[&str]) {
        let have = self.images();
        for image in images {
            assert!(
                have.iter().any(|h| h == image),
                "containerd lacks {image}; it has {have:?}\n{}",
                self.log()
            );
        }
    }

    /// Imports the archive at `path` (a host path), as an operator would by hand.
    pub fn import(&self, path: &Path) {
        let out = self.ctr(&["images", "import", path.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
    }

    /// Its log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Puts a `ctr` over the node's /usr/bin/ctr that imports for the platform the node
/// reports, when that is not the host's (see the module doc).
fn ctr_for_the_node_s_arch(node: &Node, base: &Path) {
    let machine =
        |out: std::process::Output| String::from_utf8_lossy(&out.stdout).trim().to_string();
    let node_machine = machine(node.shell("uname -m"));
    let host_machine = machine(Command::new("uname").arg("-m").output().unwrap());
    if node_machine == host_machine {
        return;
    }
    let platform = match node_machine.as_str() {
        "aarch64" | "arm64" => "linux/arm64",
        "x86_64" => "linux/amd64",
        m if m.starts_with("armv") => "linux/arm/v7",
        other => panic!("no platform for the machine {other}"),
    };
    // Mount point for the real binary, bound inside the node before the wrapper hides it.
    let real = base.join("ctr.real");
    fs::write(&real, "").unwrap();
    let wrapper = base.join("ctr");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh
# ctr as built for {platform}: an import takes that platform's content.
             kb_first=1; kb_done=
             for kb_a in \"$@\"; do
             \x20 [ -n \"$kb_first\" ] && {{ set --; kb_first=; }}
             \x20 set -- \"$@\" \"$kb_a\"
             \x20 [ \"$kb_a\" = import ] && [ -z \"$kb_done\" ] && {{ set -- \"$@\" --platform {platform}; kb_done=1; }}
             done
             exec '{real}' \"$@\"
",
            real = "/tmp/containerd/ctr.real"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let out = node.shell(
        "mount --bind /usr/bin/ctr /tmp/containerd/ctr.real && mount --bind /tmp/containerd/ctr /usr/bin/ctr",
    );
    assert!(
        out.status.success(),
        "ctr for {platform} on the node: {out:?}"
    );
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
