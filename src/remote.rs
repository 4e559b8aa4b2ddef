//! The shell we send to nodes, and how to read what they answer. Each script is a POSIX
//! sh file in src/remote/scripts/ (see [`script`]: values reach a script only as quoted
//! parameters, never as its text), and this module and its neighbours give each one its
//! values and read its output, pure and unit-tested, so the pipeline reads as steps and
//! every remote command can be reviewed side by side: the prepare, upload, run and kill
//! scripts, the pre-flight probe (in [`preflight_probe`]; `kubeedge::preflight` reads its
//! output), the edgecore log reader, and the kill script the SSH engine runs after a
//! deadline. One piece lives elsewhere on purpose: keadm's own command line
//! (`cd <dir> && ./keadm <cmd>`, `plan::keadm_command`), which the plan builds as keadm
//! does because the run log and the dry run show it; [`run_script`] runs it as given.
//!
//! Everything here is POSIX sh and busybox-friendly: edge images are often minimal.
//! The container runtime's part (its probe and the import of offline images) is in
//! [`runtime`].

use std::sync::LazyLock;

mod edge_task;
mod identity;
mod preflight_probe;
pub mod relay;
mod reset_check;
mod runtime;
pub(crate) mod script;
#[cfg(test)]
pub(crate) mod sent_forms;
mod status_probe;

use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::shell::shell_quote;

pub use edge_task::{
    ABORTED_LINE, ALREADY_RUNS, EDGE_TASK_CHECK, EDGECORE_RUNTIME_ENDPOINT, EdgeTaskCheck,
    REMOVE_REPORT, ReportRead, UPGRADE_REPORT, UpgradeReport, parse_edge_task_check,
    runtime_endpoint, same_version, unless_running, version_in,
};
pub use identity::{NODE_IDENTITY, NodeIdentity, parse_node_identity};
pub use preflight_probe::{CloudcorePorts, JoinSide, preflight_probe_script};
pub use reset_check::{RESET_CHECK, ResetCheck, parse_reset_check};
pub use runtime::{
    ArchiveImport, ImportReport, InArchive, Removed, Runtime, RuntimeFacts, cli_output,
    import_script, parse_import, parse_removed, parse_runtime_facts, remove_archives_script,
    runtime_probe_script,
};
pub use status_probe::{EDGECORE_BIN, EdgeCert, NodeStatus, parse_status, status_probe_script};

/// The file beside an uploaded file that records the sha256 of what we sent.
pub const SIDECAR_SUFFIX: &str = ".sha256";
/// Where the running command's process group id is written, in the upload dir, so a
/// command past its deadline can be killed on the node.
/// One per config node (`.keadm-batch.<index>.pgid`): two nodes of a config may be one
/// host, and a deadline on one must not kill the other's keadm.
fn pgid_file(index: usize) -> String {
    format!(".keadm-batch.{index}.pgid")
}

/// How a remote command is wrapped for privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// Run as the login user (root, or `sudo: false`).
    Login,
    /// Run under sudo, passwordless.
    SudoNoPassword,
    /// Run under sudo; the password is the first line on stdin.
    SudoPassword,
}

impl Privilege {
    /// The privilege of a node's scripts: sudo where the node's scripts run under sudo,
    /// with the password on stdin when the login has one.
    pub fn of(sudo: bool, has_password: bool) -> Privilege {
        match (sudo, has_password) {
            (false, _) => Privilege::Login,
            (true, true) => Privilege::SudoPassword,
            (true, false) => Privilege::SudoNoPassword,
        }
    }

    /// Whether the caller must write [`password_preamble`] before any other stdin.
    pub fn needs_password_line(self) -> bool {
        self == Privilege::SudoPassword
    }
}

/// The line that follows the sudo password on stdin. The script under sudo reads lines
/// until it has read this one, so whether sudo prompted or not (cached credentials, a
/// NOPASSWD rule for `sh` but not for `true`), the password is consumed there and never
/// reaches `cat` or keadm.
pub const STDIN_MARK: &str = "KB_STDIN_MARK";

/// What goes first on stdin under [`Privilege::SudoPassword`]: the password line, then
/// the marker line.
pub fn password_preamble(password: &str) -> String {
    format!("{password}\n{STDIN_MARK}\n")
}

/// Reads stdin up to and including the marker line: one line when sudo took the
/// Reads stdin up to and including the marker line: one line when sudo took the
/// password, two when it did not prompt. Anything else stops the script before it runs.
pub(crate) static SKIP_TO_MARK: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/skip_to_mark.sh")));

/// Wraps `script` so that it runs with `privilege`: one `sudo ... sh -c` around all of it,
/// so `cd`, `yes |` and `./keadm` all run as root and the password never appears in a
/// command line. The script is `sh -c`'s argument, quoted whole.
pub fn wrap(script: &str, privilege: Privilege) -> String {
    match privilege {
        Privilege::Login => script.to_string(),
        Privilege::SudoNoPassword => ["sudo -n sh -c ", &shell_quote(script)].concat(),
        Privilege::SudoPassword => [
            "sudo -S -p '' sh -c ",
            &shell_quote(&[SKIP_TO_MARK.as_str(), script].concat()),
        ]
        .concat(),
    }
}

/// What the one preparatory round trip learned about the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `uname -m`.
    pub machine: Option<String>,
    /// Size and recorded sha256 (sidecar) of each file already in the upload dir.
    pub existing: Vec<ExistingFile>,
    /// Why the upload dir cannot be trusted, if it cannot.
    pub dir_problem: Option<String>,
    /// For sudo: whether it needs a password.
    pub sudo_needs_password: Option<bool>,
    /// Whether the node has `sha256sum` (for `--verify-remote`).
    pub computed_sha256: Vec<(String, String)>,
    /// The tools [`TOOLS_PROBE`] found working (`tar`, `gzip`, `sha512sum`, `xz`, `zstd`,
    /// `sha256sum`, `openssl`); `None` when the probe did not run.
    pub tools: Option<Vec<String>>,
    /// What [`runtime_probe_script`], appended for offline images, found; `None` when it
    /// did not run.
    pub runtime: Option<RuntimeFacts>,
}

impl NodeFacts {
    /// Whether the node can receive the release tarball and unpack it itself.
    pub fn can_unpack_tarball(&self) -> bool {
        self.has_tools(&["tar", "gzip", "sha512sum"])
    }

    /// What the node checks a copy of the binary packed for `tool` (`zstd`, `xz`) with,
    /// when it can receive one ([`receive_packed_script`]): `tool` and a working sha256
    /// tool.
    pub fn packed_hasher(&self, tool: &str) -> Option<Sha256Tool> {
        self.sha256_tool().filter(|_| self.has_tools(&[tool]))
    }

    /// The fastest working tool the node hashes with: OpenSSL's where it works (it uses
    /// the CPU's SHA extensions, about five times coreutils' speed here), else
    /// `sha256sum`.
    pub fn sha256_tool(&self) -> Option<Sha256Tool> {
        if self.has_tools(&["openssl"]) {
            Some(Sha256Tool::Openssl)
        } else if self.has_tools(&["sha256sum"]) {
            Some(Sha256Tool::Sha256sum)
        } else {
            None
        }
    }

    fn has_tools(&self, wanted: &[&str]) -> bool {
        self.tools
            .as_ref()
            .is_some_and(|tools| wanted.iter().all(|t| tools.iter().any(|have| have == t)))
    }
}

/// A command that prints the sha256 of its stdin in hex, first on its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sha256Tool {
    Openssl,
    Sha256sum,
}

