//! A stand-in for the Kubernetes API server on 127.0.0.1, over TLS, answering the
//! endpoints keadm-batch's client uses with the shapes a real kube-apiserver v1.32 gives
//! (docs/kubeedge.md lists them): `GET /version`, the Node list and watch (newline-
//! delimited events in a chunked body, resourceVersions counting up), `GET`, `DELETE` and
//! merge-`PATCH` of one Node, the `tokensecret` secret, self-subject access reviews, and
//! for `--drain` the pods list by `fieldSelector=spec.nodeName=` and the Eviction
//! subresource (201 `Success`, or 429 with the PodDisruptionBudget's message and cause,
//! as kube-apiserver's eviction handler words them). Every request must carry the
//! kubeconfig's bearer token; denied permissions answer `allowed: false`.
//!
//! Nodes appear as edgecore makes them appear: a test says when (a condition polled every
//! 100 ms, such as "the fake keadm on the node has exited") and how the node then behaves
//! (Ready after a while, NotReady for a reason, or never registered).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

pub const BEARER: &str = "stand-in-token";
pub const SERVER_VERSION: &str = "v1.32.13";

/// What a node does once its condition holds.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Registers NotReady, then is Ready this long after.
    ReadyAfter(Duration),
    /// Registers and stays NotReady with this reason and message, posting heartbeats.
    NotReady { reason: String, message: String },
}

mod drain;
use drain::FakePod;
pub use drain::{Eviction, Owner};

type When = Box<dyn Fn() -> bool + Send>;
/// The nodes still waiting for their condition.
type Pending = Arc<Mutex<Vec<(String, When, Behaviour)>>>;

#[derive(Default)]
struct State {
    version: u64,
    nodes: BTreeMap<String, Value>,
    /// Every change, in order: (resourceVersion, type, object).
    events: Vec<(u64, &'static str, Value)>,
    requests: Vec<String>,
    /// When each of `requests` came, in seconds since the Unix epoch.
    request_times: Vec<f64>,
    denied: HashSet<(String, String)>,
    token: Option<String>,
    /// DELETE of a Node answers 500, as an API server whose etcd is down does.
    deletes_fail: bool,
    /// Pods by `namespace/name`.
    pods: BTreeMap<String, FakePod>,
    /// The merge patches applied to Nodes: (name, patch).
    patches: Vec<(String, Value)>,
    /// PATCH of a Node answers 500, as DELETE does with `deletes_fail`.
    patches_fail: bool,
    /// Watches get no bookmarks: a real kube-apiserver sends its first about a minute
    /// into a quiet watch, so a test's watch stays silent while no Node changes.
    quiet_watches: bool,
    /// Each watch's body is broken off this long after it began (a chunk that is not
    /// one), as a connection reset under a watch breaks it.
    watch_drop_after: Option<Duration>,
    /// Objects served by path (`/api/v1/namespaces/kubeedge/configmaps/cloudcore`).
    objects: BTreeMap<String, Value>,
    /// Paths whose GET answers 403 Forbidden, as RBAC refuses them.
    forbidden: HashSet<String>,
    /// Per Node name, the labels and taints its edgecore registers it with (what the
    /// join asked for, or what a test says it got instead).
    registers_with: BTreeMap<String, (Value, Value)>,
}

/// Where the Helm chart and keadm init put cloudcore's ConfigMap and Deployment.
pub const CLOUDCORE_CONFIGMAP: &str = "/api/v1/namespaces/kubeedge/configmaps/cloudcore";
/// One NodeGroup: its name, the Nodes it names (`spec.nodes`), its `spec.matchLabels`.
pub type NodeGroupSpec<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);

/// Where kube-apiserver lists KubeEdge's NodeGroups, when the CRD is installed.
pub const NODE_GROUPS: &str = "/apis/apps.kubeedge.io/v1alpha1/nodegroups";
pub const CLOUDCORE_DEPLOYMENT: &str = "/apis/apps/v1/namespaces/kubeedge/deployments/cloudcore";

pub struct FakeApiServer {
    pub port: u16,
    dir: tempfile::TempDir,
    state: Arc<Mutex<State>>,
    pending: Pending,
    stop: Arc<AtomicBool>,
}

