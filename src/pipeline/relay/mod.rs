//! One copy per site: which node of a site gets keadm from this machine (the seed) and
//! which get it from a node of the site that has it already (docs/decisions.md, "One
//! copy per site"). The nodes' workers share one [`Relay`]; the shell text it needs is in
//! `remote::relay`.
//!
//! A fan-out: the first node of a site to need a payload seeds it over the uplink; every
//! later one reads from a node that holds it (the seed, or any node that got it from a
//! peer, so the tree widens), at most [`site::READERS_PER_SOURCE`] at a time from one
//! source. A node that finds neither a free source nor a free seeding slot waits for one;
//! a seed that fails hands the role to the next node. Any failure of a fetch sends that
//! node the direct way; a relay never fails a node.
//!
//! `site` is the coordinator (pure state: who seeds, reads, serves; no I/O), `node` the
//! node's steps on the pipeline's `Run` that act on what it decides, `serving` the node as
//! a source (whether it can serve, its line, clearing it), and `key` the run's
//! relay keys. What each node is known by in its site is the plan's
//! (`plan::site_addresses`), since the dry run says it too.

mod key;
mod node;
mod serving;
mod site;

pub(super) use node::NodeRelay;
pub use serving::unserve_all;
pub use site::{AfterServing, Relay, Role};
