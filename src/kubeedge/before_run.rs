//! Checks of a join batch as a whole, on the control host, before any node is touched:
//! the join token's lifetime against the batch's estimated length, the token's CA hash
//! against cloudcore's CA, and node names cloudcore already has.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::cloudcore::{self, Cloudcore};
use crate::options::PreflightMode;
use crate::plan::Plan;

use super::token::{self, JoinToken, Lifetime};

/// Per-node time assumed when no earlier run measured one: a typical join.
pub const DEFAULT_PER_NODE_SECS: f64 = 60.0;
/// How long cloudcore may take to answer one request.
const CLOUDCORE_TIMEOUT: Duration = Duration::from_secs(5);

/// The `--edgenode-name` values and the tokens of the nodes that join one cloudcore.
type Joiners<'p> = (Vec<String>, BTreeSet<&'p str>);

/// Something a check found. `fatal` problems stop the batch (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub fatal: bool,
    pub message: String,
}

/// Runs every check that applies to `plan` under `mode`.
/// `ask_cloudcore` false keeps it local (for `--dry-run`, which never connects).
pub fn check(
    plan: &Plan,
    mode: PreflightMode,
    now: u64,
    per_node_secs: f64,
    ask_cloudcore: bool,
) -> Vec<Problem> {
    if mode == PreflightMode::Off {
        return Vec::new();
    }
    let strict = mode == PreflightMode::Strict;
    let joins: Vec<_> = plan
        .nodes
        .iter()
        .filter(|n| n.keadm_args.is_join())
        .collect();
    if joins.is_empty() {
        return Vec::new();
    }
    let mut problems = Vec::new();

    // Tokens: usually one for the whole batch; each distinct one is checked once.
    let tokens: BTreeSet<&str> = joins
        .iter()
        .filter_map(|node| node.keadm_args.token())
        .collect();
    let estimate = token::batch_estimate(joins.len(), plan.max_run_num, per_node_secs);
    let mut parsed: BTreeMap<&str, JoinToken> = BTreeMap::new();
    for text in &tokens {
        match token::parse(text) {
            Ok(t) => {
                let lifetime = token::check_lifetime(&t, now, estimate);
                if let Some(message) = lifetime.message(now) {
                    let fatal = strict || matches!(lifetime, Lifetime::Expired { .. });
                    problems.push(Problem { fatal, message });
                }
                parsed.insert(text, t);
            }
            Err(err) => problems.push(Problem {
                fatal: strict,
                message: format!("The join token (--token) cannot be read: {err}"),
            }),
        }
    }

    if !ask_cloudcore {
        return problems;
    }
    // cloudcore, once per address the nodes join, with the names and tokens of the nodes
    // that join it: a config may join two clusters, each with its own token.
    let mut endpoints: BTreeMap<(String, u16), Joiners> = BTreeMap::new();
    for node in &joins {
        if let Some(endpoint) = cloudcore::endpoint(&node.keadm_args) {
            let (names, tokens) = endpoints.entry(endpoint).or_default();
            names.extend(node.keadm_args.edgenode_name().map(str::to_string));
            tokens.extend(node.keadm_args.token());
        }
    }
    for ((host, port), (names, tokens)) in endpoints {
        let client = match Cloudcore::new(&host, port, CLOUDCORE_TIMEOUT) {
            Ok(c) => c,
            Err(message) => {
                problems.push(Problem {
                    fatal: false,
                    message,
                });
                continue;
            }
        };
        match client.ca_hash() {
            Ok(ca_hash) => {
                for t in tokens.iter().filter_map(|text| parsed.get(text)) {
                    if t.ca_hash != ca_hash {
                        problems.push(Problem {
                            fatal: true,
                            message: format!(
                                "The join token's CA hash ({}...) is not the sha256 of cloudcore's CA at {} ({}...): the token comes from another cluster, or cloudcore's CA was replaced. Get the token from this cluster with `keadm gettoken`.",
                                &t.ca_hash[..12.min(t.ca_hash.len())],
                                client.base(),
                                &ca_hash[..12]
                            ),
                        });
                    }
                }
            }
            Err(err) => {
                problems.push(Problem {
                    fatal: false,
                    message: format!(
                        "cloudcore could not be asked for its CA ({err}); the token's CA hash and the node names were not checked against it."
                    ),
                });
                continue;
            }
        }
        let taken = names_taken(&client, &names);
        match taken {
            Ok(taken) if !taken.is_empty() => {
                let shown: Vec<&str> = taken.iter().take(10).map(String::as_str).collect();
                let more = if taken.len() > 10 {
                    format!(" and {} more", taken.len() - 10)
                } else {
                    String::new()
                };
                problems.push(Problem {
                    fatal: strict,
                    message: format!(
                        "cloudcore at {} already has {} of these --edgenode-name values, so keadm join would refuse them: {}{more}. Delete the stale nodes on the cloud side (`kubectl delete node <name>`) or rename them.",
                        client.base(),
                        taken.len(),
                        shown.join(", ")
                    ),
                });
            }
            Ok(_) => {}
            Err(err) => problems.push(Problem {
                fatal: false,
                message: format!("The node names could not be checked with cloudcore: {err}"),
            }),
        }
    }
    problems
}

/// The names cloudcore already has, asked a few at a time.
fn names_taken(client: &Cloudcore, names: &[String]) -> Result<Vec<String>, String> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(8.min(names.len().max(1)))
        .build()
        .map_err(|e| e.to_string())?;
    let results: Vec<Result<Option<String>, String>> = pool.install(|| {
        use rayon::prelude::*;
        names
            .par_iter()
            .map(|name| {
                client
                    .node_registered(name)
                    .map(|taken| taken.then(|| name.to_string()))
            })
            .collect()
    });
    let mut taken = Vec::new();
    for result in results {
        if let Some(name) = result? {
            taken.push(name);
        }
    }
    Ok(taken)
}
