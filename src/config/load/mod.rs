//! Reading the config file into [`RawConfig`] with yaml.v2's leniency: YAML 1.1 booleans,
//! scalars of any type read into string fields as their literal text, Go's integer forms,
//! unknown keys accepted. Type mismatches are errors and unknown keys are warnings, every
//! one naming its line, column and field path.

mod keys;
mod scalar;

use std::collections::BTreeMap;
use std::path::Path;

use super::diagnostic::{Diagnostic, Severity};
use super::schema::*;
use super::yaml::{self, Node, Pos};
use keys::{
    AUTH_KEYS, DOWNLOAD_KEYS, JUMP_KEYS, KEADM_KEYS, NODE_KEYS, PASSWORD_KEYS, PRIVATE_KEY_KEYS,
    SITE_KEYS, SSH_KEYS, TAINT_KEYS, TOP_KEYS, unknown_key_advice,
};
pub use scalar::{parse_go_int, parse_yaml11_bool};

/// Parses `text` (the contents of `path`) into a [`RawConfig`]. Syntax errors end the
/// reading at once; type errors and warnings are all collected into `diags`.
/// `Ok(None)` is an empty or null document.
pub fn read(text: &str, diags: &mut Vec<Diagnostic>) -> Result<Option<RawConfig>, Diagnostic> {
    let (root, tree_warnings) = yaml::parse(text).map_err(|err| match err.kind {
        yaml::SyntaxKind::Invalid => Diagnostic {
            severity: Severity::Error,
            pos: Some(err.pos),
            subject: None,
            message: format!("the file is not valid YAML: {}", err.message),
            fix: Some("correct the YAML syntax at that line (indentation and `:` are the usual suspects); a value starting with `{{` must be quoted".into()),
        },
        // Valid YAML, but an alias bomb: the indentation advice would mislead.
        yaml::SyntaxKind::TooManyValues => Diagnostic {
            severity: Severity::Error,
            pos: Some(err.pos),
            subject: None,
            message: format!(
                "the file is refused because {}, which is far more than any fleet needs and would exhaust memory (an alias bomb)",
                err.message
            ),
            fix: Some("write the values out, or use fewer aliases that refer to other aliases; a config needs aliases only to share blocks such as ssh".into()),
        },
    })?;
    for w in tree_warnings {
        diags.push(Diagnostic::warning(Some(w.pos), None, w.message, None));
    }
    let root = match root {
        Some(root) if !root.is_null() => root,
        _ => return Ok(None),
    };
    let mut reader = Reader { diags };
    Ok(Some(reader.config(&root)))
}

/// A path for messages, e.g. `nodes[2].ssh.port`.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

struct Reader<'d> {
    diags: &'d mut Vec<Diagnostic>,
}

/// The entries of one mapping, looked up by key.
struct Fields<'n> {
    entries: &'n [(Node, Node)],
    path: String,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.key_text() == Some(key))
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    }

    fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }
}

