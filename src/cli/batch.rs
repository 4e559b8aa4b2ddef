//! `keadm-batch batch`'s own arguments, a run's (`batch -c FILE`, no subcommand), and
//! their conversion into [`RunOptions`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::values::{
    PolicyArg, RunOutputArg, host_key_policy_of, parse_class, parse_duration, parse_grace_seconds,
    parse_max_fail, parse_shard, parse_size, parse_timeout, parse_timeout_seconds, parse_wave,
    run_output_format,
};
use super::{BatchSub, command};
use crate::diagnosis::FailureClass;
use crate::options::{
    Amount, Command, PreflightMode, RelayMode, RunOptions, Selector, Shard, Verbosity,
};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct BatchArgs {
    #[command(subcommand)]
    pub(super) sub: Option<BatchSub>,

    /// Path to the config file (keadm's format).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Validate and print the plan per node; touch no node and write no file.
    #[arg(long)]
    dry_run: bool,

    /// Process only the nodes that match one of these selectors (comma-separated): a glob
    /// on nodeName, `site=GLOB` on the node's site, `label:KEY=GLOB` on a label the config
    /// gives it. Globs: `*` any run of characters, `?` any one, `[abc]`, `[a-z]`, `[!abc]`.
    #[arg(
        long,
        value_name = "SELECTOR,...",
        value_delimiter = ',',
        value_parser = Selector::parse,
        help_heading = "Selection"
    )]
    only: Vec<Selector>,

    /// Process only the nodes that did not succeed (or never ran) in the latest run, read
    /// from its journal (works after a crash too).
    #[arg(long, help_heading = "Selection")]
    retry_failed: bool,

    /// With --retry-failed: only the nodes whose failure has this class (see summary.json).
    #[arg(
        long,
        value_name = "CLASS",
        requires = "retry_failed",
        value_parser = parse_class,
        help_heading = "Selection"
    )]
    class: Option<FailureClass>,

    /// Process only shard I of N (1-based): a stable split by sha256 of nodeName.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, help_heading = "Selection")]
    shard: Option<Shard>,

    /// How many nodes to process at once (overrides maxRunNum).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000), help_heading = "Policy")]
    max_run_num: Option<u32>,

    /// At most N SSH handshakes (TCP connect to login done) in flight to any one sshd, a
    /// jump host's or a node address that several nodes share (default 8, below sshd's
    /// MaxStartups of 10, past which sshd drops new connections at random).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000), help_heading = "Policy")]
    handshakes_per_host: Option<u32>,

    /// The tolerance per wave: a wave in which more than N nodes (or P% of its nodes,
    /// rounded down) did not succeed stops the rollout; the rest are skipped and listed.
    #[arg(long, value_name = "N|P%", value_parser = parse_max_fail, help_heading = "Policy")]
    max_fail: Option<Amount>,

    /// Run the first N nodes alone, and go on with the rest only if all of them succeed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Policy")]
    canary: Option<u32>,

    /// Roll out in waves of N nodes or P% of the selected nodes (rounded up), in config
    /// order, each gated by --max-fail (default 0). Upgrades go in waves of 10% unless
    /// given; --wave 100% is one wave.
    #[arg(long, value_name = "N|P%", value_parser = parse_wave, help_heading = "Policy")]
    wave: Option<Amount>,

    /// Wait this long between waves: seconds (90, 90s), minutes (5m) or hours (1h).
    /// Ctrl-C during the wait stops the rollout.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Policy")]
    wave_pause: Option<std::time::Duration>,

    /// Deadline for each node's keadm command: seconds (600, 600s), minutes (10m) or hours
    /// (default 600s).
    #[arg(long = "timeout", value_name = "DURATION", value_parser = parse_timeout_seconds, help_heading = "Policy")]
    timeout: Option<u64>,

    /// At a command's deadline its process group on the node gets SIGTERM, then SIGKILL
    /// once it has had this long to exit: seconds (10, 10s) or minutes (default 10s; at
    /// most the command's own deadline; 0 kills at once).
    #[arg(long, value_name = "DURATION", value_parser = parse_grace_seconds, help_heading = "Policy")]
    kill_grace: Option<u64>,

    /// How many SSH connections to each jump host (proxyJump) the nodes behind it share,
    /// each node a channel on the least busy one (default 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16), help_heading = "Policy")]
    jump_connections: Option<u32>,

    /// Deadline for TCP connect, SSH handshake and authentication: seconds (10, 10s) or
    /// minutes (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout_seconds, help_heading = "Policy")]
    connect_timeout: Option<u64>,

    /// How to treat node host keys (default accept-new: record unknown hosts, refuse changed keys).
    #[arg(long, value_name = "POLICY", help_heading = "Policy")]
    host_key_policy: Option<PolicyArg>,

    /// The known-hosts file to check and record host keys in (default ~/.ssh/known_hosts).
    #[arg(long, value_name = "FILE", help_heading = "Policy")]
    known_hosts: Option<PathBuf>,

    /// Pre-flight checks for join commands (edgecore running, /etc/kubeedge not clean,
    /// runtime socket, noexec, disk, bash, token lifetime, name collisions): warn, or skip
    /// failing nodes untouched with strict.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "warn",
        help_heading = "Policy"
    )]
    preflight: PreflightArg,

    /// Nodes of one site (`site:`, else one proxyJump host) fetch keadm and the offline
    /// image archives from a node of the site that has them, over the site's own network,
    /// verified by sha256: auto, or off (every node gets them from this machine).
    #[arg(
        long,
        value_name = "MODE",
        default_value = "auto",
        help_heading = "Policy"
    )]
    relay: RelayArg,

    /// Connect, run only the read-only pre-flight probes, print a table of findings.
    #[arg(long, conflicts_with = "dry_run", help_heading = "Policy")]
    preflight_only: bool,

    /// Run `keadm reset edge --force` before each join (for nodes left dirty by a failed join).
    #[arg(long, help_heading = "Policy")]
    reset_first: bool,

    /// Run `keadm backup edge` before each `keadm upgrade edge`; a node whose backup fails
    /// is not upgraded (nothing changes on it).
    #[arg(long, help_heading = "Upgrades")]
    backup: bool,

    /// Run `keadm rollback edge` on a node whose upgrade, upgrade report, version check or
    /// Ready gate failed, and say whether that brought it back.
    #[arg(long, help_heading = "Upgrades")]
    rollback_on_failure: bool,

    /// No effect, kept for old scripts: a keadm package with neither a checksum file nor a
    /// keadm.download.sha512 pin is always refused now (see --allow-unverified).
    #[arg(long, help_heading = "Policy")]
    require_checksum: bool,

    /// Use a keadm package that has neither a checksum file nor a keadm.download.sha512
    /// pin, with a warning, marked unverified in the summary.
    #[arg(long, conflicts_with = "require_checksum", help_heading = "Policy")]
    allow_unverified: bool,

    /// Download arches without a keadm.download.sha512 pin from an http:// download.url,
    /// although anyone on the network path could swap the package and its checksum file.
    #[arg(long, help_heading = "Policy")]
    insecure_http: bool,

    /// The largest keadm package to download, and the most its unpacked files may hold:
    /// bytes, or a number with KiB, MiB or GiB (default 512MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Policy")]
    max_package_bytes: Option<u64>,

    /// Hash the keadm binary on the node instead of trusting the sidecar we wrote.
    #[arg(long, help_heading = "Policy")]
    verify_remote: bool,

    /// The cluster to verify joins and upgrades in (a kubeconfig as kubectl reads it; over
    /// the config's `kubeconfig` and $KUBECONFIG): a join succeeds once its Node is Ready,
    /// an upgrade once it is Ready on the new version. Read-only unless --delete-nodes or
    /// --drain asks for writes.
    #[arg(long, value_name = "FILE", help_heading = "Cluster")]
    kubeconfig: Option<PathBuf>,

    /// The kubeconfig's context to use instead of its current-context.
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    context: Option<String>,

    /// Run without the cluster: read no kubeconfig (not even $KUBECONFIG or the config's
    /// `kubeconfig`, whose exec credential plugins run commands on this machine), verify
    /// nothing in a cluster, write nothing to one.
    #[arg(
        long,
        conflicts_with_all = ["kubeconfig", "context", "no_wait", "delete_nodes", "drain", "token_from_cluster"],
        help_heading = "Cluster"
    )]
    no_cluster: bool,

    /// How long after keadm exits a joined node may take to be registered and Ready (an
    /// upgraded one, Ready on the new version): seconds (300, 300s) or minutes (5m).
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = parse_timeout_seconds, help_heading = "Cluster")]
    ready_timeout: u64,

    /// With a kubeconfig: do not wait for joined nodes to be Ready (keadm's exit decides).
    #[arg(long, help_heading = "Cluster")]
    no_wait: bool,

    /// After a reset checked clean on its node, delete the node's Node object from the
    /// cluster (needs a kubeconfig whose user may delete nodes). Without it and --drain,
    /// nothing is ever written to the cluster.
    #[arg(long, help_heading = "Cluster")]
    delete_nodes: bool,

    /// Cordon and drain each node's Node before its command (evictions honour
    /// PodDisruptionBudgets), and uncordon it once the node succeeded; a node that failed
    /// stays cordoned. Needs a kubeconfig whose user may patch nodes, list pods and create
    /// pods/eviction. Joins are not drained: their Node does not exist yet.
    #[arg(long, help_heading = "Cluster")]
    drain: bool,

    /// How long a node's drain may take, its evictions and the wait for its pods to be
    /// gone: seconds, or a number with s, m or h.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_timeout, requires = "drain", help_heading = "Cluster")]
    drain_timeout: std::time::Duration,

    /// The most edge nodes the cloud serves in all (cloudcore's nodeLimit times its
    /// replicas), over what the cluster's cloudcore ConfigMap and Deployment in kubeedge
    /// say: joins past it are a pre-flight finding (--preflight strict stops the run).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Cluster")]
    cloud_node_limit: Option<u64>,

    /// The most joins in flight to the cloud at once, from a join's start to its Node's
    /// Ready (or the end of its wait); a join past it waits for its turn (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Cluster")]
    joins_in_flight: Option<u64>,

    /// Read every join's token from the cluster (the tokensecret secret in kubeedge, as
    /// `keadm gettoken` does) instead of keadmCmd's --token; a join whose --token is
    /// empty or missing gets it so without this flag.
    #[arg(long, help_heading = "Cluster")]
    token_from_cluster: bool,

    /// Where keadm packages are staged on this machine (default: keadm's /tmp/kubeedge/keadm).
    #[arg(long, value_name = "DIR", help_heading = "Places")]
    staging_dir: Option<PathBuf>,

    /// Where this run's transcripts, journal and summary go (default ./batch_runs/<UTC time>-<id>);
    /// a run placed here leaves batch_runs/latest alone.
    #[arg(long, value_name = "DIR", help_heading = "Places")]
    run_dir: Option<PathBuf>,

    /// Print the run's summary as JSON on stdout, or (junit) the run as JUnit XML; with
    /// --preflight-only, its findings as JSON (not with --dry-run).
    #[arg(long, value_name = "FORMAT", help_heading = "Output")]
    output: Option<RunOutputArg>,

    /// After the run, also write it as JUnit XML to FILE (atomically, mode 0600): a test
    /// case per selected node, a failure with its class for each that did not succeed.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    junit: Option<PathBuf>,

    /// Print only errors (a line for each node that did not succeed) and the final result.
    #[arg(short, long, conflicts_with = "verbose", help_heading = "Output")]
    quiet: bool,

    /// Print every step of every node.
    #[arg(short, long, help_heading = "Output")]
    verbose: bool,

    /// Also write the run's metrics to FILE in Prometheus' text format, for node_exporter's
    /// textfile collector (name it *.prom there): replaced whole as the run goes and at its end.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    metrics: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum PreflightArg {
    Off,
    Warn,
    Strict,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum RelayArg {
    Off,
    Auto,
}

