//! One copy per site: which node of a site gets keadm from this machine (the seed) and
//! which get it from a node of the site that has it already (docs/decisions.md, "One
//! copy per site"). The nodes' workers share one [`Relay`]; the shell text it needs is in
//! `remote::relay`.
//!
//! A fan-out: the first node of a site to need a payload seeds it over the uplink; every
//! later one reads from a node that holds it (the seed, or any node that got it from a
//! peer, so the tree widens), at most [`READERS_PER_SOURCE`] at a time from one source.
//! A node that finds neither a free source nor a free seeding slot waits for one; a seed
//! that fails hands the role to the next node. Any failure of a fetch sends that node the
//! direct way; a relay never fails a node.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use std::io::Cursor;

use openssl::pkey::PKey;

use super::privilege::{exec_as, password_of};
use super::run::WatchReceived;
use super::upload::{Arrival, Move, Upload};
use super::{Context, Run, StepError};
use crate::node_text::{CappedBuffer, STEP_OUTPUT_CAP};
use crate::outcome::{Phase, SiteTraffic};
use crate::plan::{KeadmSource, NodePlan, Site, sites};
use crate::remote::relay::{RELAY_FAILED, RELAY_FAILED_LINE, Source};
use crate::remote::{self, NodeFacts, Privilege, Sha256Tool};
use crate::report::transcript::Transcript;
use crate::transport::{Connection, RemoteExit};

/// How many nodes read from one source at a time: the source's disk and link are shared
/// by its own join too.
const READERS_PER_SOURCE: usize = 4;

/// A source whose copies failed this many times serves no more.
const FAILURES_PER_SOURCE: u32 = 2;

/// The run's relay key: an ed25519 key made for this run only, held in memory. The
/// private half goes to receivers in their script (deleted there after the fetch); the
/// public half into sources' authorized_keys, restricted to reading one file.
pub struct RelayKey {
    pub private_openssh: String,
    pub public_line: String,
}

impl RelayKey {
    /// A fresh key.
    pub fn generate(comment: &str) -> Result<RelayKey, openssl::error::ErrorStack> {
        let key = PKey::generate_ed25519()?;
        let public = key.raw_public_key()?;
        let seed = key.raw_private_key()?;
        Ok(RelayKey {
            private_openssh: openssh_private_key(&seed, &public, comment),
            public_line: format!("ssh-ed25519 {}", base64_of(&public_blob(&public))),
        })
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// SSH wire format: a string is its length (u32, big-endian) and its bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn public_blob(public: &[u8]) -> Vec<u8> {
    let mut blob = Vec::new();
    put_string(&mut blob, b"ssh-ed25519");
    put_string(&mut blob, public);
    blob
}

/// OpenSSH's own private key format (`openssh-key-v1`, unencrypted), which every OpenSSH
/// client reads: the public blob, then a private section of two equal check words, the
/// key (its private half is seed then public key) and the comment, padded 1, 2, 3... to
/// a multiple of 8.
fn openssh_private_key(seed: &[u8], public: &[u8], comment: &str) -> String {
    let check = fastrand::u32(..).to_be_bytes();
    let mut private = Vec::new();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    put_string(&mut private, b"ssh-ed25519");
    put_string(&mut private, public);
    put_string(&mut private, &[seed, public].concat());
    put_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while !private.len().is_multiple_of(8) {
        private.push(pad);
        pad += 1;
    }
    let mut body = b"openssh-key-v1\0".to_vec();
    put_string(&mut body, b"none");
    put_string(&mut body, b"none");
    put_string(&mut body, b"");
    body.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut body, &public_blob(public));
    put_string(&mut body, &private);
    let text = base64_of(&body);
    let mut out = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for chunk in text.as_bytes().chunks(70) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    out
}

/// What a node does about a payload its site relays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Get it from this machine, then serve it to the site.
    Seed,
    /// Read it from this node of the site.
    From { node: usize, source: Source },
    /// A seed is on its way and no source is free: wait.
    Wait,
    /// Get it from this machine and serve nobody (the wait ran out).
    Direct,
}

struct Holder {
    node: usize,
    source: Source,
    readers: usize,
    failures: u32,
}

struct Payload {
    /// The key that reads this payload and nothing else: each source's line for it runs
    /// `cat` of one file, so a payload needs a key of its own.
    key: Arc<RelayKey>,
    seeding: bool,
    holders: Vec<Holder>,
    /// The site's nodes that have not claimed this payload yet: a node becomes a source
    /// only while they outnumber the free places at the sources there are.
    unclaimed: usize,
}

impl Payload {
    /// While the site's nodes still to claim outnumber the free places at its sources.
    fn worth_serving(&self) -> bool {
        let free: usize = self
            .holders
            .iter()
            .map(|h| READERS_PER_SOURCE.saturating_sub(h.readers))
            .sum();
        self.unclaimed > free
    }
}

struct SiteState {
    /// Nodes not done yet.
    left: usize,
    /// The site's payloads by sha256.
    payloads: HashMap<String, Payload>,
    /// Nodes whose authorized_keys have this run's lines, to be removed.
    sources: Vec<NodePlan>,
    /// Nodes whose own work is done: they add no line any more.
    done: HashSet<usize>,
    /// The first node of the site to start, while the others let it go first.
    head_start: HeadStart,
    traffic: SiteTraffic,
}

/// The site's first node connects and prepares before the others start to: it is likely
/// the seed, and its copy's way over the uplink is what every other node of the site waits
/// for, while their own connections and prepare steps (which all share the control host's
/// CPU with it) fit in the time that copy takes.
#[derive(Default)]
struct HeadStart {
    first: Option<usize>,
    over: bool,
}

