//! One `nodes` item into a [`NodeSpec`]: its name, its rendered keadmCmd (read once as
//! keadm reads it), its copyFrom files, its overrides of the run-wide defaults and its ssh
//! block; plus the checks across nodes (unique names, edge node names and addresses).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::placement::Placements;
use super::validator::Validator;
use crate::arch::Arch;
use crate::config::diagnostic::Diagnostic;
use crate::config::environment::Environment;
use crate::config::model::{CopyFile, DEFAULT_REMOTE_DIR, HostKeyPolicy, NodeSpec, SshSpec};
use crate::config::schema::{RawConfig, RawNode, Spanned, non_empty};
use crate::config::template::{self, Lookup};
use crate::keadm_cmd::KeadmCommand;
use crate::node_text::escape_controls;
use crate::redact::Secret;

/// The run-wide values a node inherits when it does not set its own.
pub(super) struct Defaults {
    pub(super) host_key_policy: Option<HostKeyPolicy>,
    pub(super) timeout_seconds: Option<u64>,
    pub(super) connect_timeout_seconds: Option<u64>,
    pub(super) retries: Option<u32>,
    pub(super) remote_dir: Option<String>,
    pub(super) keadm_bin_dir: Option<String>,
    pub(super) site: Option<String>,
    /// `keadm.keadmVersion`'s major and minor numbers, where it reads as a release.
    pub(super) keadm_release: Option<(u32, u32)>,
    /// Whether joins and upgrades get offline image archives uploaded into their
    /// remoteDir (keadmBinDir or not): `keadm.offlineImages` lists some, or in offline
    /// mode the offline directory has an `<arch>/images`.
    pub(super) image_archives: bool,
    /// The labels and taints of every node and of each site.
    pub(super) placements: Placements,
}

impl Defaults {
    /// The top-level extensions and `keadm.keadmBinDir`, checked.
    pub(super) fn read(v: &mut Validator, raw: &RawConfig) -> Defaults {
        Defaults {
            host_key_policy: v.policy(&raw.host_key_policy, None),
            timeout_seconds: v.seconds(&raw.timeout_seconds, "timeoutSeconds", None),
            connect_timeout_seconds: v.seconds(
                &raw.connect_timeout_seconds,
                "connectTimeoutSeconds",
                None,
            ),
            retries: v.retries(&raw.retries, None),
            remote_dir: v.remote_dir(&raw.remote_dir, None),
            keadm_bin_dir: non_empty(&raw.keadm.keadm_bin_dir).map(|s| s.value.clone()),
            site: v.site(&raw.site, None),
            keadm_release: raw
                .keadm
                .keadm_version
                .as_ref()
                .and_then(|version| crate::keadm_cmd::major_minor(version.value.trim())),
            image_archives: image_archives(v, raw),
            placements: Placements::read(v, raw),
        }
    }
}

/// See [`Defaults::image_archives`]. Only for the warning about nodes sharing a directory:
/// the archives themselves are checked and listed by staging.
fn image_archives(v: &Validator, raw: &RawConfig) -> bool {
    let keadm = &raw.keadm;
    if let Some(listed) = &keadm.offline_images {
        return listed.value.iter().any(|arch| !arch.paths.is_empty());
    }
    let offline = keadm.download_enable.as_ref().is_some_and(|e| !e.value);
    match non_empty(&keadm.offline_package_dir) {
        Some(dir) if offline => {
            let dir = v.local_path(&dir.value);
            Arch::ALL
                .iter()
                .any(|arch| dir.join(arch.as_str()).join("images").is_dir())
        }
        _ => false,
    }
}

/// What earlier nodes claimed, by node index: two nodes may share none of these names,
/// and two that upload into one directory on one host are worth a warning.
#[derive(Default)]
struct Claimed<'r> {
    node_names: HashMap<&'r str, usize>,
    edge_names: HashMap<String, usize>,
    /// Per host (its address, through its jump hosts), the nodes there that upload.
    hosts: HashMap<Vec<(String, u16)>, Vec<Uploader>>,
}

