//! The run's relay keys: an ed25519 key per relayed payload, made for this run only and
//! held in memory, and its two halves as OpenSSH writes them (the private key file a
//! receiver's `ssh -i` reads, the public line a source's authorized_keys takes).

use openssl::pkey::PKey;

/// The run's relay key: an ed25519 key made for this run only, held in memory. The
/// private half goes to receivers in their script (deleted there after the fetch); the
/// public half into sources' authorized_keys, restricted to reading one file.
pub struct RelayKey {
    pub private_openssh: String,
    pub public_line: String,
}

impl RelayKey {
    /// A fresh key.
    pub fn generate(comment: &str) -> Result<RelayKey, openssl::error::ErrorStack> {
        let key = PKey::generate_ed25519()?;
        let public = key.raw_public_key()?;
        let seed = key.raw_private_key()?;
        Ok(RelayKey {
            private_openssh: openssh_private_key(&seed, &public, comment),
            public_line: format!("ssh-ed25519 {}", base64_of(&public_blob(&public))),
        })
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// SSH wire format: a string is its length (u32, big-endian) and its bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn public_blob(public: &[u8]) -> Vec<u8> {
    let mut blob = Vec::new();
    put_string(&mut blob, b"ssh-ed25519");
    put_string(&mut blob, public);
    blob
}

/// OpenSSH's own private key format (`openssh-key-v1`, unencrypted), which every OpenSSH
/// client reads: the public blob, then a private section of two equal check words, the
/// key (its private half is seed then public key) and the comment, padded 1, 2, 3... to
/// a multiple of 8.
fn openssh_private_key(seed: &[u8], public: &[u8], comment: &str) -> String {
    let check = fastrand::u32(..).to_be_bytes();
    let mut private = Vec::new();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    put_string(&mut private, b"ssh-ed25519");
    put_string(&mut private, public);
    put_string(&mut private, &[seed, public].concat());
    put_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while !private.len().is_multiple_of(8) {
        private.push(pad);
        pad += 1;
    }
    let mut body = b"openssh-key-v1\0".to_vec();
    put_string(&mut body, b"none");
    put_string(&mut body, b"none");
    put_string(&mut body, b"");
    body.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut body, &public_blob(public));
    put_string(&mut body, &private);
    let text = base64_of(&body);
    let mut out = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for chunk in text.as_bytes().chunks(70) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key OpenSSH itself reads: ssh-keygen derives the same public key from it.
    #[test]
    fn the_relay_key_is_one_openssh_reads() {
        let key = RelayKey::generate("keadm-batch-relay-test").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, &key.private_openssh).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let Ok(out) = std::process::Command::new("ssh-keygen")
            .args(["-y", "-f"])
            .arg(&path)
            .output()
        else {
            panic!("ssh-keygen is needed for this test (openssh-client)");
        };
        assert!(out.status.success(), "{out:?}");
        let derived = String::from_utf8_lossy(&out.stdout);
        assert!(
            derived.starts_with(&format!("{} ", key.public_line)),
            "{derived} against {}",
            key.public_line
        );
    }
}
