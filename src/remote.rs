//! The shell text we send to nodes. Kept in one place, pure and unit-tested, so the
//! pipeline reads as steps and every remote command can be reviewed side by side: the
//! prepare, upload, run and kill scripts, the pre-flight probe (in [`preflight_probe`];
//! `kubeedge::preflight` reads its output), the edgecore log reader, and the kill script the SSH
//! engine runs after a deadline. One piece lives elsewhere on purpose: keadm's own
//! command line (`cd <dir> && ./keadm <cmd>`, `plan::keadm_command`), which the plan
//! builds as keadm does because the run log and the dry run show it; [`run_script`]
//! runs it as given.
//!
//! Everything here is POSIX sh and busybox-friendly: edge images are often minimal.
//! The container runtime's part (its probe and the import of offline images) is in
//! [`runtime`].

/// The shell text that leaves the pids of the node's edgecore processes in `$ec`, each
/// after a space (empty when none runs), with a function `has` for a command on PATH
/// defined before it. /proc/*/comm needs no tool at all; pidof (what keadm itself runs)
/// also matches an argv[0] of edgecore. One spelling for the pre-flight probe, the check
/// after a reset and `batch status`: a macro, so each can `concat!` it into its script.
macro_rules! edgecore_pids {
    () => {
        r#"ec=
for p in /proc/[0-9]*; do
  read -r c 2>/dev/null < "$p/comm" || continue
  [ "$c" = edgecore ] && ec="$ec ${p#/proc/}"
done
if has pidof; then
  for p in $(pidof edgecore 2>/dev/null); do
    case "$ec " in *" $p "*) ;; *) ec="$ec $p";; esac
  done
fi
"#
    };
}
use edgecore_pids;

/// The shell text that leaves in `$kd` why /etc/kubeedge (`$KE`) stops a join, by keadm join's own
/// rule (its management-directory check): nothing when the directory is absent or empty
/// (an empty one is often a mount point, as on read-only-root devices), else the count
/// and first names of its entries, that it cannot be read, or that it is not a directory.
/// One spelling for the pre-flight probe and the check after a reset, so a node the reset
/// left clean is one the next join's pre-flight finds clean.
macro_rules! management_dir_state {
    () => {
        r#"KE=/etc/kubeedge
kd=
if [ -d "$KE" ]; then
  if ! l=$(ls -A "$KE" 2>&1); then kd="cannot read $KE: $l"
  elif [ -n "$l" ]; then
    kd="$(printf '%s\n' "$l" | wc -l | tr -d ' ') entries: $(printf '%s\n' "$l" | head -n 6 | tr '\n' ' ' | sed 's/ $//')"
  fi
elif [ -e "$KE" ] || [ -L "$KE" ]; then
  kd="$KE is not a directory"
fi
"#
    };
}
use management_dir_state;

/// Two shell functions that tell which edgecore runs, without running edgecore: it has
/// no `--version` (it ignores the flag and starts a second edgecore, which knocks the
/// node's own off cloudcore). `kb_logged_version PID` prints the version edgecore
/// process PID logged as it started (klog's `I1202 04:02:50.700000 3794 server.go:107]
/// Version: v1.23.1`, the third field its pid), from the journal under systemd or from
/// /var/log/kubeedge/edgecore.log (its last MB) otherwise; `kb_config_version` prints
/// edgecore.yaml's `edgecoreVersion`, which edgecore rewrites to its own as it starts.
/// One spelling for the check after an upgrade, the upgrade's skip and `batch status`.
macro_rules! edgecore_version_fns {
    () => {
        r#"kb_logged_version() {
  { journalctl "_PID=$1" -o cat --no-pager 2>/dev/null; tail -c 1000000 /var/log/kubeedge/edgecore.log 2>/dev/null; } | awk -v p="$1" '$3 == p && $5 == "Version:" { v = $6 } END { print v }'
}
kb_config_version() {
  sed -n 's/^[[:space:]]*edgecoreVersion:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1 | tr -d "\"' "
}
"#
    };
}
use edgecore_version_fns;

