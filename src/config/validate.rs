//! Every rule of docs/config.md, applied to a [`RawConfig`]: all problems are collected,
//! each naming the node, the field and the fix. The result is a [`Config`] whose values
//! are resolved (paths absolute, templates rendered, secrets read), so nothing later has
//! to look at the YAML again.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::schema::*;
use super::template::{self, Lookup};
use super::yaml::Pos;
use super::{Diagnostic, Severity};
use crate::arch::Arch;
use crate::keadm_cmd::KeadmCommand;
use crate::redact::Secret;

/// keadm's default maxRunNum.
pub const DEFAULT_MAX_RUN_NUM: usize = 5;
/// The arches keadm publishes Linux builds for (docs/config.md, "What is staged").
pub const KNOWN_ARCHES: [&str; 3] = ["amd64", "arm64", "arm"];

/// What validation needs from the outside world, so tests can supply it.
pub trait Environment {
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
    fn current_dir(&self) -> PathBuf;
}

/// The process's real environment.
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }
    fn current_dir(&self) -> PathBuf {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    }
}

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
    pub max_run_num: usize,
    pub nodes: Vec<NodeSpec>,
    // Run-wide defaults; `None` means the built-in default applies.
    pub remote_dir: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub retries: Option<u32>,
    pub connect_timeout_seconds: Option<u64>,
    pub host_key_policy: Option<HostKeyPolicy>,
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

struct Validator<'a> {
    diags: &'a mut Vec<Diagnostic>,
    env: &'a dyn Environment,
    /// copyFrom dirs already listed and hashed: a fleet usually shares one.
    copy_dirs: HashMap<PathBuf, Vec<CopyFile>>,
}