impl SiteState {
    /// The site's first node knows what it needs, or is done: the head start is over.
    /// Whether this call ended it (the waiting nodes are to be woken).
    fn end_head_start(&mut self) -> bool {
        !std::mem::replace(&mut self.head_start.over, true)
    }

    /// Takes out the sources nobody will read from again: done themselves (so they add
    /// no line any more), no reader now, and every node of the site has claimed each
    /// payload they hold (so no reader comes).
    fn idle_sources(&mut self) -> Vec<NodePlan> {
        let payloads = &self.payloads;
        let busy = |node: usize| {
            payloads.values().any(|p| {
                p.holders
                    .iter()
                    .any(|h| h.node == node && (h.readers > 0 || p.unclaimed > 0))
            })
        };
        let (idle, serving): (Vec<NodePlan>, Vec<NodePlan>) = std::mem::take(&mut self.sources)
            .into_iter()
            .partition(|n| self.done.contains(&n.index) && !busy(n.index));
        self.sources = serving;
        for payload in self.payloads.values_mut() {
            payload
                .holders
                .retain(|h| !idle.iter().any(|n| n.index == h.node));
        }
        idle
    }
}

/// The sites of one run and who holds what.
pub struct Relay {
    /// What each payload's key says it is: the run's tag.
    key_comment: String,
    /// Each relaying site's node addresses, what a source's `from=` admits: fixed for the
    /// run, so read without the lock.
    addresses: HashMap<Site, Vec<String>>,
    sites: Mutex<HashMap<Site, SiteState>>,
    changed: Condvar,
}

impl Relay {
    /// The relay for `nodes`, or `None` when no site has two or more of them. Its keys,
    /// one per payload, are made as the payloads are first claimed, with `key_comment`.
    pub fn for_nodes(nodes: &[NodePlan], key_comment: &str) -> Option<Arc<Relay>> {
        let grouped = sites(nodes);
        let addresses = grouped
            .iter()
            .map(|(site, members)| {
                let hosts = members.iter().map(|&i| nodes[i].ssh.host.clone()).collect();
                ((*site).clone(), hosts)
            })
            .collect();
        let sites: HashMap<Site, SiteState> = grouped
            .into_iter()
            .map(|(site, members)| {
                let state = SiteState {
                    left: members.len(),
                    payloads: HashMap::new(),
                    sources: Vec::new(),
                    done: HashSet::new(),
                    head_start: HeadStart::default(),
                    traffic: SiteTraffic {
                        site: site.to_string(),
                        nodes: members.len(),
                        ..SiteTraffic::default()
                    },
                };
                (site.clone(), state)
            })
            .collect();
        (!sites.is_empty()).then(|| {
            Arc::new(Relay {
                key_comment: key_comment.to_string(),
                addresses,
                sites: Mutex::new(sites),
                changed: Condvar::new(),
            })
        })
    }

    /// The addresses a source of `site` admits; `None` when `site` relays nothing.
    pub fn addresses(&self, site: &Site) -> Option<&[String]> {
        self.addresses.get(site).map(Vec::as_slice)
    }

    /// Before `node` of `site` connects: the site's first node to start goes at once;
    /// any other waits until that one has claimed its first payload (or learned it needs
    /// none), is done, or `limit` has passed. Returns how long it waited.
    pub fn head_start(
        &self,
        site: &Site,
        node: usize,
        limit: Duration,
        stopping: impl Fn() -> bool,
    ) -> Duration {
        let since = Instant::now();
        let mut sites = self.sites.lock().unwrap();
        loop {
            let Some(state) = sites.get_mut(site) else {
                return Duration::ZERO;
            };
            let head = &mut state.head_start;
            match head.first {
                None => {
                    head.first = Some(node);
                    return Duration::ZERO;
                }
                Some(first) if first == node || head.over => return since.elapsed(),
                Some(_) => {}
            }
            let waited = since.elapsed();
            if waited >= limit || stopping() {
                return waited;
            }
            let step = (limit - waited).min(Duration::from_millis(250));
            sites = self.changed.wait_timeout(sites, step).unwrap().0;
        }
    }

