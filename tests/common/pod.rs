//! A pod of a Job manifest in docs/kubernetes, started on this machine the way kubelet
//! would start it, so a test runs the manifest's own command and not a paraphrase of it.
//!
//! ```ignore
//! let pod = Pod::from_manifest("docs/kubernetes/shards-job.yaml");
//! pod.write_secret("config.yaml", &config);
//! let out = pod.run(0, &[("KEADM_TOKEN", "abc.def")]);
//! ```
//!
//! What is read from the manifest: the container's command and arguments, its literal
//! environment, `runAsUser`, `runAsGroup`, `fsGroup` and every volume mount. What is
//! reproduced of kubelet: each `emptyDir` and `persistentVolumeClaim` volume is a fresh
//! directory owned by root with group `fsGroup` and mode 2777 (a new emptyDir is 0777;
//! fsGroup adds the group and the setgid bit, and no sticky bit), a `secret` volume holds
//! files of group `fsGroup` and mode 0440 (`defaultMode: 0400` plus the group's read that
//! fsGroup adds), and the process runs with the manifest's uid, gid and supplementary
//! group `fsGroup`. What stands in for the image: the machine's own /usr (with its
//! shell), and the keadm-batch under test in /usr/local/bin, with the Containerfile's
//! PATH, HOME and WORKDIR.
//!
//! The pod's root is a directory under /var/tmp, entered with chroot inside a private
//! mount namespace (`unshare --mount`), so the volumes sit at the manifest's paths
//! (/results, /var/cache/keadm-batch, ...) and none of the bind mounts is ever visible
//! outside that namespace: removing the directory afterwards only removes what the test
//! wrote.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use keadm_batch::config::yaml::{self, Node};

/// A Job's pod template, ready to run on this machine.
pub struct Pod {
    root: tempfile::TempDir,
    /// The container's `command` then `args`.
    argv: Vec<String>,
    /// The container's literal `env` values (`valueFrom` ones are the test's to give).
    env: Vec<(String, String)>,
    uid: u32,
    gid: u32,
    fs_group: u32,
    /// Each `secret` volume's mount path.
    secrets: Vec<String>,
}

impl Pod {
    /// The pod of the Job in `manifest` (relative to the repository), with its volumes
    /// made as kubelet makes them.
    pub fn from_manifest(manifest: &str) -> Pod {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest);
        let text = fs::read_to_string(&path).unwrap();
        let (doc, _) = yaml::parse(&text).unwrap();
        let doc = doc.expect("the manifest has a document");
        let pod = get(&doc, &["spec", "template", "spec"]);
        let security = get(pod, &["securityContext"]);
        let number = |key: &str| scalar(get(security, &[key])).parse::<u32>().unwrap();
        let containers = items(get(pod, &["containers"]));
        assert_eq!(containers.len(), 1, "{manifest}: one container");
        let container = &containers[0];
        let argv: Vec<String> = ["command", "args"]
            .iter()
            .flat_map(|key| items(get(container, &[key])))
            .map(|item| scalar(item).to_string())
            .collect();
        let env = items(get(container, &["env"]))
            .iter()
            .filter_map(|var| {
                let value = find(var, "value")?;
                Some((
                    scalar(get(var, &["name"])).to_string(),
                    scalar(value).to_string(),
                ))
            })
            .collect();

