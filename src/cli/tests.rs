//! The command line's tests that span it: the clap definition, `--version`, klog's `-v`,
//! and every failure class's fix against the flags that exist; and [`run`], which every
//! file's tests parse with.

use std::ffi::OsString;

use super::*;
use crate::diagnosis::FailureClass;
use crate::keadm_cmd::Task;
use crate::options::{Command, Verbosity};

/// Parses `args` as the command line.
pub(super) fn run(args: &[&str]) -> Result<Command, clap::Error> {
    parse(args.iter().map(OsString::from))
}

#[test]
fn long_version_names_the_build_and_the_libraries_inside() {
    let err = run(&["keadm-batch", "--version"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::DisplayVersion);
    let text = err.to_string();
    let first = format!("keadm-batch {}", env!("CARGO_PKG_VERSION"));
    assert_eq!(text.lines().next(), Some(first.as_str()));
    for label in [
        "commit:", "built:", "target:", "libssh2:", "OpenSSL:", "zlib:", "liblzma:", "libzstd:",
    ] {
        assert!(
            text.lines().any(|line| line.starts_with(label)),
            "no `{label}` line in:\n{text}"
        );
    }
    assert!(text.contains(openssl::version::version()), "{text}");
    let libzstd = format!(
        "libzstd: {} ({})",
        zstd::zstd_safe::version_string(),
        env!("KEADM_BATCH_LIBZSTD_LINKED")
    );
    assert!(text.lines().any(|line| line == libzstd), "{text}");
    // -V stays one line, for scripts that read the version.
    let short = run(&["keadm-batch", "-V"]).unwrap_err().to_string();
    assert_eq!(short.trim_end(), first);
}

#[test]
fn a_klog_verbosity_level_is_explained() {
    for args in [
        &["k", "batch", "-c", "c", "-v", "4"][..],
        &["k", "batch", "-c", "c", "-v4"],
        &["k", "batch", "-c", "c", "-v=2"],
        &["k", "batch", "-c", "c", "--verbose", "2"],
    ] {
        let err = run(args).unwrap_err();
        assert!(err.use_stderr(), "a usage error, exit 2");
        assert!(
            err.to_string().contains("keadm-batch's -v takes no level"),
            "{args:?}: {err}"
        );
    }
    let Command::Run(opts) = run(&["k", "batch", "-c", "c", "-v"]).unwrap() else {
        panic!()
    };
    assert_eq!(opts.verbosity, Verbosity::Verbose);
    // Other mistakes keep clap's own message.
    let err = run(&["k", "batch", "-c", "c", "--frobnicate"]).unwrap_err();
    assert!(!err.to_string().contains("takes no level"), "{err}");
}

#[test]
fn clap_definition_is_consistent() {
    command().debug_assert();
}

/// The long flags of `keadm-batch batch`, as clap knows them.
fn batch_flags() -> Vec<String> {
    let cli = command();
    let batch = cli.find_subcommand("batch").expect("the batch subcommand");
    batch
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// Whether keadm-batch's flag `--long` does anything for nodes whose keadmCmd does
/// `task` (the flags' help says which command each is for).
fn batch_flag_fits(long: &str, task: Task) -> bool {
    match long {
        "reset-first" | "token-from-cluster" | "preflight" | "preflight-only" => task == Task::Join,
        "backup" | "rollback-on-failure" => task == Task::Upgrade,
        "delete-nodes" => task == Task::Reset,
        // Joins are not drained: their Node does not exist yet.
        "drain" | "drain-timeout" => task != Task::Join,
        "ready-timeout" | "no-wait" => matches!(task, Task::Join | Task::Upgrade),
        _ => true,
    }
}

/// The `--flags` named in `text`, each with whose flag it is: keadm's (`Some(subcommand)`,
/// inside a backticked `keadm ...` command, or a backticked `--flag` followed by ` in
/// keadmCmd`) or keadm-batch's (`None`: outside backticks, or a backticked span that
/// starts with `--` or `keadm-batch`). Other backticked commands (`systemctl`,
/// `kubectl`...) have flags of their own and are left out.
fn flags_named(text: &str, task_command: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let flags = |span: &str| -> Vec<String> {
        span.split(|c: char| c.is_whitespace() || "(),;".contains(c))
            .filter_map(|w| w.strip_prefix("--"))
            .map(|w| {
                w.split('=')
                    .next()
                    .unwrap_or("")
                    .trim_end_matches('.')
                    .to_string()
            })
            .filter(|w| !w.is_empty())
            .collect()
    };
    let keadm_sub = |words: &[&str]| -> String {
        words
            .iter()
            .skip(1)
            .find(|w| !w.starts_with('-'))
            .map_or(String::new(), |w| w.to_string())
    };
    for (at, span) in text.split('`').enumerate() {
        if at % 2 == 0 {
            out.extend(flags(span).into_iter().map(|f| (None, f)));
            continue;
        }
        let words: Vec<&str> = span.split_whitespace().collect();
        let after = text.split('`').nth(at + 1).unwrap_or("");
        match words.first().copied() {
            Some("keadm") => {
                let sub = keadm_sub(&words);
                out.extend(flags(span).into_iter().map(|f| (Some(sub.clone()), f)));
            }
            Some(first) if first.starts_with("--") && after.starts_with(" in keadmCmd") => {
                let sub = keadm_sub(&task_command.split_whitespace().collect::<Vec<_>>());
                out.extend(flags(span).into_iter().map(|f| (Some(sub.clone()), f)));
            }
            Some(first) if first.starts_with("--") || first == "keadm-batch" => {
                out.extend(flags(span).into_iter().map(|f| (None, f)));
            }
            _ => {}
        }
    }
    out
}

/// Every class's fix, for every task, is one an operator can copy: it never runs
/// `edgecore --version` (which starts a second edgecore), names `--reset-first` only
/// for joins, and every flag it names exists, is keadm-batch's for that task or keadm's
/// for the command named.
#[test]
fn every_fix_for_every_task_names_only_flags_that_exist_for_it() {
    let batch = batch_flags();
    assert!(batch.iter().any(|f| f == "reset-first"), "{batch:?}");
    let mut checked = 0;
    for class in FailureClass::ALL {
        for task in Task::ALL {
            let fix = class.suggested_fix(task);
            let pair = format!("{class} for {task:?}: {fix}");
            // `edgecore --version` above all: it starts a second edgecore.
            assert!(!fix.contains("--version"), "{pair}");
            assert!(
                task == Task::Join || !fix.contains("--reset-first"),
                "--reset-first is for joins only: {pair}"
            );
            for (whose, flag) in flags_named(&fix, task.command()) {
                checked += 1;
                match whose {
                    None => {
                        assert!(batch.contains(&flag), "keadm-batch has no --{flag}: {pair}");
                        assert!(
                            batch_flag_fits(&flag, task),
                            "--{flag} does nothing for {task:?}: {pair}"
                        );
                    }
                    Some(sub) => assert!(
                        crate::keadm_cmd::keadm_has_flag(&sub, &flag),
                        "keadm {sub} has no --{flag}: {pair}"
                    ),
                }
            }
        }
    }
    assert!(checked > 50, "the fixes name flags: {checked}");
}

/// The defects the review found, each for the task it was found with.
#[test]
fn the_fixes_the_review_found_wrong_are_right_for_their_task() {
    let upgrade_pull = FailureClass::ImagePullStalled.suggested_fix(Task::Upgrade);
    assert!(!upgrade_pull.contains("--reset-first"), "{upgrade_pull}");
    assert!(
        upgrade_pull.contains("`--image` in keadmCmd"),
        "{upgrade_pull}"
    );
    let join_pull = FailureClass::ImagePullStalled.suggested_fix(Task::Join);
    assert!(join_pull.contains("--reset-first"), "{join_pull}");
    let mismatch = FailureClass::VersionMismatch.suggested_fix(Task::Upgrade);
    assert!(!mismatch.contains("edgecore --version"), "{mismatch}");
    assert!(
        mismatch.contains("`journalctl -u edgecore | grep Version`")
            && mismatch.contains("`systemctl status edgecore`"),
        "{mismatch}"
    );
    assert!(mismatch.contains("--rollback-on-failure"), "{mismatch}");
    // --rollback-on-failure is an upgrade's: a rollback's mismatch does not name it.
    let rolled = FailureClass::VersionMismatch.suggested_fix(Task::Rollback);
    assert!(!rolled.contains("--rollback-on-failure"), "{rolled}");
    assert!(rolled.contains("the version rolled back to"), "{rolled}");
}
