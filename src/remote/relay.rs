//! The shell text of the site relay (docs/decisions.md, "One copy per site"): a source
//! node serves one file to the nodes of its site through its own sshd, with a run-scoped
//! key that can do nothing but read that file, only from the site's addresses and only
//! until it expires; a receiving node fetches it with its ssh client, checks its sha256
//! as it would check a direct upload, and the source's line is removed once the site is
//! done (or, should the control host die, by the next run and its expiry).

use super::{Sha256Tool, size_is};
use crate::shell::shell_quote;

/// Ends every authorized_keys line the relay writes: the run's tag follows it.
const TAG: &str = "keadm-batch-relay-";

/// The exit status of the run's script when the relay fetch failed, so keadm did not
/// run: the control host sends the file directly instead.
pub const RELAY_FAILED: i32 = 204;

/// The line that says why the relay fetch failed.
pub const RELAY_FAILED_LINE: &str = "KB_RELAY_FAILED";

/// The last line of the run's private key, which ends the key on the fetch's stdin.
const KEY_END: &str = "-----END OPENSSH PRIVATE KEY-----";

/// The alias the receiver knows the source's host key by, whatever its address.
const HOST_ALIAS: &str = "keadm-batch-relay-source";

/// The tag of this run's lines.
pub fn tag(run_token: &str) -> String {
    format!("{TAG}{run_token}")
}

/// Shell that sets `kb_ak` to the login user's authorized_keys file and `kb_user` to
/// that user: sshd's own `$HOME` for a direct login, and under sudo the home of the user
/// sudo was run by (that is whose login the receivers make).
const FIND_AUTHORIZED_KEYS: &str = "kb_user=${SUDO_USER:-$(id -un)}; \
if [ -n \"$SUDO_USER\" ]; then kb_home=$(getent passwd \"$SUDO_USER\" 2>/dev/null | cut -d: -f6); else kb_home=$HOME; fi; \
[ -n \"$kb_home\" ] || exit 0; kb_ak=$kb_home/.ssh/authorized_keys";

/// Appends the line that lets the site's nodes read this node's copy of a file: the
/// temporary name while it is there, else the final one (a rename is atomic, so one of
/// the two always exists). Under sudo the upload dir is root's alone, so the login user
/// serves a copy of its own in its home instead (removed with the line). `restrict`
/// turns off forwarding, ptys and user rc; `from=` admits only the site's addresses;
/// `expiry-time` ends it `lifetime` seconds from now by the node's own clock, should
/// nobody remove it. A node whose `date` cannot compute that time serves nothing.
/// Quiet: a node that cannot serve is simply no source.
#[allow(clippy::too_many_arguments)]
pub fn serve_script(
    dir: &str,
    tmp: &str,
    name: &str,
    sha256: &str,
    public_key: &str,
    from: &[String],
    run_token: &str,
    lifetime_secs: u64,
) -> String {
    let path = |file: &str| shell_quote(&format!("{}/{file}", dir.trim_end_matches('/')));
    // Inside the command="..." option: double quotes are its delimiters, so the paths
    // are single-quoted (shell_quote never writes a double quote).
    let direct = format!("cat -- {} 2>/dev/null || cat -- {}", path(tmp), path(name));
    let copy = copy_name(run_token, sha256);
    // The line is put together on the node, where its clock (the expiry) and the login
    // user's home (the copy under sudo) are known.
    let format = format!(
        "restrict,from=\"{}\",command=\"%s\",expiry-time=\"%s\" {public_key} {}\\n",
        from.join(","),
        tag(run_token)
    );
    format!(
        "( {FIND_AUTHORIZED_KEYS}; \
         kb_exp=$(date -d \"@$(( $(date +%s) + {lifetime_secs} ))\" +%Y%m%d%H%M%S 2>/dev/null) && [ -n \"$kb_exp\" ] || exit 0; \
         kb_cmd={direct}; \
         if [ -n \"$SUDO_USER\" ]; then kb_copy=$kb_home/{copy}; \
         cp -- {tmp_path} \"$kb_copy\" && chown \"$kb_user\" \"$kb_copy\" && chmod 400 \"$kb_copy\" || exit 0; \
         kb_cmd=\"cat -- '$kb_copy'\"; fi; \
         [ -d \"$kb_home/.ssh\" ] || {{ mkdir -m 700 \"$kb_home/.ssh\" || exit 0; chown \"$kb_user\" \"$kb_home/.ssh\"; }}; \
         [ -e \"$kb_ak\" ] || {{ ( umask 077; : > \"$kb_ak\" ) || exit 0; chown \"$kb_user\" \"$kb_ak\"; }}; \
         printf {format} \"$kb_cmd\" \"$kb_exp\" >> \"$kb_ak\" ) 2>/dev/null\n",
        direct = shell_quote(&direct),
        tmp_path = path(tmp),
        format = shell_quote(&format),
    )
}