impl Sha256Tool {
    /// Its name, as receive.sh's and relay_fetch.sh's `KB_HASHER` take it.
    fn name(self) -> &'static str {
        match self {
            Sha256Tool::Openssl => "openssl",
            Sha256Tool::Sha256sum => "sha256sum",
        }
    }
}

/// The line a receiving script prints when what it received does not hash to what was
/// sent, with the node's digest after it; [`received_sha256`] reads it.
const SHA256_GOT: &str = "KB_SHA256_GOT";

/// The digest the node computed for a file whose check failed, from a receiving script's
/// output; `None` when the check did not fail (another step did). Empty when the node's
/// tool printed nothing.
pub fn received_sha256(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|line| line.trim_end().strip_prefix(SHA256_GOT))
        .map(|digest| one_line(digest.trim(), 64))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingFile {
    pub name: String,
    pub size: u64,
    pub sidecar: String,
}

/// The preparatory script (scripts/prepare.sh): create and check the upload dir, report
/// `uname -m`, and the size and sidecar of each of `files` we may skip uploading (and
/// with `verify` their sha256 as the node computes it). One round trip. Runs with the
/// privileges the later steps will have (under sudo for non-root logins).
pub fn prepare_script(dir: &str, files: &[&str], verify: bool) -> String {
    script::with_values_and_words(
        include_str!("remote/scripts/prepare.sh"),
        &[
            ("KB_DIR", dir),
            ("KB_VERIFY", if verify { "1" } else { "" }),
        ],
        Some(files),
    )
}

/// The line the one-channel script prints once the node's facts are out; the control
/// host answers it on the same channel's stdin (see [`await_answer`]).
pub const FACTS_END: &str = "KB_FACTS_END";

/// The exit status of the one-channel script when its answer did not arrive whole: none
/// of it ran.
pub const ANSWER_CUT: i32 = 203;

/// Appended to [`prepare_script`] (and its probes) for the one-channel exchange
/// (scripts/await_answer.sh): prints [`FACTS_END`], reads the rest of the script from
/// stdin as [`answer`] frames it, and runs it in this same shell, so a node costs one
/// exec channel; an answer cut short runs not at all (exit [`ANSWER_CUT`]).
pub fn await_answer() -> String {
    AWAIT_ANSWER.clone()
}

static AWAIT_ANSWER: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/await_answer.sh")));

/// Frames `script` as the answer [`await_answer`]'s script reads: its line count, then
/// its lines. An empty script is the answer "stop here": the node's script ends with
/// status 0.
pub fn answer(script: &str) -> String {
    let body = script.strip_suffix('\n').unwrap_or(script);
    if body.is_empty() {
        return "0\n".to_string();
    }
    format!("{}\n{body}\n", body.split('\n').count())
}

/// Appended to [`prepare_script`] when the node may get a packed copy of the binary (zstd
/// or xz) or the release tarball instead of the binary (scripts/tools_probe.sh): prints
/// `KB_TOOLS` and the tools that actually work. A dozen tiny processes per node, so the
/// pipeline adds it only when a tarball would pay off.
pub static TOOLS_PROBE: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/tools_probe.sh")));

/// The line [`with_sudo_probe`] prints when sudo wants the password: what goes first on
/// stdin from then on is [`password_preamble`].
pub const SUDO_WANTS_PASSWORD: &str = "KB_SUDO password";

/// Runs `script` under sudo when `sudo` is set, finding out whether sudo needs a
/// password: `sudo -n` first, then `sudo -S` reading the password line we send.
/// Prints `KB_SUDO nopasswd` or `KB_SUDO password` before the script's own output.
/// Feed it [`password_preamble`] on stdin when there is a password. scripts/sudo_probe.sh,
/// with `script` as `sh -c`'s argument: sent once, for either answer.
pub fn with_sudo_probe(script: &str) -> String {
    script::with_values(
        include_str!("remote/scripts/sudo_probe.sh"),
        &[("KB_SCRIPT", script), ("KB_SKIP_TO_MARK", &SKIP_TO_MARK)],
    )
}

/// Parses the output of [`prepare_script`] (possibly behind [`with_sudo_probe`]);
/// `files` are the names the script was made for.
pub fn parse_facts(output: &str, files: &[&str]) -> NodeFacts {
    let name_at = |index: &str| -> Option<String> {
        index
            .parse::<usize>()
            .ok()
            .and_then(|i| files.get(i))
            .map(|n| n.to_string())
    };
    let mut facts = NodeFacts::default();
    let mut dir_ok = false;
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("KB_ARCH ") {
            // `uname -m` is a short word; anything else is cut before it is repeated in
            // every message about the node.
            facts.machine = Some(one_line(rest, 64));
        } else if let Some(rest) = line.strip_prefix("KB_BAD ") {
            facts.dir_problem = Some(one_line(rest, MESSAGE_CHARS));
        } else if line == "KB_DIR_OK" {
            dir_ok = true;
        } else if let Some(rest) = line.strip_prefix("KB_TOOLS") {
            facts.tools = Some(rest.split_whitespace().map(str::to_string).collect());
        } else if let Some(rest) = line.strip_prefix("KB_SUDO ") {
            facts.sudo_needs_password = Some(rest == "password");
        } else if let Some(rest) = line.strip_prefix("KB_FILE ") {
            let mut parts = rest.splitn(3, ' ');
            if let (Some(index), Some(size), Some(sidecar)) =
                (parts.next(), parts.next(), parts.next())
                && let Ok(size) = size.parse()
                && let Some(name) = name_at(index)
            {
                facts.existing.push(ExistingFile {
                    name,
                    size,
                    sidecar: sidecar.trim().to_string(),
                });
            }
        } else if let Some(rest) = line.strip_prefix("KB_SHA ")
            && let Some((index, sha)) = rest.split_once(' ')
            && let Some(name) = name_at(index)
        {
            facts.computed_sha256.push((name, sha.trim().to_string()));
        }
    }
    facts.runtime = parse_runtime_facts(output);
    if !dir_ok && facts.dir_problem.is_none() {
        let tail: Vec<&str> = output.lines().rev().take(3).collect();
        facts.dir_problem = Some(if output.trim().is_empty() {
            "the preparatory step printed nothing".to_string()
        } else {
            format!(
                "the preparatory step did not finish: {}",
                one_line(
                    &tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                    MESSAGE_CHARS
                )
            )
        });
    }
    facts
}

/// A temporary name beside `name` in the upload dir, unique per run and node: two nodes
/// of one run that share a host (and so an upload dir) must not write one file.
pub fn temp_name(name: &str, token: &str, node_index: usize) -> String {
    format!(".{name}.{token}-{node_index}.tmp")
}

/// After a failed upload (scripts/upload_failed.sh): removes the partial temporary file
/// (it may be what filled the disk) and reports the space left in the dir as
/// `KB_FREE <KiB>`.
pub fn upload_failed_script(dir: &str, tmp: &str) -> String {
    script::with_values(
        include_str!("remote/scripts/upload_failed.sh"),
        &[("KB_DIR", dir), ("KB_TMP", tmp)],
    )
}

/// Parses the output of [`upload_failed_script`]: free KiB in the upload dir.
pub fn parse_free_kib(output: &str) -> Option<u64> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("KB_FREE "))
        .and_then(|kib| kib.trim().parse().ok())
}