impl Validator<'_> {
    fn error(
        &mut self,
        pos: Option<Pos>,
        subject: Option<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.diags.push(Diagnostic::error(
            pos,
            subject,
            message.into(),
            Some(fix.into()),
        ));
    }

    fn warn(
        &mut self,
        pos: Option<Pos>,
        subject: Option<String>,
        message: impl Into<String>,
        fix: Option<String>,
    ) {
        self.diags
            .push(Diagnostic::warning(pos, subject, message.into(), fix));
    }

    /// `~` expands to the home directory; relative paths resolve against the current
    /// directory, as keadm resolves them.
    fn local_path(&self, text: &str) -> PathBuf {
        let expanded = if text == "~" {
            self.env.home().unwrap_or_else(|| PathBuf::from("~"))
        } else if let Some(rest) = text.strip_prefix("~/") {
            match self.env.home() {
                Some(home) => home.join(rest),
                None => PathBuf::from(text),
            }
        } else {
            PathBuf::from(text)
        };
        let absolute = if expanded.is_absolute() {
            expanded
        } else {
            self.env.current_dir().join(expanded)
        };
        // `./keys/id` shows as `/cwd/keys/id`, not `/cwd/./keys/id`.
        absolute.components().collect()
    }

    fn seconds(
        &mut self,
        field: &Option<Spanned<i64>>,
        name: &str,
        subject: Option<String>,
    ) -> Option<u64> {
        let value = field.as_ref()?;
        if value.value <= 0 {
            self.error(
                Some(value.pos),
                subject,
                format!(
                    "{name} is {}, but it must be a positive number of seconds",
                    value.value
                ),
                format!(
                    "set {name} to a number of seconds such as 600, or remove it for the default"
                ),
            );
            return None;
        }
        Some(value.value as u64)
    }

    fn retries(&mut self, field: &Option<Spanned<i64>>, subject: Option<String>) -> Option<u32> {
        let value = field.as_ref()?;
        if !(0..=20).contains(&value.value) {
            self.error(
                Some(value.pos),
                subject,
                format!(
                    "retries is {}, but it must be between 0 and 20",
                    value.value
                ),
                "set retries to a small number such as 2",
            );
            return None;
        }
        Some(value.value as u32)
    }

    fn policy(
        &mut self,
        field: &Option<Spanned<String>>,
        subject: Option<String>,
    ) -> Option<HostKeyPolicy> {
        let value = field.as_ref()?;
        let policy = HostKeyPolicy::parse(&value.value);
        if policy.is_none() {
            self.error(
                Some(value.pos),
                subject,
                format!("hostKeyPolicy is `{}`, which is not a policy", value.value),
                "use accept-new (record unknown hosts, refuse changed keys), strict, or off",
            );
        }
        policy
    }

    fn remote_dir(
        &mut self,
        field: &Option<Spanned<String>>,
        subject: Option<String>,
    ) -> Option<String> {
        let value = non_empty(field)?;
        if !value.value.starts_with('/') || value.value.contains(['\'', '\n', '\0']) {
            self.error(
                Some(value.pos),
                subject,
                format!("remoteDir `{}` must be an absolute path on the node without quotes or newlines", value.value),
                "write it as an absolute path such as /var/lib/keadm-batch",
            );
            return None;
        }
        Some(value.value.trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .or(Some("/".into()))
    }

    /// A secret given either inline or through an environment variable.
    fn secret(
        &mut self,
        inline: &Option<Spanned<String>>,
        env_name: &Option<Spanned<String>>,
        what: &str,
        subject: &str,
    ) -> Option<Secret> {
        if let Some(name) = non_empty(env_name) {
            return match self.env.var(&name.value) {
                Some(value) if !value.is_empty() => Some(Secret::new(value)),
                _ => {
                    self.error(
                        Some(name.pos),
                        Some(subject.to_string()),
                        format!(
                            "the environment variable {} named by {what}Env is not set",
                            name.value
                        ),
                        format!(
                            "export {}=... before running, or write {what} in the file",
                            name.value
                        ),
                    );
                    None
                }
            };
        }
        inline.as_ref().map(|s| Secret::new(s.value.clone()))
    }

    fn ssh(
        &mut self,
        raw: &RawSsh,
        subject: &str,
        path: &str,
        global_policy: Option<HostKeyPolicy>,
    ) -> Option<SshSpec> {
        let subj = || Some(subject.to_string());
        let mut ok = true;
        let host = match &raw.ip {
            Some(ip) if !ip.value.trim().is_empty() => {
                // keadm needs manual brackets for IPv6; we accept both forms.
                let host = ip
                    .value
                    .trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string();
                if host.contains(char::is_whitespace) {
                    self.error(
                        Some(ip.pos),
                        subj(),
                        format!("{path}.ip `{}` contains white space", ip.value),
                        "write only the address or host name",
                    );
                    ok = false;
                }
                host
            }
            other => {
                self.error(
                    other.as_ref().map(|s| s.pos).or(Some(raw.pos)),
                    subj(),
                    if path.ends_with("proxyJump") {
                        format!("{path}.ip is empty")
                    } else {
                        format!(
                            "{path}.ip is empty (keadm would connect to the control host itself)"
                        )
                    },
                    format!("set {path}.ip to the node's IP address or host name"),
                );
                ok = false;
                String::new()
            }
        };
        let username = match &raw.username {
            Some(u) if !u.value.is_empty() => u.value.clone(),
            other => {
                self.error(
                    other.as_ref().map(|s| s.pos).or(Some(raw.pos)),
                    subj(),
                    format!("{path}.username is empty"),
                    format!("set {path}.username, for example root"),
                );
                ok = false;
                String::new()
            }
        };
        let port = match &raw.port {
            None => 22,
            Some(p) if (1..=65535).contains(&p.value) => p.value as u16,
            Some(p) => {
                self.error(
                    Some(p.pos),
                    subj(),
                    format!("{path}.port is {}, outside 1..65535", p.value),
                    "set the node's SSH port, usually 22, or remove the line",
                );
                ok = false;
                22
            }
        };
        let auth = self.auth(raw, subject, path);
        let host_key_policy = self.policy(&raw.host_key_policy, subj()).or(global_policy);
        let connect_timeout_seconds = self.seconds(
            &raw.connect_timeout_seconds,
            &format!("{path}.connectTimeoutSeconds"),
            subj(),
        );
        let proxy_jump = match &raw.proxy_jump {
            Some(jump) => {
                let spec = self.ssh(jump, subject, &format!("{path}.proxyJump"), global_policy);
                if spec.is_none() {
                    ok = false;
                }
                spec.map(Box::new)
            }
            None => None,
        };
        let auth = auth?;
        ok.then_some(SshSpec {
            host,
            port,
            username,
            auth,
            connect_timeout_seconds,
            host_key_policy,
            sudo: raw.sudo.as_ref().map(|s| s.value),
            proxy_jump,
        })
    }

    fn auth(&mut self, raw: &RawSsh, subject: &str, path: &str) -> Option<AuthSpec> {
        let subj = || Some(subject.to_string());
        let Some(auth) = &raw.auth else {
            self.error(
                Some(raw.pos),
                subj(),
                format!("{path}.auth is missing"),
                format!("add {path}.auth with `type: password` and `passwordAuth`, or `type: privateKey` and `privateKeyAuth`"),
            );
            return None;
        };
        let kind = auth
            .auth_type
            .as_ref()
            .map(|t| t.value.as_str())
            .unwrap_or("");
        let type_pos = auth.auth_type.as_ref().map(|t| t.pos).or(Some(auth.pos));
        match kind {
            "password" => {
                let Some(pw) = &auth.password_auth else {
                    let hint = if auth.private_key_auth.is_some() {
                        " (a password written under privateKeyAuth is ignored)"
                    } else {
                        ""
                    };
                    self.error(
                        type_pos,
                        subj(),
                        format!(
                            "{path}.auth.type is password but there is no passwordAuth block{hint}"
                        ),
                        "add `passwordAuth:` with `password: ...` or `passwordEnv: VAR` under auth",
                    );
                    return None;
                };
                let secret = self.secret(&pw.password, &pw.password_env, "password", subject);
                match secret {
                    Some(s) if !s.is_empty() => Some(AuthSpec::Password(s)),
                    Some(_) | None if non_empty(&pw.password_env).is_some() => None,
                    _ => {
                        self.error(
                            pw.password.as_ref().map(|p| p.pos).or(Some(pw.pos)),
                            subj(),
                            format!("{path}.auth.passwordAuth.password is empty"),
                            "write the password, or better, set passwordEnv to the name of an environment variable that holds it",
                        );
                        None
                    }
                }
            }
            "privateKey" => {
                let Some(pk) = &auth.private_key_auth else {
                    self.error(
                        type_pos,
                        subj(),
                        format!(
                            "{path}.auth.type is privateKey but there is no privateKeyAuth block"
                        ),
                        "add `privateKeyAuth:` with `privateKeyPath: ~/.ssh/id_ed25519` under auth",
                    );
                    return None;
                };
                let Some(key_path) = non_empty(&pk.private_key_path) else {
                    self.error(
                        pk.private_key_path.as_ref().map(|p| p.pos).or(Some(pk.pos)),
                        subj(),
                        format!("{path}.auth.privateKeyAuth.privateKeyPath is empty"),
                        "set it to the private key file on this machine, such as ~/.ssh/id_ed25519",
                    );
                    return None;
                };
                let resolved = self.local_path(&key_path.value);
                if !resolved.is_file() {
                    self.error(
                        Some(key_path.pos),
                        subj(),
                        format!("the private key {} does not exist or is not a file", resolved.display()),
                        "check privateKeyPath (relative paths start from the current directory, as in keadm)",
                    );
                    return None;
                }
                let passphrase =
                    self.secret(&pk.passphrase, &pk.passphrase_env, "passphrase", subject);
                Some(AuthSpec::PrivateKey {
                    path: resolved,
                    passphrase: passphrase.filter(|p| !p.is_empty()),
                })
            }
            "agent" => Some(AuthSpec::Agent),
            other => {
                let shown = if other.is_empty() {
                    "empty".to_string()
                } else {
                    format!("`{other}`")
                };
                let fix = match other.to_ascii_lowercase().as_str() {
                    "password" => "write `password` in lower case, as keadm requires".to_string(),
                    "privatekey" | "private_key" | "key" => {
                        "write `privateKey` exactly".to_string()
                    }
                    _ => "use password, privateKey, or agent".to_string(),
                };
                self.error(
                    type_pos,
                    subj(),
                    format!("{path}.auth.type is {shown}, which is not an auth type"),
                    fix,
                );
                None
            }
        }
    }

    /// The files of a copyFrom dir, as keadm uploads them: sorted, hidden files included,
    /// symlinks followed, no subdirectories.
    fn copy_files(
        &mut self,
        field: &Spanned<String>,
        subject: &str,
    ) -> Option<(PathBuf, Vec<CopyFile>)> {
        let dir = self.local_path(&field.value);
        if let Some(files) = self.copy_dirs.get(&dir) {
            return Some((dir, files.clone()));
        }
        let subj = || Some(subject.to_string());
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) => {
                self.error(
                    Some(field.pos),
                    subj(),
                    format!("copyFrom directory {} cannot be read: {err}", dir.display()),
                    "point copyFrom at an existing directory of files to upload, or remove it",
                );
                return None;
            }
        };
        let mut files = Vec::new();
        let mut names: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        let mut ok = true;
        for name in names {
            let path = dir.join(&name);
            let display = name.to_string_lossy().to_string();
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {
                    self.error(
                        Some(field.pos),
                        subj(),
                        format!("copyFrom directory {} contains the subdirectory {display}, and uploads are flat", dir.display()),
                        "move the subdirectory's files up, or pack it into a tarball",
                    );
                    ok = false;
                }
                Ok(meta) => match crate::digest::sha256_file(&path) {
                    Ok((size, sha256)) => files.push(CopyFile {
                        name: display,
                        path,
                        mode: meta.permissions().mode() & 0o7777,
                        size,
                        sha256,
                    }),
                    Err(err) => {
                        self.error(
                            Some(field.pos),
                            subj(),
                            format!("copyFrom file {} cannot be read: {err}", path.display()),
                            "make it readable, or remove it",
                        );
                        ok = false;
                    }
                },
                Err(err) => {
                    self.error(
                        Some(field.pos),
                        subj(),
                        format!("copyFrom file {} cannot be read: {err}", path.display()),
                        "fix or remove the file (a dangling symlink?)",
                    );
                    ok = false;
                }
            }
        }
        if ok {
            self.copy_dirs.insert(dir.clone(), files.clone());
        }
        ok.then_some((dir, files))
    }
}

