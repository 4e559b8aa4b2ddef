//! The run's relay keys: an ed25519 key per relayed payload, made for this run only and
//! held in memory, and its two halves as OpenSSH writes them (the private key file a
//! receiver's `ssh -i` reads, the public line a source's authorized_keys takes).

use openssl::pkey::PKey;
use ssh_key::private::{Ed25519Keypair, KeypairData};
use ssh_key::{LineEnding, PrivateKey, PublicKey};

/// The run's relay key: an ed25519 key made for this run only, held in memory. The
/// private half goes to receivers in their script (deleted there after the fetch); the
/// public half into sources' authorized_keys, restricted to reading one file.
pub struct RelayKey {
    pub private_openssh: String,
    pub public_line: String,
}

/// Why a relay key could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RelayKeyError {
    #[error("OpenSSL cannot make an ed25519 key: {0}")]
    Generate(#[from] openssl::error::ErrorStack),
    #[error("the ed25519 key cannot be written in OpenSSH's format: {0}")]
    Encode(#[from] ssh_key::Error),
}

impl RelayKey {
    /// A fresh key, made by OpenSSL (already linked for libssh2 and TLS, so no second
    /// curve or RNG stack) and written by `ssh-key` in OpenSSH's own formats: the private
    /// key file (`openssh-key-v1`, unencrypted) with `comment`, and the public line
    /// without one (the serve line appends the run's tag itself).
    pub fn generate(comment: &str) -> Result<RelayKey, RelayKeyError> {
        let key = PKey::generate_ed25519()?;
        let pair = Ed25519Keypair {
            public: key.raw_public_key()?.as_slice().try_into()?,
            private: key.raw_private_key()?.as_slice().try_into()?,
        };
        let public_line = PublicKey::from(pair.public).to_openssh()?;
        let private = PrivateKey::new(KeypairData::Ed25519(pair), comment)?;
        Ok(RelayKey {
            private_openssh: private.to_openssh(LineEnding::LF)?.to_string(),
            public_line,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Command, Output, Stdio};

    /// Runs ssh-keygen with `args` in `dir`, `stdin` on its standard input.
    fn ssh_keygen(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let Ok(mut child) = Command::new("ssh-keygen")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            panic!("ssh-keygen is needed for this test (openssh-client)");
        };
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    /// `key`'s private half in the file `k` of a new directory, as `ssh -i` wants it.
    fn key_file(key: &RelayKey) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, &key.private_openssh).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        dir
    }

    /// A key OpenSSH itself reads: ssh-keygen derives the same public key from it, with
    /// the comment the key was made with.
    #[test]
    fn the_relay_key_is_one_openssh_reads() {
        let key = RelayKey::generate("keadm-batch-relay-test").unwrap();
        let dir = key_file(&key);
        let out = ssh_keygen(dir.path(), &["-y", "-f", "k"], b"");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{} keadm-batch-relay-test\n", key.public_line)
        );
    }

    /// The private half is the public line's own key, not only a file that carries that
    /// line (ssh-keygen -y reads an ed25519 file's public key without the secret): what
    /// it signs, the public line verifies.
    #[test]
    fn the_relay_key_signs_what_its_public_line_verifies() {
        let key = RelayKey::generate("keadm-batch-relay-test").unwrap();
        let dir = key_file(&key);
        let signed = ssh_keygen(
            dir.path(),
            &["-Y", "sign", "-f", "k", "-n", "file"],
            b"data",
        );
        assert!(signed.status.success(), "{signed:?}");
        let signers = format!("relay {}\n", key.public_line);
        std::fs::write(dir.path().join("signers"), signers).unwrap();
        std::fs::write(dir.path().join("data.sig"), &signed.stdout).unwrap();
        let verify = ["-Y", "verify", "-f", "signers", "-I", "relay", "-n", "file"];
        let verified = ssh_keygen(
            dir.path(),
            &[&verify[..], &["-s", "data.sig"]].concat(),
            b"data",
        );
        assert!(verified.status.success(), "{verified:?}");
    }
}