/// What a failed receive does with the file (receive.sh's `KB_FAILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnFailure<'a> {
    /// Leaves it to the caller; the script ends with the failed step's status.
    Keep,
    /// Removes it, prints the line (when not empty) and exits 3.
    Remove(&'a str),
    /// Removes it, reads the rest of stdin (so the sender is not left writing into a
    /// closed channel), prints the line and exits 3.
    Drain(&'a str),
}

/// What arrives on stdin (as it came, or packed with `unpack`: `gzip`, `zstd`, `xz`),
/// received into `dir/tmp` with `mode` by scripts/receive.sh: its size checked after the
/// producer ends, and with `check` its sha256 too, by that tool, before anything moves it
/// into place.
fn receive_into(
    (dir, tmp): (&str, &str),
    unpack: &str,
    mode: u32,
    size: u64,
    check: Option<(&str, Sha256Tool)>,
    on_failure: OnFailure,
) -> String {
    let (sha256, hasher) = check.map_or(("", ""), |(sha256, tool)| (sha256, tool.name()));
    let (failed, line) = match on_failure {
        OnFailure::Keep => ("keep", ""),
        OnFailure::Remove(line) => ("remove", line),
        OnFailure::Drain(line) => ("drain", line),
    };
    script::with_values(
        include_str!("remote/scripts/receive.sh"),
        &[
            ("KB_DIR", dir),
            ("KB_TMP", tmp),
            ("KB_MODE", &format!("{mode:o}")),
            ("KB_SIZE", &size.to_string()),
            ("KB_UNPACK", unpack),
            ("KB_SHA256", sha256),
            ("KB_HASHER", hasher),
            ("KB_FAILED", failed),
            ("KB_FAILED_LINE", line),
        ],
    )
}

/// How a file travels on stdin to [`receive_script`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As it is.
    Plain,
    /// gzip-compressed: the node decompresses it as it arrives.
    Gzip,
}

/// Receives a file on stdin into `dir/tmp` with `mode` (over exec: for nodes without SFTP,
/// and under sudo), checking its size and, with `check`, its sha256 ([`receive_into`]).
/// A gzip-compressed file that cannot be written whole is removed, and the script exits 3
/// after printing `KB_GZIP_FAILED`, so the caller can send the file as it is instead. A
/// plain file that fails its sha256 is removed at once (exit 3): nothing may use it, even
/// if the connection breaks before the control host could say so; one that fails
/// otherwise is left for the caller, which removes it and says whether the disk is full.
pub fn receive_script(
    dir: &str,
    tmp: &str,
    mode: u32,
    size: u64,
    check: Option<(&str, Sha256Tool)>,
    encoding: Encoding,
) -> String {
    let (unpack, on_failure) = match (encoding, check) {
        (Encoding::Gzip, _) => ("gzip", OnFailure::Remove("KB_GZIP_FAILED")),
        (Encoding::Plain, Some(_)) => ("", OnFailure::Remove("")),
        (Encoding::Plain, None) => ("", OnFailure::Keep),
    };
    receive_into((dir, tmp), unpack, mode, size, check, on_failure)
}

/// Receives the release tarball on stdin into `dir/tar_tmp` and, as it arrives, unpacks
/// `entry` (the keadm binary inside) to `dir/bin_tmp` (scripts/receive_tarball.sh); then
/// checks the tarball's sha512 and the binary's size, gives it mode 0755 and removes the
/// tarball. Any failure removes both temporary files, reads the rest of stdin and exits 3
/// after printing `KB_TARBALL_FAILED`, so the caller can fall back to sending the binary.
pub fn receive_tarball_script(
    dir: &str,
    tar_tmp: &str,
    bin_tmp: &str,
    sha512: &str,
    entry: &str,
    binary_size: u64,
) -> String {
    script::with_values(
        include_str!("remote/scripts/receive_tarball.sh"),
        &[
            ("KB_DIR", dir),
            ("KB_TAR_TMP", tar_tmp),
            ("KB_BIN_TMP", bin_tmp),
            ("KB_SHA512", sha512),
            ("KB_ENTRY", entry),
            ("KB_SIZE", &binary_size.to_string()),
        ],
    )
}

/// Receives a copy of the binary packed with `tool` (`zstd`, `xz`: receive.sh knows how
/// each unpacks) on stdin and unpacks it to `dir/bin_tmp`; the binary's sha256 and size
/// must be the ones the control host derived from the verified release, before anything
/// is moved into place. Any failure removes the temporary file, reads the rest of stdin
/// and exits 3 after printing `KB_<TOOL>_FAILED` (`KB_XZ_FAILED`), so the caller can fall
/// back to the next form.
///
/// The node hashes what it unpacks while it receives, through a `tee`, with the fastest
/// tool it has (OpenSSL's, else `sha256sum`): nothing is read again after the last byte.
/// Hashing the file afterwards spared the node the `tee`'s CPU but cost it 0.11-0.12 s
/// after the last byte for an 83 MB keadm, which the link had to wait for (measured in
/// docs/decisions.md).
pub fn receive_packed_script(
    (dir, bin_tmp): (&str, &str),
    sha256: &str,
    binary_size: u64,
    hasher: Sha256Tool,
    tool: &str,
) -> String {
    let failed_line = ["KB_", &tool.to_ascii_uppercase(), "_FAILED"].concat();
    receive_into(
        (dir, bin_tmp),
        tool,
        0o755,
        binary_size,
        Some((sha256, hasher)),
        OnFailure::Drain(&failed_line),
    )
}

/// Moves uploaded temporary files into place and writes their sidecars
/// (scripts/finalize.sh); each of `moves` is (temporary name, name, sha256). Every rename
/// is within one directory, so each file appears whole or not at all. The script exits
/// `failed` when it cannot, else goes on.
pub fn finalize_script(dir: &str, moves: &[(String, String, String)], failed: i32) -> String {
    let words: Vec<&str> = moves
        .iter()
        .flat_map(|(tmp, name, sha256)| [tmp.as_str(), name, sha256])
        .collect();
    script::with_values_and_words(
        include_str!("remote/scripts/finalize.sh"),
        &[("KB_DIR", dir), ("KB_EXIT", &failed.to_string())],
        Some(&words),
    )
}

/// The record of the running command's process group (see [`run_script`]), in the
/// upload dir.
fn pgid_path(upload_dir: &str, index: usize) -> String {
    [upload_dir.trim_end_matches('/'), "/", &pgid_file(index)].concat()
}

/// The command that runs keadm (scripts/run.sh, then `keadm_command` as the plan has it:
/// keadm's own `cd <dir> && ./keadm <cmd>`, shell by definition): records its process
/// group (so a deadline can kill the whole tree on the node), then runs the command with
/// stdin from /dev/null (`yes |` still feeds a reset): nothing we send can reach keadm.
pub fn run_script(upload_dir: &str, index: usize, keadm_command: &str) -> String {
    let mut script = script::with_values(
        include_str!("remote/scripts/run.sh"),
        &[("KB_PGID_FILE", &pgid_path(upload_dir, index))],
    );
    script.push_str(keadm_command);
    script
}

/// What [`first_then`] prints after the first step, before the step's name and status:
/// `keadm-batch: keadm reset edge --force exited with status 0`.
const FIRST_EXIT: &str = "keadm-batch: ";

/// A step before the command: `--reset-first`'s `keadm reset edge --force` before a join,
/// `--backup`'s `keadm backup edge` before an upgrade. Runs `first`, prints its exit
/// status on a line of its own (naming it as `what`), and runs `then` only when `first`
/// exited with 0; otherwise the script exits with `failed_exit`
/// (scripts/first_then.sh, between the two).
pub fn first_then(what: &str, first: &str, then: &str, failed_exit: i32) -> String {
    let mut script = script::assignments(&[
        ("KB_FIRST_STEP", what),
        ("KB_FIRST_FAILED", &failed_exit.to_string()),
    ]);
    script.push_str(first);
    script.push('\n');
    script.push_str(&script::sendable(include_str!(
        "remote/scripts/first_then.sh"
    )));
    script.push_str(then);
    script
}

