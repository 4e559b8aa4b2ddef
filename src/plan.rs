//! Config + options -> what will happen to each selected node: resolved address, auth,
//! directories, the exact remote command, deadlines and the secrets to mask. This is what
//! `--dry-run` prints and what the pool executes.

pub mod site_addresses;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::arch::Arch;
use crate::config::{
    Config, CopyFile, HostKeyPolicy, NodeSpec, PackageMode, PinnedDigest, SshSpec,
};
use crate::image_ref::ImageRef;
use crate::keadm_cmd::{EdgeTask, KeadmCommand};
use crate::options::{RelayMode, RunOptions, Selector, Shard};
use crate::placement::Placement;
use crate::redact::Redactor;
use crate::shell::shell_quote;
use crate::stage::{ImageSources, Meters, PackageSource, Pin, StageSettings};

/// keadm's BASE: where keadm batch uploads files and keadm on every node.
pub const REMOTE_BASE_DIR: &str = crate::config::model::DEFAULT_REMOTE_DIR;

/// Default deadlines (docs/config.md, "Placement and precedence").
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
/// `--kill-grace`'s default: time for keadm and the scripts it runs to clean up.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
pub const DEFAULT_RETRIES: u32 = 2;
/// Shared SSH connections per jump host: one authentication on the bastion (see
/// docs/architecture.md, "The jump hub", for why one driver thread is enough).
pub const DEFAULT_JUMP_CONNECTIONS: usize = 1;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadlines {
    /// TCP connect, handshake and authentication together.
    pub connect: Duration,
    /// Each preparatory step (mkdir, checks, `uname -m`).
    pub step: Duration,
    /// An upload: this base plus [`Deadlines::upload_per_mib`] per MiB.
    pub upload_base: Duration,
    pub upload_per_mib: Duration,
    /// The keadm command.
    pub command: Duration,
    /// After the command's deadline, how long its process group has between SIGTERM and
    /// SIGKILL: `--kill-grace`, at most `command`, so that a deadline never takes more
    /// than twice what the operator set.
    pub kill_grace: Duration,
}

impl Deadlines {
    pub fn upload(&self, bytes: u64) -> Duration {
        self.upload_base + self.upload_per_mib * (bytes.div_ceil(1 << 20) as u32)
    }
}

/// Where the node's keadm binary comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum KeadmSource {
    /// The staged binary for the arch the node reports.
    Staged,
    /// Already on the node in this directory (keadmBinDir): nothing uploaded.
    OnNode(String),
}

#[derive(Debug, Clone)]
pub struct NodePlan {
    pub index: usize,
    pub name: String,
    pub ssh: SshSpec,
    pub host_key_policy: HostKeyPolicy,
    /// Each jump host's policy, the nearest first (empty without a jump host).
    pub jump_host_key_policies: Vec<HostKeyPolicy>,
    /// Whether the remote command runs under `sudo -S -p '' sh -c`.
    pub sudo: bool,
    pub copy_files: Vec<CopyFile>,
    pub copy_from: Option<PathBuf>,
    pub keadm: KeadmSource,
    /// Where copyFrom files and keadm are uploaded.
    pub upload_dir: String,
    /// Where the command runs (keadmBinDir, else the upload dir), as in keadm.
    pub exec_dir: String,
    /// keadmCmd, rendered.
    pub keadm_cmd: String,
    /// keadmCmd as keadm reads it.
    pub keadm_args: KeadmCommand,
    /// `cd <dir> && ./keadm <cmd>` (with `yes |` for reset), before any sudo wrapping.
    pub command: String,
    /// `--reset-first`'s reset before a join, `--backup`'s backup before an upgrade: run
    /// before [`NodePlan::command`], which then runs only if it exited with 0.
    pub first_step: Option<FirstStep>,
    /// For the edge's upgrade family (`upgrade edge`, `backup edge`, `rollback edge`,
    /// `config-update`): what is checked on the node after keadm, and the way back.
    pub edge_task: Option<EdgeTaskPlan>,
    pub deadlines: Deadlines,
    pub retries: u32,
    /// Masks this node's secrets (and `--token` values) in everything written about it.
    pub redactor: Arc<Redactor>,
    /// The site the node belongs to, if any.
    pub site: Option<Site>,
    /// The labels and taints a join gives the node's Node, and the Ready gate checks.
    pub placement: Placement,
}

