//! File digests, read in one pass with a fixed buffer.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

/// Size and sha256 (lowercase hex) of the file at `path`.
pub fn sha256_file(path: &Path) -> io::Result<(u64, String)> {
    sha256_reader(File::open(path)?)
}

/// Size and sha256 (lowercase hex) of everything `file` yields, such as a file inside a
/// tar archive.
pub fn sha256_reader(mut file: impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Why `text` is not a sha512 digest written in hex (128 hex characters, in any case), in
/// words that follow "it"; `None` when it is one.
pub fn sha512_hex_problem(text: &str) -> Option<String> {
    if text.is_empty() {
        Some("is empty".to_string())
    } else if let Some(bad) = text.chars().find(|c| !c.is_ascii_hexdigit()) {
        Some(format!("contains `{bad}`, which is not a hex digit"))
    } else if text.len() != 128 {
        Some(format!(
            "is {} hex characters long, but a sha512 digest has 128{}",
            text.len(),
            if text.len() == 64 {
                " (64 is the length of a sha256)"
            } else {
                ""
            }
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha256_of_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            super::sha256_file(&path).unwrap(),
            (
                3,
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".to_string()
            )
        );
    }

    #[test]
    fn a_sha512_in_hex_is_128_hex_characters_in_any_case() {
        assert_eq!(super::sha512_hex_problem(&"aB".repeat(64)), None);
        for (text, problem) in [
            ("", "is empty"),
            ("abg", "contains `g`, which is not a hex digit"),
            (
                "ab",
                "is 2 hex characters long, but a sha512 digest has 128",
            ),
        ] {
            assert_eq!(super::sha512_hex_problem(text).as_deref(), Some(problem));
        }
        assert!(
            super::sha512_hex_problem(&"a".repeat(64))
                .unwrap()
                .ends_with("(64 is the length of a sha256)")
        );
    }
}