impl Reader<'_> {
    fn error(&mut self, pos: Pos, message: String, fix: Option<String>) {
        self.diags
            .push(Diagnostic::error(Some(pos), None, message, fix));
    }

    /// Opens a mapping; keys outside `known` are warned about, with a suggestion.
    fn fields<'n>(&mut self, node: &'n Node, path: &str, known: &[&str]) -> Option<Fields<'n>> {
        match node {
            Node::Map { entries, .. } => {
                for (key, _) in entries {
                    let Some(name) = key.key_text() else {
                        self.diags.push(Diagnostic::warning(
                            Some(key.pos()),
                            None,
                            format!("{path} has a key that is not text; it is ignored"),
                            None,
                        ));
                        continue;
                    };
                    // `x-` keys hold YAML anchors for reuse, as in docker compose files.
                    let anchor_holder = path.is_empty() && name.starts_with("x-");
                    if !known.contains(&name) && !anchor_holder {
                        let (message, fix) = unknown_key_advice(path, name, known, entries);
                        self.diags
                            .push(Diagnostic::warning(Some(key.pos()), None, message, fix));
                    }
                }
                Some(Fields {
                    entries,
                    path: path.to_string(),
                })
            }
            other => {
                self.error(
                    other.pos(),
                    format!(
                        "{} must be a mapping of keys to values, but it is {}",
                        display_path(path),
                        other.kind()
                    ),
                    None,
                );
                None
            }
        }
    }

    /// A string field: any scalar, as its literal text (yaml.v2 reads `token: 123` as "123").
    fn string(&mut self, fields: &Fields, key: &str) -> Option<Spanned<String>> {
        let node = fields.get(key)?;
        match node {
            Node::Scalar { value, pos, .. } => Some(Spanned::new(value.clone(), *pos)),
            other => {
                self.error(
                    other.pos(),
                    format!(
                        "{} must be text, but it is {}",
                        fields.path(key),
                        other.kind()
                    ),
                    None,
                );
                None
            }
        }
    }

    /// An integer field, read as Go's yaml.v2 reads ints: `_` separators, `0x`, `0o`,
    /// `0b`, a leading `0` for octal, and floats truncated. Quoted numbers are refused,
    /// as yaml.v2 refuses them.
    fn int(&mut self, fields: &Fields, key: &str) -> Option<Spanned<i64>> {
        self.plain(fields, key, parse_go_int, "a whole number", "a number")
    }

    /// A boolean field with YAML 1.1's spellings (`yes`, `on`, `y`...), as yaml.v2 reads them.
    fn boolean(&mut self, fields: &Fields, key: &str) -> Option<Spanned<bool>> {
        self.plain(
            fields,
            key,
            parse_yaml11_bool,
            "true or false",
            "true or false",
        )
    }

    /// A field that must be a plain (unquoted) scalar that `parse` accepts; `expected`
    /// describes a valid value, `kind` the type, in the error messages.
    fn plain<T>(
        &mut self,
        fields: &Fields,
        key: &str,
        parse: fn(&str) -> Option<T>,
        expected: &str,
        kind: &str,
    ) -> Option<Spanned<T>> {
        let node = fields.get(key)?;
        let path = fields.path(key);
        match node {
            Node::Scalar {
                value,
                plain: true,
                pos,
            } => match parse(value) {
                Some(v) => Some(Spanned::new(v, *pos)),
                None => {
                    self.error(
                        *pos,
                        format!("{path} must be {expected}, but it is `{value}`"),
                        None,
                    );
                    None
                }
            },
            Node::Scalar { value, pos, .. } => {
                self.error(
                    *pos,
                    format!("{path} must be {kind}, but it is the quoted text \"{value}\""),
                    Some(format!("remove the quotes: `{key}: {value}`")),
                );
                None
            }
            other => {
                self.error(
                    other.pos(),
                    format!("{path} must be {kind}, but it is {}", other.kind()),
                    None,
                );
                None
            }
        }
    }

    fn config(&mut self, root: &Node) -> RawConfig {
        let mut config = RawConfig::default();
        let Some(top) = self.fields(root, "", TOP_KEYS) else {
            return config;
        };
        if let Some(keadm) = top.get("keadm") {
            config.keadm = self.keadm(keadm);
        }
        if let Some(nodes) = top.get("nodes") {
            config.nodes_pos = Some(nodes.pos());
            match nodes {
                Node::Seq { items, .. } => {
                    for (index, item) in items.iter().enumerate() {
                        config.nodes.push(self.node(item, index));
                    }
                }
                other => self.error(
                    other.pos(),
                    format!("nodes must be a list of nodes, but it is {}", other.kind()),
                    Some("write each node as a list item starting with `- nodeName: ...`".into()),
                ),
            }
        }
        config.max_run_num = self.int(&top, "maxRunNum");
        config.remote_dir = self.string(&top, "remoteDir");
        config.timeout_seconds = self.int(&top, "timeoutSeconds");
        config.retries = self.int(&top, "retries");
        config.connect_timeout_seconds = self.int(&top, "connectTimeoutSeconds");
        config.host_key_policy = self.string(&top, "hostKeyPolicy");
        config.site = self.string(&top, "site");
        config.kubeconfig = self.string(&top, "kubeconfig");
        config.placement = self.placement(&top);
        if let Some(sites) = top.get("sites") {
            config.sites = self.sites(sites);
        }
        config
    }

    /// `labels` and `taints` of the mapping `fields` (the top level, a site or a node).
    fn placement(&mut self, fields: &Fields) -> RawPlacement {
        let mut placement = RawPlacement::default();
        if let Some(labels) = fields.get("labels") {
            placement.labels = self.string_entries(labels, &fields.path("labels"));
        }
        if let Some(taints) = fields.get("taints") {
            let path = fields.path("taints");
            match taints {
                Node::Seq { items, .. } => {
                    for item in items {
                        if let Some(taint) = self.taint(item, &path) {
                            placement.taints.push(taint);
                        }
                    }
                }
                other => self.error(
                    other.pos(),
                    format!(
                        "{path} must be a list of taints, but it is {}",
                        other.kind()
                    ),
                    Some(
                        "write each taint as a list item such as `- dedicated=edge:NoSchedule`"
                            .into(),
                    ),
                ),
            }
        }
        placement
    }

    /// One `taints` item: `key=value:Effect`, or a mapping of `key`, `value`, `effect`.
    fn taint(&mut self, item: &Node, path: &str) -> Option<RawTaint> {
        match item {
            Node::Scalar { value, pos, .. } => {
                Some(RawTaint::Text(Spanned::new(value.clone(), *pos)))
            }
            Node::Map { .. } => {
                let fields = self.fields(item, path, TAINT_KEYS)?;
                Some(RawTaint::Fields {
                    pos: item.pos(),
                    key: self.string(&fields, "key"),
                    value: self.string(&fields, "value"),
                    effect: self.string(&fields, "effect"),
                })
            }
            other => {
                self.error(
                    other.pos(),
                    format!("{path} entries must be taints, but one is {}", other.kind()),
                    Some("write each taint as `key=value:Effect` or as `{key: ..., value: ..., effect: ...}`".into()),
                );
                None
            }
        }
    }

    /// `sites`: a mapping of site names to their `labels` and `taints`.
    fn sites(&mut self, node: &Node) -> Vec<RawSite> {
        let Node::Map { entries, .. } = node else {
            self.error(
                node.pos(),
                format!("sites must be a mapping of site names to their labels and taints, but it is {}", node.kind()),
                Some("write one key per site, such as `berlin-1: {labels: {zone: eu}}`".into()),
            );
            return Vec::new();
        };
        let mut sites = Vec::new();
        for (key, value) in entries {
            let Some(name) = key.key_text() else { continue };
            let name = Spanned::new(name.to_string(), key.pos());
            let placement = match value {
                v if v.is_null() => RawPlacement::default(),
                _ => match self.fields(value, &format!("sites.{}", name.value), SITE_KEYS) {
                    Some(fields) => self.placement(&fields),
                    None => RawPlacement::default(),
                },
            };
            sites.push(RawSite { name, placement });
        }
        sites
    }

    fn keadm(&mut self, node: &Node) -> KeadmSection {
        let mut section = KeadmSection::default();
        let Some(fields) = self.fields(node, "keadm", KEADM_KEYS) else {
            return section;
        };
        if let Some(download) = fields.get("download")
            && let Some(dl) = self.fields(download, "keadm.download", DOWNLOAD_KEYS)
        {
            section.download_enable = self.boolean(&dl, "enable");
            section.download_url = self.string(&dl, "url");
            if let Some(pins) = dl.get("sha512") {
                section.download_sha512 = self.string_entries(pins, "keadm.download.sha512");
            }
        }
        section.keadm_version = self.string(&fields, "keadmVersion");
        section.offline_package_dir = self.string(&fields, "offlinePackageDir");
        section.keadm_bin_dir = self.string(&fields, "keadmBinDir");
        if let Some(group) = fields.get("archGroup") {
            section.arch_group =
                self.text_list(group, "keadm.archGroup", "arch names", "[amd64, arm64]");
        }
        if let Some(images) = fields.get("extraImages") {
            section.extra_images = self.text_list(
                images,
                "keadm.extraImages",
                "image references",
                "[docker.io/kubeedge/edgemesh-agent:v1.15.0]",
            );
        }
        if let Some(args) = fields.get("cmdTplArgs") {
            section.cmd_tpl_args = self.string_map(args, "keadm.cmdTplArgs");
        }
        if let Some(images) = fields.get("offlineImages") {
            section.offline_images = self.offline_images(images);
        }
        section
    }

    /// A list of scalars, each as its literal text; `entries` names what they are and
    /// `example` shows a valid list, in the error messages.
    fn text_list(
        &mut self,
        node: &Node,
        path: &str,
        entries: &str,
        example: &str,
    ) -> Vec<Spanned<String>> {
        match node {
            Node::Seq { items, .. } => self.scalar_items(items, path, entries),
            other => {
                self.error(
                    other.pos(),
                    format!(
                        "{path} must be a list such as {example}, but it is {}",
                        other.kind()
                    ),
                    None,
                );
                Vec::new()
            }
        }
    }

    /// The `items` of the list at `path`, each a scalar read as its literal text; an item
    /// that is not is an error saying what the `entries` must be.
    fn scalar_items(&mut self, items: &[Node], path: &str, entries: &str) -> Vec<Spanned<String>> {
        let mut list = Vec::new();
        for item in items {
            match item {
                Node::Scalar { value, pos, .. } => list.push(Spanned::new(value.clone(), *pos)),
                other => self.error(
                    other.pos(),
                    format!(
                        "{path} entries must be {entries}, but one is {}",
                        other.kind()
                    ),
                    None,
                ),
            }
        }
        list
    }

    /// `keadm.offlineImages`: a mapping of arch names to one path or a list of paths.
    fn offline_images(&mut self, node: &Node) -> Option<Spanned<Vec<RawArchImages>>> {
        const PATH: &str = "keadm.offlineImages";
        let Node::Map { entries, .. } = node else {
            self.error(
                node.pos(),
                format!(
                    "{PATH} must be a mapping of arch names to image archives, but it is {}",
                    node.kind()
                ),
                Some("write one line per arch, such as `amd64: /srv/kit/amd64/images`".into()),
            );
            return None;
        };
        let mut arches = Vec::new();
        for (key, value) in entries {
            let Some(arch) = key.key_text() else { continue };
            let arch = Spanned::new(arch.to_string(), key.pos());
            let mut paths = Vec::new();
            match value {
                v if v.is_null() => {}
                Node::Scalar { value, pos, .. } => paths.push(Spanned::new(value.clone(), *pos)),
                Node::Seq { items, .. } => {
                    let path = format!("{PATH}.{}", arch.value);
                    paths.extend(self.scalar_items(items, &path, "paths"));
                }
                other => self.error(
                    other.pos(),
                    format!(
                        "{PATH}.{} must be a path or a list of paths, but it is {}",
                        arch.value,
                        other.kind()
                    ),
                    None,
                ),
            }
            arches.push(RawArchImages { arch, paths });
        }
        Some(Spanned::new(arches, node.pos()))
    }

    /// `map[string]string`: keys and scalar values as their literal text; a null value is "".
    fn string_map(&mut self, node: &Node, path: &str) -> BTreeMap<String, Spanned<String>> {
        self.string_entries(node, path)
            .into_iter()
            .map(|(key, value)| (key.value, value))
            .collect()
    }

    /// Like [`Reader::string_map`], in file order and with each key's position, for maps
    /// whose keys are judged too (`keadm.download.sha512`).
    fn string_entries(
        &mut self,
        node: &Node,
        path: &str,
    ) -> Vec<(Spanned<String>, Spanned<String>)> {
        let mut found = Vec::new();
        let Node::Map { entries, .. } = node else {
            self.error(
                node.pos(),
                format!(
                    "{path} must be a mapping of names to values, but it is {}",
                    node.kind()
                ),
                None,
            );
            return found;
        };
        for (key, value) in entries {
            let Some(name) = key.key_text() else { continue };
            let key = Spanned::new(name.to_string(), key.pos());
            match value {
                v if v.is_null() => found.push((key, Spanned::new(String::new(), v.pos()))),
                Node::Scalar { value, pos, .. } => {
                    found.push((key, Spanned::new(value.clone(), *pos)))
                }
                other => self.error(
                    other.pos(),
                    format!("{path}.{name} must be text, but it is {}", other.kind()),
                    None,
                ),
            }
        }
        found
    }

    fn node(&mut self, node: &Node, index: usize) -> RawNode {
        let path = format!("nodes[{index}]");
        let mut raw = RawNode {
            index,
            pos: node.pos(),
            ..RawNode::default()
        };
        let Some(fields) = self.fields(node, &path, NODE_KEYS) else {
            return raw;
        };
        raw.node_name = self.string(&fields, "nodeName");
        raw.keadm_cmd = self.string(&fields, "keadmCmd");
        raw.copy_from = self.string(&fields, "copyFrom");
        raw.keadm_bin_dir = self.string(&fields, "keadmBinDir");
        raw.remote_dir = self.string(&fields, "remoteDir");
        raw.timeout_seconds = self.int(&fields, "timeoutSeconds");
        raw.retries = self.int(&fields, "retries");
        raw.site = self.string(&fields, "site");
        raw.placement = self.placement(&fields);
        if let Some(ssh) = fields.get("ssh") {
            raw.ssh = self.ssh(ssh, &join(&path, "ssh"), SSH_KEYS);
        }
        raw
    }

    fn ssh(&mut self, node: &Node, path: &str, known: &[&str]) -> Option<RawSsh> {
        let fields = self.fields(node, path, known)?;
        let mut ssh = RawSsh {
            pos: node.pos(),
            ..RawSsh::default()
        };
        ssh.ip = self.string(&fields, "ip");
        ssh.username = self.string(&fields, "username");
        ssh.port = self.int(&fields, "port");
        ssh.host_key_policy = self.string(&fields, "hostKeyPolicy");
        if let Some(auth) = fields.get("auth") {
            ssh.auth = self.auth(auth, &fields.path("auth"));
        }
        if known.contains(&"sudo") {
            ssh.connect_timeout_seconds = self.int(&fields, "connectTimeoutSeconds");
            ssh.sudo = self.boolean(&fields, "sudo");
        }
        // A jump host may have its own (a chain, as `ssh -J a,b`); validation bounds
        // its length.
        if let Some(jump) = fields.get("proxyJump") {
            ssh.proxy_jump = self
                .ssh(jump, &fields.path("proxyJump"), JUMP_KEYS)
                .map(Box::new);
        }
        Some(ssh)
    }

    fn auth(&mut self, node: &Node, path: &str) -> Option<RawAuth> {
        let fields = self.fields(node, path, AUTH_KEYS)?;
        let mut auth = RawAuth {
            pos: node.pos(),
            auth_type: self.string(&fields, "type"),
            ..RawAuth::default()
        };
        if let Some(pw) = fields.get("passwordAuth")
            && let Some(pf) = self.fields(pw, &fields.path("passwordAuth"), PASSWORD_KEYS)
        {
            auth.password_auth = Some(RawPasswordAuth {
                pos: pw.pos(),
                password: self.string(&pf, "password"),
                password_env: self.string(&pf, "passwordEnv"),
            });
        }
        if let Some(pk) = fields.get("privateKeyAuth") {
            // keadm's docs once showed `privateKeyAuth.password` with `type: password`; the
            // generic unknown-key warning would not say what to do, so say it here.
            let pk_known: &[&str] = PRIVATE_KEY_KEYS;
            if let Some(pf) =
                self.fields_quiet_password(pk, &fields.path("privateKeyAuth"), pk_known)
            {
                auth.private_key_auth = Some(RawPrivateKeyAuth {
                    pos: pk.pos(),
                    private_key_path: self.string(&pf, "privateKeyPath"),
                    passphrase: self.string(&pf, "passphrase"),
                    passphrase_env: self.string(&pf, "passphraseEnv"),
                });
            }
        }
        Some(auth)
    }

    /// Like [`Reader::fields`], with a pointed message for `privateKeyAuth.password`.
    fn fields_quiet_password<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        known: &[&str],
    ) -> Option<Fields<'n>> {
        let before = self.diags.len();
        let fields = self.fields(node, path, known)?;
        for diag in &mut self.diags[before..] {
            if diag.message.starts_with(&format!("{path}.password ")) {
                diag.message = format!(
                    "{path}.password is not a keadm field, so the password written there is ignored"
                );
                diag.fix = Some("with `type: password`, write it as `passwordAuth:` then `password: ...` (keadm's published examples have this mistake)".into());
            }
        }
        Some(fields)
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "the config file"
    } else {
        path
    }
}

