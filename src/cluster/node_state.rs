//! What the cluster says of one Node, reduced to what a join's verification reads: that it
//! exists, its Ready condition, when it was made and its versions. Pure: built from the
//! API's object, judged without I/O.

use k8s_openapi::api::core::v1::Node;

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
}

/// A node condition, as `kubectl describe node` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Condition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// `lastHeartbeatTime`: moves on every status the node posts, so a change of it is
    /// proof that a node (not a stale object) is talking to the cluster now.
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
        NodeState {
            name: node.metadata.name.clone().unwrap_or_default(),
            created: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            ready,
            kubelet_version: node
                .status
                .as_ref()
                .and_then(|status| status.node_info.as_ref())
                .map(|info| info.kubelet_version.clone())
                .filter(|v| !v.is_empty()),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.as_ref().is_some_and(Condition::is_true)
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
    fn a_node_that_posted_no_status_is_neither_ready_nor_not_ready() {
        let state = NodeState::of(&node(serde_json::json!({"metadata": {"name": "edge-2"}})));
        assert_eq!(state.status_word(), "Unknown");
        assert!(state.ready.is_none());
    }
}
