//! What the cluster says of one Node, reduced to what a join's verification reads: that it
//! exists, its Ready condition, when it was made and its versions. Pure: built from the
//! API's object, judged without I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::placement::{Taint, TaintEffect};

/// One Node as the API server has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeState {
    pub name: String,
    /// `metadata.creationTimestamp`, RFC 3339, as the server wrote it.
    pub created: Option<String>,
    /// The Ready condition; `None` when the node has posted none yet.
    pub ready: Option<Condition>,
    /// `status.nodeInfo.kubeletVersion`: edgecore reports `v1.32.10-kubeedge-v1.23.1`.
    pub kubelet_version: Option<String>,
    /// `metadata.resourceVersion`: moves on every write to the Node.
    pub resource_version: Option<String>,
    /// `metadata.uid`: a delete is made on this object only, not on one of the same name
    /// made since it was read.
    pub uid: Option<String>,
    /// Whether the Node is a KubeEdge edge Node: labelled `node-role.kubernetes.io/edge`
    /// (keadm join's label), or its kubelet version names KubeEdge (`-kubeedge-`).
    pub edge: bool,
    /// The addresses the Node lists as `InternalIP` or `ExternalIP`.
    pub addresses: Vec<std::net::IpAddr>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.taints` whose effect is one of the API's three (the others cannot be one a
    /// config asked for).
    pub taints: Vec<Taint>,
}

/// The label keadm join gives an edge Node.
pub const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

/// A node condition, as `kubectl describe node` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `lastHeartbeatTime`, as the server has it. On a KubeEdge node it does not move
    /// while the node stays Ready (cloudcore writes the Node only on a change), so it
    /// proves nothing about the node being alive.
    pub heartbeat: Option<String>,
}

impl Condition {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// `reason: message`, as much of it as the node gave.
    pub fn describe(&self) -> String {
        match (&self.reason, &self.message) {
            (Some(reason), Some(message)) => format!("{reason}: {message}"),
            (Some(text), None) | (None, Some(text)) => text.clone(),
            (None, None) => format!("status {}", self.status),
        }
    }
}

impl NodeState {
    pub fn of(node: &Node) -> NodeState {
        let ready = node
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| Condition {
                status: c.status.clone(),
                reason: c.reason.clone().filter(|r| !r.is_empty()),
                message: c.message.clone().filter(|m| !m.is_empty()),
                heartbeat: c.last_heartbeat_time.as_ref().map(|t| t.0.to_string()),
            });
        let kubelet_version = node
            .status
            .as_ref()
            .and_then(|status| status.node_info.as_ref())
            .map(|info| info.kubelet_version.clone())
            .filter(|v| !v.is_empty());
        let edge = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(EDGE_LABEL))
            || kubelet_version
                .as_deref()
                .is_some_and(|v| v.contains("-kubeedge-"));
        let addresses = node
            .status
            .as_ref()
            .and_then(|status| status.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        NodeState {
            name: node.metadata.name.clone().unwrap_or_default(),
            created: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            ready,
            kubelet_version,
            resource_version: node.metadata.resource_version.clone(),
            uid: node.metadata.uid.clone(),
            edge,
            addresses,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect: TaintEffect::parse(&t.effect)?,
                    })
                })
                .collect(),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.as_ref().is_some_and(Condition::is_true)
    }

    /// The KubeEdge version edgecore reports in its kubelet version
    /// (`v1.32.10-kubeedge-v1.23.1` → `v1.23.1`).
    pub fn kubeedge_version(&self) -> Option<&str> {
        self.kubelet_version
            .as_deref()?
            .split_once("-kubeedge-")
            .map(|(_, kubeedge)| kubeedge)
    }

    /// Whether the Node reports that edgecore runs KubeEdge `version`.
    pub fn runs_kubeedge(&self, version: &str) -> bool {
        self.kubeedge_version()
            .is_some_and(|v| crate::remote::same_version(v, version))
    }

    /// How long ago the Node was made, as kubectl's AGE column says it (`45s`, `12m`,
    /// `3h`, `9d`); `None` when the server gave no creation time.
    pub fn age(&self, now: std::time::SystemTime) -> Option<String> {
        let created = humantime::parse_rfc3339_weak(self.created.as_deref()?).ok()?;
        let secs = now.duration_since(created).map_or(0, |d| d.as_secs());
        Some(match secs {
            0..120 => format!("{secs}s"),
            120..7200 => format!("{}m", secs / 60),
            7200..172_800 => format!("{}h", secs / 3600),
            _ => format!("{}d", secs / 86_400),
        })
    }

    /// `Ready, 3h old`: the Node's state and age, for a message or a table cell.
    pub fn describe(&self, now: std::time::SystemTime) -> String {
        match self.age(now) {
            Some(age) => format!("{}, {age} old", self.status_word()),
            None => self.status_word().to_string(),
        }
    }

    /// `Ready`, `NotReady` or `Unknown`, as kubectl's STATUS column says.
    pub fn status_word(&self) -> &'static str {
        match &self.ready {
            Some(c) if c.is_true() => "Ready",
            Some(c) if c.status == "False" => "NotReady",
            _ => "Unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_ready_condition_and_versions_are_read_as_kubectl_shows_them() {
        let state = NodeState::of(&node(serde_json::json!({
            "metadata": {"name": "edge-1", "creationTimestamp": "2026-12-01T10:00:00Z"},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                     "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
                     "lastHeartbeatTime": "2026-12-01T10:00:10Z"}
                ],
                "nodeInfo": {"kubeletVersion": "v1.32.10-kubeedge-v1.23.1", "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        })));
        assert_eq!(state.name, "edge-1");
        assert_eq!(state.status_word(), "NotReady");
        assert!(!state.is_ready());
        let ready = state.ready.as_ref().unwrap();
        assert!(
            ready
                .describe()
                .starts_with("KubeletNotReady: container runtime network not ready")
        );
        assert_eq!(ready.heartbeat.as_deref(), Some("2026-12-01T10:00:10Z"));
        assert_eq!(
            state.kubelet_version.as_deref(),
            Some("v1.32.10-kubeedge-v1.23.1")
        );
        assert_eq!(state.created.as_deref(), Some("2026-12-01T10:00:00Z"));
    }

    #[test]
    fn the_age_reads_as_kubectls_age_column() {
        let state = NodeState {
            created: Some("2026-12-01T10:00:00Z".into()),
            ..NodeState::default()
        };
        let at = |secs: u64| {
            humantime::parse_rfc3339("2026-12-01T10:00:00Z").unwrap()
                + std::time::Duration::from_secs(secs)
        };
        assert_eq!(state.age(at(45)).as_deref(), Some("45s"));
        assert_eq!(state.age(at(15 * 60)).as_deref(), Some("15m"));
        assert_eq!(state.age(at(5 * 3600)).as_deref(), Some("5h"));
        assert_eq!(state.describe(at(9 * 86_400)), "Unknown, 9d old");
        assert_eq!(NodeState::default().describe(at(0)), "Unknown");
    }

    #[test]
    fn a_node_that_posted_no_status_is_neither_ready_nor_not_ready() {
        let state = NodeState::of(&node(serde_json::json!({"metadata": {"name": "edge-2"}})));
        assert_eq!(state.status_word(), "Unknown");
        assert!(state.ready.is_none());
    }
}
