//! The stand-in's part for `--drain`: merge-`PATCH` of a Node, the pods bound to one
//! (`fieldSelector=spec.nodeName=`), and their Eviction subresource, each answered as
//! the real kube-apiserver v1.32.13 answered keadm-batch's requests
//! (tests/fixtures/kube-apiserver/README.md).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::{
    FakeApiServer, State, change, fixture, not_found, respond, respond_with, rfc3339, status,
};

/// Who owns a pod, which decides whether a drain evicts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A Deployment's ReplicaSet: evicted, and recreated elsewhere.
    ReplicaSet,
    /// A DaemonSet: left alone.
    DaemonSet,
    /// No owner: evicted, and gone for good.
    Bare,
    /// A mirror pod (a static pod of the node's own config): left alone.
    Mirror,
    /// A finished Job's pod (`Succeeded`): left alone.
    Finished,
}

/// How the pod's evictions go.
#[derive(Clone, Debug)]
pub enum Eviction {
    /// Allowed (201); the pod stays terminating this long, then it is gone.
    Allowed(Duration),
    /// Refused (429) by a PodDisruptionBudget this many times, then allowed.
    RefusedTimes(u32),
    /// Always refused by the PodDisruptionBudget named here.
    Refused(String),
    /// Allowed, but the pod never goes: it stays terminating (an edge node whose
    /// edgecore never confirms).
    Stuck,
}

/// The message kube-apiserver's eviction handler gives a refusal (policy/v1).
pub const PDB_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

pub(super) struct FakePod {
    object: Value,
    eviction: Eviction,
    refused: u32,
    gone_at: Option<Instant>,
}

impl FakeApiServer {
    /// From now on, every PATCH of a Node fails with 500 Internal Server Error.
    pub fn fail_patches(&self) {
        self.state.lock().unwrap().patches_fail = true;
    }

    /// A pod bound to the Node `node`, owned by `owner`, whose evictions go as
    /// `eviction` says.
    pub fn pod(&self, node: &str, namespace: &str, name: &str, owner: Owner, eviction: Eviction) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let object = pod_object(node, namespace, name, owner, state.version);
        state.pods.insert(
            format!("{namespace}/{name}"),
            FakePod {
                object,
                eviction,
                refused: 0,
                gone_at: None,
            },
        );
    }

    /// The pods (`namespace/name`) the Node `node` has now.
    pub fn pods_on(&self, node: &str) -> Vec<String> {
        let mut state = self.state.lock().unwrap();
        settle_pods(&mut state);
        state
            .pods
            .iter()
            .filter(|(_, p)| p.object["spec"]["nodeName"] == node)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Whether the Node `name` is cordoned (`spec.unschedulable`).
    pub fn cordoned(&self, name: &str) -> bool {
        self.state.lock().unwrap().nodes[name]["spec"]["unschedulable"] == true
    }

    /// The operator cordons the Node `name` (as `kubectl cordon` does: no annotation).
    pub fn cordon(&self, name: &str) {
        let mut state = self.state.lock().unwrap();
        let mut node = state.nodes[name].clone();
        node["spec"]["unschedulable"] = json!(true);
        change(&mut state, "MODIFIED", node);
    }

    /// The Node `name`'s annotations now.
    pub fn annotations(&self, name: &str) -> Value {
        self.state.lock().unwrap().nodes[name]["metadata"]["annotations"].clone()
    }

    /// The merge patches applied to Nodes so far: (name, patch).
    pub fn patches(&self) -> Vec<(String, Value)> {
        self.state.lock().unwrap().patches.clone()
    }
}

/// `PATCH /api/v1/nodes/NAME`.
pub(super) fn patch_node(
    out: &mut impl Write,
    state: &Arc<Mutex<State>>,
    name: &str,
    content_type: &str,
    body: &[u8],
) {
    // kube-apiserver takes the four patch types by their content type, and
    // answers any other with 415, as recorded.
    if content_type != "application/merge-patch+json" {
        let mut answer = status(415, "UnsupportedMediaType", "415: Unsupported Media Type");
        answer["details"] = json!({});
        return respond(out, "415 Unsupported Media Type", &answer);
    }
    let patch: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut state = state.lock().unwrap();
    match state.nodes.get(name).cloned() {
        None => respond(out, "404 Not Found", &not_found("nodes", name)),
        Some(_) if state.patches_fail => respond(
            out,
            "500 Internal Server Error",
            &status(500, "InternalError", "etcdserver: request timed out"),
        ),
        Some(mut node) => {
            merge_patch(&mut node, &patch);
            // An empty map is left out of the object, as the server encodes it.
            if node["metadata"]["annotations"]
                .as_object()
                .is_some_and(|a| a.is_empty())
            {
                node["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
            }
            state.patches.push((name.to_string(), patch));
            change(&mut state, "MODIFIED", node);
            let node = state.nodes[name].clone();
            respond(out, "200 OK", &node);
        }
    }
}

/// `GET /api/v1/pods`, by `spec.nodeName=` when asked so.
pub(super) fn list_pods(
    out: &mut impl Write,
    state: &Arc<Mutex<State>>,
    field_selector: Option<&&str>,
) {
    let mut state = state.lock().unwrap();
    settle_pods(&mut state);
    let on = field_selector.and_then(|f| f.strip_prefix("spec.nodeName="));
    let items: Vec<Value> = state
        .pods
        .values()
        .filter(|p| on.is_none_or(|node| p.object["spec"]["nodeName"] == node))
        .map(|p| p.object.clone())
        .collect();
    respond(
        out,
        "200 OK",
        &json!({"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": state.version.to_string()}, "items": items}),
    );
}