    /// The site's first node knows what it needs (or is done): the others may start.
    pub fn head_start_over(&self, site: &Site) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(state) = sites.get_mut(site)
            && state.end_head_start()
        {
            self.changed.notify_all();
        }
    }

    /// `node`'s role for the payload `sha256` of `site`, now.
    pub fn claim(&self, site: &Site, sha256: &str) -> Role {
        let mut sites = self.sites.lock().unwrap();
        self.claim_locked(&mut sites, site, sha256)
    }

    /// [`Relay::claim`], with the key that reads the payload from its sources (`None`
    /// when none could be made: the role is then `Direct`).
    pub fn claim_keyed(&self, site: &Site, sha256: &str) -> (Role, Option<Arc<RelayKey>>) {
        let mut sites = self.sites.lock().unwrap();
        let role = self.claim_locked(&mut sites, site, sha256);
        let key = sites
            .get(site)
            .and_then(|s| s.payloads.get(sha256))
            .map(|p| p.key.clone());
        (role, key)
    }

    fn claim_locked(
        &self,
        sites: &mut HashMap<Site, SiteState>,
        site: &Site,
        sha256: &str,
    ) -> Role {
        let Some(state) = sites.get_mut(site) else {
            return Role::Direct;
        };
        if state.end_head_start() {
            self.changed.notify_all();
        }
        if !state.payloads.contains_key(sha256) {
            match RelayKey::generate(&self.key_comment) {
                Ok(key) => {
                    let payload = Payload {
                        key: Arc::new(key),
                        seeding: false,
                        holders: Vec::new(),
                        unclaimed: state.traffic.nodes,
                    };
                    state.payloads.insert(sha256.to_string(), payload);
                }
                Err(e) => {
                    log::warn!(
                        "Cannot make a relay key ({e}), so the site {site} gets this payload from this machine, node by node."
                    );
                    return Role::Direct;
                }
            }
        }
        let payload = state.payloads.get_mut(sha256).expect("inserted above");
        claim(payload)
    }

    /// Waits until `node` has a role other than [`Role::Wait`]: a free source, or the
    /// seeding slot a failed seed gave up. `Direct` once `limit` has passed or
    /// `stopping` says so.
    pub fn wait(
        &self,
        site: &Site,
        sha256: &str,
        limit: Duration,
        stopping: impl Fn() -> bool,
    ) -> Role {
        let until = Instant::now() + limit;
        let mut sites = self.sites.lock().unwrap();
        loop {
            match self.claim_locked(&mut sites, site, sha256) {
                Role::Wait => {}
                role => return role,
            }
            let now = Instant::now();
            if now >= until || stopping() {
                return Role::Direct;
            }
            let step = (until - now).min(Duration::from_millis(250));
            sites = self.changed.wait_timeout(sites, step).unwrap().0;
        }
    }

    /// `node` holds the payload now (its copy is checked and in place) and serves it.
    pub fn holds(&self, site: &Site, sha256: &str, node: usize, source: Source) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(state) = sites.get_mut(site) {
            let Some(payload) = state.payloads.get_mut(sha256) else {
                return;
            };
            payload.seeding = false;
            payload.holders.push(Holder {
                node,
                source,
                readers: 0,
                failures: 0,
            });
        }
        self.changed.notify_all();
    }

    /// Whether a node that has just claimed `sha256` of `site` should serve it too: only
    /// while the site's nodes still to claim outnumber the free places at its sources, so
    /// the last waves of a site serve nobody (each source costs a connection to clear it).
    pub fn worth_serving(&self, site: &Site, sha256: &str) -> bool {
        let sites = self.sites.lock().unwrap();
        sites
            .get(site)
            .and_then(|s| s.payloads.get(sha256))
            .is_some_and(Payload::worth_serving)
    }

    /// Whether `node`, which has just got its role for `sha256`, serves it (see
    /// [`Relay::worth_serving`]); when it does, its authorized_keys will have this run's
    /// line, so it is counted among the sources to clear.
    pub fn serves_if_worth(&self, site: &Site, sha256: &str, node: &NodePlan) -> bool {
        let mut sites = self.sites.lock().unwrap();
        let Some(state) = sites.get_mut(site) else {
            return false;
        };
        if !state
            .payloads
            .get(sha256)
            .is_some_and(Payload::worth_serving)
        {
            return false;
        }
        if !state.sources.iter().any(|s| s.index == node.index) {
            state.sources.push(node.clone());
        }
        true
    }

    /// The seed did not get the payload: the next node may seed.
    pub fn seed_failed(&self, site: &Site, sha256: &str) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(payload) = sites.get_mut(site).and_then(|s| s.payloads.get_mut(sha256)) {
            payload.seeding = false;
        }
        self.changed.notify_all();
    }

    /// A read from `source` ended; a source whose copies keep failing serves no more.
    pub fn read_done(&self, site: &Site, sha256: &str, source: usize, ok: bool) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(payload) = sites.get_mut(site).and_then(|s| s.payloads.get_mut(sha256))
            && let Some(at) = payload.holders.iter().position(|h| h.node == source)
        {
            let holder = &mut payload.holders[at];
            holder.readers = holder.readers.saturating_sub(1);
            if !ok {
                holder.failures += 1;
                if holder.failures >= FAILURES_PER_SOURCE {
                    payload.holders.remove(at);
                }
            }
        }
        self.changed.notify_all();
    }

    /// Counts a copy of `bytes` that crossed the uplink (`from_peer` false) or came from
    /// a node of the site.
    pub fn count(&self, site: &Site, bytes: u64, from_peer: bool) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(state) = sites.get_mut(site) {
            let t = &mut state.traffic;
            if from_peer {
                t.peer_copies += 1;
                t.peer_bytes += bytes;
            } else {
                t.uplink_copies += 1;
                t.uplink_bytes += bytes;
            }
        }
    }

    /// `node` of `site` is done. Returns the sources whose lines are to be removed now:
    /// every one left when it was the site's last node, else those nobody will read from
    /// again (see [`SiteState::idle_sources`]), so the site's last node does not clear
    /// them all, one connection each, after everyone else is done.
    pub fn node_done(&self, site: &Site, node: usize) -> Vec<NodePlan> {
        let mut sites = self.sites.lock().unwrap();
        let Some(state) = sites.get_mut(site) else {
            return Vec::new();
        };
        state.left = state.left.saturating_sub(1);
        state.done.insert(node);
        if state.end_head_start() {
            self.changed.notify_all();
        }
        if state.left > 0 {
            return state.idle_sources();
        }
        // Nobody reads any more: nothing may be served.
        state.payloads.clear();
        std::mem::take(&mut state.sources)
    }

    /// Every source whose line is still there (sites the run did not finish).
    pub fn remaining_sources(&self) -> Vec<NodePlan> {
        let mut sites = self.sites.lock().unwrap();
        sites
            .values_mut()
            .flat_map(|s| {
                s.payloads.clear();
                std::mem::take(&mut s.sources)
            })
            .collect()
    }

    /// What each site moved, in site order.
    pub fn traffic(&self) -> Vec<SiteTraffic> {
        let sites = self.sites.lock().unwrap();
        let mut out: Vec<SiteTraffic> = sites.values().map(|s| s.traffic.clone()).collect();
        out.sort_by(|a, b| a.site.cmp(&b.site));
        out
    }
}

