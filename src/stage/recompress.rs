//! The xz copy of a staged binary: made once per binary (named by its sha256, beside the
//! verified release in `BASE/bin/<arch>/`) and sent instead of the gzip tarball to nodes
//! that have `xz`. A Go binary such as keadm packs to about 0.2x with xz where the release's
//! gzip tarball is about 0.3x: on a slow link that is a third less time per node.
//!
//! liblzma is built from its bundled C source and linked statically (the `static`
//! feature), so the binary needs no liblzma on the control host.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use liblzma::stream::{Check, Filters, LzmaOptions, MtStreamBuilder};
use liblzma::write::XzEncoder;

use super::meter::{Meter, Metered, Meters};
use super::temporary::Temporary;

/// xz's default preset, whose match finder and nice length are the best value per CPU
/// second; only its dictionary is raised (see [`DICT_SIZE`]).
const PRESET: u32 = 6;

/// A 16 MiB dictionary instead of the preset's 8 MiB: a stripped keadm v1.15.4 (66.3 MB)
/// packs to 0.198x instead of 0.201x, and a node needs about 17 MiB to unpack (xz -9's
/// 64 MiB would ask 65 MiB of small edge nodes for 0.197x). No BCJ filter, which would
/// pack x86 code to 0.193x: BusyBox's xz cannot unpack it.
const DICT_SIZE: u32 = 16 << 20;

/// Threads for the copy: liblzma's blocks are 3 dictionaries (48 MiB), so a binary of
/// keadm's size has two, and each thread costs about 200 MiB of memory on the control
/// host; more threads would only cost memory.
const MAX_THREADS: usize = 2;

/// Recompress only a binary that gzip already shrinks to this share of its size: an
/// incompressible one would cost CPU here and on every node for nothing.
pub(crate) const WORTH_IT_BELOW: f64 = 0.8;

/// A binary's xz copy in the staging dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XzCopy {
    pub path: PathBuf,
    pub size: u64,
}

/// `keadm-<sha256>.xz`: the binary's digest names its copy, so a copy never outlives the
/// binary it was made from, and two versions never share one.
pub(crate) fn copy_name(binary_sha256: &str) -> String {
    format!("keadm-{binary_sha256}.xz")
}

/// The xz copy of `binary` in `dir`, made now unless an earlier run made it. A failure
/// only costs bytes on the wire (nodes get the tarball), so it is a warning, not an error.
/// Making it takes seconds for keadm's size, so `meters` shows how far it is, as `label`.
pub(crate) fn xz_copy(
    dir: &Path,
    binary: &Path,
    binary_sha256: &str,
    meters: &Meters,
    label: &str,
) -> Option<XzCopy> {
    let path = dir.join(copy_name(binary_sha256));
    if let Ok(meta) = std::fs::metadata(&path)
        && meta.is_file()
        && meta.len() > 0
    {
        return Some(XzCopy {
            size: meta.len(),
            path,
        });
    }
    let start = Instant::now();
    match compress(dir, binary, &path, meters, label) {
        Ok(size) => {
            log::info!(
                "made the xz copy of {} ({size} bytes) in {:.1}s",
                binary.display(),
                start.elapsed().as_secs_f64()
            );
            Some(XzCopy { path, size })
        }
        Err(e) => {
            log::warn!(
                "Could not make the xz copy of {} in {}: {e}. Nodes get the release tarball instead.",
                binary.display(),
                dir.display()
            );
            None
        }
    }
}

/// Compresses `binary` into a temporary in `dir` on up to [`MAX_THREADS`] cores, then
/// renames it to `path`.
/// CRC32 as the stream's check: every xz decoder has it (BusyBox's may lack CRC64), and
/// the node checks the binary's sha256 anyway.
fn compress(
    dir: &Path,
    binary: &Path,
    path: &Path,
    meters: &Meters,
    label: &str,
) -> io::Result<u64> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
    let mut lzma2 = LzmaOptions::new_preset(PRESET).map_err(io::Error::other)?;
    lzma2.dict_size(DICT_SIZE);
    let mut filters = Filters::new();
    filters.lzma2(&lzma2);
    let stream = MtStreamBuilder::new()
        .filters(filters)
        .threads(threads as u32)
        .check(Check::Crc32)
        .encoder()
        .map_err(io::Error::other)?;
    let tmp = Temporary::Write.file_in(dir, 0o600)?;
    let mut encoder = XzEncoder::new_stream(BufWriter::new(tmp), stream);
    let input = File::open(binary)?;
    let mut meter = Meter::start(meters, label, Some(input.metadata()?.len()));
    let mut metered = Metered {
        inner: BufReader::new(input),
        meter: &mut meter,
        done: 0,
    };
    io::copy(&mut metered, &mut encoder)?;
    let done = metered.done;
    meter.finish(done);
    let mut tmp = encoder.finish()?.into_inner().map_err(|e| e.into_error())?;
    tmp.flush()?;
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_copy_unpacks_to_the_binary_and_is_reused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("keadm");
        let content: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        std::fs::write(&binary, &content).unwrap();
        let (meters, seen) = crate::stage::meter::tests::collected();
        let copy = xz_copy(dir.path(), &binary, "ab12", &meters, "xz copy of keadm").unwrap();
        assert_eq!(copy.path, dir.path().join("keadm-ab12.xz"));
        assert!(copy.size < content.len() as u64 / 4, "{copy:?}");
        let mut unpacked = Vec::new();
        liblzma::read::XzDecoder::new(File::open(&copy.path).unwrap())
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, content);
        // It said how far it was, up to the whole binary.
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.last()
                .is_some_and(|l| l.starts_with("xz copy of keadm  0.8/0.8 MiB  ")),
            "{seen:?}"
        );
        // A second staging finds it by the digest and does not compress again.
        std::fs::write(&copy.path, b"cached").unwrap();
        assert_eq!(
            xz_copy(dir.path(), &binary, "ab12", &Meters::Off, "xz")
                .unwrap()
                .size,
            6
        );
        // No temporary is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn a_dir_that_cannot_be_written_means_no_copy() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("keadm");
        std::fs::write(&binary, b"#!/bin/sh\n").unwrap();
        let missing = dir.path().join("missing");
        assert_eq!(xz_copy(&missing, &binary, "cd34", &Meters::Off, "xz"), None);
    }
}
