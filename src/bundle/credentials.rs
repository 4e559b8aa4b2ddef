//! Registry credentials from the docker client's config file: `$DOCKER_CONFIG/config.json`,
//! else `~/.docker/config.json`, entry `auths.<registry>.auth` (base64 of `user:password`),
//! as `docker login` writes it. Credential helpers (`credsStore`, `credHelpers`) run
//! programs and are not used; an entry they manage has no `auth` here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;

use super::DOCKER_HUB_API;
use crate::image_ref::DOCKER_HUB;

/// A user name and password for one registry host.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Login {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({}, <password>)", self.user)
    }
}

/// The logins of a docker config file, by host.
#[derive(Debug, Default)]
pub(crate) struct Credentials {
    /// Host (`127.0.0.1:5000`, `docker.io`) to login.
    logins: HashMap<String, Login>,
    /// The file they came from, for messages.
    pub(crate) source: Option<PathBuf>,
}

impl Credentials {
    /// Where the docker client keeps its config, from `DOCKER_CONFIG` and `HOME`.
    pub(crate) fn default_path(
        docker_config: Option<PathBuf>,
        home: Option<PathBuf>,
    ) -> Option<PathBuf> {
        match docker_config.filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => Some(dir.join("config.json")),
            None => home.map(|h| h.join(".docker").join("config.json")),
        }
    }

    /// Reads `path`. A missing file means no credentials; an unreadable one is an error
    /// naming it, since the operator wrote it to be used.
    pub(crate) fn load(path: Option<&Path>) -> Result<Credentials, String> {
        let Some(path) = path else {
            return Ok(Credentials::default());
        };
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Credentials::default());
            }
            Err(e) => return Err(e.to_string()),
        };
        let doc: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| format!("it is not JSON ({e})"))?;
        let mut logins = HashMap::new();
        if let Some(auths) = doc.get("auths").and_then(|a| a.as_object()) {
            for (key, entry) in auths {
                let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) else {
                    continue;
                };
                let login = decode(auth)
                    .ok_or_else(|| format!("auths.{key}.auth is not base64 of user:password"))?;
                logins.insert(host_of(key), login);
            }
        }
        Ok(Credentials {
            logins,
            source: Some(path.to_path_buf()),
        })
    }

    /// The login for the registry host `host` (`host[:port]` as requests go to it).
    pub(crate) fn for_host(&self, host: &str) -> Option<&Login> {
        self.logins.get(&host_of(host))
    }
}

/// A config key or request host reduced to `host[:port]`: `https://index.docker.io/v1/`,
/// `registry-1.docker.io` and `docker.io` are all Docker Hub.
fn host_of(key: &str) -> String {
    let key = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | DOCKER_HUB_API => DOCKER_HUB.to_string(),
        _ => host,
    }
}

fn decode(auth: &str) -> Option<Login> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(Login {
        user: user.to_string(),
        password: password.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_are_found_by_host_whatever_the_key_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        std::fs::write(
            &path,
            format!(
                r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{}"}},
                   "127.0.0.1:5000": {{"auth": "{}"}}, "helper.example": {{}}}},
                   "credsStore": "desktop"}}"#,
                b64("hub:pw1"),
                b64("me:p:w")
            ),
        )
        .unwrap();
        let creds = Credentials::load(Some(&path)).unwrap();
        assert_eq!(creds.for_host("registry-1.docker.io").unwrap().user, "hub");
        assert_eq!(creds.for_host("docker.io").unwrap().password, "pw1");
        let local = creds.for_host("127.0.0.1:5000").unwrap();
        assert_eq!(
            (local.user.as_str(), local.password.as_str()),
            ("me", "p:w")
        );
        assert!(creds.for_host("helper.example").is_none());
        assert!(format!("{local:?}").contains("<password>"));

        assert!(
            Credentials::load(Some(&dir.path().join("none.json")))
                .unwrap()
                .for_host("docker.io")
                .is_none()
        );
        std::fs::write(&path, r#"{"auths": {"x": {"auth": "!!"}}}"#).unwrap();
        assert!(
            Credentials::load(Some(&path))
                .unwrap_err()
                .contains("auths.x.auth")
        );
    }

    #[test]
    fn docker_config_wins_over_home() {
        assert_eq!(
            Credentials::default_path(Some("/d".into()), Some("/h".into())),
            Some(PathBuf::from("/d/config.json"))
        );
        assert_eq!(
            Credentials::default_path(None, Some("/h".into())),
            Some(PathBuf::from("/h/.docker/config.json"))
        );
    }
}