/// A node that uploads: its index, and its upload directory and where that came from.
struct Uploader {
    index: usize,
    dir: UploadDir,
}

/// A node's upload directory, spelt as the node's shell reaches it (`//` and `/./` fold),
/// and where it was set.
struct UploadDir {
    path: PathBuf,
    from: DirFrom,
}

/// Where a node's upload directory was set: the warning says so, since the fix differs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DirFrom {
    Node,
    TopLevel,
    Default,
}

impl DirFrom {
    fn said(self) -> &'static str {
        match self {
            DirFrom::Node => "its own remoteDir",
            DirFrom::TopLevel => "the top-level remoteDir",
            DirFrom::Default => "the default",
        }
    }
}

impl UploadDir {
    fn of(node: &RawNode, resolved: Option<&str>) -> UploadDir {
        let from = match (non_empty(&node.remote_dir), resolved) {
            (Some(_), _) => DirFrom::Node,
            (None, Some(_)) => DirFrom::TopLevel,
            (None, None) => DirFrom::Default,
        };
        let dir = resolved.unwrap_or(DEFAULT_REMOTE_DIR);
        UploadDir {
            path: std::path::Path::new(dir).components().collect(),
            from,
        }
    }
}

/// Every node of `raw` that is valid; the others are reported.
pub(super) fn nodes(v: &mut Validator, raw: &RawConfig, defaults: &Defaults) -> Vec<NodeSpec> {
    // The values templates see: cmdTplArgs as plain strings.
    let args: BTreeMap<String, String> = raw
        .keadm
        .cmd_tpl_args
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    let lookup = TemplateLookup {
        args: &args,
        env: v.env(),
    };
    let mut claimed = Claimed::default();
    raw.nodes
        .iter()
        .filter_map(|node| node_spec(v, node, defaults, &lookup, &mut claimed))
        .collect()
}

