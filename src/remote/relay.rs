//! The shell text of the site relay (docs/decisions.md, "One copy per site"): a source
//! node serves one file to the nodes of its site through its own sshd, with a run-scoped
//! key that can do nothing but read that file, only from the site's addresses and only
//! until it expires; a receiving node fetches it with its ssh client, checks its sha256
//! as it would check a direct upload, and the source's line is removed once the site is
//! done (or, should the control host die, by a later run once it has expired).
//!
//! Everything the relay does in the login user's home (its `~/.ssh`, its
//! authorized_keys, the copy a sudo node serves from there) runs as the login user: a
//! home is the login user's to change, so a step there as root could be turned, by a
//! symlink, into root writing anywhere. Under sudo the serve script drops to the login
//! user for that part ([`serve_script`]); the clearings run as the login user anyway.

use super::Sha256Tool;
use super::script::{sendable, with_values};
use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::shell::shell_quote;

/// Starts the last field of every authorized_keys line the relay writes: the run's tag.
pub const TAG_PREFIX: &str = "keadm-batch-relay-";

/// The exit status of the run's script when the relay fetch failed, so keadm did not
/// run: the control host sends the file directly instead.
pub const RELAY_FAILED: i32 = 204;

/// The line that says why the relay fetch failed.
pub const RELAY_FAILED_LINE: &str = "KB_RELAY_FAILED";

/// The line a node prints, with why after it, when it cannot serve (the prepare step's
/// probe) or did not (the serve script).
pub const NOT_SERVING_LINE: &str = "KB_RELAY_NOT_SERVING";

/// The line a clearing prints, with why after it, when it left the login user's
/// authorized_keys as it was although relay lines were to go.
pub const KEPT_LINE: &str = "KB_RELAY_KEPT";

/// The first reason a node's output gives, after [`NOT_SERVING_LINE`], for not serving:
/// one short line, its control characters escaped.
pub fn not_serving_reason(output: &str) -> Option<String> {
    reason_after(output, NOT_SERVING_LINE)
}

/// The first reason a node's output gives, after [`KEPT_LINE`], for leaving the login
/// user's authorized_keys as it was: one short line, its control characters escaped.
pub fn kept_reason(output: &str) -> Option<String> {
    reason_after(output, KEPT_LINE)
}

fn reason_after(output: &str, marker: &str) -> Option<String> {
    output.lines().find_map(|l| {
        l.strip_prefix(marker)
            .filter(|why| why.is_empty() || why.starts_with(' '))
            .map(|why| one_line(why, MESSAGE_CHARS))
    })
}

/// The last line of the run's private key, which ends the key on the fetch's stdin.
const KEY_END: &str = "-----END OPENSSH PRIVATE KEY-----";

/// The alias the receiver knows the source's host key by, whatever its address.
const HOST_ALIAS: &str = "keadm-batch-relay-source";

/// A run's tag from 64 random bits: unguessable, and unique among the runs and shards
/// that serve from one node at a time (the run token, the UTC second and 16 bits, is
/// neither).
pub fn tag_from(random: [u8; 8]) -> String {
    format!("{TAG_PREFIX}{}", hex::encode(random))
}

/// Who runs a relay script on the node, and whose home it works in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login<'a> {
    /// The login user itself (root, or `sudo: false`): its own home, `$HOME`.
    Own,
    /// Root under sudo for this login user: the steps in its home run as it.
    Sudo(&'a str),
}

/// What one serve line admits: the payload, the key that reads it, and from where.
#[derive(Debug, Clone)]
pub struct Serve<'a> {
    /// The upload dir, where the node's copy is.
    pub dir: &'a str,
    /// The copy's temporary name there (it is served from there until it is renamed).
    pub tmp: &'a str,
    /// Its final name.
    pub name: &'a str,
    pub sha256: &'a str,
    pub size: u64,
    /// The relay key's public half, `ssh-ed25519 <base64>`.
    pub public_key: &'a str,
    /// The site's addresses, what `from=` admits.
    pub from: &'a [String],
    pub tag: &'a str,
    pub lifetime_secs: u64,
    pub login: Login<'a>,
}

/// Why `command` cannot be a forced command: sshd reads `command="..."` up to the next
/// unescaped double quote and takes a backslash as an escape, and a line break would end
/// the authorized_keys line; `None` when it can.
pub fn forced_command_refusal(command: &str) -> Option<String> {
    command
        .chars()
        .find(|&c| c == '"' || c == '\\' || c.is_control())
        .map(|c| {
            format!(
                "its forced command would hold {}, which authorized_keys cannot carry: {}",
                match c {
                    '"' => "a double quote".to_string(),
                    '\\' => "a backslash".to_string(),
                    c => format!("the control character {}", c.escape_default()),
                },
                crate::node_text::escape_controls(command)
            )
        })
}

