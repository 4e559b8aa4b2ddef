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

/// Gives `node` an /etc of its own with nothing of KubeEdge's in it, whatever the
/// machine's /etc holds: an overlay whose writes land in the node's /tmp, over a layer of
/// whiteouts that hides /etc/kubeedge and edgecore's unit file, over the machine's /etc.
/// (The machine has no /etc/kubeedge to bind over, and other tests, keadm_e2e's among
/// them, make one on it for a while, which a plain overlay would show as it comes.) The
/// files the fleet binds over the machine's (the node's shadow, passwd, group and
/// sudoers) are carried into the overlay, which would hide them. Then `setup` runs (say,
/// `mkdir -p /etc/kubeedge/ca`), and the node's /etc is checked to be the overlay.
pub fn private_etc(node: &Node, setup: &str) {
    node.shell_ok(&format!(
        "set -e\n\
         o=/tmp/etc-overlay\n\
         mkdir -p $o/up $o/work $o/carried $o/hide/systemd/system\n\
         mknod $o/hide/kubeedge c 0 0\n\
         mknod $o/hide/systemd/system/edgecore.service c 0 0\n\
         for f in shadow passwd group sudoers; do [ -e /etc/$f ] && cp -p /etc/$f $o/carried/$f; done\n\
         mount -t overlay overlay -o lowerdir=$o/hide:/etc,upperdir=$o/up,workdir=$o/work /etc\n\
         for f in $o/carried/*; do mount --bind \"$f\" \"/etc/${{f##*/}}\"; done\n\
         {setup}\n"
    ));
    node.shell_ok("grep -q '^overlay /etc overlay ' /proc/self/mounts");
}

/// An /etc of its own for `node` ([`private_etc`]) with nothing added: a reset there
/// leaves the node clean whatever the machine's own /etc holds.
pub fn clean_etc(node: &Node) {
    private_etc(
        node,
        "[ ! -e /etc/kubeedge ] && [ ! -e /etc/systemd/system/edgecore.service ]",
    );
}

/// An /etc of its own for `node` ([`private_etc`]) holding the edgecore.yaml keadm join
/// writes, naming the Node `node_name` (`hostnameOverride`): what --drain and
/// --delete-nodes read before a node's command to know its Node.
pub fn edge_etc(node: &Node, node_name: &str) {
    private_etc(
        node,
        &format!(
            "mkdir -p /etc/kubeedge/config\n\
             printf 'modules:\\n  edged:\\n    hostnameOverride: {node_name}\\n' > /etc/kubeedge/config/edgecore.yaml"
        ),
    );
}