fn node_spec<'r>(
    v: &mut Validator,
    node: &'r RawNode,
    defaults: &Defaults,
    lookup: &TemplateLookup,
    claimed: &mut Claimed<'r>,
) -> Option<NodeSpec> {
    let subject = node.label();
    let subj = || Some(subject.clone());
    let name = node_name(v, node, &subject, claimed);
    let command = command(v, node, &subject, lookup);
    let keadm_args = KeadmCommand::parse(command.as_ref().map_or("", |c| c.text.as_str()));
    for flag in keadm_args.empty_flags() {
        v.warn(
            node.keadm_cmd.as_ref().map(|c| c.pos),
            subj(),
            format!("keadmCmd passes {flag}= with an empty value"),
            Some("fill in the value (an empty keadm.cmdTplArgs entry?)".into()),
        );
    }
    // A bare `reset` is a mistake only for a keadm that is known: one staged at
    // keadmVersion (a node's own keadmBinDir may hold any release).
    let staged = non_empty(&node.keadm_bin_dir).is_none() && defaults.keadm_bin_dir.is_none();
    if let Some(release @ (1, 22..) | release @ (2.., _)) = defaults
        .keadm_release
        .filter(|_| staged && keadm_args.is_bare_reset())
    {
        v.error(
            node.keadm_cmd.as_ref().map(|c| c.pos),
            subj(),
            format!(
                "keadmCmd runs `keadm reset` with no second word, which keadm v{}.{} no longer supports (since v1.22 it prints \"'keadm reset' is no longer supported after version v1.22\" and resets only where it finds edgecore running, leaving /etc/kubeedge on a node whose edgecore is stopped)",
                release.0, release.1
            ),
            "write `reset edge` for an edge node, as in `keadmCmd: reset edge --force`",
        );
    }
    let mut edge_name_ok = true;
    if let Some(edge_name) = keadm_args.edgenode_name().map(str::to_string)
        && let Some(first) = claimed.edge_names.insert(edge_name.clone(), node.index)
    {
        v.error(
            node.keadm_cmd.as_ref().map(|c| c.pos),
            subj(),
            format!("--edgenode-name={edge_name} is also used by node {}; both would register as one edge node", first + 1),
            "give every node its own --edgenode-name",
        );
        edge_name_ok = false;
    }
    let copy = non_empty(&node.copy_from).map(|field| copy_files(v, field, &subject));
    let timeout_seconds = v
        .seconds(&node.timeout_seconds, "timeoutSeconds", subj())
        .or(defaults.timeout_seconds);
    let retries = v.retries(&node.retries, subj()).or(defaults.retries);
    let site = v.site(&node.site, subj()).or_else(|| defaults.site.clone());
    let placement = defaults
        .placements
        .for_node(v, &node.placement, site.as_deref(), &subject)
        .filter(|p| {
            let rendered = command.as_ref().map_or("", |c| c.text.as_str());
            placement_fits(v, node, p, &keadm_args, rendered, &subject)
        });
    let remote_dir = v
        .remote_dir(&node.remote_dir, subj())
        .or_else(|| defaults.remote_dir.clone());
    let mut ssh = match &node.ssh {
        Some(raw_ssh) => v.ssh(raw_ssh, &subject, "ssh", defaults.host_key_policy)?,
        None => {
            v.error(
                Some(node.pos),
                subj(),
                "the node has no ssh block",
                "add `ssh:` with ip, username, port and auth",
            );
            return None;
        }
    };
    if ssh.connect_timeout_seconds.is_none() {
        ssh.connect_timeout_seconds = defaults.connect_timeout_seconds;
    }
    // Two nodes on one host clash only where both upload into the same directory: a node
    // with keadmBinDir sends nothing unless it has copyFrom files or image archives.
    let keadm_bin_dir = non_empty(&node.keadm_bin_dir)
        .map(|s| s.value.clone())
        .or_else(|| defaults.keadm_bin_dir.clone());
    let images = defaults.image_archives && (keadm_args.is_join() || keadm_args.is_edge_upgrade());
    if keadm_bin_dir.is_none() || copy.is_some() || images {
        let dir = UploadDir::of(node, remote_dir.as_deref());
        let here = claimed.hosts.entry(host_key(&ssh)).or_default();
        if let Some(first) = here.iter().find(|u| u.dir.path == dir.path) {
            let how = match (first.dir.from, dir.from) {
                (DirFrom::Default, DirFrom::Default) => {
                    "the default remoteDir: neither node sets one".to_string()
                }
                (DirFrom::TopLevel, DirFrom::TopLevel) => {
                    "the top-level remoteDir: neither node sets its own".to_string()
                }
                (DirFrom::Node, DirFrom::Node) => "each node's own remoteDir".to_string(),
                (theirs, ours) => format!(
                    "node {}'s as {}, this node's as {}",
                    first.index + 1,
                    theirs.said(),
                    ours.said()
                ),
            };
            let shown = dir.path.display();
            v.warn(
                node.ssh.as_ref().and_then(|s| s.ip.as_ref()).map(|ip| ip.pos),
                subj(),
                format!(
                    "{} is also node {}'s address, and both nodes upload into {shown} there ({how}), so one node's files can replace the other's while they run",
                    shown_host(&ssh),
                    first.index + 1
                ),
                Some(format!(
                    "give this node a remoteDir of its own, such as remoteDir: {}-{}, or remove the duplicate",
                    // `/` itself has no name to extend.
                    Some(shown.to_string())
                        .filter(|d| d != "/")
                        .unwrap_or_else(|| "/keadm-batch".to_string()),
                    node.index + 1
                )),
            );
        }
        here.push(Uploader {
            index: node.index,
            dir,
        });
    }
    // Every check has reported by now; a node with any problem is left out.
    let (name, command, placement) = (name?, command?, placement?);
    let (copy_from, copy_files) = match copy {
        Some(listed) => {
            let (dir, files) = listed?;
            (Some(dir), files)
        }
        None => (None, Vec::new()),
    };
    if !edge_name_ok {
        return None;
    }
    // The token is a secret in every spelling (`-t V` too), wherever it shows up.
    let mut secrets = command.secrets;
    secrets.extend(keadm_args.token().map(Secret::new));
    secrets.extend(ssh.secrets());
    Some(NodeSpec {
        index: node.index,
        name,
        command: command.text,
        keadm_args,
        secrets,
        copy_from,
        copy_files,
        keadm_bin_dir: non_empty(&node.keadm_bin_dir)
            .map(|s| s.value.clone())
            .or_else(|| defaults.keadm_bin_dir.clone()),
        remote_dir,
        timeout_seconds,
        retries,
        site,
        placement,
        ssh,
    })
}