        let root = tempfile::Builder::new()
            .prefix("keadm-batch-pod-")
            .tempdir_in("/var/tmp")
            .unwrap();
        // The pod's "/": every user in it may look up paths (a tempdir is 0700).
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let mut made = Pod {
            root,
            argv,
            env,
            uid: number("runAsUser"),
            gid: number("runAsGroup"),
            fs_group: number("fsGroup"),
            secrets: Vec::new(),
        };
        made.make_image();
        let volumes = items(get(pod, &["volumes"]));
        for mount in items(get(container, &["volumeMounts"])) {
            let name = scalar(get(mount, &["name"]));
            let at = scalar(get(mount, &["mountPath"])).to_string();
            let volume = volumes
                .iter()
                .find(|v| scalar(get(v, &["name"])) == name)
                .unwrap_or_else(|| panic!("{manifest}: no volume {name}"));
            let dir = made.path(&at);
            fs::create_dir_all(&dir).unwrap();
            if find(volume, "secret").is_some() {
                made.own(&dir, 0o2755);
                made.secrets.push(at);
            } else {
                assert!(
                    find(volume, "emptyDir").is_some()
                        || find(volume, "persistentVolumeClaim").is_some(),
                    "{manifest}: volume {name} is of a kind this test does not make"
                );
                made.own(&dir, 0o2777);
            }
        }
        made
    }

    /// The machine's path of `in_pod`, an absolute path inside the pod.
    pub fn path(&self, in_pod: &str) -> PathBuf {
        self.root
            .path()
            .join(in_pod.strip_prefix('/').expect("an absolute path"))
    }

    /// The uid the pod runs as.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// A literal `env` value of the container.
    pub fn env(&self, name: &str) -> &str {
        self.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("the container sets no {name}"))
    }

    /// Writes `name` into the (only) secret volume, as kubelet would from the Secret.
    pub fn write_secret(&self, name: &str, contents: &str) {
        assert_eq!(self.secrets.len(), 1, "one secret volume");
        let file = self.path(&self.secrets[0]).join(name);
        fs::write(&file, contents).unwrap();
        self.own(&file, 0o440);
    }

    /// Copies the machine's `from` (a directory) to `in_pod`, readable by everyone, as if
    /// the image held it.
    pub fn copy_in(&self, from: &Path, in_pod: &str) {
        let to = self.path(in_pod);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        let status = Command::new("cp")
            .args(["-r", "--no-preserve=mode,ownership"])
            .arg(from)
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success(), "cp {} {}", from.display(), to.display());
    }

    /// Runs the container's command as the pod with `JOB_COMPLETION_INDEX` = `index` and
    /// `extra` environment (the values the manifest takes from Secrets).
    pub fn run(&self, index: u32, extra: &[(&str, &str)]) -> Output {
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_keadm-batch"))
            .parent()
            .unwrap();
        // Inside the new mount namespace only: the image's parts, then chroot.
        let setup = r#"set -e
root=$1 bin=$2
shift 2
mount --rbind /usr "$root/usr"
mount --rbind /proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --bind "$bin" "$root/usr/local/bin"
exec chroot "$root" "$@"
"#;
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                setup,
                "sh",
            ])
            .arg(self.root.path())
            .arg(bin_dir)
            .arg("/usr/bin/setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg(format!("--groups={}", self.fs_group))
            .args(["--", "/usr/bin/env", "-i", "-C", "/tmp"])
            // The Containerfile's ENV.
            .args(["PATH=/usr/local/bin:/bin", "HOME=/tmp"])
            .arg(format!("JOB_COMPLETION_INDEX={index}"));
        for (key, value) in &self.env {
            command.arg(format!("{key}={value}"));
        }
        for (key, value) in extra {
            command.arg(format!("{key}={value}"));
        }
        command.args(&self.argv);
        command.output().expect("start the pod")
    }

    /// /usr and what the machine's root links into it, and the mount points of /proc and
    /// /dev: what the image gives the command, from this machine.
    fn make_image(&self) {
        for dir in ["usr", "proc", "dev", "etc", "srv"] {
            fs::create_dir_all(self.path(&format!("/{dir}"))).unwrap();
        }
        for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let host = Path::new("/").join(name);
            match fs::read_link(&host) {
                Ok(target) => {
                    std::os::unix::fs::symlink(target, self.path(&format!("/{name}"))).unwrap()
                }
                Err(_) => assert!(
                    !host.exists(),
                    "/{name} is a directory here, not a link into /usr; the pod needs it linked"
                ),
            }
        }
    }

    /// Gives `path` to root and the fsGroup, with `mode`.
    fn own(&self, path: &Path, mode: u32) {
        chown(path, Some(0), Some(self.fs_group)).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The child of a mapping at `keys`; panics naming the missing key.
fn get<'n>(node: &'n Node, keys: &[&str]) -> &'n Node {
    keys.iter().fold(node, |node, key| {
        find(node, key).unwrap_or_else(|| panic!("the manifest has no {key:?} at {}", node.pos()))
    })
}

fn find<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    match node {
        Node::Map { entries, .. } => entries
            .iter()
            .find(|(k, _)| k.key_text() == Some(key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn items(node: &Node) -> &[Node] {
    match node {
        Node::Seq { items, .. } => items,
        other => panic!("expected a list at {}", other.pos()),
    }
}

fn scalar(node: &Node) -> &str {
    match node {
        Node::Scalar { value, .. } => value,
        other => panic!("expected a scalar at {}", other.pos()),
    }
}
