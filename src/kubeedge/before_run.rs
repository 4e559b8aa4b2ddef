//! Checks of a join batch as a whole, on the control host, before any node is touched:
//! the join token's lifetime against the batch's estimated length, the token's CA hash
//! against cloudcore's CA, and node names cloudcore already has.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::cloudcore::{self, Cloudcore, CloudcoreError};
use crate::options::PreflightMode;
use crate::plan::Plan;

use super::token::{self, JoinToken, Lifetime, TokenError};

/// Per-node time assumed when no earlier run measured one: a typical join.
pub const DEFAULT_PER_NODE_SECS: f64 = 60.0;
/// How long cloudcore may take to answer one request.
const CLOUDCORE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many node names a refusal lists before it only counts the rest.
const NAMES_SHOWN: usize = 10;

/// The `--edgenode-name` values and the tokens of the nodes that join one cloudcore.
type Joiners<'p> = (Vec<String>, BTreeSet<&'p str>);

/// Something a check found. `fatal` problems stop the batch (exit 2); the others are
/// warnings.
#[derive(Debug)]
pub struct Problem {
    pub fatal: bool,
    pub kind: ProblemKind,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

/// What a check found, in full sentences that say what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProblemKind {
    /// The token expired, or expires before the batch's last node would use it.
    #[error("{}", .lifetime.message(*.now).unwrap_or_default())]
    TokenLifetime { lifetime: Lifetime, now: u64 },
    #[error("The join token (--token) cannot be read. {0}")]
    TokenUnreadable(#[source] TokenError),
    #[error(
        "Could not ask cloudcore at {host}:{port} anything: {source}. The token's CA hash and the node names were not checked against it."
    )]
    NoClient {
        host: String,
        port: u16,
        #[source]
        source: CloudcoreError,
    },
    #[error(
        "The join token's CA hash ({}...) is not the sha256 of cloudcore's CA at {base} ({}...): the token comes from another cluster, or cloudcore's CA was replaced. Get the token from this cluster with `keadm gettoken`.",
        prefix(.token_hash),
        prefix(.ca_hash)
    )]
    CaMismatch {
        token_hash: String,
        base: String,
        ca_hash: String,
    },
    #[error(
        "Could not ask cloudcore at {base} for its CA: {source}. The token's CA hash and the node names were not checked against it."
    )]
    CaUnknown {
        base: String,
        #[source]
        source: CloudcoreError,
    },
    #[error(
        "cloudcore at {base} already has {} of these --edgenode-name values, so keadm join would refuse them: {}. Delete the stale nodes on the cloud side (`kubectl delete node <name>`) or rename them.",
        .names.len(),
        listed(.names)
    )]
    NamesTaken { base: String, names: Vec<String> },
    #[error(
        "The cluster at {server} already has a Node named as {} of these joins: {}. {}",
        .names.len(),
        listed(.names),
        if *.reset_first {
            "With --reset-first each join replaces its node, and the Node object goes on under the new join."
        } else {
            "keadm join would refuse them, or a second machine would take the Node over: delete the stale Node objects (`kubectl delete node <name>`, or reset them with --delete-nodes), rename the joins (--edgenode-name), or run with --reset-first if these are the same machines."
        }
    )]
    NodesInCluster {
        server: String,
        /// `name (Ready, 3d old)`.
        names: Vec<String>,
        reset_first: bool,
    },
    #[error(
        "{capacity}; {registered} edge Node(s) are registered in the cluster at {server} and {planned} of these joins would add theirs, {over} more than it serves: cloudhub would refuse the session of the joins past the limit (\"reach node limit\") after keadm join reports them installed, and their Nodes would never be Ready (on KubeEdge v1.23.1 such a Node registers and stays NotReady, \"CSINode is not yet initialized\"). Raise cloudcore's nodeLimit or add cloudcore replicas, or join fewer nodes (--only, --shard); --cloud-node-limit N states the cloud's total when the cluster's cloudcore ConfigMap and Deployment do not."
    )]
    OverCapacity {
        server: String,
        /// `CloudCore serves at most 2 edge nodes (nodeLimit 2 × 1 replica, read from ...)`.
        capacity: String,
        registered: usize,
        planned: usize,
        over: usize,
    },
    #[error(
        "Could not check the node names with cloudcore at {base}: {source}. Names cloudcore already has would make keadm join fail on those nodes."
    )]
    NamesUnchecked {
        base: String,
        #[source]
        source: CloudcoreError,
    },
}

