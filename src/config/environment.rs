//! What validation reads from the outside world besides the config file: environment
//! variables (for `passwordEnv`, `{{env "NAME"}}`...), the home directory and the current
//! directory (for local paths). Behind a trait, so tests can supply them.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The outside world validation depends on.
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

/// The environment `batch bundle` validates the config with. Bundling reads no secret, and
/// the connected machine it runs on usually has none of the site's, so a variable the
/// config reads (`passwordEnv`, `passphraseEnv` and `{{env "NAME"}}`, which the docs make
/// the place for secrets) that is unset or empty reads as a stand-in instead of failing
/// validation. The stand-in is a plain word (`unset-kubeedge-token` for `KUBEEDGE_TOKEN`)
/// that passes the checks a real value would; every other check stays. Which variables
/// were stood in for is kept ([`WithoutSecrets::stand_ins`]): the bundle refuses a keadmCmd
/// whose images depend on one.
pub struct WithoutSecrets<'a> {
    env: &'a dyn Environment,
    /// Variable name to its stand-in.
    stood_in: RefCell<BTreeMap<String, String>>,
}

/// A variable the config reads that was stood in for, and the text that went in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandIn {
    pub variable: String,
    pub value: String,
}

impl<'a> WithoutSecrets<'a> {
    pub fn new(env: &'a dyn Environment) -> WithoutSecrets<'a> {
        WithoutSecrets {
            env,
            stood_in: RefCell::new(BTreeMap::new()),
        }
    }

    /// The variables stood in for so far, by name.
    pub fn stand_ins(&self) -> Vec<StandIn> {
        self.stood_in
            .borrow()
            .iter()
            .map(|(variable, value)| StandIn {
                variable: variable.clone(),
                value: value.clone(),
            })
            .collect()
    }
}

impl Environment for WithoutSecrets<'_> {
    fn var(&self, name: &str) -> Option<String> {
        match self.env.var(name) {
            Some(value) if !value.is_empty() => Some(value),
            _ => {
                let stand_in = format!("unset-{}", name.to_ascii_lowercase().replace('_', "-"));
                self.stood_in
                    .borrow_mut()
                    .insert(name.to_string(), stand_in.clone());
                Some(stand_in)
            }
        }
    }
    fn home(&self) -> Option<PathBuf> {
        self.env.home()
    }
    fn current_dir(&self) -> PathBuf {
        self.env.current_dir()
    }
}

/// A path on this machine as the config wrote it, made absolute: `~` expands to the home
/// directory and relative paths resolve against the current directory, as keadm resolves
/// them.
pub fn local_path(env: &dyn Environment, text: &str) -> PathBuf {
    let expanded = if text == "~" {
        env.home().unwrap_or_else(|| PathBuf::from("~"))
    } else if let Some(rest) = text.strip_prefix("~/") {
        match env.home() {
            Some(home) => home.join(rest),
            None => PathBuf::from(text),
        }
    } else {
        PathBuf::from(text)
    };
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        env.current_dir().join(expanded)
    };
    // `./keys/id` shows as `/cwd/keys/id`, not `/cwd/./keys/id`.
    absolute.components().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed {
        home: Option<&'static str>,
    }

    impl Environment for Fixed {
        fn var(&self, _: &str) -> Option<String> {
            None
        }
        fn home(&self) -> Option<PathBuf> {
            self.home.map(PathBuf::from)
        }
        fn current_dir(&self) -> PathBuf {
            PathBuf::from("/work/here")
        }
    }

    #[test]
    fn local_paths_expand_the_home_and_resolve_against_the_current_dir() {
        let env = Fixed {
            home: Some("/home/op"),
        };
        let resolve = |text| local_path(&env, text);
        assert_eq!(resolve("~"), PathBuf::from("/home/op"));
        assert_eq!(resolve("~/.ssh/id"), PathBuf::from("/home/op/.ssh/id"));
        assert_eq!(resolve("./keys/id"), PathBuf::from("/work/here/keys/id"));
        assert_eq!(
            resolve("keys/../id"),
            PathBuf::from("/work/here/keys/../id")
        );
        assert_eq!(resolve("/etc/x"), PathBuf::from("/etc/x"));
        // `~user` is not expanded, by keadm either.
        assert_eq!(resolve("~op/x"), PathBuf::from("/work/here/~op/x"));
    }

    #[test]
    fn without_secrets_an_unset_variable_reads_as_a_stand_in_that_is_kept() {
        let env = Fixed {
            home: Some("/home/op"),
        };
        let without = WithoutSecrets::new(&env);
        assert_eq!(
            without.var("KUBEEDGE_TOKEN").as_deref(),
            Some("unset-kubeedge-token")
        );
        assert_eq!(without.home(), Some(PathBuf::from("/home/op")));
        assert_eq!(
            without.stand_ins(),
            [StandIn {
                variable: "KUBEEDGE_TOKEN".into(),
                value: "unset-kubeedge-token".into()
            }]
        );
    }

    #[test]
    fn without_a_home_the_tilde_stays() {
        let env = Fixed { home: None };
        assert_eq!(local_path(&env, "~"), PathBuf::from("/work/here/~"));
        assert_eq!(local_path(&env, "~/k"), PathBuf::from("/work/here/~/k"));
    }
}