/// A step before the node's command (see [`NodePlan::first_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstStep {
    pub kind: FirstStepKind,
    /// `cd <dir> && ./keadm reset edge --force`, `cd <dir> && ... ./keadm backup edge`.
    pub command: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstStepKind {
    /// `--reset-first`, before a join.
    Reset,
    /// `--backup`, before an upgrade.
    Backup,
}

impl FirstStepKind {
    /// The step as the operator would type it; also the name on its status line
    /// (`remote::first_then`).
    pub fn what(self) -> &'static str {
        match self {
            FirstStepKind::Reset => "keadm reset edge --force",
            FirstStepKind::Backup => "keadm backup edge",
        }
    }

    /// The flag that asked for it.
    pub fn flag(self) -> &'static str {
        match self {
            FirstStepKind::Reset => "--reset-first",
            FirstStepKind::Backup => "--backup",
        }
    }
}

/// What the run knows of a node's upgrade-family command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeTaskPlan {
    pub task: EdgeTask,
    /// For an upgrade: the version it goes to, `--toVersion`; `None` without it (keadm
    /// then goes to a default built into its source, v1.23.1's being 1.23.0), and the
    /// report's `toVersion` is what the running edgecore is checked against.
    pub target_version: Option<String>,
    /// With `--rollback-on-failure` (upgrades): `cd <dir> && rm -f <report> && yes |
    /// ./keadm rollback edge`, to which the run adds `--historical-version` when it knows
    /// the version the node ran before.
    pub rollback: Option<String>,
}

/// Nodes that share a network and one uplink: `site:` in the config, else the nodes
/// behind one proxyJump host. Nodes of a site can fetch payloads from each other.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    /// `site:` in the config.
    Named(String),
    /// No `site:`, but a proxyJump host (`host:port`): the nodes behind one bastion.
    Behind(String),
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Named(name) => f.write_str(name),
            Site::Behind(jump) => write!(f, "behind {jump}"),
        }
    }
}

impl Site {
    /// The node's site: its `site:`, else its proxyJump host.
    fn of(node: &NodeSpec) -> Option<Site> {
        if let Some(name) = &node.site {
            return Some(Site::Named(name.clone()));
        }
        let jump = node.ssh.proxy_jump.as_ref()?;
        Some(Site::Behind(display_address(&jump.host, jump.port)))
    }
}

/// The sites of `nodes` that have two or more nodes, in the order of their first node,
/// each with its nodes' positions in `nodes` in config order (the order they seed in).
pub fn sites(nodes: &[NodePlan]) -> Vec<(&Site, Vec<usize>)> {
    let mut sites: Vec<(&Site, Vec<usize>)> = Vec::new();
    for (position, node) in nodes.iter().enumerate() {
        let Some(site) = &node.site else { continue };
        match sites.iter_mut().find(|(s, _)| *s == site) {
            Some((_, members)) => members.push(position),
            None => sites.push((site, vec![position])),
        }
    }
    sites.retain(|(_, members)| members.len() > 1);
    sites
}

impl NodePlan {
    /// Puts `token` (read from the cluster) into this join's keadmCmd, as a `--token` at
    /// its end (pflag's last value wins over an empty or stale one), and masks it in
    /// everything written about the node. `Err` with the rendered keadmCmd when keadm
    /// would not read it there (keadmCmd goes on after the keadm part: `... && echo`).
    pub fn put_token(&mut self, token: &str) -> Result<(), String> {
        let keadm_cmd = format!("{} --token={}", self.keadm_cmd, shell_quote(token));
        let keadm_args = KeadmCommand::parse(&keadm_cmd);
        if keadm_args.token() != Some(token) {
            return Err(self.redactor.redact(&self.keadm_cmd));
        }
        let mut redactor = Redactor::clone(&self.redactor);
        redactor.add(&crate::redact::Secret::new(token));
        self.command = keadm_command(&self.exec_dir, &keadm_cmd);
        self.keadm_cmd = keadm_cmd;
        self.keadm_args = keadm_args;
        self.redactor = Arc::new(redactor);
        Ok(())
    }