/// The shell text that prints edgecore.yaml's `hostnameOverride` (the Node name edgecore
/// registers under), unquoted by nothing: the reader checks it is a Node name. One
/// spelling for the check after an upgrade and the node's identity before a write to its
/// Node.
macro_rules! hostname_override {
    () => {
        "sed -n 's/^[[:space:]]*hostnameOverride:[[:space:]]*//p' /etc/kubeedge/config/edgecore.yaml 2>/dev/null | head -n 1"
    };
}
use hostname_override;

mod edge_task;
mod identity;
mod preflight_probe;
pub mod relay;
mod reset_check;
mod runtime;
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
/// password, two when it did not prompt. Anything else stops the script before it runs.
const SKIP_TO_MARK: &str = concat!(
    "IFS= read -r kb_l || exit 124\n",
    "[ \"$kb_l\" = KB_STDIN_MARK ] || { IFS= read -r kb_l && [ \"$kb_l\" = KB_STDIN_MARK ]; } || ",
    "{ echo 'keadm-batch: the input after the sudo password was out of step' >&2; exit 124; }\n",
);

/// Wraps `script` so that it runs with `privilege`: one `sudo ... sh -c` around all of it,
/// so `cd`, `yes |` and `./keadm` all run as root and the password never appears in a
/// command line.
pub fn wrap(script: &str, privilege: Privilege) -> String {
    match privilege {
        Privilege::Login => script.to_string(),
        Privilege::SudoNoPassword => format!("sudo -n sh -c {}", shell_quote(script)),
        Privilege::SudoPassword => format!(
            "sudo -S -p '' sh -c {}",
            shell_quote(&format!("{SKIP_TO_MARK}{script}"))
        ),
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
    fn command(self) -> &'static str {
        match self {
            Sha256Tool::Openssl => "openssl dgst -sha256 -r",
            Sha256Tool::Sha256sum => "sha256sum",
        }
    }

    /// Writes what `producer` prints to the file at `quoted` (shell-quoted) and leaves the
    /// file's sha256 line in `$s`. What is unpacked is hashed on the way, through a `tee`
    /// (see [`receive_packed_script`]), so nothing is read again after the last byte. A
    /// plain copy goes straight to the file and OpenSSL hashes it after the last byte, from
    /// the page cache (0.04 s for a 29 MB image archive fed at 20 Mbit/s), where a `tee`
    /// would put a second pipe in the way of every byte; `sha256sum`, five times slower,
    /// always hashes on the way. POSIX sh has no `pipefail`: a producer that fails part-way
    /// is caught by the digest, a `tee` that cannot write (a full disk) by the size.
    fn write_and_hash(self, producer: Producer, quoted: &str) -> String {
        let command = producer.command();
        match (self, producer) {
            (Sha256Tool::Openssl, Producer::Copy) => {
                format!("{command} > {quoted} && s=$({} < {quoted})", self.command())
            }
            _ => format!("s=$({command} | tee {quoted} | {})", self.command()),
        }
    }
}

/// What writes a received file from the script's stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Producer<'a> {
    /// The bytes as they arrive.
    Copy,
    /// A command from stdin to stdout that unpacks them (`gzip -dc`, `zstd -dcq`).
    Unpack(&'a str),
}

impl Producer<'_> {
    fn command(&self) -> &str {
        match self {
            Producer::Copy => "cat",
            Producer::Unpack(command) => command,
        }
    }
}

/// The line a receiving script prints when what it received does not hash to what was
/// sent, with the node's digest after it; [`received_sha256`] reads it.
const SHA256_GOT: &str = "KB_SHA256_GOT";

/// The test that `$s`, as [`Sha256Tool::write_and_hash`] leaves it, starts with `sha256`;
/// when it does not, it prints [`SHA256_GOT`] and the node's digest, so the control host
/// can say what arrived.
fn digest_is(sha256: &str) -> String {
    format!(
        "{{ [ \"${{s%% *}}\" = {} ] || {{ echo \"{SHA256_GOT} ${{s%% *}}\"; false; }}; }}",
        shell_quote(sha256)
    )
}

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

