//! The keys each mapping of the config knows, and the advice for a key it does not: the
//! intended key where it is obvious (a slip of case or spelling, a key one level up or
//! down).

use super::join;
use crate::config::yaml::Node;

pub(super) const TOP_KEYS: &[&str] = &[
    "keadm",
    "nodes",
    "maxRunNum",
    "remoteDir",
    "timeoutSeconds",
    "retries",
    "connectTimeoutSeconds",
    "hostKeyPolicy",
    "site",
    "kubeconfig",
    "labels",
    "taints",
    "sites",
];
pub(super) const SITE_KEYS: &[&str] = &["labels", "taints"];
pub(super) const TAINT_KEYS: &[&str] = &["key", "value", "effect"];
pub(super) const KEADM_KEYS: &[&str] = &[
    "download",
    "keadmVersion",
    "archGroup",
    "offlinePackageDir",
    "cmdTplArgs",
    "keadmBinDir",
    "offlineImages",
    "extraImages",
];
pub(super) const DOWNLOAD_KEYS: &[&str] = &["enable", "url", "sha512"];
pub(super) const NODE_KEYS: &[&str] = &[
    "nodeName",
    "keadmCmd",
    "copyFrom",
    "keadmBinDir",
    "ssh",
    "remoteDir",
    "timeoutSeconds",
    "retries",
    "site",
    "labels",
    "taints",
];
pub(super) const SSH_KEYS: &[&str] = &[
    "ip",
    "username",
    "port",
    "auth",
    "connectTimeoutSeconds",
    "hostKeyPolicy",
    "sudo",
    "proxyJump",
];
pub(super) const JUMP_KEYS: &[&str] = &[
    "ip",
    "port",
    "username",
    "auth",
    "hostKeyPolicy",
    "proxyJump",
];
pub(super) const AUTH_KEYS: &[&str] = &["type", "passwordAuth", "privateKeyAuth"];
pub(super) const PASSWORD_KEYS: &[&str] = &["password", "passwordEnv"];
pub(super) const PRIVATE_KEY_KEYS: &[&str] = &["privateKeyPath", "passphrase", "passphraseEnv"];

/// The warning for an unknown key, with the intended key where it is obvious.
pub(super) fn unknown_key_advice(
    path: &str,
    key: &str,
    known: &[&str],
    siblings: &[(Node, Node)],
) -> (String, Option<String>) {
    let full = join(path, key);
    let message = format!("{full} is not a known field, so it is ignored (keadm ignores it too)");
    let fix = match (path, key) {
        ("keadm", "nodes") => Some("`nodes` belongs at the top level, not under `keadm`: move it left so it lines up with `keadm:`".to_string()),
        (p, "arch") if p.starts_with("nodes[") && !p.contains('.') => {
            Some("remove it: keadm-batch detects each node's arch with `uname -m` (keadm dropped this field in v1.21)".to_string())
        }
        (p, "nodes") if p.starts_with("nodes[") => Some("a node cannot contain `nodes`; check the indentation".to_string()),
        _ => {
            // A key that belongs one level up or down is a common indentation slip.
            let sibling_keys: Vec<&str> = siblings.iter().filter_map(|(k, _)| k.key_text()).collect();
            suggest(key, known)
                .filter(|s| !sibling_keys.contains(s))
                .map(|s| format!("did you mean `{s}`?"))
                .or_else(|| elsewhere(key).map(|place| format!("`{key}` belongs under `{place}`; check the indentation")))
        }
    };
    (message, fix)
}

/// Where a known key lives when it is found at the wrong level.
fn elsewhere(key: &str) -> Option<&'static str> {
    Some(match key {
        "nodeName" | "keadmCmd" | "copyFrom" => "a `nodes` item",
        "ip" | "username" | "port" | "auth" => "a node's `ssh`",
        "keadmVersion" | "archGroup" | "download" | "offlinePackageDir" | "cmdTplArgs"
        | "offlineImages" | "extraImages" => "`keadm`",
        "sha512" => "`keadm.download`",
        "password" | "passwordEnv" => "`passwordAuth`",
        "privateKeyPath" => "`privateKeyAuth`",
        "maxRunNum" => "the top level",
        _ => return None,
    })
}

/// The known key closest to `key`: same letters in another case, or at most two edits away.
fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    if let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(key)) {
        return Some(k);
    }
    let lower = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::levenshtein(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 2 && *d < k.len() / 2 + 1)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(suggest("nodename", NODE_KEYS), Some("nodeName"));
        assert_eq!(suggest("keadmcmd", NODE_KEYS), Some("keadmCmd"));
        assert_eq!(suggest("usrname", SSH_KEYS), Some("username"));
        assert_eq!(suggest("zzz", SSH_KEYS), None);
    }

    #[test]
    fn suggestions_allow_two_edits_on_long_keys_only() {
        // Distances are counted in characters, not bytes, case-insensitively.
        assert_eq!(strsim::levenshtein("kitten", "sitting"), 3);
        assert_eq!(strsim::levenshtein("ssh", "sßh"), 1);
        assert_eq!(suggest("nodNme", NODE_KEYS), Some("nodeName"));
        assert_eq!(suggest("keadmCmdd", NODE_KEYS), Some("keadmCmd"));
        assert_eq!(suggest("pot", SSH_KEYS), Some("port"));
        assert_eq!(suggest("pt", SSH_KEYS), Some("port"));
        // Two edits on a two-letter key would match anything that short.
        assert_eq!(suggest("x", SSH_KEYS), None);
        assert_eq!(suggest("i", SSH_KEYS), Some("ip"));
        assert_eq!(suggest("usr", SSH_KEYS), None);
        assert_eq!(suggest("AUTH", SSH_KEYS), Some("auth"));
    }
}