    /// `host:port`, with IPv6 literals in brackets.
    pub fn address(&self) -> String {
        display_address(&self.ssh.host, self.ssh.port)
    }
}

pub fn display_address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub config_path: PathBuf,
    pub max_run_num: usize,
    /// At most this many SSH handshakes in flight to one sshd (`transport::pace`).
    pub handshakes_per_host: usize,
    pub known_hosts: PathBuf,
    /// The shared connections per jump host (`--jump-connections`).
    pub jump_connections: usize,
    pub nodes: Vec<NodePlan>,
    /// How many nodes the config lists, before selection.
    pub total_in_config: usize,
    /// `--shard I/N`, when this run processes one shard.
    pub shard: Option<Shard>,
    pub staging: Option<StagingPlan>,
    /// Where the offline image archives come from, when some selected node joins:
    /// `keadm.offlineImages`, else in offline mode the offline directory's layout.
    pub offline_images: Option<ImageSources>,
    /// `keadm.extraImages`: the site's own images, which the pre-flight image check
    /// expects on join nodes besides keadm's when offline images are in play.
    pub extra_images: Vec<ImageRef>,
    /// `--relay`.
    pub relay: RelayMode,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StagingPlan {
    pub version: String,
    pub mode: PackageMode,
    /// `keadm.archGroup`: the arches staged up front.
    pub arch_group: Vec<Arch>,
    pub base_dir: PathBuf,
    /// `keadm.download.sha512`.
    pub pins: BTreeMap<Arch, PinnedDigest>,
    /// `--allow-unverified`.
    pub allow_unverified: bool,
    /// `--insecure-http`.
    pub insecure_http: bool,
    /// `--max-package-bytes`, or the default.
    pub max_package_bytes: u64,
}

impl StagingPlan {
    /// The stager's settings for this plan: the one conversion, used for the checks before
    /// the run and for the run itself. `config_path` names the file the pins came from;
    /// `progress` is where downloads say how far they are.
    pub fn stage_settings(&self, config_path: &Path, progress: Meters) -> StageSettings {
        let source = match &self.mode {
            PackageMode::Download { url } => PackageSource::Download { url: url.clone() },
            PackageMode::Offline { dir } => PackageSource::Offline { dir: dir.clone() },
        };
        let mut settings = StageSettings::new(self.version.clone(), source);
        settings.base_dir = self.base_dir.clone();
        settings.arch_group = self.arch_group.clone();
        settings.pins = self
            .pins
            .iter()
            .map(|(arch, pin)| {
                let pin = Pin {
                    digest: pin.digest.clone(),
                    source: format!(
                        "keadm.download.sha512.{arch} ({}:{})",
                        config_path.display(),
                        pin.pos
                    ),
                };
                (*arch, pin)
            })
            .collect();
        settings.allow_unverified = self.allow_unverified;
        settings.insecure_http = self.insecure_http;
        settings.max_package_bytes = self.max_package_bytes;
        settings.progress = progress;
        settings
    }
}

/// Why no plan could be made from a valid config and these options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// No node matches any `--only` selector.
    #[error(
        "--only {} matches no node in the config, so nothing was run. Check the selectors against the config's nodeName values, sites (site=GLOB) and labels (label:KEY=GLOB; globs: *, ?, [abc], [a-z], [!abc]).",
        .patterns.join(",")
    )]
    OnlyMatchesNothing { patterns: Vec<String> },
}

