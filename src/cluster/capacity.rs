//! How many edge nodes the cloud serves: cloudhub refuses a node's session once
//! `modules.cloudHub.nodeLimit` nodes are connected to one cloudcore ("Fail to serve node
//! ..., reach node limit"), after `keadm join` has printed `Install Complete!` (the
//! certificates come from another port), so a join past the limit "succeeds" and its Node
//! never registers. The limit is read where `keadm init` and KubeEdge's Helm chart put it:
//! the key `cloudcore.yaml` of the ConfigMap `cloudcore` in namespace `kubeedge`, times the
//! `replicas` of the Deployment `cloudcore` there; `--cloud-node-limit` (the total the
//! cloud serves) wins over both.
//!
//! Reading is best effort: a kubeconfig that may not read them (403), a cloud not
//! installed that way (404) or anything else leaves the check to the flag, or skips it
//! with one note saying why.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::{Cluster, NodeState};
use crate::config::yaml;
use crate::stage::error_chain;

/// Where keadm init and the Helm chart install cloudcore.
pub const NAMESPACE: &str = "kubeedge";
/// The ConfigMap and the Deployment, both named so by the chart.
pub const NAME: &str = "cloudcore";
/// The ConfigMap's key holding cloudcore's configuration.
pub const CONFIG_KEY: &str = "cloudcore.yaml";
/// cloudcore's own default when its configuration sets no nodeLimit
/// (`constants.DefaultNodeLimit` in KubeEdge; the chart and keadm's profile set 1000).
pub const DEFAULT_NODE_LIMIT: u64 = 500;

/// The most edge nodes the cloud serves, and where that was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    /// What one cloudcore serves; `None` when only the total was given (the flag).
    pub node_limit: Option<u64>,
    /// How many cloudcores; `None` with the flag.
    pub replicas: Option<u64>,
    /// Where the figures come from, for messages: `--cloud-node-limit`, or the objects read.
    pub from: String,
    /// `--cloud-node-limit`'s value, which wins over what the cluster says.
    pub flag: Option<u64>,
}

impl Capacity {
    /// `--cloud-node-limit N`.
    pub fn of_flag(total: u64) -> Capacity {
        Capacity {
            node_limit: None,
            replicas: None,
            from: "--cloud-node-limit".to_string(),
            flag: Some(total),
        }
    }

    /// The edge nodes the cloud serves at most.
    pub fn total(&self) -> u64 {
        self.flag.unwrap_or_else(|| {
            self.node_limit
                .unwrap_or(DEFAULT_NODE_LIMIT)
                .saturating_mul(self.replicas.unwrap_or(1))
        })
    }

    /// `CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, from ...)`.
    pub fn describe(&self) -> String {
        let total = self.total();
        let nodes = if total == 1 { "node" } else { "nodes" };
        match (self.flag, self.node_limit, self.replicas) {
            (None, Some(limit), Some(replicas)) => format!(
                "CloudCore serves at most {total} edge {nodes} (nodeLimit {limit} × {replicas} {}, read from {})",
                if replicas == 1 { "replica" } else { "replicas" },
                self.from
            ),
            _ => format!(
                "CloudCore serves at most {total} edge {nodes} ({})",
                self.from
            ),
        }
    }
}

/// The edge Nodes among `nodes` (as `cluster::guard` tells an edge Node).
pub fn edge_nodes(nodes: &[NodeState]) -> usize {
    nodes.iter().filter(|n| n.edge).count()
}

/// `modules.cloudHub.nodeLimit` of cloudcore's configuration: `Ok(None)` when it sets
/// none (cloudcore then uses its default), an error sentence when the text is not YAML
/// or the value not a count. The chart quotes it (`nodeLimit: "1000"` in its values)
/// only on its side: either form is read.
pub fn node_limit_of(config: &str) -> Result<Option<u64>, String> {
    let (root, _) = yaml::parse(config).map_err(|e| {
        format!(
            "its {CONFIG_KEY} is not YAML (line {}: {})",
            e.pos.line, e.message
        )
    })?;
    let get = |node: Option<&yaml::Node>, key: &str| -> Option<yaml::Node> {
        match node? {
            yaml::Node::Map { entries, .. } => entries
                .iter()
                .rev()
                .find(|(k, _)| k.key_text() == Some(key))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    };
    let modules = get(root.as_ref(), "modules");
    let hub = get(modules.as_ref(), "cloudHub");
    match get(hub.as_ref(), "nodeLimit") {
        None => Ok(None),
        Some(node) if node.is_null() => Ok(None),
        Some(yaml::Node::Scalar { value, .. }) => value
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("its modules.cloudHub.nodeLimit `{value}` is not a count")),
        Some(other) => Err(format!(
            "its modules.cloudHub.nodeLimit is {}, not a count",
            other.kind()
        )),
    }
}

