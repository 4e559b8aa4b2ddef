//! Typed errors for the whole run, and the one place that decides exit codes
//! (README.md, "Exit codes"): 130 interrupted, 2 invalid config or command line, 3 staging failed,
//! 1 some selected node did not succeed, 0 all succeeded.
//!
//! Every module's own error type converts into [`Error`] with `?`; nothing is turned into
//! text before `main_with_args` prints it. Every message reads as full sentences that name
//! the file, node or value and say what to do.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::bundle::{BundleError, Failure};
use crate::cli::UnknownShell;
use crate::config::ConfigError;
use crate::gen_config::GenConfigError;
use crate::kubeedge::before_run::Refused;
use crate::plan::SelectionError;
use crate::report::merge::MergeError;
use crate::rerun::RerunError;
use crate::stage::StageError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line asks for something that cannot be done.
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// gen-config would overwrite a file, or could not write it.
    #[error(transparent)]
    GenConfig(#[from] GenConfigError),
    /// The join batch as a whole would fail (expired token, another cluster's CA, names
    /// taken); no node was touched.
    #[error(transparent)]
    JoinChecks(#[from] Refused),
    /// The kubeconfig cannot be read, the API server cannot be asked, or the user lacks a
    /// permission the run needs; no node was touched.
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// `--retry-failed` cannot tell which nodes to run.
    #[error(transparent)]
    Retry(#[from] RerunError),
    /// keadm packages could not be staged; no node was touched.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The run's own files (log, run dir) could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `batch bundle` could not write the air-gapped kit.
    /// Boxed: its variants carry image, registry and digests, and `Error` travels by value.
    #[error(transparent)]
    Bundle(Box<BundleError>),
    /// Some selected nodes did not succeed; the recap has already said which.
    #[error(
        "{failed} of {total} selected nodes did not succeed. See batch_process_log.txt and {run_dir}."
    )]
    NodesFailed {
        failed: usize,
        total: usize,
        run_dir: String,
    },
    /// `batch merge` combined nodes that did not succeed. `log` is the merged
    /// batch_process_log.txt, when `--into` wrote one.
    #[error(
        "{failed} of {total} nodes did not succeed in the merged shard runs. {}The shards' run directories ({dirs}) hold their transcripts.",
        match log {
            Some(log) => format!("See {}. ", log.display()),
            None => "Pass --into DIR to write their merged batch_process_log.txt. ".to_string(),
        }
    )]
    MergedNodesFailed {
        failed: usize,
        total: usize,
        dirs: String,
        log: Option<PathBuf>,
    },
    /// `--preflight-only` found something on some nodes (or could not probe them).
    #[error(
        "{nodes} of {total} nodes have pre-flight findings or could not be probed. Nothing was changed on any node."
    )]
    Findings { nodes: usize, total: usize },
    /// `batch status` could not reach some nodes, or they did not finish answering.
    #[error(
        "{nodes} of {total} nodes did not answer; the lines below the table say why. Nothing was changed on any node."
    )]
    NotAnswered { nodes: usize, total: usize },
    /// The operator pressed Ctrl-C or sent SIGTERM; results were written.
    #[error(transparent)]
    Interrupted(#[from] Interruption),
}

impl From<BundleError> for Error {
    fn from(error: BundleError) -> Error {
        Error::Bundle(Box::new(error))
    }
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Interrupted(_) => 130,
            Error::Usage(_)
            | Error::Config(_)
            | Error::GenConfig(_)
            | Error::JoinChecks(_)
            | Error::Cluster(_) => 2,
            Error::Retry(RerunError::NoEarlierRun { .. }) => 2,
            Error::Stage(_) => 3,
            // Like a run: refused before anything is fetched 2, a release or an image that
            // cannot be fetched or verified 3 (a staging failure), as is a kit that fails its
            // check (the run would refuse it alike), the kit not written 1.
            Error::Bundle(error) => match error.failure() {
                Failure::Usage => 2,
                Failure::Fetch | Failure::Broken => 3,
                Failure::Output => 1,
            },
            Error::Retry(RerunError::Journal { .. })
            | Error::NodesFailed { .. }
            | Error::MergedNodesFailed { .. }
            | Error::Findings { .. }
            | Error::NotAnswered { .. }
            | Error::Output(_) => 1,
        }
    }
}

