//! The validated config: what the rest of the program reads instead of the YAML. Every
//! value is resolved (paths absolute, templates rendered, secrets read) and every
//! default filled in, so nothing later looks at the file again.
//!
//! A leaf among config's modules: validation builds these types, nothing here validates.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::yaml::Pos;
use crate::arch::Arch;
use crate::image_ref::ImageRef;
use crate::keadm_cmd::KeadmCommand;
use crate::redact::Secret;

/// keadm's default maxRunNum.
pub const DEFAULT_MAX_RUN_NUM: usize = 5;

/// keadm's BASE: where keadm batch uploads files and keadm on every node, the `remoteDir`
/// of a node that sets none.
pub const DEFAULT_REMOTE_DIR: &str = "/tmp/kubeedge/keadm";
/// The arches keadm publishes Linux builds for (docs/config.md, "What is staged").
pub const KNOWN_ARCHES: [&str; 3] = ["amd64", "arm64", "arm"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeyPolicy {
    /// Trust on first use: unknown hosts are recorded, changed keys are refused.
    AcceptNew,
    /// Only hosts already in the known-hosts file.
    Strict,
    /// Accept any key (keadm's behaviour).
    Off,
}

impl HostKeyPolicy {
    pub fn parse(text: &str) -> Option<HostKeyPolicy> {
        match text {
            "accept-new" => Some(HostKeyPolicy::AcceptNew),
            "strict" => Some(HostKeyPolicy::Strict),
            "off" => Some(HostKeyPolicy::Off),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HostKeyPolicy::AcceptNew => "accept-new",
            HostKeyPolicy::Strict => "strict",
            HostKeyPolicy::Off => "off",
        }
    }
}

/// Where keadm binaries come from when a node needs one staged.
#[derive(Debug, Clone, PartialEq)]
pub enum PackageMode {
    /// `url` None means GitHub releases; `url: ""` also means that (keadm breaks on it).
    Download {
        url: Option<String>,
    },
    Offline {
        dir: PathBuf,
    },
}

/// A tarball digest the operator wrote in `keadm.download.sha512`.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedDigest {
    /// sha512, lowercase hex.
    pub digest: String,
    /// Where it was written, so a mismatch can say which line to check.
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub path: PathBuf,
    /// None when every node has a keadmBinDir, so nothing is staged (keadm's rule).
    pub keadm_version: Option<String>,
    pub package_mode: PackageMode,
    pub arch_group: Vec<String>,
    /// `keadm.download.sha512`: digests the tarballs must have, whatever their source.
    pub sha512_pins: BTreeMap<Arch, PinnedDigest>,
    /// `keadm.offlineImages`: per arch, image archive files and directories of `*.tar`
    /// archives, resolved. `None` when the key is absent: the offline directory's
    /// `<arch>/images` then serve in offline mode. `Some` of an empty map: no images.
    pub offline_images: Option<BTreeMap<Arch, Vec<PathBuf>>>,
    /// `keadm.extraImages`: the site's own images (CNI, edgemesh, workloads), in full and
    /// each once, that `batch bundle` carries and the pre-flight image check expects
    /// besides keadm's own.
    pub extra_images: Vec<ImageRef>,
    pub max_run_num: usize,
    pub nodes: Vec<NodeSpec>,
    // Run-wide defaults; `None` means the built-in default applies.
    pub remote_dir: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub retries: Option<u32>,
    pub connect_timeout_seconds: Option<u64>,
    pub host_key_policy: Option<HostKeyPolicy>,
    /// `kubeconfig` (extension): the cluster that joins are verified in, unless the
    /// command line names another.
    pub kubeconfig: Option<PathBuf>,
}

impl Config {
    /// Whether any node needs a staged keadm binary.
    pub fn needs_staging(&self) -> bool {
        self.nodes.iter().any(|n| n.keadm_bin_dir.is_none())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub index: usize,
    pub name: String,
    /// keadmCmd after template rendering: shell text, as in keadm.
    pub command: String,
    /// The same, read as keadm reads it (subcommand, token, node name...), once.
    pub keadm_args: KeadmCommand,
    /// Values that must never be shown: passwords, passphrases, `env` values.
    pub secrets: Vec<Secret>,
    pub copy_from: Option<PathBuf>,
    pub copy_files: Vec<CopyFile>,
    /// Node keadmBinDir over the global one; Some means keadm is already on the node there.
    pub keadm_bin_dir: Option<String>,
    pub remote_dir: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub retries: Option<u32>,
    /// `site`, the node's own or the top-level one: the nodes that share a network and an
    /// uplink (see docs/config.md, "Sites").
    pub site: Option<String>,
    /// The labels and taints asked of the node: the top level's, its site's, then its
    /// own (docs/config.md, "Labels and taints").
    pub placement: crate::placement::Placement,
    pub ssh: SshSpec,
}

/// A file of a node's copyFrom dir, as listed at validation.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyFile {
    pub name: String,
    pub path: PathBuf,
    pub mode: u32,
    pub size: u64,
    /// Read once here: every node that uploads the file compares it with its sidecar.
    pub sha256: String,
}

