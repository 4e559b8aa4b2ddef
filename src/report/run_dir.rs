//! The run directory: `batch_runs/<UTC time>-<id>/` with `nodes/<index>-<name>.log`
//! transcripts, `journal.jsonl` and `summary.json`; `batch_runs/latest` points at the
//! newest such run, so `--retry-failed` and operators find it. A run placed elsewhere with
//! `--run-dir` leaves `latest` alone (docs/summary.md).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::files;
use crate::outcome::NodeOutcome;

pub const RUNS_DIR: &str = "batch_runs";
pub const LATEST: &str = "latest";
pub const JOURNAL: &str = "journal.jsonl";
pub const SUMMARY: &str = "summary.json";

#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
    pub id: String,
}

impl RunDir {
    /// Creates `chosen`, or a new `batch_runs/<time>-<id>` under `base` and points
    /// `batch_runs/latest` at it. A chosen directory leaves `batch_runs` alone: shard runs
    /// that write `--run-dir shard<i>` side by side in one shared directory must not race
    /// for `latest`, and an operator's plain runs keep it.
    pub fn create(chosen: Option<&Path>, base: &Path) -> io::Result<RunDir> {
        let id = run_id();
        if let Some(dir) = chosen {
            check_chosen(dir).map_err(io::Error::other)?;
            files::create_dir_all(&dir.join("nodes"))?;
            // Again, now that both are there: made by us, or checked above.
            check_chosen(dir).map_err(io::Error::other)?;
            return Ok(RunDir {
                path: dir.to_path_buf(),
                id,
            });
        }
        let runs = base.join(RUNS_DIR);
        let path = runs.join(&id);
        files::create_dir_all(&path.join("nodes"))?;
        point_latest(&runs, Path::new(&id))?;
        Ok(RunDir { path, id })
    }

    /// The transcript file of a node: `nodes/<index>-<name>.log`, 1-based index, name
    /// characters outside `A-Za-z0-9._-` replaced by `_`.
    pub fn transcript_path(&self, index: usize, name: &str) -> PathBuf {
        self.path
            .join("nodes")
            .join(format!("{}-{}.log", index + 1, sanitize(name)))
    }

    pub fn journal(&self) -> io::Result<Journal> {
        Journal::open(&self.path.join(JOURNAL))
    }

    pub fn summary_path(&self) -> PathBuf {
        self.path.join(SUMMARY)
    }
}

/// A `--run-dir` (or its `nodes`) that exists and is not this user's alone.
#[derive(Debug, thiserror::Error)]
#[error(
    "--run-dir: {} cannot hold the run's results: {reason}. Whoever else can write there could read the transcripts, or replace summary.json and journal.jsonl, which --retry-failed, `batch report` and `batch merge` trust. Give a directory of your own that only you can write, or a path that does not exist yet (keadm-batch creates it owner-only). No node was touched.",
    path.display()
)]
pub struct NotPrivate {
    pub path: PathBuf,
    pub reason: String,
}

/// Refuses a `--run-dir` that exists and is not a directory only this user can change
/// (owned by another user, writable by group or others, a symbolic link), and the same
/// for its `nodes`. A path that does not exist yet is fine: the run creates it owner-only.
/// The directories above it are the operator's choice, as for any output path.
pub fn check_chosen(dir: &Path) -> Result<(), NotPrivate> {
    let euid = crate::stage::effective_uid();
    for path in [dir.to_path_buf(), dir.join("nodes")] {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if let Some(reason) = crate::stage::not_private(&meta, euid) {
            return Err(NotPrivate { path, reason });
        }
    }
    Ok(())
}

/// A run directory that lives only as long as this value: `--preflight-only` needs one
/// for its in-memory transcripts' sake but leaves nothing behind. Made with `tempfile`:
/// a new random name, created exclusively and owner-only, so a directory that another
/// local user made in advance is never used.
pub struct ScratchRun {
    pub run: RunDir,
    _dir: tempfile::TempDir,
}

impl ScratchRun {
    pub fn path(&self) -> &Path {
        &self.run.path
    }
}

impl RunDir {
    pub fn scratch() -> io::Result<ScratchRun> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("keadm-batch-preflight-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()?;
        let path = dir.path().to_path_buf();
        files::create_dir_all(&path.join("nodes"))?;
        Ok(ScratchRun {
            run: RunDir { path, id: run_id() },
            _dir: dir,
        })
    }
}

