//! Which Node a node is, as the node itself says before anything runs on it: the name
//! its edgecore registers under (edgecore.yaml's `hostnameOverride`) and the addresses
//! it has. `--drain` and `--delete-nodes` write to a Node only when it is this node's
//! (`cluster::guard`), and the name in the config alone does not prove that.

use std::net::IpAddr;
use std::sync::LazyLock;

use crate::node_text::{escape_controls, one_line};

/// The most addresses read from a node: a host with more interfaces than this has its
/// first ones compared.
const ADDRESSES: usize = 64;

/// The read-only round trip (scripts/node_identity.sh): edgecore.yaml's `hostnameOverride` and `nodeIP` (when the
/// file is there), the host name (edgecore's default Node name, lowercased), and the
/// node's addresses (`ip -o addr`, else `hostname -I`). POSIX sh, busybox-friendly.
pub static NODE_IDENTITY: LazyLock<String> =
    LazyLock::new(|| super::script::sendable(include_str!("scripts/node_identity.sh")));

/// What [`NODE_IDENTITY`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeIdentity {
    /// Whether the round trip printed its last line.
    pub finished: bool,
    /// Whether /etc/kubeedge/config/edgecore.yaml is there.
    pub edgecore_yaml: bool,
    /// The Node name edgecore registers under: `hostnameOverride`, else the host name
    /// lowercased (edgecore's default); `None` when that is not a Node name.
    pub node_name: Option<String>,
    /// What the node said its name is, escaped and bounded, for a message when it is not
    /// a Node name.
    pub said_name: String,
    /// The addresses the node lists (`ip -o addr`, else `hostname -I`); `None` when it
    /// could not list them.
    pub addresses: Option<Vec<IpAddr>>,
    /// edgecore.yaml's `nodeIP`, the address edgecore reports, listed or not.
    pub node_ip: Option<IpAddr>,
}

/// The Node name in what a node printed (edgecore.yaml's value, quotes and all): `None`
/// unless it is a Node name, so nothing else reaches an API path or a message.
pub(super) fn node_name_said(said: &str) -> Option<String> {
    let name = said.trim().trim_matches(|c| c == '"' || c == '\'');
    crate::kube_name::is_node_name(name).then(|| name.to_string())
}

/// An address as a node lists it (`192.0.2.2/24`, `fd00::2/64`, `10.0.0.5`).
fn address(said: &str) -> Option<IpAddr> {
    let said = said.trim().trim_matches(|c| c == '"' || c == '\'');
    said.split('/').next()?.parse().ok()
}

/// Reads [`NODE_IDENTITY`]'s output.
pub fn parse_node_identity(text: &str) -> NodeIdentity {
    let mut identity = NodeIdentity::default();
    let mut override_said = None;
    let mut hostname = None;
    let mut addresses = Vec::new();
    let mut listed = false;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(said) = line.strip_prefix("KB_NODE_NAME") {
            identity.edgecore_yaml = true;
            override_said = Some(said.trim().to_string());
        } else if line == "KB_NO_EDGECORE_YAML" {
            identity.edgecore_yaml = false;
        } else if let Some(said) = line.strip_prefix("KB_NODE_IP") {
            identity.node_ip = address(said);
        } else if let Some(said) = line.strip_prefix("KB_HOSTNAME") {
            hostname = Some(said.trim().to_ascii_lowercase());
        } else if let Some(said) = line.strip_prefix("KB_ADDR ") {
            if let Some(address) = address(said)
                && addresses.len() < ADDRESSES
                && !addresses.contains(&address)
            {
                addresses.push(address);
            }
        } else if line == "KB_ADDRS_LISTED" {
            listed = true;
        } else if line == "KB_IDENTITY_END" {
            identity.finished = true;
        }
    }
    // keadm join always writes hostnameOverride; edgecore falls back to the host name.
    let said = override_said
        .filter(|s| !s.is_empty())
        .or(hostname)
        .unwrap_or_default();
    identity.node_name = node_name_said(&said);
    identity.said_name = escape_controls(&one_line(&said, 80));
    identity.addresses = listed.then_some(addresses);
    identity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::sent_forms::{Forms, assert_forms_posix_sh};

    #[test]
    fn the_identity_round_trip_is_posix_sh() {
        assert_forms_posix_sh("the node identity", &NODE_IDENTITY, Forms::Every, &[]);
    }

    #[test]
    fn the_name_is_hostname_override_else_the_host_name_and_only_a_node_name() {
        let id = parse_node_identity(
            "KB_NODE_NAME \"edge-7\"\nKB_NODE_IP 10.0.0.7\nKB_HOSTNAME Box\nKB_ADDR 127.0.0.1/8\nKB_ADDR fd00::2/64\nKB_ADDR junk\nKB_ADDRS_LISTED\nKB_IDENTITY_END\n",
        );
        assert!(id.finished && id.edgecore_yaml);
        assert_eq!(id.node_name.as_deref(), Some("edge-7"));
        let want: Vec<IpAddr> = ["127.0.0.1", "fd00::2"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(id.addresses, Some(want));
        assert_eq!(id.node_ip, "10.0.0.7".parse().ok());
        // An address listed twice is kept once; nodeIP without a listing is no listing.
        let id = parse_node_identity(
            "KB_NODE_NAME e\nKB_NODE_IP 10.0.0.7\nKB_ADDR 10.0.0.7/24\nKB_ADDR 10.0.0.7/24\nKB_ADDRS_LISTED\nKB_IDENTITY_END\n",
        );
        assert_eq!(id.addresses, Some(vec!["10.0.0.7".parse().unwrap()]));
        let id = parse_node_identity("KB_NODE_NAME e\nKB_NODE_IP 10.0.0.7\nKB_IDENTITY_END\n");
        assert_eq!(id.addresses, None);
        assert_eq!(id.node_ip, "10.0.0.7".parse().ok());
        let id = parse_node_identity("KB_NODE_NAME \nKB_HOSTNAME Edge-9\nKB_IDENTITY_END\n");
        assert_eq!(id.node_name.as_deref(), Some("edge-9"));
        assert_eq!(id.addresses, None, "not listed");
        let id = parse_node_identity("KB_NO_EDGECORE_YAML\nKB_HOSTNAME h\nKB_IDENTITY_END\n");
        assert!(!id.edgecore_yaml);
        let id = parse_node_identity("KB_NODE_NAME nodes/x?\u{1b}[2J\n");
        assert_eq!(id.node_name, None);
        assert_eq!(id.said_name, "nodes/x?\\x1b[2J");
        assert!(!id.finished);
    }
}