/// The forced command that serves the node's copy from the upload dir `dir`: the
/// temporary name `tmp` while it is there, else the final one `name` (a rename is
/// atomic, so one of the two always exists). It stays text put together here: sshd runs
/// a forced command (`command="..."` in authorized_keys) as it is written, with no
/// parameters to pass values in, so the paths are quoted into it by [`shell_quote`];
/// [`forced_command_refusal`] checks that the line can carry it.
pub fn direct_command(dir: &str, tmp: &str, name: &str) -> String {
    let path = |file: &str| shell_quote(&format!("{}/{file}", dir.trim_end_matches('/')));
    format!("cat -- {} 2>/dev/null || cat -- {}", path(tmp), path(name))
}

/// Appends the line that lets the site's nodes read this node's copy of a file to the
/// login user's authorized_keys, as the login user. Under sudo the upload dir is root's
/// alone, so root hands the copy on stdin to the login user, who writes it into a new
/// file in its home and renames it over the served name (removed with the line); the
/// login user runs every step there ([`Login::Sudo`]). `restrict` turns off forwarding,
/// ptys and user rc; `from=` admits only the site's addresses; `expiry-time` ends it
/// `lifetime` seconds from now by the node's own clock (its local time, as sshd reads
/// it), should nobody remove it. The line starts a line of its own even when the file's
/// last line has no line break.
///
/// A node that cannot serve prints [`NOT_SERVING_LINE`] and why, and the script goes on.
/// `Err` (why, for the transcript) when the forced command cannot be written at all: the
/// direct one, for a login's own home, is checked here; the copy's, under sudo, names
/// the login user's home, which the node checks. scripts/relay_serve.sh (a login's own
/// home), scripts/relay_serve_sudo.sh and scripts/relay_serve_copy.sh (under sudo), and
/// lib.sh's `kb_serve`.
pub fn serve_script(serve: &Serve) -> Result<String, String> {
    Ok(match serve.login {
        Login::Own => {
            let command = direct_command(serve.dir, serve.tmp, serve.name);
            if let Some(why) = forced_command_refusal(&command) {
                return Err(why);
            }
            with_serve_values(include_str!("scripts/relay_serve.sh"), serve, &command, "")
        }
        Login::Sudo(user) => {
            let served = [serve.dir.trim_end_matches('/'), "/", serve.tmp].concat();
            with_values(
                include_str!("scripts/relay_serve_sudo.sh"),
                &[
                    ("KB_USER", user),
                    ("KB_SERVED", &served),
                    ("KB_AS_LOGIN", &serve_as_login(serve)),
                ],
            )
        }
    })
}

/// The part of [`serve_script`] that the login user runs under sudo, its home as `$1`
/// and the copy root sends on stdin: it writes the copy in its home and serves that
/// (scripts/relay_serve_copy.sh).
fn serve_as_login(serve: &Serve) -> String {
    let copy = copy_name(serve.tag, serve.sha256);
    with_serve_values(
        include_str!("scripts/relay_serve_copy.sh"),
        serve,
        "",
        &copy,
    )
}

/// `file` with the values lib.sh's `kb_serve` reads: the forced `command` (a login's
/// own home) or the name of the `copy` in the home (under sudo), and the line's own.
fn with_serve_values(file: &str, serve: &Serve, command: &str, copy: &str) -> String {
    let size = serve.size.to_string();
    let from = serve.from.join(",");
    let lifetime = serve.lifetime_secs.to_string();
    with_values(
        file,
        &[
            ("KB_COMMAND", command),
            ("KB_COPY", copy),
            ("KB_SIZE", &size),
            ("KB_FROM", &from),
            ("KB_KEY", serve.public_key),
            ("KB_TAG", serve.tag),
            ("KB_LIFETIME", &lifetime),
        ],
    )
}

/// The prepare step's check, as the login user in its home `$HOME`, that the node can
/// serve: it prints [`NOT_SERVING_LINE`] and why when it cannot
/// (scripts/relay_serve_probe.sh).
pub fn serve_probe_as_login() -> String {
    sendable(include_str!("scripts/relay_serve_probe.sh"))
}

/// The prepare step's check, as root under sudo, that root can run the serve's steps in
/// the home of `user` (the login user) as that user: [`NOT_SERVING_LINE`] and why when
/// it cannot (scripts/relay_serve_probe_root.sh).
pub fn serve_probe_as_root(user: &str) -> String {
    with_values(
        include_str!("scripts/relay_serve_probe_root.sh"),
        &[("KB_USER", user)],
    )
}

/// The name of a sudo node's served copy of the payload `sha256` in the login user's
/// home: the run's tag, then the start of the payload's hash (a run may serve several
/// payloads; hex needs no quoting, where an archive's name might).
fn copy_name(tag: &str, sha256: &str) -> String {
    let short = sha256.get(..16).unwrap_or(sha256);
    format!(".{tag}.{short}")
}

/// The shape of every line the relay writes, up to its tag's random part (an ERE).
const LINE_SHAPE: &str = r#"^restrict,from="[^"]*",command="[^"]*",expiry-time="[0-9]{14}" ssh-ed25519 [A-Za-z0-9+/=]+ keadm-batch-relay-"#;

