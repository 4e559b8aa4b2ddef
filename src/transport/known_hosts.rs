//! Host-key checking against an OpenSSH known-hosts file.
//!
//! We read the file ourselves ([`parse`]) rather than through libssh2, which ignores
//! `@revoked` and `@cert-authority` markers, wildcard and negated patterns and
//! upper-case names, and so would accept a revoked key or record a key for a host the
//! file already covers. This module decides what the file says about a presented key
//! under each [`HostKeyPolicy`], orders the host-key algorithms so that the node is
//! asked for a key type the file records, and appends new entries. It never rewrites
//! the file: comments and lines we cannot parse belong to the user.

mod parse;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ssh2::{HashType, MethodType, Session};

use self::parse::{Entry, HostMatch, Marker};
use super::{ConnectSpec, Endpoint, HostKeyPolicy, TransportError};

/// The known-hosts name of an endpoint, as OpenSSH writes it: `host` for port 22,
/// `[host]:port` otherwise.
pub fn host_entry(endpoint: &Endpoint) -> String {
    if endpoint.port == 22 {
        endpoint.host.clone()
    } else {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    }
}

/// `SHA256:<unpadded base64>`, the form `ssh-keygen -l` and `ssh` print.
pub fn sha256_fingerprint(digest: &[u8]) -> String {
    format!("SHA256:{}", base64_unpadded(digest))
}

fn base64_unpadded(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

/// The fingerprint of the key the session's peer presented.
pub(super) fn session_fingerprint(session: &Session) -> String {
    session
        .host_key_hash(HashType::Sha256)
        .map(sha256_fingerprint)
        .unwrap_or_else(|| "an unknown key".to_string())
}

/// Before the handshake: asks for the host-key types the file records for this node
/// first, as OpenSSH does, so a node with both an ed25519 and an ECDSA key is judged by
/// the one the file has rather than by libssh2's default order. Certificate types are
/// left out: libssh2 cannot verify host certificates, and a certificate blob would never
/// match a recorded plain key.
///
/// Returns what the file said, which [`verify`] judges the presented key by: the file is
/// read once per connection (and once more under the lock, only to record a new host).
pub(super) fn prefer_recorded_types(
    session: &Session,
    spec: &ConnectSpec,
) -> Result<Recorded, TransportError> {
    if spec.host_key_policy == HostKeyPolicy::Off {
        return Ok(Recorded(Vec::new()));
    }
    let entries = read(&spec.known_hosts)?;
    let recorded = recorded_types(&entries, &host_entry(&spec.endpoint));
    if let Ok(supported) = session.supported_algs(MethodType::HostKey) {
        let order = host_key_order(&supported, &recorded);
        if !order.is_empty()
            && let Err(e) = session.method_pref(MethodType::HostKey, &order.join(","))
        {
            log::debug!("libssh2 refused the host-key algorithm preference {order:?}: {e}");
        }
    }
    Ok(Recorded(entries))
}

/// The known-hosts file's entries as read before the handshake.
pub(super) struct Recorded(Vec<Entry>);

/// Checks the peer's host key under the spec's policy; under `AcceptNew` an unknown host
/// is recorded.
pub(super) fn verify(
    session: &Session,
    spec: &ConnectSpec,
    recorded: &Recorded,
) -> Result<(), TransportError> {
    if spec.host_key_policy == HostKeyPolicy::Off {
        return Ok(());
    }
    let endpoint = &spec.endpoint;
    let path = &spec.known_hosts;
    let Some((key, _)) = session.host_key() else {
        return Err(TransportError::Handshake {
            endpoint: endpoint.clone(),
            message: "the node presented no host key".to_string(),
            transient: false,
        });
    };
    let entry = host_entry(endpoint);
    let fingerprint = session_fingerprint(session);

    match judge(&recorded.0, &entry, key) {
        Verdict::Same => return Ok(()),
        Verdict::Unknown if spec.host_key_policy == HostKeyPolicy::Strict => {
            return Err(TransportError::HostKeyUnknown {
                endpoint: endpoint.clone(),
                fingerprint,
                known_hosts: path.clone(),
            });
        }
        Verdict::Unknown => {}
        refused => return Err(refusal(refused, spec, &entry, fingerprint)),
    }

    // Record it. Parallel workers may be doing the same for other hosts (or this one,
    // when a config lists a host twice), so the re-read, re-check and append happen
    // under one exclusive lock; appending keeps every other worker's lines.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir
        && !dir.exists()
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| kh_error(path, format!("cannot create its directory: {e}")))?;
    }
    let lock_path = lock_path(path);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| {
            kh_error(
                path,
                format!("cannot open the lock file {}: {e}", lock_path.display()),
            )
        })?;
    lock.lock()
        .map_err(|e| kh_error(path, format!("cannot lock {}: {e}", lock_path.display())))?;

    match judge(&read(path)?, &entry, key) {
        Verdict::Same => return Ok(()),
        Verdict::Unknown => {}
        refused => return Err(refusal(refused, spec, &entry, fingerprint)),
    }
    append_line(path, &entry_line(&entry, key, path)?)?;
    log::info!(
        "Recorded the host key of {endpoint} ({fingerprint}) in {}",
        path.display()
    );
    // The lock is released when `lock` is dropped (closing the file releases it).
    drop(lock);
    Ok(())
}