/// The preparatory script: create and check the upload dir, report `uname -m`, and the
/// size and sidecar of each file we may skip uploading. One round trip. Runs with the
/// privileges the later steps will have (under sudo for non-root logins).
///
/// The dir must be a real directory owned by the user we act as, not writable by others,
/// and every parent must be owned by root or that user and not writable by others unless
/// sticky (like /tmp): then nobody else can swap a file between our upload and our run.
pub fn prepare_script(dir: &str, files: &[&str], verify: bool) -> String {
    let mut s = String::new();
    s.push_str("umask 077\n");
    s.push_str(&format!("d={}\n", shell_quote(dir)));
    s.push_str(concat!(
        "echo \"KB_ARCH $(uname -m)\"\n",
        "me=$(id -u)\n",
        "if [ -L \"$d\" ]; then echo \"KB_BAD $d is a symbolic link; remove it or choose another remoteDir\"; exit 0; fi\n",
        "[ -d \"$d\" ] || err=$(mkdir -p \"$d\" 2>&1) || { echo \"KB_BAD cannot create $d: $err\"; exit 0; }\n",
        // Every path from the dir up to /, each refused if it is a symlink; then one
        // `stat` for all of them (a fork per path costs on a fleet of small nodes).
        "set --\n",
        "p=\"$d\"\n",
        "while :; do\n",
        "  if [ -L \"$p\" ]; then echo \"KB_BAD $p is a symbolic link\"; exit 0; fi\n",
        "  set -- \"$@\" \"$p\"\n",
        "  [ \"$p\" = / ] && break\n",
        // The parent without forking dirname: strip the last component.
        "  case \"$p\" in */*) q=${p%/*}; p=${q:-/} ;; *) break ;; esac\n",
        "done\n",
        "st=$(stat -c '%u %a %n' -- \"$@\" 2>/dev/null) || { echo \"KB_BAD cannot stat the directories of $d\"; exit 0; }\n",
        "while read -r u a n; do\n",
        "  if [ \"$u\" != 0 ] && [ \"$u\" != \"$me\" ]; then echo \"KB_BAD $n is owned by uid $u, not by root or uid $me\"; exit 0; fi\n",
        "  m=$(( 0$a ))\n",
        "  if [ \"$n\" = \"$d\" ]; then\n",
        "    if [ \"$u\" != \"$me\" ]; then echo \"KB_BAD $d is owned by uid $u, not uid $me\"; exit 0; fi\n",
        "    if [ $(( m & 022 )) -ne 0 ]; then echo \"KB_BAD $d is writable by other users (mode $a)\"; exit 0; fi\n",
        "  elif [ $(( m & 022 )) -ne 0 ] && [ $(( m & 01000 )) -eq 0 ]; then echo \"KB_BAD $n is writable by other users (mode $a)\"; exit 0; fi\n",
        "done <<KB_STAT\n",
        "$st\n",
        "KB_STAT\n",
        "echo KB_DIR_OK\n",
    ));
    // Files are reported by their position in `files`, never by name: a name is data
    // and appears only single-quoted, outside any `"..."` or echo. A file or sidecar the
    // script cannot read is reported as not there (so it is uploaded again): its size is
    // the digits a `wc` that succeeded printed, its leading blanks (BSD's) cut by
    // parameter expansion (`$(( $(wc ...) ))` of nothing is an error that ends a dash
    // script), and the sum is cleared first, so a sidecar that cannot be read leaves none
    // rather than the file before's.
    for (index, name) in files.iter().enumerate() {
        let path = format!("\"$d\"/{}", shell_quote(name));
        let sidecar = format!("\"$d\"/{}", shell_quote(&format!("{name}{SIDECAR_SUFFIX}")));
        s.push_str(&format!(
            "if [ -f {path} ] && [ -f {sidecar} ]; then kb_sum=; read -r kb_sum < {sidecar}; \
             kb_size=$(wc -c < {path}) || kb_size=; kb_size=${{kb_size##*[!0-9]}}; \
             [ -n \"$kb_size\" ] && [ -n \"$kb_sum\" ] && echo \"KB_FILE {index} $kb_size ${{kb_sum%% *}}\"; fi\n",
        ));
        if verify {
            s.push_str(&format!(
                "if [ -f {path} ]; then echo \"KB_SHA {index} $(sha256sum < {path} | cut -c1-64)\"; fi\n",
            ));
        }
    }
    s
}

