//! What keadm's pre-flight looks for on an edge node, made on one fleet node only (in
//! its own pid namespace and /tmp): a running edgecore and a container runtime socket.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use super::fleet::Node;

/// Starts a process named edgecore (a copy of `sleep`) on `node`, as `pidof` and
/// /proc/<pid>/comm see it, and returns once it runs under that name. It lives until
/// the node is killed.
pub fn start_edgecore(node: &Node) {
    let out = node.shell(
        "cp /bin/sleep /tmp/edgecore\n\
         /tmp/edgecore 300 >/dev/null 2>&1 </dev/null &\n\
         for _ in $(seq 200); do\n\
         [ \"$(cat /proc/$!/comm 2>/dev/null)\" = edgecore ] && exit 0\n\
         sleep 0.01\n\
         done\n\
         exit 1\n",
    );
    assert!(out.status.success(), "edgecore did not start: {out:?}");
}

/// A listening unix socket standing in for the container runtime at the node's
/// `/tmp/containerd.sock`. Dropping it closes the socket and removes its file.
#[must_use = "the socket is removed when this is dropped"]
pub struct RuntimeSocket {
    _listener: UnixListener,
    host_path: PathBuf,
}

impl RuntimeSocket {
    pub fn create(node: &Node) -> RuntimeSocket {
        let host_path = node.tmp_path("containerd.sock");
        RuntimeSocket {
            _listener: UnixListener::bind(&host_path).unwrap(),
            host_path,
        }
    }

    /// The socket's path as the node sees it.
    pub fn path_on_node(&self) -> &'static str {
        "/tmp/containerd.sock"
    }
}

impl Drop for RuntimeSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.host_path);
    }
}

/// Gives `node` an /etc of its own: an overlay on the host's /etc whose writes land in the
/// node's /tmp (the host has no /etc/kubeedge to bind over), carrying the node's copy of
/// /etc/shadow (root's test password) into it, since the overlay hides the bind mount
/// below it. Then `setup` runs (say, `mkdir -p /etc/kubeedge/ca`), and the host's /etc is
/// checked unchanged.
pub fn private_etc(node: &Node, setup: &str) {
    node.shell_ok(&format!(
        "set -e\n\
         mkdir -p /tmp/etc-overlay/up /tmp/etc-overlay/work\n\
         cp /etc/shadow /tmp/etc-overlay/shadow\n\
         mount -t overlay overlay -o lowerdir=/etc,upperdir=/tmp/etc-overlay/up,workdir=/tmp/etc-overlay/work /etc\n\
         mount --bind /tmp/etc-overlay/shadow /etc/shadow\n\
         {setup}\n"
    ));
    assert!(
        !std::path::Path::new("/etc/kubeedge").exists(),
        "the host's /etc was changed"
    );
}