/// Reads the config file at `path`; a missing or unreadable file is an error naming it.
pub fn read_file(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => format!(
            "The config file {} does not exist; create one with `keadm-batch batch gen-config -o {}`.",
            path.display(),
            path.display()
        ),
        _ => format!("The config file {} could not be read: {err}.", path.display()),
    })?;
    String::from_utf8(bytes).map_err(|err| {
        format!(
            "The config file {} is not UTF-8 text (invalid byte at offset {}); save it as UTF-8.",
            path.display(),
            err.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> (RawConfig, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let config = read(text, &mut diags).unwrap().unwrap();
        (config, diags)
    }

    #[test]
    fn an_alias_bomb_is_refused_as_what_it_is() {
        let err = read(&yaml::tests::alias_bomb(), &mut Vec::new()).unwrap_err();
        let shown = err.render(std::path::Path::new("c.yaml"));
        assert!(
            shown.contains("is refused because the document expands to more than 2000000 values through aliases")
                && shown.contains("(an alias bomb)")
                && shown.contains("write the values out"),
            "{shown}"
        );
        assert!(!shown.contains("indentation"), "{shown}");
        let err = read("a: [1\n", &mut Vec::new()).unwrap_err();
        assert!(
            err.render(std::path::Path::new("c.yaml"))
                .contains("indentation"),
            "plain syntax errors keep their advice"
        );
    }

    #[test]
    fn yaml11_booleans_and_literal_text() {
        let (config, diags) = load(
            "keadm:\n  download:\n    enable: off\n  cmdTplArgs:\n    token: 123\n    flag: yes\nnodes:\n- nodeName: 1.10\n  keadmCmd: join\n",
        );
        assert!(diags.is_empty(), "{diags:?}");
        assert!(!config.keadm.download_enable.unwrap().value);
        assert_eq!(config.keadm.cmd_tpl_args["token"].value, "123");
        assert_eq!(config.keadm.cmd_tpl_args["flag"].value, "yes");
        assert_eq!(config.nodes[0].node_name.as_ref().unwrap().value, "1.10");
    }

    #[test]
    fn quoted_port_is_a_type_error_with_line() {
        let mut diags = Vec::new();
        read(
            "nodes:\n- nodeName: a\n  ssh:\n    port: \"22\"\n",
            &mut diags,
        )
        .unwrap();
        let err = diags
            .iter()
            .find(|d| d.severity == Severity::Error)
            .unwrap();
        assert_eq!(err.pos.unwrap().line, 4);
        assert!(err.message.contains("nodes[0].ssh.port"), "{}", err.message);
        assert!(err.message.contains("quoted"), "{}", err.message);
    }

    #[test]
    fn unknown_keys_warn_with_suggestions() {
        let (_, diags) = load(
            "keadm:\n  nodes: []\nnodes:\n- nodeName: a\n  keadmCMD: x\n  ssh:\n    auth:\n      type: password\n      privateKeyAuth:\n        password: p\n",
        );
        let text: Vec<String> = diags
            .iter()
            .map(|d| format!("{} {}", d.message, d.fix.clone().unwrap_or_default()))
            .collect();
        assert!(
            text.iter()
                .any(|t| t.contains("keadm.nodes") && t.contains("top level")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("keadmCMD") && t.contains("`keadmCmd`")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("privateKeyAuth.password") && t.contains("passwordAuth")),
            "{text:?}"
        );
    }
}