/// The line the one-channel script prints once the node's facts are out; the control
/// host answers it on the same channel's stdin (see [`await_answer`]).
pub const FACTS_END: &str = "KB_FACTS_END";

/// The exit status of the one-channel script when its answer did not arrive whole: none
/// of it ran.
pub const ANSWER_CUT: i32 = 203;

/// Appended to [`prepare_script`] (and its probes) for the one-channel exchange: prints
/// [`FACTS_END`], reads the rest of the script from stdin as [`answer`] frames it, and
/// runs it in this same shell, so a node costs one exec channel. The shell's `read`
/// takes a pipe one byte at a time, so whatever follows the answer on stdin (the upload)
/// is left there for the answer's own receive script. An answer cut short runs not at
/// all (exit [`ANSWER_CUT`]): a half script could move files it never received.
pub fn await_answer() -> String {
    format!(
        "echo {FACTS_END}\n\
         IFS= read -r kb_n || exit {ANSWER_CUT}\n\
         case $kb_n in ''|*[!0-9]*) exit {ANSWER_CUT} ;; esac\n\
         kb_answer=\n\
         while [ \"$kb_n\" -gt 0 ]; do\n\
         \x20 IFS= read -r kb_l || exit {ANSWER_CUT}\n\
         \x20 kb_answer=\"$kb_answer$kb_l\n\"\n\
         \x20 kb_n=$((kb_n - 1))\n\
         done\n\
         eval \"$kb_answer\"\n"
    )
}

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
/// or xz) or the release tarball instead of the binary: prints `KB_TOOLS` and the tools that actually work (each is run on empty
/// input, so a stub such as `/bin/false` in place of `tar` does not count). A dozen tiny
/// processes per node, so the pipeline adds it only when a tarball would pay off.
pub const TOOLS_PROBE: &str = concat!(
    "kb_t=\n",
    "command -v sha512sum >/dev/null 2>&1 && sha512sum </dev/null >/dev/null 2>&1 && kb_t=\"$kb_t sha512sum\"\n",
    "command -v gzip >/dev/null 2>&1 && echo | gzip -c 2>/dev/null | gzip -dc >/dev/null 2>&1 && kb_t=\"$kb_t gzip\"\n",
    "command -v tar >/dev/null 2>&1 && tar -cf - /dev/null 2>/dev/null | tar -tf - >/dev/null 2>&1 && kb_t=\"$kb_t tar\"\n",
    "command -v xz >/dev/null 2>&1 && echo | xz -c 2>/dev/null | xz -dc >/dev/null 2>&1 && kb_t=\"$kb_t xz\"\n",
    "command -v zstd >/dev/null 2>&1 && echo | zstd -qc 2>/dev/null | zstd -dcq >/dev/null 2>&1 && kb_t=\"$kb_t zstd\"\n",
    "command -v sha256sum >/dev/null 2>&1 && sha256sum </dev/null >/dev/null 2>&1 && kb_t=\"$kb_t sha256sum\"\n",
    // OpenSSL counts only when it prints sha256("abc") in sha256sum's shape.
    "command -v openssl >/dev/null 2>&1 && kb_o=$(printf abc | openssl dgst -sha256 -r 2>/dev/null) && ",
    "[ \"${kb_o%% *}\" = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad ] && kb_t=\"$kb_t openssl\"\n",
    "echo \"KB_TOOLS$kb_t\"\n",
);

/// The line [`with_sudo_probe`] prints when sudo wants the password: what goes first on
/// stdin from then on is [`password_preamble`].
pub const SUDO_WANTS_PASSWORD: &str = "KB_SUDO password";

