//! The command line, parsed with clap into typed [`Command`] options. The only module
//! that knows clap.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::HostKeyPolicy;
use crate::diagnosis::FailureClass;
use crate::options::{
    Amount, BundleOptions, Command, DEFAULT_CERT_WARN_DAYS, ExtractOptions, GenConfigOptions,
    GroupsAs, MergeOptions, OutputFormat, PreflightMode, RegistryMirror, RelayMode, RunOptions,
    Shard, SourceFormat, StatusOptions, Verbosity, VerifyOptions,
};
use crate::stage::CopyFormat;

#[derive(Parser, Debug)]
#[command(
    name = "keadm-batch",
    version,
    long_version = long_version(),
    about = "Enroll, reset, upgrade or reconfigure KubeEdge edge nodes in bulk over SSH.",
    long_about = "Enroll, reset, upgrade or reconfigure KubeEdge edge nodes in bulk over SSH.\n\nReads the config files of KubeEdge's `keadm batch` unchanged.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Subcommand, Debug)]
enum TopCommand {
    /// Batch process nodes using a config file (as `keadm batch`).
    Batch(Box<BatchArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `keadm-batch man > keadm-batch.1`.
    Man,
}

/// The process that makes a staged keadm's packed copy (src/stage/recompress.rs, whose
/// `PACK_COMMAND` this is): `keadm-batch pack-copy FORMAT BINARY SHA256`, started by a run
/// with the staging directory on its standard input. Never typed by an operator, so it is
/// kept out of clap, and so out of --help, the man page and the shell completions.
const PACK_COPY: &str = "pack-copy";

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct BatchArgs {
    #[command(subcommand)]
    sub: Option<BatchSub>,

    /// Path to the config file (keadm's format).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Validate and print the plan per node; touch no node and write no file.
    #[arg(long)]
    dry_run: bool,

    /// Process only the nodes whose nodeName matches one of these globs (comma-separated):
    /// `*` any run of characters, `?` any one, `[abc]`, `[a-z]`, `[!abc]` sets.
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        value_parser = parse_glob,
        help_heading = "Selection"
    )]
    only: Vec<String>,

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

#[derive(Subcommand, Debug)]
enum BatchSub {
    /// Write a commented config template, or a config whose nodes come from a CSV file or
    /// an Ansible inventory (--from).
    ///
    /// With --from FILE, the config's nodes come from a CSV file (a header row, then a node
    /// per row) or an Ansible inventory (INI or YAML), each node under a comment naming its
    /// line there. A row that cannot become a node is an error naming its file and line,
    /// and then nothing is written.
    GenConfig {
        /// Where to write it.
        #[arg(short, long, value_name = "FILE", default_value = "config.yaml")]
        output: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
        /// Take the nodes from this CSV file or Ansible inventory (columns and variables:
        /// docs/config.md, "Configs from a CSV file or an Ansible inventory").
        #[arg(long, value_name = "FILE")]
        from: Option<PathBuf>,
        /// How to read --from's file, instead of telling by its extension and content.
        #[arg(long, value_name = "FORMAT", requires = "from")]
        format: Option<FormatArg>,
        /// What an Ansible inventory's groups become: each host's site (the group that
        /// lists it), or labels (`<group>: "true"` for every group it is in).
        #[arg(long, value_name = "AS", default_value = "site", requires = "from")]
        groups: GroupsArg,
    },
    /// Combine the run directories of several shards (--shard I/N runs) into one summary
    /// and one keadm-style log; every node must appear in exactly one of them.
    Merge {
        /// The shards' run directories (each with summary.json or journal.jsonl), all
        /// checked before anything is printed or written: node names by the config's rules,
        /// final phases, every value of its type. A file that fails is refused with its
        /// line and field (exit 2); text that passes is printed and written with control
        /// characters escaped.
        #[arg(value_name = "DIR", required = true)]
        dirs: Vec<PathBuf>,
        /// The config the shards ran with: every merged node must be one of its nodes, at
        /// the address it gives (loaded as a run loads it, so its passwordEnv variables
        /// must be set).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the merged summary as JSON (or the merged run as JUnit XML) instead of text.
        #[arg(long, value_name = "FORMAT")]
        output: Option<RunOutputArg>,
        /// Also write the merged summary.json, batch_process_log.txt and report.html into DIR.
        #[arg(long, value_name = "DIR")]
        into: Option<PathBuf>,
        /// Also write the merged run as JUnit XML to FILE (atomically, mode 0600).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Also write the merged run's metrics to FILE in Prometheus' text format
        /// (atomically), as a run's --metrics writes them at its end: the fleet's figures
        /// from one file.
        #[arg(long, value_name = "FILE")]
        metrics: Option<PathBuf>,
    },
    /// Write report.html into a run directory again, from its summary.json
    ///
    /// The page holds the run's header, a timeline of every node's phases, the failures
    /// by class with their fix, and the sites. A run writes it itself; this is for older
    /// runs, a run that never finished (its journal is read then), and a merged one.
    /// Prints the page's path. Exit 2 when RUN_DIR has neither a summary nor a journal
    /// it can read.
    Report {
        /// The run directory (batch_runs/<id>, or --run-dir's, or batch merge --into's);
        /// without it, the latest run here (batch_runs/latest).
        #[arg(value_name = "RUN_DIR")]
        run_dir: Option<PathBuf>,
    },
    /// Show each node of the config, read-only: reachable over SSH, edgecore running and
    /// its version, keadm's version, when its edge certificate expires, and the node's
    /// outcome in the latest run here.
    ///
    /// One SSH round trip per node, at most maxRunNum at once, with a run's host-key
    /// checks (the same --known-hosts and policy); it changes nothing on any node and
    /// writes no run directory. A certificate that expires within --cert-warn-days is
    /// warned of. Exit 0 when every node answered, 1 when some did not.
    Status {
        /// Path to the config file (keadm's format).
        #[arg(short = 'c', long = "config", value_name = "FILE", required = true)]
        config: Option<PathBuf>,
        /// Show only the nodes whose nodeName matches one of these globs (comma-separated),
        /// as a run's --only.
        #[arg(long, value_name = "NAME,...", value_delimiter = ',', value_parser = parse_glob)]
        only: Vec<String>,
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
    },
    /// Write the kit an air-gapped run needs (keadm releases, images, kit.json) into a
    /// directory or one archive; at the site, verify or extract it.
    ///
    /// On a connected machine, write the kit an air-gapped run needs into DIR (--into DIR,
    /// or -o DIR): keadm releases (verified as a run stages them), the installation-package
    /// and sandbox images and the site's own (keadm.extraImages, --image) for every
    /// archGroup arch, and kit.json listing every file's sha256. Use it with
    /// keadm.download.enable: false and keadm.offlinePackageDir: DIR. A rerun into the same
    /// DIR updates it, keeping what is already right. --archive FILE.tar also writes the
    /// kit as one file, with its sha512 in FILE.tar.sha512. At the site, --verify checks a
    /// copied kit (directory or archive) without a config, and --extract unpacks an
    /// archive into a new directory (--into DIR, or -o DIR).
    Bundle(Box<BundleArgs>),
}