/// A node's part in its site's relay, for one payload (keadm for its arch, or an offline
/// image archive).
pub(super) struct NodeRelay {
    relay: Arc<Relay>,
    site: Site,
    /// The payload's name in the upload dir.
    name: String,
    sha256: String,
    size: u64,
    /// The key that reads this payload from its sources.
    key: Arc<RelayKey>,
    role: Role,
    /// What the node checks a copy with.
    hasher: Sha256Tool,
    /// Whether the node serves its copy to the site once it has it.
    serve: bool,
}

impl NodeRelay {
    /// Takes `role` (after a wait), serving when the site still needs sources.
    fn take_role(&mut self, role: Role, node: &NodePlan) {
        self.serve = matches!(role, Role::Seed | Role::From { .. })
            && self.relay.serves_if_worth(&self.site, &self.sha256, node);
        self.role = role;
    }
}

/// The longest a node waits for its site's first node to connect and prepare.
const HEAD_START: Duration = Duration::from_secs(3);

/// How long the run's line on a source may serve should nobody remove it: long past any
/// site's work in one run, short enough that a crashed run leaves no lasting key.
const SERVE_LIFETIME: Duration = Duration::from_secs(6 * 3600);

/// Why a fetch from a peer failed, from what its script printed.
fn fetch_failure(output: &str) -> String {
    output
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix(RELAY_FAILED_LINE)
                .map(|why| why.trim().to_string())
        })
        .unwrap_or_default()
}

impl Run<'_, '_> {
    /// The relay and the node's site, when the node's site relays.
    fn relay_site(&self) -> Option<(&Arc<Relay>, &Site)> {
        let relay = self.ctx.relay.as_ref()?;
        let site = self.node.site.as_ref()?;
        relay.addresses(site).map(|_| (relay, site))
    }

    /// Whether the node's prepare step asks for its tools and clears earlier runs'
    /// relay lines: when its site relays and it gets keadm or image archives from here.
    pub(super) fn relay_active(&self) -> bool {
        self.relay_site().is_some()
            && (self.node.keadm == KeadmSource::Staged || self.images_in_play().is_some())
    }

    /// The node's part in its site's relay for `upload`, claimed now: `None` when its
    /// site relays nothing.
    fn claim_payload(&self, upload: &Upload, hasher: Sha256Tool) -> Option<NodeRelay> {
        let (relay, site) = self.relay_site()?;
        let (role, key) = relay.claim_keyed(site, upload.sha256());
        let key = key?;
        let mut claimed = NodeRelay {
            relay: relay.clone(),
            site: site.clone(),
            name: upload.name.clone(),
            sha256: upload.sha256().to_string(),
            size: upload.size,
            key,
            role: Role::Direct,
            hasher,
            serve: false,
        };
        claimed.take_role(role, self.node);
        Some(claimed)
    }

    /// The node's role for `upload` (keadm), claimed once: `None` when its site relays
    /// nothing, or the node cannot check a copy's sha256.
    pub(super) fn relay_claim(&mut self, upload: &Upload, facts: &NodeFacts) -> Option<Role> {
        if let Some(claimed) = &self.relay {
            return Some(claimed.role.clone());
        }
        let hasher = facts.sha256_tool()?;
        if upload.name != "keadm" || !self.relay_active() {
            return None;
        }
        let claimed = self.claim_payload(upload, hasher)?;
        let role = claimed.role.clone();
        self.relay = Some(claimed);
        Some(role)
    }

    /// The line that makes the node a source of its copy of keadm at the temporary name
    /// `tmp` (or at keadm's final name): for the seed and for nodes that read from a peer.
    pub(super) fn serve_line(&self, tmp: &str) -> String {
        self.relay
            .as_ref()
            .map(|claimed| self.serve_line_of(claimed, tmp))
            .unwrap_or_default()
    }

    /// The line that makes the node a source of `claimed`'s payload at `tmp` (or at its
    /// final name); empty when the node does not serve it.
    fn serve_line_of(&self, claimed: &NodeRelay, tmp: &str) -> String {
        if !claimed.serve || self.host_key.is_none() {
            return String::new();
        }
        let from = claimed.relay.addresses(&claimed.site).unwrap_or_default();
        remote::relay::serve_script(
            &self.node.upload_dir,
            tmp,
            &claimed.name,
            &claimed.sha256,
            &claimed.key.public_line,
            from,
            &self.ctx.run_token,
            SERVE_LIFETIME.as_secs(),
        )
    }

    /// Tells the relay, when the node's copy of keadm is in, that the node holds it.
    pub(super) fn relay_announcer(&self) -> Option<Box<dyn FnOnce()>> {
        self.announcer_of(self.relay.as_ref()?)
    }

    /// Tells the relay, once called, that the node holds `claimed`'s payload: `None` when
    /// the node does not serve it.
    fn announcer_of(&self, claimed: &NodeRelay) -> Option<Box<dyn FnOnce()>> {
        if !claimed.serve {
            return None;
        }
        let node = self.node;
        let source = Source {
            host: node.ssh.host.clone(),
            port: node.ssh.port,
            user: node.ssh.username.clone(),
            host_key: self.host_key.clone()?,
        };
        let (relay, site, sha256, index) = (
            claimed.relay.clone(),
            claimed.site.clone(),
            claimed.sha256.clone(),
            node.index,
        );
        Some(Box::new(move || relay.holds(&site, &sha256, index, source)))
    }