/// Why an object could not be read, as a clause: `the kubeconfig's user may not get
/// configmaps in namespace kubeedge`, `there is no ConfigMap kubeedge/cloudcore`.
fn unread(kind: &str, resource: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => {
            format!("the kubeconfig's user may not get {resource} in namespace {NAMESPACE}")
        }
        kube::Error::Api(status) if status.code == 404 => {
            format!(
                "there is no {kind} {NAMESPACE}/{NAME} (cloudcore was not installed by keadm init or the Helm chart)"
            )
        }
        other => format!(
            "the {kind} {NAMESPACE}/{NAME} could not be read: {}",
            error_chain(other)
        ),
    }
}

impl Cluster {
    /// cloudcore's capacity as keadm init and the Helm chart record it: the ConfigMap's
    /// nodeLimit times the Deployment's replicas. A Deployment that cannot be read counts
    /// as one cloudcore, and says so. `Err`: why the limit is unknown, a clause.
    pub fn cloudcore_capacity(&self) -> Result<Capacity, String> {
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client_once.clone(), NAMESPACE);
        let map = self
            .runtime
            .block_on(configmaps.get(NAME))
            .map_err(|e| unread("ConfigMap", "configmaps", &e))?;
        let text = map
            .data
            .as_ref()
            .and_then(|data| data.get(CONFIG_KEY))
            .ok_or_else(|| format!("the ConfigMap {NAMESPACE}/{NAME} has no key {CONFIG_KEY}"))?;
        let limit = node_limit_of(text)
            .map_err(|why| format!("the ConfigMap {NAMESPACE}/{NAME}: {why}"))?;
        let mut from = format!("the ConfigMap {NAMESPACE}/{NAME}");
        if limit.is_none() {
            from.push_str(&format!(
                ", whose {CONFIG_KEY} sets no nodeLimit (cloudcore's default {DEFAULT_NODE_LIMIT})"
            ));
        }
        let deployments: Api<Deployment> = Api::namespaced(self.client_once.clone(), NAMESPACE);
        let replicas = match self.runtime.block_on(deployments.get(NAME)) {
            Ok(deployment) => {
                from.push_str(&format!(" and the Deployment {NAMESPACE}/{NAME}"));
                deployment
                    .spec
                    .and_then(|spec| spec.replicas)
                    .map_or(1, |r| u64::try_from(r).unwrap_or(0))
            }
            Err(e) => {
                from.push_str(&format!(
                    "; one cloudcore assumed, since {}",
                    unread("Deployment", "deployments.apps", &e)
                ));
                1
            }
        };
        Ok(Capacity {
            node_limit: Some(limit.unwrap_or(DEFAULT_NODE_LIMIT)),
            replicas: Some(replicas),
            from,
            flag: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_limit_is_read_from_cloudcore_yaml_in_either_form() {
        let chart = "apiVersion: cloudcore.config.kubeedge.io/v1alpha2\nkind: CloudCore\nmodules:\n  cloudHub:\n    advertiseAddress:\n    - 10.0.0.1\n    nodeLimit: 1000\n    websocket:\n      port: 10000\n";
        assert_eq!(node_limit_of(chart), Ok(Some(1000)));
        assert_eq!(
            node_limit_of("modules:\n  cloudHub:\n    nodeLimit: \"2\"\n"),
            Ok(Some(2))
        );
        assert_eq!(
            node_limit_of("modules:\n  cloudHub:\n    websocket: {}\n"),
            Ok(None)
        );
        assert_eq!(node_limit_of("kind: CloudCore\n"), Ok(None));
        let bad = node_limit_of("modules:\n  cloudHub:\n    nodeLimit: lots\n").unwrap_err();
        assert!(bad.contains("`lots` is not a count"), "{bad}");
        assert!(
            node_limit_of("modules: [\n")
                .unwrap_err()
                .contains("is not YAML")
        );
    }

    #[test]
    fn the_capacity_names_its_figures_and_where_they_came_from() {
        let read = Capacity {
            node_limit: Some(2),
            replicas: Some(1),
            from: "the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore".into(),
            flag: None,
        };
        assert_eq!(read.total(), 2);
        assert_eq!(
            read.describe(),
            "CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from the ConfigMap kubeedge/cloudcore and the Deployment kubeedge/cloudcore)"
        );
        let three = Capacity {
            replicas: Some(3),
            ..read
        };
        assert_eq!(three.total(), 6);
        assert!(three.describe().contains("nodeLimit 2 × 3 replicas"));
        let flag = Capacity::of_flag(7);
        assert_eq!(flag.total(), 7);
        assert_eq!(
            flag.describe(),
            "CloudCore serves at most 7 edge nodes (--cloud-node-limit)"
        );
    }
}
