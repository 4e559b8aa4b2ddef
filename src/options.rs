//! Typed options for each command, built by `cli` from the command line. Nothing past this
//! point knows clap.

use std::path::PathBuf;

use crate::config::HostKeyPolicy;
use crate::diagnosis::FailureClass;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    GenConfig(GenConfigOptions),
    /// A shell completion script for this shell.
    Completions(String),
    /// The manual page.
    Man,
    Run(Box<RunOptions>),
    Merge(MergeOptions),
    /// `batch report [RUN_DIR]`: report.html written from the run's summary.json; `None`
    /// for the latest run (batch_runs/latest).
    Report {
        run_dir: Option<PathBuf>,
    },
    /// `batch status -c FILE`: a read-only view of the config's nodes.
    Status(StatusOptions),
    Bundle(Box<BundleOptions>),
    /// `batch bundle --verify PATH`: a copied kit, its directory or its archive, checked
    /// where it arrived, without a config.
    VerifyKit(VerifyOptions),
    /// `batch bundle --extract FILE --into DIR`.
    ExtractKit(ExtractOptions),
    /// A staged keadm's packed copy, made for a run in a process of its own.
    PackCopy {
        format: crate::stage::CopyFormat,
        binary: PathBuf,
        sha256: String,
    },
}

/// `batch bundle -c FILE --into DIR`: the air-gapped kit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BundleOptions {
    pub config: PathBuf,
    /// The kit directory (`--into`); `None` with `archive` alone.
    pub into: Option<PathBuf>,
    /// `--archive FILE.tar`: the kit as one file, its sha512 beside it.
    pub archive: Option<PathBuf>,
    /// How what was written is reported: text on stderr, or JSON on stdout besides.
    pub output: OutputFormat,
    /// Old spellings the command line used, each a sentence for the operator: they
    /// still work, and say what to write instead.
    pub deprecations: Vec<String>,
    /// Where keadm releases are staged on this machine (default keadm's BASE).
    pub staging_dir: Option<PathBuf>,
    /// Where keadm releases are downloaded from, over the config's download.url.
    pub download_url: Option<String>,
    /// Plain-HTTP download.url and registry mirrors are accepted.
    pub insecure_http: bool,
    /// The largest keadm package download and unpacked package, and the most an image's
    /// config and layers together may hold, in bytes; `None` is the default.
    pub max_package_bytes: Option<u64>,
    /// `--registry-mirror HOST=URL`.
    pub registry_mirrors: Vec<RegistryMirror>,
    /// `--sandbox-image REF`; empty means the default.
    pub sandbox_images: Vec<String>,
    /// `--image REF`: images of the site's own for this bundle, besides keadm.extraImages.
    pub extra_images: Vec<String>,
    pub verbosity: Verbosity,
}

/// `batch bundle --verify PATH`: the kit directory or archive to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    pub path: PathBuf,
    /// `--expect-sha512 HEX`: the archive's sha512 as given out of band, lowercase hex.
    pub expect_sha512: Option<String>,
}

/// `batch bundle --extract FILE --into DIR` (or `-o DIR`): a kit archive unpacked at the
/// site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractOptions {
    /// The kit archive, with its `.sha512` file beside it (unless `expect_sha512`).
    pub archive: PathBuf,
    /// The kit directory it becomes: new, or empty.
    pub into: PathBuf,
    /// `--expect-sha512 HEX`: the archive's sha512 as given out of band, lowercase hex.
    pub expect_sha512: Option<String>,
    /// Old spellings the command line used, as [`BundleOptions::deprecations`].
    pub deprecations: Vec<String>,
}

/// Requests for images of `registry` go to `url` instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryMirror {
    /// As in image references: `docker.io`, `registry.k8s.io`, `host:port`.
    pub registry: String,
    /// The base URL, `https://mirror.example` or `http://127.0.0.1:5000`.
    pub url: String,
}

/// `batch merge DIR...`.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeOptions {
    /// The shards' run directories.
    pub dirs: Vec<PathBuf>,
    /// `-c`: the config the shards ran with; every merged node must be one of its nodes.
    pub config: Option<PathBuf>,
    pub output: OutputFormat,
    /// Also write the merged summary.json and batch_process_log.txt into this directory.
    pub into: Option<PathBuf>,
    /// `--junit FILE`: also write the merged run as JUnit XML there.
    pub junit: Option<PathBuf>,
    /// `--metrics FILE`: also write the merged run's metrics there.
    pub metrics: Option<PathBuf>,
}

/// One `--only` selector (docs/config.md, "Selecting nodes"): a glob on nodeName, on the
/// node's site (`site=GLOB`) or on the value of one of the labels the config gives it
/// (`label:KEY=GLOB`). Node names hold no `=` or `:`, so the forms cannot be confused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Name(String),
    Site(String),
    Label { key: String, value: String },
}