/// The command line asks for something that cannot be done, in a way clap could not see.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// `--only` selects no node.
    #[error(transparent)]
    Selection(#[from] SelectionError),
    /// `completions` for a shell clap_complete does not know.
    #[error(transparent)]
    Shell(#[from] UnknownShell),
    /// A download the staging rules refuse before anything is fetched (plain HTTP without
    /// pins); exit 2 rather than 3, because nothing was tried.
    #[error("{0} No node was touched.")]
    UnsafeDownload(#[source] StageError),
    /// `batch merge` was given directories it cannot combine.
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// A `--run-dir` another user could change.
    #[error(transparent)]
    RunDir(#[from] crate::report::run_dir::NotPrivate),
    /// A flag that works in the cluster, given without a kubeconfig.
    #[error(
        "{flag} needs the cluster, and no kubeconfig is given: add --kubeconfig FILE (or the config's kubeconfig, or set KUBECONFIG), or leave out {flag}. No node was touched."
    )]
    NeedsKubeconfig { flag: &'static str },
    /// A join whose keadmCmd the cluster's token cannot be put into.
    #[error(
        "Node {node}: the join token read from the cluster cannot be put into its keadmCmd, because keadm would not read a --token added at its end ({command}). Put the keadm join part last in keadmCmd, or give the token in it. No node was touched."
    )]
    TokenNotPlaced { node: String, command: String },
}

/// One of the run's own files or directories, for [`OutputError::File`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFile {
    /// `batch_runs/<id>`, under the directory named.
    RunDir,
    /// The run directory named with `--run-dir`.
    ChosenRunDir,
    /// `batch_process_log.txt`.
    ResultLog,
    /// `journal.jsonl`, in the run directory named.
    Journal,
    /// The scratch directory `--preflight-only` uses, under the directory named.
    ScratchDir,
    /// `batch merge --into`.
    MergedResults,
    /// `--junit FILE`.
    Junit,
    /// `batch report RUN_DIR`'s report.html.
    Report,
    /// `batch merge --metrics FILE`.
    Metrics,
}

impl fmt::Display for OutputFile {
    /// What could not be done, as the verb phrase before the path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OutputFile::RunDir => "create the run directory under",
            OutputFile::ChosenRunDir => "create the run directory",
            OutputFile::ResultLog => "create the result log",
            OutputFile::Journal => "create the journal in",
            OutputFile::ScratchDir => "create a temporary directory in",
            OutputFile::MergedResults => "write the merged results to",
            OutputFile::Junit => "write the JUnit XML file (--junit)",
            OutputFile::Report => "write report.html into",
            OutputFile::Metrics => "write the metrics file (--metrics)",
        })
    }
}

/// The run's own output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "Could not {file} {}: {source}. Check that the directory exists, that you can write to it, and that it has free space.",
        path.display()
    )]
    File {
        file: OutputFile,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "The current directory cannot be used: {0}. Run keadm-batch from a directory that exists and that you can write to."
    )]
    CurrentDir(#[source] io::Error),
    #[error(
        "Could not write to standard output: {0}. Check where it is redirected to (a full disk, a closed file)."
    )]
    Stdout(#[source] io::Error),
}

impl OutputError {
    /// An error creating or writing `file` at `path`, for `map_err`.
    pub fn file(file: OutputFile, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| OutputError::File { file, path, source }
    }
}

impl From<crate::report::junit::JunitError> for Error {
    fn from(error: crate::report::junit::JunitError) -> Error {
        use crate::report::junit::JunitError;
        Error::Output(match error {
            JunitError::File { path, source } => OutputError::File {
                file: OutputFile::Junit,
                path,
                source,
            },
            JunitError::Stdout(source) => OutputError::Stdout(source),
        })
    }
}

