//! The site coordinator: who of a site seeds each payload, who reads it from which
//! source, who serves, and what crossed the uplink. Pure state behind one lock, shared by
//! the nodes' workers; it makes no connection (the node's steps in `node` do).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::key::RelayKey;
use crate::outcome::SiteTraffic;
use crate::plan::site_addresses::site_addresses;
use crate::plan::{NodePlan, Site, sites as sites_of};
use crate::remote::relay::{Source, tag_from};

/// How many nodes read from one source at a time: the source's disk and link are shared
/// by its own join too.
const READERS_PER_SOURCE: usize = 4;

/// A source whose copies failed this many times serves no more.
const FAILURES_PER_SOURCE: u32 = 2;

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
    /// The run's relay tag ([`crate::remote::relay::tag_from`]): the last field of every
    /// line the run serves with, and its keys' comment.
    tag: String,
    /// Each relaying site's node addresses, what a source's `from=` admits: fixed for the
    /// run, so read without the lock.
    addresses: HashMap<Site, Vec<String>>,
    /// Each node's address in its site (by its index), what it serves from and binds
    /// its fetches to.
    node_addresses: HashMap<usize, String>,
    sites: Mutex<HashMap<Site, SiteState>>,
    changed: Condvar,
    /// The image archives each source (by its index) serves from its upload dir, to be
    /// removed once it serves no more.
    after_serving: Mutex<HashMap<usize, AfterServing>>,
}

/// A source's image archives, imported and listed by its runtime, that it serves from
/// its upload dir: removed when its relay line goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterServing {
    /// Their names in the upload dir.
    pub files: Vec<String>,
    /// The runtime that lists their images, for the note.
    pub runtime: String,
}

impl Relay {
    /// The relay for `nodes`, or `None` when no site has two or more of them whose
    /// addresses `resolve` knows (see [`site_addresses`]; a site that cannot relay says
    /// why on the console), or no tag can be made. Its keys, one per payload, are made as
    /// the payloads are first claimed.
    pub fn for_nodes(
        nodes: &[NodePlan],
        resolve: &dyn Fn(&str) -> std::io::Result<Vec<std::net::IpAddr>>,
    ) -> Option<Arc<Relay>> {
        let mut addresses = HashMap::new();
        let mut node_addresses = HashMap::new();
        let mut sites = HashMap::new();
        for (site, members) in sites_of(nodes) {
            let plans: Vec<&NodePlan> = members.iter().map(|&i| &nodes[i]).collect();
            let found = match site_addresses(&plans, resolve) {
                Ok(found) => found,
                Err(why) => {
                    log::warn!(
                        "The site {site} does not relay: {why}. Each of its nodes gets its files from this machine."
                    );
                    continue;
                }
            };
            addresses.insert(
                site.clone(),
                found.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
            );
            node_addresses.extend(found);
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
            sites.insert(site.clone(), state);
        }
        if sites.is_empty() {
            return None;
        }
        let mut random = [0u8; 8];
        if let Err(e) = openssl::rand::rand_bytes(&mut random) {
            log::warn!(
                "Cannot make the relay's tag ({e}), so every node gets its files from this machine."
            );
            return None;
        }
        Some(Arc::new(Relay {
            tag: tag_from(random),
            addresses,
            node_addresses,
            sites: Mutex::new(sites),
            changed: Condvar::new(),
            after_serving: Mutex::new(HashMap::new()),
        }))
    }