/// Whether a join can carry the node's labels and taints: they go right after the
/// rendered keadmCmd's `join` (`Placement::into_join`), so it must start with it; and taints set there too
/// would share edgecore's list with the config's.
fn placement_fits(
    v: &mut Validator,
    node: &RawNode,
    placement: &crate::placement::Placement,
    keadm_args: &KeadmCommand,
    text: &str,
    subject: &str,
) -> bool {
    let pos = node.keadm_cmd.as_ref().map(|c| c.pos);
    let own = &node.placement;
    let has_own = !own.labels.is_empty() || !own.taints.is_empty();
    if has_own && !keadm_args.is_join() {
        v.warn(
            pos,
            Some(subject.to_string()),
            "the node has labels or taints of its own, but its keadmCmd is no join: only keadm join gives a Node its labels and taints, so they do nothing here",
            Some("remove them, or keep them for the node's next join".into()),
        );
    }
    if placement.is_empty() || !keadm_args.is_join() {
        return true;
    }
    // The one rule for where they go: a command they do not go into is refused.
    if placement.into_join(text) == text {
        v.error(
            pos,
            Some(subject.to_string()),
            "keadmCmd runs keadm join, but does not start with `join` and a blank, right after which the node's labels and taints go",
            "write keadmCmd with `join` first and keadm's flags after it, such as `join --cloudcore-ipport=...`",
        );
        return false;
    }
    if !placement.taints.is_empty() && text.to_ascii_lowercase().contains("registerwithtaints") {
        v.error(
            pos,
            Some(subject.to_string()),
            "keadmCmd sets registerWithTaints through --set, and the config gives the node taints too, which keadm would write into the same list",
            "give the taints in one place: move them from keadmCmd's --set into the config's `taints:`",
        );
        return false;
    }
    true
}

/// Which host a node is: its address and port, after those of the jump hosts it is
/// reached through (one private address is a host per site).
fn host_key(ssh: &SshSpec) -> Vec<(String, u16)> {
    let mut key = Vec::new();
    let mut hop = Some(ssh);
    while let Some(spec) = hop {
        key.push((spec.host.clone(), spec.port));
        hop = spec.proxy_jump.as_deref();
    }
    key
}

/// The node's address for messages, with the jump host it is reached through.
fn shown_host(ssh: &SshSpec) -> String {
    match &ssh.proxy_jump {
        Some(jump) => format!("{}:{} (through {})", ssh.host, ssh.port, shown_host(jump)),
        None => format!("{}:{}", ssh.host, ssh.port),
    }
}

/// What is wrong with a node name by the rules every name must pass. Results, transcripts
/// and keadm's one-line-per-node log are keyed by the name, and it is printed as it is, so
/// it must be there and hold no line break or terminal escape. `batch merge` holds the
/// names it reads from shard runs to the same rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    ControlCharacters,
}

