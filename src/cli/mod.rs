//! The command line, parsed with clap into typed [`Command`] options. The only module
//! that knows clap.
//!
//! Here: the top of the command line (`keadm-batch batch`, `completions`, `man`), the
//! subcommands of `batch`, `--version`, and [`parse`], which hands each subcommand's
//! arguments to the file that holds them and converts them: `batch` (a run's), `bundle`,
//! `merge`, `report`, `status`, `gen_config`, `completions` and `man`; `values` holds
//! the value enums and value parsers they share.

mod batch;
mod bundle;
mod completions;
mod gen_config;
mod man;
mod merge;
mod report;
mod status;
mod values;

pub use completions::{UnknownShell, write_completions};
pub use man::{EXIT_STATUS, write_man_page};

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::options::Command;
use crate::stage::CopyFormat;
use batch::BatchArgs;
use bundle::BundleArgs;
use gen_config::GenConfigArgs;
use merge::MergeArgs;
use report::ReportArgs;
use status::StatusArgs;

#[derive(Parser, Debug)]
#[command(
    name = "keadm-batch",
    version,
    long_version = long_version(),
    about = "Enroll, reset, upgrade or reconfigure KubeEdge edge nodes in bulk over SSH.",
    long_about = "Enroll, reset, upgrade or reconfigure KubeEdge edge nodes in bulk over SSH.\n\nReads the config files of KubeEdge's `keadm batch` unchanged.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Subcommand, Debug)]