#[derive(Args, Debug)]
#[command(group(
    clap::ArgGroup::new("fetching")
        .multiple(true)
        .args([
            "config",
            "archive",
            "download_url",
            "registry_mirror",
            "sandbox_image",
            "image",
            "insecure_http",
            "max_package_bytes",
            "staging_dir",
        ])
))]
#[command(group(clap::ArgGroup::new("site").args(["verify", "extract"])))]
struct BundleArgs {
    /// Path to the config file (keadm's format) of the air-gapped run.
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        required_unless_present_any = ["verify", "extract"]
    )]
    config: Option<PathBuf>,

    /// The kit directory: new, empty, or a kit an earlier bundle wrote (with --extract: the
    /// directory the archive is unpacked into, new or empty).
    #[arg(short = 'o', long = "into", value_name = "DIR")]
    into: Option<PathBuf>,

    /// `json` also prints what was written (each file with its sha256, kit.json's, the
    /// archive's) as one JSON document on stdout; `text`, the default, reports on stderr
    /// only. Any other value is the kit directory, the old spelling of --into, with a
    /// warning.
    #[arg(long, value_name = "FORMAT")]
    output: Option<PathBuf>,

    /// Also write the kit as one uncompressed tar, FILE, with its sha512 in FILE.sha512
    /// (without --into, only these two).
    #[arg(long, value_name = "FILE")]
    archive: Option<PathBuf>,

    /// At the site, with no config: check a copied kit, its directory or its archive (with
    /// the archive's .sha512 file), against its kit.json, and print kit.json's sha256.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["fetching", "into", "output", "extract"]
    )]
    verify: Option<PathBuf>,

    /// At the site, with no config: verify the kit archive FILE, unpack it into the new or
    /// empty directory --into DIR (or -o DIR), and check it there.
    #[arg(long, value_name = "FILE", conflicts_with = "fetching")]
    extract: Option<PathBuf>,

    /// With --verify or --extract of a kit archive: the sha512 (128 hex characters) it must
    /// have, as given to you by whoever wrote it, by another way than the archive came. Its
    /// FILE.tar.sha512, which anyone who can replace the archive can replace too, is then
    /// not read.
    #[arg(long, value_name = "HEX", value_parser = parse_sha512, requires = "site")]
    expect_sha512: Option<String>,

    /// Download keadm releases from this directory URL instead of keadm.download.url
    /// (default: the config's download.url when downloads are enabled, else GitHub releases).
    #[arg(long, value_name = "URL")]
    download_url: Option<String>,

    /// Pull the images of registry HOST (as image names spell it: docker.io,
    /// registry.k8s.io, host:port) from the registry at URL instead; repeatable.
    #[arg(long, value_name = "HOST=URL", value_parser = parse_mirror)]
    registry_mirror: Vec<RegistryMirror>,

    /// The runtime's sandbox ("pause") image to bundle, replacing the default
    /// registry.k8s.io/pause:3.9; repeatable. keadm sets none: it is the runtime's own
    /// setting (containerd's sandbox_image; see `crictl info`).
    #[arg(long, value_name = "IMAGE")]
    sandbox_image: Vec<String>,

    /// An image of the site's own (CNI, edgemesh, a workload) to bundle for every arch
    /// besides those keadm.extraImages lists; repeatable. It is for this bundle only: list
    /// the images the site always needs in keadm.extraImages.
    #[arg(long, value_name = "IMAGE")]
    image: Vec<String>,

    /// Accept a plain http:// download URL for arches without a keadm.download.sha512 pin,
    /// and plain http:// registry mirrors.
    #[arg(long)]
    insecure_http: bool,

    /// The largest keadm package to download, the most its unpacked files may hold, and
    /// the most an image (its config and layers together) may hold: bytes, or a number
    /// with KiB, MiB or GiB (default 512MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_package_bytes: Option<u64>,

    /// Where keadm packages are staged on this machine (default: keadm's /tmp/kubeedge/keadm).
    #[arg(long, value_name = "DIR")]
    staging_dir: Option<PathBuf>,

    /// Print only errors and the final result.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum PolicyArg {
    AcceptNew,
    Strict,
    Off,
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

/// `gen-config --format`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum FormatArg {
    /// A CSV file with a header row.
    Csv,
    /// An Ansible inventory in its INI dialect.
    Ini,
    /// An Ansible inventory in YAML.
    Yaml,
}

/// `gen-config --groups`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum GroupsArg {
    Site,
    Labels,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OutputArg {
    Text,
    Json,
}

/// A run's and `batch merge`'s `--output`: their results also as JUnit XML.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum RunOutputArg {
    Text,
    Json,
    Junit,
}

/// `batch bundle`'s kit directory (the one `--extract` unpacks into, too) and output
/// format from `--into`/`-o` and `--output`; no directory when neither names one.
/// `--output` was the kit directory before it became the format, as it is for a run; the
/// rule that keeps both working: its value is the format when it is one of the format
/// words (`text`, `json`), and otherwise the kit directory, with a deprecation note (a
/// directory named like a format word is written `--into json` or `--output ./json`).
fn bundle_places(into: Option<PathBuf>, output: Option<PathBuf>) -> Result<Places, clap::Error> {
    let format = output
        .as_deref()
        .and_then(|value| value.to_str())
        .and_then(|value| OutputArg::from_str(value, false).ok());
    let (into, deprecations) = match (into, format, output) {
        (into, Some(_), _) | (into, None, None) => (into, Vec::new()),
        (Some(into), None, Some(old)) => {
            return Err(command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--into {} and --output {} both name the kit directory. Give it once, with --into (--output takes the format, text or json).",
                    into.display(),
                    old.display()
                ),
            ));
        }
        (None, None, Some(old)) => {
            let note = format!(
                "--output {dir} names the kit directory, an old spelling that still works: write --into {dir} (or -o {dir}). --output now takes the format, text or json, as it does for a run.",
                dir = old.display()
            );
            (Some(old), vec![note])
        }
    };
    Ok(Places {
        into,
        format,
        deprecations,
    })
}