    /// After a run that carried keadm from this machine: a seed that did not get it
    /// hands its role on; a copy that arrived is counted as crossing the uplink.
    pub(super) fn relay_settle(&mut self, received: bool, sent: Option<u64>) {
        let Some(claimed) = &mut self.relay else {
            return;
        };
        settle(claimed, received, sent);
    }

    /// Waits, abortably, for a source of `claimed`'s payload while a seed is on its way;
    /// a node whose wait runs out, or that becomes the seed, gets it the direct way.
    fn wait_for_source(&mut self, claimed: &mut NodeRelay) {
        let name = claimed.name.clone();
        self.transcript
            .note(&format!("waiting for a node of the site to have {name}"));
        let limit = self.node.deadlines.upload(claimed.size);
        let cancel = self.ctx.cancel;
        let since = Instant::now();
        let role = claimed
            .relay
            .wait(&claimed.site, &claimed.sha256, limit, || cancel.stopping());
        self.transcript.note(&format!(
            "waited {:.2} s for a node of the site",
            since.elapsed().as_secs_f64()
        ));
        claimed.take_role(role, self.node);
        if claimed.role == Role::Direct {
            self.transcript.note(&format!(
                "no node of the site had {name} in time: getting it from this machine"
            ));
        }
    }

    /// When the node reads keadm from a node of its site: takes keadm out of `uploads`
    /// and returns it (it goes the direct way should the read fail). Waits for a source
    /// while a seed is on its way.
    pub(super) fn relay_from_peer(
        &mut self,
        uploads: &mut Vec<Upload>,
        facts: &NodeFacts,
    ) -> Option<Upload> {
        let keadm = uploads.last().filter(|u| u.name == "keadm")?;
        if self.node_has(facts, keadm) {
            return None;
        }
        if self.relay_claim(keadm, facts)? == Role::Wait {
            let mut claimed = self.relay.take()?;
            self.wait_for_source(&mut claimed);
            self.relay = Some(claimed);
        }
        let role = &self.relay.as_ref()?.role;
        matches!(role, Role::From { .. }).then(|| uploads.pop().expect("keadm is last"))
    }

    /// The script that reads `claimed`'s payload from its source into `tmp` with `mode`
    /// and checks it; `None` when the node reads from no peer.
    fn fetch_script_of(&mut self, claimed: &NodeRelay, tmp: &str, mode: u32) -> Option<String> {
        let Role::From { source, .. } = &claimed.role else {
            return None;
        };
        self.transcript.note(&format!(
            "reading {} from {} of the site {}, not from this machine",
            claimed.name, source.host, claimed.site
        ));
        Some(remote::relay::fetch_script(
            &self.node.upload_dir,
            tmp,
            source,
            &self.node.ssh.host,
            &claimed.sha256,
            claimed.size,
            mode,
            claimed.hasher,
            self.fetch_limit(claimed).as_secs(),
        ))
    }

    /// How long a read from a peer may take before the node gives up on it: what a direct
    /// upload of the payload may take.
    fn fetch_limit(&self, claimed: &NodeRelay) -> Duration {
        self.node.deadlines.upload(claimed.size)
    }

    /// Tells the relay how a read of `claimed`'s payload from a peer ended, and says so in
    /// the transcript: when it failed (`why`), the node gets the payload from this machine.
    fn fetch_ended(&mut self, claimed: &NodeRelay, received: bool, failed: Option<String>) {
        let Role::From {
            node: source_node,
            source,
        } = &claimed.role
        else {
            return;
        };
        let (relay, site) = (&claimed.relay, &claimed.site);
        relay.read_done(site, &claimed.sha256, *source_node, received);
        if let Some(why) = failed {
            self.transcript.note(&format!(
                "reading {} from {} failed ({why}); getting it from this machine instead",
                claimed.name, source.host
            ));
        } else if received {
            relay.count(site, claimed.size, true);
            self.transcript.note(&format!(
                "{} came from {} of the site ({} bytes), checked against the sha256 this machine verified",
                claimed.name, source.host, claimed.size
            ));
        }
    }

    /// Reads keadm from the site's source into place and runs it, in one channel. `true`
    /// when the read failed and keadm did not run: it goes the direct way (the reason is
    /// in the transcript).
    pub(super) fn run_relayed(
        &mut self,
        conn: &mut dyn Connection,
        moves: &[Move],
        privilege: Privilege,
    ) -> Result<bool, StepError> {
        let claimed = self.relay.take().expect("claimed before");
        let tmp = self.temp_name("keadm");
        let Some(script) = self.fetch_script_of(&claimed, &tmp, 0o755) else {
            self.relay = Some(claimed);
            return Ok(true);
        };
        let arrival = Arrival {
            script,
            failed: RELAY_FAILED,
            to_move: (tmp, "keadm".to_string(), claimed.sha256.clone()),
        };
        // The read has its own limit on the node; keadm keeps its whole deadline after it.
        let time = self.node.deadlines.command + self.fetch_limit(&claimed);
        let key = claimed.key.clone();
        let announce = self.announcer_of(&claimed);
        self.relay = Some(claimed);
        let outcome = self.timed(Phase::Running, |run| {
            let script = run.keadm_script(moves, Some(arrival));
            let deadline = Instant::now() + time;
            let mut key = Cursor::new(key.private_openssh.clone().into_bytes());
            let watch = WatchReceived::new(true).announcing(announce);
            let (result, watch) =
                run.exec_run_script(conn, &script, privilege, Some(&mut key), deadline, watch)?;
            Ok((result, watch.seen()))
        })?;
        let (result, received) = outcome;
        let claimed = self.relay.take().expect("claimed before");
        let failed = (!received && matches!(result, Ok(RemoteExit::Code(RELAY_FAILED))))
            .then(|| fetch_failure(&self.transcript.tail(usize::MAX).join("\n")));
        self.fetch_ended(&claimed, received, failed.clone());
        self.relay = Some(claimed);
        if failed.is_some() {
            return Ok(true);
        }
        self.timed(Phase::Running, |run| {
            run.keadm_ended(conn, result, privilege)
        })?;
        Ok(false)
    }

