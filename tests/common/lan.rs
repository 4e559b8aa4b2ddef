//! Site LANs for a fleet: network namespaces the fixture makes, joined by veth pairs and
//! one bridge per LAN, so a site's nodes share a network and nodes of different LANs
//! cannot reach each other at all (see the fleet's module doc for the picture).
//!
//! Only namespaces made here carry traffic: each LAN's bridge lives in a namespace of its
//! own, each node's end in the node's, and the control host (the test process, in the
//! root namespace) has one veth end per LAN, in that LAN's subnet. Nothing is bridged or
//! routed to the machine's own interfaces, and nodes have no default route.
//!
//! Names: every namespace and root-side interface is `kbf<pid>-<fleet><kind><i>` (pid and
//! fleet number in base 36, at most 15 characters, the kernel's limit for interfaces), so
//! concurrent test binaries and fleets never share one. Subnets: one /24 of 198.18.0.0/15
//! (the benchmarking range) per LAN, picked under a file lock among those no address or
//! route of the root namespace touches, starting at a place derived from the pid. What a
//! crashed earlier test process left (its pid is gone, or is ours now) is removed before
//! the first LAN of a process is made.

use std::fs;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every name this fixture gives a namespace or interface.
const PREFIX: &str = "kbf";
/// The lock that makes picking a subnet and taking it one step across processes.
const LOCK: &str = "/var/tmp/keadm-fleet-lans.lock";

static NEXT_FLEET: AtomicU32 = AtomicU32::new(0);
static CLEAN_STALE: Once = Once::new();

/// The LANs of one fleet and every name they took, torn down on drop.
pub struct SiteLans {
    /// Named network namespaces made, LANs' and nodes', in the order made.
    namespaces: Vec<String>,
    /// The control host's veth end of each LAN, in the root namespace.
    uplinks: Vec<String>,
    /// Node `i`'s namespace and address.
    nodes: Vec<(String, String)>,
    /// Each LAN's subnet, `198.18.x.0/24`, and the control host's address on it.
    subnets: Vec<(String, String)>,
}

impl SiteLans {
    /// Makes LANs for nodes whose LAN numbers are `lans` (node `i` is on LAN `lans[i]`,
    /// LANs numbered from 0 with none skipped). Panics saying what the machine lacks when
    /// it cannot: a test that asked for LANs must not run on loopback instead.
    pub fn create(lans: &[usize]) -> SiteLans {
        if super::own_uid() != 0 {
            panic!("{}", needs("the tests run as a user other than root"));
        }
        let count = lans.iter().max().map_or(0, |m| m + 1);
        for lan in 0..count {
            assert!(
                lans.contains(&lan),
                "fleet: site_lans numbers the LANs from 0 without gaps; LAN {lan} has no node in {lans:?}"
            );
        }
        assert!(
            lans.len() <= 240,
            "fleet: at most 240 nodes fit the LANs' addresses"
        );
        let fleet = NEXT_FLEET.fetch_add(1, Ordering::Relaxed);
        let stem = format!("{PREFIX}{}-{}", base36(std::process::id()), base36(fleet));
        let mut made = SiteLans {
            namespaces: Vec::new(),
            uplinks: Vec::new(),
            nodes: Vec::new(),
            subnets: Vec::new(),
        };
        // The lock is held from choosing the subnets until the control host's addresses
        // are on them: from then on every other process sees them taken.
        let lock = Lock::take();
        CLEAN_STALE.call_once(clean_stale);
        let subnets = free_subnets(count);
        for (lan, third) in subnets.into_iter().enumerate() {
            let net = format!("198.{}.{}", 18 + third / 256, third % 256);
            let ns = name(&stem, 'l', lan);
            ip(&["netns", "add", &ns]);
            made.namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "add", "br0", "type", "bridge"]);
            let uplink = name(&stem, 'h', lan);
            ip(&[
                "link", "add", &uplink, "type", "veth", "peer", "name", "up0", "netns", &ns,
            ]);
            made.uplinks.push(uplink.clone());
            ip(&["-n", &ns, "link", "set", "up0", "master", "br0"]);
            ip(&["-n", &ns, "link", "set", "up0", "up"]);
            ip(&["-n", &ns, "link", "set", "br0", "up"]);
            let host = format!("{net}.1");
            ip(&["addr", "add", &format!("{host}/24"), "dev", &uplink]);
            ip(&["link", "set", &uplink, "up"]);
            made.subnets.push((format!("{net}.0/24"), host));
        }
        drop(lock);
        for (i, &lan) in lans.iter().enumerate() {
            let ns = name(&stem, 'n', i);
            ip(&["netns", "add", &ns]);
            made.namespaces.push(ns.clone());
            let lan_ns = name(&stem, 'l', lan);
            let port = format!("v{i}");
            ip(&[
                "-n", &lan_ns, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            ip(&["-n", &lan_ns, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &lan_ns, "link", "set", &port, "up"]);
            let net = made.subnets[lan].0.trim_end_matches(".0/24").to_string();
            let address = format!("{net}.{}", 10 + i);
            // The /24 is the node's one route: its LAN, the control host's end included.
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            made.nodes.push((ns, address));
        }
        made
    }

    /// Node `i`'s network namespace, as a path `nsenter --net=` takes.
    pub fn netns_path(&self, i: usize) -> String {
        format!("/run/netns/{}", self.nodes[i].0)
    }

    /// Node `i`'s address on its LAN.
    pub fn address(&self, i: usize) -> &str {
        &self.nodes[i].1
    }

    /// LAN `lan`'s subnet (`198.18.x.0/24`) and the control host's address on it.
    pub fn subnet(&self, lan: usize) -> (&str, &str) {
        let (net, host) = &self.subnets[lan];
        (net, host)
    }
}