/// The operator stopped the run (Ctrl-C or SIGTERM); what was done is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Interruption {
    #[error(
        "The run was interrupted: {finished} of {selected} nodes finished, and the rest are marked in {}.",
        log.display()
    )]
    Run {
        finished: usize,
        selected: usize,
        log: PathBuf,
    },
    #[error(
        "The pre-flight probes were interrupted: {probed} of {total} nodes were probed, and the table marks the rest as not probed."
    )]
    Probes { probed: usize, total: usize },
    #[error(
        "batch status was interrupted: {asked} of {total} nodes were asked, and the table marks the rest as not asked."
    )]
    Status { asked: usize, total: usize },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeedge::before_run::{Problem, ProblemKind};
    use crate::kubeedge::token::TokenError;

    /// The message convention: sentences, each ending in a full stop, starting with a
    /// capital, a number, a flag, a path or file name, or a lower-case proper name
    /// (cloudcore, keadm).
    fn assert_sentences(error: &Error) {
        let text = error.to_string();
        assert!(text.ends_with('.'), "not a full sentence: {text:?}");
        for line in text.lines() {
            let first = line.chars().next().unwrap();
            let first_word = line.split(' ').next().unwrap();
            assert!(
                first.is_uppercase()
                    || first.is_ascii_digit()
                    || "-/`".contains(first)
                    || first_word.contains('.')
                    || first_word == "cloudcore"
                    || first_word.starts_with("keadm"),
                "does not start a sentence: {line:?}"
            );
            assert!(!line.contains(": The "), "a sentence glued on: {line:?}");
        }
    }

    fn io_error() -> io::Error {
        io::Error::from(io::ErrorKind::PermissionDenied)
    }

    #[test]
    fn every_error_reads_as_sentences_and_maps_to_its_exit_code() {
        let cases: Vec<(Error, i32)> = vec![
            (
                UsageError::from(SelectionError::OnlyMatchesNothing {
                    patterns: vec!["edge-9*".into()],
                })
                .into(),
                2,
            ),
            (UsageError::from(UnknownShell("tcsh".into())).into(), 2),
            (
                UsageError::UnsafeDownload(StageError::PlainHttp {
                    setting: crate::stage::CONFIG_DOWNLOAD_URL,
                    url: "http://mirror".into(),
                    arches: "amd64".into(),
                })
                .into(),
                2,
            ),
            (
                UsageError::from(MergeError::SameDir { dir: "s1".into() }).into(),
                2,
            ),
            (
                UsageError::from(MergeError::Invalid(Box::new(
                    crate::report::merge::InvalidInput {
                        path: "s1/summary.json".into(),
                        line: 38,
                        column: 15,
                        field: "nodes[1].phase".into(),
                        problem: crate::report::merge::Problem::Unfinished(
                            crate::outcome::Phase::Running,
                        ),
                    },
                )))
                .into(),
                2,
            ),
            (
                GenConfigError::Exists {
                    path: "config.yaml".into(),
                }
                .into(),
                2,
            ),
            (
                Refused(vec![Problem {
                    fatal: true,
                    kind: ProblemKind::TokenUnreadable(TokenError::BadExpiry),
                }])
                .into(),
                2,
            ),
            (
                RerunError::NoEarlierRun {
                    runs_dir: "/work/batch_runs".into(),
                }
                .into(),
                2,
            ),
            (
                RerunError::Journal {
                    path: "/work/batch_runs/x/journal.jsonl".into(),
                    source: io_error(),
                }
                .into(),
                1,
            ),
            (StageError::EmptyVersion.into(), 3),
            (
                StageError::from(crate::kit::KitError::NotListed {
                    file: "/kit/amd64/x.tar".into(),
                    manifest: "/kit/kit.json".into(),
                })
                .into(),
                3,
            ),
            (
                BundleError::NotAKit {
                    dir: "/kit".into(),
                    files: "notes.txt".into(),
                }
                .into(),
                2,
            ),
            (
                BundleError::NotFound {
                    image: "registry.k8s.io/pause:3.9".into(),
                    registry: "registry.k8s.io".into(),
                    status: "404 Not Found (MANIFEST_UNKNOWN)".into(),
                }
                .into(),
                3,
            ),
            (
                BundleError::io("write", "/kit/amd64/images/x.tar", io_error()).into(),
                1,
            ),
            (
                OutputError::file(OutputFile::RunDir, "/work")(io_error()).into(),
                1,
            ),
            (OutputError::CurrentDir(io_error()).into(), 1),
            (OutputError::Stdout(io_error()).into(), 1),
            (
                Error::NodesFailed {
                    failed: 2,
                    total: 3,
                    run_dir: "batch_runs/x".into(),
                },
                1,
            ),
            (
                Error::MergedNodesFailed {
                    failed: 1,
                    total: 4,
                    dirs: "s1, s2".into(),
                    log: None,
                },
                1,
            ),
            (
                Error::MergedNodesFailed {
                    failed: 1,
                    total: 4,
                    dirs: "s1, s2".into(),
                    log: Some("out/batch_process_log.txt".into()),
                },
                1,
            ),
            (Error::Findings { nodes: 1, total: 2 }, 1),
            (
                Interruption::Run {
                    finished: 3,
                    selected: 5,
                    log: "batch_process_log.txt".into(),
                }
                .into(),
                130,
            ),
            (
                Interruption::Probes {
                    probed: 1,
                    total: 4,
                }
                .into(),
                130,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit_code(), code, "{error}");
            assert_sentences(&error);
        }
    }

    #[test]
    fn typed_sources_stay_reachable() {
        use std::error::Error as _;
        let error = Error::from(OutputError::file(OutputFile::ResultLog, "/x/log.txt")(
            io_error(),
        ));
        assert_eq!(
            error.to_string(),
            "Could not create the result log /x/log.txt: permission denied. Check that the directory exists, that you can write to it, and that it has free space."
        );
        let source = error.source().expect("the io::Error is the source");
        assert_eq!(
            source.downcast_ref::<io::Error>().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
        let refused = Error::from(Refused(vec![
            Problem {
                fatal: true,
                kind: ProblemKind::TokenUnreadable(TokenError::BadExpiry),
            },
            Problem {
                fatal: true,
                kind: ProblemKind::NamesTaken {
                    base: "https://192.0.2.1:10002".into(),
                    names: (0..12).map(|i| format!("edge-{i}")).collect(),
                },
            },
        ]));
        let text = refused.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.starts_with(
                "The join token (--token) cannot be read. The join token's `exp` claim"
            ),
            "{text}"
        );
        assert!(text.contains("edge-9 and 2 more."), "{text}");
        assert!(text.ends_with("\nNo node was touched."), "{text}");
    }
}