/// What [`bundle_places`] read from the command line.
struct Places {
    /// The kit directory, when one was named.
    into: Option<PathBuf>,
    /// The format, when `--output` named one.
    format: Option<OutputArg>,
    /// A sentence for each old spelling used.
    deprecations: Vec<String>,
}

/// The policy `--host-key-policy` names.
fn host_key_policy_of(arg: PolicyArg) -> HostKeyPolicy {
    match arg {
        PolicyArg::AcceptNew => HostKeyPolicy::AcceptNew,
        PolicyArg::Strict => HostKeyPolicy::Strict,
        PolicyArg::Off => HostKeyPolicy::Off,
    }
}

/// The format `--output` names; text when it names none.
fn output_format(arg: Option<OutputArg>) -> OutputFormat {
    match arg {
        Some(OutputArg::Json) => OutputFormat::Json,
        Some(OutputArg::Text) | None => OutputFormat::Text,
    }
}

/// The format a run's (or `batch merge`'s) `--output` names; text when it names none.
fn run_output_format(arg: Option<RunOutputArg>) -> OutputFormat {
    match arg {
        Some(RunOutputArg::Json) => OutputFormat::Json,
        Some(RunOutputArg::Junit) => OutputFormat::Junit,
        Some(RunOutputArg::Text) | None => OutputFormat::Text,
    }
}

/// `--only`: one glob, checked here so a typo such as `edge-[1` is a usage error rather
/// than a pattern that silently matches nothing.
fn parse_glob(text: &str) -> Result<String, String> {
    match glob::Pattern::new(text) {
        Ok(_) => Ok(text.to_string()),
        Err(err) => Err(format!(
            "`{text}` is not a valid glob: {} at character {}. Use *, ?, [abc], [a-z] or [!abc]; write [*], [?] or [[] for the character itself",
            err.msg,
            err.pos + 1
        )),
    }
}

/// `--class`: a failure class id, with `-` accepted for `_`.
fn parse_class(text: &str) -> Result<FailureClass, crate::diagnosis::UnknownClass> {
    text.parse()
}

fn parse_shard(text: &str) -> Result<Shard, String> {
    let (i, n) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not of the form I/N, such as 2/4"))?;
    let index: u64 = i
        .trim()
        .parse()
        .map_err(|_| format!("`{i}` is not a shard number"))?;
    let count: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("`{n}` is not a shard count"))?;
    if count == 0 || index == 0 || index > count {
        return Err(format!(
            "shard {index}/{count} does not exist: I must be between 1 and N"
        ));
    }
    Ok(Shard { index, count })
}

/// `--wave N|P%`: at least one node, at most all of them.
fn parse_wave(text: &str) -> Result<Amount, String> {
    parse_amount(text)
        .ok()
        .filter(|amount| !matches!(amount, Amount::Nodes(0) | Amount::Percent(0)))
        .ok_or_else(|| {
            format!(
                "`{}` is no wave size: write a number of nodes, at least 1 (5), or a share of the selected nodes from 1% to 100% (25%)",
                text.trim()
            )
        })
}

/// `--max-fail N|P%`: 0 (no failure tolerated) or more.
fn parse_max_fail(text: &str) -> Result<Amount, String> {
    parse_amount(text)
}

/// `5` or `25%` (at most 100%).
fn parse_amount(text: &str) -> Result<Amount, String> {
    let text = text.trim();
    let amount = match text.strip_suffix('%') {
        Some(share) => share
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .map(Amount::Percent),
        None => text.parse::<usize>().ok().map(Amount::Nodes),
    };
    amount.ok_or_else(|| {
        format!(
            "`{text}` is neither a number of nodes (5) nor a share of them from 0% to 100% (25%)"
        )
    })
}

/// Every duration flag (`--wave-pause`, `--drain-timeout`, `--timeout`,
/// `--connect-timeout`, `--ready-timeout`, `--kill-grace`): `90`, `90s`, `5m`, `1h`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let unit_secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    number
        .parse::<u64>()
        .ok()
        .filter(|_| unit_secs > 0)
        .and_then(|n| n.checked_mul(unit_secs))
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| {
            format!(
                "`{text}` is not a duration: write seconds (90 or 90s), minutes (5m) or hours (1h)"
            )
        })
}

/// `--registry-mirror HOST=URL`: URL must be http:// or https://.
fn parse_mirror(text: &str) -> Result<RegistryMirror, String> {
    let (registry, url) = text.split_once('=').ok_or_else(|| {
        format!("`{text}` is not of the form HOST=URL, such as docker.io=https://mirror.example")
    })?;
    let (registry, url) = (registry.trim(), url.trim());
    if registry.is_empty() || registry.contains('/') {
        return Err(format!(
            "`{registry}` is not a registry host such as docker.io or registry.k8s.io"
        ));
    }
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) || url.ends_with("://") {
        return Err(format!(
            "`{url}` is not a registry URL such as https://mirror.example or http://127.0.0.1:5000"
        ));
    }
    Ok(RegistryMirror {
        registry: registry.to_string(),
        url: url.to_string(),
    })
}

/// `--expect-sha512 HEX`: a sha512 in hex, lowercased.
fn parse_sha512(text: &str) -> Result<String, String> {
    let text = text.trim();
    match crate::digest::sha512_hex_problem(text) {
        Some(problem) => Err(format!(
            "{text:?} is not a sha512 digest (128 hex characters): it {problem}. Give the digest of the kit archive as `sha512sum FILE.tar` prints it"
        )),
        None => Ok(text.to_ascii_lowercase()),
    }
}

/// `--max-package-bytes`: `536870912`, `512MiB`, `1GiB`, `64KiB`.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        other => {
            return Err(format!(
                "`{other}` is not a size unit; write bytes, or a number with KiB, MiB or GiB"
            ));
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 512MiB"))?;
    match number.checked_mul(1 << shift) {
        Some(0) => Err("the size must be at least 1 byte".to_string()),
        Some(bytes) => Ok(bytes),
        None => Err(format!("`{text}` is too large")),
    }
}

/// `--drain-timeout`: a duration as [`parse_duration`] reads it, of at least a second.
fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text).and_then(|timeout| {
        if timeout.is_zero() {
            Err("a timeout must be at least 1 s".to_string())
        } else {
            Ok(timeout)
        }
    })
}

/// `--timeout`, `--connect-timeout`, `--ready-timeout`: a timeout as [`parse_timeout`]
/// reads it, in the whole seconds the options keep.
fn parse_timeout_seconds(text: &str) -> Result<u64, String> {
    parse_timeout(text).map(|timeout| timeout.as_secs())
}

