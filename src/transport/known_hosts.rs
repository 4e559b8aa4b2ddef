//! Host-key checking against an OpenSSH known-hosts file.
//!
//! libssh2 parses and matches entries (plain and hashed); this module decides what a
//! result means under each [`HostKeyPolicy`] and appends new entries itself. It never
//! rewrites the file: libssh2's writer would drop comments and every line it cannot
//! parse (certificate authorities, security-key types), which belong to the user.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ssh2::{CheckResult, HashType, KnownHostFileKind, KnownHostKeyFormat, KnownHosts, Session};

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
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The fingerprint of the key the session's peer presented.
pub(super) fn session_fingerprint(session: &Session) -> String {
    session
        .host_key_hash(HashType::Sha256)
        .map(sha256_fingerprint)
        .unwrap_or_else(|| "an unknown key".to_string())
}

/// Checks the peer's host key under the spec's policy; under `AcceptNew` an unknown host
/// is recorded.
pub(super) fn verify(session: &Session, spec: &ConnectSpec) -> Result<(), TransportError> {
    if spec.host_key_policy == HostKeyPolicy::Off {
        return Ok(());
    }
    let endpoint = &spec.endpoint;
    let path = &spec.known_hosts;
    let Some((key, key_type)) = session.host_key() else {
        return Err(TransportError::Handshake {
            endpoint: endpoint.clone(),
            message: "the node presented no host key".to_string(),
            transient: false,
        });
    };
    let entry = host_entry(endpoint);
    let fingerprint = session_fingerprint(session);

    let known = load(session, path)?;
    match check(&known, &entry, key, path)? {
        Lookup::Same => return Ok(()),
        Lookup::Changed => return Err(changed(endpoint, &entry, fingerprint, path)),
        Lookup::Unknown if spec.host_key_policy == HostKeyPolicy::Strict => {
            return Err(TransportError::HostKeyUnknown {
                endpoint: endpoint.clone(),
                fingerprint,
                known_hosts: path.clone(),
            });
        }
        Lookup::Unknown => {}
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

    let known = load(session, path)?;
    match check(&known, &entry, key, path)? {
        Lookup::Same => return Ok(()),
        Lookup::Changed => return Err(changed(endpoint, &entry, fingerprint, path)),
        Lookup::Unknown => {}
    }
    let line = entry_line(
        session,
        &entry,
        key,
        KnownHostKeyFormat::from(key_type),
        path,
    )?;
    append_line(path, &line)?;
    log::info!(
        "Recorded the host key of {endpoint} ({fingerprint}) in {}",
        path.display()
    );
    // The lock is released when `lock` is dropped (closing the file releases it).
    drop(lock);
    Ok(())
}

enum Lookup {
    Same,
    Changed,
    Unknown,
}

fn check(
    known: &KnownHosts,
    entry: &str,
    key: &[u8],
    path: &Path,
) -> Result<Lookup, TransportError> {
    // `check` (port -1) matches the entry text exactly, as OpenSSH does. libssh2's
    // `check_port` would also accept a plain `host` line for any port, so a node on
    // port 2222 would be judged by the key of port 22 on the same address.
    match known.check(entry, key) {
        CheckResult::Match => Ok(Lookup::Same),
        CheckResult::Mismatch => Ok(Lookup::Changed),
        CheckResult::NotFound => Ok(Lookup::Unknown),
        CheckResult::Failure => Err(kh_error(
            path,
            "libssh2 could not check the host key".to_string(),
        )),
    }
}

fn changed(endpoint: &Endpoint, entry: &str, fingerprint: String, path: &Path) -> TransportError {
    TransportError::HostKeyChanged {
        endpoint: endpoint.clone(),
        host_entry: entry.to_string(),
        fingerprint,
        known_hosts: path.to_path_buf(),
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

/// Reads the file line by line. A missing file is an empty one. Lines libssh2 cannot
/// parse are skipped (and logged) rather than failing the whole file, which is what
/// `libssh2_knownhost_readfile` would do at the first such line.
fn load(session: &Session, path: &Path) -> Result<KnownHosts, TransportError> {
    let mut known = session.known_hosts().map_err(|e| {
        kh_error(
            path,
            format!("libssh2 cannot allocate a known-hosts list: {e}"),
        )
    })?;
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_string(&mut text)
                .map_err(|e| kh_error(path, format!("cannot read it: {e}")))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(known),
        Err(e) => return Err(kh_error(path, format!("cannot open it: {e}"))),
    }
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Err(e) = known.read_str(trimmed, KnownHostFileKind::OpenSSH) {
            log::debug!(
                "Skipping line {} of {}, which libssh2 cannot parse: {e}",
                number + 1,
                path.display()
            );
        }
    }
    Ok(known)
}

/// The OpenSSH line for a new entry, formatted by libssh2 so the key type name is right.
fn entry_line(
    session: &Session,
    entry: &str,
    key: &[u8],
    format: KnownHostKeyFormat,
    path: &Path,
) -> Result<String, TransportError> {
    let mut fresh = session.known_hosts().map_err(|e| {
        kh_error(
            path,
            format!("libssh2 cannot allocate a known-hosts list: {e}"),
        )
    })?;
    fresh
        .add(entry, key, "", format)
        .map_err(|e| kh_error(path, format!("libssh2 cannot format the new entry: {e}")))?;
    let hosts = fresh
        .hosts()
        .map_err(|e| kh_error(path, format!("libssh2 cannot list the new entry: {e}")))?;
    let host = hosts
        .first()
        .ok_or_else(|| kh_error(path, "libssh2 lost the new entry".to_string()))?;
    let line = fresh
        .write_string(host, KnownHostFileKind::OpenSSH)
        .map_err(|e| kh_error(path, format!("libssh2 cannot format the new entry: {e}")))?;
    Ok(line.trim_end().to_string())
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
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| kh_error(path, format!("cannot read it: {e}")))?;
    let sep = if text.is_empty() || text.ends_with('\n') {
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
}