/// The longest chain of jump hosts (`proxyJump` inside `proxyJump`) a node may be
/// reached through.
pub const MAX_JUMP_HOPS: usize = 4;

#[derive(Debug, Clone, PartialEq)]
pub struct SshSpec {
    pub host: String,
    pub port: u16,
    pub username: String,
    pub auth: AuthSpec,
    pub connect_timeout_seconds: Option<u64>,
    pub host_key_policy: Option<HostKeyPolicy>,
    pub sudo: Option<bool>,
    pub proxy_jump: Option<Box<SshSpec>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AuthSpec {
    Password(Secret),
    PrivateKey {
        path: PathBuf,
        passphrase: Option<Secret>,
    },
    Agent,
}

impl AuthSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            AuthSpec::Password(_) => "password",
            AuthSpec::PrivateKey {
                passphrase: None, ..
            } => "private key",
            AuthSpec::PrivateKey {
                passphrase: Some(_),
                ..
            } => "private key with passphrase",
            AuthSpec::Agent => "ssh-agent",
        }
    }
}

impl SshSpec {
    /// The secrets this connection uses, its jump hosts' included: a password or a key
    /// passphrase each. They are masked wherever the node's output is shown.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut out = Vec::new();
        let mut hop = Some(self);
        while let Some(ssh) = hop {
            match &ssh.auth {
                AuthSpec::Password(p)
                | AuthSpec::PrivateKey {
                    passphrase: Some(p),
                    ..
                } => out.push(p.clone()),
                AuthSpec::PrivateKey {
                    passphrase: None, ..
                }
                | AuthSpec::Agent => {}
            }
            hop = ssh.proxy_jump.as_deref();
        }
        out
    }
}

/// Whether `name` can be a `site`: at most 63 letters, digits, `.`, `_` and `-` (it names
/// the site in the console, the summary and `--dry-run`).
pub fn is_site_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What to do about a site name [`is_site_name`] refuses.
pub const SITE_NAME_FIX: &str =
    "name the site with at most 63 letters, digits, `.`, `_` and `-`, such as store-0042";

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh(auth: AuthSpec, proxy_jump: Option<SshSpec>) -> SshSpec {
        SshSpec {
            host: "10.0.0.1".into(),
            port: 22,
            username: "root".into(),
            auth,
            connect_timeout_seconds: None,
            host_key_policy: None,
            sudo: None,
            proxy_jump: proxy_jump.map(Box::new),
        }
    }

    #[test]
    fn host_key_policies_read_back_as_written() {
        for policy in [
            HostKeyPolicy::AcceptNew,
            HostKeyPolicy::Strict,
            HostKeyPolicy::Off,
        ] {
            assert_eq!(HostKeyPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(HostKeyPolicy::parse("Strict"), None);
        assert_eq!(
            serde_json::to_string(&HostKeyPolicy::AcceptNew).unwrap(),
            "\"accept-new\""
        );
    }

    #[test]
    fn auth_kinds_read_as_words() {
        let key = |passphrase: Option<&str>| AuthSpec::PrivateKey {
            path: PathBuf::from("/k"),
            passphrase: passphrase.map(Secret::new),
        };
        assert_eq!(AuthSpec::Password(Secret::new("pw")).kind(), "password");
        assert_eq!(key(None).kind(), "private key");
        assert_eq!(key(Some("p")).kind(), "private key with passphrase");
        assert_eq!(AuthSpec::Agent.kind(), "ssh-agent");
    }

    #[test]
    fn secrets_come_from_every_hop() {
        let bastion = ssh(AuthSpec::Password(Secret::new("jump-pw")), None);
        let middle = ssh(
            AuthSpec::PrivateKey {
                path: PathBuf::from("/k"),
                passphrase: Some(Secret::new("phrase")),
            },
            Some(bastion),
        );
        let node = ssh(AuthSpec::Agent, Some(middle));
        assert_eq!(
            node.secrets(),
            vec![Secret::new("phrase"), Secret::new("jump-pw")]
        );
        assert!(ssh(AuthSpec::Agent, None).secrets().is_empty());
    }
}