/// Validates `raw`; problems go to `diags`. `None` when the config is empty.
pub fn validate(
    raw: Option<RawConfig>,
    path: &Path,
    env: &dyn Environment,
    diags: &mut Vec<Diagnostic>,
) -> Option<Config> {
    let mut v = Validator {
        diags,
        env,
        copy_dirs: HashMap::new(),
    };
    let Some(raw) = raw else {
        v.error(
            None,
            None,
            "the file is empty (keadm would crash on it)",
            "start from `keadm-batch batch gen-config`, which writes a commented template",
        );
        return None;
    };
    if raw.nodes.is_empty() {
        v.error(
            raw.nodes_pos,
            None,
            "the config lists no nodes",
            "add a top-level `nodes:` list with one item per edge node",
        );
    }

    let max_run_num = match &raw.max_run_num {
        None => DEFAULT_MAX_RUN_NUM,
        Some(n) if n.value == 0 => DEFAULT_MAX_RUN_NUM,
        Some(n) if n.value < 0 => {
            v.error(
                Some(n.pos),
                None,
                format!(
                    "maxRunNum is {}, but it cannot be negative (keadm would crash)",
                    n.value
                ),
                "set maxRunNum to how many nodes to process at once, such as 5",
            );
            DEFAULT_MAX_RUN_NUM
        }
        Some(n) => n.value.min(10_000) as usize,
    };

    let global_policy = v.policy(&raw.host_key_policy, None);
    let global_timeout = v.seconds(&raw.timeout_seconds, "timeoutSeconds", None);
    let global_connect = v.seconds(&raw.connect_timeout_seconds, "connectTimeoutSeconds", None);
    let global_retries = v.retries(&raw.retries, None);
    let global_remote_dir = v.remote_dir(&raw.remote_dir, None);
    let global_bin_dir = non_empty(&raw.keadm.keadm_bin_dir).map(|s| s.value.clone());

    // The values templates see: cmdTplArgs as plain strings.
    let args: BTreeMap<String, String> = raw
        .keadm
        .cmd_tpl_args
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    let lookup = EnvLookup { args: &args, env };

    let mut nodes = Vec::with_capacity(raw.nodes.len());
    let mut seen_names: HashMap<&str, usize> = HashMap::new();
    let mut edge_names: HashMap<String, usize> = HashMap::new();
    let mut endpoints: HashMap<(String, u16), usize> = HashMap::new();
    for node in &raw.nodes {
        let subject = node.label();
        let subj = || Some(subject.clone());
        let mut ok = true;
        let name = match &node.node_name {
            Some(n) if !n.value.is_empty() => {
                if let Some(first) = seen_names.insert(&n.value, node.index) {
                    v.error(
                        Some(n.pos),
                        subj(),
                        format!(
                            "nodeName `{}` is already used by node {}",
                            n.value,
                            first + 1
                        ),
                        "give every node a unique nodeName: results are keyed by it",
                    );
                    ok = false;
                }
                n.value.clone()
            }
            other => {
                v.error(
                    other.as_ref().map(|n| n.pos).or(Some(node.pos)),
                    subj(),
                    "nodeName is empty",
                    "give the node a unique nodeName: results and transcripts are keyed by it",
                );
                ok = false;
                String::new()
            }
        };
        let (command, secrets) = match &node.keadm_cmd {
            Some(cmd) if !cmd.value.trim().is_empty() => {
                match template::render(&cmd.value, &lookup) {
                    Ok(rendered) => (rendered.text, rendered.secrets),
                    Err(err) => {
                        v.diags.push(Diagnostic::error(
                            Some(cmd.pos),
                            subj(),
                            format!("keadmCmd cannot be rendered: {}", err.message),
                            err.fix,
                        ));
                        ok = false;
                        (String::new(), Vec::new())
                    }
                }
            }
            other => {
                v.error(
                    other.as_ref().map(|c| c.pos).or(Some(node.pos)),
                    subj(),
                    "keadmCmd is empty (keadm would run `./keadm` with no arguments and call it a success)",
                    "set keadmCmd to the keadm subcommand to run, such as `join --cloudcore-ipport=...`",
                );
                ok = false;
                (String::new(), Vec::new())
            }
        };
        let keadm_args = KeadmCommand::parse(&command);
        // The token is a secret in every spelling (`-t V` too), wherever it shows up.
        let mut secrets = secrets;
        if let Some(token) = keadm_args.token() {
            secrets.push(Secret::new(token));
        }
        for flag in keadm_args.empty_flags() {
            v.warn(
                node.keadm_cmd.as_ref().map(|c| c.pos),
                subj(),
                format!("keadmCmd passes {flag}= with an empty value"),
                Some("fill in the value (an empty keadm.cmdTplArgs entry?)".into()),
            );
        }
        if let Some(edge_name) = keadm_args.edgenode_name().map(str::to_string)
            && let Some(first) = edge_names.insert(edge_name.clone(), node.index)
        {
            v.error(
                node.keadm_cmd.as_ref().map(|c| c.pos),
                subj(),
                format!("--edgenode-name={edge_name} is also used by node {}; both would register as one edge node", first + 1),
                "give every node its own --edgenode-name",
            );
            ok = false;
        }
        let copy = match non_empty(&node.copy_from) {
            Some(field) => match v.copy_files(field, &subject) {
                Some(found) => Some(found),
                None => {
                    ok = false;
                    None
                }
            },
            None => None,
        };
        let timeout_seconds = v
            .seconds(&node.timeout_seconds, "timeoutSeconds", subj())
            .or(global_timeout);
        let retries = v.retries(&node.retries, subj()).or(global_retries);
        let remote_dir = v
            .remote_dir(&node.remote_dir, subj())
            .or_else(|| global_remote_dir.clone());
        let ssh = match &node.ssh {
            Some(raw_ssh) => v.ssh(raw_ssh, &subject, "ssh", global_policy),
            None => {
                v.error(
                    Some(node.pos),
                    subj(),
                    "the node has no ssh block",
                    "add `ssh:` with ip, username, port and auth",
                );
                None
            }
        };
        let Some(mut ssh) = ssh else { continue };
        if ssh.connect_timeout_seconds.is_none() {
            ssh.connect_timeout_seconds = global_connect;
        }
        if let Some(first) = endpoints.insert((ssh.host.clone(), ssh.port), node.index) {
            v.warn(
                node.ssh.as_ref().and_then(|s| s.ip.as_ref()).map(|ip| ip.pos),
                subj(),
                format!("{}:{} is also node {}'s address; both nodes will run on one host", ssh.host, ssh.port, first + 1),
                Some("give each node its own remoteDir so their uploads stay apart, or remove the duplicate".into()),
            );
        }
        if !ok {
            continue;
        }
        let mut all_secrets = secrets;
        collect_auth_secrets(&ssh, &mut all_secrets);
        let (copy_from, copy_files) = copy.map_or((None, Vec::new()), |(d, f)| (Some(d), f));
        nodes.push(NodeSpec {
            index: node.index,
            name,
            command,
            keadm_args,
            secrets: all_secrets,
            copy_from,
            copy_files,
            keadm_bin_dir: non_empty(&node.keadm_bin_dir)
                .map(|s| s.value.clone())
                .or_else(|| global_bin_dir.clone()),
            remote_dir,
            timeout_seconds,
            retries,
            ssh,
        });
    }

    let needs_staging = raw
        .nodes
        .iter()
        .any(|n| non_empty(&n.keadm_bin_dir).is_none())
        && global_bin_dir.is_none();
    let (keadm_version, package_mode, arch_group) = staging(&mut v, &raw.keadm, needs_staging);
    let sha512_pins = sha512_pins(&mut v, &raw.keadm);

    if v.diags.iter().any(|d| d.severity == Severity::Error) {
        return None;
    }
    Some(Config {
        path: path.to_path_buf(),
        keadm_version,
        package_mode,
        arch_group,
        sha512_pins,
        max_run_num,
        nodes,
        remote_dir: global_remote_dir,
        timeout_seconds: global_timeout,
        retries: global_retries,
        connect_timeout_seconds: global_connect,
        host_key_policy: global_policy,
    })
}

