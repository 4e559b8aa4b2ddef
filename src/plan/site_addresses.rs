//! The address each node of a relaying site is known by inside its site: what a
//! source's `from=` admits and what a receiver binds its fetch to. sshd compares `from=`
//! with the peer's address, and under its default `UseDNS no` never with a name, so a
//! node whose `ssh.ip` is a host name is resolved here, on the control host; a site with
//! a name that does not resolve does not relay (the run and `--dry-run` say why).

use std::io;
use std::net::{IpAddr, ToSocketAddrs};

use crate::plan::NodePlan;

/// Resolves a host name on this machine, as the run's own connection would.
pub fn resolve_here(host: &str) -> io::Result<Vec<IpAddr>> {
    Ok((host, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
}

/// The address of each of `members` (by their `index`), for the site's relay: `ssh.ip`
/// itself when it is an address, else the first IPv4 address `resolve` gives for it (a
/// site's LAN is most often IPv4), else its first. `Err` with why when a name does not
/// resolve.
pub fn site_addresses(
    members: &[&NodePlan],
    resolve: &dyn Fn(&str) -> io::Result<Vec<IpAddr>>,
) -> Result<Vec<(usize, String)>, String> {
    members
        .iter()
        .map(|node| {
            let host = node.ssh.host.as_str();
            if host.parse::<IpAddr>().is_ok() {
                return Ok((node.index, host.to_string()));
            }
            let found = resolve(host).map_err(|e| e.to_string()).and_then(|found| {
                found
                    .iter()
                    .find(|a| a.is_ipv4())
                    .or(found.first())
                    .copied()
                    .ok_or_else(|| "no address".to_string())
            });
            match found {
                Ok(address) => Ok((node.index, address.to_string())),
                Err(why) => Err(format!(
                    "the ssh.ip {host} of {} does not resolve on this machine ({why}), and a source admits its readers by address",
                    node.name
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize, host: &str) -> NodePlan {
        let mut node = NodePlan::sample(i);
        node.ssh.host = host.to_string();
        node
    }

    /// Addresses stay as written, names become what they resolve to (IPv4 first), and
    /// a name that does not resolve makes the site's relay say why.
    #[test]
    fn names_are_resolved_here_and_one_that_does_not_resolve_says_why() {
        let nodes = [
            node(0, "10.0.0.1"),
            node(1, "edge-b.lan"),
            node(2, "fd00::3"),
        ];
        let members: Vec<&NodePlan> = nodes.iter().collect();
        let resolve = |host: &str| -> io::Result<Vec<IpAddr>> {
            match host {
                "edge-b.lan" => Ok(vec![
                    "fd00::2".parse().unwrap(),
                    "10.0.0.2".parse().unwrap(),
                ]),
                _ => Err(io::Error::other("failed to lookup address information")),
            }
        };
        assert_eq!(
            site_addresses(&members, &resolve).unwrap(),
            vec![
                (0, "10.0.0.1".to_string()),
                (1, "10.0.0.2".to_string()),
                (2, "fd00::3".to_string())
            ]
        );
        let nodes = [node(0, "10.0.0.1"), node(1, "edge-c.lan")];
        let members: Vec<&NodePlan> = nodes.iter().collect();
        let why = site_addresses(&members, &resolve).unwrap_err();
        assert_eq!(
            why,
            format!(
                "the ssh.ip edge-c.lan of {} does not resolve on this machine (failed to lookup address information), and a source admits its readers by address",
                nodes[1].name
            )
        );
    }

    /// This machine's own resolver: `localhost` is in every hosts file.
    #[test]
    fn localhost_resolves_here() {
        let found = resolve_here("localhost").unwrap();
        assert!(found.iter().any(IpAddr::is_loopback), "{found:?}");
    }
}