/// What the file says about the key a host presents.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A `@revoked` line lists the key. It applies whatever host patterns that line has:
    /// a revoked key is compromised for every host (stricter than OpenSSH).
    Revoked { line: usize },
    /// A line for this host (plain, hashed or pattern) lists the key.
    Same,
    /// Lines name this host, plainly or hashed, and none lists the key.
    Changed,
    /// Only wildcard patterns with other keys, or `@cert-authority` lines, cover the
    /// host. Such a host is not unknown, and recording a key for it would override what
    /// the user wrote; the first covering line is reported.
    Covered { line: usize, by: Cover },
    /// No line covers the host.
    Unknown,
}

#[derive(Debug, PartialEq, Eq)]
enum Cover {
    /// The wildcard pattern that matched.
    Pattern(String),
    /// The host field of the `@cert-authority` line.
    CertAuthority(String),
}

fn judge(entries: &[Entry], lookup: &str, key: &[u8]) -> Verdict {
    if let Some(revoked) = entries
        .iter()
        .find(|e| e.marker == Marker::Revoked && e.key == key)
    {
        return Verdict::Revoked { line: revoked.line };
    }
    let mut named = false;
    let mut covered = None;
    for e in entries {
        let found = e.matches(lookup);
        match (e.marker, found) {
            (_, HostMatch::No) | (Marker::Revoked, _) => {}
            (Marker::Plain, _) if e.key == key => return Verdict::Same,
            (Marker::Plain, HostMatch::Exact) => named = true,
            (Marker::Plain, HostMatch::Pattern(p)) => {
                covered.get_or_insert((e.line, Cover::Pattern(p)));
            }
            (Marker::CertAuthority, _) => {
                covered.get_or_insert((e.line, Cover::CertAuthority(e.hosts_text.clone())));
            }
        }
    }
    if named {
        return Verdict::Changed;
    }
    match covered {
        Some((line, by)) => Verdict::Covered { line, by },
        None => Verdict::Unknown,
    }
}

/// The key types of the lines that can vouch for this host's key, in file order.
fn recorded_types(entries: &[Entry], lookup: &str) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for e in entries {
        if e.marker == Marker::Plain
            && e.matches(lookup) != HostMatch::No
            && !types.contains(&e.key_type)
        {
            types.push(e.key_type.clone());
        }
    }
    types
}

/// libssh2's supported host-key algorithms without certificate types, the ones whose key
/// type is recorded first, each group in libssh2's own order (OpenSSH does the same).
fn host_key_order<'a>(supported: &[&'a str], recorded: &[String]) -> Vec<&'a str> {
    let plain = supported
        .iter()
        .copied()
        .filter(|alg| !alg.contains("-cert-"));
    let (mut first, rest): (Vec<&str>, Vec<&str>) =
        plain.partition(|alg| recorded.iter().any(|t| t == key_type_of_algorithm(alg)));
    first.extend(rest);
    first
}

/// The known-hosts key type an algorithm verifies: the RSA SHA-2 signature algorithms
/// use `ssh-rsa` keys; every other algorithm is named after its key type.
fn key_type_of_algorithm(alg: &str) -> &str {
    match alg {
        "rsa-sha2-256" | "rsa-sha2-512" => "ssh-rsa",
        other => other,
    }
}

fn refusal(
    verdict: Verdict,
    spec: &ConnectSpec,
    entry: &str,
    fingerprint: String,
) -> TransportError {
    let endpoint = spec.endpoint.clone();
    let known_hosts = spec.known_hosts.clone();
    match verdict {
        Verdict::Revoked { line } => TransportError::HostKeyRevoked {
            endpoint,
            fingerprint,
            known_hosts,
            line,
        },
        Verdict::Covered { line, by } => TransportError::HostKeyNotVerifiable {
            endpoint,
            fingerprint,
            known_hosts,
            line,
            covered_by: match by {
                Cover::Pattern(p) => {
                    format!("the wildcard pattern `{p}`, whose key is a different one")
                }
                Cover::CertAuthority(hosts) => format!(
                    "a @cert-authority line (for `{hosts}`), and keadm-batch cannot verify host certificates because libssh2 does not support them"
                ),
            },
        },
        // `Same` and `Unknown` are not refusals; the callers handle them first.
        Verdict::Changed | Verdict::Same | Verdict::Unknown => TransportError::HostKeyChanged {
            endpoint,
            host_entry: entry.to_string(),
            fingerprint,
            known_hosts,
        },
    }
}