    /// Uploads image archives (`uploads`, each checked by its sha256) the way the node's
    /// site relays them: the first node of the site to need one gets it from this machine
    /// and serves it; the others read it from a node that has it, and get it from this
    /// machine should that fail. Returns the renames into place, as [`Run::upload`] does.
    /// A node whose site relays nothing gets them all from this machine.
    pub(super) fn upload_relaying(
        &mut self,
        conn: &mut dyn Connection,
        uploads: Vec<Upload>,
        facts: &NodeFacts,
        privilege: Privilege,
        hasher: Sha256Tool,
    ) -> Result<Vec<Move>, StepError> {
        if self.relay_site().is_none() {
            return Ok(self.upload(conn, uploads, facts, privilege, false)?.0);
        }
        let mut moves = Vec::new();
        // Archives a seed is on its way for come last: the node seeds or reads the others
        // meanwhile, so a site's archives cross its uplink side by side.
        let mut waiting = Vec::new();
        for upload in uploads {
            let Some(claimed) = self.claim_payload(&upload, hasher) else {
                moves.extend(self.upload(conn, vec![upload], facts, privilege, false)?.0);
                continue;
            };
            if claimed.role == Role::Wait {
                waiting.push((upload, claimed));
            } else {
                moves.extend(self.relay_or_upload(conn, upload, claimed, facts, privilege)?);
            }
        }
        for (upload, mut claimed) in waiting {
            self.wait_for_source(&mut claimed);
            moves.extend(self.relay_or_upload(conn, upload, claimed, facts, privilege)?);
        }
        Ok(moves)
    }

    /// Gets one archive as `claimed` says: from a peer (falling back to this machine), or
    /// from this machine, serving it afterwards when the site needs sources.
    fn relay_or_upload(
        &mut self,
        conn: &mut dyn Connection,
        upload: Upload,
        mut claimed: NodeRelay,
        facts: &NodeFacts,
        privilege: Privilege,
    ) -> Result<Vec<Move>, StepError> {
        if let Some(received) = self.fetch_from_peer(conn, &upload, &claimed, privilege)? {
            return Ok(vec![received]);
        }
        if matches!(claimed.role, Role::From { .. }) {
            // The read failed: this node gets it directly and serves nobody.
            claimed.role = Role::Direct;
            claimed.serve = false;
        }
        let tmp = self.temp_name(&upload.name);
        let upload = upload.then(self.serve_line_of(&claimed, &tmp));
        let announce = self.announcer_of(&claimed);
        let before = self.bytes_uploaded;
        let result = self.upload(conn, vec![upload], facts, privilege, false);
        let received = matches!(&result, Ok((moves, _)) if !moves.is_empty());
        settle(&mut claimed, received, Some(self.bytes_uploaded - before));
        if let (true, Some(announce)) = (received, announce) {
            announce();
        }
        Ok(result?.0)
    }

    /// Reads one archive from the peer `claimed` names into its temporary name, checked
    /// by size and sha256, in a channel of its own (the run's key on stdin). `None`, with
    /// the reason in the transcript, when the node reads from no peer or the read failed.
    fn fetch_from_peer(
        &mut self,
        conn: &mut dyn Connection,
        upload: &Upload,
        claimed: &NodeRelay,
        privilege: Privilege,
    ) -> Result<Option<Move>, StepError> {
        let tmp = self.temp_name(&upload.name);
        let Some(fetch) = self.fetch_script_of(claimed, &tmp, upload.mode) else {
            return Ok(None);
        };
        let script = format!("{fetch}{}", self.serve_line_of(claimed, &tmp));
        // The read stops itself at its limit; the check and the serve line get a step.
        let deadline = Instant::now() + self.fetch_limit(claimed) + self.node.deadlines.step;
        let mut output = CappedBuffer::new(STEP_OUTPUT_CAP);
        let mut key = Cursor::new(claimed.key.private_openssh.clone().into_bytes());
        let result = self.timed(Phase::Uploading, |run| {
            Ok(exec_as(
                conn,
                &script,
                privilege,
                password_of(run.node),
                Some(&mut key),
                deadline,
                &mut output,
            ))
        })?;
        let exit = result.map_err(|e| {
            StepError::transport(
                Phase::Uploading,
                format!("Cannot read {} from a node of the site.", upload.name),
                e,
            )
        })?;
        if !exit.success() {
            let why = match fetch_failure(&output.text()) {
                why if why.is_empty() => exit.to_string(),
                why => why,
            };
            self.fetch_ended(claimed, false, Some(why));
            return Ok(None);
        }
        self.fetch_ended(claimed, true, None);
        if let Some(announce) = self.announcer_of(claimed) {
            announce();
        }
        Ok(Some((tmp, upload.name.clone(), claimed.sha256.clone())))
    }

    /// Before the node connects: lets its site's first node go first (see
    /// [`Relay::head_start`]), at most [`HEAD_START`].
    pub(super) fn relay_head_start(&mut self) {
        if !self.relay_active() {
            return;
        }
        let Some((relay, site)) = self.relay_site() else {
            return;
        };
        let cancel = self.ctx.cancel;
        let waited = relay.head_start(site, self.node.index, HEAD_START, || cancel.stopping());
        if !waited.is_zero() {
            self.transcript.note(&format!(
                "waited {:.2} s for the site's first node to connect and prepare",
                waited.as_secs_f64()
            ));
        }
    }