/// Builds the plan. `home` resolves the default known-hosts file.
pub fn build(
    config: &Config,
    options: &RunOptions,
    home: Option<PathBuf>,
    default_base: PathBuf,
    retry: Option<&HashSet<String>>,
) -> Result<Plan, SelectionError> {
    let mut selected = select(&config.nodes, &options.only, options.shard)?;
    if let Some(retry) = retry {
        selected.retain(|n| retry.contains(&n.name));
    }
    let nodes: Vec<NodePlan> = selected
        .into_iter()
        .map(|node| node_plan(config, options, node))
        .collect();
    let staging = config
        .keadm_version
        .as_ref()
        .filter(|_| nodes.iter().any(|n| n.keadm == KeadmSource::Staged))
        .map(|version| StagingPlan {
            version: version.clone(),
            mode: config.package_mode.clone(),
            // Validation has refused any name that is not a release arch.
            arch_group: config
                .arch_group
                .iter()
                .filter_map(|name| Arch::from_name(name))
                .collect(),
            base_dir: options.staging_dir.clone().unwrap_or(default_base),
            pins: config.sha512_pins.clone(),
            allow_unverified: options.allow_unverified,
            insecure_http: options.insecure_http,
            max_package_bytes: options
                .max_package_bytes
                .unwrap_or(crate::stage::DEFAULT_MAX_PACKAGE_BYTES),
        });
    let upgrades = nodes.iter().any(|n| n.keadm_args.is_edge_upgrade());
    if let Some(node) = nodes
        .iter()
        .find(|n| n.keadm_args.is_edge_upgrade() && n.keadm_args.value("toVersion").is_none())
    {
        log::warn!(
            "The keadmCmd of node {} runs `keadm upgrade edge` without --toVersion: keadm then upgrades to a version built into it, its minor release's first (1.23.0 for keadm v1.23.1), not its own version. Pass --toVersion=vX.Y.Z to say which; the run checks each node against what keadm's report says.",
            node.name
        );
    }
    for (given, flag) in [
        (options.backup, "--backup"),
        (options.rollback_on_failure, "--rollback-on-failure"),
    ] {
        if given && !upgrades {
            log::warn!(
                "{flag} applies to `keadm upgrade edge`, and no selected node's keadmCmd is one: it does nothing in this run."
            );
        }
    }
    let offline_images = offline_images(config).filter(|_| {
        nodes
            .iter()
            .any(|n| n.keadm_args.is_join() || n.keadm_args.is_edge_upgrade())
    });
    let known_hosts = options.known_hosts.clone().unwrap_or_else(|| {
        home.unwrap_or_else(|| PathBuf::from("/root"))
            .join(".ssh")
            .join("known_hosts")
    });
    Ok(Plan {
        config_path: config.path.clone(),
        max_run_num: options.max_run_num.unwrap_or(config.max_run_num),
        handshakes_per_host: options
            .handshakes_per_host
            .unwrap_or(crate::transport::DEFAULT_HANDSHAKES_PER_HOST),
        known_hosts,
        jump_connections: options.jump_connections.unwrap_or(DEFAULT_JUMP_CONNECTIONS),
        nodes,
        total_in_config: config.nodes.len(),
        shard: options.shard,
        staging,
        offline_images,
        extra_images: config.extra_images.clone(),
        relay: options.relay,
    })
}

/// `keadm.offlineImages`, else in offline mode `<offlinePackageDir>/<arch>/images`.
fn offline_images(config: &Config) -> Option<ImageSources> {
    match (&config.offline_images, &config.package_mode) {
        (Some(paths), _) => Some(ImageSources::Listed {
            paths: paths.clone(),
        }),
        (None, PackageMode::Offline { dir }) if !dir.as_os_str().is_empty() => {
            Some(ImageSources::Layout { dir: dir.clone() })
        }
        (None, _) => None,
    }
}

