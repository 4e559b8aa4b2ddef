//! KubeEdge's NodeGroups (`apps.kubeedge.io/v1alpha1`, cluster-scoped): a group names its
//! Nodes (`spec.nodes`) and selects others by label (`spec.matchLabels`); a Node is in at
//! most one group, and EdgeApplications place workloads by group. Pure: read from the
//! API's object, judged without I/O.

use std::collections::BTreeMap;

use serde_json::Value;

/// One NodeGroup, as far as membership goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeGroup {
    pub name: String,
    /// `spec.nodes`: Node names.
    pub nodes: Vec<String>,
    /// `spec.matchLabels`: every one must match; empty selects no Node by label.
    pub match_labels: BTreeMap<String, String>,
}

impl NodeGroup {
    /// The group from a NodeGroup object's JSON (`metadata.name`, `spec`).
    pub fn of(object: &Value) -> NodeGroup {
        let spec = &object["spec"];
        NodeGroup {
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            nodes: spec["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect(),
            match_labels: spec["matchLabels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
        }
    }

    /// Whether the Node `node_name` with `labels` is a member: named, or matching every
    /// one of a non-empty `matchLabels`.
    pub fn has(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.nodes.iter().any(|n| n == node_name)
            || (!self.match_labels.is_empty()
                && self
                    .match_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v)))
    }

    /// Why a member is one: `by name` or `by its labels zone=berlin`.
    pub fn why(&self, node_name: &str) -> String {
        if self.nodes.iter().any(|n| n == node_name) {
            "by name".to_string()
        } else {
            let labels: Vec<String> = self
                .match_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("by its labels {}", labels.join(","))
        }
    }
}

/// The groups of `groups` the Node is in (KubeEdge allows one; a config that puts a node
/// in two is worth seeing).
pub fn groups_of<'g>(
    groups: &'g [NodeGroup],
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<&'g NodeGroup> {
    groups.iter().filter(|g| g.has(node_name, labels)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_node_is_in_a_group_by_name_or_by_all_its_match_labels() {
        let groups = [
            NodeGroup::of(
                &json!({"metadata": {"name": "berlin"}, "spec": {"matchLabels": {"zone": "berlin", "tier": "edge"}}}),
            ),
            NodeGroup::of(&json!({"metadata": {"name": "named"}, "spec": {"nodes": ["edge-9"]}})),
            NodeGroup::of(&json!({"metadata": {"name": "empty"}, "spec": {}})),
        ];
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let names = |node: &str, l: &BTreeMap<String, String>| -> Vec<String> {
            groups_of(&groups, node, l)
                .iter()
                .map(|g| g.name.clone())
                .collect()
        };
        let both = labels(&[("zone", "berlin"), ("tier", "edge"), ("x", "y")]);
        assert_eq!(names("edge-1", &both), ["berlin"]);
        assert_eq!(
            names("edge-1", &labels(&[("zone", "berlin")])),
            Vec::<String>::new()
        );
        assert_eq!(names("edge-9", &both), ["berlin", "named"]);
        assert_eq!(
            groups[0].why("edge-1"),
            "by its labels tier=edge,zone=berlin"
        );
        assert_eq!(groups[1].why("edge-9"), "by name");
    }
}