fn staging(
    v: &mut Validator,
    keadm: &KeadmSection,
    needs_staging: bool,
) -> (Option<String>, PackageMode, Vec<String>) {
    let download = keadm.download_enable.as_ref().is_none_or(|e| e.value);
    let mut arch_group = Vec::new();
    for arch in &keadm.arch_group {
        if KNOWN_ARCHES.contains(&arch.value.as_str()) {
            if !arch_group.contains(&arch.value) {
                arch_group.push(arch.value.clone());
            }
        } else {
            v.error(
                Some(arch.pos),
                None,
                format!(
                    "keadm.archGroup lists `{}`, for which keadm publishes no build",
                    arch.value
                ),
                "use amd64, arm64 or arm (armv7)",
            );
        }
    }
    let package_mode = if download {
        PackageMode::Download {
            url: non_empty(&keadm.download_url).map(|u| u.value.clone()),
        }
    } else {
        match non_empty(&keadm.offline_package_dir) {
            Some(dir) => PackageMode::Offline {
                dir: v.local_path(&dir.value),
            },
            None => {
                if needs_staging {
                    v.error(
                        keadm.download_enable.as_ref().map(|e| e.pos),
                        None,
                        "keadm.download.enable is false but keadm.offlinePackageDir is not set",
                        "set offlinePackageDir to the directory holding <arch>/keadm-<version>-linux-<arch>.tar.gz, or enable downloads",
                    );
                }
                PackageMode::Offline {
                    dir: PathBuf::new(),
                }
            }
        }
    };
    if !needs_staging {
        return (None, package_mode, arch_group);
    }
    let version = match &keadm.keadm_version {
        Some(ver) if !ver.value.trim().is_empty() => {
            if !ver.value.starts_with('v') {
                v.warn(
                    Some(ver.pos),
                    None,
                    format!("keadm.keadmVersion `{}` has no leading `v`; release files are named like keadm-v{}-linux-amd64.tar.gz", ver.value, ver.value),
                    Some(format!("write `v{}` unless your mirror names files without the v", ver.value)),
                );
            }
            Some(ver.value.trim().to_string())
        }
        other => {
            v.error(
                other.as_ref().map(|s| s.pos),
                None,
                "keadm.keadmVersion is empty, and at least one node needs a keadm binary staged",
                "set keadmVersion to a KubeEdge release such as v1.23.1, or give every node a keadmBinDir",
            );
            None
        }
    };
    (version, package_mode, arch_group)
}