    /// The run's relay tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The address of the node with `index` in its relaying site.
    pub fn address_of(&self, index: usize) -> Option<&str> {
        self.node_addresses.get(&index).map(String::as_str)
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

    /// A node's role for the payload `sha256` of `site`, now. A node that cannot serve
    /// (`serves` false) never seeds: the site's other nodes would wait for a copy it will
    /// not serve, so it reads from a source or waits for one, or else gets the payload
    /// directly.
    pub fn claim(&self, site: &Site, sha256: &str, serves: bool) -> Role {
        let mut sites = self.sites.lock().unwrap();
        self.claim_locked(&mut sites, site, sha256, serves)
    }

    /// [`Relay::claim`], with the key that reads the payload from its sources (`None`
    /// when none could be made: the role is then `Direct`).
    pub fn claim_keyed(
        &self,
        site: &Site,
        sha256: &str,
        serves: bool,
    ) -> (Role, Option<Arc<RelayKey>>) {
        let mut sites = self.sites.lock().unwrap();
        let role = self.claim_locked(&mut sites, site, sha256, serves);
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
        serves: bool,
    ) -> Role {
        let Some(state) = sites.get_mut(site) else {
            return Role::Direct;
        };
        if state.end_head_start() {
            self.changed.notify_all();
        }
        if !state.payloads.contains_key(sha256) {
            match RelayKey::generate(&self.tag) {
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
        claim(payload, serves)
    }

    /// Waits until `node` has a role other than [`Role::Wait`]: a free source, or the
    /// seeding slot a failed seed gave up. `Direct` once `limit` has passed or
    /// `stopping` says so.
    pub fn wait(
        &self,
        site: &Site,
        sha256: &str,
        serves: bool,
        limit: Duration,
        stopping: impl Fn() -> bool,
    ) -> Role {
        let until = Instant::now() + limit;
        let mut sites = self.sites.lock().unwrap();
        loop {
            match self.claim_locked(&mut sites, site, sha256, serves) {
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

    /// `node` serves `archive`s from its upload dir that it no longer needs itself: they
    /// go when its line does ([`Relay::take_after_serving`]).
    pub fn remove_after_serving(&self, node: usize, archives: AfterServing) {
        let mut pending = self.after_serving.lock().unwrap();
        let entry = pending.entry(node).or_insert(AfterServing {
            files: Vec::new(),
            runtime: archives.runtime,
        });
        entry.files.extend(archives.files);
    }

    /// What `node`, which serves no more, is to remove.
    pub fn take_after_serving(&self, node: usize) -> Option<AfterServing> {
        self.after_serving.lock().unwrap().remove(&node)
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

fn claim(payload: &mut Payload, serves: bool) -> Role {
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
        payload.unclaimed = payload.unclaimed.saturating_sub(1);
        if !serves {
            return Role::Direct;
        }
        payload.seeding = true;
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

    fn relay_of(nodes: &[NodePlan]) -> Arc<Relay> {
        Relay::for_nodes(nodes, &crate::plan::site_addresses::resolve_here).unwrap()
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
        let relay = relay_of(&nodes);
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert_eq!(relay.claim(&site, "a", true), Role::Wait);
        relay.seed_failed(&site, "a");
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[1]));
        relay.holds(&site, "a", 1, source(1));
        for _ in 0..READERS_PER_SOURCE {
            assert!(matches!(
                relay.claim(&site, "a", true),
                Role::From { node: 1, .. }
            ));
        }
        assert_eq!(relay.claim(&site, "a", true), Role::Wait);
        assert!(relay.serves_if_worth(&site, "a", &nodes[2]));
        relay.holds(&site, "a", 2, source(2));
        assert!(matches!(
            relay.claim(&site, "a", true),
            Role::From { node: 2, .. }
        ));
        // Another payload (another arch) has its own seed.
        assert_eq!(relay.claim(&site, "b", true), Role::Seed);
        // A source that keeps failing is dropped.
        relay.read_done(&site, "a", 2, false);
        relay.read_done(&site, "a", 2, false);
        assert_eq!(
            relay.wait(&site, "a", true, Duration::from_millis(10), || false),
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
        let relay = relay_of(&nodes);
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[0]));
        relay.holds(&site, "a", 0, source(0));
        for _ in 1..4 {
            assert!(matches!(
                relay.claim(&site, "a", true),
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
        let relay = relay_of(&nodes);
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert!(relay.serves_if_worth(&site, "a", &nodes[0]));
        relay.holds(&site, "a", 0, source(0));
        for _ in 1..4 {
            assert!(matches!(relay.claim(&site, "a", true), Role::From { .. }));
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
        let relay = relay_of(&nodes);
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert!(
            relay.worth_serving(&site, "a"),
            "five nodes wait for the seed"
        );
        relay.holds(&site, "a", 0, source(0));
        for _ in 0..READERS_PER_SOURCE {
            assert!(matches!(
                relay.claim(&site, "a", true),
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
        let relay = relay_of(&nodes);
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
                relay.claim(&site, "a", true)
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

    /// A node that cannot serve never seeds (the site would wait for a copy it does not
    /// serve): it gets the payload directly, reads from a source there is, or waits for
    /// a seed on its way; the next node that can serve seeds.
    #[test]
    fn a_node_that_cannot_serve_never_seeds() {
        let nodes = site_of(4);
        let relay = relay_of(&nodes);
        let site = Site::Named("s1".into());
        assert_eq!(relay.claim(&site, "a", false), Role::Direct);
        assert_eq!(relay.claim(&site, "a", true), Role::Seed);
        assert_eq!(relay.claim(&site, "a", false), Role::Wait);
        relay.holds(&site, "a", 1, source(1));
        assert!(matches!(
            relay.claim(&site, "a", false),
            Role::From { node: 1, .. }
        ));
    }

    /// Each run's tag is its own 64 random bits; the nodes' addresses are kept by index.
    #[test]
    fn a_relay_has_a_random_tag_and_each_nodes_address() {
        let nodes = site_of(2);
        let (a, b) = (relay_of(&nodes), relay_of(&nodes));
        for relay in [&a, &b] {
            let random = relay.tag().strip_prefix("keadm-batch-relay-").unwrap();
            assert_eq!(random.len(), 16, "{}", relay.tag());
            assert!(random.bytes().all(|c| c.is_ascii_hexdigit()));
        }
        assert_ne!(a.tag(), b.tag());
        assert_eq!(a.address_of(nodes[1].index), Some("10.0.0.1"));
    }
}