/// `--kill-grace`: a duration as [`parse_duration`] reads it, from 0 (kill at once) to a
/// day.
fn parse_grace_seconds(text: &str) -> Result<u64, String> {
    parse_duration(text).and_then(|grace| match grace.as_secs() {
        seconds @ 0..=86_400 => Ok(seconds),
        _ => Err("a kill grace period can be at most a day (86400s, 24h)".to_string()),
    })
}

/// klog's `-v LEVEL` (`-v 4`, `-v=4`, `-v4`, `--verbose 2`) confuses clap into talking
/// about subcommands or unknown arguments; when the failed command line has one, say
/// what keadm-batch's `-v` is instead.
fn explain_verbosity_level(err: clap::Error, args: &[OsString]) -> clap::Error {
    let is_level = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let has_level = args.iter().enumerate().any(|(i, arg)| {
        let arg = arg.to_string_lossy();
        let next = args.get(i + 1).map(|a| a.to_string_lossy());
        match arg.as_ref() {
            "-v" | "--verbose" => next.is_some_and(|n| is_level(&n)),
            other => other
                .strip_prefix("-v")
                .or_else(|| other.strip_prefix("--verbose="))
                .map(|rest| rest.strip_prefix('=').unwrap_or(rest))
                .is_some_and(is_level),
        }
    });
    if !has_level || !err.use_stderr() {
        return err;
    }
    command().error(
        clap::error::ErrorKind::UnknownArgument,
        "keadm-batch's -v takes no level: it is on or off, and prints every step of every node. klog's -v LEVEL (as in keadm -v 4) is not supported; write -v alone.",
    )
}

/// A shell name clap_complete does not know. `Command::Completions` carries names clap
/// has already checked, so this only guards the conversion back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "There is no completion script for the shell `{0}`. Use bash, zsh, fish, elvish or powershell."
)]
pub struct UnknownShell(pub String);

/// Writes the completion script for `shell` (a name `Command::Completions` carries).
pub fn write_completions(shell: &str, out: &mut dyn std::io::Write) -> Result<(), UnknownShell> {
    let shell: clap_complete::Shell = shell
        .parse()
        .map_err(|_: String| UnknownShell(shell.to_string()))?;
    clap_complete::generate(shell, &mut command(), "keadm-batch", out);
    Ok(())
}

/// The exit codes, for the manual page (README.md, "Exit codes", says the same at length).
pub const EXIT_STATUS: [(i32, &str); 5] = [
    (
        0,
        "Every selected node succeeded, or --retry-failed found nothing to retry.",
    ),
    (
        1,
        "At least one selected node did not succeed (failed, timed out or skipped); --preflight-only found something on some node; batch merge combined a node that did not succeed; batch status could not reach some node (or it did not answer); or keadm-batch could not write its own files (the run directory, the log, standard output, the kit of batch bundle).",
    ),
    (
        2,
        "The config or the command line is invalid (for batch merge also: a shard's file it refuses), or the join batch as a whole would fail (an expired token, another cluster's CA, names taken), or a keadm download would be plain HTTP without pins or --insecure-http, or a keadmCmd's --image-repository makes no valid image reference; batch bundle also refuses an invalid image name, a plain-HTTP registry mirror, a kit directory (--into) that is not a kit, an --archive path that is a directory or inside the kit directory, and a docker config.json it cannot read; batch bundle --verify a path that is neither a directory nor a file, and --extract into a directory that is not empty; an --expect-sha512 that is no sha512, or given for a directory; an image archive that keadm.offlineImages names whose file name is outside the accepted names. No node was touched.",
    ),
    (
        3,
        "The keadm packages or the offline images could not be staged (download, checksum or pin mismatch, offline package, a kit file that does not match its kit.json, an image archive that cannot be read or names no image or has a file name outside the accepted names, unpacking, a package over --max-package-bytes); no node was touched. batch bundle: a release or an image could not be fetched or verified. batch bundle --verify or --extract: a kit file that does not match its kit.json or has a name outside the accepted ones, or a kit archive that does not match its .sha512 file (or --expect-sha512) or cannot be read (each named).",
    ),
    (
        130,
        "Interrupted by Ctrl-C or SIGTERM; the results so far are written.",
    ),
];

/// Text for roff: backslashes and hyphens escaped, no line starting with a control dot.
fn roff_text(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    match text.strip_prefix('.') {
        Some(rest) => format!("\\&.{rest}"),
        None => text,
    }
}

/// Writes the manual page: one complete page, keadm-batch(1), that describes every
/// command and option itself (clap_mangen's own page would refer to a page per
/// subcommand, which nobody generates) and has an EXIT STATUS section.
pub fn write_man_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut cmd = command();
    cmd.build();
    let top = clap_mangen::Man::new(cmd.clone());
    top.render_title(out)?;
    top.render_name_section(out)?;
    top.render_synopsis_section(out)?;
    top.render_description_section(out)?;
    top.render_options_section(out)?;
    // Every command, with the path that reaches it, then each one's options.
    let mut commands: Vec<(String, clap::Command)> = Vec::new();
    for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
        commands.push((sub.get_name().to_string(), sub.clone()));
        for inner in sub.get_subcommands().filter(|c| c.get_name() != "help") {
            commands.push((
                format!("{} {}", sub.get_name(), inner.get_name()),
                inner.clone(),
            ));
        }
    }
    writeln!(out, ".SH COMMANDS")?;
    for (path, sub) in &commands {
        writeln!(
            out,
            ".TP\n\\fBkeadm\\-batch {}\\fR\n{}",
            roff_text(path),
            roff_text(&sub.get_about().map(ToString::to_string).unwrap_or_default())
        )?;
    }
    for (path, sub) in &commands {
        if sub
            .get_arguments()
            .all(|a| matches!(a.get_id().as_str(), "help" | "version"))
        {
            continue;
        }
        let mut section = Vec::new();
        clap_mangen::Man::new(sub.clone()).render_options_section(&mut section)?;
        let heading = format!(".SH \"{} OPTIONS\"", path.to_uppercase());
        let section = String::from_utf8_lossy(&section).replace(".SH OPTIONS", &heading);
        out.write_all(section.as_bytes())?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in EXIT_STATUS {
        writeln!(out, ".TP\n\\fB{code}\\fR\n{}", roff_text(meaning))?;
    }
    top.render_version_section(out)
}

