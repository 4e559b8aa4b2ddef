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

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use std::io::Cursor;

use openssl::pkey::PKey;

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

#[derive(Default)]
struct Payload {
    seeding: bool,
    holders: Vec<Holder>,
}

struct SiteState {
    /// Nodes not done yet.
    left: usize,
    /// Nodes that have no role yet: a node becomes a source only while they outnumber the
    /// free places at the sources there are.
    unclaimed: usize,
    payloads: HashMap<String, Payload>,
    /// Nodes whose authorized_keys have this run's line, to be removed.
    sources: Vec<NodePlan>,
    traffic: SiteTraffic,
}

/// The sites of one run and who holds what.
pub struct Relay {
    pub key: RelayKey,
    /// Each relaying site's node addresses, what a source's `from=` admits: fixed for the
    /// run, so read without the lock.
    addresses: HashMap<Site, Vec<String>>,
    sites: Mutex<HashMap<Site, SiteState>>,
    changed: Condvar,
}

impl Relay {
    /// The relay for `nodes`, or `None` when no site has two or more of them.
    pub fn for_nodes(nodes: &[NodePlan], key: RelayKey) -> Option<Arc<Relay>> {
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
                    unclaimed: members.len(),
                    payloads: HashMap::new(),
                    sources: Vec::new(),
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
                key,
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

    /// `node`'s role for the payload `sha256` of `site`, now.
    pub fn claim(&self, site: &Site, sha256: &str) -> Role {
        let mut sites = self.sites.lock().unwrap();
        claim(&mut sites, site, sha256)
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
            match claim(&mut sites, site, sha256) {
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
            let payload = state.payloads.entry(sha256.to_string()).or_default();
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
        let Some(state) = sites.get(site) else {
            return false;
        };
        let free: usize = state.payloads.get(sha256).map_or(0, |p| {
            p.holders
                .iter()
                .map(|h| READERS_PER_SOURCE.saturating_sub(h.readers))
                .sum()
        });
        state.unclaimed > free
    }

    /// `node`'s authorized_keys has (or may have) this run's line.
    pub fn serves(&self, site: &Site, node: &NodePlan) {
        let mut sites = self.sites.lock().unwrap();
        if let Some(state) = sites.get_mut(site)
            && !state.sources.iter().any(|s| s.index == node.index)
        {
            state.sources.push(node.clone());
        }
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

    /// `node` of `site` is done. When it was the site's last, the site's sources are
    /// returned: their lines are to be removed now.
    pub fn node_done(&self, site: &Site) -> Vec<NodePlan> {
        let mut sites = self.sites.lock().unwrap();
        let Some(state) = sites.get_mut(site) else {
            return Vec::new();
        };
        state.left = state.left.saturating_sub(1);
        if state.left > 0 {
            return Vec::new();
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

/// A node's part in its site's relay, for one payload (keadm for its arch).
pub(super) struct NodeRelay {
    relay: Arc<Relay>,
    site: Site,
    sha256: String,
    size: u64,
    role: Role,
    /// What the node checks a copy with.
    hasher: Sha256Tool,
    /// Whether the node serves its copy to the site once it has it.
    serve: bool,
}

/// How long the run's line on a source may serve should nobody remove it: long past any
/// site's work in one run, short enough that a crashed run leaves no lasting key.
const SERVE_LIFETIME: Duration = Duration::from_secs(6 * 3600);

impl Run<'_, '_> {
    /// The relay and the node's site, when the node's site relays.
    fn relay_site(&self) -> Option<(&Arc<Relay>, &Site)> {
        let relay = self.ctx.relay.as_ref()?;
        let site = self.node.site.as_ref()?;
        relay.addresses(site).map(|_| (relay, site))
    }

    /// Whether the node's prepare step asks for its tools and clears earlier runs'
    /// relay lines: when its site relays.
    pub(super) fn relay_active(&self) -> bool {
        self.relay_site().is_some() && self.node.keadm == KeadmSource::Staged
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
        let (relay, site) = self.relay_site()?;
        let (relay, site) = (relay.clone(), site.clone());
        let role = relay.claim(&site, upload.sha256());
        let serve = matches!(role, Role::Seed | Role::From { .. })
            && relay.worth_serving(&site, upload.sha256());
        if serve {
            relay.serves(&site, self.node);
        }
        self.relay = Some(NodeRelay {
            relay,
            site,
            sha256: upload.sha256().to_string(),
            size: upload.size,
            role: role.clone(),
            hasher,
            serve,
        });
        Some(role)
    }

    /// The line that makes the node a source of its copy at the temporary name `tmp`
    /// (or at keadm's final name): for the seed and for nodes that read from a peer.
    pub(super) fn serve_line(&self, tmp: &str) -> String {
        let Some(claimed) = &self.relay else {
            return String::new();
        };
        if !claimed.serve || self.host_key.is_none() {
            return String::new();
        }
        let from = claimed.relay.addresses(&claimed.site).unwrap_or_default();
        remote::relay::serve_script(
            &self.node.upload_dir,
            tmp,
            "keadm",
            &claimed.relay.key.public_line,
            from,
            &self.ctx.run_token,
            SERVE_LIFETIME.as_secs(),
        )
    }

    /// Tells the relay, when the node's copy is in, that the node holds it.
    pub(super) fn relay_announcer(&self) -> Option<Box<dyn FnOnce()>> {
        let claimed = self.relay.as_ref()?;
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
        let Some(claimed) = &self.relay else { return };
        if claimed.role == Role::Seed && !received {
            claimed.relay.seed_failed(&claimed.site, &claimed.sha256);
        }
        if let (true, Some(bytes)) = (received, sent) {
            claimed.relay.count(&claimed.site, bytes, false);
        }
    }

    /// When the node reads keadm from a node of its site: takes keadm out of `uploads`
    /// and returns it (it goes the direct way should the read fail). Waits, abortably,
    /// for a source while a seed is on its way; a node whose wait runs out, or that
    /// becomes the seed, gets keadm the direct way.
    pub(super) fn relay_from_peer(
        &mut self,
        uploads: &mut Vec<Upload>,
        facts: &NodeFacts,
    ) -> Option<Upload> {
        let keadm = uploads.last().filter(|u| u.name == "keadm")?;
        if self.node_has(facts, keadm) {
            return None;
        }
        let mut role = self.relay_claim(keadm, facts)?;
        if role == Role::Wait {
            let claimed = self.relay.as_ref()?;
            self.transcript
                .note("waiting for a node of the site to have keadm");
            let limit = self.node.deadlines.upload(claimed.size);
            let cancel = self.ctx.cancel;
            let since = Instant::now();
            role = claimed
                .relay
                .wait(&claimed.site, &claimed.sha256, limit, || cancel.stopping());
            self.transcript.note(&format!(
                "waited {:.2} s for a node of the site",
                since.elapsed().as_secs_f64()
            ));
            let serve = matches!(role, Role::Seed | Role::From { .. })
                && claimed.relay.worth_serving(&claimed.site, &claimed.sha256);
            if serve {
                claimed.relay.serves(&claimed.site, self.node);
            }
            if let Some(claimed) = &mut self.relay {
                claimed.role = role.clone();
                claimed.serve = serve;
            }
            if role == Role::Direct {
                self.transcript
                    .note("no node of the site had keadm in time: getting it from this machine");
            }
        }
        matches!(role, Role::From { .. }).then(|| uploads.pop().expect("keadm is last"))
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
        let claimed = self.relay.as_ref().expect("claimed before");
        let Role::From {
            node: source_node,
            source,
        } = claimed.role.clone()
        else {
            return Ok(true);
        };
        let (relay, site, sha256, size, hasher) = (
            claimed.relay.clone(),
            claimed.site.clone(),
            claimed.sha256.clone(),
            claimed.size,
            claimed.hasher,
        );
        let node = self.node;
        let tmp = self.temp_name("keadm");
        let arrival = Arrival {
            script: remote::relay::fetch_script(
                &node.upload_dir,
                &tmp,
                &source,
                &node.ssh.host,
                &sha256,
                size,
                hasher,
            ),
            failed: RELAY_FAILED,
            to_move: (tmp, "keadm".to_string(), sha256.clone()),
        };
        self.transcript.note(&format!(
            "reading keadm from {} of the site {site}, not from this machine",
            source.host
        ));
        let announce = self.relay_announcer();
        let outcome = self.timed(Phase::Running, |run| {
            let script = run.keadm_script(moves, Some(arrival));
            let deadline = Instant::now() + run.keadm_time(size);
            let mut key = Cursor::new(relay.key.private_openssh.clone().into_bytes());
            let watch = WatchReceived::new(true).announcing(announce);
            let (result, watch) =
                run.exec_run_script(conn, &script, privilege, Some(&mut key), deadline, watch)?;
            Ok((result, watch.seen()))
        })?;
        let (result, received) = outcome;
        if !received && matches!(result, Ok(RemoteExit::Code(RELAY_FAILED))) {
            relay.read_done(&site, &sha256, source_node, false);
            let why = self
                .transcript
                .tail(usize::MAX)
                .into_iter()
                .rev()
                .find_map(|l| {
                    l.strip_prefix(RELAY_FAILED_LINE)
                        .map(|why| why.trim().to_string())
                })
                .unwrap_or_default();
            self.transcript.note(&format!(
                "reading keadm from {} failed ({why}); getting it from this machine instead",
                source.host
            ));
            return Ok(true);
        }
        relay.read_done(&site, &sha256, source_node, received);
        if received {
            relay.count(&site, size, true);
            self.transcript.note(&format!(
                "keadm came from {} of the site ({size} bytes), checked against the verified release's sha256",
                source.host
            ));
        }
        self.timed(Phase::Running, |run| {
            run.keadm_ended(conn, result, privilege)
        })?;
        Ok(false)
    }

    /// The node is done: when it was its site's last, the site's sources serve no more.
    pub(super) fn relay_done(&mut self) {
        let (Some(relay), Some(site)) = (self.ctx.relay.as_ref(), self.node.site.as_ref()) else {
            return;
        };
        unserve_all(&relay.node_done(site), self.ctx);
    }
}

/// Removes this run's relay line from every node of `sources`, one after another. Few
/// nodes serve (see [`Relay::worth_serving`]), so this costs a site a few connections.
pub fn unserve_all(sources: &[NodePlan], ctx: &Context) {
    for source in sources {
        unserve(source, ctx);
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

fn claim(sites: &mut HashMap<Site, SiteState>, site: &Site, sha256: &str) -> Role {
    let Some(state) = sites.get_mut(site) else {
        return Role::Direct;
    };
    let unclaimed = &mut state.unclaimed;
    let payload = state.payloads.entry(sha256.to_string()).or_default();
    // The least busy source with room.
    if let Some(holder) = payload
        .holders
        .iter_mut()
        .filter(|h| h.readers < READERS_PER_SOURCE)
        .min_by_key(|h| h.readers)
    {
        holder.readers += 1;
        *unclaimed = unclaimed.saturating_sub(1);
        return Role::From {
            node: holder.node,
            source: holder.source.clone(),
        };
    }
    if payload.holders.is_empty() && !payload.seeding {
        payload.seeding = true;
        *unclaimed = unclaimed.saturating_sub(1);
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

    fn key() -> RelayKey {
        RelayKey {
            private_openssh: String::new(),
            public_line: String::new(),
        }
    }

    /// The first node seeds, the others wait for it, then read at most four at a time
    /// from each holder; a failed seed hands the role on; the sources come back once.
    #[test]
    fn one_seed_then_a_widening_fan_out_then_the_sources_to_clean() {
        let nodes = site_of(7);
        let relay = Relay::for_nodes(&nodes, key()).unwrap();
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        assert_eq!(relay.claim(&site, "a"), Role::Wait);
        relay.seed_failed(&site, "a");
        assert_eq!(relay.claim(&site, "a"), Role::Seed);
        relay.serves(&site, &nodes[1]);
        relay.holds(&site, "a", 1, source(1));
        for _ in 0..READERS_PER_SOURCE {
            assert!(matches!(
                relay.claim(&site, "a"),
                Role::From { node: 1, .. }
            ));
        }
        assert_eq!(relay.claim(&site, "a"), Role::Wait);
        relay.serves(&site, &nodes[2]);
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
        for _ in 0..6 {
            assert!(relay.node_done(&site).is_empty());
        }
        let cleaned: Vec<usize> = relay.node_done(&site).iter().map(|n| n.index).collect();
        assert_eq!(cleaned, vec![1, 2]);
        assert!(relay.remaining_sources().is_empty());
    }

    /// A node serves only while the site's nodes still to claim outnumber the free places
    /// at the sources: the last wave serves nobody, so it is not cleared either.
    #[test]
    fn only_nodes_the_site_still_needs_become_sources() {
        let nodes = site_of(6);
        let relay = Relay::for_nodes(&nodes, key()).unwrap();
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