impl FakeApiServer {
    pub fn start() -> FakeApiServer {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = Arc::new(super::http_server::self_signed_acceptor(
            dir.path(),
            "127.0.0.1",
        ));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: Arc<Mutex<State>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let pending: Pending = Arc::default();
        {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((stream, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    let (acceptor, state, stop) = (acceptor.clone(), state.clone(), stop.clone());
                    std::thread::spawn(move || {
                        stream.set_nonblocking(false).unwrap();
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                        if let Ok(tls) = acceptor.accept(stream) {
                            serve(tls, &state, &stop);
                        }
                    });
                }
            });
        }
        {
            let (state, pending, stop) = (state.clone(), pending.clone(), stop.clone());
            std::thread::spawn(move || edgecores(&state, &pending, &stop));
        }
        FakeApiServer {
            port,
            dir,
            state,
            pending,
            stop,
        }
    }

    /// A kubeconfig for this server: its CA, the bearer token, one context.
    pub fn kubeconfig(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: operator\n  user:\n    token: {BEARER}\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: operator\ncurrent-context: stand-in\n",
                self.port,
                self.dir.path().join("cert.pem").display()
            ),
        )
        .unwrap();
        path
    }

    /// Watches stay silent while no Node changes (no bookmarks), as a real
    /// kube-apiserver's do for their first minute or so.
    pub fn quiet_watches(&self) {
        self.state.lock().unwrap().quiet_watches = true;
    }

    /// Every watch's connection is dropped `after` it began, mid-body.
    pub fn drop_watches_after(&self, after: Duration) {
        self.state.lock().unwrap().watch_drop_after = Some(after);
    }

    /// How many watches of the Nodes were asked for.
    pub fn watches(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.starts_with("GET /api/v1/nodes?") && r.contains("watch=true"))
            .count()
    }

    /// A kubeconfig for this server whose user gets its token from an exec credential
    /// plugin (the script `exec-plugin` beside it), which first creates the file `ran`:
    /// what a dry run must not run. Returns the kubeconfig and the plugin's path.
    pub fn kubeconfig_with_exec_plugin(&self, ran: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let plugin = self.dir.path().join("exec-plugin");
        std::fs::write(
            &plugin,
            format!(
                "#!/bin/sh\ntouch '{}'\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{BEARER}\"}}}}'\n",
                ran.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = self.dir.path().join("kubeconfig-exec");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: plugin\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: {}\n      interactiveMode: Never\ncontexts:\n- name: with-plugin\n  context:\n    cluster: stand-in\n    user: plugin\ncurrent-context: with-plugin\n",
                self.port,
                self.dir.path().join("cert.pem").display(),
                plugin.display()
            ),
        )
        .unwrap();
        (path, plugin)
    }

    /// cloudcore as the Helm chart installs it: the ConfigMap `cloudcore` in kubeedge with
    /// `nodeLimit` (as the chart renders it, the line left out when `None`) in its
    /// `cloudcore.yaml`, and the Deployment `cloudcore` with `replicas`.
    pub fn cloudcore(&self, node_limit: Option<&str>, replicas: i32) {
        let limit = node_limit
            .map(|l| format!("    nodeLimit: {l}\n"))
            .unwrap_or_default();
        let config = format!(
            "apiVersion: cloudcore.config.kubeedge.io/v1alpha2\nkind: CloudCore\nkubeAPIConfig:\n  kubeConfig: \"\"\n  master: \"\"\nmodules:\n  cloudHub:\n    advertiseAddress:\n    - 127.0.0.1\n    dnsNames:\n    -\n{limit}    tlsCAFile: /etc/kubeedge/ca/rootCA.crt\n    websocket:\n      address: 0.0.0.0\n      enable: true\n      port: 10000\n"
        );
        let mut state = self.state.lock().unwrap();
        state.objects.insert(
            CLOUDCORE_CONFIGMAP.to_string(),
            json!({"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": "cloudcore", "namespace": "kubeedge", "uid": "uid-cm"},
                   "data": {"cloudcore.yaml": config}}),
        );
        state.objects.insert(
            CLOUDCORE_DEPLOYMENT.to_string(),
            json!({"kind": "Deployment", "apiVersion": "apps/v1",
                   "metadata": {"name": "cloudcore", "namespace": "kubeedge", "uid": "uid-dep"},
                   "spec": {"replicas": replicas,
                            "selector": {"matchLabels": {"k8s-application": "kubeedge"}},
                            "template": {"metadata": {"labels": {"k8s-application": "kubeedge"}},
                                         "spec": {"containers": [{"name": "cloudcore", "image": "kubeedge/cloudcore:v1.23.1"}]}}}}),
        );
    }

    /// A GET of `path` answers 403 Forbidden, as kube-apiserver's RBAC words it.
    pub fn forbid(&self, path: &str) {
        self.state
            .lock()
            .unwrap()
            .forbidden
            .insert(path.to_string());
    }

    /// Access reviews for `verb` on `resource` answer not allowed.
    pub fn deny(&self, verb: &str, resource: &str) {
        self.state
            .lock()
            .unwrap()
            .denied
            .insert((verb.to_string(), resource.to_string()));
    }

    /// Once `when` holds, the Node `name` registers and behaves as `behaviour` says.
    pub fn node_on(
        &self,
        name: &str,
        when: impl Fn() -> bool + Send + 'static,
        behaviour: Behaviour,
    ) {
        self.pending
            .lock()
            .unwrap()
            .push((name.to_string(), Box::new(when), behaviour));
    }

    /// The Node `name` registers with these labels (beside the ones every edge Node has)
    /// and these taints (`key=value:Effect`), as edgecore registers a Node with the ones
    /// its edgecore.yaml holds (`nodeLabels`, `registerWithTaints`).
    pub fn registers_with(&self, name: &str, labels: &[(&str, &str)], taints: &[&str]) {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let taints: Vec<Value> = taints
            .iter()
            .map(|t| {
                let (key_value, effect) = t.rsplit_once(':').unwrap();
                let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
                let mut taint = json!({"key": key, "effect": effect});
                if !value.is_empty() {
                    taint["value"] = json!(value);
                }
                taint
            })
            .collect();
        self.state
            .lock()
            .unwrap()
            .registers_with
            .insert(name.to_string(), (Value::Object(labels), json!(taints)));
    }

    /// KubeEdge's NodeGroups (the CRD `apps.kubeedge.io/v1alpha1`), listed as
    /// kube-apiserver lists a custom resource.
    pub fn node_groups(&self, groups: &[NodeGroupSpec]) {
        let items: Vec<Value> = groups
            .iter()
            .map(|(name, nodes, labels)| {
                let labels: serde_json::Map<String, Value> = labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroup",
                       "metadata": {"name": name, "uid": format!("uid-ng-{name}"), "resourceVersion": "1"},
                       "spec": {"nodes": nodes, "matchLabels": labels}})
            })
            .collect();
        self.state.lock().unwrap().objects.insert(
            NODE_GROUPS.to_string(),
            json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroupList",
                   "metadata": {"resourceVersion": "1"}, "items": items}),
        );
    }

    /// `kubectl label node NAME KEY=VALUE --overwrite`: a write of the Node's labels.
    pub fn label_node(&self, name: &str, key: &str, value: &str) {
        let mut state = self.state.lock().unwrap();
        let mut node = state.nodes.get(name).cloned().expect("the Node exists");
        node["metadata"]["labels"][key] = json!(value);
        change(&mut state, "MODIFIED", node);
    }

    /// The `tokendata` of the kubeedge/tokensecret secret, as cloudcore writes it.
    pub fn set_token(&self, token: &str) {
        self.state.lock().unwrap().token = Some(token.to_string());
    }

    /// A Node the cluster has from before the run: made `age` ago, Ready or NotReady.
    pub fn existing_node(&self, name: &str, ready: bool, age: Duration) {
        let mut node = if ready {
            node_object(name, "True", "EdgeReady", "edge is posting ready status")
        } else {
            node_object(
                name,
                "False",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
        };
        node["metadata"]["creationTimestamp"] = json!(rfc3339(SystemTime::now() - age));
        change(&mut self.state.lock().unwrap(), "ADDED", node);
    }

    /// An edge node's Node as its edgecore keeps it: there now, Ready, with the KubeEdge
    /// version `version()` gives (`None`: edgecore is down, the Node stays as it was); when
    /// that version changes (edgecore restarted as another version), `MODIFIED` with the
    /// new kubeletVersion, as edgecore's node status update writes it. While `not_ready()`
    /// holds, the Node is NotReady instead.
    pub fn edge_node(
        &self,
        name: &str,
        version: impl Fn() -> Option<String> + Send + 'static,
        not_ready: impl Fn() -> bool + Send + 'static,
    ) {
        let (state, stop, name) = (self.state.clone(), self.stop.clone(), name.to_string());
        let key = name.clone();
        let node = move |v: &str, ready: bool| {
            let mut node = if ready {
                node_object(&name, "True", "EdgeReady", "edge is posting ready status")
            } else {
                node_object(
                    &name,
                    "False",
                    "EdgeNotReady",
                    "edge is not posting ready status",
                )
            };
            node["status"]["nodeInfo"]["kubeletVersion"] = json!(format!("v1.32.10-kubeedge-{v}"));
            node
        };
        let mut shown = (version().unwrap_or_else(|| "v0.0.0".into()), !not_ready());
        change(&mut state.lock().unwrap(), "ADDED", node(&shown.0, shown.1));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                let Some(now) = version() else { continue };
                let seen = (now, !not_ready());
                if seen != shown {
                    // edgecore writes the Node's status: its spec (a cordon) and
                    // annotations stay as they are.
                    let mut state = state.lock().unwrap();
                    let mut next = node(&seen.0, seen.1);
                    if let Some(old) = state.nodes.get(&key) {
                        next["spec"] = old["spec"].clone();
                        next["metadata"]["annotations"] = old["metadata"]["annotations"].clone();
                    }
                    change(&mut state, "MODIFIED", next);
                    shown = seen;
                }
            }
        });
    }

    /// The Node `name` reports that its edgecore runs KubeEdge `version` (a write of its
    /// status, as edgecore makes when it starts).
    pub fn node_runs(&self, name: &str, version: &str) {
        let mut state = self.state.lock().unwrap();
        let mut node = state.nodes.get(name).cloned().expect("the Node exists");
        node["status"]["nodeInfo"]["kubeletVersion"] =
            json!(format!("v1.32.10-kubeedge-{version}"));
        change(&mut state, "MODIFIED", node);
    }

    /// A Node that no edgecore made: a kubelet's (`node-role.kubernetes.io/<role>`, a
    /// plain kubelet version), Ready, made a day ago, at the InternalIP `address`.
    pub fn kubelet_node(&self, name: &str, role: &str, address: &str) {
        let mut node = node_object(
            name,
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        );
        let labels = node["metadata"]["labels"].as_object_mut().unwrap();
        labels.retain(|k, _| !k.starts_with("node-role.kubernetes.io/"));
        labels.insert(format!("node-role.kubernetes.io/{role}"), json!(""));
        node["status"]["nodeInfo"]["kubeletVersion"] = json!("v1.31.0");
        node["status"]["addresses"] = json!([{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]);
        node["metadata"]["creationTimestamp"] =
            json!(rfc3339(SystemTime::now() - Duration::from_secs(86_400)));
        change(&mut self.state.lock().unwrap(), "ADDED", node);
    }

    /// The Node `name` lists `address` as its InternalIP.
    pub fn node_address(&self, name: &str, address: &str) {
        let mut state = self.state.lock().unwrap();
        let mut node = state.nodes.get(name).cloned().expect("the Node exists");
        node["status"]["addresses"] = json!([{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]);
        change(&mut state, "MODIFIED", node);
    }

    /// The KubeEdge version the Node `name` shows now.
    pub fn node_kubeedge_version(&self, name: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        let version = state.nodes.get(name)?["status"]["nodeInfo"]["kubeletVersion"].as_str()?;
        version.split_once("-kubeedge-").map(|(_, v)| v.to_string())
    }

    /// From now on, every DELETE of a Node fails with 500 Internal Server Error.
    pub fn fail_deletes(&self) {
        self.state.lock().unwrap().deletes_fail = true;
    }

    /// Whether the cluster has the Node `name` now.
    pub fn has_node(&self, name: &str) -> bool {
        self.state.lock().unwrap().nodes.contains_key(name)
    }

    /// Every request so far with when it came (seconds since the Unix epoch, this
    /// machine's clock, as the fake keadm's records have it).
    pub fn requests_at(&self) -> Vec<(f64, String)> {
        let state = self.state.lock().unwrap();
        state
            .request_times
            .iter()
            .copied()
            .zip(state.requests.iter().cloned())
            .collect()
    }

    /// Every request so far: `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A recorded answer of the real kube-apiserver (tests/fixtures/kube-apiserver/).
fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kube-apiserver")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The Node a real kube-apiserver returned for a Ready edge node
/// (tests/fixtures/kube-apiserver/node-ready.json), renamed, with this Ready condition.
fn node_object(name: &str, ready: &str, reason: &str, message: &str) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kube-apiserver/node-ready.json");
    let mut node: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let now = rfc3339(SystemTime::now());
    node["metadata"]["name"] = json!(name);
    node["metadata"]["uid"] = json!(format!("uid-{name}"));
    node["metadata"]["creationTimestamp"] = json!(now);
    node["metadata"]["labels"]["kubernetes.io/hostname"] = json!(name);
    // The recorded InternalIP is a machine's of its own; a Node here lists an address only
    // where a test gives one (`node_address`), since --drain and --delete-nodes compare
    // it with the node's (the loopback nodes' addresses differ from machine to machine).
    node["status"]["addresses"] = json!([{"type": "Hostname", "address": name}]);
    for condition in node["status"]["conditions"].as_array_mut().unwrap() {
        condition["lastHeartbeatTime"] = json!(now);
        condition["lastTransitionTime"] = json!(now);
        if condition["type"] == "Ready" {
            condition["status"] = json!(ready);
            condition["reason"] = json!(reason);
            condition["message"] = json!(message);
        }
    }
    node
}

/// `node` as its edgecore registers it: with the labels and taints a test gave its name.
fn registered(state: &State, mut node: Value) -> Value {
    let name = node["metadata"]["name"].as_str().unwrap_or("").to_string();
    if let Some((labels, taints)) = state.registers_with.get(&name) {
        for (key, value) in labels.as_object().unwrap() {
            node["metadata"]["labels"][key] = value.clone();
        }
        node["spec"]["taints"] = taints.clone();
    }
    node
}

fn change(state: &mut State, kind: &'static str, mut object: Value) {
    state.version += 1;
    let version = state.version;
    object["metadata"]["resourceVersion"] = json!(version.to_string());
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    if kind == "DELETED" {
        state.nodes.remove(&name);
    } else {
        if let Some(old) = state.nodes.get(&name) {
            object["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
        }
        state.nodes.insert(name, object.clone());
    }
    state.events.push((version, kind, object));
}

/// The nodes' edgecores, as a real v1.23.1 node shows in the watch
/// (tests/fixtures/kube-apiserver/watch-join.jsonl): once its condition holds, `ADDED`
/// NotReady; a node that turns Ready is `MODIFIED` once, Ready; then nothing more.
fn edgecores(state: &Arc<Mutex<State>>, pending: &Pending, stop: &Arc<AtomicBool>) {
    let mut turning: Vec<(String, Instant)> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let started: Vec<(String, Behaviour)> = {
            let mut pending = pending.lock().unwrap();
            let mut started = Vec::new();
            let mut i = 0;
            while i < pending.len() {
                if (pending[i].1)() {
                    let (name, _, behaviour) = pending.remove(i);
                    started.push((name, behaviour));
                } else {
                    i += 1;
                }
            }
            started
        };
        for (name, behaviour) in started {
            let node = match &behaviour {
                Behaviour::ReadyAfter(after) => {
                    turning.push((name.clone(), Instant::now() + *after));
                    node_object(
                        &name,
                        "False",
                        "KubeletNotReady",
                        "CSINode is not yet initialized",
                    )
                }
                Behaviour::NotReady { reason, message } => {
                    node_object(&name, "False", reason, message)
                }
            };
            let mut state = state.lock().unwrap();
            let node = registered(&state, node);
            change(&mut state, "ADDED", node);
        }
        let now = Instant::now();
        for (name, _) in turning.iter().filter(|(_, at)| *at <= now) {
            let mut state = state.lock().unwrap();
            if let Some(old) = state.nodes.get(name.as_str()) {
                // edgecore writes the Node's status: its labels and spec stay as they are.
                let mut node =
                    node_object(name, "True", "EdgeReady", "edge is posting ready status");
                node["metadata"]["labels"] = old["metadata"]["labels"].clone();
                node["spec"] = old["spec"].clone();
                change(&mut state, "MODIFIED", node);
            }
        }
        turning.retain(|(_, at)| *at > now);
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn respond(out: &mut impl Write, status: &str, body: &Value) {
    respond_with(out, status, "", body);
}

/// An answer with more header lines (`Warning: ...\r\n`).
fn respond_with(out: &mut impl Write, status: &str, headers: &str, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = out.flush();
}

/// A 404 for one object, as kube-apiserver words it.
fn not_found(kind: &str, name: &str) -> Value {
    let mut answer = status(404, "NotFound", &format!("{kind} \"{name}\" not found"));
    answer["details"] = json!({"name": name, "kind": kind});
    answer
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// One request on one connection (every answer closes it).
fn serve<S: Read + Write>(stream: S, state: &Arc<Mutex<State>>, stop: &Arc<AtomicBool>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let mut length = 0usize;
    let mut authorized = false;
    let mut content_type = String::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header == "\r\n" || header.is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if let Some(value) = lower.strip_prefix("content-type:") {
            content_type = value.trim().to_string();
        }
        if header.trim_end() == format!("authorization: Bearer {BEARER}")
            || header.trim_end() == format!("Authorization: Bearer {BEARER}")
        {
            authorized = true;
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    {
        let mut state = state.lock().unwrap();
        state.requests.push(format!("{method} {target}"));
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        state.request_times.push(at.as_secs_f64());
    }
    let mut out = reader.into_inner();
    if !authorized {
        return respond(
            &mut out,
            "401 Unauthorized",
            &status(401, "Unauthorized", "Unauthorized"),
        );
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let decoded: Vec<(String, String)> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect();
    let params: BTreeMap<&str, &str> = decoded
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let forbidden = method == "GET" && state.lock().unwrap().forbidden.contains(path);
    if forbidden {
        // kube-apiserver's words for an RBAC refusal of a namespaced get.
        let mut parts = path.trim_start_matches('/').split('/').collect::<Vec<_>>();
        let name = parts.pop().unwrap_or("");
        let resource = parts.pop().unwrap_or("");
        let group = if path.starts_with("/apis/") {
            format!(" in API group \"{}\"", parts.get(1).copied().unwrap_or(""))
        } else {
            " in API group \"\"".to_string()
        };
        return respond(
            &mut out,
            "403 Forbidden",
            &status(
                403,
                "Forbidden",
                &format!(
                    "{resource} \"{name}\" is forbidden: User \"operator\" cannot get resource \"{resource}\"{group} in the namespace \"kubeedge\""
                ),
            ),
        );
    }
    let object = (method == "GET")
        .then(|| state.lock().unwrap().objects.get(path).cloned())
        .flatten();
    if let Some(object) = object {
        return respond(&mut out, "200 OK", &object);
    }
    match (method.as_str(), path) {
        ("GET", "/version") => respond(
            &mut out,
            "200 OK",
            &json!({"major": "1", "minor": "32", "emulationMajor": "1", "emulationMinor": "32",
                    "minCompatibilityMajor": "1", "minCompatibilityMinor": "31",
                    "gitVersion": SERVER_VERSION, "gitCommit": "0", "gitTreeState": "clean",
                    "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.23.12",
                    "compiler": "gc", "platform": "linux/amd64"}),
        ),
        ("GET", "/api/v1/nodes") if params.get("watch") == Some(&"true") => {
            let from: u64 = params
                .get("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let timeout: u64 = params
                .get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(290);
            watch(&mut out, state, stop, from, Duration::from_secs(timeout));
        }
        ("GET", "/api/v1/nodes") => {
            let state = state.lock().unwrap();
            let items: Vec<Value> = state.nodes.values().cloned().collect();
            respond(
                &mut out,
                "200 OK",
                &json!({"kind": "NodeList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": state.version.to_string()}, "items": items}),
            );
        }
        ("PATCH", _) if path.starts_with("/api/v1/nodes/") => {
            drain::patch_node(
                &mut out,
                state,
                &path["/api/v1/nodes/".len()..],
                &content_type,
                &body,
            );
        }
        ("GET", "/api/v1/pods") => drain::list_pods(&mut out, state, params.get("fieldSelector")),
        ("POST", _) if path.starts_with("/api/v1/namespaces/") && path.ends_with("/eviction") => {
            drain::evict(&mut out, state, path, &body);
        }
        (method @ ("GET" | "DELETE"), _) if path.starts_with("/api/v1/nodes/") => {
            let name = &path["/api/v1/nodes/".len()..];
            let mut state = state.lock().unwrap();
            match state.nodes.get(name).cloned() {
                None => respond(
                    &mut out,
                    "404 Not Found",
                    &status(404, "NotFound", &format!("nodes \"{name}\" not found")),
                ),
                Some(node) if method == "GET" => respond(&mut out, "200 OK", &node),
                Some(_) if state.deletes_fail => respond(
                    &mut out,
                    "500 Internal Server Error",
                    &status(500, "InternalError", "etcdserver: request timed out"),
                ),
                Some(node) => {
                    change(&mut state, "DELETED", node.clone());
                    respond(&mut out, "200 OK", &node);
                }
            }
        }
        ("GET", "/api/v1/namespaces/kubeedge/secrets/tokensecret") => {
            let state = state.lock().unwrap();
            match &state.token {
                Some(token) => {
                    use base64::Engine as _;
                    let data = base64::engine::general_purpose::STANDARD.encode(token);
                    respond(
                        &mut out,
                        "200 OK",
                        &json!({"kind": "Secret", "apiVersion": "v1",
                                "metadata": {"name": "tokensecret", "namespace": "kubeedge"},
                                "type": "Opaque", "data": {"tokendata": data}}),
                    );
                }
                None => respond(
                    &mut out,
                    "404 Not Found",
                    &status(404, "NotFound", "secrets \"tokensecret\" not found"),
                ),
            }
        }
        ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") => {
            let mut review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let attributes = &review["spec"]["resourceAttributes"];
            // A subresource is denied as `pods/eviction`.
            let resource = attributes["resource"].as_str().unwrap_or("");
            let resource = match attributes["subresource"].as_str() {
                Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
                _ => resource.to_string(),
            };
            let key = (
                attributes["verb"].as_str().unwrap_or("").to_string(),
                resource,
            );
            let allowed = !state.lock().unwrap().denied.contains(&key);
            review["status"] = json!({"allowed": allowed});
            respond(&mut out, "201 Created", &review);
        }
        _ => respond(
            &mut out,
            "404 Not Found",
            &status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    }
}

/// A watch: every event after `from`, then new ones as they come, in a chunked body,
/// until `timeout` or the server stops.
fn watch(
    out: &mut impl Write,
    state: &Arc<Mutex<State>>,
    stop: &Arc<AtomicBool>,
    from: u64,
    timeout: Duration,
) {
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let _ = out.flush();
    let started = Instant::now();
    let until = started + timeout;
    let (quiet, drop_after) = {
        let state = state.lock().unwrap();
        (state.quiet_watches, state.watch_drop_after)
    };
    let mut sent = from;
    let mut last_bookmark = Instant::now();
    while Instant::now() < until && !stop.load(Ordering::SeqCst) {
        if drop_after.is_some_and(|after| started.elapsed() >= after) {
            // Broken off mid-body: the client's read of the body fails, as it does when
            // a connection is reset under a watch.
            let _ = write!(out, "zz\r\n");
            let _ = out.flush();
            return;
        }
        let events: Vec<(u64, &'static str, Value)> = state
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|(v, _, _)| *v > sent)
            .cloned()
            .collect();
        for (version, kind, object) in events {
            if !chunk(out, &json!({"type": kind, "object": object})) {
                return;
            }
            sent = version;
        }
        // A quiet watch gets bookmarks, as the real server sends (about once a minute
        // there; more often here, so the client meets them).
        if !quiet && last_bookmark.elapsed() >= Duration::from_secs(1) {
            // The recorded bookmark's shape (tests/fixtures/kube-apiserver/watch-join.jsonl).
            let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1",
                "metadata": {"resourceVersion": sent.to_string(), "creationTimestamp": null},
                "spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}}});
            if !chunk(out, &bookmark) {
                return;
            }
            last_bookmark = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = write!(out, "0\r\n\r\n");
    let _ = out.flush();
}

/// One watch event as a chunk of its own; false once the client is gone.
fn chunk(out: &mut impl Write, event: &Value) -> bool {
    let line = format!("{event}\n");
    write!(out, "{:x}\r\n{line}\r\n", line.len()).is_ok() && out.flush().is_ok()
}

/// `%3D` and the like, as a query's values arrive.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the fake keadm at `calls` (its `.calls` file on the node) has exited.
pub fn keadm_exited(calls: &Path) -> bool {
    std::fs::read_to_string(calls).is_ok_and(|text| text.lines().any(|l| l.contains(" end ")))
}
