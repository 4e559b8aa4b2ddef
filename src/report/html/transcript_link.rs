//! The link from the page to a node's transcript: relative to the run directory, each
//! segment percent-encoded, so it works from `file://` and after the directory is copied
//! or moved.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::outcome::NodeOutcome;

/// The node's transcript as a link relative to the run directory, each segment
/// percent-encoded, so it resolves from `file://` and after the directory is copied.
pub(super) fn transcript_href(node: &NodeOutcome, run_dir: &Path) -> Option<String> {
    let transcript = Path::new(node.transcript.as_deref()?);
    // The run directory's own transcript, wherever the summary says the run was (a copy,
    // a directory moved, `batch report batch_runs/latest`): `nodes/<file>` when it is there.
    let file = transcript.file_name()?;
    let own = transcript.parent().and_then(Path::file_name) == Some("nodes".as_ref())
        && run_dir.join("nodes").join(file).is_file();
    let relative = if own {
        Path::new("nodes").join(file)
    } else {
        relative_to(transcript, run_dir)?
    };
    let mut href = String::new();
    for (i, part) in relative.components().enumerate() {
        if i > 0 {
            href.push('/');
        }
        match part {
            Component::ParentDir => href.push_str(".."),
            Component::Normal(segment) => {
                href.push_str(&percent_encode(&segment.to_string_lossy()))
            }
            _ => return None,
        }
    }
    Some(href)
}

/// `path` relative to `base`: directly when `base` is a prefix of it (as a run writes
/// its transcripts), else through both made absolute (a merge's shards, beside it).
fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    if let Ok(inside) = path.strip_prefix(base) {
        return Some(inside.to_path_buf());
    }
    // Through links resolved where they exist (`batch_runs/latest`), else as written.
    let path = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .ok()?;
    let base = std::fs::canonicalize(base)
        .or_else(|_| std::path::absolute(base))
        .ok()?;
    let path: Vec<Component> = path.components().collect();
    let base: Vec<Component> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for part in &path[common..] {
        out.push(part);
    }
    Some(out)
}

/// A path segment with everything but RFC 3986's unreserved characters percent-encoded.
fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Phase;
    use crate::report::html::tests::node;

    #[test]
    fn transcript_links_are_relative_and_encoded() {
        let mut n = node(0, "edge a", Phase::Failed);
        n.transcript = Some("/runs/x/nodes/1-edge a#?.log".into());
        assert_eq!(
            transcript_href(&n, Path::new("/runs/x")).as_deref(),
            Some("nodes/1-edge%20a%23%3F.log")
        );
        // A merge's: in a shard's directory beside the merged one.
        n.transcript = Some("/runs/shard-1/nodes/1-a.log".into());
        assert_eq!(
            transcript_href(&n, Path::new("/runs/merged")).as_deref(),
            Some("../shard-1/nodes/1-a.log")
        );
    }

    /// A run directory reached by another name (copied, moved, `batch_runs/latest`) links
    /// its own transcripts as `nodes/<file>`.
    #[test]
    fn a_copied_run_links_its_own_transcripts() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        std::fs::create_dir_all(copy.join("nodes")).unwrap();
        std::fs::write(copy.join("nodes/1-a.log"), "x").unwrap();
        let mut n = node(0, "a", Phase::Failed);
        n.transcript = Some("batch_runs/20261202T000000Z-abcd/nodes/1-a.log".into());
        assert_eq!(transcript_href(&n, &copy).as_deref(), Some("nodes/1-a.log"));
        // Through a link to it, the same.
        std::os::unix::fs::symlink(&copy, dir.path().join("latest")).unwrap();
        assert_eq!(
            transcript_href(&n, &dir.path().join("latest")).as_deref(),
            Some("nodes/1-a.log")
        );
    }
}