/// The name of a sudo node's served copy of the payload `sha256` in the login user's
/// home: the run's tag, then the start of the payload's hash (a run may serve several
/// payloads; hex needs no quoting, where an archive's name might).
fn copy_name(run_token: &str, sha256: &str) -> String {
    let short = sha256.get(..16).unwrap_or(sha256);
    format!(".{}.{short}", tag(run_token))
}

/// Removes the relay's lines from the login user's authorized_keys: this run's (`Some`)
/// or every run's but this one (`None` with `keep`), rewriting the file in place so its
/// owner and mode stay.
pub fn unserve_script(run_token: &str, keep: bool) -> String {
    let tag = tag(run_token);
    let pattern = if keep {
        // Stale lines of earlier runs: the tag, then anything but this run's token.
        format!(" {TAG}")
    } else {
        format!(" {tag}$")
    };
    let filter = if keep {
        format!(
            "awk -v t={} -v mine={} 'index($0, t) == 0 || $NF == mine'",
            shell_quote(&pattern),
            shell_quote(&tag)
        )
    } else {
        format!("grep -v -- {}", shell_quote(&pattern))
    };
    // The copies a sudo node served: this run's, or every other run's.
    let copies = if keep {
        format!(
            "for kb_f in \"$kb_home\"/.{TAG}*; do case \"$kb_f\" in \"$kb_home/.{tag}.\"*) ;; *) rm -f -- \"$kb_f\";; esac; done"
        )
    } else {
        format!("rm -f -- \"$kb_home/.{tag}.\"*")
    };
    format!(
        "( {FIND_AUTHORIZED_KEYS}; {copies}; [ -f \"$kb_ak\" ] && grep -q -- {tag_any} \"$kb_ak\" || exit 0; \
         kb_new=$({filter} \"$kb_ak\"; echo x) && printf '%s' \"${{kb_new%x}}\" > \"$kb_ak\" ) 2>/dev/null\n",
        tag_any = shell_quote(TAG),
    )
}