/// `--version`: what an operator checks a control host's copy against, for CVEs among
/// others: the version, the commit and date it was built from and for which target, and
/// the libssh2, OpenSSL, zlib, liblzma and libzstd inside (stamped by build.rs; OpenSSL's
/// asked of the library itself, so a dynamically linked one reports the host's, and
/// libzstd's too). `-V` prints only the version.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        // The release build (feature `vendored`) compiles OpenSSL and zlib in.
        let linked = if cfg!(feature = "vendored") {
            "built in"
        } else {
            "the system library"
        };
        format!(
            "{version}\n\
             commit:  {commit}\n\
             built:   {date}\n\
             target:  {target}\n\
             libssh2: {libssh2}\n\
             OpenSSL: {openssl} ({linked})\n\
             zlib:    {zlib}\n\
             liblzma: {liblzma}\n\
             libzstd: {libzstd} ({libzstd_linked})",
            version = env!("CARGO_PKG_VERSION"),
            commit = env!("KEADM_BATCH_GIT_COMMIT"),
            date = env!("KEADM_BATCH_BUILD_DATE"),
            target = env!("KEADM_BATCH_TARGET"),
            libssh2 = env!("KEADM_BATCH_LIBSSH2"),
            openssl = openssl::version::version(),
            zlib = env!("KEADM_BATCH_ZLIB"),
            liblzma = env!("KEADM_BATCH_LIBLZMA"),
            libzstd = zstd::zstd_safe::version_string(),
            libzstd_linked = env!("KEADM_BATCH_LIBZSTD_LINKED"),
        )
    })
}