impl Selector {
    /// Reads one selector, checking its glob (so a typo such as `edge-[1` is a usage
    /// error rather than a pattern that silently matches nothing) and its label key.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let selector = if let Some(site) = text.strip_prefix("site=") {
            Selector::Site(site.to_string())
        } else if let Some(label) = text.strip_prefix("label:") {
            let Some((key, value)) = label.split_once('=') else {
                return Err(format!(
                    "`{text}` names no value: write label:KEY=GLOB, such as label:zone=eu or label:zone=* for any value"
                ));
            };
            if let Some(why) = crate::placement::qualified_name_problem(key) {
                return Err(format!("`{text}`: the label key `{key}` {why}"));
            }
            Selector::Label {
                key: key.to_string(),
                value: value.to_string(),
            }
        } else {
            Selector::Name(text.to_string())
        };
        let glob = selector.glob();
        match glob::Pattern::new(glob) {
            Ok(_) => Ok(selector),
            Err(err) => Err(format!(
                "`{glob}` is not a valid glob: {} at character {}. Use *, ?, [abc], [a-z] or [!abc]; write [*], [?] or [[] for the character itself",
                err.msg,
                err.pos + 1
            )),
        }
    }

    /// The glob the selector matches its value with.
    pub fn glob(&self) -> &str {
        match self {
            Selector::Name(glob) | Selector::Site(glob) => glob,
            Selector::Label { value, .. } => value,
        }
    }

    /// An empty name glob: what `--only a,,b` leaves between its commas.
    pub fn is_empty(&self) -> bool {
        matches!(self, Selector::Name(glob) if glob.is_empty())
    }
}

impl std::fmt::Display for Selector {
    /// As it was written.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Name(glob) => f.write_str(glob),
            Selector::Site(glob) => write!(f, "site={glob}"),
            Selector::Label { key, value } => write!(f, "label:{key}={value}"),
        }
    }
}

/// `batch status -c FILE`: each selected node asked, read-only, what it runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusOptions {
    pub config: PathBuf,
    /// `--only`, as a run reads it.
    pub only: Vec<Selector>,
    /// As a run's: the flag, then the config's, then accept-new.
    pub host_key_policy: Option<HostKeyPolicy>,
    pub known_hosts: Option<PathBuf>,
    /// `--kubeconfig FILE`, as a run's: the Nodes' Ready state and age come from it.
    pub kubeconfig: Option<PathBuf>,
    /// `--context NAME`, as a run's.
    pub context: Option<String>,
    pub output: OutputFormat,
    /// `--cert-warn-days`: a node whose edge certificate expires within this many days
    /// (or has expired) is warned about.
    pub cert_warn_days: u32,
}

/// How many days before its edge certificate expires a node is warned about by default.
pub const DEFAULT_CERT_WARN_DAYS: u32 = 30;

impl StatusOptions {
    /// The run options whose plan `batch status` connects with: the same selection,
    /// host-key policy and known-hosts file as a run of the same config and flags, so a
    /// status never checks host keys less than the run would.
    pub fn as_run(&self) -> RunOptions {
        RunOptions {
            config: self.config.clone(),
            only: self.only.clone(),
            host_key_policy: self.host_key_policy,
            known_hosts: self.known_hosts.clone(),
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            output: self.output,
            ..RunOptions::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenConfigOptions {
    pub output: PathBuf,
    pub force: bool,
    /// `--from FILE`: the nodes come from this CSV file or Ansible inventory instead of
    /// the template's one example node.
    pub from: Option<PathBuf>,
    /// `--format`: how to read `from`; `None` to tell by its extension and content.
    pub format: Option<SourceFormat>,
    /// `--groups`: what an Ansible group is to its hosts.
    pub groups: GroupsAs,
}

/// The kinds of file `batch gen-config --from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// A header row, then a node per row.
    Csv,
    /// An Ansible inventory in its INI dialect.
    AnsibleIni,
    /// An Ansible inventory in YAML.
    AnsibleYaml,
}

/// What an Ansible inventory's groups become in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupsAs {
    /// The group that lists a host is its `site`.
    #[default]
    Site,
    /// Every group a host is in is a label `<group>: "true"`.
    Labels,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verbosity {
    Quiet,
    #[default]
    Normal,
    Verbose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
    /// A run's and `batch merge`'s JUnit XML document on stdout (`--output junit`); the
    /// command line offers it to nothing else.
    Junit,
}

/// How pre-flight findings count (`--preflight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreflightMode {
    Off,
    /// Report findings and go on.
    #[default]
    Warn,
    /// A node with findings is skipped, untouched; a doomed batch does not start.
    Strict,
}

/// Whether nodes of one site fetch payloads from each other (`--relay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelayMode {
    /// Every node gets every payload from the control host.
    Off,
    /// Nodes of a site with two or more nodes fetch from a node of the site that has it.
    #[default]
    Auto,
}

/// A number of nodes, or a share in percent of some nodes (`--wave`, `--max-fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Nodes(usize),
    Percent(u8),
}