impl NameProblem {
    /// The problem with `name`, if it has one.
    pub fn of(name: &str) -> Option<NameProblem> {
        if name.is_empty() {
            Some(NameProblem::Empty)
        } else if name.chars().any(char::is_control) {
            Some(NameProblem::ControlCharacters)
        } else {
            None
        }
    }

    /// What is wrong with `name`, to follow the field it came from: `is empty`, or the
    /// name (escaped, so the message itself stays one harmless line) and what it holds.
    pub fn describe(self, name: &str) -> String {
        match self {
            NameProblem::Empty => "is empty".to_string(),
            NameProblem::ControlCharacters => format!(
                "`{}` contains control characters (a line break or a terminal escape), which would forge lines in batch_process_log.txt and on the console",
                escape_controls(name)
            ),
        }
    }
}

/// `nodeName`: present, printable and unique, since results are keyed by it.
fn node_name<'r>(
    v: &mut Validator,
    node: &'r RawNode,
    subject: &str,
    claimed: &mut Claimed<'r>,
) -> Option<String> {
    let value = node.node_name.as_ref().map_or("", |n| n.value.as_str());
    if let Some(problem) = NameProblem::of(value) {
        let fix = match problem {
            NameProblem::Empty => {
                "give the node a unique nodeName: results and transcripts are keyed by it"
            }
            NameProblem::ControlCharacters => "write the name without them",
        };
        v.error(
            node.node_name.as_ref().map(|n| n.pos).or(Some(node.pos)),
            Some(subject.to_string()),
            format!("nodeName {}", problem.describe(value)),
            fix,
        );
        return None;
    }
    // Not empty, so present.
    let n = node.node_name.as_ref()?;
    // The name goes into the cluster's API paths (the Ready gate, --drain,
    // --delete-nodes) and is the Node name a join registers under.
    if let Some(why) = crate::kube_name::problem(&n.value) {
        v.error(
            Some(n.pos),
            Some(subject.to_string()),
            format!("nodeName `{}` is not a Node name: {why}", n.value),
            format!(
                "write the node's Node name as Kubernetes and edgecore take it ({}), such as `{}`",
                crate::kube_name::RULE,
                crate::kube_name::suggestion(&n.value)
            ),
        );
        return None;
    }
    if let Some(first) = claimed.node_names.insert(&n.value, node.index) {
        v.error(
            Some(n.pos),
            Some(subject.to_string()),
            format!(
                "nodeName `{}` is already used by node {}",
                n.value,
                first + 1
            ),
            "give every node a unique nodeName: results are keyed by it",
        );
        return None;
    }
    Some(n.value.clone())
}

/// `keadmCmd`, rendered: the shell text and the secrets `{{env}}` read into it.
fn command(
    v: &mut Validator,
    node: &RawNode,
    subject: &str,
    lookup: &TemplateLookup,
) -> Option<template::Rendered> {
    match &node.keadm_cmd {
        Some(cmd) if !cmd.value.trim().is_empty() => match template::render(&cmd.value, lookup) {
            Ok(rendered) => Some(rendered),
            Err(err) => {
                v.push(Diagnostic::error(
                    Some(cmd.pos),
                    Some(subject.to_string()),
                    format!("keadmCmd cannot be rendered: {}", err.message),
                    err.fix,
                ));
                None
            }
        },
        other => {
            v.error(
                other.as_ref().map(|c| c.pos).or(Some(node.pos)),
                Some(subject.to_string()),
                "keadmCmd is empty (keadm would run `./keadm` with no arguments and call it a success)",
                "set keadmCmd to the keadm subcommand to run, such as `join --cloudcore-ipport=...`",
            );
            None
        }
    }
}

