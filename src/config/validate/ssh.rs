//! A node's `ssh` block (and each `proxyJump` inside it): address, user, port, auth,
//! host-key policy and connect timeout, into an [`SshSpec`].

use super::validator::Validator;
use crate::config::model::{AuthSpec, HostKeyPolicy, MAX_JUMP_HOPS, SshSpec};
use crate::config::schema::{RawPasswordAuth, RawPrivateKeyAuth, RawSsh, non_empty};
use crate::config::yaml::Pos;

impl Validator<'_> {
    /// The block at `path` (`ssh`, `ssh.proxyJump`...) of the node `subject`. A block
    /// without its own hostKeyPolicy takes `default_policy`, the run-wide one.
    pub(super) fn ssh(
        &mut self,
        raw: &RawSsh,
        subject: &str,
        path: &str,
        default_policy: Option<HostKeyPolicy>,
    ) -> Option<SshSpec> {
        let subj = || Some(subject.to_string());
        let host = self.host(raw, subject, path);
        let username = match &raw.username {
            Some(u) if !u.value.is_empty() => Some(u.value.clone()),
            other => {
                self.error(
                    other.as_ref().map(|s| s.pos).or(Some(raw.pos)),
                    subj(),
                    format!("{path}.username is empty"),
                    format!("set {path}.username, for example root"),
                );
                None
            }
        };
        let port = match &raw.port {
            None => Some(22),
            Some(p) if (1..=65535).contains(&p.value) => Some(p.value as u16),
            Some(p) => {
                self.error(
                    Some(p.pos),
                    subj(),
                    format!("{path}.port is {}, outside 1..65535", p.value),
                    "set the node's SSH port, usually 22, or remove the line",
                );
                None
            }
        };
        let auth = self.auth(raw, subject, path);
        let host_key_policy = self.policy(&raw.host_key_policy, subj()).or(default_policy);
        let connect_timeout_seconds = self.seconds(
            &raw.connect_timeout_seconds,
            &format!("{path}.connectTimeoutSeconds"),
            subj(),
        );
        // The last check: a jump host that fails fails the block, after its own reports.
        let proxy_jump = match &raw.proxy_jump {
            Some(jump) if path.matches("proxyJump").count() >= MAX_JUMP_HOPS => {
                self.error(
                    Some(jump.pos),
                    subj(),
                    format!("{path}.proxyJump makes a chain of more than {MAX_JUMP_HOPS} jump hosts"),
                    format!(
                        "reach the node through at most {MAX_JUMP_HOPS} jump hosts (each proxyJump inside the one before)"
                    ),
                );
                return None;
            }
            Some(jump) => {
                let path = format!("{path}.proxyJump");
                Some(Box::new(self.ssh(jump, subject, &path, default_policy)?))
            }
            None => None,
        };
        Some(SshSpec {
            host: host?,
            port: port?,
            username: username?,
            auth: auth?,
            connect_timeout_seconds,
            host_key_policy,
            sudo: raw.sudo.as_ref().map(|s| s.value),
            proxy_jump,
        })
    }

    /// `ip`, without the brackets keadm needs around IPv6 addresses (both forms work).
    fn host(&mut self, raw: &RawSsh, subject: &str, path: &str) -> Option<String> {
        let subj = || Some(subject.to_string());
        match &raw.ip {
            Some(ip) if !ip.value.trim().is_empty() => {
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
                    return None;
                }
                Some(host)
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
                None
            }
        }
    }

    fn auth(&mut self, raw: &RawSsh, subject: &str, path: &str) -> Option<AuthSpec> {
        let Some(auth) = &raw.auth else {
            self.error(
                Some(raw.pos),
                Some(subject.to_string()),
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
            "password" => match &auth.password_auth {
                Some(pw) => self.password_auth(pw, subject, path),
                None => {
                    let hint = if auth.private_key_auth.is_some() {
                        " (a password written under privateKeyAuth is ignored)"
                    } else {
                        ""
                    };
                    self.error(
                        type_pos,
                        Some(subject.to_string()),
                        format!(
                            "{path}.auth.type is password but there is no passwordAuth block{hint}"
                        ),
                        "add `passwordAuth:` with `password: ...` or `passwordEnv: VAR` under auth",
                    );
                    None
                }
            },
            "privateKey" => match &auth.private_key_auth {
                Some(pk) => self.private_key_auth(pk, subject, path),
                None => {
                    self.error(
                        type_pos,
                        Some(subject.to_string()),
                        format!(
                            "{path}.auth.type is privateKey but there is no privateKeyAuth block"
                        ),
                        "add `privateKeyAuth:` with `privateKeyPath: ~/.ssh/id_ed25519` under auth",
                    );
                    None
                }
            },
            "agent" => Some(AuthSpec::Agent),
            other => {
                self.unknown_auth_type(other, type_pos, subject, path);
                None
            }
        }
    }

    fn password_auth(
        &mut self,
        pw: &RawPasswordAuth,
        subject: &str,
        path: &str,
    ) -> Option<AuthSpec> {
        match self.secret(&pw.password, &pw.password_env, "password", subject) {
            Some(s) if !s.is_empty() => Some(AuthSpec::Password(s)),
            // An unset variable was reported by `secret`.
            Some(_) | None if non_empty(&pw.password_env).is_some() => None,
            _ => {
                self.error(
                    pw.password.as_ref().map(|p| p.pos).or(Some(pw.pos)),
                    Some(subject.to_string()),
                    format!("{path}.auth.passwordAuth.password is empty"),
                    "write the password, or better, set passwordEnv to the name of an environment variable that holds it",
                );
                None
            }
        }
    }

    fn private_key_auth(
        &mut self,
        pk: &RawPrivateKeyAuth,
        subject: &str,
        path: &str,
    ) -> Option<AuthSpec> {
        let Some(key_path) = non_empty(&pk.private_key_path) else {
            self.error(
                pk.private_key_path.as_ref().map(|p| p.pos).or(Some(pk.pos)),
                Some(subject.to_string()),
                format!("{path}.auth.privateKeyAuth.privateKeyPath is empty"),
                "set it to the private key file on this machine, such as ~/.ssh/id_ed25519",
            );
            return None;
        };
        let resolved = self.local_path(&key_path.value);
        if !resolved.is_file() {
            self.error(
                Some(key_path.pos),
                Some(subject.to_string()),
                format!(
                    "the private key {} does not exist or is not a file",
                    resolved.display()
                ),
                "check privateKeyPath (relative paths start from the current directory, as in keadm)",
            );
            return None;
        }
        let passphrase = self.secret(&pk.passphrase, &pk.passphrase_env, "passphrase", subject);
        Some(AuthSpec::PrivateKey {
            path: resolved,
            passphrase: passphrase.filter(|p| !p.is_empty()),
        })
    }

    /// `type` is none of password, privateKey, agent: say which spelling was meant.
    fn unknown_auth_type(
        &mut self,
        written: &str,
        type_pos: Option<Pos>,
        subject: &str,
        path: &str,
    ) {
        let shown = if written.is_empty() {
            "empty".to_string()
        } else {
            format!("`{written}`")
        };
        let fix = match written.to_ascii_lowercase().as_str() {
            "password" => "write `password` in lower case, as keadm requires",
            "privatekey" | "private_key" | "key" => "write `privateKey` exactly",
            _ => "use password, privateKey, or agent",
        };
        self.error(
            type_pos,
            Some(subject.to_string()),
            format!("{path}.auth.type is {shown}, which is not an auth type"),
            fix,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::model::{AuthSpec, HostKeyPolicy, MAX_JUMP_HOPS};
    use crate::config::validate::tests::{GOOD, check, rendered};

    /// GOOD with its node's ssh block replaced by `ssh` (indented as a node field).
    fn with_ssh(ssh: &str) -> String {
        let start = GOOD.find("  ssh:\n").unwrap();
        format!("hostKeyPolicy: strict\n{}{ssh}", &GOOD[..start])
    }

    #[test]
    fn brackets_are_optional_and_a_jump_host_inherits_the_run_wide_policy() {
        let (config, diags) = check(&with_ssh(
            "  ssh:\n    ip: '[fd00::7]'\n    username: u\n    port: 2222\n    hostKeyPolicy: off\n    auth:\n      type: agent\n    proxyJump:\n      ip: bastion\n      username: j\n      auth:\n        type: agent\n",
        ));
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let ssh = &config.unwrap().nodes[0].ssh;
        assert_eq!((ssh.host.as_str(), ssh.port), ("fd00::7", 2222));
        assert_eq!(ssh.host_key_policy, Some(HostKeyPolicy::Off));
        let jump = ssh.proxy_jump.as_deref().unwrap();
        assert_eq!((jump.host.as_str(), jump.port), ("bastion", 22));
        assert_eq!(jump.host_key_policy, Some(HostKeyPolicy::Strict));
        assert_eq!(jump.auth, AuthSpec::Agent);
    }

    #[test]
    fn a_broken_jump_host_fails_the_node_under_its_own_path() {
        let (config, diags) = check(&with_ssh(
            "  ssh:\n    ip: 10.0.0.1\n    username: u\n    auth:\n      type: agent\n    proxyJump:\n      username: j\n      port: 0\n      auth:\n        type: agent\n",
        ));
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:16:7: node 1 \"a\": ssh.proxyJump.ip is empty; set ssh.proxyJump.ip to the node's IP address or host name.\n\
             c.yaml:17:13: node 1 \"a\": ssh.proxyJump.port is 0, outside 1..65535; set the node's SSH port, usually 22, or remove the line."
        );
    }

    /// `depth` jump hosts, each inside the one before, as YAML under the node's `ssh`.
    fn chain(depth: usize) -> String {
        let mut yaml =
            "  ssh:\n    ip: 10.0.0.1\n    username: u\n    auth:\n      type: agent\n".to_string();
        for hop in 1..=depth {
            let pad = "  ".repeat(hop + 1);
            yaml += &format!(
                "{pad}proxyJump:\n{pad}  ip: hop{hop}\n{pad}  username: j{hop}\n{pad}  auth:\n{pad}    type: agent\n"
            );
        }
        yaml
    }

    #[test]
    fn a_jump_host_may_have_its_own_up_to_four_hops() {
        let (config, diags) = check(&with_ssh(&chain(MAX_JUMP_HOPS)));
        assert!(diags.is_empty(), "{}", rendered(&diags));
        let ssh = &config.unwrap().nodes[0].ssh;
        let hops: Vec<(&str, &str)> =
            std::iter::successors(ssh.proxy_jump.as_deref(), |j| j.proxy_jump.as_deref())
                .map(|j| (j.host.as_str(), j.username.as_str()))
                .collect();
        assert_eq!(
            hops,
            [
                ("hop1", "j1"),
                ("hop2", "j2"),
                ("hop3", "j3"),
                ("hop4", "j4")
            ]
        );
    }

    #[test]
    fn a_chain_of_five_jump_hosts_is_refused_at_the_fifth() {
        let (config, diags) = check(&with_ssh(&chain(MAX_JUMP_HOPS + 1)));
        assert!(config.is_none());
        assert_eq!(
            rendered(&diags),
            "c.yaml:36:15: node 1 \"a\": ssh.proxyJump.proxyJump.proxyJump.proxyJump.proxyJump makes a chain of more than 4 jump hosts; reach the node through at most 4 jump hosts (each proxyJump inside the one before)."
        );
    }

    #[test]
    fn every_field_of_a_block_is_judged_in_one_pass() {
        let (config, diags) = check(&with_ssh(
            "  ssh:\n    ip: 'a b'\n    username: ''\n    connectTimeoutSeconds: 0\n    hostKeyPolicy: ask\n    auth:\n      type: PrivateKey\n",
        ));
        assert!(config.is_none());
        let all = rendered(&diags);
        for needle in [
            "c.yaml:11:9: node 1 \"a\": ssh.ip `a b` contains white space; write only the address or host name.",
            "c.yaml:12:15: node 1 \"a\": ssh.username is empty; set ssh.username, for example root.",
            "ssh.connectTimeoutSeconds is 0, but it must be a positive number of seconds",
            "hostKeyPolicy is `ask`, which is not a policy",
            "ssh.auth.type is `PrivateKey`, which is not an auth type; write `privateKey` exactly.",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
    }

    #[test]
    fn auth_blocks_must_match_their_type() {
        let (_, diags) = check(&with_ssh(
            "  ssh:\n    ip: h\n    username: u\n    auth:\n      type: password\n      privateKeyAuth:\n        privateKeyPath: /nonexistent/key\n",
        ));
        assert!(
            rendered(&diags).contains("ssh.auth.type is password but there is no passwordAuth block (a password written under privateKeyAuth is ignored)"),
            "{}",
            rendered(&diags)
        );
        let (_, diags) = check(&with_ssh(
            "  ssh:\n    ip: h\n    username: u\n    auth:\n      type: privateKey\n      privateKeyAuth:\n        privateKeyPath: ./no-such-key\n",
        ));
        assert!(
            rendered(&diags)
                .contains("the private key /work/here/no-such-key does not exist or is not a file"),
            "{}",
            rendered(&diags)
        );
    }
}
