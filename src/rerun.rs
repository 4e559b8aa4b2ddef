//! `--retry-failed`: which nodes of the current config still need a run, judged from the
//! journals of earlier runs. Journals are appended and synced per node, so this works
//! even after a crash or a SIGKILL.
//!
//! A retry run records `retry_of` (the run it retried) in its own directory: the nodes it
//! did not touch keep the outcome they had there, and so on back along the chain.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use crate::diagnosis::FailureClass;
use crate::outcome::NodeOutcome;
use crate::report::run_dir::{self, JOURNAL, LATEST, RUNS_DIR};

/// Why `--retry-failed` cannot tell which nodes to run.
#[derive(Debug, thiserror::Error)]
pub enum RerunError {
    /// There is no `batch_runs/latest` to retry from.
    #[error(
        "--retry-failed found no earlier run in {}. Run without --retry-failed first.",
        runs_dir.display()
    )]
    NoEarlierRun { runs_dir: PathBuf },
    /// A journal along the chain of retries exists but cannot be read.
    #[error(
        "The journal {} of an earlier run cannot be read: {source}. Check its permissions, or run without --retry-failed.",
        path.display()
    )]
    Journal {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What `--retry-failed` should do: the run it retries and which nodes of the config to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The newest run directory (`batch_runs/latest`), whose chain decides.
    pub from: PathBuf,
    pub selection: RetrySelection,
}

/// The retry of the newest run under `base` for a config with these node names,
/// optionally only for the nodes that failed with `class`.
pub fn retry(
    base: &Path,
    config_names: &[&str],
    class: Option<FailureClass>,
) -> Result<Retry, RerunError> {
    let from = latest_run(base).ok_or_else(|| RerunError::NoEarlierRun {
        runs_dir: base.join(RUNS_DIR),
    })?;
    let known = last_outcomes(&from)?;
    Ok(Retry {
        selection: select(config_names, &known, class),
        from,
    })
}

/// The file in a run directory that names the run it retried.
pub const RETRY_OF: &str = "retry_of";
/// How far back a chain of retries is followed.
const MAX_CHAIN: usize = 1000;

/// The last known outcome of every node recorded along the chain from `run`.
pub fn last_outcomes(run: &Path) -> Result<HashMap<String, NodeOutcome>, RerunError> {
    let mut known: HashMap<String, NodeOutcome> = HashMap::new();
    let mut current = Some(run.to_path_buf());
    let mut seen = HashSet::new();
    while let Some(dir) = current.take() {
        if !seen.insert(dir.clone()) || seen.len() > MAX_CHAIN {
            break;
        }
        let journal = dir.join(JOURNAL);
        let outcomes = run_dir::read_journal(&journal).map_err(|source| RerunError::Journal {
            path: journal.clone(),
            source,
        })?;
        // Newest first: within a journal its last line for a node, and a newer run
        // before an older one; the first outcome seen for a node is kept.
        for outcome in outcomes.into_iter().rev() {
            known.entry(outcome.name.clone()).or_insert(outcome);
        }
        current = std::fs::read_to_string(dir.join(RETRY_OF))
            .ok()
            .map(|s| PathBuf::from(s.trim()))
            .filter(|p| p.is_dir());
    }
    Ok(known)
}

/// The newest run directory under `base` (`batch_runs/latest`).
pub fn latest_run(base: &Path) -> Option<PathBuf> {
    let link = base.join(RUNS_DIR).join(LATEST);
    let target = std::fs::read_link(&link).ok()?;
    let dir = if target.is_absolute() {
        target
    } else {
        base.join(RUNS_DIR).join(target)
    };
    dir.is_dir().then_some(dir)
}

/// The median time a node took in the run at `run` (succeeded nodes only), to estimate
/// how long the next batch will take.
pub fn measured_per_node_secs(run: &Path) -> Option<f64> {
    let outcomes = run_dir::read_journal(&run.join(JOURNAL)).ok()?;
    let mut times: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.succeeded())
        .map(|o| o.steps.total())
        .filter(|t| *t > 0.0)
        .collect();
    if times.is_empty() {
        return None;
    }
    times.sort_by(f64::total_cmp);
    Some(times[times.len() / 2])
}

/// What a retry should do, given the config's node names and what is known of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySelection {
    /// Names to process: not succeeded, or never recorded (unless a class is asked for).
    pub names: HashSet<String>,
    /// Names recorded earlier that the config no longer has.
    pub gone: Vec<String>,
    /// The wave each name to process had when last recorded (a rollout in waves): a
    /// retry goes on in those waves, from where the rollout stopped.
    pub waves: HashMap<String, usize>,
}