    /// The node knows what it needs: its site's other nodes need not wait for it.
    pub(super) fn relay_knows_its_needs(&self) {
        if let Some((relay, site)) = self.relay_site() {
            relay.head_start_over(site);
        }
    }

    /// The node is done: the site's sources nobody reads from any more serve no more
    /// (all of them when it was the site's last).
    pub(super) fn relay_done(&mut self) {
        let (Some(relay), Some(site)) = (self.ctx.relay.as_ref(), self.node.site.as_ref()) else {
            return;
        };
        unserve_all(&relay.node_done(site, self.node.index), self.ctx);
    }
}

/// After a copy of `claimed`'s payload was sent from this machine (`sent` bytes): a seed
/// that did not get it hands its role on; a copy that arrived is counted as crossing the
/// uplink.
fn settle(claimed: &mut NodeRelay, received: bool, sent: Option<u64>) {
    if claimed.role == Role::Seed && !received {
        claimed.relay.seed_failed(&claimed.site, &claimed.sha256);
        // Handed on once: should this node's next form fail too, another node may be
        // seeding by then, and its slot is not this node's to give away.
        claimed.role = Role::Direct;
    }
    if let (true, Some(bytes)) = (received, sent) {
        claimed.relay.count(&claimed.site, bytes, false);
    }
}

/// How many sources are cleared at once: each is a connection of its own.
const CLEARED_AT_ONCE: usize = 16;

/// Removes this run's relay line from every node of `sources`, [`CLEARED_AT_ONCE`] at a
/// time: one after another, a site's sources held its last node (and the run's end) for
/// a connection each, 1.5 s in bench/sites.sh. The threads are the node pool's kind
/// ([`crate::pool::joined`]): they use libssh2 and OpenSSL, so each has exited before
/// this returns. Should no thread start, the sources are cleared on this one.
pub fn unserve_all(sources: &[NodePlan], ctx: &Context) {
    if let [source] = sources {
        unserve(source, ctx);
        return;
    }
    if sources.is_empty() {
        return;
    }
    let threads = rayon::ThreadPoolBuilder::new()
        .num_threads(sources.len().min(CLEARED_AT_ONCE))
        .thread_name(|i| format!("keadm-batch-unserve-{i}"));
    let cleared = crate::pool::joined(threads, |pool| {
        pool.scope(|scope| {
            for source in sources {
                scope.spawn(move |_| unserve(source, ctx));
            }
        })
    });
    if cleared.is_err() {
        for source in sources {
            unserve(source, ctx);
        }
    }
}

/// Removes this run's relay line from `node`'s authorized_keys: a connection of its own,
/// as the login user (whose file it is), within the node's step deadline. Best effort:
/// the line expires by itself, and the next run removes it too.
fn unserve(node: &NodePlan, ctx: &Context) {
    let mut run = Run::new(node, ctx, Transcript::in_memory(node.redactor.clone()));
    let Ok(mut conn) = run.connect() else {
        log::debug!("{}: cannot connect to remove the relay key", node.name);
        return;
    };
    let mut out = CappedBuffer::new(STEP_OUTPUT_CAP);
    let deadline = Instant::now() + node.deadlines.step;
    let script = remote::relay::unserve_script(&ctx.run_token, false);
    if let Err(e) = conn.exec(&script, None, deadline, &mut out) {
        log::debug!("{}: cannot remove the relay key: {e}", node.name);
    }
}

