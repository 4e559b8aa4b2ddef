//! One watch on the cluster's Nodes for the whole run: a list, then a watch from its
//! resourceVersion, listed again when the server says the version is gone (410) and
//! resumed after a dropped connection. Every node's state lands in one map that the
//! verifying threads read; they wait on its condition variable instead of asking the API
//! server per node.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};

use super::node_state::NodeState;

/// What the watch has seen of one node name.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub state: NodeState,
    /// When this machine first saw the Node (its clock, not the server's).
    pub first_seen: SystemTime,
    /// When this machine first saw it Ready, written since the watch began.
    pub ready_since: Option<SystemTime>,
    /// The resourceVersion the Node had in the watch's first list, if it existed then: a
    /// Node left over from an earlier join is Ready for this run only once something
    /// writes it (the new edgecore's connect does), not for its old Ready.
    pub baseline_version: Option<Option<String>>,
}

impl Seen {
    /// Ready, and proven current: a Node new to this run, or one written since.
    pub fn ready_now(&self) -> bool {
        self.ready_since.is_some() && self.state.is_ready()
    }
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Seen>,
    /// The last error the watch met, for messages while it retries.
    trouble: Option<String>,
    /// Bumped on every change, so waiters know something moved.
    generation: u64,
}

/// The run's view of the cluster's Nodes, kept current by one task.
pub struct NodeWatch {
    shared: Arc<(Mutex<State>, Condvar)>,
    task: tokio::task::JoinHandle<()>,
}

impl NodeWatch {
    /// Starts the watch on `runtime`; it runs until this is dropped.
    pub(super) fn start(runtime: &tokio::runtime::Runtime, client: kube::Client) -> NodeWatch {
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let task_shared = shared.clone();
        let task = runtime.spawn(async move { follow(Api::all(client), &task_shared).await });
        NodeWatch { shared, task }
    }

    /// What the watch has seen of `name`, if anything.
    pub fn seen(&self, name: &str) -> Option<Seen> {
        self.lock().nodes.get(name).cloned()
    }

    /// How many KubeEdge edge Nodes other than `name` the cluster has now, as far as the
    /// watch has seen.
    pub fn edge_nodes_but(&self, name: &str) -> usize {
        self.lock()
            .nodes
            .iter()
            .filter(|(n, s)| s.state.edge && n.as_str() != name)
            .count()
    }