pub fn select(
    config_names: &[&str],
    known: &HashMap<String, NodeOutcome>,
    class: Option<FailureClass>,
) -> RetrySelection {
    let names: HashSet<String> = config_names
        .iter()
        .filter(|name| match (known.get(**name), class) {
            (Some(o), Some(class)) => !o.succeeded() && o.failure_class == Some(class),
            (None, Some(_)) => false,
            (Some(o), None) => !o.succeeded(),
            (None, None) => true,
        })
        .map(|s| s.to_string())
        .collect();
    let waves = names
        .iter()
        .filter_map(|name| Some((name.clone(), known.get(name)?.wave?)))
        .collect();
    let in_config: HashSet<&str> = config_names.iter().copied().collect();
    let mut gone: Vec<String> = known
        .keys()
        .filter(|k| !in_config.contains(k.as_str()))
        .cloned()
        .collect();
    gone.sort();
    RetrySelection { names, gone, waves }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Phase;
    use std::io::Write;

    fn outcome(name: &str, phase: Phase, class: Option<FailureClass>) -> NodeOutcome {
        let mut o = NodeOutcome::not_run(0, name, "a", phase, "x");
        o.failure_class = class;
        o
    }

    fn write_journal(dir: &Path, outcomes: &[NodeOutcome]) {
        std::fs::create_dir_all(dir).unwrap();
        let mut f = std::fs::File::create(dir.join(JOURNAL)).unwrap();
        for o in outcomes {
            writeln!(f, "{}", serde_json::to_string(o).unwrap()).unwrap();
        }
    }

    #[test]
    fn chains_keep_the_newest_outcome() {
        let base = tempfile::tempdir().unwrap();
        let first = base.path().join("1");
        let second = base.path().join("2");
        write_journal(
            &first,
            &[
                outcome("a", Phase::Succeeded, None),
                outcome("b", Phase::Failed, None),
                outcome("c", Phase::Failed, None),
            ],
        );
        write_journal(&second, &[outcome("b", Phase::Succeeded, None)]);
        std::fs::write(second.join(RETRY_OF), first.display().to_string()).unwrap();
        let known = last_outcomes(&second).unwrap();
        assert!(known["a"].succeeded() && known["b"].succeeded() && !known["c"].succeeded());
        let sel = select(&["a", "b", "c", "d"], &known, None);
        assert_eq!(
            sel.names,
            ["c", "d"].iter().map(|s| s.to_string()).collect()
        );
        // A journal without wave numbers (an older run): the retry gets fresh waves.
        assert!(sel.waves.is_empty());
    }

    /// The retried nodes keep the wave they had when last recorded; a node that
    /// succeeded (in any run of the chain) is not retried, whatever its wave.
    #[test]
    fn retried_nodes_keep_their_waves() {
        let base = tempfile::tempdir().unwrap();
        let in_wave = |name: &str, phase: Phase, wave: usize| {
            let mut o = outcome(name, phase, None);
            o.wave = Some(wave);
            o
        };
        write_journal(
            base.path(),
            &[
                in_wave("a", Phase::Succeeded, 1),
                in_wave("b", Phase::Failed, 2),
                in_wave("c", Phase::Skipped, 2),
                in_wave("d", Phase::Skipped, 3),
            ],
        );
        let known = last_outcomes(base.path()).unwrap();
        let sel = select(&["a", "b", "c", "d", "e"], &known, None);
        let expected: HashMap<String, usize> = [("b", 2), ("c", 2), ("d", 3)]
            .map(|(n, w)| (n.to_string(), w))
            .into();
        assert_eq!(sel.waves, expected);
        assert!(sel.names.contains("e") && !sel.names.contains("a"));
    }

    #[test]
    fn retrying_needs_an_earlier_run_and_a_readable_journal() {
        let base = tempfile::tempdir().unwrap();
        let err = retry(base.path(), &["a"], None).unwrap_err();
        assert!(
            matches!(&err, RerunError::NoEarlierRun { runs_dir } if *runs_dir == base.path().join(RUNS_DIR)),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .ends_with("Run without --retry-failed first.")
        );
        // A run directory whose journal is a directory: unreadable, not empty.
        let run = base.path().join(RUNS_DIR).join("1");
        std::fs::create_dir_all(run.join(JOURNAL)).unwrap();
        std::os::unix::fs::symlink("1", base.path().join(RUNS_DIR).join(LATEST)).unwrap();
        let err = retry(base.path(), &["a"], None).unwrap_err();
        assert!(
            matches!(&err, RerunError::Journal { path, .. } if *path == run.join(JOURNAL)),
            "{err:?}"
        );
        std::fs::remove_dir(run.join(JOURNAL)).unwrap();
        write_journal(
            &run,
            &[outcome("a", Phase::Failed, Some(FailureClass::NameTaken))],
        );
        let found = retry(base.path(), &["a", "b"], Some(FailureClass::NameTaken)).unwrap();
        assert_eq!(found.from, run);
        assert_eq!(
            found.selection.names,
            ["a"].iter().map(|s| s.to_string()).collect()
        );
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_classes_filter() {
        let base = tempfile::tempdir().unwrap();
        write_journal(
            base.path(),
            &[
                outcome("a", Phase::Failed, Some(FailureClass::TokenInvalid)),
                outcome("b", Phase::Failed, Some(FailureClass::Unknown)),
            ],
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(base.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"{\"index\":3,\"na").unwrap();
        let known = last_outcomes(base.path()).unwrap();
        assert_eq!(known.len(), 2);
        let sel = select(&["a", "b", "z"], &known, Some(FailureClass::TokenInvalid));
        assert_eq!(sel.names, ["a"].iter().map(|s| s.to_string()).collect());
        let sel = select(&["a"], &known, None);
        assert_eq!(sel.gone, vec!["b".to_string()]);
    }
}