/// At the start of a run on a node of a relaying site: what an earlier run left when its
/// control host died mid-way (its line and served copy, a fetch's key files in `dir`).
pub fn stale_script(dir: &str, run_token: &str) -> String {
    format!(
        "{}( cd {} 2>/dev/null && rm -f -- .*.tmp.key .*.tmp.hosts .*.tmp.err )\n",
        unserve_script(run_token, true),
        shell_quote(dir)
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

/// Fetches a payload from `source` into `dir/tmp` (then `mode`) with the node's ssh client, bound to the
/// node's own address `bind` (what the source's `from=` admits), and checks its sha256
/// and size before anything moves. The run's key comes on stdin (never on a command
/// line, where other users could read it); it and the source's host key are written to
/// 0600 files beside the copy and removed whatever happens. Any failure removes the
/// temporary file, prints [`RELAY_FAILED_LINE`] and why, and exits 1. A read that has
/// not ended after `limit_secs` (a source that trickles: ssh's keepalives see it alive)
/// is stopped by the node's `timeout` and fails the same way, so the node gets the file
/// the direct way rather than running into its channel's deadline.
///
/// A node whose CPU has AES instructions asks for AES-GCM first: it moves the copy at
/// several times chacha20's speed there, and a site's fan-out is bound by the nodes' CPU,
/// not by their LAN. Without them OpenSSH's own order (chacha20 first) is faster.
#[allow(clippy::too_many_arguments)]
pub fn fetch_script(
    dir: &str,
    tmp: &str,
    source: &Source,
    bind: &str,
    sha256: &str,
    size: u64,
    mode: u32,
    hasher: Sha256Tool,
    limit_secs: u64,
) -> String {
    let t = shell_quote(tmp);
    format!(
        "umask 077 && cd {dir} || exit 1\n\
         kb_k={t}.key; kb_h={t}.hosts; kb_e={t}.err\n\
         trap 'rm -f -- \"$kb_k\" \"$kb_h\" \"$kb_e\"' EXIT; trap 'exit 1' HUP INT TERM\n\
         kb_fail() {{ rm -f -- {t}; echo \"{RELAY_FAILED_LINE} $*\"; exit 1; }}\n\
         command -v ssh >/dev/null 2>&1 || kb_fail the node has no ssh client\n\
         while IFS= read -r kb_l; do printf '%s\\n' \"$kb_l\"; [ \"$kb_l\" = {key_end} ] && break; done > \"$kb_k\" && \
         printf '%s\\n' {known} > \"$kb_h\" || kb_fail cannot write the relay key\n\
         kb_c=; grep -qw aes /proc/cpuinfo 2>/dev/null && kb_c='-c aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr'\n\
         kb_to=; command -v timeout >/dev/null 2>&1 && kb_to='timeout {limit_secs}'\n\
         $kb_to ssh -F /dev/null -n $kb_c -i \"$kb_k\" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
         -o UserKnownHostsFile=\"$kb_h\" -o GlobalKnownHostsFile=/dev/null -o HostKeyAlias={HOST_ALIAS} \
         -o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o LogLevel=ERROR \
         -b {bind} -p {port} -l {user} {host} fetch > {t} 2> \"$kb_e\" || {{ [ $? = 124 ] && kb_fail the read did not end within {limit_secs} s; kb_fail \"$(head -c 300 \"$kb_e\" | tr '\\n' ' ')\"; }}\n\
         {check} || kb_fail the copy from {from} has $(( $(wc -c < {t}) )) bytes, not {size}\n\
         kb_s=$({hash} < {t}) && [ \"${{kb_s%% *}}\" = {sha} ] || kb_fail the copy from {from} does not have the sha256 this machine verified\n\
         chmod {mode:o} -- {t}\n",
        dir = shell_quote(dir),
        key_end = shell_quote(KEY_END),
        known = shell_quote(&format!("{HOST_ALIAS} {}", source.host_key)),
        bind = shell_quote(bind),
        port = source.port,
        user = shell_quote(&source.user),
        host = shell_quote(&source.host),
        from = shell_quote(&source.host),
        check = size_is(&t, size),
        hash = hasher.command(),
        sha = shell_quote(sha256),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that trickles (here an `ssh` that never ends) is given up at the read's
    /// limit: the script says so on its failure line, exits 1, and leaves neither the
    /// partial copy nor the key files behind.
    #[test]
    fn a_read_that_does_not_end_in_time_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let ssh = bin.join("ssh");
        std::fs::write(&ssh, "#!/bin/sh\nprintf partial\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let source = Source {
            host: "10.0.0.1".into(),
            port: 22,
            user: "root".into(),
            host_key: "ssh-ed25519 AAAA".into(),
        };
        let script = fetch_script(
            &dir.path().display().to_string(),
            ".keadm.t-1.tmp",
            &source,
            "10.0.0.2",
            "00",
            7,
            0o755,
            Sha256Tool::Sha256sum,
            1,
        );
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let started = std::time::Instant::now();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("PATH", path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        writeln!(child.stdin.take().unwrap(), "key line\n{KEY_END}").unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains(&format!(
                "{RELAY_FAILED_LINE} the read did not end within 1 s"
            )),
            "{text}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "bin")
            .collect();
        assert_eq!(left, Vec::<String>::new());
    }

    /// The serve line is one authorized_keys line whose options sshd reads: restricted,
    /// limited to the site's addresses, one command, an expiry filled in on the node.
    #[test]
    fn the_serve_line_restricts_the_key_to_one_file_and_the_site() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let script = serve_script(
            "/tmp/kubeedge/keadm",
            ".keadm.t-1.tmp",
            "keadm",
            "0123456789abcdef0123",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnly",
            &["10.0.0.1".into(), "10.0.0.2".into()],
            "t",
            600,
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{script}cat \"$HOME/.ssh/authorized_keys\""))
            .env("HOME", &home)
            .env_remove("SUDO_USER")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next().unwrap_or_default();
        assert!(
            line.starts_with(
                "restrict,from=\"10.0.0.1,10.0.0.2\",command=\"cat -- /tmp/kubeedge/keadm/.keadm.t-1.tmp 2>/dev/null || cat -- /tmp/kubeedge/keadm/keadm\",expiry-time=\"2"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnly keadm-batch-relay-t"),
            "{line}"
        );

        // Removing this run's lines keeps the others, and keeping this run's removes
        // the stale ones of an earlier run.
        let ak = home.join(".ssh/authorized_keys");
        std::fs::write(
            &ak,
            format!("ssh-ed25519 A operator\n{line}\nrestrict x keadm-batch-relay-old\n"),
        )
        .unwrap();
        let run = |script: String| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("HOME", &home)
                .env_remove("SUDO_USER")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            std::fs::read_to_string(&ak).unwrap()
        };
        assert_eq!(
            run(unserve_script("t", true)),
            format!("ssh-ed25519 A operator\n{line}\n")
        );
        assert_eq!(run(unserve_script("t", false)), "ssh-ed25519 A operator\n");
    }
}