/// The clap command, for `--help` snapshots and shell completions.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Parses the command line. Errors (and `--help`/`--version`) come back as clap's, which
/// know how to print themselves and which exit code they deserve.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, clap::Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    if let [_, command, format, binary, sha256] = &args[..]
        && command == PACK_COPY
        && let Some(format) = format.to_str().and_then(CopyFormat::named)
    {
        return Ok(Command::PackCopy {
            format,
            binary: PathBuf::from(binary),
            sha256: sha256.to_string_lossy().into_owned(),
        });
    }
    let cli = Cli::try_parse_from(&args).map_err(|err| explain_verbosity_level(err, &args))?;
    let batch = match cli.command {
        TopCommand::Batch(batch) => batch,
        TopCommand::Completions { shell } => return Ok(Command::Completions(shell.to_string())),
        TopCommand::Man => return Ok(Command::Man),
    };
    match batch.sub {
        Some(BatchSub::GenConfig {
            output,
            force,
            from,
            format,
            groups,
        }) => {
            return Ok(Command::GenConfig(GenConfigOptions {
                output,
                force,
                from,
                format: format.map(|format| match format {
                    FormatArg::Csv => SourceFormat::Csv,
                    FormatArg::Ini => SourceFormat::AnsibleIni,
                    FormatArg::Yaml => SourceFormat::AnsibleYaml,
                }),
                groups: match groups {
                    GroupsArg::Site => GroupsAs::Site,
                    GroupsArg::Labels => GroupsAs::Labels,
                },
            }));
        }
        Some(BatchSub::Merge {
            dirs,
            config,
            output,
            into,
            junit,
            metrics,
        }) => {
            return Ok(Command::Merge(MergeOptions {
                dirs,
                config,
                output: run_output_format(output),
                into,
                junit,
                metrics,
            }));
        }
        Some(BatchSub::Report { run_dir }) => return Ok(Command::Report { run_dir }),
        Some(BatchSub::Status {
            config,
            only,
            host_key_policy,
            known_hosts,
            kubeconfig,
            context,
            output,
            cert_warn_days,
        }) => {
            return Ok(Command::Status(StatusOptions {
                // clap has required it.
                config: config.unwrap_or_default(),
                only: only.into_iter().filter(|s| !s.is_empty()).collect(),
                host_key_policy: host_key_policy.map(host_key_policy_of),
                known_hosts,
                kubeconfig,
                context,
                output: output_format(output),
                cert_warn_days,
            }));
        }
        Some(BatchSub::Bundle(bundle)) => {
            if let Some(path) = bundle.verify {
                return Ok(Command::VerifyKit(VerifyOptions {
                    path,
                    expect_sha512: bundle.expect_sha512,
                }));
            }
            let Places {
                into,
                format,
                deprecations,
            } = bundle_places(bundle.into, bundle.output)?;
            let missing =
                |what: &str| command().error(clap::error::ErrorKind::MissingRequiredArgument, what);
            if let Some(archive) = bundle.extract {
                if format == Some(OutputArg::Json) {
                    return Err(command().error(
                        clap::error::ErrorKind::ArgumentConflict,
                        "--output json is for writing a kit: --extract reports what it checked as text on stderr. Name the directory to unpack into with --into DIR (or -o DIR).",
                    ));
                }
                let into = into.ok_or_else(|| {
                    missing(
                        "the directory to unpack into is required: `keadm-batch batch bundle --extract FILE.tar --into DIR` (or -o DIR)",
                    )
                })?;
                return Ok(Command::ExtractKit(ExtractOptions {
                    archive,
                    into,
                    expect_sha512: bundle.expect_sha512,
                    deprecations,
                }));
            }
            if into.is_none() && bundle.archive.is_none() {
                return Err(missing(
                    "the kit directory is required: `keadm-batch batch bundle -c config.yaml --into DIR` (or -o DIR), or --archive FILE.tar for the kit as one file",
                ));
            }
            // clap has required it without --verify or --extract.
            let config = bundle
                .config
                .ok_or_else(|| missing("batch bundle needs -c FILE"))?;
            return Ok(Command::Bundle(Box::new(BundleOptions {
                config,
                into,
                archive: bundle.archive,
                output: output_format(format),
                deprecations,
                staging_dir: bundle.staging_dir,
                download_url: bundle.download_url,
                insecure_http: bundle.insecure_http,
                max_package_bytes: bundle.max_package_bytes,
                registry_mirrors: bundle.registry_mirror,
                sandbox_images: bundle.sandbox_image,
                extra_images: bundle.image,
                verbosity: if bundle.quiet {
                    Verbosity::Quiet
                } else {
                    Verbosity::Normal
                },
            })));
        }
        None => {}
    }
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
    use crate::keadm_cmd::Task;

    fn run(args: &[&str]) -> Result<Command, clap::Error> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn keadm_spelling_works() {
        let Command::Run(opts) = run(&["keadm-batch", "batch", "-c", "x.yaml"]).unwrap() else {
            panic!()
        };
        assert_eq!(opts.config, PathBuf::from("x.yaml"));
    }

    #[test]
    fn gen_config_defaults_to_config_yaml() {
        assert_eq!(
            run(&["keadm-batch", "batch", "gen-config"]).unwrap(),
            Command::GenConfig(GenConfigOptions {
                from: None,
                format: None,
                groups: GroupsAs::Site,
                output: "config.yaml".into(),
                force: false
            })
        );
    }

    #[test]
    fn shard_and_only_parse() {
        let Command::Run(opts) =
            run(&["k", "batch", "-c", "c", "--shard", "2/4", "--only", "a*,b"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(opts.shard, Some(Shard { index: 2, count: 4 }));
        assert_eq!(opts.only, vec!["a*".to_string(), "b".to_string()]);
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
    fn long_version_names_the_build_and_the_libraries_inside() {
        let err = run(&["keadm-batch", "--version"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
        let text = err.to_string();
        let first = format!("keadm-batch {}", env!("CARGO_PKG_VERSION"));
        assert_eq!(text.lines().next(), Some(first.as_str()));
        for label in [
            "commit:", "built:", "target:", "libssh2:", "OpenSSL:", "zlib:", "liblzma:", "libzstd:",
        ] {
            assert!(
                text.lines().any(|line| line.starts_with(label)),
                "no `{label}` line in:\n{text}"
            );
        }
        assert!(text.contains(openssl::version::version()), "{text}");
        let libzstd = format!(
            "libzstd: {} ({})",
            zstd::zstd_safe::version_string(),
            env!("KEADM_BATCH_LIBZSTD_LINKED")
        );
        assert!(text.lines().any(|line| line == libzstd), "{text}");
        // -V stays one line, for scripts that read the version.
        let short = run(&["keadm-batch", "-V"]).unwrap_err().to_string();
        assert_eq!(short.trim_end(), first);
    }

    #[test]
    fn completions_for_an_unknown_shell_are_a_typed_error() {
        let mut out = Vec::new();
        assert_eq!(
            write_completions("tcsh", &mut out),
            Err(UnknownShell("tcsh".into()))
        );
        assert!(out.is_empty());
        write_completions("bash", &mut out).unwrap();
        assert!(!out.is_empty());
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
    fn merge_takes_dirs() {
        assert_eq!(
            run(&["k", "batch", "merge", "a", "b", "--output", "json"]).unwrap(),
            Command::Merge(MergeOptions {
                dirs: vec!["a".into(), "b".into()],
                config: None,
                output: OutputFormat::Json,
                into: None,
                junit: None,
                metrics: None,
            })
        );
        let Command::Merge(options) = run(&[
            "k", "batch", "merge", "a", "--output", "junit", "--junit", "m.xml",
        ])
        .unwrap() else {
            panic!("not a merge")
        };
        assert_eq!(options.output, OutputFormat::Junit);
        assert_eq!(options.junit, Some(PathBuf::from("m.xml")));
        let Command::Merge(options) = run(&["k", "batch", "merge", "-c", "c.yaml", "a"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(options.config, Some(PathBuf::from("c.yaml")));
        assert!(run(&["k", "batch", "merge"]).is_err());
    }

    #[test]
    fn bundle_takes_extra_images_which_verify_has_no_use_for() {
        let bundle = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle"];
            args.extend(extra);
            run(&args)
        };
        let Command::Bundle(opts) = bundle(&[
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--image",
            "docker.io/kubeedge/edgemesh-agent:v1.15.0",
            "--image",
            "registry.example:5000/site/app:1.2",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            opts.extra_images,
            [
                "docker.io/kubeedge/edgemesh-agent:v1.15.0",
                "registry.example:5000/site/app:1.2"
            ]
        );
        assert!(bundle(&["--verify", "kit", "--image", "a:1"]).is_err());
    }

    #[test]
    fn bundle_takes_config_output_mirrors_and_sandbox_images() {
        let Command::Bundle(opts) = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--registry-mirror",
            "docker.io=http://127.0.0.1:5000",
            "--registry-mirror",
            "registry.k8s.io=https://mirror.example/",
            "--sandbox-image",
            "registry.k8s.io/pause:3.6",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(opts.config, PathBuf::from("c.yaml"));
        assert_eq!(opts.into, Some(PathBuf::from("kit")));
        assert_eq!(opts.registry_mirrors[0].registry, "docker.io");
        assert_eq!(opts.registry_mirrors[1].url, "https://mirror.example/");
        assert_eq!(opts.sandbox_images, ["registry.k8s.io/pause:3.6"]);
        for bad in ["docker.io", "docker.io=mirror", "=http://x", "a/b=http://x"] {
            let err = run(&[
                "k",
                "batch",
                "bundle",
                "-c",
                "c",
                "-o",
                "d",
                "--registry-mirror",
                bad,
            ]);
            assert!(err.is_err(), "{bad}");
        }
        assert!(
            run(&["k", "batch", "bundle", "-c", "c"]).is_err(),
            "-o is required"
        );
    }

    #[test]
    fn bundle_verifies_and_extracts_without_a_config_and_archives_with_or_without_a_directory() {
        assert_eq!(
            run(&["k", "batch", "bundle", "--verify", "kit.tar"]).unwrap(),
            Command::VerifyKit(VerifyOptions {
                path: "kit.tar".into(),
                expect_sha512: None,
            })
        );
        assert_eq!(
            run(&["k", "batch", "bundle", "--extract", "kit.tar", "-o", "kit"]).unwrap(),
            Command::ExtractKit(ExtractOptions {
                archive: "kit.tar".into(),
                into: "kit".into(),
                expect_sha512: None,
                deprecations: Vec::new(),
            })
        );
        let Command::Bundle(opts) = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "--archive",
            "kit.tar",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!((opts.into, opts.archive), (None, Some("kit.tar".into())));
        for refused in [
            &["k", "batch", "bundle", "--extract", "kit.tar"][..],
            &["k", "batch", "bundle", "--verify", "kit", "-c", "c.yaml"],
            &["k", "batch", "bundle", "--verify", "kit", "-o", "d"],
            &[
                "k",
                "batch",
                "bundle",
                "--extract",
                "kit.tar",
                "-o",
                "d",
                "--archive",
                "x.tar",
            ],
            &[
                "k",
                "batch",
                "bundle",
                "--extract",
                "kit.tar",
                "-o",
                "d",
                "-c",
                "c.yaml",
            ],
        ] {
            let err = run(refused).unwrap_err();
            assert!(err.use_stderr(), "{refused:?} is a usage error");
        }
    }

    /// `--expect-sha512 HEX` goes with --verify and --extract only, and takes a sha512 in
    /// hex in any case, lowercased.
    #[test]
    fn expect_sha512_takes_a_sha512_for_verify_and_extract_only() {
        let digest = "Ab".repeat(64);
        let pinned = Some("ab".repeat(64));
        assert_eq!(
            run(&[
                "k",
                "batch",
                "bundle",
                "--verify",
                "k.tar",
                "--expect-sha512",
                &digest
            ])
            .unwrap(),
            Command::VerifyKit(VerifyOptions {
                path: "k.tar".into(),
                expect_sha512: pinned.clone(),
            })
        );
        let args = [
            "--extract",
            "k.tar",
            "-o",
            "kit",
            "--expect-sha512",
            &digest,
        ];
        let Command::ExtractKit(options) =
            run(&[&["k", "batch", "bundle"][..], &args].concat()).unwrap()
        else {
            panic!()
        };
        assert_eq!(options.expect_sha512, pinned);
        let err = run(&[
            "k",
            "batch",
            "bundle",
            "--verify",
            "k.tar",
            "--expect-sha512",
            "a1",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                "\"a1\" is not a sha512 digest (128 hex characters): it is 2 hex characters long"
            ),
            "{err}"
        );
        let without_site = run(&[
            "k",
            "batch",
            "bundle",
            "-c",
            "c.yaml",
            "-o",
            "kit",
            "--expect-sha512",
            &digest,
        ]);
        assert!(without_site.unwrap_err().use_stderr());
    }

    #[test]
    fn extract_s_directory_is_into_or_o_as_the_kit_directory_is() {
        let extract = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle", "--extract", "kit.tar"];
            args.extend_from_slice(extra);
            run(&args)
        };
        let into = |into: &str, deprecations: &[&str]| {
            Command::ExtractKit(ExtractOptions {
                archive: "kit.tar".into(),
                into: into.into(),
                expect_sha512: None,
                deprecations: deprecations.iter().map(ToString::to_string).collect(),
            })
        };
        assert_eq!(extract(&["--into", "kit"]).unwrap(), into("kit", &[]));
        assert_eq!(
            extract(&["-o", "kit", "--output", "text"]).unwrap(),
            into("kit", &[])
        );
        // --output DIR, the old long spelling of -o, still names it, with the warning.
        assert_eq!(
            extract(&["--output", "old-kit"]).unwrap(),
            into(
                "old-kit",
                &[
                    "--output old-kit names the kit directory, an old spelling that still works: write --into old-kit (or -o old-kit). --output now takes the format, text or json, as it does for a run."
                ]
            )
        );
        let err = extract(&[]).unwrap_err();
        assert!(
            err.to_string().contains(
                "the directory to unpack into is required: `keadm-batch batch bundle --extract FILE.tar --into DIR`"
            ),
            "{err}"
        );
        let err = extract(&["--into", "kit", "--output", "json"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("--output json is for writing a kit: --extract reports"),
            "{err}"
        );
        let err = extract(&["--into", "a", "--output", "b"]).unwrap_err();
        assert!(
            err.to_string().contains("both name the kit directory"),
            "{err}"
        );
        for refused in [
            &["--verify", "kit", "--into", "d"][..],
            &["--verify", "kit", "--output", "json"],
        ] {
            let mut args = vec!["k", "batch", "bundle"];
            args.extend_from_slice(refused);
            assert!(run(&args).unwrap_err().use_stderr(), "{refused:?}");
        }
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
    fn package_sizes_take_binary_units() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(
            parse_size("12MB")
                .unwrap_err()
                .contains("`MB` is not a size unit")
        );
        assert!(parse_size("MiB").is_err());
        assert!(
            parse_size("99999999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn a_klog_verbosity_level_is_explained() {
        for args in [
            &["k", "batch", "-c", "c", "-v", "4"][..],
            &["k", "batch", "-c", "c", "-v4"],
            &["k", "batch", "-c", "c", "-v=2"],
            &["k", "batch", "-c", "c", "--verbose", "2"],
        ] {
            let err = run(args).unwrap_err();
            assert!(err.use_stderr(), "a usage error, exit 2");
            assert!(
                err.to_string().contains("keadm-batch's -v takes no level"),
                "{args:?}: {err}"
            );
        }
        let Command::Run(opts) = run(&["k", "batch", "-c", "c", "-v"]).unwrap() else {
            panic!()
        };
        assert_eq!(opts.verbosity, Verbosity::Verbose);
        // Other mistakes keep clap's own message.
        let err = run(&["k", "batch", "-c", "c", "--frobnicate"]).unwrap_err();
        assert!(!err.to_string().contains("takes no level"), "{err}");
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
    fn bundle_s_kit_directory_is_into_or_o_and_output_is_its_format() {
        let bundle = |extra: &[&str]| {
            let mut args = vec!["k", "batch", "bundle", "-c", "c.yaml"];
            args.extend_from_slice(extra);
            run(&args)
        };
        for spelling in [&["--into", "kit"][..], &["-o", "kit"]] {
            let Command::Bundle(opts) = bundle(spelling).unwrap() else {
                panic!()
            };
            assert_eq!(opts.into, Some(PathBuf::from("kit")), "{spelling:?}");
            assert_eq!(opts.output, OutputFormat::Text);
            assert!(opts.deprecations.is_empty());
        }
        let Command::Bundle(opts) = bundle(&["-o", "kit", "--output", "json"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (opts.into, opts.output),
            (Some(PathBuf::from("kit")), OutputFormat::Json)
        );
        // The old spelling: any other value of --output is the kit directory, with a
        // warning that names the new one.
        let Command::Bundle(opts) = bundle(&["--output", "old-kit"]).unwrap() else {
            panic!()
        };
        assert_eq!(opts.into, Some(PathBuf::from("old-kit")));
        assert_eq!(opts.output, OutputFormat::Text);
        assert_eq!(
            opts.deprecations,
            [
                "--output old-kit names the kit directory, an old spelling that still works: write --into old-kit (or -o old-kit). --output now takes the format, text or json, as it does for a run."
            ]
        );
        let err = bundle(&["--into", "a", "--output", "b"]).unwrap_err();
        assert!(err.use_stderr());
        assert!(
            err.to_string().contains(
                "--into a and --output b both name the kit directory. Give it once, with --into"
            ),
            "{err}"
        );
        for missing in [&[][..], &["--output", "json"]] {
            let err = bundle(missing).unwrap_err();
            assert!(
                err.to_string().contains(
                    "the kit directory is required: `keadm-batch batch bundle -c config.yaml --into DIR`"
                ),
                "{missing:?}: {err}"
            );
        }
    }

    #[test]
    fn only_patterns_are_checked_globs() {
        let Command::Run(opts) =
            run(&["k", "batch", "-c", "c", "--only", "edge-[ab]*,x?"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(opts.only, vec!["edge-[ab]*".to_string(), "x?".to_string()]);
        let err = run(&["k", "batch", "-c", "c", "--only", "edge-[1"]).unwrap_err();
        assert!(
            err.to_string().contains("`edge-[1` is not a valid glob"),
            "{err}"
        );
    }

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    /// The long flags of `keadm-batch batch`, as clap knows them.
    fn batch_flags() -> Vec<String> {
        let cli = command();
        let batch = cli.find_subcommand("batch").expect("the batch subcommand");
        batch
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    }

    /// Whether keadm-batch's flag `--long` does anything for nodes whose keadmCmd does
    /// `task` (the flags' help says which command each is for).
    fn batch_flag_fits(long: &str, task: Task) -> bool {
        match long {
            "reset-first" | "token-from-cluster" | "preflight" | "preflight-only" => {
                task == Task::Join
            }
            "backup" | "rollback-on-failure" => task == Task::Upgrade,
            "delete-nodes" => task == Task::Reset,
            // Joins are not drained: their Node does not exist yet.
            "drain" | "drain-timeout" => task != Task::Join,
            "ready-timeout" | "no-wait" => matches!(task, Task::Join | Task::Upgrade),
            _ => true,
        }
    }

    /// The `--flags` named in `text`, each with whose flag it is: keadm's (`Some(subcommand)`,
    /// inside a backticked `keadm ...` command, or a backticked `--flag` followed by ` in
    /// keadmCmd`) or keadm-batch's (`None`: outside backticks, or a backticked span that
    /// starts with `--` or `keadm-batch`). Other backticked commands (`systemctl`,
    /// `kubectl`...) have flags of their own and are left out.
    fn flags_named(text: &str, task_command: &str) -> Vec<(Option<String>, String)> {
        let mut out = Vec::new();
        let flags = |span: &str| -> Vec<String> {
            span.split(|c: char| c.is_whitespace() || "(),;".contains(c))
                .filter_map(|w| w.strip_prefix("--"))
                .map(|w| {
                    w.split('=')
                        .next()
                        .unwrap_or("")
                        .trim_end_matches('.')
                        .to_string()
                })
                .filter(|w| !w.is_empty())
                .collect()
        };
        let keadm_sub = |words: &[&str]| -> String {
            words
                .iter()
                .skip(1)
                .find(|w| !w.starts_with('-'))
                .map_or(String::new(), |w| w.to_string())
        };
        for (at, span) in text.split('`').enumerate() {
            if at % 2 == 0 {
                out.extend(flags(span).into_iter().map(|f| (None, f)));
                continue;
            }
            let words: Vec<&str> = span.split_whitespace().collect();
            let after = text.split('`').nth(at + 1).unwrap_or("");
            match words.first().copied() {
                Some("keadm") => {
                    let sub = keadm_sub(&words);
                    out.extend(flags(span).into_iter().map(|f| (Some(sub.clone()), f)));
                }
                Some(first) if first.starts_with("--") && after.starts_with(" in keadmCmd") => {
                    let sub = keadm_sub(&task_command.split_whitespace().collect::<Vec<_>>());
                    out.extend(flags(span).into_iter().map(|f| (Some(sub.clone()), f)));
                }
                Some(first) if first.starts_with("--") || first == "keadm-batch" => {
                    out.extend(flags(span).into_iter().map(|f| (None, f)));
                }
                _ => {}
            }
        }
        out
    }

    /// Every class's fix, for every task, is one an operator can copy: it never runs
    /// `edgecore --version` (which starts a second edgecore), names `--reset-first` only
    /// for joins, and every flag it names exists, is keadm-batch's for that task or keadm's
    /// for the command named.
    #[test]
    fn every_fix_for_every_task_names_only_flags_that_exist_for_it() {
        let batch = batch_flags();
        assert!(batch.iter().any(|f| f == "reset-first"), "{batch:?}");
        let mut checked = 0;
        for class in FailureClass::ALL {
            for task in Task::ALL {
                let fix = class.suggested_fix(task);
                let pair = format!("{class} for {task:?}: {fix}");
                // `edgecore --version` above all: it starts a second edgecore.
                assert!(!fix.contains("--version"), "{pair}");
                assert!(
                    task == Task::Join || !fix.contains("--reset-first"),
                    "--reset-first is for joins only: {pair}"
                );
                for (whose, flag) in flags_named(&fix, task.command()) {
                    checked += 1;
                    match whose {
                        None => {
                            assert!(batch.contains(&flag), "keadm-batch has no --{flag}: {pair}");
                            assert!(
                                batch_flag_fits(&flag, task),
                                "--{flag} does nothing for {task:?}: {pair}"
                            );
                        }
                        Some(sub) => assert!(
                            crate::keadm_cmd::keadm_has_flag(&sub, &flag),
                            "keadm {sub} has no --{flag}: {pair}"
                        ),
                    }
                }
            }
        }
        assert!(checked > 50, "the fixes name flags: {checked}");
    }

    /// The defects the review found, each for the task it was found with.
    #[test]
    fn the_fixes_the_review_found_wrong_are_right_for_their_task() {
        let upgrade_pull = FailureClass::ImagePullStalled.suggested_fix(Task::Upgrade);
        assert!(!upgrade_pull.contains("--reset-first"), "{upgrade_pull}");
        assert!(
            upgrade_pull.contains("`--image` in keadmCmd"),
            "{upgrade_pull}"
        );
        let join_pull = FailureClass::ImagePullStalled.suggested_fix(Task::Join);
        assert!(join_pull.contains("--reset-first"), "{join_pull}");
        let mismatch = FailureClass::VersionMismatch.suggested_fix(Task::Upgrade);
        assert!(!mismatch.contains("edgecore --version"), "{mismatch}");
        assert!(
            mismatch.contains("`journalctl -u edgecore | grep Version`")
                && mismatch.contains("`systemctl status edgecore`"),
            "{mismatch}"
        );
        assert!(mismatch.contains("--rollback-on-failure"), "{mismatch}");
        // --rollback-on-failure is an upgrade's: a rollback's mismatch does not name it.
        let rolled = FailureClass::VersionMismatch.suggested_fix(Task::Rollback);
        assert!(!rolled.contains("--rollback-on-failure"), "{rolled}");
        assert!(rolled.contains("the version rolled back to"), "{rolled}");
    }
}