fn kh_error(path: &Path, message: String) -> TransportError {
    TransportError::KnownHosts {
        path: path.to_path_buf(),
        message,
    }
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The file's parseable lines. A missing file is an empty one; bytes that are not UTF-8
/// only make their own line unparseable.
fn read(path: &Path) -> Result<Vec<Entry>, TransportError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .map_err(|e| kh_error(path, format!("cannot read it: {e}")))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(kh_error(path, format!("cannot open it: {e}"))),
    }
    Ok(parse::parse(&String::from_utf8_lossy(&bytes)))
}

/// The OpenSSH line for a new entry: `<entry> <key type> <base64 key>`.
fn entry_line(entry: &str, key: &[u8], path: &Path) -> Result<String, TransportError> {
    let key_type = parse::key_type_of(key).ok_or_else(|| {
        kh_error(
            path,
            "the node's host key carries no key type name, so it cannot be recorded".to_string(),
        )
    })?;
    Ok(format!("{entry} {key_type} {}", parse::base64_encode(key)))
}

fn append_line(path: &Path, line: &str) -> Result<(), TransportError> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| kh_error(path, format!("cannot open it for appending: {e}")))?;
    // A file whose last line lacks its newline would otherwise be joined to ours.
    let mut text = Vec::new();
    file.read_to_end(&mut text)
        .map_err(|e| kh_error(path, format!("cannot read it: {e}")))?;
    let sep = if text.is_empty() || text.ends_with(b"\n") {
        ""
    } else {
        "\n"
    };
    file.write_all(format!("{sep}{line}\n").as_bytes())
        .map_err(|e| kh_error(path, format!("cannot append to it: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_without_padding() {
        assert_eq!(base64_unpadded(b""), "");
        assert_eq!(base64_unpadded(b"f"), "Zg");
        assert_eq!(base64_unpadded(b"fo"), "Zm8");
        assert_eq!(base64_unpadded(b"foo"), "Zm9v");
        assert_eq!(base64_unpadded(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn host_entry_brackets_non_default_ports() {
        assert_eq!(host_entry(&Endpoint::new("10.0.0.1", 22)), "10.0.0.1");
        assert_eq!(host_entry(&Endpoint::new("::1", 2222)), "[::1]:2222");
        assert_eq!(host_entry(&Endpoint::new("::1", 22)), "::1");
    }

    use self::parse::tests::key_text;

    const KEY_A: &[u8] = b"key A";
    const KEY_B: &[u8] = b"key B";

    fn ed(body: &[u8]) -> String {
        key_text("ssh-ed25519", body)
    }

    fn presented(body: &[u8]) -> Vec<u8> {
        parse::tests::blob("ssh-ed25519", body)
    }

    fn judge_text(text: &str, lookup: &str, key: &[u8]) -> Verdict {
        judge(&parse::parse(text), lookup, &presented(key))
    }

    #[test]
    fn revoked_key_is_refused_for_any_host_even_beside_a_trusted_line() {
        let text = format!("h1 {a}\n@revoked other.example {a}\n", a = ed(KEY_A));
        assert_eq!(judge_text(&text, "h1", KEY_A), Verdict::Revoked { line: 2 });
        // Another key for the same host is judged as usual.
        assert_eq!(judge_text(&text, "h1", KEY_B), Verdict::Changed);
    }

    #[test]
    fn a_line_with_the_key_is_trusted_whether_plain_hashed_or_pattern() {
        let a = ed(KEY_A);
        assert_eq!(judge_text(&format!("H1 {a}\n"), "h1", KEY_A), Verdict::Same);
        assert_eq!(judge_text(&format!("h* {a}\n"), "h1", KEY_A), Verdict::Same);
        // Any line with the key will do, as in OpenSSH.
        let text = format!("h1 {}\nh* {a}\n", ed(KEY_B));
        assert_eq!(judge_text(&text, "h1", KEY_A), Verdict::Same);
    }

    #[test]
    fn a_named_host_with_other_keys_is_changed() {
        let text = format!("h1,h2 {}\n", ed(KEY_B));
        assert_eq!(judge_text(&text, "h2", KEY_A), Verdict::Changed);
        // A different key type recorded for the host is a changed key too (the
        // handshake asked for the recorded type first).
        let text = format!("h1 {}\n", key_text("ecdsa-sha2-nistp256", KEY_B));
        assert_eq!(judge_text(&text, "h1", KEY_A), Verdict::Changed);
        // A named line wins over a covering pattern line.
        let text = format!("h* {b}\nh1 {b}\n", b = ed(KEY_B));
        assert_eq!(judge_text(&text, "h1", KEY_A), Verdict::Changed);
    }

    #[test]
    fn a_host_covered_only_by_a_pattern_or_a_ca_is_not_unknown() {
        let b = ed(KEY_B);
        let text = format!("# x\n10.0.*,!10.0.0.9 {b}\n@cert-authority 10.* {b}\n");
        assert_eq!(
            judge_text(&text, "10.0.0.1", KEY_A),
            Verdict::Covered {
                line: 2,
                by: Cover::Pattern("10.0.*".to_string())
            }
        );
        // The negation takes 10.0.0.9 out of the pattern, not out of the CA line.
        assert_eq!(
            judge_text(&text, "10.0.0.9", KEY_A),
            Verdict::Covered {
                line: 3,
                by: Cover::CertAuthority("10.*".to_string())
            }
        );
        // A CA line naming the host exactly covers it as well.
        let text = format!("@cert-authority 10.0.0.1 {b}\n");
        assert!(matches!(
            judge_text(&text, "10.0.0.1", KEY_A),
            Verdict::Covered { line: 1, .. }
        ));
        assert_eq!(judge_text(&text, "10.0.0.2", KEY_A), Verdict::Unknown);
    }

    #[test]
    fn upper_case_names_are_the_same_host() {
        // The fleet's nodes are IP addresses, so case is tested here only.
        let text = format!("Edge-1.Example.COM {}\n", ed(KEY_B));
        assert_eq!(
            judge_text(&text, "edge-1.example.com", KEY_A),
            Verdict::Changed
        );
        assert_eq!(
            judge_text(&text, "edge-1.example.com", KEY_B),
            Verdict::Same
        );
    }

    #[test]
    fn unknown_when_no_line_covers_the_host() {
        let text = format!("h1 {a}\n[h2]:2222 {a}\n#h2 {a}\n", a = ed(KEY_A));
        assert_eq!(judge_text(&text, "h2", KEY_A), Verdict::Unknown);
        assert_eq!(judge_text("", "h2", KEY_A), Verdict::Unknown);
    }

    #[test]
    fn recorded_types_come_first_and_certificates_are_dropped() {
        // libssh2 1.11's order.
        let supported = [
            "ssh-ed25519-cert-v01@openssh.com",
            "ecdsa-sha2-nistp256-cert-v01@openssh.com",
            "rsa-sha2-512-cert-v01@openssh.com",
            "ssh-ed25519",
            "ecdsa-sha2-nistp256",
            "ecdsa-sha2-nistp384",
            "rsa-sha2-512",
            "rsa-sha2-256",
            "ssh-rsa",
        ];
        let text = format!(
            "h1 {}\nh* {}\n@cert-authority h1 {}\n@revoked h1 {}\nother {}\n",
            key_text("ssh-rsa", KEY_A),
            key_text("ecdsa-sha2-nistp384", KEY_A),
            key_text("ecdsa-sha2-nistp256", KEY_A),
            key_text("ecdsa-sha2-nistp256", KEY_B),
            key_text("ecdsa-sha2-nistp256", KEY_B),
        );
        let recorded = recorded_types(&parse::parse(&text), "h1");
        assert_eq!(recorded, ["ssh-rsa", "ecdsa-sha2-nistp384"]);
        assert_eq!(
            host_key_order(&supported, &recorded),
            [
                "ecdsa-sha2-nistp384",
                "rsa-sha2-512",
                "rsa-sha2-256",
                "ssh-rsa",
                "ssh-ed25519",
                "ecdsa-sha2-nistp256",
            ]
        );
        assert_eq!(
            host_key_order(&supported, &[]),
            [
                "ssh-ed25519",
                "ecdsa-sha2-nistp256",
                "ecdsa-sha2-nistp384",
                "rsa-sha2-512",
                "rsa-sha2-256",
                "ssh-rsa",
            ]
        );
    }

    #[test]
    fn new_entries_are_formatted_as_openssh_writes_them() {
        let key = presented(KEY_A);
        let line = entry_line("[::1]:2222", &key, Path::new("/kh")).unwrap();
        assert_eq!(line, format!("[::1]:2222 {}", ed(KEY_A)));
        assert!(entry_line("h", b"", Path::new("/kh")).is_err());
    }
}
