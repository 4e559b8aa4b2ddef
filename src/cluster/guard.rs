//! Whether a Node is this node's, before `--drain` or `--delete-nodes` writes to it: the
//! config's `nodeName` alone names a Node, not the machine behind it, and a name such as
//! `control-plane-1` is easy to collide with. A write is made only when
//!
//! 1. the node's own edgecore.yaml, read over SSH before its command runs, names that
//!    Node (`hostnameOverride`, else the host name as edgecore defaults to it);
//! 2. the Node is a KubeEdge edge Node (`node-role.kubernetes.io/edge`, or a kubelet
//!    version naming KubeEdge);
//! 3. where the Node lists an `InternalIP` or `ExternalIP`, one of them is an address of
//!    the node: one it lists itself (edgecore reports the machine's own address, often
//!    not the one SSH reaches), edgecore.yaml's `nodeIP`, or the SSH address. A node that
//!    could not list its addresses is compared by its SSH address and `nodeIP` only, and
//!    where neither matches, the check is said to be skipped rather than failed: the
//!    first two checks already tie the Node to the machine.
//!
//! Pure: the Node as read and the node's answer in, a sentence out.

use std::net::IpAddr;

use super::NodeState;
use crate::remote::NodeIdentity;

/// The rule in the plan's words.
pub const RULE: &str = "a Node is written to only when it is the node's own: a KubeEdge edge Node that the node's edgecore.yaml, read over SSH before its command, names, at one of the node's addresses where it lists any (otherwise the node is refused as name_mismatch)";

/// What a node said of itself, and the address SSH reaches it at, for [`Guard::check`].
#[derive(Debug, Clone)]
pub struct Guard {
    /// The node's answer, or why it could not be asked.
    pub identity: Result<NodeIdentity, String>,
    /// The SSH address, when it is an IP address.
    pub ssh: Option<IpAddr>,
}

impl Guard {
    pub fn new(identity: Result<NodeIdentity, String>, ssh_host: &str) -> Guard {
        Guard {
            identity,
            ssh: ssh_host.trim_matches(|c| c == '[' || c == ']').parse().ok(),
        }
    }

    /// What the node said of itself, for its transcript.
    pub fn said(&self) -> String {
        match &self.identity {
            Err(error) => format!("the node could not be asked which Node is its own: {error}"),
            Ok(identity) if !identity.edgecore_yaml => {
                "the node has no /etc/kubeedge/config/edgecore.yaml".to_string()
            }
            Ok(identity) => format!(
                "the node's /etc/kubeedge/config/edgecore.yaml names the Node {}; its addresses: {}",
                identity.node_name.as_deref().unwrap_or(&identity.said_name),
                match &identity.addresses {
                    Some(addresses) if !addresses.is_empty() => addresses
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    Some(_) => "none".to_string(),
                    None => "not listed (neither `ip` nor `hostname -I` answered)".to_string(),
                }
            ),
        }
    }

    /// Whether the node says its Node is `name` (check 1), before the cluster is asked.
    pub fn names(&self, name: &str) -> Result<(), String> {
        let identity = self.identity.as_ref().map_err(|error| {
            format!("the node could not be asked which Node is its own ({error})")
        })?;
        if !identity.finished {
            return Err(
                "the node's answer to which Node is its own was cut short, so it proves nothing"
                    .to_string(),
            );
        }
        if !identity.edgecore_yaml {
            return Err(format!(
                "the node has no /etc/kubeedge/config/edgecore.yaml, so it is not (or no longer) a KubeEdge edge node, and nothing ties the Node {name} to it"
            ));
        }
        match &identity.node_name {
            Some(own) if own == name => Ok(()),
            Some(own) => Err(format!(
                "the node's /etc/kubeedge/config/edgecore.yaml says its Node is {own} (hostnameOverride), not {name}"
            )),
            None => Err(format!(
                "the node's /etc/kubeedge/config/edgecore.yaml names no Node (hostnameOverride `{}` is not a Node name)",
                identity.said_name
            )),
        }
    }