fn claim(payload: &mut Payload) -> Role {
    // The least busy source with room.
    if let Some(holder) = payload
        .holders
        .iter_mut()
        .filter(|h| h.readers < READERS_PER_SOURCE)
        .min_by_key(|h| h.readers)
    {
        holder.readers += 1;
        payload.unclaimed = payload.unclaimed.saturating_sub(1);
        return Role::From {
            node: holder.node,
            source: holder.source.clone(),
        };
    }
    if payload.holders.is_empty() && !payload.seeding {
        payload.seeding = true;
        payload.unclaimed = payload.unclaimed.saturating_sub(1);
        return Role::Seed;
    }
    Role::Wait
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::NodePlan;

    fn site_of(n: usize) -> Vec<NodePlan> {
        (0..n)
            .map(|i| {
                let mut node = NodePlan::sample(i);
                node.ssh.host = format!("10.0.0.{i}");
                node.site = Some(Site::Named("s1".into()));
                node
            })
            .collect()
    }

    fn source(i: usize) -> Source {
        Source {
            host: format!("10.0.0.{i}"),
            port: 22,
            user: "root".into(),
            host_key: "ssh-ed25519 AAAA".into(),
        }
    }

    /// The first node seeds, the others wait for it, then read at most four at a time
    /// from each holder; a failed seed hands the role on; the sources come back once.
    #[test]
    fn one_seed_then_a_widening_fan_out_then_the_sources_to_clean() {
        let nodes = site_of(7);
        let relay = Relay::for_nodes(&nodes, "keadm-batch-relay-test").unwrap();
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert_eq!(relay.claim(&site, "a"), Role::Wait);
        relay.seed_failed(&site, "a");
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[1]));
        relay.holds(&site, "a", 1, source(1));
        for _ in 0..READERS_PER_SOURCE {
            assert!(matches!(
                relay.claim(&site, "a"),
                Role::From { node: 1, .. }
            ));
        }
        assert_eq!(relay.claim(&site, "a"), Role::Wait);
        assert!(relay.serves_if_worth(&site, "a", &nodes[2]));
        relay.holds(&site, "a", 2, source(2));
        assert!(matches!(
            relay.claim(&site, "a"),
            Role::From { node: 2, .. }
        ));
        // Another payload (another arch) has its own seed.
        assert_eq!(relay.claim(&site, "b"), Role::Seed);
        // A source that keeps failing is dropped.
        relay.read_done(&site, "a", 2, false);
        relay.read_done(&site, "a", 2, false);
        assert_eq!(
            relay.wait(&site, "a", Duration::from_millis(10), || false),
            Role::Direct
        );
        // Node 1 still has its readers, node 2 is not done: neither is cleared early.
        for node in [0, 3, 4, 5, 6, 1] {
            assert!(relay.node_done(&site, node).is_empty());
        }
        let cleaned: Vec<usize> = relay.node_done(&site, 2).iter().map(|n| n.index).collect();
        assert_eq!(cleaned, vec![1, 2]);
        assert!(relay.remaining_sources().is_empty());
    }

    /// A source is cleared as soon as nobody will read from it again (it is done, has no
    /// reader, and every node has claimed), not when the whole site is done; a source that
    /// is not done yet is cleared when it is.
    #[test]
    fn a_source_nobody_reads_from_any_more_is_cleared_before_the_site_is_done() {
        let nodes = site_of(4);
        let relay = Relay::for_nodes(&nodes, "keadm-batch-relay-test").unwrap();
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[0]));
        relay.holds(&site, "a", 0, source(0));
        for _ in 1..4 {
            assert!(matches!(
                relay.claim(&site, "a"),
                Role::From { node: 0, .. }
            ));
        }
        assert!(
            relay.node_done(&site, 0).is_empty(),
            "three nodes read from it"
        );
        relay.read_done(&site, "a", 0, true);
        relay.read_done(&site, "a", 0, true);
        assert!(relay.node_done(&site, 1).is_empty(), "node 3 still reads");
        relay.read_done(&site, "a", 0, true);
        let cleaned: Vec<usize> = relay.node_done(&site, 3).iter().map(|n| n.index).collect();
        assert_eq!(cleaned, vec![0], "its last reader is done");
        assert!(relay.node_done(&site, 2).is_empty(), "cleared once");
        assert!(relay.remaining_sources().is_empty());

        // A source still at its own work when its last reader is done: cleared when it is.
        let relay = Relay::for_nodes(&nodes, "keadm-batch-relay-test").unwrap();
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[0]));
        relay.holds(&site, "a", 0, source(0));
        for _ in 1..4 {
            assert!(matches!(relay.claim(&site, "a"), Role::From { .. }));
            relay.read_done(&site, "a", 0, true);
        }
        assert!(relay.node_done(&site, 1).is_empty());
        let cleaned: Vec<usize> = relay.node_done(&site, 0).iter().map(|n| n.index).collect();
        assert_eq!(cleaned, vec![0]);
    }

    /// A node serves only while the site's nodes still to claim outnumber the free places
    /// at the sources: the last wave serves nobody, so it is not cleared either.
    #[test]
    fn only_nodes_the_site_still_needs_become_sources() {
        let nodes = site_of(6);
        let relay = Relay::for_nodes(&nodes, "keadm-batch-relay-test").unwrap();
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert!(
            relay.worth_serving(&site, "a"),
            "five nodes wait for the seed"
        );
        relay.holds(&site, "a", 0, source(0));
        for _ in 0..READERS_PER_SOURCE {
            assert!(matches!(
                relay.claim(&site, "a"),
                Role::From { node: 0, .. }
            ));
        }
        assert!(
            relay.worth_serving(&site, "a"),
            "one node left, and the seed has no free place"
        );
        relay.holds(&site, "a", 1, source(1));
        assert!(
            !relay.worth_serving(&site, "a"),
            "one node left, and four free places at node 1"
        );
    }

    /// The site's first node to start goes at once; the others wait until it has claimed
    /// (or is done), and no longer than their limit.
    #[test]
    fn the_first_node_of_a_site_goes_first() {
        let nodes = site_of(3);
        let relay = Relay::for_nodes(&nodes, "keadm-batch-relay-test").unwrap();
        let site = Site::Named("s1".into());
        let limit = Duration::from_millis(300);
        assert_eq!(relay.head_start(&site, 0, limit, || false), Duration::ZERO);
        let waited = relay.head_start(&site, 1, limit, || false);
        assert!(
            waited >= limit,
            "no claim yet, so it waits out its limit: {waited:?}"
        );
        let claimer = {
            let relay = relay.clone();
            let site = site.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                relay.claim(&site, "a")
            })
        };
        let waited = relay.head_start(&site, 2, Duration::from_secs(10), || false);
        assert_eq!(claimer.join().unwrap(), Role::Seed);
        assert!(
            waited < Duration::from_secs(5),
            "the first node's claim lets it go: {waited:?}"
        );
        assert!(
            relay.head_start(&site, 1, limit, || false) < limit,
            "once over, nobody waits"
        );
    }

    /// A key OpenSSH itself reads: ssh-keygen derives the same public key from it.
    #[test]
    fn the_relay_key_is_one_openssh_reads() {
        let key = RelayKey::generate("keadm-batch-relay-test").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, &key.private_openssh).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let Ok(out) = std::process::Command::new("ssh-keygen")
            .args(["-y", "-f"])
            .arg(&path)
            .output()
        else {
            panic!("ssh-keygen is needed for this test (openssh-client)");
        };
        assert!(out.status.success(), "{out:?}");
        let derived = String::from_utf8_lossy(&out.stdout);
        assert!(
            derived.starts_with(&format!("{} ", key.public_line)),
            "{derived} against {}",
            key.public_line
        );
    }
}
