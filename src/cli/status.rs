//! `keadm-batch batch status`'s arguments, and their conversion into [`StatusOptions`].

use std::path::PathBuf;

use clap::Args;

use super::values::{OutputArg, PolicyArg, host_key_policy_of, output_format};
use crate::options::{Command, DEFAULT_CERT_WARN_DAYS, Selector, StatusOptions};

#[derive(Args, Debug)]
pub(super) struct StatusArgs {
    /// Path to the config file (keadm's format).
    #[arg(short = 'c', long = "config", value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    /// Show only the nodes that match one of these selectors (comma-separated), as a
    /// run's --only: nodeName globs, `site=GLOB`, `label:KEY=GLOB`.
    #[arg(long, value_name = "SELECTOR,...", value_delimiter = ',', value_parser = Selector::parse)]
    only: Vec<Selector>,
    /// How to treat node host keys, as for a run (default accept-new).
    #[arg(long, value_name = "POLICY")]
    host_key_policy: Option<PolicyArg>,
    /// The known-hosts file to check and record host keys in, as for a run (default
    /// ~/.ssh/known_hosts).
    #[arg(long, value_name = "FILE")]
    known_hosts: Option<PathBuf>,
    /// A kubeconfig (as kubectl reads it; over the config's `kubeconfig` and
    /// $KUBECONFIG): each node's Node, Ready state and age, from one list. Read-only.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use instead of its current-context.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Print the status as one JSON document instead of a table.
    #[arg(long, value_name = "FORMAT")]
    output: Option<OutputArg>,
    /// Warn about each node whose edge certificate expires within DAYS days: KubeEdge
    /// renews it only while the node is connected, and a node offline past its expiry
    /// cannot reconnect.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_CERT_WARN_DAYS)]
    cert_warn_days: u32,
}

/// The options `batch status` names.
pub(super) fn command_of(args: StatusArgs) -> Command {
    let StatusArgs {
        config,
        only,
        host_key_policy,
        known_hosts,
        kubeconfig,
        context,
        output,
        cert_warn_days,
    } = args;
    Command::Status(StatusOptions {
        // clap has required it.
        config: config.unwrap_or_default(),
        only: only.into_iter().filter(|s| !s.is_empty()).collect(),
        host_key_policy: host_key_policy.map(host_key_policy_of),
        known_hosts,
        kubeconfig,
        context,
        output: output_format(output),
        cert_warn_days,
    })
}