impl std::fmt::Display for Amount {
    /// As the command line spells it: `5`, `20%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Nodes(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A shard `index` of `count` (1-based index), from `--shard I/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl std::fmt::Display for Shard {
    /// `2/4 (the nodes whose sha256(nodeName) mod 4 is 1)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} (the nodes whose sha256(nodeName) mod {} is {})",
            self.index,
            self.count,
            self.count,
            self.index - 1
        )
    }
}

/// `--ready-timeout`'s default (the command line says `300s`), which the recap's next
/// command leaves out.
pub const DEFAULT_READY_TIMEOUT_SECS: u64 = 300;
/// `--drain-timeout`'s default (the command line says `5m`), likewise.
pub const DEFAULT_DRAIN_TIMEOUT_SECS: u64 = 300;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunOptions {
    pub config: PathBuf,
    pub dry_run: bool,
    // Selection.
    pub only: Vec<Selector>,
    pub shard: Option<Shard>,
    pub retry_failed: bool,
    pub class: Option<FailureClass>,
    // Policy: each overrides the config file.
    pub max_run_num: Option<usize>,
    /// `--handshakes-per-host`: at most this many SSH handshakes in flight to one sshd.
    pub handshakes_per_host: Option<usize>,
    /// `--max-fail N|P%`: the most nodes of each wave that may not succeed.
    pub max_fail: Option<Amount>,
    pub canary: Option<usize>,
    /// `--wave N|P%`: the size of each wave, a count or a share of the selected nodes.
    pub wave: Option<Amount>,
    /// `--wave-pause DURATION`: the wait between waves.
    pub wave_pause: Option<std::time::Duration>,
    pub timeout_seconds: Option<u64>,
    /// `--kill-grace SECONDS`: how long a command past its deadline has after SIGTERM
    /// before SIGKILL (`None`: the default, 10 s).
    pub kill_grace_seconds: Option<u64>,
    pub connect_timeout_seconds: Option<u64>,
    /// `--jump-connections N`: the shared connections per jump host (`None`: 1).
    pub jump_connections: Option<usize>,
    pub host_key_policy: Option<HostKeyPolicy>,
    pub known_hosts: Option<PathBuf>,
    /// Use a package with neither a checksum file nor a pin, marked unverified.
    pub allow_unverified: bool,
    /// Download arches without a pin from an `http://` `keadm.download.url`.
    pub insecure_http: bool,
    /// The largest download and unpacked package, in bytes; `None` is the default.
    pub max_package_bytes: Option<u64>,
    pub preflight: PreflightMode,
    pub relay: RelayMode,
    pub preflight_only: bool,
    pub reset_first: bool,
    /// `--backup`: `keadm backup edge` before each `keadm upgrade edge`; a failed backup
    /// stops that node before anything changes.
    pub backup: bool,
    /// `--rollback-on-failure`: `keadm rollback edge` on a node whose upgrade, report,
    /// version check or Ready gate failed.
    pub rollback_on_failure: bool,
    pub verify_remote: bool,
    // The cluster.
    /// `--kubeconfig FILE`: the cluster joins are verified in, over the config's
    /// `kubeconfig` and `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context NAME`: the kubeconfig's context to use instead of its current one.
    pub context: Option<String>,
    /// `--no-cluster`: no kubeconfig is read, not even `KUBECONFIG` or the config's.
    pub no_cluster: bool,
    /// `--ready-timeout DURATION`: how long after keadm's exit a joined node may take to be
    /// registered and Ready.
    pub ready_timeout_seconds: u64,
    /// `--no-wait`: with a kubeconfig, do not wait for joined nodes to be Ready.
    pub no_wait: bool,
    /// `--delete-nodes`: after a reset verified clean, delete its Node from the cluster.
    pub delete_nodes: bool,
    /// `--drain` with `--drain-timeout`: each node whose command is not a join is
    /// cordoned and drained (within the timeout) before it runs, and uncordoned once it
    /// succeeded.
    pub drain: Option<std::time::Duration>,
    /// `--token-from-cluster`: every join's token is read from the cluster, as
    /// `keadm gettoken` reads it, whatever its keadmCmd says.
    pub token_from_cluster: bool,
    /// `--cloud-node-limit N`: the most edge nodes the cloud serves in all, over what the
    /// cluster's cloudcore ConfigMap and Deployment say.
    pub cloud_node_limit: Option<u64>,
    /// `--joins-in-flight N`: the most joins between their start and their Node's Ready
    /// at once (`None`: the default, `pace::DEFAULT_JOINS_IN_FLIGHT`).
    pub joins_in_flight: Option<usize>,
    // Places.
    pub staging_dir: Option<PathBuf>,
    pub run_dir: Option<PathBuf>,
    // Output.
    pub output: OutputFormat,
    /// `--junit FILE`: the run's JUnit XML document, written there after the run.
    pub junit: Option<PathBuf>,
    /// `--metrics FILE`: the run in Prometheus' text format, written at its end.
    pub metrics: Option<PathBuf>,
    pub verbosity: Verbosity,
}