/// Runs `script` under sudo when `sudo` is set, finding out whether sudo needs a
/// password: `sudo -n` first, then `sudo -S` reading the password line we send.
/// Prints `KB_SUDO nopasswd` or `KB_SUDO password` before the script's own output.
/// Feed it [`password_preamble`] on stdin when there is a password.
pub fn with_sudo_probe(script: &str) -> String {
    format!(
        "if sudo -n true 2>/dev/null; then echo 'KB_SUDO nopasswd'; {}; else echo '{SUDO_WANTS_PASSWORD}'; {}; fi",
        wrap(script, Privilege::SudoNoPassword),
        wrap(script, Privilege::SudoPassword),
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

/// After a failed upload: removes the partial temporary file (it may be what filled the
/// disk) and reports the space left in the dir as `KB_FREE <KiB>`.
pub fn upload_failed_script(dir: &str, tmp: &str) -> String {
    format!(
        "cd {} && rm -f -- {} && df -Pk . | awk 'NR == 2 {{ print \"KB_FREE \" $4 }}'",
        shell_quote(dir),
        shell_quote(tmp)
    )
}

/// Parses the output of [`upload_failed_script`]: free KiB in the upload dir.
pub fn parse_free_kib(output: &str) -> Option<u64> {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix("KB_FREE "))
        .and_then(|kib| kib.trim().parse().ok())
}

/// The test that the file at `quoted` (shell-quoted) has `size` bytes. The arithmetic
/// expansion drops the padding some `wc`s print, without a `tr` process per upload.
fn size_is(quoted: &str, size: u64) -> String {
    format!("[ $(( $(wc -c < {quoted}) )) = {size} ]")
}

/// What `producer` prints (stdin, as it came or unpacked), received into `dir/tmp` with
/// `mode`: its size checked after the producer ends (a connection that breaks mid-stream
/// ends the remote `cat` as an ordinary end of input, and a short file must never go
/// further), and with `check` its sha256 too, by that tool, before anything moves it into
/// place. With `on_failure`, any failure removes the file, runs that text and exits 3.
fn receive_into(
    dir: &str,
    tmp: &str,
    producer: Producer,
    mode: u32,
    size: u64,
    check: Option<(&str, Sha256Tool)>,
    on_failure: Option<&str>,
) -> String {
    let quoted = shell_quote(tmp);
    let write = match check {
        Some((sha256, hasher)) => format!(
            "{} && {}",
            hasher.write_and_hash(producer, &quoted),
            digest_is(sha256)
        ),
        None => format!("{} > {quoted}", producer.command()),
    };
    let script = format!(
        "umask 077 && cd {} && {write} && {} && chmod {mode:o} -- {quoted}",
        shell_quote(dir),
        size_is(&quoted, size),
    );
    match on_failure {
        Some(then) => format!("{script} || {{ rm -f -- {quoted}; {then}exit 3; }}"),
        None => script,
    }
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
    let (producer, on_failure) = match (encoding, check) {
        (Encoding::Gzip, _) => (Producer::Unpack("gzip -dc"), Some("echo KB_GZIP_FAILED; ")),
        (Encoding::Plain, Some(_)) => (Producer::Copy, Some("")),
        (Encoding::Plain, None) => (Producer::Copy, None),
    };
    receive_into(dir, tmp, producer, mode, size, check, on_failure)
}

/// Receives the release tarball on stdin into `dir/tar_tmp` and, as it arrives, unpacks
/// `entry` (the keadm binary inside) to `dir/bin_tmp`; then checks the tarball's sha512
/// and the binary's size, gives it mode 0755 and removes the tarball. Any failure removes
/// both temporary files, reads the rest of stdin (so the sender is not left writing into
/// a closed channel) and exits 3 after printing `KB_TARBALL_FAILED`, so the caller can
/// fall back to sending the binary.
///
/// Unpacking as it arrives, not after the sha512 check, is what leaves the node little to
/// do after the last byte: one `sha512sum` of the tarball, where unpacking all of keadm
/// then took ten nodes sharing two cores seconds per wave (bench/README.md). It is safe
/// because `tar -O` writes only the entry to its stdout, never a path of the archive's
/// choosing, and nothing moves the binary into place before the check has passed. A `tar`
/// that stops reading once it has the entry leaves the rest to a `cat`, so `tee` still
/// writes the whole tarball.
pub fn receive_tarball_script(
    dir: &str,
    tar_tmp: &str,
    bin_tmp: &str,
    sha512: &str,
    entry: &str,
    binary_size: u64,
) -> String {
    let (t, b) = (shell_quote(tar_tmp), shell_quote(bin_tmp));
    format!(
        "umask 077 && cd {dir} && \
         tee {t} | {{ gzip -dc | tar -xOf - {entry} > {b}; kb_s=$?; cat > /dev/null; exit $kb_s; }} && \
         s=$(sha512sum {t}) && [ \"${{s%% *}}\" = {sha} ] && {check} && \
         chmod 755 -- {b} && rm -f -- {t} || {{ rm -f -- {t} {b}; cat > /dev/null; echo KB_TARBALL_FAILED; exit 3; }}",
        dir = shell_quote(dir),
        sha = shell_quote(sha512),
        entry = shell_quote(entry),
        check = size_is(&b, binary_size),
    )
}

/// Receives a packed copy of the binary on stdin and unpacks it to `dir/bin_tmp` with
/// `unpack` (a command from stdin to stdout, of the node's `tool`: `zstd -dcq`, `xz -dc`);
/// the binary's sha256 and size must be the ones the control host derived from the
/// verified release, before anything is moved into place. Any failure removes the
/// temporary file, reads the rest of stdin (so the sender is not left writing into a
/// closed channel) and exits 3 after printing `KB_<TOOL>_FAILED` (`KB_XZ_FAILED`), so the
/// caller can fall back to the next form.
///
/// The node hashes what `unpack` writes while it receives, through a `tee`, with the
/// fastest tool it has (OpenSSL's, else `sha256sum`): nothing is read again after the last
/// byte. Hashing the file afterwards spared the node the `tee`'s CPU but cost it 0.11-0.12 s
/// after the last byte for an 83 MB keadm, which the link had to wait for (measured in
/// docs/decisions.md).
pub fn receive_packed_script(
    dir: &str,
    bin_tmp: &str,
    sha256: &str,
    binary_size: u64,
    hasher: Sha256Tool,
    (tool, unpack): (&str, &str),
) -> String {
    receive_into(
        dir,
        bin_tmp,
        Producer::Unpack(unpack),
        0o755,
        binary_size,
        Some((sha256, hasher)),
        Some(&format!(
            "cat > /dev/null; echo KB_{}_FAILED; ",
            tool.to_ascii_uppercase()
        )),
    )
}

/// Moves uploaded temporary files into place and writes their sidecars. Every rename is
/// within one directory, so each file appears whole or not at all.
pub fn finalize_script(dir: &str, moves: &[(String, String, String)]) -> String {
    let mut parts = vec![format!("cd {}", shell_quote(dir))];
    for (tmp, name, sha256) in moves {
        parts.push(format!(
            "mv -f -- {} {} && printf '%s\\n' {} > {}",
            shell_quote(tmp),
            shell_quote(name),
            sha256,
            shell_quote(&format!("{name}{SIDECAR_SUFFIX}"))
        ));
    }
    parts.join(" && ")
}

/// The command that runs keadm: records its process group (so a deadline can kill the
/// whole tree on the node), then runs keadm's own `cd <dir> && ./keadm <cmd>` with
/// stdin from /dev/null (`yes |` still feeds a reset): nothing we send can reach keadm.
///
/// The record is the group id and its leader's start time (field 22 of
/// `/proc/<pid>/stat`), written after removing any earlier record, so [`kill_script`]
/// can tell our group from an unrelated one that got the same number later.
pub fn run_script(upload_dir: &str, index: usize, keadm_command: &str) -> String {
    let file = format!("{}/{}", shell_quote(upload_dir), pgid_file(index));
    format!(
        "{{ rm -f -- {file}; read -r _ _ _ _ kb_pgid _ < /proc/$$/stat && \
         {} < /proc/\"$kb_pgid\"/stat && echo \"$kb_pgid $kb_start\" > {file}; }} 2>/dev/null\n\
         exec < /dev/null\n\
         {keadm_command}",
        read_start_time()
    )
}

/// The `read` that leaves field 22 of a `/proc/<pid>/stat` line on its stdin (the
/// process's start time) in `$kb_start`, split as the shell splits words; one spelling
/// for [`run_script`], which records it, and [`kill_script`], which compares it.
fn read_start_time() -> String {
    format!("read -r {}kb_start _", "_ ".repeat(21))
}

/// What [`first_then`] prints after the first step, before the step's name and status:
/// `keadm-batch: keadm reset edge --force exited with status 0`.
const FIRST_EXIT: &str = "keadm-batch: ";

/// A step before the command: `--reset-first`'s `keadm reset edge --force` before a join,
/// `--backup`'s `keadm backup edge` before an upgrade. Runs `first`, prints its exit
/// status on a line of its own (naming it as `what`), and runs `then` only when `first`
/// exited with 0; otherwise the script exits with `failed_exit`.
pub fn first_then(what: &str, first: &str, then: &str, failed_exit: i32) -> String {
    format!(
        "{first}\nkb_first=$?\necho \"{FIRST_EXIT}{what} exited with status $kb_first\"\n[ \"$kb_first\" -eq 0 ] || exit {failed_exit}\n{then}"
    )
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

/// Kills the process group recorded by [`run_script`], only if its leader is still the
/// process that made the record (same start time) or is gone (then no other process
/// can hold that number while the group lives). `kill -s KILL --` is the spelling dash,
/// bash and busybox all accept.
pub fn kill_script(upload_dir: &str, index: usize) -> String {
    format!(
        "{}kill -s KILL -- -\"$g\"",
        recorded_group(upload_dir, index)
    )
}

/// The lines [`kill_script`] and [`stop_script`] begin with: the group [`run_script`]
/// recorded into `$g`, or exit 1 where there is no record, a malformed one, or a leader
/// alive that is not the process that made it (its start time differs).
fn recorded_group(upload_dir: &str, index: usize) -> String {
    let file = format!("{}/{}", shell_quote(upload_dir), pgid_file(index));
    format!(
        "read -r g st < {file} || exit 1\n\
         case \"$g\" in ''|*[!0-9]*) exit 1 ;; esac\n\
         [ \"$g\" -gt 1 ] && [ -n \"$st\" ] || exit 1\n\
         if [ -r /proc/\"$g\"/stat ]; then {} < /proc/\"$g\"/stat; [ \"$kb_start\" = \"$st\" ] || exit 1; fi\n",
        read_start_time()
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

/// Stops the process group recorded by [`run_script`] after its deadline, checked as
/// [`kill_script`] checks it: SIGTERM to the group, so keadm and the operator's scripts
/// under it can clean up, then a wait of up to `grace_secs` for every live process of
/// the group to be gone, then SIGKILL to what is left; with no grace, SIGKILL at once.
/// The group is watched in /proc (state, parent, group after the command's name, as
/// [`KILL_SIBLINGS`] reads them, cut out by expansion: no fork per process), so a zombie
/// its parent has yet to reap does not count as running. The wait is in tenths of a
/// second where `sleep` takes them (GNU, BusyBox), else in seconds.
pub fn stop_script(upload_dir: &str, index: usize, grace_secs: u64) -> String {
    format!(
        "{}\
         kb_alive() {{\n\
         \x20 for kb_d in /proc/[0-9]*; do\n\
         \x20   read -r kb_s < \"$kb_d/stat\" 2>/dev/null || continue\n\
         \x20   kb_s=${{kb_s##*) }}; kb_r=${{kb_s#* }}; kb_r=${{kb_r#* }}\n\
         \x20   [ \"${{kb_r%% *}}\" = \"$g\" ] && [ \"${{kb_s%% *}}\" != Z ] && return 0\n\
         \x20 done\n\
         \x20 return 1\n\
         }}\n\
         kb_alive || {{ echo '{STOPPED}gone'; exit 0; }}\n\
         kb_left={tenths}\n\
         if [ \"$kb_left\" -gt 0 ]; then\n\
         \x20 kill -s TERM -- -\"$g\" 2>/dev/null\n\
         \x20 while [ \"$kb_left\" -gt 0 ] && kb_alive; do\n\
         \x20   if sleep 0.1 2>/dev/null; then kb_left=$((kb_left - 1)); else sleep 1; kb_left=$((kb_left - 10)); fi\n\
         \x20 done\n\
         \x20 kb_alive || {{ echo '{STOPPED}exited'; exit 0; }}\n\
         fi\n\
         kill -s KILL -- -\"$g\" 2>/dev/null\n\
         echo '{STOPPED}killed'",
        recorded_group(upload_dir, index),
        tenths = grace_secs.saturating_mul(10),
    )
}

/// The last 40 lines of edgecore's log, from journald or else from the log file: a join
/// that timed out waiting for its certificates says why only there.
pub const EDGECORE_LOG: &str = "journalctl -u edgecore -n 40 --no-pager 2>/dev/null | grep -v '^-- ' || tail -n 40 /var/log/kubeedge/edgecore.log 2>/dev/null";

/// What a node that never registered says of its edgecore, once its wait has ended: the
/// last 30 lines of edgecore's log (as [`EDGECORE_LOG`]), then one marker line
/// (`kb-edgecore: running` or `not running`) and its hostname (a node joined without
/// --edgenode-name registers under it); the markers last, so the log cannot push them out
/// of the transcript's tail. Reads only.
pub const EDGECORE_STATE: &str = "journalctl -u edgecore -n 30 --no-pager 2>/dev/null | grep -v '^-- ' || tail -n 30 /var/log/kubeedge/edgecore.log 2>/dev/null\n\
if pidof edgecore >/dev/null 2>&1 || pgrep -x edgecore >/dev/null 2>&1; then echo 'kb-edgecore: running'; else echo 'kb-edgecore: not running'; fi\n\
echo \"kb-hostname: $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)\"";

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

/// Run by the SSH engine on a second channel after a deadline or an abort: kills the
/// process group of every other child of this connection's sshd (sshd starts each command
/// in its own session, so its pid is its process group). Plain POSIX sh over /proc, so
/// BusyBox nodes work too.
pub const KILL_SIBLINGS: &str = r#"me=$$; parent=$PPID
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$me" ] && continue
  read -r st < "$d/stat" 2>/dev/null || continue
  st=${st##*) }; st=${st#* }; pp=${st%% *}; st=${st#* }; pg=${st%% *}
  [ "$pp" = "$parent" ] && [ "$pg" != "$me" ] && kill -s KILL -- "-$pg" 2>/dev/null
done
exit 0"#;

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
        let script = format!("{SKIP_TO_MARK}cat");
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
            .args(["-c", &format!("{stubs}\n{TOOLS_PROBE}")])
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
        let run_with = |hasher, sha: &str, size: u64, input: &[u8]| {
            let dir = dir.path().to_str().unwrap();
            let unpack = (format.name(), format.unpack_command());
            let script = receive_packed_script(dir, ".b.tmp", sha, size, hasher, unpack);
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
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
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
            let script = prepare_script(dir.to_str().unwrap(), &names, verify) + TOOLS_PROBE;
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
                format!("{prepare}{TOOLS_PROBE}{}", await_answer()),
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
                    receive_packed_script(
                        dir,
                        &tmp,
                        &sha256,
                        123,
                        hasher,
                        (format.name(), format.unpack_command()),
                    ),
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
        check("finalize", finalize_script(dir, &moves), Forms::Every, &[]);
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