/// The first step's exit status, from the line [`first_then`] printed for `what`.
pub fn first_exit(line: &str, what: &str) -> Option<i32> {
    line.trim()
        .strip_prefix(FIRST_EXIT)?
        .strip_prefix(what)?
        .strip_prefix(" exited with status ")?
        .parse()
        .ok()
}

/// Kills the process group recorded by [`run_script`] (scripts/kill.sh), only if its
/// leader is still the process that made the record (same start time) or is gone.
pub fn kill_script(upload_dir: &str, index: usize) -> String {
    script::with_values(
        include_str!("remote/scripts/kill.sh"),
        &[("KB_PGID_FILE", &pgid_path(upload_dir, index))],
    )
}

/// How [`stop_script`] ended, from its one `KB_STOP` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The group exited within the grace period after SIGTERM.
    ByTerm,
    /// It was still running when the grace period was over (or there was none): SIGKILL.
    ByKill,
    /// Nothing of the recorded group was running any more.
    Gone,
}

/// The line [`stop_script`] ends with: `KB_STOP exited`, `KB_STOP killed` or
/// `KB_STOP gone`.
const STOPPED: &str = "KB_STOP ";

/// What [`stop_script`] printed, `None` when it did not get as far (no record of the
/// group, one that is not ours, or the node did not answer).
pub fn parse_stopped(output: &str) -> Option<Stopped> {
    output
        .lines()
        .find_map(|line| match line.trim().strip_prefix(STOPPED)? {
            "exited" => Some(Stopped::ByTerm),
            "killed" => Some(Stopped::ByKill),
            "gone" => Some(Stopped::Gone),
            _ => None,
        })
}

/// Stops the process group recorded by [`run_script`] after its deadline
/// (scripts/stop.sh), checked as [`kill_script`] checks it: SIGTERM to the group, a wait
/// of up to `grace_secs` for it to be gone, then SIGKILL to what is left; with no grace,
/// SIGKILL at once.
pub fn stop_script(upload_dir: &str, index: usize, grace_secs: u64) -> String {
    script::with_values(
        include_str!("remote/scripts/stop.sh"),
        &[
            ("KB_PGID_FILE", &pgid_path(upload_dir, index)),
            (
                "KB_GRACE_TENTHS",
                &grace_secs.saturating_mul(10).to_string(),
            ),
        ],
    )
}

/// The last 40 lines of edgecore's log, from journald or else from the log file
/// (scripts/edgecore_log.sh): a join that timed out waiting for its certificates says why
/// only there.
pub static EDGECORE_LOG: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/edgecore_log.sh")));

/// What a node that never registered says of its edgecore, once its wait has ended
/// (scripts/edgecore_state.sh): the last 30 lines of edgecore's log, then one marker line
/// (`kb-edgecore: running` or `not running`) and its hostname (a node joined without
/// --edgenode-name registers under it). Reads only.
pub static EDGECORE_STATE: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/edgecore_state.sh")));

/// The node's answers to [`EDGECORE_STATE`], read from its (untrusted) lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EdgecoreState {
    /// `None` when the marker line did not come back.
    pub running: Option<bool>,
    pub hostname: Option<String>,
    /// The log lines, oldest first.
    pub log: Vec<String>,
}

impl EdgecoreState {
    pub fn parse(lines: &[String]) -> EdgecoreState {
        let mut state = EdgecoreState::default();
        for line in lines {
            if let Some(word) = line.strip_prefix("kb-edgecore: ") {
                state.running = Some(word == "running");
            } else if let Some(name) = line.strip_prefix("kb-hostname: ") {
                state.hostname = Some(name.trim().to_string()).filter(|n| !n.is_empty());
            } else if !line.trim().is_empty() {
                state.log.push(line.clone());
            }
        }
        state
    }
}

