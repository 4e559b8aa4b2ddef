//! Every rule of docs/config.md, applied to a [`RawConfig`]: all problems are collected,
//! each naming the node, the field and the fix. The result is a [`Config`] whose values
//! are resolved (paths absolute, templates rendered, secrets read), so nothing later has
//! to look at the YAML again.
//!
//! [`validate`] runs the steps in file order; each concern has its own module:
//! [`validator`] (where problems are reported, and the rules for single fields), `node`
//! (one `nodes` item and the checks across nodes), `placement` (labels and taints, at the
//! top level, per site and per node), `ssh` (an ssh block and its auth) and
//! `staging` (the keadm section). They depend on this module's siblings (model,
//! environment, copy_from, schema, template), never the other way round.

mod node;
mod placement;
mod ssh;
mod staging;
mod validator;

use std::path::{Path, PathBuf};

use super::diagnostic::Diagnostic;
use super::model::{Config, DEFAULT_MAX_RUN_NUM};
use super::schema::{RawConfig, Spanned, non_empty};
// Where callers have always found them.
pub use super::environment::{Environment, ProcessEnvironment};
// `batch merge` holds the names shard runs recorded to the config's own rule.
use node::Defaults;
pub use node::NameProblem;
use validator::Validator;

/// Validates `raw`; problems go to `diags`. `None` when the config is empty or has errors.
pub fn validate(
    raw: Option<RawConfig>,
    path: &Path,
    env: &dyn Environment,
    diags: &mut Vec<Diagnostic>,
) -> Option<Config> {
    let mut v = Validator::new(diags, env);
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
    let max_run_num = max_run_num(&mut v, &raw.max_run_num);
    let defaults = Defaults::read(&mut v, &raw);
    let nodes = node::nodes(&mut v, &raw, &defaults);
    let staging = staging::staging(&mut v, &raw.keadm, needs_staging(&raw, &defaults));
    let sha512_pins = staging::sha512_pins(&mut v, &raw.keadm);
    let offline_images = staging::offline_images(&mut v, &raw.keadm);
    let extra_images = staging::extra_images(&mut v, &raw.keadm);
    let kubeconfig = kubeconfig(&mut v, &raw.kubeconfig);
    if v.has_errors() {
        return None;
    }
    Some(Config {
        path: path.to_path_buf(),
        keadm_version: staging.keadm_version,
        package_mode: staging.package_mode,
        arch_group: staging.arch_group,
        sha512_pins,
        offline_images,
        extra_images,
        max_run_num,
        nodes,
        remote_dir: defaults.remote_dir,
        timeout_seconds: defaults.timeout_seconds,
        retries: defaults.retries,
        connect_timeout_seconds: defaults.connect_timeout_seconds,
        host_key_policy: defaults.host_key_policy,
        kubeconfig,
    })
}

/// `kubeconfig`: a file that must exist here; what is in it is read (by the Kubernetes
/// client, as kubectl reads it) only when the run starts.
fn kubeconfig(v: &mut Validator, field: &Option<Spanned<String>>) -> Option<PathBuf> {
    let field = non_empty(field)?;
    let path = v.local_path(&field.value);
    if !path.is_file() {
        v.error(
            Some(field.pos),
            None,
            format!(
                "kubeconfig is {}, which is not a file on this machine",
                path.display()
            ),
            "give the path of a kubeconfig file (as kubectl's --kubeconfig takes), or remove kubeconfig to run without checking the cluster",
        );
        return None;
    }
    Some(path)
}

/// `maxRunNum`: absent or 0 is keadm's default; negative is an error (keadm crashes).
fn max_run_num(v: &mut Validator, field: &Option<Spanned<i64>>) -> usize {
    match field {
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
        Some(n) if n.value > MAX_RUN_NUM as i64 => {
            v.warn(
                Some(n.pos),
                None,
                format!(
                    "maxRunNum is {}, more than the {MAX_RUN_NUM} nodes keadm-batch processes at once; it is capped at {MAX_RUN_NUM}",
                    n.value
                ),
                Some(format!("set maxRunNum to {MAX_RUN_NUM} or less")),
            );
            MAX_RUN_NUM
        }
        Some(n) => n.value as usize,
    }
}

/// The most nodes processed at once: each worker is a thread with its own connection,
/// and `--max-run-num` takes 1 to this.
const MAX_RUN_NUM: usize = 10_000;

/// Whether some node has no keadmBinDir (its own or the global one), so a keadm binary
/// must be staged for it (keadm's rule).
fn needs_staging(raw: &RawConfig, defaults: &Defaults) -> bool {
    defaults.keadm_bin_dir.is_none()
        && raw
            .nodes
            .iter()
            .any(|n| non_empty(&n.keadm_bin_dir).is_none())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::arch::Arch;
    use crate::config::load;
    use crate::config::model::AuthSpec;
    use crate::redact::Secret;

    pub(super) struct FakeEnv;
    impl Environment for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            match name {
                "PW" => Some("from-env".to_string()),
                "EMPTY_PW" => Some(String::new()),
                _ => None,
            }
        }
        fn home(&self) -> Option<PathBuf> {
            Some(PathBuf::from("/home/op"))
        }
        fn current_dir(&self) -> PathBuf {
            PathBuf::from("/work/here")
        }
    }

    /// Validates `text` as `c.yaml` in [`FakeEnv`].
    pub(super) fn check(text: &str) -> (Option<Config>, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let raw = load::read(text, &mut diags).unwrap();
        let config = validate(raw, Path::new("c.yaml"), &FakeEnv, &mut diags);
        (config, diags)
    }

    /// Every diagnostic as the operator reads it, one per line.
    pub(super) fn rendered(diags: &[Diagnostic]) -> String {
        diags
            .iter()
            .map(|d| d.render(Path::new("c.yaml")))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// One valid node, `a` at 10.0.0.1, with its password from `$PW`.
    pub(super) const GOOD: &str = "keadm:\n  keadmVersion: v1.23.1\n  archGroup: [amd64]\n  cmdTplArgs:\n    cmd: join\nnodes:\n- nodeName: a\n  keadmCmd: '{{.cmd}} --edgenode-name=a'\n  ssh:\n    ip: 10.0.0.1\n    username: root\n    auth:\n      type: password\n      passwordAuth:\n        passwordEnv: PW\n";

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
    fn max_run_num_above_the_cap_is_capped_with_a_warning() {
        let (config, diags) = check(&format!("{GOOD}maxRunNum: 20000\n"));
        assert_eq!(config.unwrap().max_run_num, 10_000);
        assert_eq!(
            rendered(&diags),
            "c.yaml:16:12: maxRunNum is 20000, more than the 10000 nodes keadm-batch processes at once; it is capped at 10000; set maxRunNum to 10000 or less."
        );
        let (config, diags) = check(&format!("{GOOD}maxRunNum: 10000\n"));
        assert_eq!(config.unwrap().max_run_num, 10_000);
        assert!(diags.is_empty(), "{diags:?}");
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