/// `keadm.download.sha512`: one digest per release arch, 128 hex characters in any case.
fn sha512_pins(v: &mut Validator, keadm: &KeadmSection) -> BTreeMap<Arch, PinnedDigest> {
    let version = keadm
        .keadm_version
        .as_ref()
        .map(|v| v.value.trim())
        .filter(|v| !v.is_empty())
        .unwrap_or("<version>");
    let mut pins = BTreeMap::new();
    for (arch_name, digest) in &keadm.download_sha512 {
        let Some(arch) = Arch::from_name(&arch_name.value) else {
            v.error(
                Some(arch_name.pos),
                None,
                format!(
                    "keadm.download.sha512 pins a digest for `{}`, for which keadm publishes no build",
                    arch_name.value
                ),
                "name the arch as the release files do: amd64, arm64 or arm (x86_64 is amd64, aarch64 is arm64)",
            );
            continue;
        };
        let text = digest.value.trim();
        let problem = if text.is_empty() {
            Some("is empty".to_string())
        } else if let Some(bad) = text.chars().find(|c| !c.is_ascii_hexdigit()) {
            Some(format!("contains `{bad}`, which is not a hex digit"))
        } else if text.len() != 128 {
            Some(format!(
                "is {} hex characters long, but a sha512 digest has 128{}",
                text.len(),
                if text.len() == 64 {
                    " (64 is the length of a sha256)"
                } else {
                    ""
                }
            ))
        } else {
            None
        };
        match problem {
            Some(problem) => v.error(
                Some(digest.pos),
                None,
                format!("keadm.download.sha512.{arch} {problem}"),
                format!(
                    "write the sha512 of keadm-{version}-linux-{arch}.tar.gz: the content of the release's checksum_keadm-{version}-linux-{arch}.tar.gz.txt, or the output of `sha512sum` on a tarball you trust"
                ),
            ),
            None => {
                pins.insert(
                    arch,
                    PinnedDigest {
                        digest: text.to_ascii_lowercase(),
                        pos: digest.pos,
                    },
                );
            }
        }
    }
    pins
}