    /// The watch's last error while it retries, if it has one.
    pub fn trouble(&self) -> Option<String> {
        self.lock().trouble.clone()
    }

    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Waits until something changed after `generation`, or `until`; returns the
    /// generation then.
    pub fn wait_past(&self, generation: u64, until: Instant) -> u64 {
        let (lock, changed) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        while state.generation == generation {
            let now = Instant::now();
            if now >= until {
                break;
            }
            state = changed
                .wait_timeout(state, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.generation
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long one watch request asks the server to hold it open.
const WATCH_SECONDS: u32 = 290;
/// The watch client's read timeout: past the server's own end of a watch, as kube-rs's
/// default (295 s for its 290 s watches), so only a dead connection times out.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(WATCH_SECONDS as u64 + 30);
/// After an error, the pause before the next list or watch.
const RETRY_PAUSE: Duration = Duration::from_secs(2);
/// A watch that broke after this long, or after an event, was routine: connections are
/// dropped by load balancers, API server restarts and idle timeouts, and the next watch
/// resumes from the last version seen.
const ROUTINE_BREAK_AFTER: Duration = Duration::from_secs(5);
/// Breaks in a row, each soon after its watch began and with no event, that make trouble
/// worth telling: the connection is dropped as soon as it is made.
const BREAKS_THAT_ARE_TROUBLE: u32 = 3;

/// Lists, then watches from the list's version, forever (until stopped).
async fn follow(api: Api<Node>, shared: &Arc<(Mutex<State>, Condvar)>) {
    let mut first = true;
    loop {
        let version = match api.list(&ListParams::default()).await {
            Ok(list) => {
                update(shared, |state| {
                    let names: Vec<String> = list
                        .items
                        .iter()
                        .filter_map(|n| n.metadata.name.clone())
                        .collect();
                    state.nodes.retain(|name, _| names.contains(name));
                    for node in &list.items {
                        saw(state, NodeState::of(node), first);
                    }
                    state.trouble = None;
                });
                first = false;
                list.metadata.resource_version.unwrap_or_default()
            }
            Err(err) => {
                update(shared, |state| {
                    state.trouble = Some(format!("listing the cluster's nodes failed: {err}"))
                });
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        watch_from(&api, version, shared).await;
    }
}

/// Watches from `version` until the server says it is gone (the caller lists again).
/// A watch that breaks is resumed at once from the last version seen, and said nowhere:
/// only a watch that cannot be started, or one dropped again and again as soon as it
/// starts, is trouble the waiting nodes' messages name.
async fn watch_from(api: &Api<Node>, mut version: String, shared: &Arc<(Mutex<State>, Condvar)>) {
    let params = WatchParams::default().timeout(WATCH_SECONDS);
    let mut quick_breaks = 0;
    loop {
        let stream = match api.watch(&params, &version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => return,
            Err(err) => {
                update(shared, |state| {
                    state.trouble = Some(format!("watching the cluster's nodes failed: {err}"))
                });
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let started = Instant::now();
        let mut delivered = false;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(err) => {
                    let routine = delivered || started.elapsed() >= ROUTINE_BREAK_AFTER;
                    quick_breaks = if routine { 0 } else { quick_breaks + 1 };
                    log::debug!("the cluster's node watch broke, resuming it: {err}");
                    if quick_breaks >= BREAKS_THAT_ARE_TROUBLE {
                        update(shared, |state| {
                            state.trouble = Some(format!(
                                "the cluster's node watch broke as soon as it began, {quick_breaks} times in a row: {err}"
                            ))
                        });
                    }
                    if quick_breaks > 0 {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    break;
                }
            };
            if !delivered {
                // A watch that delivers again ends any run of breaks, and the trouble
                // before it is moot: the watch resumed from the last version seen, so
                // nothing was missed.
                delivered = true;
                quick_breaks = 0;
                update(shared, |state| state.trouble = None);
            }
            match event {
                WatchEvent::Added(node) | WatchEvent::Modified(node) => {
                    if let Some(v) = &node.metadata.resource_version {
                        version = v.clone();
                    }
                    update(shared, |state| saw(state, NodeState::of(&node), false));
                }
                WatchEvent::Deleted(node) => {
                    if let Some(v) = &node.metadata.resource_version {
                        version = v.clone();
                    }
                    let name = node.metadata.name.clone().unwrap_or_default();
                    update(shared, |state| {
                        state.nodes.remove(&name);
                    });
                }
                WatchEvent::Bookmark(bookmark) => {
                    version = bookmark.metadata.resource_version;
                }
                WatchEvent::Error(status) if status.code == 410 => return,
                WatchEvent::Error(status) => {
                    update(shared, |state| {
                        state.trouble = Some(format!(
                            "the cluster's node watch ended: {} ({})",
                            status.message, status.code
                        ))
                    });
                    break;
                }
            }
        }
    }
}

/// Records `node` as seen now. `in_first_list`: the Node existed before this run began
/// watching, so its Ready counts only once it is written again.
fn saw(state: &mut State, node: NodeState, in_first_list: bool) {
    let now = SystemTime::now();
    let version = node.resource_version.clone();
    let entry = state
        .nodes
        .entry(node.name.clone())
        .or_insert_with(|| Seen {
            state: node.clone(),
            first_seen: now,
            ready_since: None,
            baseline_version: in_first_list.then(|| version.clone()),
        });
    let current = match &entry.baseline_version {
        None => true,
        Some(baseline) => version.is_some() && version != *baseline,
    };
    if node.is_ready() && current {
        entry.ready_since.get_or_insert(now);
    } else if !node.is_ready() {
        entry.ready_since = None;
    }
    entry.state = node;
}

fn update(shared: &Arc<(Mutex<State>, Condvar)>, change: impl FnOnce(&mut State)) {
    let (lock, changed) = &**shared;
    let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
    change(&mut state);
    state.generation += 1;
    changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::node_state::Condition;

    fn node(name: &str, ready: &str, version: &str) -> NodeState {
        NodeState {
            name: name.into(),
            ready: Some(Condition {
                status: ready.into(),
                ..Condition::default()
            }),
            resource_version: Some(version.into()),
            ..NodeState::default()
        }
    }

    #[test]
    fn a_node_new_to_the_run_is_ready_when_it_says_so() {
        let mut state = State::default();
        saw(&mut state, node("a", "False", "t1"), false);
        assert!(!state.nodes["a"].ready_now());
        saw(&mut state, node("a", "True", "t2"), false);
        assert!(state.nodes["a"].ready_now());
    }

    #[test]
    fn a_node_left_from_before_is_ready_only_once_it_is_written_again() {
        let mut state = State::default();
        saw(&mut state, node("old", "True", "7"), true);
        assert!(
            !state.nodes["old"].ready_now(),
            "a stale Ready is not this run's"
        );
        // Listed again after a 410, unchanged.
        saw(&mut state, node("old", "True", "7"), false);
        assert!(!state.nodes["old"].ready_now());
        saw(&mut state, node("old", "True", "9"), false);
        assert!(state.nodes["old"].ready_now());
    }

    /// The events a real kube-apiserver v1.32.13 sent while a real v1.23.1 edge node joined
    /// (tests/fixtures/kube-apiserver/README.md), read as the watch reads them.
    #[test]
    fn a_real_join_s_watch_events_make_the_node_ready() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kube-apiserver/watch-join.jsonl");
        let mut state = State::default();
        let mut kinds = Vec::new();
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let event: WatchEvent<Node> = serde_json::from_str(line).unwrap();
            match event {
                WatchEvent::Added(n) | WatchEvent::Modified(n) => {
                    kinds.push("node");
                    saw(&mut state, NodeState::of(&n), false);
                    let ready = state.nodes["edge-1"].ready_now();
                    assert_eq!(ready, NodeState::of(&n).is_ready());
                }
                WatchEvent::Bookmark(b) => {
                    kinds.push("bookmark");
                    assert_eq!(b.metadata.resource_version, "509");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            kinds,
            [
                "node", "node", "node", "bookmark", "bookmark", "bookmark", "bookmark"
            ]
        );
        let seen = &state.nodes["edge-1"];
        assert!(seen.ready_now());
        assert_eq!(
            seen.state.ready.as_ref().unwrap().describe(),
            "EdgeReady: edge is posting ready status"
        );
        assert_eq!(
            seen.state.kubelet_version.as_deref(),
            Some("v1.32.10-kubeedge-v1.23.1")
        );
    }

    /// The events the same server sent while a real keadm v1.23.1 upgraded that edge
    /// node's edgecore from v1.23.0 and then rolled it back (the README): the Node stays
    /// Ready throughout, so only its kubelet version tells an upgrade happened, and the
    /// first write after the rollback still carries the version rolled back from.
    #[test]
    fn a_real_upgrade_and_rollback_show_in_the_nodes_version_only() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kube-apiserver/watch-upgrade.jsonl");
        let mut seen = Vec::new();
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let event: WatchEvent<Node> = serde_json::from_str(line).unwrap();
            match event {
                WatchEvent::Modified(n) => {
                    let node = NodeState::of(&n);
                    assert!(node.is_ready(), "{node:?}");
                    seen.push(node.kubeedge_version().unwrap().to_string());
                }
                WatchEvent::Bookmark(_) => seen.push("bookmark".into()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ["v1.23.1", "bookmark", "v1.23.1", "v1.23.0"]);
    }

    #[test]
    fn a_node_that_turns_not_ready_loses_its_ready_time() {
        let mut state = State::default();
        saw(&mut state, node("a", "True", "t1"), false);
        saw(&mut state, node("a", "False", "t2"), false);
        assert!(state.nodes["a"].ready_since.is_none());
    }
}
