//! The config file's structure: keadm's schema plus our extensions (both in
//! docs/config.md), as read, before defaults and validation.
//!
//! Every value keeps the position it was read at, so validation can name the line.
//! `Option` means "absent or null" (yaml.v2's nil pointer); an empty string is kept as
//! `Some("")` here and judged by validation, since keadm treats `""` and absent differently
//! and we must say which one the operator wrote.

use std::collections::BTreeMap;

use super::yaml::Pos;

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned<T> {
    pub value: T,
    pub pos: Pos,
}

impl<T> Spanned<T> {
    pub fn new(value: T, pos: Pos) -> Spanned<T> {
        Spanned { value, pos }
    }
}

/// `Some` non-empty string, trimmed of nothing: `""` counts as "not set" for fields where
/// keadm's gen-config template writes `""` (url, copyFrom, offlinePackageDir, keadmBinDir).
pub fn non_empty(field: &Option<Spanned<String>>) -> Option<&Spanned<String>> {
    field.as_ref().filter(|s| !s.value.is_empty())
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawConfig {
    pub keadm: KeadmSection,
    pub nodes: Vec<RawNode>,
    /// Where `nodes:` was written, for "zero nodes" messages.
    pub nodes_pos: Option<Pos>,
    pub max_run_num: Option<Spanned<i64>>,
    // Run-wide defaults (extensions).
    pub remote_dir: Option<Spanned<String>>,
    pub timeout_seconds: Option<Spanned<i64>>,
    pub retries: Option<Spanned<i64>>,
    pub connect_timeout_seconds: Option<Spanned<i64>>,
    pub host_key_policy: Option<Spanned<String>>,
    /// The site of nodes that set none (extension).
    pub site: Option<Spanned<String>>,
    /// The cluster to verify joins in (extension; keadm ignores it).
    pub kubeconfig: Option<Spanned<String>>,
    /// The labels and taints of every node (extension).
    pub placement: RawPlacement,
    /// `sites`: per site name, the labels and taints of its nodes (extension).
    pub sites: Vec<RawSite>,
}

/// `labels` and `taints`, as written at the top level, under a site or on a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawPlacement {
    /// Keys and values as their literal text, in file order (a null value is "").
    pub labels: Vec<(Spanned<String>, Spanned<String>)>,
    pub taints: Vec<RawTaint>,
}

/// One `taints` entry: `key=value:Effect` as kubectl writes it, or a mapping of `key`,
/// `value` and `effect` as the Node's spec has it.
#[derive(Clone, Debug, PartialEq)]
pub enum RawTaint {
    Text(Spanned<String>),
    Fields {
        pos: Pos,
        key: Option<Spanned<String>>,
        value: Option<Spanned<String>>,
        effect: Option<Spanned<String>>,
    },
}

/// One `sites` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct RawSite {
    pub name: Spanned<String>,
    pub placement: RawPlacement,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeadmSection {
    pub download_enable: Option<Spanned<bool>>,
    pub download_url: Option<Spanned<String>>,
    /// `download.sha512`: arch name -> digest, in file order (keys are judged too).
    pub download_sha512: Vec<(Spanned<String>, Spanned<String>)>,
    pub keadm_version: Option<Spanned<String>>,
    pub arch_group: Vec<Spanned<String>>,
    pub offline_package_dir: Option<Spanned<String>>,
    pub cmd_tpl_args: BTreeMap<String, Spanned<String>>,
    pub keadm_bin_dir: Option<Spanned<String>>,
    /// `offlineImages` (extension): arch name -> archive files and directories, in file
    /// order; `None` when absent or null.
    pub offline_images: Option<Spanned<Vec<RawArchImages>>>,
    /// `extraImages` (extension): the site's own images a kit carries besides keadm's,
    /// as written.
    pub extra_images: Vec<Spanned<String>>,
}

/// One arch's entry of `keadm.offlineImages`: one path, or a list of paths.
#[derive(Clone, Debug, PartialEq)]
pub struct RawArchImages {
    pub arch: Spanned<String>,
    pub paths: Vec<Spanned<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawNode {
    /// 0-based position in `nodes`.
    pub index: usize,
    pub pos: Pos,
    pub node_name: Option<Spanned<String>>,
    pub keadm_cmd: Option<Spanned<String>>,
    pub copy_from: Option<Spanned<String>>,
    pub keadm_bin_dir: Option<Spanned<String>>,
    pub remote_dir: Option<Spanned<String>>,
    pub timeout_seconds: Option<Spanned<i64>>,
    pub retries: Option<Spanned<i64>>,
    /// The site the node belongs to (extension).
    pub site: Option<Spanned<String>>,
    /// The node's own labels and taints (extension).
    pub placement: RawPlacement,
    pub ssh: Option<RawSsh>,
}

impl RawNode {
    /// The node's name for messages: `edge-a` or `#3` when unnamed.
    pub fn label(&self) -> String {
        match &self.node_name {
            // Escaped: the label goes onto the console with every problem of the node.
            Some(name) if !name.value.is_empty() => format!(
                "node {} \"{}\"",
                self.index + 1,
                crate::node_text::escape_controls(&name.value)
            ),
            _ => format!("node {}", self.index + 1),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSsh {
    pub pos: Pos,
    pub ip: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub auth: Option<RawAuth>,
    pub connect_timeout_seconds: Option<Spanned<i64>>,
    pub host_key_policy: Option<Spanned<String>>,
    pub sudo: Option<Spanned<bool>>,
    pub proxy_jump: Option<Box<RawSsh>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawAuth {
    pub pos: Pos,
    pub auth_type: Option<Spanned<String>>,
    pub password_auth: Option<RawPasswordAuth>,
    pub private_key_auth: Option<RawPrivateKeyAuth>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawPasswordAuth {
    pub pos: Pos,
    pub password: Option<Spanned<String>>,
    pub password_env: Option<Spanned<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawPrivateKeyAuth {
    pub pos: Pos,
    pub private_key_path: Option<Spanned<String>>,
    pub passphrase: Option<Spanned<String>>,
    pub passphrase_env: Option<Spanned<String>>,
}