fn node_plan(config: &Config, options: &RunOptions, node: &NodeSpec) -> NodePlan {
    let upload_dir = node
        .remote_dir
        .clone()
        .unwrap_or_else(|| REMOTE_BASE_DIR.to_string());
    let keadm = match &node.keadm_bin_dir {
        Some(dir) => KeadmSource::OnNode(dir.clone()),
        None => KeadmSource::Staged,
    };
    let exec_dir = match &keadm {
        KeadmSource::OnNode(dir) => dir.clone(),
        KeadmSource::Staged => upload_dir.clone(),
    };
    // A join carries the node's labels and taints as keadm's own flags: this is the one
    // place they enter its command line, and what the node runs is what the plan shows.
    let keadm_cmd = if node.keadm_args.is_join() {
        node.placement.into_join(&node.command)
    } else {
        node.command.clone()
    };
    let command = keadm_command(&exec_dir, &keadm_cmd);
    let in_dir = |cmd: &str| keadm_command(&exec_dir, cmd);
    // keadm's recommended clean-up of a failed join, before the join itself. A join on
    // top of a reset that failed would start from a state nobody checked, so the run
    // stops there and reports the reset's status (remote::first_then, docs/decisions.md).
    // A backup before an upgrade stops the node the same way: nothing has changed yet.
    let upgrade = node.keadm_args.is_edge_upgrade();
    let first_step = if options.reset_first && node.keadm_args.is_join() {
        Some(FirstStep {
            kind: FirstStepKind::Reset,
            command: format!(
                "cd {} && ./keadm reset edge --force",
                shell_quote(&exec_dir)
            ),
        })
    } else if options.backup && upgrade {
        Some(FirstStep {
            kind: FirstStepKind::Backup,
            command: in_dir("backup edge"),
        })
    } else {
        None
    };
    let edge_task = node.keadm_args.edge_task().map(|task| EdgeTaskPlan {
        task,
        // keadm's own default is a constant of its source, not its version (v1.23.1's is
        // 1.23.0): only `--toVersion` says the target; without it the report's does.
        target_version: upgrade
            .then(|| node.keadm_args.value("toVersion").map(str::to_string))
            .flatten(),
        rollback: (options.rollback_on_failure && upgrade).then(|| in_dir("rollback edge")),
    });
    let connect = options
        .connect_timeout_seconds
        .or(node.ssh.connect_timeout_seconds)
        .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs);
    let command_timeout = options
        .timeout_seconds
        .or(node.timeout_seconds)
        .map_or(DEFAULT_COMMAND_TIMEOUT, Duration::from_secs);
    // The node's secrets include its join token (read in every spelling at validation):
    // edgecore's log quotes it bare when it is malformed.
    let mut redactor = Redactor::new();
    redactor.extend(&node.secrets);
    NodePlan {
        index: node.index,
        name: node.name.clone(),
        ssh: node.ssh.clone(),
        host_key_policy: options
            .host_key_policy
            .or(node.ssh.host_key_policy)
            .or(config.host_key_policy)
            .unwrap_or(HostKeyPolicy::AcceptNew),
        // The flag, then the jump host's own setting, then the file's default (which
        // validation already put in the jump host's spec): a file default never
        // overrules the operator's command line for the bastion either.
        jump_host_key_policies: std::iter::successors(node.ssh.proxy_jump.as_deref(), |jump| {
            jump.proxy_jump.as_deref()
        })
        .map(|jump| {
            options
                .host_key_policy
                .or(jump.host_key_policy)
                .unwrap_or(HostKeyPolicy::AcceptNew)
        })
        .collect(),
        // Non-root logins need root for keadm; root needs no sudo.
        sudo: node.ssh.sudo.unwrap_or(node.ssh.username != "root"),
        copy_files: node.copy_files.clone(),
        copy_from: node.copy_from.clone(),
        keadm,
        upload_dir,
        exec_dir,
        keadm_cmd,
        keadm_args: node.keadm_args.clone(),
        command,
        first_step,
        edge_task,
        deadlines: Deadlines {
            connect,
            step: DEFAULT_STEP_TIMEOUT,
            upload_base: Duration::from_secs(60),
            upload_per_mib: Duration::from_secs(1),
            command: command_timeout,
            kill_grace: options
                .kill_grace_seconds
                .map_or(DEFAULT_KILL_GRACE, Duration::from_secs)
                .min(command_timeout),
        },
        retries: node.retries.unwrap_or(DEFAULT_RETRIES),
        redactor: Arc::new(redactor),
        site: Site::of(node),
        placement: if node.keadm_args.is_join() {
            node.placement.clone()
        } else {
            Placement::default()
        },
    }
}