/// The fatal problems that stop a join batch before any node is touched: one per line,
/// then what that means.
#[derive(Debug, thiserror::Error)]
#[error("{}\nNo node was touched.", lines(.0))]
pub struct Refused(pub Vec<Problem>);

fn lines(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first 12 characters of a hash, for a message.
fn prefix(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// `a, b, c and 4 more`.
fn listed(names: &[String]) -> String {
    let shown = names[..names.len().min(NAMES_SHOWN)].join(", ");
    if names.len() > NAMES_SHOWN {
        format!("{shown} and {} more", names.len() - NAMES_SHOWN)
    } else {
        shown
    }
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
                if !lifetime.is_ok() {
                    let fatal = strict || matches!(lifetime, Lifetime::Expired { .. });
                    problems.push(Problem {
                        fatal,
                        kind: ProblemKind::TokenLifetime { lifetime, now },
                    });
                }
                parsed.insert(text, t);
            }
            Err(err) => problems.push(Problem {
                fatal: strict,
                kind: ProblemKind::TokenUnreadable(err),
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
            Err(source) => {
                problems.push(Problem {
                    fatal: false,
                    kind: ProblemKind::NoClient { host, port, source },
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
                            kind: ProblemKind::CaMismatch {
                                token_hash: t.ca_hash.clone(),
                                base: client.base().to_string(),
                                ca_hash: ca_hash.clone(),
                            },
                        });
                    }
                }
            }
            Err(source) => {
                problems.push(Problem {
                    fatal: false,
                    kind: ProblemKind::CaUnknown {
                        base: client.base().to_string(),
                        source,
                    },
                });
                continue;
            }
        }
        let taken = names_taken(&client, &names);
        match taken {
            Ok(taken) if !taken.is_empty() => problems.push(Problem {
                fatal: strict,
                kind: ProblemKind::NamesTaken {
                    base: client.base().to_string(),
                    names: taken,
                },
            }),
            Ok(_) => {}
            Err(source) => problems.push(Problem {
                fatal: false,
                kind: ProblemKind::NamesUnchecked {
                    base: client.base().to_string(),
                    source,
                },
            }),
        }
    }
    problems
}

/// The names cloudcore already has, asked a few at a time (one at a time if no worker
/// threads can be started).
fn names_taken(client: &Cloudcore, names: &[String]) -> Result<Vec<String>, CloudcoreError> {
    let ask = |name: &String| {
        client
            .node_registered(name)
            .map(|taken| taken.then(|| name.to_string()))
    };
    // Joined before it returns: the threads used OpenSSL (see `pool::joined`).
    let builder = rayon::ThreadPoolBuilder::new().num_threads(8.min(names.len().max(1)));
    let results: Vec<Result<Option<String>, CloudcoreError>> =
        match crate::pool::joined(builder, |pool| {
            pool.install(|| {
                use rayon::prelude::*;
                names.par_iter().map(ask).collect()
            })
        }) {
            Ok(results) => results,
            Err(_) => names.iter().map(ask).collect(),
        };
    let mut taken = Vec::new();
    for result in results {
        if let Some(name) = result? {
            taken.push(name);
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_full_sentences() {
        let now = 1_700_000_000;
        let lifetime = Lifetime::Expired { at: now - 60 };
        let expired = ProblemKind::TokenLifetime { lifetime, now };
        assert_eq!(Some(expired.to_string()), lifetime.message(now));
        let mismatch = ProblemKind::CaMismatch {
            token_hash: "a".repeat(64),
            base: "https://192.0.2.1:10002".into(),
            ca_hash: "b".repeat(64),
        };
        assert!(
            mismatch.to_string().starts_with(&format!(
                "The join token's CA hash ({}...) is not the sha256 of cloudcore's CA at https://192.0.2.1:10002 ({}...):",
                "a".repeat(12),
                "b".repeat(12)
            )),
            "{mismatch}"
        );
        let taken = Problem {
            fatal: false,
            kind: ProblemKind::NamesTaken {
                base: "https://192.0.2.1:10002".into(),
                names: vec!["edge-1".into(), "edge-2".into()],
            },
        };
        assert!(
            taken.to_string().contains(
                "already has 2 of these --edgenode-name values, so keadm join would refuse them: edge-1, edge-2. Delete"
            ),
            "{taken}"
        );
        for problem in [expired.to_string(), mismatch.to_string(), taken.to_string()] {
            assert!(problem.ends_with('.'), "{problem}");
        }
    }
}
