//! What the cluster says of one pod on a Node being drained, reduced to what the drain
//! reads: whether it is evicted or left alone (mirror, DaemonSet and finished pods stay,
//! as with `kubectl drain`), whether something recreates it, whether its deletion is
//! under way. Pure: built from the API's object, judged without I/O.

use k8s_openapi::api::core::v1::Pod;

/// One pod on the Node, as the drain sorts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOnNode {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Why it is left where it is; `None` for a pod to evict.
    pub left_alone: Option<&'static str>,
    /// Whether a controller owns it (something recreates it elsewhere once evicted).
    pub controlled: bool,
    /// `metadata.deletionTimestamp`, when its deletion is under way.
    pub deleting_since: Option<String>,
}

impl PodOnNode {
    pub fn of(pod: &Pod) -> PodOnNode {
        let meta = &pod.metadata;
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let mirror = meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let left_alone = if mirror {
            Some("a mirror pod, which the node's own config runs")
        } else if controller.is_some_and(|c| c.kind == "DaemonSet") {
            Some("a DaemonSet's, which ignores the cordon")
        } else if matches!(phase, Some("Succeeded" | "Failed")) {
            Some("finished")
        } else {
            None
        };
        PodOnNode {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            left_alone,
            controlled: controller.is_some(),
            deleting_since: meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A pod the drain could not get off the Node in time, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLeft {
    pub pod: String,
    pub why: String,
}

impl PodLeft {
    /// The evicted pods `still` listed, each with its deletion's state as `on_node` (the
    /// last list, if any) has it.
    pub fn not_gone(still: &[PodOnNode], on_node: &[PodOnNode]) -> Vec<PodLeft> {
        still
            .iter()
            .map(|p| {
                let now = on_node.iter().find(|q| q.uid == p.uid).unwrap_or(p);
                PodLeft {
                    pod: p.key(),
                    why: match &now.deleting_since {
                        Some(since) => format!(
                            "evicted, still terminating since {since}: the node's edgecore has not confirmed that its containers stopped"
                        ),
                        None => "evicted, still on the node".to_string(),
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> PodOnNode {
        PodOnNode::of(&serde_json::from_value(value).unwrap())
    }

    #[test]
    fn mirror_daemonset_and_finished_pods_are_left_alone() {
        let web = pod(
            json!({"metadata": {"name": "web-1", "namespace": "default", "uid": "u1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                 "uid": "r", "controller": true}]},
            "status": {"phase": "Running"}}),
        );
        assert_eq!(web.left_alone, None);
        assert!(web.controlled);
        assert_eq!(web.key(), "default/web-1");
        let bare = pod(json!({"metadata": {"name": "bare", "namespace": "ns", "uid": "u2"}}));
        assert_eq!(bare.left_alone, None);
        assert!(!bare.controlled);
        let ds = pod(
            json!({"metadata": {"name": "proxy", "namespace": "kube-system", "uid": "u3",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "proxy",
                                 "uid": "d", "controller": true}]}}),
        );
        assert!(ds.left_alone.unwrap().contains("DaemonSet"));
        let mirror = pod(
            json!({"metadata": {"name": "static", "namespace": "kube-system",
            "uid": "u4", "annotations": {"kubernetes.io/config.mirror": "abc"}}}),
        );
        assert!(mirror.left_alone.unwrap().contains("mirror"));
        let done = pod(
            json!({"metadata": {"name": "job-x", "namespace": "default", "uid": "u5"},
            "status": {"phase": "Succeeded"}}),
        );
        assert_eq!(done.left_alone, Some("finished"));
        let deleting = pod(
            json!({"metadata": {"name": "w", "namespace": "d", "uid": "u6",
            "deletionTimestamp": "2026-12-02T10:00:00Z"}}),
        );
        assert_eq!(
            deleting.deleting_since.as_deref(),
            Some("2026-12-02T10:00:00Z")
        );
    }

    #[test]
    fn a_pod_left_says_whether_its_deletion_is_under_way() {
        let evicted = pod(json!({"metadata": {"name": "w", "namespace": "d", "uid": "u"}}));
        let mut listed = evicted.clone();
        listed.deleting_since = Some("2026-12-02T10:00:00Z".into());
        let left = PodLeft::not_gone(std::slice::from_ref(&evicted), &[listed]);
        assert_eq!(left[0].pod, "d/w");
        assert!(
            left[0]
                .why
                .starts_with("evicted, still terminating since 2026-12-02T10:00:00Z"),
            "{left:?}"
        );
        let left = PodLeft::not_gone(&[evicted], &[]);
        assert_eq!(left[0].why, "evicted, still on the node");
    }
}