/// The copyFrom directory, resolved, and its files; every problem in it is reported at
/// the copyFrom line.
fn copy_files(
    v: &mut Validator,
    field: &Spanned<String>,
    subject: &str,
) -> Option<(PathBuf, Vec<CopyFile>)> {
    let dir = v.local_path(&field.value);
    match v.copy_dirs.list(&dir) {
        Ok(files) => Some((dir, files)),
        Err(problems) => {
            for problem in problems {
                v.error(
                    Some(field.pos),
                    Some(subject.to_string()),
                    problem.message(),
                    problem.fix(),
                );
            }
            None
        }
    }
}

/// What `{{.key}}` and `{{env "NAME"}}` read in keadmCmd.
struct TemplateLookup<'a> {
    args: &'a BTreeMap<String, String>,
    env: &'a dyn Environment,
}

impl Lookup for TemplateLookup<'_> {
    fn args(&self) -> &BTreeMap<String, String> {
        self.args
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.var(name)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::validate::tests::{GOOD, check, rendered};
    use crate::redact::Secret;

    /// GOOD plus a second node `b` at `ip`, with `extra` node fields.
    fn two_nodes(ip: &str, extra: &str) -> String {
        format!(
            "{GOOD}- nodeName: b\n  keadmCmd: join --edgenode-name=b\n{extra}  ssh:\n    ip: {ip}\n    username: root\n    auth:\n      type: agent\n"
        )
    }

    #[test]
    fn a_node_value_wins_over_the_run_wide_default() {
        let text = format!(
            "timeoutSeconds: 100\nretries: 3\nremoteDir: /srv/kb/\nconnectTimeoutSeconds: 7\n{}",
            two_nodes("10.0.0.2", "  timeoutSeconds: 5\n  remoteDir: /\n")
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let config = config.unwrap();
        let [a, b] = &config.nodes[..] else {
            panic!("two nodes")
        };
        assert_eq!(
            (a.timeout_seconds, a.retries, a.remote_dir.as_deref()),
            (Some(100), Some(3), Some("/srv/kb"))
        );
        assert_eq!(
            (b.timeout_seconds, b.retries, b.remote_dir.as_deref()),
            (Some(5), Some(3), Some("/"))
        );
        assert_eq!(b.ssh.connect_timeout_seconds, Some(7));
        assert_eq!(config.remote_dir.as_deref(), Some("/srv/kb"));
    }

    #[test]
    fn secrets_are_template_values_then_the_token_then_passwords() {
        let text = GOOD.replace(
            "'{{.cmd}} --edgenode-name=a'",
            "'{{.cmd}} --edgenode-name=a -t {{env \"PW\"}}x'",
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{}", rendered(&diags));
        assert_eq!(
            config.unwrap().nodes[0].secrets,
            [
                Secret::new("from-env"),
                Secret::new("from-envx"),
                Secret::new("from-env")
            ]
        );
    }

    /// The warning both nodes at 10.0.0.1:22 get when they upload into `dir`, told as
    /// `how`.
    fn shared(dir: &str, how: &str) -> String {
        format!(
            "c.yaml:19:9: node 2 \"b\": 10.0.0.1:22 is also node 1's address, and both nodes upload into {dir} there ({how}), so one node's files can replace the other's while they run; give this node a remoteDir of its own, such as remoteDir: {dir}-2, or remove the duplicate."
        )
    }

    #[test]
    fn nodes_sharing_an_address_are_warned_about_naming_the_directory_and_kept() {
        let (config, diags) = check(&two_nodes("10.0.0.1", ""));
        assert_eq!(config.unwrap().nodes.len(), 2);
        assert_eq!(
            rendered(&diags),
            shared(
                "/tmp/kubeedge/keadm",
                "the default remoteDir: neither node sets one"
            )
        );
        // docs/config.md shows it as it is.
        let docs = include_str!("../../../docs/config.md");
        let shown = rendered(&diags).replacen("c.yaml", "config.yaml", 1);
        assert!(docs.contains(&shown), "docs/config.md lacks {shown}");
        // The default written out is the default.
        let (_, diags) = check(&two_nodes(
            "10.0.0.1",
            "  remoteDir: /tmp//kubeedge/keadm/\n",
        ));
        assert_eq!(
            rendered(&diags).replace("c.yaml:20:9", "c.yaml:19:9"),
            shared(
                "/tmp/kubeedge/keadm",
                "node 1's as the default, this node's as its own remoteDir"
            )
        );
        let (_, diags) = check(&format!(
            "remoteDir: /srv/kb\n{}",
            two_nodes("10.0.0.1", "")
        ));
        assert_eq!(
            rendered(&diags).replace("c.yaml:20:9", "c.yaml:19:9"),
            shared(
                "/srv/kb",
                "the top-level remoteDir: neither node sets its own"
            )
        );
    }

    #[test]
    fn nodes_sharing_an_address_but_not_an_upload_directory_are_not_warned_about() {
        // Each its own remoteDir, or one that uploads nothing (keadmBinDir): no clash.
        for extra in ["  remoteDir: /srv/b\n", "  keadmBinDir: /usr/local/bin\n"] {
            let (config, diags) = check(&two_nodes("10.0.0.1", extra));
            assert_eq!(config.unwrap().nodes.len(), 2);
            assert!(diags.is_empty(), "{extra}: {}", rendered(&diags));
        }
        // keadmBinDir for every node, in a run without image archives: nothing is sent.
        let text = two_nodes("10.0.0.1", "").replace(
            "  archGroup: [amd64]\n",
            "  archGroup: [amd64]\n  keadmBinDir: /usr/local/bin\n",
        );
        let (config, diags) = check(&text);
        assert_eq!(config.unwrap().nodes.len(), 2);
        assert!(diags.is_empty(), "{}", rendered(&diags));
    }

    #[test]
    fn nodes_at_one_address_behind_different_jump_hosts_are_not_warned_about() {
        let jump = |host: &str| {
            format!(
                "    proxyJump:\n      ip: {host}\n      username: root\n      auth:\n        type: agent\n"
            )
        };
        let text = two_nodes("10.0.0.1", "").replace(
            "      passwordEnv: PW\n",
            &format!("      passwordEnv: PW\n{}", jump("192.0.2.1")),
        ) + &jump("192.0.2.2");
        let (config, diags) = check(&text);
        assert_eq!(config.unwrap().nodes.len(), 2);
        assert!(diags.is_empty(), "{}", rendered(&diags));
    }

    #[test]
    fn nodes_with_keadm_on_them_that_get_image_archives_still_share_a_directory() {
        // Offline image archives go into the remoteDir of every join, keadmBinDir or not.
        let kit = tempfile::tempdir().unwrap();
        std::fs::write(kit.path().join("pause.tar"), b"").unwrap();
        let text = two_nodes("10.0.0.1", "").replace(
            "  archGroup: [amd64]\n",
            &format!(
                "  archGroup: [amd64]\n  keadmBinDir: /usr/local/bin\n  offlineImages:\n    amd64:\n      - {}/pause.tar\n",
                kit.path().display()
            ),
        );
        let (config, diags) = check(&text);
        assert_eq!(config.unwrap().nodes.len(), 2);
        assert_eq!(
            rendered(&diags).replace("c.yaml:23:9", "c.yaml:19:9"),
            shared(
                "/tmp/kubeedge/keadm",
                "the default remoteDir: neither node sets one"
            )
        );
    }

    #[test]
    fn copy_from_problems_point_at_the_copy_from_line() {
        let (config, diags) = check(&two_nodes("10.0.0.2", "  copyFrom: /nonexistent/files\n"));
        assert!(config.is_none());
        let all = rendered(&diags);
        assert!(
            all.starts_with(
                "c.yaml:18:13: node 2 \"b\": copyFrom directory /nonexistent/files cannot be read: "
            ),
            "{all}"
        );
        assert!(
            all.ends_with(
                "; point copyFrom at an existing directory of files to upload, or remove it."
            ),
            "{all}"
        );
    }

    /// A nodeName goes into batch_process_log.txt lines and onto the console as it is, so
    /// a line break or a terminal escape in it would forge a line or rewrite the screen.
    #[test]
    fn a_node_name_with_control_characters_is_refused_and_shown_escaped() {
        let text = GOOD.replace(
            "- nodeName: a\n",
            "- nodeName: \"a\\nSuccessfully processed node b\\e]0;x\\a\"\n",
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:7:13: node 1 \"a\\x0aSuccessfully processed node b\\x1b]0;x\\x07\": nodeName `a\\x0aSuccessfully processed node b\\x1b]0;x\\x07` contains control characters (a line break or a terminal escape), which would forge lines in batch_process_log.txt and on the console; write the name without them."
        );
    }

    /// keadm v1.22 and later print that a bare `keadm reset` is no longer supported, and
    /// reset only a node whose edgecore runs: refused before any node is touched, with
    /// `reset edge` as the fix. An older keadm, or one the node holds itself (any
    /// release), is left to its own rules.
    #[test]
    fn a_bare_reset_is_refused_for_keadm_v1_22_and_later() {
        let reset = |version: &str, cmd: &str, bin_dir: &str| {
            check(
                &GOOD
                    .replace("v1.23.1", version)
                    .replace("'{{.cmd}} --edgenode-name=a'", cmd)
                    .replace("  ssh:\n", &format!("{bin_dir}  ssh:\n")),
            )
        };
        let (config, diags) = reset("v1.23.1", "reset --force", "");
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:8:13: node 1 \"a\": keadmCmd runs `keadm reset` with no second word, which keadm v1.23 no longer supports (since v1.22 it prints \"'keadm reset' is no longer supported after version v1.22\" and resets only where it finds edgecore running, leaving /etc/kubeedge on a node whose edgecore is stopped); write `reset edge` for an edge node, as in `keadmCmd: reset edge --force`."
        );
        assert!(reset("v1.22.0", "reset", "").0.is_none());
        for (version, cmd, bin_dir) in [
            ("v1.23.1", "reset edge --force", ""),
            ("v1.23.1", "reset cloud", ""),
            ("v1.21.4", "reset", ""),
            ("v1.23.1", "reset", "  keadmBinDir: /opt/keadm\n"),
        ] {
            let (config, diags) = reset(version, cmd, bin_dir);
            assert!(
                config.is_some(),
                "{version} {cmd} {bin_dir}: {}",
                rendered(&diags)
            );
        }
    }

    /// A nodeName goes into the cluster's API paths: one that is not a Node name (here
    /// one that would address `nodes/worker-1` with a query) is refused with a name that is.
    #[test]
    fn a_node_name_that_is_not_a_kubernetes_node_name_is_refused_with_the_fix() {
        let text = GOOD.replace("- nodeName: a\n", "- nodeName: 'Worker_1?x'\n");
        let (config, diags) = check(&text);
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:7:13: node 1 \"Worker_1?x\": nodeName `Worker_1?x` is not a Node name: it has uppercase letters; write the node's Node name as Kubernetes and edgecore take it (lowercase letters, digits, '-' and '.', at most 253 characters, in dot-separated parts of at most 63 that start and end with a letter or digit), such as `worker-1-x`."
        );
    }

    #[test]
    fn a_node_with_several_problems_reports_them_all_in_order() {
        let text = format!(
            "{GOOD}- nodeName: a\n  keadmCmd: 'join --edgenode-name=a --token='\n  retries: 99\n"
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let messages: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "nodeName `a` is already used by node 1",
                "keadmCmd passes --token= with an empty value",
                "--edgenode-name=a is also used by node 1; both would register as one edge node",
                "retries is 99, but it must be between 0 and 20",
                "the node has no ssh block",
            ]
        );
    }
}
