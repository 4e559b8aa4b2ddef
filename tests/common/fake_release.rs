//! Builds keadm release tarballs in memory, with the real layout:
//! `keadm-<ver>-linux-<arch>/{version, keadm/keadm}`.

use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256, Sha512};

pub struct FakeRelease {
    pub version: String,
    pub arch: String,
    /// Adds a `../evil` entry (which `tar::Builder` itself would refuse to write).
    pub evil_entry: bool,
    /// Leaves out `keadm/keadm`.
    pub omit_binary: bool,
    /// The content of `keadm/keadm`; a script that prints its version by default.
    pub binary: Option<Vec<u8>>,
}

/// What the checksum file beside an offline package holds.
#[derive(Clone, Copy, Debug)]
pub enum ChecksumFile<'a> {
    /// The tarball's sha512, as a release ships it.
    Matching,
    /// This digest (a wrong one, say).
    Holding(&'a str),
    /// There is no checksum file.
    Absent,
}

pub struct Built {
    /// The `.tar.gz` bytes.
    pub bytes: Vec<u8>,
    /// sha512 of `bytes`, lowercase hex: the content of the release's checksum file.
    pub sha512: String,
    /// The content of `keadm/keadm` and its sha256.
    pub binary: Vec<u8>,
    pub binary_sha256: String,
}

impl FakeRelease {
    pub fn new(version: &str, arch: &str) -> FakeRelease {
        FakeRelease {
            version: version.to_string(),
            arch: arch.to_string(),
            evil_entry: false,
            omit_binary: false,
            binary: None,
        }
    }

    /// Ships `content` as `keadm/keadm` (a fake keadm script, say).
    pub fn with_binary(mut self, content: &[u8]) -> FakeRelease {
        self.binary = Some(content.to_vec());
        self
    }

    pub fn with_evil_entry(mut self) -> FakeRelease {
        self.evil_entry = true;
        self
    }

    pub fn without_binary(mut self) -> FakeRelease {
        self.omit_binary = true;
        self
    }

    /// `keadm-<ver>-linux-<arch>.tar.gz`
    pub fn file_name(&self) -> String {
        format!("keadm-{}-linux-{}.tar.gz", self.version, self.arch)
    }

    /// `checksum_keadm-<ver>-linux-<arch>.tar.gz.txt`
    pub fn checksum_name(&self) -> String {
        format!("checksum_{}.txt", self.file_name())
    }

    /// Builds the release and writes it where keadm's offline mode looks for it,
    /// `<packages>/<arch>/<file_name>`, with the checksum file `checksum` says. Returns the
    /// build and the tarball's path.
    pub fn write_offline(&self, packages: &Path, checksum: ChecksumFile) -> (Built, PathBuf) {
        let built = self.build();
        let dir = packages.join(&self.arch);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(self.file_name());
        std::fs::write(&path, &built.bytes).unwrap();
        let digest = match checksum {
            ChecksumFile::Matching => Some(built.sha512.as_str()),
            ChecksumFile::Holding(digest) => Some(digest),
            ChecksumFile::Absent => None,
        };
        if let Some(digest) = digest {
            std::fs::write(dir.join(self.checksum_name()), format!("{digest}\n")).unwrap();
        }
        (built, path)
    }

    pub fn build(&self) -> Built {
        let top = format!("keadm-{}-linux-{}", self.version, self.arch);
        let binary = self.binary.clone().unwrap_or_else(|| {
            format!(
                "#!/bin/sh\n# fake keadm {} for linux/{}\necho \"keadm version: {}\"\n",
                self.version, self.arch, self.version
            )
            .into_bytes()
        });
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
        append_dir(&mut builder, &format!("{top}/"));
        append_file(
            &mut builder,
            &format!("{top}/version"),
            format!("{}\n", self.version).as_bytes(),
            0o644,
        );
        append_dir(&mut builder, &format!("{top}/keadm/"));
        if !self.omit_binary {
            append_file(&mut builder, &format!("{top}/keadm/keadm"), &binary, 0o755);
        }
        if self.evil_entry {
            append_file(&mut builder, "../evil", b"escaped\n", 0o644);
        }
        let bytes = builder.into_inner().unwrap().finish().unwrap();
        Built {
            sha512: hex::encode(Sha512::digest(&bytes)),
            binary_sha256: hex::encode(Sha256::digest(&binary)),
            bytes,
            binary,
        }
    }
}

fn header(name: &str, kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    // Written into the raw field: `set_path` refuses `..`, and the tests need it.
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(1_750_000_000);
    header.set_cksum();
    header
}

fn append_dir(builder: &mut tar::Builder<GzEncoder<Vec<u8>>>, name: &str) {
    let header = header(name, tar::EntryType::Directory, 0, 0o755);
    builder.append(&header, &[][..]).unwrap();
}

fn append_file(builder: &mut tar::Builder<GzEncoder<Vec<u8>>>, name: &str, data: &[u8], mode: u32) {
    let header = header(name, tar::EntryType::Regular, data.len() as u64, mode);
    builder.append(&header, data).unwrap();
}