/// `batch_runs/latest` -> `<id>`, replaced atomically (a new link renamed over the old).
fn point_latest(runs: &Path, target: &Path) -> io::Result<()> {
    let tmp = runs.join(format!(".latest-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    fs::rename(&tmp, runs.join(LATEST))
}

pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `20261130T010203Z-4f2a`: sortable UTC time plus a short random part.
fn run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let random = (now.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{}-{random:04x}", crate::utc::compact(now.as_secs()))
}

/// `journal.jsonl`: one JSON line per finished node, appended and synced, so it
/// survives a crash and `--retry-failed` can read it.
pub struct Journal {
    file: File,
}

impl Journal {
    fn open(path: &Path) -> io::Result<Journal> {
        let file = files::append(path)?;
        Ok(Journal { file })
    }

    pub fn append(&mut self, outcome: &NodeOutcome) -> io::Result<()> {
        let mut line = serde_json::to_string(outcome).map_err(io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}

/// Reads a journal for `--retry-failed`, which needs only the outcomes it can read: a
/// line that does not read is skipped.
pub fn read_journal(path: &Path) -> io::Result<Vec<NodeOutcome>> {
    let text = fs::read_to_string(path)?;
    Ok(journal_lines(&text)
        .filter_map(|line| line.outcome.ok())
        .collect())
}

/// One line of a journal, read.
pub struct JournalLine<'a> {
    /// 1-based.
    pub number: usize,
    pub text: &'a str,
    pub outcome: Result<NodeOutcome, serde_json::Error>,
}

/// The lines of a journal's `text`, each read as an outcome, without blank lines and
/// without a torn last line: one that has no newline and does not read is what a process
/// that died mid-write leaves ([`Journal::append`] writes line and newline at once).
pub fn journal_lines(text: &str) -> impl Iterator<Item = JournalLine<'_>> {
    let torn = (!text.ends_with('\n')).then(|| text.lines().count());
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| JournalLine {
            number: i + 1,
            text: line,
            outcome: serde_json::from_str(line),
        })
        .filter(move |line| !(Some(line.number) == torn && line.outcome.is_err()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize("edge-1.a_b"), "edge-1.a_b");
        assert_eq!(sanitize("../x y/é"), ".._x_y__");
    }

    #[test]
    fn latest_points_at_the_newest_run() {
        let base = tempfile::tempdir().unwrap();
        let a = RunDir::create(None, base.path()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = RunDir::create(None, base.path()).unwrap();
        let latest = fs::read_link(base.path().join(RUNS_DIR).join(LATEST)).unwrap();
        assert_eq!(latest, PathBuf::from(&b.id));
        assert!(a.path.join("nodes").is_dir());
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// Security finding 7: run directories and the files in them hold command lines and
    /// node output, so only their owner may read them, whatever the umask.
    #[test]
    fn run_files_are_owner_only() {
        let base = tempfile::tempdir().unwrap();
        let run = RunDir::create(None, base.path()).unwrap();
        assert_eq!(mode(&base.path().join(RUNS_DIR)), 0o700);
        assert_eq!(mode(&run.path), 0o700);
        assert_eq!(mode(&run.path.join("nodes")), 0o700);
        let _journal = run.journal().unwrap();
        assert_eq!(mode(&run.path.join(JOURNAL)), 0o600);
        let chosen = base.path().join("chosen/run");
        let run = RunDir::create(Some(&chosen), base.path()).unwrap();
        assert_eq!(mode(&run.path), 0o700);
    }

    /// docs/summary.md: `--run-dir DIR` leaves `batch_runs/latest` alone, so shard runs on
    /// a shared directory do not fight over it and `--retry-failed` keeps the plain run.
    #[test]
    fn a_chosen_run_dir_leaves_latest_alone() {
        let base = tempfile::tempdir().unwrap();
        let chosen = RunDir::create(Some(&base.path().join("shard1")), base.path()).unwrap();
        assert!(chosen.path.join("nodes").is_dir());
        assert!(
            !base.path().join(RUNS_DIR).exists(),
            "no batch_runs for a chosen run dir"
        );
        let plain = RunDir::create(None, base.path()).unwrap();
        RunDir::create(Some(&base.path().join("shard2")), base.path()).unwrap();
        let latest = fs::read_link(base.path().join(RUNS_DIR).join(LATEST)).unwrap();
        assert_eq!(latest, PathBuf::from(&plain.id));
    }

    /// Security finding 7: `--preflight-only`'s scratch directory is new, random and
    /// owner-only; a directory another user made in advance is never used.
    #[test]
    fn scratch_run_dirs_are_fresh_and_private() {
        let a = RunDir::scratch().unwrap();
        let b = RunDir::scratch().unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(mode(a.path()), 0o700);
        assert!(a.path().join("nodes").is_dir());
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists(), "the scratch directory is removed after use");
    }
}
