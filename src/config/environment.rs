//! What validation reads from the outside world besides the config file: environment
//! variables (for `passwordEnv`, `{{env "NAME"}}`...), the home directory and the current
//! directory (for local paths). Behind a trait, so tests can supply them.

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
    fn without_a_home_the_tilde_stays() {
        let env = Fixed { home: None };
        assert_eq!(local_path(&env, "~"), PathBuf::from("/work/here/~"));
        assert_eq!(local_path(&env, "~/k"), PathBuf::from("/work/here/~/k"));
    }
}