/// A run's options, from `keadm-batch batch` without a subcommand.
pub(super) fn command_of(batch: Box<BatchArgs>) -> Result<Command, clap::Error> {
    // JUnit holds the nodes' outcomes, which neither the plan nor the findings are.
    let junit = batch.junit.is_some() || batch.output == Some(RunOutputArg::Junit);
    if junit && (batch.dry_run || batch.preflight_only) {
        return Err(command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "--junit and --output junit write the nodes' outcomes as JUnit XML, which {} does not produce. Leave them out, or run without {0}.",
                if batch.dry_run { "--dry-run" } else { "--preflight-only" }
            ),
        ));
    }
    // --preflight-only has a JSON document of its own; the plan is for people only.
    if batch.output == Some(RunOutputArg::Json) && batch.dry_run {
        return Err(command().error(
            clap::error::ErrorKind::ArgumentConflict,
            "--output json prints a run's summary.json, which --dry-run does not produce (its output is text for people). Leave out --output json, or run without --dry-run and read summary.json.",
        ));
    }
    // --require-checksum asked for what is now the default; it stays accepted so scripts
    // written for it keep working.
    let _ = batch.require_checksum;
    let Some(config) = batch.config else {
        let mut cmd = command();
        return Err(cmd.error(
            clap::error::ErrorKind::MissingRequiredArgument,
            "a config file is required: `keadm-batch batch -c config.yaml` (write one with `keadm-batch batch gen-config`)",
        ));
    };
    Ok(Command::Run(Box::new(RunOptions {
        config,
        dry_run: batch.dry_run,
        only: batch.only.into_iter().filter(|s| !s.is_empty()).collect(),
        shard: batch.shard,
        retry_failed: batch.retry_failed,
        class: batch.class,
        max_run_num: batch.max_run_num.map(|n| n as usize),
        handshakes_per_host: batch.handshakes_per_host.map(|n| n as usize),
        max_fail: batch.max_fail,
        canary: batch.canary.map(|n| n as usize),
        wave: batch.wave,
        wave_pause: batch.wave_pause,
        timeout_seconds: batch.timeout,
        kill_grace_seconds: batch.kill_grace,
        connect_timeout_seconds: batch.connect_timeout,
        jump_connections: batch.jump_connections.map(|n| n as usize),
        host_key_policy: batch.host_key_policy.map(host_key_policy_of),
        known_hosts: batch.known_hosts,
        allow_unverified: batch.allow_unverified,
        insecure_http: batch.insecure_http,
        max_package_bytes: batch.max_package_bytes,
        preflight: match batch.preflight {
            PreflightArg::Off => PreflightMode::Off,
            PreflightArg::Warn => PreflightMode::Warn,
            PreflightArg::Strict => PreflightMode::Strict,
        },
        relay: match batch.relay {
            RelayArg::Off => RelayMode::Off,
            RelayArg::Auto => RelayMode::Auto,
        },
        preflight_only: batch.preflight_only,
        reset_first: batch.reset_first,
        backup: batch.backup,
        rollback_on_failure: batch.rollback_on_failure,
        verify_remote: batch.verify_remote,
        kubeconfig: batch.kubeconfig,
        context: batch.context,
        no_cluster: batch.no_cluster,
        ready_timeout_seconds: batch.ready_timeout,
        no_wait: batch.no_wait,
        delete_nodes: batch.delete_nodes,
        drain: batch.drain.then_some(batch.drain_timeout),
        token_from_cluster: batch.token_from_cluster,
        cloud_node_limit: batch.cloud_node_limit,
        joins_in_flight: batch.joins_in_flight.map(|n| n as usize),
        staging_dir: batch.staging_dir,
        run_dir: batch.run_dir,
        output: run_output_format(batch.output),
        junit: batch.junit,
        metrics: batch.metrics,
        verbosity: if batch.quiet {
            Verbosity::Quiet
        } else if batch.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::run;
    use crate::options::OutputFormat;

    #[test]
    fn keadm_spelling_works() {
        let Command::Run(opts) = run(&["keadm-batch", "batch", "-c", "x.yaml"]).unwrap() else {
            panic!()
        };
        assert_eq!(opts.config, PathBuf::from("x.yaml"));
    }

    #[test]
    fn shard_and_only_parse() {
        let Command::Run(opts) =
            run(&["k", "batch", "-c", "c", "--shard", "2/4", "--only", "a*,b"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(opts.shard, Some(Shard { index: 2, count: 4 }));
        assert_eq!(
            opts.only,
            vec![Selector::Name("a*".into()), Selector::Name("b".into())]
        );
        assert!(run(&["k", "batch", "-c", "c", "--shard", "5/4"]).is_err());
    }

    #[test]
    fn kill_grace_is_whole_seconds_zero_included() {
        let grace = |args: &[&str]| {
            let mut all = vec!["k", "batch", "-c", "c"];
            all.extend(args);
            match run(&all) {
                Ok(Command::Run(opts)) => Ok(opts.kill_grace_seconds),
                Ok(_) => panic!("not a run"),
                Err(e) => Err(e),
            }
        };
        assert_eq!(grace(&[]).unwrap(), None);
        assert_eq!(grace(&["--kill-grace", "0"]).unwrap(), Some(0));
        assert_eq!(grace(&["--kill-grace", "30"]).unwrap(), Some(30));
        assert_eq!(grace(&["--kill-grace", "30s"]).unwrap(), Some(30));
        assert_eq!(grace(&["--kill-grace", "2m"]).unwrap(), Some(120));
        assert!(grace(&["--kill-grace", "-1"]).is_err());
        assert!(grace(&["--kill-grace", "1.5"]).is_err());
        assert!(grace(&["--kill-grace", "25h"]).is_err());
    }

    /// Every duration flag takes both forms, `120` and `120s` (and minutes), and says
    /// what it takes in words when it is given something else.
    #[test]
    fn every_duration_flag_takes_seconds_with_or_without_a_unit() {
        let opts = |args: &[&str]| {
            let mut all = vec!["k", "batch", "-c", "c", "--kubeconfig", "k"];
            all.extend(args);
            match run(&all) {
                Ok(Command::Run(opts)) => Ok(opts),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.to_string()),
            }
        };
        for (bare, unit) in [("120", "120s"), ("120", "2m")] {
            for flag in ["--timeout", "--connect-timeout", "--ready-timeout"] {
                let a = opts(&[flag, bare]).unwrap();
                let b = opts(&[flag, unit]).unwrap();
                assert_eq!(
                    (
                        a.timeout_seconds,
                        a.connect_timeout_seconds,
                        a.ready_timeout_seconds
                    ),
                    (
                        b.timeout_seconds,
                        b.connect_timeout_seconds,
                        b.ready_timeout_seconds
                    ),
                    "{flag} {bare} and {flag} {unit}"
                );
            }
        }
        // The defaults the command line writes are the ones the recap's next command
        // leaves out.
        assert_eq!(
            opts(&[]).unwrap().ready_timeout_seconds,
            crate::options::DEFAULT_READY_TIMEOUT_SECS
        );
        assert_eq!(
            opts(&["--drain"]).unwrap().drain.map(|d| d.as_secs()),
            Some(crate::options::DEFAULT_DRAIN_TIMEOUT_SECS)
        );
        let o = opts(&[
            "--timeout",
            "10m",
            "--connect-timeout",
            "30s",
            "--ready-timeout",
            "5m",
        ])
        .unwrap();
        assert_eq!(o.timeout_seconds, Some(600));
        assert_eq!(o.connect_timeout_seconds, Some(30));
        assert_eq!(o.ready_timeout_seconds, 300);
        assert_eq!(opts(&[]).unwrap().ready_timeout_seconds, 300);
        let zero = opts(&["--timeout", "0"]).unwrap_err();
        assert!(zero.contains("a timeout must be at least 1 s"), "{zero}");
        let word = opts(&["--ready-timeout", "soon"]).unwrap_err();
        assert!(
            word.contains(
                "`soon` is not a duration: write seconds (90 or 90s), minutes (5m) or hours (1h)"
            ),
            "{word}"
        );
    }

    #[test]
    fn waves_tolerances_and_pauses_parse() {
        let opts = |args: &[&str]| {
            let mut all = vec!["k", "batch", "-c", "c"];
            all.extend(args);
            match run(&all).unwrap() {
                Command::Run(opts) => opts,
                other => panic!("{other:?}"),
            }
        };
        let o = opts(&["--wave", "25%", "--max-fail", "0", "--wave-pause", "5m"]);
        assert_eq!(o.wave, Some(Amount::Percent(25)));
        assert_eq!(o.max_fail, Some(Amount::Nodes(0)));
        assert_eq!(o.wave_pause, Some(std::time::Duration::from_secs(300)));
        let o = opts(&["--wave", "7", "--max-fail", "20%", "--wave-pause", "90"]);
        assert_eq!(o.wave, Some(Amount::Nodes(7)));
        assert_eq!(o.max_fail, Some(Amount::Percent(20)));
        assert_eq!(o.wave_pause, Some(std::time::Duration::from_secs(90)));
        assert_eq!(
            parse_duration("90s"),
            Ok(std::time::Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("1h"),
            Ok(std::time::Duration::from_secs(3600))
        );
        for (flag, bad, says) in [
            ("--wave", "0", "is no wave size"),
            ("--wave", "0%", "is no wave size"),
            ("--wave", "101%", "from 1% to 100%"),
            ("--wave", "x", "is no wave size"),
            ("--max-fail", "101%", "from 0% to 100%"),
            ("--max-fail", "many", "neither a number of nodes"),
            (
                "--wave-pause",
                "5x",
                "`5x` is not a duration: write seconds (90 or 90s), minutes (5m) or hours (1h)",
            ),
            ("--wave-pause", "m", "is not a duration"),
        ] {
            let err = run(&["k", "batch", "-c", "c", flag, bad]).unwrap_err();
            assert!(err.use_stderr(), "{flag} {bad}: a usage error, exit 2");
            assert!(err.to_string().contains(says), "{flag} {bad}: {err}");
        }
    }

    #[test]
    fn class_is_parsed_into_a_failure_class() {
        let retry =
            |class: &str| run(&["k", "batch", "-c", "c", "--retry-failed", "--class", class]);
        let Command::Run(opts) = retry("token-invalid").unwrap() else {
            panic!()
        };
        assert_eq!(opts.class, Some(FailureClass::TokenInvalid));
        let err = retry("sunspots").unwrap_err();
        assert!(err.use_stderr(), "a usage error, exit 2");
        assert!(
            err.to_string()
                .contains("`sunspots` is not a failure class. Use one of: already_joined,"),
            "{err}"
        );
    }

    #[test]
    fn junit_is_a_run_output_with_outcomes_only() {
        let Command::Run(options) = run(&[
            "k",
            "batch",
            "-c",
            "c.yaml",
            "--output",
            "junit",
            "--junit",
            "out/j.xml",
        ])
        .unwrap() else {
            panic!("not a run")
        };
        assert_eq!(options.output, OutputFormat::Junit);
        assert_eq!(options.junit, Some(PathBuf::from("out/j.xml")));
        for flags in [
            &["--junit", "j.xml", "--dry-run"][..],
            &["--output", "junit", "--preflight-only"],
        ] {
            let args = [&["k", "batch", "-c", "c.yaml"][..], flags].concat();
            let err = run(&args).unwrap_err().to_string();
            assert!(err.contains("does not produce"), "{err}");
        }
        // batch status has no JUnit of its own.
        assert!(run(&["k", "batch", "status", "-c", "c.yaml", "--output", "junit"]).is_err());
    }

    #[test]
    fn missing_config_is_a_usage_error() {
        let err = run(&["k", "batch"]).unwrap_err();
        assert!(err.to_string().contains("config file is required"));
    }

    #[test]
    fn drain_timeouts_are_durations_of_a_second_or_more() {
        assert_eq!(parse_timeout("90"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(parse_timeout("5m"), Ok(std::time::Duration::from_secs(300)));
        assert_eq!(
            parse_timeout("0s"),
            Err("a timeout must be at least 1 s".to_string())
        );
        assert!(parse_timeout("5min").is_err());
        let drain = |args: &[&str]| match run(args) {
            Ok(Command::Run(options)) => options.drain,
            other => panic!("{other:?}"),
        };
        assert_eq!(drain(&["keadm-batch", "batch", "-c", "x.yaml"]), None);
        assert_eq!(
            drain(&["keadm-batch", "batch", "-c", "x.yaml", "--drain"]),
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(
            drain(&[
                "keadm-batch",
                "batch",
                "-c",
                "x.yaml",
                "--drain",
                "--drain-timeout",
                "90s"
            ]),
            Some(std::time::Duration::from_secs(90))
        );
        // A timeout without --drain would do nothing: refused.
        assert!(
            run(&[
                "keadm-batch",
                "batch",
                "-c",
                "x.yaml",
                "--drain-timeout",
                "90s"
            ])
            .is_err()
        );
    }

    #[test]
    fn output_json_is_refused_with_dry_run_only() {
        let err = run(&["k", "batch", "-c", "c", "--dry-run", "--output", "json"]).unwrap_err();
        assert!(err.use_stderr());
        assert!(
            err.to_string().contains(
                "--output json prints a run's summary.json, which --dry-run does not produce"
            ),
            "{err}"
        );
        assert!(run(&["k", "batch", "-c", "c", "--dry-run", "--output", "text"]).is_ok());
        // --preflight-only has a JSON document of its own.
        let Command::Run(opts) = run(&[
            "k",
            "batch",
            "-c",
            "c",
            "--preflight-only",
            "--output",
            "json",
        ])
        .unwrap() else {
            panic!()
        };
        assert!(opts.preflight_only);
        assert_eq!(opts.output, OutputFormat::Json);
    }

    #[test]
    fn only_patterns_are_checked_globs() {
        let Command::Run(opts) =
            run(&["k", "batch", "-c", "c", "--only", "edge-[ab]*,x?"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            opts.only,
            vec![
                Selector::Name("edge-[ab]*".into()),
                Selector::Name("x?".into())
            ]
        );
        let err = run(&["k", "batch", "-c", "c", "--only", "edge-[1"]).unwrap_err();
        assert!(
            err.to_string().contains("`edge-[1` is not a valid glob"),
            "{err}"
        );
    }

    #[test]
    fn only_selects_by_site_and_label_too() {
        let Command::Run(opts) = run(&[
            "k",
            "batch",
            "-c",
            "c",
            "--only",
            "site=berlin-*,label:topology.kubernetes.io/zone=eu,edge-1",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            opts.only,
            vec![
                Selector::Site("berlin-*".into()),
                Selector::Label {
                    key: "topology.kubernetes.io/zone".into(),
                    value: "eu".into()
                },
                Selector::Name("edge-1".into()),
            ]
        );
        let shown: Vec<String> = opts.only.iter().map(Selector::to_string).collect();
        assert_eq!(
            shown,
            [
                "site=berlin-*",
                "label:topology.kubernetes.io/zone=eu",
                "edge-1"
            ]
        );
        for (bad, said) in [
            (
                "label:zone",
                "`label:zone` names no value: write label:KEY=GLOB",
            ),
            ("label:-x=1", "the label key `-x`"),
            ("site=b[", "`b[` is not a valid glob"),
            ("label:zone=[", "`[` is not a valid glob"),
        ] {
            let Command::Status(_) =
                run(&["k", "batch", "status", "-c", "c", "--only", "a"]).unwrap()
            else {
                panic!()
            };
            let err = run(&["k", "batch", "status", "-c", "c", "--only", bad]).unwrap_err();
            assert!(err.to_string().contains(said), "{bad}: {err}");
        }
    }
}