enum TopCommand {
    /// Batch process nodes using a config file (as `keadm batch`).
    Batch(Box<BatchArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `keadm-batch man > keadm-batch.1`.
    Man,
}

/// The process that makes a staged keadm's packed copy (src/stage/recompress.rs, whose
/// `PACK_COMMAND` this is): `keadm-batch pack-copy FORMAT BINARY SHA256`, started by a run
/// with the staging directory on its standard input. Never typed by an operator, so it is
/// kept out of clap, and so out of --help, the man page and the shell completions.
const PACK_COPY: &str = "pack-copy";

#[derive(Subcommand, Debug)]
enum BatchSub {
    /// Write a commented config template, or a config whose nodes come from a CSV file or
    /// an Ansible inventory (--from).
    ///
    /// With --from FILE, the config's nodes come from a CSV file (a header row, then a node
    /// per row) or an Ansible inventory (INI or YAML), each node under a comment naming its
    /// line there. A row that cannot become a node is an error naming its file and line,
    /// and then nothing is written.
    GenConfig(GenConfigArgs),
    /// Combine the run directories of several shards (--shard I/N runs) into one summary
    /// and one keadm-style log; every node must appear in exactly one of them.
    Merge(MergeArgs),
    /// Write report.html into a run directory again, from its summary.json
    ///
    /// The page holds the run's header, a timeline of every node's phases, the failures
    /// by class with their fix, and the sites. A run writes it itself; this is for older
    /// runs, a run that never finished (its journal is read then), and a merged one.
    /// Prints the page's path. Exit 2 when RUN_DIR has neither a summary nor a journal
    /// it can read.
    Report(ReportArgs),
    /// Show each node of the config, read-only: reachable over SSH, edgecore running and
    /// its version, keadm's version, when its edge certificate expires, and the node's
    /// outcome in the latest run here.
    ///
    /// One SSH round trip per node, at most maxRunNum at once, with a run's host-key
    /// checks (the same --known-hosts and policy); it changes nothing on any node and
    /// writes no run directory. A certificate that expires within --cert-warn-days is
    /// warned of. Exit 0 when every node answered, 1 when some did not.
    Status(StatusArgs),
    /// Write the kit an air-gapped run needs (keadm releases, images, kit.json) into a
    /// directory or one archive; at the site, verify or extract it.
    ///
    /// On a connected machine, write the kit an air-gapped run needs into DIR (--into DIR,
    /// or -o DIR): keadm releases (verified as a run stages them), the installation-package
    /// and sandbox images and the site's own (keadm.extraImages, --image) for every
    /// archGroup arch, and kit.json listing every file's sha256. Use it with
    /// keadm.download.enable: false and keadm.offlinePackageDir: DIR. A rerun into the same
    /// DIR updates it, keeping what is already right. --archive FILE.tar also writes the
    /// kit as one file, with its sha512 in FILE.tar.sha512. At the site, --verify checks a
    /// copied kit (directory or archive) without a config, and --extract unpacks an
    /// archive into a new directory (--into DIR, or -o DIR).
    Bundle(Box<BundleArgs>),
}

/// klog's `-v LEVEL` (`-v 4`, `-v=4`, `-v4`, `--verbose 2`) confuses clap into talking
/// about subcommands or unknown arguments; when the failed command line has one, say
/// what keadm-batch's `-v` is instead.
fn explain_verbosity_level(err: clap::Error, args: &[OsString]) -> clap::Error {
    let is_level = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let has_level = args.iter().enumerate().any(|(i, arg)| {
        let arg = arg.to_string_lossy();
        let next = args.get(i + 1).map(|a| a.to_string_lossy());
        match arg.as_ref() {
            "-v" | "--verbose" => next.is_some_and(|n| is_level(&n)),
            other => other
                .strip_prefix("-v")
                .or_else(|| other.strip_prefix("--verbose="))
                .map(|rest| rest.strip_prefix('=').unwrap_or(rest))
                .is_some_and(is_level),
        }
    });
    if !has_level || !err.use_stderr() {
        return err;
    }
    command().error(
        clap::error::ErrorKind::UnknownArgument,
        "keadm-batch's -v takes no level: it is on or off, and prints every step of every node. klog's -v LEVEL (as in keadm -v 4) is not supported; write -v alone.",
    )
}

/// `--version`: what an operator checks a control host's copy against, for CVEs among
/// others: the version, the commit and date it was built from and for which target, and
/// the libssh2, OpenSSL, zlib, liblzma and libzstd inside (stamped by build.rs; OpenSSL's
/// asked of the library itself, so a dynamically linked one reports the host's, and
/// libzstd's too). `-V` prints only the version.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        // The release build (feature `vendored`) compiles OpenSSL and zlib in.
        let linked = if cfg!(feature = "vendored") {
            "built in"
        } else {
            "the system library"
        };
        format!(
            "{version}\n\
             commit:  {commit}\n\
             built:   {date}\n\
             target:  {target}\n\
             libssh2: {libssh2}\n\
             OpenSSL: {openssl} ({linked})\n\
             zlib:    {zlib}\n\
             liblzma: {liblzma}\n\
             libzstd: {libzstd} ({libzstd_linked})",
            version = env!("CARGO_PKG_VERSION"),
            commit = env!("KEADM_BATCH_GIT_COMMIT"),
            date = env!("KEADM_BATCH_BUILD_DATE"),
            target = env!("KEADM_BATCH_TARGET"),
            libssh2 = env!("KEADM_BATCH_LIBSSH2"),
            openssl = openssl::version::version(),
            zlib = env!("KEADM_BATCH_ZLIB"),
            liblzma = env!("KEADM_BATCH_LIBLZMA"),
            libzstd = zstd::zstd_safe::version_string(),
            libzstd_linked = env!("KEADM_BATCH_LIBZSTD_LINKED"),
        )
    })
}

/// The clap command, for `--help` snapshots and shell completions.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Parses the command line. Errors (and `--help`/`--version`) come back as clap's, which
/// know how to print themselves and which exit code they deserve.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, clap::Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    if let [_, command, format, binary, sha256] = &args[..]
        && command == PACK_COPY
        && let Some(format) = format.to_str().and_then(CopyFormat::named)
    {
        return Ok(Command::PackCopy {
            format,
            binary: PathBuf::from(binary),
            sha256: sha256.to_string_lossy().into_owned(),
        });
    }
    let cli = Cli::try_parse_from(&args).map_err(|err| explain_verbosity_level(err, &args))?;
    let mut batch = match cli.command {
        TopCommand::Batch(batch) => batch,
        TopCommand::Completions { shell } => return Ok(Command::Completions(shell.to_string())),
        TopCommand::Man => return Ok(Command::Man),
    };
    match batch.sub.take() {
        Some(BatchSub::GenConfig(args)) => Ok(gen_config::command_of(args)),
        Some(BatchSub::Merge(args)) => Ok(merge::command_of(args)),
        Some(BatchSub::Report(args)) => Ok(report::command_of(args)),
        Some(BatchSub::Status(args)) => Ok(status::command_of(args)),
        Some(BatchSub::Bundle(bundle)) => bundle::command_of(bundle),
        None => batch::command_of(batch),
    }
}

#[cfg(test)]
mod tests;