/// Run by the SSH engine on a second channel after a deadline or an abort
/// (scripts/kill_siblings.sh): kills the process group of every other child of this
/// connection's sshd.
pub static KILL_SIBLINGS: LazyLock<String> =
    LazyLock::new(|| script::sendable(include_str!("remote/scripts/kill_siblings.sh")));

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Runs `script` with `sh -c`, `input` on its stdin; stdout captured.
    fn sh_with_input(script: &str, input: &[u8]) -> std::process::Output {
        shell_with_input(&["sh"], script, input)
    }

    /// Runs `script` with `shell -c` (`shell` a command and its first arguments), `input`
    /// on its stdin; stdout captured.
    fn shell_with_input(shell: &[&str], script: &str, input: &[u8]) -> std::process::Output {
        use std::io::Write;
        let mut child = std::process::Command::new(shell[0])
            .args(&shell[1..])
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// The one-channel exchange: the facts, then the answer runs in the same shell with
    /// the bytes after it still on stdin; an answer cut short runs not at all.
    #[test]
    fn the_answer_runs_after_the_facts_and_leaves_the_upload_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let d = shell_quote(dir.path().to_str().unwrap());
        let script = format!("echo KB_ARCH x86_64\n{}", await_answer());
        let tail = format!("cd {d}\ncat > upload\necho \"got $(wc -c < upload) bytes\"\nexit 7");
        let mut input = answer(&tail).into_bytes();
        input.extend_from_slice(b"binary\nbytes");
        let out = sh_with_input(&script, &input);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "KB_ARCH x86_64\nKB_FACTS_END\ngot 12 bytes\n"
        );
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(
            std::fs::read(dir.path().join("upload")).unwrap(),
            b"binary\nbytes"
        );
        // BusyBox's shell, on minimal edge images, reads its pipe a byte at a time too.
        std::fs::remove_file(dir.path().join("upload")).unwrap();
        let busybox = shell_with_input(&["/bin/busybox", "sh"], &script, &input);
        assert_eq!(busybox.status.code(), Some(7), "{busybox:?}");
        assert_eq!(
            std::fs::read(dir.path().join("upload")).unwrap(),
            b"binary\nbytes"
        );

        // "Stop here": nothing runs, status 0.
        let out = sh_with_input(&script, answer("").as_bytes());
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "KB_ARCH x86_64\nKB_FACTS_END\n"
        );

        // Cut short (two of three lines), or no count at all: none of it runs.
        let touch = format!("touch {d}/ran\ntouch {d}/ran2\necho x");
        let whole = answer(&touch);
        let cut = &whole[..whole.rfind("echo").unwrap()];
        for input in [cut, "", "x\ntouch ran\n"] {
            let out = sh_with_input(&script, input.as_bytes());
            assert_eq!(out.status.code(), Some(ANSWER_CUT), "{input:?}");
            assert!(!dir.path().join("ran").exists(), "{input:?}");
        }
    }

    #[test]
    fn sudo_wraps_the_whole_script_once() {
        let wrapped = wrap("cd /x && ./keadm join", Privilege::SudoPassword);
        assert!(
            wrapped.starts_with("sudo -S -p '' sh -c 'IFS= read -r kb_l"),
            "{wrapped}"
        );
        assert!(wrapped.ends_with("\ncd /x && ./keadm join'"), "{wrapped}");
        assert_eq!(
            wrap("echo 'a'", Privilege::SudoNoPassword),
            r"sudo -n sh -c 'echo '\''a'\'''"
        );
        assert_eq!(wrap("x", Privilege::Login), "x");
    }

    /// Security finding 6: the script under sudo starts after the marker line whether
    /// sudo read the password line or not, so the password never reaches its stdin.
    #[test]
    fn the_password_line_never_reaches_the_script() {
        let script = format!("{}cat", *SKIP_TO_MARK);
        let run = |input: &str| sh_with_input(&script, input.as_bytes());
        let preamble = password_preamble("s3cret");
        // sudo did not prompt: the whole preamble arrives.
        let out = run(&format!("{preamble}body\n"));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "body\n");
        // sudo read the password line: only the marker is left.
        let out = run(&format!("{}body\n", &preamble["s3cret\n".len()..]));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "body\n");
        // Out of step: nothing runs.
        let out = run("a\nb\nbody\n");
        assert_eq!(out.status.code(), Some(124));
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn temp_names_differ_per_node_of_one_run() {
        assert_eq!(
            temp_name("keadm", "20260101T000000Z-ab12", 3),
            ".keadm.20260101T000000Z-ab12-3.tmp"
        );
        assert_ne!(temp_name("keadm", "t", 0), temp_name("keadm", "t", 1));
    }

    #[test]
    fn free_space_probe_runs_and_parses() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".keadm.t-0.tmp"), b"partial").unwrap();
        let script = upload_failed_script(dir.path().to_str().unwrap(), ".keadm.t-0.tmp");
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(parse_free_kib(&text).is_some(), "{text}");
        assert!(
            !dir.path().join(".keadm.t-0.tmp").exists(),
            "the partial file is removed"
        );
        assert_eq!(parse_free_kib("KB_FREE 60\n"), Some(60));
        assert_eq!(parse_free_kib("df: not found\n"), None);
    }

    #[test]
    fn facts_parse() {
        let out = "KB_SUDO password\nKB_ARCH aarch64\nKB_DIR_OK\nKB_FILE 1 123 abcdef\nKB_SHA 1 ffff\nKB_FILE 7 1 x\n";
        let facts = parse_facts(out, &["ca.crt", "keadm"]);
        assert_eq!(facts.machine.as_deref(), Some("aarch64"));
        assert_eq!(facts.dir_problem, None);
        assert_eq!(facts.sudo_needs_password, Some(true));
        assert_eq!(
            facts.existing,
            vec![ExistingFile {
                name: "keadm".into(),
                size: 123,
                sidecar: "abcdef".into()
            }]
        );
        assert_eq!(facts.computed_sha256, vec![("keadm".into(), "ffff".into())]);
    }

    #[test]
    fn tools_probe_finds_working_tools_only() {
        let facts = probe_tools("");
        assert!(facts.can_unpack_tarball(), "{facts:?}");
        let facts = probe_tools("tar() { false; }");
        assert_eq!(
            facts.tools,
            Some(
                ["sha512sum", "gzip", "xz", "zstd", "sha256sum", "openssl"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert!(!facts.can_unpack_tarball());
        assert!(!parse_facts("KB_DIR_OK\n", &[]).can_unpack_tarball());
    }

    #[test]
    fn tarball_script_unpacks_verifies_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        let top = src.path().join("keadm-v1-linux-amd64/keadm");
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(top.join("keadm"), b"#!/bin/sh\necho hi\n").unwrap();
        let tarball = src.path().join("k.tar.gz");
        let ok = std::process::Command::new("tar")
            .arg("-czf")
            .arg(&tarball)
            .arg("-C")
            .arg(src.path())
            .arg("keadm-v1-linux-amd64")
            .status()
            .unwrap();
        assert!(ok.success());
        let bytes = std::fs::read(&tarball).unwrap();
        let sha512 = {
            use sha2::Digest;
            hex::encode(sha2::Sha512::digest(&bytes))
        };
        let run = |sha: &str, size: u64| {
            let script = receive_tarball_script(
                dir.path().to_str().unwrap(),
                ".t.tmp",
                ".b.tmp",
                sha,
                "keadm-v1-linux-amd64/keadm/keadm",
                size,
            );
            sh_with_input(&script, &bytes)
        };
        let out = run(&sha512, 18);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            std::fs::read(dir.path().join(".b.tmp")).unwrap(),
            b"#!/bin/sh\necho hi\n"
        );
        assert!(!dir.path().join(".t.tmp").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(".b.tmp"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // A wrong digest or size: nothing left behind, exit 3.
        for (sha, size) in [("0".repeat(128), 18), (sha512.clone(), 19)] {
            let out = run(&sha, size);
            assert_eq!(out.status.code(), Some(3));
            assert!(String::from_utf8_lossy(&out.stdout).contains("KB_TARBALL_FAILED"));
            assert!(!dir.path().join(".t.tmp").exists());
            assert!(!dir.path().join(".b.tmp").exists());
        }
        // Bytes that are no tarball, in the run's channel: refused, and all of stdin read,
        // so nothing of it is left for what follows the script.
        let script = receive_tarball_script(
            dir.path().to_str().unwrap(),
            ".t.tmp",
            ".b.tmp",
            &sha512,
            "keadm-v1-linux-amd64/keadm/keadm",
            18,
        );
        let garbage = vec![b'x'; 300_000];
        let out = sh_with_input(
            &format!("( {script} ) || echo \"refused $?\"; echo \"left $(wc -c)\""),
            &garbage,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("KB_TARBALL_FAILED") && stdout.contains("refused 3"),
            "{out:?}"
        );
        assert!(stdout.contains("left 0"), "{out:?}");
        assert!(!dir.path().join(".t.tmp").exists());
        assert!(!dir.path().join(".b.tmp").exists());
    }

    /// What [`TOOLS_PROBE`] finds here, after `stubs` (shell functions that shadow tools).
    fn probe_tools(stubs: &str) -> NodeFacts {
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("{stubs}\n{}", *TOOLS_PROBE)])
            .output()
            .unwrap();
        parse_facts(&String::from_utf8_lossy(&out.stdout), &[])
    }

    #[test]
    fn tools_probe_reports_zstd_xz_and_the_fastest_working_sha256() {
        let facts = probe_tools("");
        assert!(facts.packed_hasher("xz").is_some(), "{facts:?}");
        assert!(facts.packed_hasher("zstd").is_some(), "{facts:?}");
        assert_eq!(facts.sha256_tool(), Some(Sha256Tool::Openssl), "{facts:?}");
        // An openssl that runs but prints something else does not count.
        let facts = probe_tools("openssl() { echo 'SHA256(stdin)= x'; }");
        assert_eq!(
            facts.sha256_tool(),
            Some(Sha256Tool::Sha256sum),
            "{facts:?}"
        );
        let facts = probe_tools("openssl() { false; }; sha256sum() { false; }");
        assert_eq!(facts.packed_hasher("xz"), None, "{facts:?}");
        assert_eq!(facts.packed_hasher("zstd"), None, "{facts:?}");
        let facts = probe_tools("xz() { false; }");
        assert_eq!(facts.packed_hasher("xz"), None, "{facts:?}");
        assert!(facts.packed_hasher("zstd").is_some(), "{facts:?}");
        assert!(facts.can_unpack_tarball(), "{facts:?}");
        // A zstd that runs but cannot unpack what it packs does not count.
        let facts = probe_tools("zstd() { case \"$*\" in *-d*) false ;; *) cat ;; esac; }");
        assert_eq!(facts.packed_hasher("zstd"), None, "{facts:?}");
        assert!(facts.packed_hasher("xz").is_some(), "{facts:?}");
        assert_eq!(parse_facts("KB_TOOLS xz\n", &[]).packed_hasher("xz"), None);
    }

    #[test]
    fn packed_scripts_unpack_while_hashing_and_refuse_a_wrong_binary() {
        for format in crate::stage::CopyFormat::PREFERRED {
            packed_script_unpacks_while_hashing_and_refuses_a_wrong_binary(format);
        }
    }

    fn packed_script_unpacks_while_hashing_and_refuses_a_wrong_binary(
        format: crate::stage::CopyFormat,
    ) {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let binary = b"#!/bin/sh\necho hi\n".repeat(1000);
        let packed = {
            use std::io::Write;
            let mut child = std::process::Command::new(format.name())
                .arg("-c")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&binary).unwrap();
            child.wait_with_output().unwrap().stdout
        };
        let sha256 = hex::encode(sha2::Sha256::digest(&binary));
        let size = binary.len() as u64;
        let run_with = |hasher: Sha256Tool, sha: &str, size: u64, input: &[u8]| {
            let dir = dir.path().to_str().unwrap();
            let script = receive_packed_script((dir, ".b.tmp"), sha, size, hasher, format.name());
            sh_with_input(&script, input)
        };
        let run =
            |sha: &str, size: u64, input: &[u8]| run_with(Sha256Tool::Openssl, sha, size, input);
        // Both hashers check the same digest.
        let out = run_with(Sha256Tool::Sha256sum, &sha256, size, &packed);
        assert!(out.status.success(), "{out:?}");
        let out = run_with(Sha256Tool::Sha256sum, &"0".repeat(64), size, &packed);
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        let out = run(&sha256, size, &packed);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read(dir.path().join(".b.tmp")).unwrap(), binary);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(".b.tmp"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // A wrong digest, a wrong size, a truncated or a corrupt stream: nothing left
        // behind, exit 3.
        let mut corrupt = packed.clone();
        let middle = corrupt.len() / 2;
        corrupt[middle] ^= 0xff;
        for (sha, size, input) in [
            ("0".repeat(64), size, &packed[..]),
            (sha256.clone(), size + 1, &packed[..]),
            (sha256.clone(), size, &packed[..packed.len() / 2]),
            (sha256.clone(), size, &corrupt[..]),
        ] {
            let out = run(&sha, size, input);
            assert_eq!(out.status.code(), Some(3), "{out:?}");
            let failed = format!("KB_{}_FAILED", format.name().to_ascii_uppercase());
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(&failed),
                "{out:?}"
            );
            assert!(!dir.path().join(".b.tmp").exists());
        }
    }

    #[test]
    fn a_gzipped_upload_is_written_decompressed_or_not_at_all() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let data = b"an image archive\n".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let d = dir.path().to_str().unwrap();
        let out = sh_with_input(
            &receive_script(d, ".a.tmp", 0o600, data.len() as u64, None, Encoding::Gzip),
            &gz,
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read(dir.path().join(".a.tmp")).unwrap(), data);
        // Cut short, or the wrong size: nothing left, exit 3.
        for (input, size) in [(&gz[..gz.len() / 2], data.len()), (&gz[..], data.len() + 1)] {
            let out = sh_with_input(
                &receive_script(d, ".b.tmp", 0o600, size as u64, None, Encoding::Gzip),
                input,
            );
            assert_eq!(out.status.code(), Some(3));
            assert!(String::from_utf8_lossy(&out.stdout).contains("KB_GZIP_FAILED"));
            assert!(!dir.path().join(".b.tmp").exists());
        }
    }

    /// An image archive is checked by its sha256 on the node, with either tool and in
    /// either form: one that hashes to something else is removed, exit 3, and the node's
    /// digest is printed for the error.
    #[test]
    fn a_checked_upload_that_does_not_hash_to_what_was_sent_is_removed() {
        use sha2::Digest;
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let data = b"an image archive\n".repeat(100);
        let sha256 = hex::encode(sha2::Sha256::digest(&data));
        let size = data.len() as u64;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let tmp = dir.path().join(".c.tmp");
        for hasher in [Sha256Tool::Openssl, Sha256Tool::Sha256sum] {
            let plain = |sha: &str, size| {
                receive_script(
                    d,
                    ".c.tmp",
                    0o600,
                    size,
                    Some((sha, hasher)),
                    Encoding::Plain,
                )
            };
            let gzipped = |sha: &str| {
                receive_script(
                    d,
                    ".c.tmp",
                    0o600,
                    size,
                    Some((sha, hasher)),
                    Encoding::Gzip,
                )
            };
            for (script, input) in [(plain(&sha256, size), &data), (gzipped(&sha256), &gz)] {
                let out = sh_with_input(&script, input);
                assert!(out.status.success(), "{hasher:?}: {out:?}");
                assert_eq!(std::fs::read(&tmp).unwrap(), data);
                std::fs::remove_file(&tmp).unwrap();
            }
            let other = "0".repeat(64);
            for (script, input) in [(plain(&other, size), &data), (gzipped(&other), &gz)] {
                let out = sh_with_input(&script, input);
                assert_eq!(out.status.code(), Some(3), "{hasher:?}: {out:?}");
                let text = String::from_utf8_lossy(&out.stdout);
                assert_eq!(
                    received_sha256(&text).as_deref(),
                    Some(&sha256[..]),
                    "{text}"
                );
                assert!(!tmp.exists(), "{hasher:?}: the file was removed");
            }
            // A failure of another step (here the size) is not a digest that differs.
            let out = sh_with_input(&plain(&sha256, size + 1), &data);
            assert_eq!(out.status.code(), Some(3));
            assert_eq!(received_sha256(&String::from_utf8_lossy(&out.stdout)), None);
            assert!(!tmp.exists());
        }
        assert_eq!(received_sha256("KB_GZIP_FAILED\n"), None);
        assert_eq!(received_sha256("KB_SHA256_GOT \n").as_deref(), Some(""));
    }

    #[test]
    fn an_unfinished_prepare_is_a_problem() {
        let facts = parse_facts("KB_ARCH x86_64\nsudo: a password is required\n", &[]);
        assert!(
            facts
                .dir_problem
                .unwrap()
                .contains("a password is required")
        );
    }

    #[test]
    fn prepare_script_is_valid_sh() {
        let script = prepare_script("/tmp/kubeedge/keadm", &["keadm", "a b.sh"], true);
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }

    #[test]
    fn prepare_script_checks_the_dir_for_real() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("kubeedge/keadm");
        let script = prepare_script(dir.to_str().unwrap(), &["keadm"], false);
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let facts = parse_facts(&String::from_utf8_lossy(&out.stdout), &[]);
        // tempdir's parents are fine (/tmp is sticky), the new dirs are ours and 0700.
        assert_eq!(
            facts.dir_problem,
            None,
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // A symlink planted at the dir is refused.
        let planted = base.path().join("planted");
        std::os::unix::fs::symlink("/etc", &planted).unwrap();
        let script = prepare_script(planted.to_str().unwrap(), &[], false);
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let facts = parse_facts(&String::from_utf8_lossy(&out.stdout), &[]);
        assert!(facts.dir_problem.unwrap().contains("symbolic link"));
    }

    /// Runs `command` under [`run_script`] (index 0, in `dir`) in a process group of its
    /// own, once `pgid_path` holds a record other than `stale` (`""` for none): the
    /// group's, so a kill or stop may aim at it.
    fn start_recorded(
        dir: &str,
        pgid_path: &std::path::Path,
        command: &str,
        stale: &str,
    ) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sh")
            .args(["-c", &run_script(dir, 0, command)])
            .process_group(0)
            .spawn()
            .unwrap();
        let recorded = || {
            let record = std::fs::read_to_string(pgid_path).unwrap_or_default();
            !record.trim().is_empty() && record.trim() != stale
        };
        let started = std::time::Instant::now();
        while !recorded() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no pgid recorded"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Security finding 10: a process-group file left from an earlier run (its group long
    /// gone, the number reused by an unrelated process) never aims the deadline kill at
    /// that process; the group that run_script records is killed.
    #[test]
    fn a_stale_pgid_file_never_aims_the_kill_elsewhere() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let pgid_path = dir.path().join(pgid_file(0));
        let sh = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .output()
                .unwrap()
        };
        for stale in ["{pid}\n", "{pid} 1\n"] {
            let mut victim = std::process::Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .unwrap();
            std::fs::write(&pgid_path, stale.replace("{pid}", &victim.id().to_string())).unwrap();
            sh(&kill_script(d, 0));
            std::thread::sleep(Duration::from_millis(200));
            let alive = victim.try_wait().unwrap().is_none();
            let _ = victim.kill();
            let _ = victim.wait();
            assert!(alive, "the kill hit an unrelated process group ({stale:?})");
        }
        // A stale file is replaced by the run's own record, which the kill then uses.
        std::fs::write(&pgid_path, "1\n").unwrap();
        let mut run = start_recorded(d, &pgid_path, "sleep 30", "1");
        let out = sh(&kill_script(d, 0));
        assert!(out.status.success(), "{out:?}");
        let status = run.wait().unwrap();
        assert!(!status.success(), "the run was killed");
    }

    /// The stop after a deadline: a group that exits on SIGTERM is said to have, one
    /// that ignores it is killed once the grace is over, no sooner, and a group that is
    /// gone is said to be.
    #[test]
    fn the_stop_terms_then_kills_what_is_left_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let pgid_path = dir.path().join(pgid_file(0));
        let run = |command: &str| {
            let child = start_recorded(d, &pgid_path, command, "");
            // Past the record: the command has started (its trap is set).
            std::thread::sleep(Duration::from_millis(300));
            child
        };
        let stop = |grace: u64| {
            let out = std::process::Command::new("sh")
                .args(["-c", &stop_script(d, 0, grace)])
                .output()
                .unwrap();
            parse_stopped(&String::from_utf8_lossy(&out.stdout))
        };
        let cleaned = dir.path().join("cleaned");
        let mut child = run(&format!(
            "trap 'echo done > {}; exit 1' TERM; sleep 30 & wait",
            cleaned.display()
        ));
        assert_eq!(stop(5), Some(Stopped::ByTerm));
        child.wait().unwrap();
        assert!(cleaned.exists(), "the trap ran");

        std::fs::remove_file(&pgid_path).unwrap();
        let mut child = run("trap '' TERM; sleep 30");
        let started = std::time::Instant::now();
        assert_eq!(stop(1), Some(Stopped::ByKill));
        let took = started.elapsed();
        // Killed once the grace is over, not sooner; the upper bound only has to be far
        // below the command's own 30 s, since a loaded machine stretches every step.
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(15),
            "{took:?}"
        );
        child.wait().unwrap();
        assert_eq!(stop(1), Some(Stopped::Gone));

        // No grace: SIGKILL at once.
        std::fs::remove_file(&pgid_path).unwrap();
        let mut child = run("trap '' TERM; sleep 30");
        let started = std::time::Instant::now();
        assert_eq!(stop(0), Some(Stopped::ByKill));
        assert!(started.elapsed() < Duration::from_millis(900));
        child.wait().unwrap();
    }

    /// Security finding 1: file names are data in the prepare script, whatever they hold.
    #[test]
    fn prepare_script_keeps_hostile_names_as_data() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "a\"b",
            "it's",
            "a$(touch kb_pwned)b",
            "a`touch kb_pwned2`b",
            "-rf",
            "new\nline",
            "x y",
        ];
        for name in names {
            std::fs::write(dir.path().join(name), "12345").unwrap();
            std::fs::write(dir.path().join(format!("{name}.sha256")), "feed\n").unwrap();
        }
        let script = prepare_script(dir.path().to_str().unwrap(), &names, true);
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let facts = parse_facts(&text, &names);
        assert_eq!(facts.dir_problem, None, "{text}");
        let mut seen: Vec<&str> = facts.existing.iter().map(|f| f.name.as_str()).collect();
        seen.sort();
        let mut expected = names.to_vec();
        expected.sort();
        assert_eq!(seen, expected, "{text}");
        assert!(
            facts
                .existing
                .iter()
                .all(|f| f.size == 5 && f.sidecar == "feed")
        );
        assert_eq!(facts.computed_sha256.len(), names.len(), "{text}");
        assert!(!dir.path().join("kb_pwned").exists());
        assert!(!dir.path().join("kb_pwned2").exists());
    }

    /// A file the login user cannot read (a root-owned file left in the upload dir by a
    /// sudo run, mode 000) is reported as not there, so it is uploaded again, and the rest
    /// of the answer still comes: in dash, `$(( $(wc -c < f) ))` on it was an arithmetic
    /// error that ended the whole script after `KB_DIR_OK`. A sidecar that cannot be read
    /// leaves no sum, not the file before's. Run as `nobody` with `setpriv`: root reads a
    /// mode-000 file.
    #[test]
    fn an_unreadable_file_is_reported_as_not_there_and_the_answer_is_complete() {
        use std::os::unix::fs::PermissionsExt;
        let id = |flag: &str| -> u32 {
            let out = std::process::Command::new("id")
                .args([flag, "nobody"])
                .output()
                .unwrap();
            assert!(out.status.success(), "this machine has no user nobody");
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let dir = base.path().join("up");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();
        let names = ["before", "locked", "after", "no-sum"];
        for name in names {
            std::fs::write(dir.join(name), "12345").unwrap();
            std::fs::write(
                dir.join(format!("{name}.sha256")),
                format!("{name}-sum  -\n"),
            )
            .unwrap();
        }
        std::fs::set_permissions(dir.join("locked"), PermissionsExt::from_mode(0o000)).unwrap();
        std::fs::set_permissions(dir.join("no-sum.sha256"), PermissionsExt::from_mode(0o000))
            .unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::os::unix::fs::chown(entry.unwrap().path(), Some(uid), Some(gid)).unwrap();
        }
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        for verify in [false, true] {
            let script = prepare_script(dir.to_str().unwrap(), &names, verify) + &TOOLS_PROBE;
            let out = std::process::Command::new("setpriv")
                .args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={gid}"),
                    "--clear-groups",
                    "/bin/sh",
                    "-c",
                    &script,
                ])
                .current_dir("/")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}{said}");
            assert!(said.contains("Permission denied"), "as root? {said}");
            let facts = parse_facts(&text, &names);
            assert_eq!(facts.dir_problem, None, "{text}");
            assert!(
                facts.tools.is_some(),
                "the answer stopped short: {text}{said}"
            );
            let existing: Vec<(&str, u64, &str)> = facts
                .existing
                .iter()
                .map(|f| (f.name.as_str(), f.size, f.sidecar.as_str()))
                .collect();
            assert_eq!(
                existing,
                [("before", 5, "before-sum"), ("after", 5, "after-sum")],
                "{text}"
            );
            if verify {
                let hashed: Vec<&str> = facts
                    .computed_sha256
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect();
                assert_eq!(hashed, ["before", "after", "no-sum"], "{text}");
            }
        }
    }

    /// Security finding 1: a name that looks like an option stays a file name for `mv`.
    #[test]
    fn finalize_moves_option_like_names_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("up");
        std::fs::create_dir(&sub).unwrap();
        let name = "--target-directory=..";
        std::fs::write(sub.join(".tmp1"), "data").unwrap();
        let script = finalize_script(
            sub.to_str().unwrap(),
            &[(".tmp1".to_string(), name.to_string(), "ab".repeat(32))],
            125,
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read_to_string(sub.join(name)).unwrap(), "data");
        assert!(
            !dir.path().join(".tmp1").exists(),
            "nothing moved out of the dir"
        );
    }

    /// Issue 29, finding 8: every script this module writes, in every form it is sent in,
    /// passes Debian's shellcheck for POSIX sh, built from inputs as odd as a config may
    /// hold (spaces and quotes in the upload dir, the file names and the socket).
    #[test]
    fn every_script_passes_shellcheck_in_every_form() {
        use sent_forms::{Forms, assert_forms_posix_sh};
        let dir = "/srv/edge nodes/it's \"kb\"";
        // No `$` in them: single-quoted data, which shellcheck would take for an
        // expansion meant (SC2016); prepare_script_keeps_hostile_names_as_data runs those.
        let files = ["keadm", "ca it's.crt", "image-\"x\" y.tar"];
        let tmp = temp_name("keadm", "20260101T000000Z-ab12", 3);
        let (sha256, sha512) = ("ab".repeat(32), "cd".repeat(64));
        let join = crate::plan::keadm_command(dir, "join --cloudcore-ipport=10.0.0.1:10000");
        let reset = crate::plan::keadm_command(dir, "reset edge --force");
        let moves: Vec<(String, String, String)> = files
            .iter()
            .map(|name| (temp_name(name, "t", 0), name.to_string(), sha256.clone()))
            .collect();
        let check = |what: &str, script: String, forms, allowed: &[(&str, &str)]| {
            assert_forms_posix_sh(what, &script, forms, allowed);
        };
        let cleans_up = [sent_forms::CLEAN_UP_AFTER_ANY_STEP];
        for verify in [false, true] {
            let prepare = prepare_script(dir, &files, verify);
            check(
                &format!("prepare (verify {verify})"),
                prepare.clone(),
                Forms::Every,
                &[],
            );
            check(
                &format!("prepare with the tools probe and the answer awaited (verify {verify})"),
                format!("{prepare}{}{}", *TOOLS_PROBE, await_answer()),
                Forms::Every,
                &[],
            );
        }
        check(
            "prepare of no files",
            prepare_script("/tmp/kb", &[], false),
            Forms::Every,
            &[],
        );
        check(
            "the tools probe",
            TOOLS_PROBE.to_string(),
            Forms::Every,
            &[],
        );
        check("the answer awaited", await_answer(), Forms::Every, &[]);
        // What the node evals: the answer's lines after their count.
        let framed = answer(&run_script(dir, 0, &join));
        check(
            "the answer, as the node runs it",
            framed.split_once('\n').unwrap().1.to_string(),
            Forms::Every,
            &[],
        );
        check(
            "upload failed",
            upload_failed_script(dir, &tmp),
            Forms::Every,
            &[],
        );
        for hasher in [Sha256Tool::Openssl, Sha256Tool::Sha256sum] {
            for encoding in [Encoding::Plain, Encoding::Gzip] {
                check(
                    &format!("receive {encoding:?} checked by {hasher:?}"),
                    receive_script(dir, &tmp, 0o644, 123, Some((&sha256, hasher)), encoding),
                    Forms::Every,
                    &cleans_up,
                );
            }
            for format in crate::stage::CopyFormat::PREFERRED {
                check(
                    &format!("receive {format} by {hasher:?}"),
                    receive_packed_script((dir, &tmp), &sha256, 123, hasher, format.name()),
                    Forms::Every,
                    &cleans_up,
                );
            }
        }
        // A plain file unchecked is left for the caller to clean up: no `||` in it.
        for (encoding, allowed) in [(Encoding::Plain, &[][..]), (Encoding::Gzip, &cleans_up)] {
            check(
                &format!("receive {encoding:?} unchecked"),
                receive_script(dir, &tmp, 0o755, 0, None, encoding),
                Forms::Every,
                allowed,
            );
        }
        check(
            "receive the tarball",
            receive_tarball_script(
                dir,
                &temp_name("keadm.tar.gz", "t", 0),
                &tmp,
                &sha512,
                "keadm-v1.23.1-linux-amd64/keadm/keadm",
                123,
            ),
            Forms::Every,
            &cleans_up,
        );
        check(
            "finalize",
            finalize_script(dir, &moves, 125),
            Forms::Every,
            &[],
        );
        check("run a join", run_script(dir, 3, &join), Forms::Every, &[]);
        check("run a reset", run_script(dir, 0, &reset), Forms::Every, &[]);
        check(
            "run a join after --reset-first's reset",
            run_script(
                dir,
                0,
                &first_then("keadm reset edge --force", &reset, &join, 202),
            ),
            Forms::Every,
            &[],
        );
        let upgrade = crate::plan::keadm_command(dir, "upgrade edge --toVersion v1.23.1");
        let backup = crate::plan::keadm_command(dir, "backup edge");
        check(
            "run an upgrade: its report removed, its skip, its backup",
            run_script(
                dir,
                0,
                &format!(
                    "{REMOVE_REPORT}\n{}{}",
                    unless_running("v1.23.1"),
                    first_then("keadm backup edge", &backup, &upgrade, 202)
                ),
            ),
            Forms::Every,
            &[],
        );
        check("kill", kill_script(dir, 3), Forms::Every, &[]);
        for grace in [0, 10] {
            check(
                &format!("stop with a grace of {grace} s"),
                stop_script(dir, 3, grace),
                Forms::Every,
                &[],
            );
        }
        check(
            "the edgecore log",
            EDGECORE_LOG.to_string(),
            Forms::Every,
            &[],
        );
        check(
            "edgecore's state after a join that never registered",
            EDGECORE_STATE.to_string(),
            Forms::Every,
            &[],
        );
        check(
            "kill the siblings",
            KILL_SIBLINGS.to_string(),
            Forms::Login,
            &[],
        );
        for socket in [
            "unix:///run/it's here/containerd.sock",
            "/run/containerd/containerd.sock",
            "tcp://10.0.0.1:5000",
        ] {
            for needed in [0, 5000] {
                check(
                    &format!("the pre-flight probe of {socket} for {needed} bytes"),
                    preflight_probe_script(dir, socket, needed, &JoinSide::default()),
                    Forms::Every,
                    &[],
                );
            }
        }
        // With the join-side checks, cloudcore's host quoted as any value is.
        for keadm_cmd in [
            "join --cloudcore-ipport=10.0.0.1:10000 --cgroupdriver=systemd",
            "join --cloudcore-ipport=[fd00::1]:10000 --certport=30002",
            "join --cloudcore-ipport=it's.example:10002",
        ] {
            let join = crate::kubeedge::preflight::join_side(
                &crate::keadm_cmd::KeadmCommand::parse(keadm_cmd),
            );
            check(
                &format!("the pre-flight probe of {keadm_cmd}"),
                preflight_probe_script(dir, "/run/containerd/containerd.sock", 1, &join),
                Forms::Every,
                &[],
            );
        }
    }

    /// `--reset-first`: the join runs only after a reset that exited with 0, and the
    /// reset's status is on a line of its own either way.
    #[test]
    fn first_then_stops_before_the_command_when_the_first_step_fails() {
        const RESET: &str = "keadm reset edge --force";
        for (reset_status, joined, exit) in [(0, true, 0), (4, false, 202)] {
            let script = first_then(RESET, &format!("(exit {reset_status})"), "echo joined", 202);
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let first = text.lines().next().unwrap();
            assert_eq!(first_exit(first, RESET), Some(reset_status), "{text}");
            assert_eq!(first_exit(first, "keadm backup edge"), None, "{text}");
            assert_eq!(text.contains("joined"), joined, "{text}");
            assert_eq!(out.status.code(), Some(exit));
        }
        assert_eq!(
            first_exit(
                "keadm-batch: keadm reset edge --force exited with status x",
                RESET
            ),
            None
        );
        assert_eq!(first_exit("something else", RESET), None);
    }
}