    /// Whether the Node as read is this node's (checks 1 to 3): `Ok` with the words of
    /// the transcript's line, `Err` with why not.
    pub fn check(&self, state: &NodeState) -> Result<String, String> {
        self.names(&state.name)?;
        if !state.edge {
            return Err(format!(
                "the Node {} is not a KubeEdge edge Node (no {} label, kubelet version {})",
                state.name,
                super::node_state::EDGE_LABEL,
                state.kubelet_version.as_deref().unwrap_or("none")
            ));
        }
        if state.addresses.is_empty() {
            return Ok(format!(
                "the Node {} is a KubeEdge edge Node, named as the node's edgecore.yaml names it (it lists no address to compare)",
                state.name
            ));
        }
        let identity = self.identity.as_ref().ok();
        let listed = identity.and_then(|i| i.addresses.as_ref());
        let mut own: Vec<IpAddr> = listed.into_iter().flatten().copied().collect();
        for address in identity.and_then(|i| i.node_ip).into_iter().chain(self.ssh) {
            if !own.contains(&address) {
                own.push(address);
            }
        }
        if let Some(at) = state.addresses.iter().find(|a| own.contains(a)) {
            return Ok(format!(
                "the Node {} is a KubeEdge edge Node, named as the node's edgecore.yaml names it, at {at}, an address of the node",
                state.name
            ));
        }
        let shown = |addresses: &[IpAddr]| {
            addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match listed {
            Some(_) => Err(format!(
                "the Node {} lists the address(es) {}, and the node has none of them (it has {})",
                state.name,
                shown(&state.addresses),
                if own.is_empty() {
                    "none".to_string()
                } else {
                    shown(&own)
                }
            )),
            None => Ok(format!(
                "the Node {} is a KubeEdge edge Node, named as the node's edgecore.yaml names it; its address(es) {} were not compared, since the node could not list its own",
                state.name,
                shown(&state.addresses)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(name: &str, addresses: Option<&[&str]>) -> NodeIdentity {
        NodeIdentity {
            finished: true,
            edgecore_yaml: true,
            node_name: Some(name.to_string()),
            said_name: name.to_string(),
            addresses: addresses.map(|a| a.iter().map(|a| a.parse().unwrap()).collect()),
            node_ip: None,
        }
    }

    fn node(name: &str, edge: bool, addresses: &[&str]) -> NodeState {
        NodeState {
            name: name.to_string(),
            edge,
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            kubelet_version: Some("v1.31.0".to_string()),
            ..NodeState::default()
        }
    }

    #[test]
    fn only_an_edge_node_named_by_the_node_at_one_of_its_addresses_passes() {
        let guard = Guard::new(Ok(identity("edge-0", Some(&["192.0.2.2"]))), "127.77.0.2");
        assert!(guard.check(&node("edge-0", true, &["192.0.2.2"])).is_ok());
        assert!(guard.check(&node("edge-0", true, &[])).is_ok());
        // The SSH address counts too.
        assert!(guard.check(&node("edge-0", true, &["127.77.0.2"])).is_ok());
        let refused = |state: NodeState| guard.check(&state).unwrap_err();
        assert_eq!(
            refused(node("edge-0", false, &["192.0.2.2"])),
            "the Node edge-0 is not a KubeEdge edge Node (no node-role.kubernetes.io/edge label, kubelet version v1.31.0)"
        );
        assert_eq!(
            refused(node("control-plane-1", true, &["192.0.2.2"])),
            "the node's /etc/kubeedge/config/edgecore.yaml says its Node is edge-0 (hostnameOverride), not control-plane-1"
        );
        assert_eq!(
            refused(node("edge-0", true, &["10.9.9.9"])),
            "the Node edge-0 lists the address(es) 10.9.9.9, and the node has none of them (it has 192.0.2.2, 127.77.0.2)"
        );
        // A node that could not list its addresses: not compared, and said so, also
        // when its edgecore.yaml's nodeIP is another address; a nodeIP that matches passes.
        let mut unlisted = identity("edge-0", None);
        unlisted.node_ip = "192.0.2.9".parse().ok();
        let unlisted = Guard::new(Ok(unlisted), "h.example");
        assert!(
            unlisted
                .check(&node("edge-0", true, &["10.9.9.9"]))
                .unwrap()
                .contains("were not compared")
        );
        assert!(
            unlisted
                .check(&node("edge-0", true, &["192.0.2.9"]))
                .unwrap()
                .contains("at 192.0.2.9, an address of the node")
        );
    }

    #[test]
    fn a_node_without_edgecore_yaml_or_an_answer_proves_nothing() {
        let mut none = identity("x", None);
        none.edgecore_yaml = false;
        let guard = Guard::new(Ok(none), "127.0.0.1");
        assert!(
            guard
                .check(&node("edge-0", true, &[]))
                .unwrap_err()
                .contains("has no /etc/kubeedge/config/edgecore.yaml")
        );
        let guard = Guard::new(Err("connection refused".to_string()), "127.0.0.1");
        assert_eq!(
            guard.names("edge-0").unwrap_err(),
            "the node could not be asked which Node is its own (connection refused)"
        );
    }
}
