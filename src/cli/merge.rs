//! `keadm-batch batch merge`'s arguments, and their conversion into [`MergeOptions`].

use std::path::PathBuf;

use clap::Args;

use super::values::{RunOutputArg, run_output_format};
use crate::options::{Command, MergeOptions};

#[derive(Args, Debug)]
pub(super) struct MergeArgs {
    /// The shards' run directories (each with summary.json or journal.jsonl), all
    /// checked before anything is printed or written: node names by the config's rules,
    /// final phases, every value of its type. A file that fails is refused with its
    /// line and field (exit 2); text that passes is printed and written with control
    /// characters escaped.
    #[arg(value_name = "DIR", required = true)]
    dirs: Vec<PathBuf>,
    /// The config the shards ran with: every merged node must be one of its nodes, at
    /// the address it gives (loaded as a run loads it, so its passwordEnv variables
    /// must be set).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the merged summary as JSON (or the merged run as JUnit XML) instead of text.
    #[arg(long, value_name = "FORMAT")]
    output: Option<RunOutputArg>,
    /// Also write the merged summary.json, batch_process_log.txt and report.html into DIR.
    #[arg(long, value_name = "DIR")]
    into: Option<PathBuf>,
    /// Also write the merged run as JUnit XML to FILE (atomically, mode 0600).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also write the merged run's metrics to FILE in Prometheus' text format
    /// (atomically), as a run's --metrics writes them at its end: the fleet's figures
    /// from one file.
    #[arg(long, value_name = "FILE")]
    metrics: Option<PathBuf>,
}

/// The options `batch merge` names.
pub(super) fn command_of(args: MergeArgs) -> Command {
    let MergeArgs {
        dirs,
        config,
        output,
        into,
        junit,
        metrics,
    } = args;
    Command::Merge(MergeOptions {
        dirs,
        config,
        output: run_output_format(output),
        into,
        junit,
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::run;
    use crate::options::OutputFormat;

    #[test]
    fn merge_takes_dirs() {
        assert_eq!(
            run(&["k", "batch", "merge", "a", "b", "--output", "json"]).unwrap(),
            Command::Merge(MergeOptions {
                dirs: vec!["a".into(), "b".into()],
                config: None,
                output: OutputFormat::Json,
                into: None,
                junit: None,
                metrics: None,
            })
        );
        let Command::Merge(options) = run(&[
            "k", "batch", "merge", "a", "--output", "junit", "--junit", "m.xml",
        ])
        .unwrap() else {
            panic!("not a merge")
        };
        assert_eq!(options.output, OutputFormat::Junit);
        assert_eq!(options.junit, Some(PathBuf::from("m.xml")));
        let Command::Merge(options) = run(&["k", "batch", "merge", "-c", "c.yaml", "a"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(options.config, Some(PathBuf::from("c.yaml")));
        assert!(run(&["k", "batch", "merge"]).is_err());
    }
}