/// `POST /api/v1/namespaces/NS/pods/NAME/eviction`.
pub(super) fn evict(out: &mut impl Write, state: &Arc<Mutex<State>>, path: &str, body: &[u8]) {
    let parts: Vec<&str> = path.split('/').collect();
    // ["", "api", "v1", "namespaces", NS, "pods", NAME, "eviction"]
    let key = format!("{}/{}", parts[4], parts[6]);
    // kube-rs's Eviction body names `delete_options`, not `deleteOptions`: the
    // server warns of the field it does not know, as recorded.
    let warning =
        if serde_json::from_slice::<Value>(body).is_ok_and(|b| b.get("delete_options").is_some()) {
            "Warning: 299 - \"unknown field \\\"delete_options\\\"\"\r\n"
        } else {
            ""
        };
    let mut state = state.lock().unwrap();
    settle_pods(&mut state);
    let version = state.version + 1;
    let Some(pod) = state.pods.get_mut(&key) else {
        let answer = not_found("pods", parts[6]);
        return respond_with(out, "404 Not Found", warning, &answer);
    };
    let refused_by = match &pod.eviction {
        Eviction::Refused(name) => Some(name.clone()),
        Eviction::RefusedTimes(n) if pod.refused < *n => Some("web".to_string()),
        _ => None,
    };
    if let Some(budget) = refused_by {
        pod.refused += 1;
        // As recorded, with this budget's name.
        let mut answer = fixture("eviction-refused.json");
        assert_eq!(answer["message"], PDB_MESSAGE);
        answer["details"]["causes"][0]["message"] = json!(format!(
            "The disruption budget {budget} needs 1 healthy pods and has 1 currently"
        ));
        return respond_with(out, "429 Too Many Requests", warning, &answer);
    }
    if pod.object["metadata"]["deletionTimestamp"].is_null() {
        pod.object["metadata"]["deletionTimestamp"] = json!(rfc3339(SystemTime::now()));
        pod.object["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        pod.object["metadata"]["resourceVersion"] = json!(version.to_string());
        pod.gone_at = match pod.eviction {
            Eviction::Allowed(after) => Some(Instant::now() + after),
            Eviction::RefusedTimes(_) => Some(Instant::now()),
            _ => None,
        };
        state.version = version;
    }
    let answer = fixture("eviction-created.json");
    respond_with(out, "201 Created", warning, &answer);
}

/// RFC 7386: a merge patch applied to `target` (null removes a field).
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().unwrap();
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Removes the pods whose eviction has run its course.
fn settle_pods(state: &mut State) {
    let now = Instant::now();
    state
        .pods
        .retain(|_, p| p.gone_at.is_none_or(|at| at > now));
}

/// A pod as the API server lists it, made from a recorded one
/// (tests/fixtures/kube-apiserver/pod-running.json): renamed, bound to `node`, with the
/// fields a drain reads (owner, mirror annotation, phase) as `owner` has them.
fn pod_object(node: &str, namespace: &str, name: &str, owner: Owner, version: u64) -> Value {
    let mut pod = fixture("pod-running.json");
    let meta = &mut pod["metadata"];
    meta["name"] = json!(name);
    meta["namespace"] = json!(namespace);
    meta["uid"] = json!(format!("uid-{namespace}-{name}"));
    meta["resourceVersion"] = json!(version.to_string());
    meta["creationTimestamp"] = json!(rfc3339(SystemTime::now()));
    meta["labels"] = json!({"app": name});
    pod["spec"]["nodeName"] = json!(node);
    let owned_by = |kind: &str, owner: String, api: &str| {
        json!([{"apiVersion": api, "kind": kind, "name": owner,
                "uid": format!("uid-{owner}"), "controller": true}])
    };
    let owners = match owner {
        Owner::ReplicaSet => Some(owned_by("ReplicaSet", format!("{name}-rs"), "apps/v1")),
        Owner::DaemonSet => Some(owned_by("DaemonSet", format!("{name}-ds"), "apps/v1")),
        Owner::Finished => Some(owned_by("Job", format!("{name}-job"), "batch/v1")),
        // A static pod's mirror is owned by its Node, and annotated so.
        Owner::Mirror => Some(owned_by("Node", node.to_string(), "v1")),
        Owner::Bare => None,
    };
    let meta = pod["metadata"].as_object_mut().unwrap();
    match owners {
        Some(owners) => meta.insert("ownerReferences".into(), owners),
        None => meta.remove("ownerReferences"),
    };
    if owner == Owner::Mirror {
        meta.insert(
            "annotations".into(),
            json!({"kubernetes.io/config.hash": "0f3c", "kubernetes.io/config.mirror": "0f3c",
                   "kubernetes.io/config.source": "file"}),
        );
    }
    if owner == Owner::Finished {
        pod["status"]["phase"] = json!("Succeeded");
    }
    pod
}
