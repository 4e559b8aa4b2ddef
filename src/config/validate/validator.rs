//! The [`Validator`]: where every rule reports, and the rules for single fields that nodes
//! and the run-wide defaults share (durations, retries, host-key policy, remoteDir,
//! secrets, local paths). Each rule reports its problem and returns `None`, so validation
//! goes on and every problem of the file is found in one pass.

use std::path::PathBuf;

use crate::config::copy_from::Listings;
use crate::config::diagnostic::{Diagnostic, Severity};
use crate::config::environment::{self, Environment};
use crate::config::model::{HostKeyPolicy, SITE_NAME_FIX, is_site_name};
use crate::config::schema::{Spanned, non_empty};
use crate::config::yaml::Pos;
use crate::redact::Secret;

/// Collects diagnostics while the config is read, with what the rules need from outside.
pub(super) struct Validator<'a> {
    diags: &'a mut Vec<Diagnostic>,
    env: &'a dyn Environment,
    /// copyFrom dirs already listed and hashed: a fleet usually shares one.
    pub(super) copy_dirs: Listings,
}

impl<'a> Validator<'a> {
    pub(super) fn new(diags: &'a mut Vec<Diagnostic>, env: &'a dyn Environment) -> Validator<'a> {
        Validator {
            diags,
            env,
            copy_dirs: Listings::default(),
        }
    }

    pub(super) fn env(&self) -> &'a dyn Environment {
        self.env
    }
}

impl Validator<'_> {
    pub(super) fn error(
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

    pub(super) fn warn(
        &mut self,
        pos: Option<Pos>,
        subject: Option<String>,
        message: impl Into<String>,
        fix: Option<String>,
    ) {
        self.diags
            .push(Diagnostic::warning(pos, subject, message.into(), fix));
    }

    /// A diagnostic made elsewhere, such as a template error with its own fix.
    pub(super) fn push(&mut self, diagnostic: Diagnostic) {
        self.diags.push(diagnostic);
    }

    /// How many errors (not warnings) were reported so far.
    pub(super) fn error_count(&self) -> usize {
        self.diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// Whether any error (not warning) was reported so far.
    pub(super) fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| d.severity == Severity::Error)
    }

    /// A local path as the config wrote it, made absolute (see [`environment::local_path`]).
    pub(super) fn local_path(&self, text: &str) -> PathBuf {
        environment::local_path(self.env, text)
    }

    pub(super) fn seconds(
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

    pub(super) fn retries(
        &mut self,
        field: &Option<Spanned<i64>>,
        subject: Option<String>,
    ) -> Option<u32> {
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

    pub(super) fn policy(
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

    /// `site`: a short name of letters, digits, `.`, `_` and `-` (it names the site in
    /// the console, the summary and `--dry-run`).
    pub(super) fn site(
        &mut self,
        field: &Option<Spanned<String>>,
        subject: Option<String>,
    ) -> Option<String> {
        let value = non_empty(field)?;
        let name = &value.value;
        if !is_site_name(name) {
            self.error(
                Some(value.pos),
                subject,
                format!("site `{name}` is not a site name"),
                SITE_NAME_FIX,
            );
            return None;
        }
        Some(name.clone())
    }

    pub(super) fn remote_dir(
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
    pub(super) fn secret(
        &mut self,
        inline: &Option<Spanned<String>>,
        env_name: &Option<Spanned<String>>,
        what: &str,
        subject: &str,
    ) -> Option<Secret> {
        if let Some(name) = non_empty(env_name) {
            return match self.env.var(&name.value) {
                Some(value) if !value.is_empty() => Some(Secret::new(value)),
                value => {
                    self.error(
                        Some(name.pos),
                        Some(subject.to_string()),
                        format!(
                            "the environment variable {} named by {what}Env is {}",
                            name.value,
                            if value.is_some() { "empty" } else { "not set" }
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
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::validate::tests::FakeEnv;

    fn at<T>(value: T) -> Option<Spanned<T>> {
        Some(Spanned::new(value, Pos { line: 4, col: 2 }))
    }

    #[test]
    fn field_rules_accept_good_values_and_report_bad_ones() {
        let mut diags = Vec::new();
        let mut v = Validator::new(&mut diags, &FakeEnv);
        assert_eq!(v.seconds(&at(600), "timeoutSeconds", None), Some(600));
        assert_eq!(v.seconds(&None, "timeoutSeconds", None), None);
        assert_eq!(v.retries(&at(0), None), Some(0));
        assert_eq!(
            v.remote_dir(&at("/srv/x//".into()), None).as_deref(),
            Some("/srv/x")
        );
        assert_eq!(v.remote_dir(&at("/".into()), None).as_deref(), Some("/"));
        assert_eq!(v.remote_dir(&at(String::new()), None), None);
        assert_eq!(
            v.policy(&at("strict".into()), None),
            Some(HostKeyPolicy::Strict)
        );
        assert!(!v.has_errors());
        assert_eq!(v.seconds(&at(0), "timeoutSeconds", None), None);
        assert_eq!(v.retries(&at(21), None), None);
        assert_eq!(v.remote_dir(&at("tmp/x".into()), None), None);
        assert_eq!(v.remote_dir(&at("/it's".into()), None), None);
        assert!(v.has_errors());
        let shown: Vec<String> = diags
            .iter()
            .map(|d| d.render(Path::new("c.yaml")))
            .collect();
        assert_eq!(
            shown,
            [
                "c.yaml:4:2: timeoutSeconds is 0, but it must be a positive number of seconds; set timeoutSeconds to a number of seconds such as 600, or remove it for the default.",
                "c.yaml:4:2: retries is 21, but it must be between 0 and 20; set retries to a small number such as 2.",
                "c.yaml:4:2: remoteDir `tmp/x` must be an absolute path on the node without quotes or newlines; write it as an absolute path such as /var/lib/keadm-batch.",
                "c.yaml:4:2: remoteDir `/it's` must be an absolute path on the node without quotes or newlines; write it as an absolute path such as /var/lib/keadm-batch.",
            ]
        );
    }

    #[test]
    fn a_secret_named_by_a_variable_must_be_set() {
        let mut diags = Vec::new();
        let mut v = Validator::new(&mut diags, &FakeEnv);
        let inline = at("inline".to_string());
        assert_eq!(
            v.secret(&inline, &at("PW".into()), "password", "node 1"),
            Some(Secret::new("from-env"))
        );
        assert_eq!(
            v.secret(&inline, &at(String::new()), "password", "node 1"),
            Some(Secret::new("inline"))
        );
        assert_eq!(
            v.secret(&inline, &at("NOPE".into()), "passphrase", "node 1"),
            None
        );
        assert_eq!(
            diags[0].render(Path::new("c.yaml")),
            "c.yaml:4:2: node 1: the environment variable NOPE named by passphraseEnv is not set; export NOPE=... before running, or write passphrase in the file."
        );
        // Set but empty is told apart from unset.
        assert_eq!(
            v_secret_error(&at("EMPTY_PW".into())),
            "c.yaml:4:2: node 1: the environment variable EMPTY_PW named by passwordEnv is empty; export EMPTY_PW=... before running, or write password in the file."
        );
    }

    fn v_secret_error(env_name: &Option<Spanned<String>>) -> String {
        let mut diags = Vec::new();
        let mut v = Validator::new(&mut diags, &FakeEnv);
        assert_eq!(v.secret(&None, env_name, "password", "node 1"), None);
        diags[0].render(Path::new("c.yaml"))
    }
}
