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

/// Shell that ends the script with [`NOT_SERVING_LINE`] and why (`kb_no`), and checks
/// that `kb_home` is an absolute path that can stand inside the forced command's quotes.
const HOME_CHECK: &str = r#"kb_no() { echo "KB_RELAY_NOT_SERVING $*"; exit 0; }
case $kb_home in /*) ;; *) kb_no the login user has no home;; esac
case $kb_home in *\"*|*\\*|*"'"*|*[[:cntrl:]]*) kb_no "the login user's home has a quote, a backslash or a control character in its name";; esac
"#;

/// Shell, as the login user, that prints why its authorized_keys cannot take a line
/// (and succeeds), or fails when it can. A symlink is refused even where the login user
/// could write through it: the clearing replaces the file by a rename, which would
/// replace the link.
const AUTHORIZED_KEYS_CHECK: &str = r#"kb_ak=$kb_home/.ssh/authorized_keys
kb_ak_refused() {
  if [ -L "$kb_ak" ]; then echo "the login user's .ssh/authorized_keys is a symbolic link"
  elif [ -e "$kb_ak" ] && { [ ! -f "$kb_ak" ] || [ ! -w "$kb_ak" ]; }; then echo "the login user's .ssh/authorized_keys is not a file it can write"
  elif [ -e "$kb_home/.ssh" ] && { [ ! -d "$kb_home/.ssh" ] || [ ! -w "$kb_home/.ssh" ]; }; then echo "the login user's .ssh is not a directory it can write"
  elif [ ! -e "$kb_home/.ssh" ] && [ ! -w "$kb_home" ]; then echo "the login user cannot write its home"
  else return 1; fi
}
kb_why=$(kb_ak_refused) && kb_no "$kb_why"
"#;

/// Shell, as root under sudo, that finds the login user `$kb_user` (`kb_pw`, `kb_uid`,
/// `kb_gid`, or ends the script with `kb_no`) and defines `kb_drop_tool`, which prints
/// the way this node runs a command as it (util-linux's `setpriv` or `runuser`, else
/// `su`, each tried with `id -u`) or fails when there is none.
const FIND_LOGIN_USER: &str = r#"kb_pw=$(getent passwd "$kb_user" 2>/dev/null | head -n 1)
kb_uid=$(printf '%s\n' "$kb_pw" | cut -d: -f3)
kb_gid=$(printf '%s\n' "$kb_pw" | cut -d: -f4)
case $kb_uid:$kb_gid in :*|*:|*[!0-9:]*) kb_no "getent passwd does not know the login user $kb_user";; esac
kb_drop_tool() {
  if [ "$(setpriv --reuid="$kb_uid" --regid="$kb_gid" --init-groups -- id -u 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo setpriv
  elif [ "$(runuser -u "$kb_user" -- id -u 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo runuser
  elif [ "$(su -s /bin/sh "$kb_user" -c 'id -u' 2>/dev/null </dev/null)" = "$kb_uid" ]; then echo su
  else return 1; fi
}
"#;

/// Why a sudo node whose [`FIND_LOGIN_USER`] finds no way to run as the login user does
/// not serve.
const NO_DROP: &str = "none of setpriv, runuser and su runs a command as $kb_user here, and root does not work in its home";

/// Shell after [`FIND_LOGIN_USER`]: `kb_home`, the login user's home, and
/// `kb_as SCRIPT ARG0 ARGS...`, which runs `sh -c SCRIPT` as the login user (with
/// `setpriv` its real, effective and saved ids all become the user's, and its groups).
const DROP_TO_LOGIN: &str = r#"kb_home=$(printf '%s\n' "$kb_pw" | cut -d: -f6)
kb_how=$(kb_drop_tool) || kb_no "$kb_no_drop"
kb_as() {
  case $kb_how in
    setpriv) setpriv --reuid="$kb_uid" --regid="$kb_gid" --init-groups -- sh -c "$@" ;;
    runuser) runuser -u "$kb_user" -- sh -c "$@" ;;
    *) su -s /bin/sh "$kb_user" -c "$@" ;;
  esac
}
"#;

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
/// atomic, so one of the two always exists).
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
/// the login user's home, which the node checks.
pub fn serve_script(serve: &Serve) -> Result<String, String> {
    let copied = matches!(serve.login, Login::Sudo(_));
    if !copied
        && let Some(why) = forced_command_refusal(&direct_command(serve.dir, serve.tmp, serve.name))
    {
        return Err(why);
    }
    let as_login = serve_as_login(serve, copied);
    Ok(match serve.login {
        Login::Own => format!("( kb_home=$HOME\n{as_login}) </dev/null 2>/dev/null\n"),
        Login::Sudo(user) => format!(
            "( kb_user={user}\nkb_no() {{ echo \"{NOT_SERVING_LINE} $*\"; exit 0; }}\nkb_no_drop=\"{NO_DROP}\"\n{FIND_LOGIN_USER}{DROP_TO_LOGIN}\
             kb_as {script} kb \"$kb_home\" < {tmp} ) 2>/dev/null\n",
            user = shell_quote(user),
            script = shell_quote(&format!("kb_home=$1\n{as_login}")),
            tmp = shell_quote(&format!(
                "{}/{}",
                serve.dir.trim_end_matches('/'),
                serve.tmp
            )),
        ),
    })
}

/// The part of [`serve_script`] that runs as the login user in its home `kb_home`: with
/// `copy` (under sudo) it first writes the copy root sends on stdin, and serves that.
fn serve_as_login(serve: &Serve, copy: bool) -> String {
    let lifetime = serve.lifetime_secs;
    let command = if copy {
        let copy = copy_name(serve.tag, serve.sha256);
        format!(
            "kb_copy=$kb_home/{copy}\n\
                 if ! {{ rm -f -- \"$kb_copy.new\" && ( set -C && cat > \"$kb_copy.new\" ) && \
                 [ $(( $(wc -c < \"$kb_copy.new\") )) = {size} ] && chmod 400 -- \"$kb_copy.new\" && \
                 rm -f -- \"$kb_copy\" && mv -f -- \"$kb_copy.new\" \"$kb_copy\"; }}; then \
                 rm -f -- \"$kb_copy.new\"; kb_no \"cannot write its copy in the login user's home\"; fi\n\
                 kb_cmd=\"cat -- '$kb_copy'\"\n",
            size = serve.size
        )
    } else {
        format!(
            "kb_cmd={}\n",
            shell_quote(&direct_command(serve.dir, serve.tmp, serve.name))
        )
    };
    // The line is put together on the node, where its clock (the expiry) and the login
    // user's home (the copy under sudo) are known; `%%` keeps a `%` of the text itself.
    let text = |s: &str| s.replace('%', "%%");
    let format = format!(
        "%srestrict,from=\"{}\",command=\"%s\",expiry-time=\"%s\" {} {}\\n",
        text(&serve.from.join(",")),
        text(serve.public_key),
        text(serve.tag)
    );
    format!(
        "{HOME_CHECK}umask 077\n{AUTHORIZED_KEYS_CHECK}\
         kb_exp=$(date -d \"@$(( $(date +%s) + {lifetime} ))\" +%Y%m%d%H%M%S 2>/dev/null)\n\
         case $kb_exp in {digits}) ;; *) kb_no \"the node's date cannot tell the time {lifetime} s from now\";; esac\n\
         {command}\
         [ -d \"$kb_home/.ssh\" ] || mkdir -m 700 -- \"$kb_home/.ssh\" || kb_no \"cannot make the login user's .ssh\"\n\
         kb_pre=\n\
         [ -s \"$kb_ak\" ] && [ $(( $(tail -c 1 -- \"$kb_ak\" | wc -l) )) = 0 ] && kb_pre='\n'\n\
         printf {format} \"$kb_pre\" \"$kb_cmd\" \"$kb_exp\" >> \"$kb_ak\" || kb_no \"cannot add its line to the login user's authorized_keys\"\n",
        digits = "[0-9]".repeat(14),
        format = shell_quote(&format),
    )
}

/// The prepare step's check, as the login user in its home `$HOME`, that the node can
/// serve: it prints [`NOT_SERVING_LINE`] and why when it cannot.
pub fn serve_probe_as_login() -> String {
    format!(
        "( kb_home=$HOME\n{HOME_CHECK}{AUTHORIZED_KEYS_CHECK}\
         kb_exp=$(date -d \"@$(( $(date +%s) + 60 ))\" +%Y%m%d%H%M%S 2>/dev/null)\n\
         case $kb_exp in {digits}) ;; *) kb_no \"the node's date cannot tell the time of a line's expiry\";; esac\n\
         ) </dev/null 2>/dev/null\n",
        digits = "[0-9]".repeat(14),
    )
}

/// The prepare step's check, as root under sudo, that root can run the serve's steps in
/// the home of `user` (the login user) as that user: [`NOT_SERVING_LINE`] and why when
/// it cannot.
pub fn serve_probe_as_root(user: &str) -> String {
    format!(
        "( kb_user={}\nkb_no() {{ echo \"{NOT_SERVING_LINE} $*\"; exit 0; }}\n{FIND_LOGIN_USER}kb_drop_tool >/dev/null || kb_no \"{NO_DROP}\"\n) </dev/null 2>/dev/null\n",
        shell_quote(user)
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
    super::script::with_values(
        include_str!("scripts/relay_clear.sh"),
        &[("KB_LINE_SHAPE", LINE_SHAPE), ("KB_RUN_TAG", mine)],
    )
}

/// At the start of a run on a node of a relaying site, with the run's privilege: the key
/// files a fetch of an earlier run left in `dir` when its node died mid-way (a fetch
/// removes its own whatever else happens), once a day old, so a concurrent run's fetch
/// keeps its own (scripts/relay_stale_files.sh).
pub fn stale_fetch_files_script(dir: &str) -> String {
    super::script::with_values(
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
    super::script::with_values(
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