/// keadm's command line: `cd <dir> && ./keadm <cmd>`, with `yes |` in front of a `reset`
/// so its confirmation prompt is answered. The edge's upgrade family also gets `yes |`
/// (`upgrade edge` asks `[y/N]` unless `--force`, and on no answer exits 0 having done
/// nothing), after the removal of the report file it writes, so the report read after it
/// is its own (remote::edge_task).
pub fn keadm_command(dir: &str, cmd: &str) -> String {
    let first = cmd.split_whitespace().next().unwrap_or("");
    if first == "reset" {
        format!("cd {} && yes | ./keadm {cmd}", shell_quote(dir))
    } else if KeadmCommand::parse(cmd).edge_task().is_some() {
        format!(
            "cd {} && {} && yes | ./keadm {cmd}",
            shell_quote(dir),
            crate::remote::REMOVE_REPORT
        )
    } else {
        format!("cd {} && ./keadm {cmd}", shell_quote(dir))
    }
}

fn select<'c>(
    nodes: &'c [NodeSpec],
    only: &[Selector],
    shard: Option<Shard>,
) -> Result<Vec<&'c NodeSpec>, SelectionError> {
    let mut selected: Vec<&NodeSpec> = nodes
        .iter()
        .filter(|n| only.is_empty() || only.iter().any(|selector| selects(selector, n)))
        .collect();
    if selected.is_empty() && !only.is_empty() {
        return Err(SelectionError::OnlyMatchesNothing {
            patterns: only.iter().map(Selector::to_string).collect(),
        });
    }
    if let Some(shard) = shard {
        selected.retain(|n| shard_of(&n.name, shard.count) == shard.index);
    }
    Ok(selected)
}

/// The 1-based shard a node belongs to: the first 8 bytes of sha256(nodeName), as a
/// big-endian u64, mod N, plus one. Stable whatever the order of the file.
pub fn shard_of(name: &str, count: u64) -> u64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % count + 1
}

/// Whether the `--only` selector picks `node`: its glob against the node's name, its
/// site, or its label's value (the labels the config gives it, which are what its Node
/// should have). A node without a site or without the label is not picked by one.
fn selects(selector: &Selector, node: &NodeSpec) -> bool {
    let value = match selector {
        Selector::Name(_) => Some(node.name.as_str()),
        Selector::Site(_) => node.site.as_deref(),
        Selector::Label { key, .. } => node.placement.labels.get(key).map(String::as_str),
    };
    value.is_some_and(|value| glob_match(selector.glob(), value))
}

/// Whether `name` matches the `--only` glob `pattern` (the `glob` crate's syntax: `*` any
/// run of characters, `?` any one, `[abc]`, `[a-z]` and `[!abc]` sets; `[*]` matches a
/// literal `*`). The command line has refused invalid patterns already; one that slipped
/// through matches nothing.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    glob::Pattern::new(pattern).is_ok_and(|p| p.matches(name))
}