/// Removes relay lines from the login user's authorized_keys, as the login user in its
/// home `$HOME`: the lines tagged `tag` (this run's; `None` at the start of a run), and
/// every relay line whose expiry has passed by the node's clock, with the copies those
/// lines served. Lines of another run or shard still serving stay.
///
/// Byte-exact under `LC_ALL=C` (a UTF-8 locale makes grep call a file with a Latin-1
/// byte binary), the tag matched as the line's last field: grep writes the kept lines
/// to a new file beside the old one (keeping its mode), the removed lines are counted,
/// and only when the two add up to the old file (and it did not change meanwhile) is the
/// new one renamed into place. Anything else leaves the file as it was and prints
/// [`KEPT_LINE`] and why. scripts/relay_clear.sh.
pub fn clear_script(tag: Option<&str>) -> String {
    let mine = tag
        .map(|t| t.strip_prefix(TAG_PREFIX).unwrap_or(t))
        .unwrap_or_default();
    with_values(
        include_str!("scripts/relay_clear.sh"),
        &[("KB_LINE_SHAPE", LINE_SHAPE), ("KB_RUN_TAG", mine)],
    )
}

/// At the start of a run on a node of a relaying site, with the run's privilege: the key
/// files a fetch of an earlier run left in `dir` when its node died mid-way (a fetch
/// removes its own whatever else happens), once a day old, so a concurrent run's fetch
/// keeps its own (scripts/relay_stale_files.sh).
pub fn stale_fetch_files_script(dir: &str) -> String {
    with_values(
        include_str!("scripts/relay_stale_files.sh"),
        &[("KB_DIR", dir)],
    )
}

/// Where the receiver fetches from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// The source's host key as the control host verified it: `<type> <base64>`.
    pub host_key: String,
}

/// What a fetch reads and checks.
#[derive(Debug, Clone)]
pub struct Fetch<'a> {
    /// The upload dir, and the temporary name the copy is written to there.
    pub dir: &'a str,
    pub tmp: &'a str,
    pub source: &'a Source,
    /// The node's own address, what the source's `from=` admits.
    pub bind: &'a str,
    pub sha256: &'a str,
    pub size: u64,
    pub mode: u32,
    pub hasher: Sha256Tool,
    pub limit_secs: u64,
}

/// How much of what ssh prints on its stderr a fetch keeps, for its failure line.
const FETCH_ERR_CAP: u64 = 4096;

/// Fetches a payload from its source into `dir/tmp` (then `mode`) with the node's ssh
/// client, bound to the node's own address, and checks its sha256 and size before
/// anything moves. The read stops at the payload's size plus one byte (a source that
/// sends more costs the node no more disk than that) and ssh's stderr at
/// [`FETCH_ERR_CAP`] bytes; ssh's own exit status is kept through the pipe. Where
/// util-linux's `prlimit` works, the kernel holds ssh's writes to that size
/// (`RLIMIT_FSIZE`, ssh killed by SIGXFSZ past it) and ssh writes the copy itself;
/// elsewhere the copy goes through `head -c`, whose extra pipe cost the fan-out of
/// bench/sites.sh a quarter of its time (0.15-0.2 CPU-s a 48 MB read, 38 reads on two
/// cores). The run's
/// key comes on stdin (never on a command line, where other users could read it); it and
/// the source's host key are written to 0600 files beside the copy and removed whatever
/// happens. Any failure removes the temporary file, prints [`RELAY_FAILED_LINE`] and
/// why, and exits 1. A read that has not ended after `limit_secs` (a source that
/// trickles: ssh's keepalives see it alive) is stopped by the node's `timeout` and fails
/// the same way, so the node gets the file the direct way rather than running into its
/// channel's deadline.
///
/// A node whose CPU has AES instructions asks for AES-GCM first: it moves the copy at
/// several times chacha20's speed there, and a site's fan-out is bound by the nodes' CPU,
/// not by their LAN. Without them OpenSSH's own order (chacha20 first) is faster.
/// scripts/relay_fetch.sh.
pub fn fetch_script(fetch: &Fetch) -> String {
    let source = fetch.source;
    with_values(
        include_str!("scripts/relay_fetch.sh"),
        &[
            ("KB_DIR", fetch.dir),
            ("KB_TMP", fetch.tmp),
            ("KB_KEY_END", KEY_END),
            ("KB_ALIAS", HOST_ALIAS),
            ("KB_KNOWN", &[HOST_ALIAS, " ", &source.host_key].concat()),
            ("KB_BIND", fetch.bind),
            ("KB_PORT", &source.port.to_string()),
            ("KB_USER", &source.user),
            ("KB_HOST", &source.host),
            ("KB_SIZE", &fetch.size.to_string()),
            ("KB_ERR_CAP", &FETCH_ERR_CAP.to_string()),
            ("KB_LIMIT", &fetch.limit_secs.to_string()),
            ("KB_HASHER", fetch.hasher.name()),
            ("KB_SHA256", fetch.sha256),
            ("KB_MODE", &format!("{:o}", fetch.mode)),
        ],
    )
}

#[cfg(test)]
mod tests;