impl Drop for SiteLans {
    /// Removes every name this fleet took. The fleet's nodes are gone by now (they drop
    /// first); a process still in one of the namespaces is one of theirs and is killed.
    fn drop(&mut self) {
        for uplink in &self.uplinks {
            // One end of a veth pair takes the other with it.
            quiet_ip(&["link", "del", uplink]);
        }
        for ns in self.namespaces.iter().rev() {
            remove_namespace(ns);
        }
    }
}

/// The message for a machine that cannot make the LANs.
fn needs(why: &str) -> String {
    format!(
        "fleet: cannot make the site LANs ({why}). The relay tests put nodes in network \
         namespaces joined by veth pairs and bridges: they need root, iproute2's `ip` \
         (scripts/setup.sh installs it) and a kernel with veth and bridge support."
    )
}

/// Runs `ip args`, panicking with what the machine lacks should it fail.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}", needs(&format!("cannot run `ip`: {e}"))));
    if !out.status.success() {
        panic!(
            "{}",
            needs(&format!(
                "`ip {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip args` for teardown: failures are reported, never panics (a drop may run while a
/// test already panics).
fn quiet_ip(args: &[&str]) -> bool {
    match Command::new("ip").args(args).output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "fleet: `ip {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(e) => {
            eprintln!("fleet: cannot run `ip`: {e}");
            false
        }
    }
}

fn remove_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: plain kill(2) on a process inside a namespace this fixture made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    quiet_ip(&["netns", "del", ns]);
}

fn name(stem: &str, kind: char, i: usize) -> String {
    let name = format!("{stem}{kind}{i}");
    assert!(name.len() <= 15, "fleet: interface name {name} is too long");
    name
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// The pid in one of this fixture's names, `kbf<pid>-...`.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    u32::from_str_radix(pid, 36).ok()
}

/// Removes the namespaces and root-side links of test processes that died without
/// dropping their fleets: their pid is gone, or is ours (this process has made none
/// yet, since this runs once before its first LAN).
fn clean_stale() {
    let me = std::process::id();
    let stale = |name: &str| {
        owner_pid(name)
            .is_some_and(|pid| pid == me || !fs::exists(format!("/proc/{pid}")).unwrap_or(true))
    };
    let links = ip(&["-o", "link", "show"]);
    for line in links.lines() {
        // `7: kbf1a2b-0h0@if6: <...` in the root namespace.
        let Some(link) = line.split(": ").nth(1) else {
            continue;
        };
        let link = link.split('@').next().unwrap_or(link);
        if stale(link) {
            quiet_ip(&["link", "del", link]);
        }
    }
    for line in ip(&["netns", "list"]).lines() {
        let ns = line.split_whitespace().next().unwrap_or("");
        if stale(ns) {
            remove_namespace(ns);
        }
    }
}

/// An exclusive flock on [`LOCK`], released on drop.
struct Lock(fs::File);

impl Lock {
    fn take() -> Lock {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK)
            .unwrap_or_else(|e| panic!("fleet: cannot open {LOCK}: {e}"));
        // SAFETY: flock(2) on a descriptor this struct owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "fleet: cannot lock {LOCK}");
        Lock(file)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as in `take`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// `count` /24s of 198.18.0.0/15 (as their index 0..512: 198.18.0.0/24 is 0) that no
/// address or route of the root namespace overlaps, starting at a place derived from the
/// pid so that concurrent processes seldom even look at the same ones.
fn free_subnets(count: usize) -> Vec<u32> {
    let mut taken: Vec<(u32, u32)> = Vec::new();
    let addrs = ip(&["-4", "-o", "addr", "show"]);
    let routes = ip(&["-4", "route", "show", "table", "all"]);
    for word in addrs.split_whitespace().chain(routes.split_whitespace()) {
        if let Some(prefix) = parse_prefix(word) {
            taken.push(prefix);
        }
    }
    let start = (std::process::id() * 7) % 512;
    let mut found = Vec::new();
    for k in 0..512 {
        let third = (start + k) % 512;
        let net = (198 << 24) | ((18 + third / 256) << 16) | ((third % 256) << 8);
        if !taken.iter().any(|&p| overlaps(p, (net, 24))) {
            found.push(third);
            if found.len() == count {
                return found;
            }
        }
    }
    panic!("fleet: no free /24 left in 198.18.0.0/15 for {count} site LANs");
}

/// `a.b.c.d/len` or `a.b.c.d` (a host) as (address, prefix length).
fn parse_prefix(word: &str) -> Option<(u32, u32)> {
    let (addr, len) = match word.split_once('/') {
        Some((a, l)) => (a, l.parse().ok()?),
        None => (word, 32),
    };
    let ip: std::net::Ipv4Addr = addr.parse().ok()?;
    (len <= 32).then_some((u32::from(ip), len))
}

fn overlaps((a, alen): (u32, u32), (b, blen): (u32, u32)) -> bool {
    let len = alen.min(blen);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a & mask == b & mask
}