/// A plain node for unit tests elsewhere: root over the agent at 127.0.0.1:22, a staged
/// keadm that joins from /tmp/x, one-second deadlines, no retries. Tests change the fields
/// their case is about.
#[cfg(test)]
impl NodePlan {
    pub(crate) fn sample(index: usize) -> NodePlan {
        use crate::config::{AuthSpec, SshSpec};
        NodePlan {
            index,
            name: format!("n{index}"),
            ssh: SshSpec {
                host: "127.0.0.1".into(),
                port: 22,
                username: "root".into(),
                auth: AuthSpec::Agent,
                connect_timeout_seconds: None,
                host_key_policy: None,
                sudo: None,
                proxy_jump: None,
            },
            host_key_policy: HostKeyPolicy::AcceptNew,
            jump_host_key_policies: Vec::new(),
            sudo: false,
            copy_files: vec![],
            copy_from: None,
            keadm: KeadmSource::Staged,
            upload_dir: "/tmp/x".into(),
            exec_dir: "/tmp/x".into(),
            keadm_cmd: "join".into(),
            keadm_args: KeadmCommand::parse("join"),
            command: "cd /tmp/x && ./keadm join".into(),
            first_step: None,
            edge_task: None,
            deadlines: Deadlines {
                connect: Duration::from_secs(1),
                step: Duration::from_secs(1),
                upload_base: Duration::from_secs(1),
                upload_per_mib: Duration::from_secs(1),
                command: Duration::from_secs(1),
                kill_grace: Duration::from_secs(1),
            },
            retries: 0,
            redactor: Arc::new(Redactor::new()),
            site: None,
            placement: Placement::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clusters_token_goes_last_in_keadm_cmd_and_is_masked() {
        let mut node = NodePlan::sample(0);
        node.keadm_cmd = "join --cloudcore-ipport=192.0.2.1:10000 --token=".into();
        node.put_token("aaaa.bbbb.cccc.dddd").unwrap();
        assert_eq!(node.keadm_args.token(), Some("aaaa.bbbb.cccc.dddd"));
        assert_eq!(
            node.command,
            "cd /tmp/x && ./keadm join --cloudcore-ipport=192.0.2.1:10000 --token= --token=aaaa.bbbb.cccc.dddd"
        );
        assert!(
            !node
                .redactor
                .redact("edgecore: aaaa.bbbb.cccc.dddd")
                .contains("aaaa")
        );
        // A keadmCmd that goes on after the keadm part would not hand keadm the token.
        let mut node = NodePlan::sample(0);
        node.keadm_cmd = "join --token= && echo done".into();
        let before = node.command.clone();
        assert_eq!(
            node.put_token("aaaa.bbbb.cccc.dddd"),
            Err("join --token= && echo done".into())
        );
        assert_eq!(node.command, before, "the plan is left as it was");
    }

    #[test]
    fn commands_match_keadm() {
        assert_eq!(
            keadm_command("/tmp/kubeedge/keadm", "join --x=1"),
            "cd /tmp/kubeedge/keadm && ./keadm join --x=1"
        );
        assert_eq!(
            keadm_command("/tmp/kubeedge/keadm", "reset edge --force"),
            "cd /tmp/kubeedge/keadm && yes | ./keadm reset edge --force"
        );
        assert_eq!(
            keadm_command("/opt/my dir", "x"),
            "cd '/opt/my dir' && ./keadm x"
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("edge-*", "edge-12"));
        assert!(glob_match("e?ge-1", "edge-1"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("edge-*", "core-1"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        // Sets, ranges and negated sets, as docs/config.md and --help promise.
        assert!(glob_match("edge-[ab]1", "edge-b1"));
        assert!(!glob_match("edge-[ab]1", "edge-c1"));
        assert!(glob_match("edge-[0-4]*", "edge-3x"));
        assert!(glob_match("edge-[!0-4]", "edge-7"));
        assert!(!glob_match("edge-[!0-4]", "edge-2"));
        assert!(glob_match("a[*]", "a*"));
        assert!(!glob_match("a[*]", "ab"));
        assert!(
            !glob_match("edge-[", "edge-["),
            "an invalid pattern matches nothing"
        );
    }

    #[test]
    fn shards_are_stable_and_cover_everything() {
        let names: Vec<String> = (0..1000).map(|i| format!("edge-{i}")).collect();
        let mut counts = [0; 4];
        for name in &names {
            let s = shard_of(name, 4);
            assert_eq!(s, shard_of(name, 4));
            counts[(s - 1) as usize] += 1;
        }
        assert_eq!(counts.iter().sum::<i32>(), 1000);
        assert!(counts.iter().all(|c| *c > 150), "{counts:?}");
    }

    #[test]
    fn ipv6_addresses_get_brackets() {
        assert_eq!(display_address("::1", 22), "[::1]:22");
        assert_eq!(display_address("10.0.0.1", 2222), "10.0.0.1:2222");
    }
}