fn collect_auth_secrets(ssh: &SshSpec, out: &mut Vec<Secret>) {
    match &ssh.auth {
        AuthSpec::Password(p) => out.push(p.clone()),
        AuthSpec::PrivateKey {
            passphrase: Some(p),
            ..
        } => out.push(p.clone()),
        _ => {}
    }
    if let Some(jump) = &ssh.proxy_jump {
        collect_auth_secrets(jump, out);
    }
}

struct EnvLookup<'a> {
    args: &'a BTreeMap<String, String>,
    env: &'a dyn Environment,
}

impl Lookup for EnvLookup<'_> {
    fn args(&self) -> &BTreeMap<String, String> {
        self.args
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.var(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    struct FakeEnv;
    impl Environment for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            (name == "PW").then(|| "from-env".to_string())
        }
        fn home(&self) -> Option<PathBuf> {
            Some(PathBuf::from("/home/op"))
        }
        fn current_dir(&self) -> PathBuf {
            PathBuf::from("/work/here")
        }
    }

    fn check(text: &str) -> (Option<Config>, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let raw = load::read(text, &mut diags).unwrap();
        let config = validate(raw, Path::new("c.yaml"), &FakeEnv, &mut diags);
        (config, diags)
    }

    const GOOD: &str = "keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64]\n  cmdTplArgs:\n    cmd: join\nnodes:\n- nodeName: a\n  keadmCmd: '{{.cmd}} --edgenode-name=a'\n  ssh:\n    ip: 10.0.0.1\n    username: root\n    auth:\n      type: password\n      passwordAuth:\n        passwordEnv: PW\n";

    #[test]
    fn good_config_validates() {
        let (config, diags) = check(GOOD);
        assert!(diags.is_empty(), "{diags:?}");
        let config = config.unwrap();
        assert_eq!(config.max_run_num, 5);
        assert_eq!(config.nodes[0].command, "join --edgenode-name=a");
        assert_eq!(
            config.nodes[0].ssh.auth,
            AuthSpec::Password(Secret::new("from-env"))
        );
        assert_eq!(config.nodes[0].secrets, vec![Secret::new("from-env")]);
    }

    #[test]
    fn all_problems_are_reported_together() {
        let text = "keadm:\n  keadmVersion: \"\"\nnodes:\n- nodeName: a\n  keadmCmd: \"\"\n  ssh:\n    ip: \"\"\n    username: root\n    port: 70000\n    auth:\n      type: Password\n- nodeName: a\n  keadmCmd: join\nmaxRunNum: -1\n";
        let (config, diags) = check(text);
        assert!(config.is_none());
        let msgs: Vec<String> = diags
            .iter()
            .map(|d| d.render(Path::new("c.yaml")))
            .collect();
        let all = msgs.join("\n");
        for needle in [
            "keadmVersion is empty",
            "keadmCmd is empty",
            "ssh.ip is empty",
            "outside 1..65535",
            "`Password`, which is not an auth type",
            "lower case",
            "already used by node 1",
            "no ssh block",
            "cannot be negative",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
    }

    #[test]
    fn duplicate_edgenode_names_are_errors() {
        let text = GOOD.to_string()
            + "- nodeName: b\n  keadmCmd: 'join --edgenode-name=a'\n  ssh:\n    ip: 10.0.0.2\n    username: root\n    auth:\n      type: agent\n";
        let (_, diags) = check(&text);
        assert!(
            diags.iter().any(|d| d
                .message
                .contains("--edgenode-name=a is also used by node 1")),
            "{diags:?}"
        );
    }

    #[test]
    fn keadm_bin_dir_everywhere_needs_no_version() {
        let text = GOOD.replace(
            "  keadmVersion: v1.23.1\n",
            "  keadmBinDir: /usr/local/bin\n",
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{diags:?}");
        assert!(!config.unwrap().needs_staging());
    }

    #[test]
    fn sha512_pins_are_read_in_any_case_and_kept_lowercase() {
        let text = GOOD.replace(
            "  keadmVersion: v1.23.1\n",
            &format!(
                "  keadmVersion: v1.23.1\n  download:\n    sha512:\n      arm: {}\n      amd64: '{}'\n",
                "AB".repeat(64),
                "cd".repeat(64)
            ),
        );
        let (config, diags) = check(&text);
        assert!(diags.is_empty(), "{diags:?}");
        let pins = config.unwrap().sha512_pins;
        assert_eq!(pins.len(), 2);
        assert_eq!(pins[&Arch::Arm].digest, "ab".repeat(64));
        assert_eq!(pins[&Arch::Arm].pos.line, 5);
        assert_eq!(pins[&Arch::Amd64].digest, "cd".repeat(64));
    }

    #[test]
    fn an_empty_sha512_pin_is_an_error_at_its_line() {
        let text = GOOD.replace(
            "  keadmVersion: v1.23.1\n",
            "  keadmVersion: v1.23.1\n  download:\n    sha512:\n      arm64:\n",
        );
        let (config, diags) = check(&text);
        assert!(config.is_none());
        let rendered: Vec<String> = diags
            .iter()
            .map(|d| d.render(Path::new("c.yaml")))
            .collect();
        assert!(
            rendered.iter().any(|d| d.starts_with("c.yaml:5:")
                && d.contains("keadm.download.sha512.arm64 is empty")),
            "{rendered:?}"
        );
    }
}
