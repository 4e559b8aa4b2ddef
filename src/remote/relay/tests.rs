use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::*;
use crate::remote::{Privilege, wrap};
use crate::shell::shellcheck::assert_posix_sh;

const TAG: &str = "keadm-batch-relay-0123456789abcdef";
const OTHER: &str = "keadm-batch-relay-fedcba9876543210";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnly";

fn serve<'a>(login: Login<'a>, from: &'a [String]) -> Serve<'a> {
    Serve {
        dir: "/tmp/kubeedge/keadm",
        tmp: ".keadm.t-1.tmp",
        name: "keadm",
        sha256: "0123456789abcdef0123",
        size: 7,
        public_key: KEY,
        from,
        tag: TAG,
        lifetime_secs: 600,
        login,
    }
}

fn site() -> Vec<String> {
    vec!["10.0.0.1".into(), "10.0.0.2".into()]
}

fn source() -> Source {
    Source {
        host: "10.0.0.1".into(),
        port: 22,
        user: "root".into(),
        host_key: "ssh-ed25519 AAAA".into(),
    }
}

fn fetch<'a>(dir: &'a str, source: &'a Source, sha256: &'a str, size: u64) -> Fetch<'a> {
    Fetch {
        dir,
        tmp: ".keadm.t-1.tmp",
        source,
        bind: "10.0.0.2",
        sha256,
        size,
        mode: 0o755,
        hasher: Sha256Tool::Sha256sum,
        limit_secs: 5,
    }
}

/// Every relay script, in each form it takes (a root or plain login in its own home,
/// root under sudo with the login user's part, each as sudo wraps it), is POSIX sh that
/// Debian's shellcheck finds nothing in.
#[test]
fn every_relay_script_passes_shellcheck_in_each_form() {
    let from = site();
    let own = serve_script(&serve(Login::Own, &from)).unwrap();
    let sudo = serve_script(&serve(Login::Sudo("kbuser"), &from)).unwrap();
    let copying = serve_as_login(&serve(Login::Sudo("kbuser"), &from));
    let source = source();
    // Whether the script is also sent inside sudo's `sh -c`: the clearings and the
    // serve line of a login's own home always run as the login user.
    let scripts = [
        ("the serve script, own home", own, false),
        ("the serve script under sudo", sudo, true),
        (
            "the serve script's part as the login user, copying",
            copying,
            false,
        ),
        (
            "the serve probe as the login user",
            serve_probe_as_login(),
            false,
        ),
        (
            "the serve probe as root",
            serve_probe_as_root("kbuser"),
            true,
        ),
        (
            "the clearing of this run's lines",
            clear_script(Some(TAG)),
            false,
        ),
        ("the stale clearing", clear_script(None), false),
        (
            "the stale fetch files",
            stale_fetch_files_script("/tmp/kubeedge/keadm"),
            true,
        ),
        (
            "the fetch",
            fetch_script(&fetch("/tmp/kubeedge/keadm", &source, "00", 7)),
            true,
        ),
    ];
    let inner: &[(&str, &str)] = &[
        (
            "SC2016",
            "the login user's part is one single-quoted value (KB_AS_LOGIN) for `sh -c` as that user: its `$` are that shell's",
        ),
        (
            "SC1003",
            "under sudo that single-quoted script sits inside sudo's single-quoted `sh -c` script, so its own quotes come as '\\''",
        ),
    ];
    for (what, script, under_sudo) in &scripts {
        assert!(!script.contains("awk"), "{what} needs awk");
        let allowed = if script.contains("kb_as ") {
            inner
        } else {
            &[]
        };
        assert_posix_sh(what, script, allowed);
        if !under_sudo {
            continue;
        }
        for privilege in [Privilege::SudoNoPassword, Privilege::SudoPassword] {
            assert_posix_sh(
                &format!("{what}, {privilege:?}"),
                &wrap(script, privilege),
                allowed,
            );
        }
    }
}

#[test]
fn a_tag_is_64_random_bits_in_hex() {
    let tag = tag_from([0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 0xff]);
    assert_eq!(tag, "keadm-batch-relay-deadbeef000102ff");
}

/// A forced command with a double quote, a backslash or a control character (from an
/// upload dir or a name) is refused before anything is written: sshd would read past it.
#[test]
fn a_forced_command_that_authorized_keys_cannot_carry_is_refused() {
    let from = site();
    for dir in ["/tmp/a\"b", "/tmp/a\\b", "/tmp/a\nb", "/tmp/it's"] {
        let mut s = serve(Login::Own, &from);
        s.dir = dir;
        let why = serve_script(&s).unwrap_err();
        assert!(why.contains("authorized_keys cannot carry"), "{why}");
        assert!(!why.contains('\n'), "{why}");
    }
    let mut s = serve(Login::Own, &from);
    s.name = "image-pause_3.6.tar";
    assert!(serve_script(&s).is_ok());
}

/// Runs `script` with `sh -c` and the home `home`, the environment cleared but `PATH`
/// (`path`, else this process's), `HOME` and `LC_ALL` (a UTF-8 locale unless told).
fn run_in(home: &Path, script: &str, path: Option<&Path>, shell: &str) -> Output {
    let path = path.map_or_else(
        || std::env::var("PATH").unwrap(),
        |p| p.display().to_string(),
    );
    Command::new(shell)
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LC_ALL", "C.UTF-8")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn run(home: &Path, script: &str) -> Output {
    run_in(home, script, None, "sh")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The serve line is one authorized_keys line whose options sshd reads: restricted,
/// limited to the site's addresses, one command, an expiry filled in on the node; it
/// starts a line of its own after an operator's last line without a line break.
#[test]
fn the_serve_line_restricts_the_key_to_one_file_and_the_site() {
    let home = tempfile::tempdir().unwrap();
    let from = site();
    let script = serve_script(&serve(Login::Own, &from)).unwrap();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    let ak = ssh.join("authorized_keys");
    std::fs::write(&ak, b"ssh-ed25519 A op\xe9rateur").unwrap();
    let out = run(home.path(), &script);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    let text = std::fs::read(&ak).unwrap();
    let (operator, line) = text.split_at(b"ssh-ed25519 A op\xe9rateur\n".len());
    assert_eq!(operator, b"ssh-ed25519 A op\xe9rateur\n");
    let line = String::from_utf8(line.to_vec()).unwrap();
    assert!(
        line.starts_with(
            "restrict,from=\"10.0.0.1,10.0.0.2\",command=\"cat -- /tmp/kubeedge/keadm/.keadm.t-1.tmp 2>/dev/null || cat -- /tmp/kubeedge/keadm/keadm\",expiry-time=\"2"
        ),
        "{line}"
    );
    assert!(line.ends_with(&format!("\" {KEY} {TAG}\n")), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
}

/// A home the login user made hostile: a symlinked or dangling authorized_keys is never
/// written through (the node does not serve, and says why); a missing one is made 0600
/// in a 0700 `.ssh`.
#[test]
fn the_serve_script_does_not_write_through_a_symlink() {
    let from = site();
    let script = serve_script(&serve(Login::Own, &from)).unwrap();
    for dangling in [true, false] {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = home.path().join("elsewhere");
        if !dangling {
            std::fs::write(&elsewhere, "ssh-ed25519 A op\n").unwrap();
        }
        std::fs::create_dir(home.path().join(".ssh")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, home.path().join(".ssh/authorized_keys")).unwrap();
        let out = run(home.path(), &script);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            stdout(&out),
            "KB_RELAY_NOT_SERVING the login user's .ssh/authorized_keys is a symbolic link\n"
        );
        if dangling {
            assert!(!elsewhere.exists());
        } else {
            assert_eq!(
                std::fs::read_to_string(&elsewhere).unwrap(),
                "ssh-ed25519 A op\n"
            );
        }
    }
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &script);
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&home.path().join(".ssh")), 0o700);
    assert_eq!(mode(&home.path().join(".ssh/authorized_keys")), 0o600);
}

/// The prepare step's probe says why a home cannot serve, and nothing where it can.
#[test]
fn the_serve_probe_says_why_a_home_cannot_serve() {
    let home = tempfile::tempdir().unwrap();
    let out = run(home.path(), &serve_probe_as_login());
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::os::unix::fs::symlink("/nowhere", home.path().join(".ssh/authorized_keys")).unwrap();
    let out = run(home.path(), &serve_probe_as_login());
    assert_eq!(
        stdout(&out),
        "KB_RELAY_NOT_SERVING the login user's .ssh/authorized_keys is a symbolic link\n"
    );
    let out = run(Path::new("relative"), &serve_probe_as_login());
    assert_eq!(
        stdout(&out),
        "KB_RELAY_NOT_SERVING the login user has no home\n"
    );
}

/// The node's local time `secs` from now as `expiry-time` writes it.
fn local_time_in(secs: i64) -> String {
    let out = Command::new("date")
        .arg("-d")
        .arg(format!("@{}", now_secs() + secs))
        .arg("+%Y%m%d%H%M%S")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn relay_line(tag: &str, expiry: &str) -> String {
    format!(
        "restrict,from=\"10.0.0.1\",command=\"cat -- '/home/u/.{tag}.0123456789abcdef'\",expiry-time=\"{expiry}\" {KEY} {tag}\n"
    )
}

/// A home with operator keys of odd bytes (Latin-1, a NUL, a last line without a line
/// break), this run's line, a concurrent run's live line and an expired line of an
/// earlier run, each with its served copy.
fn hostile_home() -> (tempfile::TempDir, Vec<u8>, String, String, String) {
    let home = tempfile::tempdir().unwrap();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    let mine = relay_line(TAG, &local_time_in(3600));
    let live = relay_line(OTHER, &local_time_in(3600));
    let expired = relay_line(
        "keadm-batch-relay-20240101T000000Z-ab12",
        &local_time_in(-60),
    );
    let mut text = b"ssh-ed25519 AAAA op\xe9rateur\n".to_vec();
    text.extend_from_slice(mine.as_bytes());
    text.extend_from_slice(b"ssh-rsa BBBB nul\0byte keadm-batch-relay-x\n");
    text.extend_from_slice(live.as_bytes());
    text.extend_from_slice(expired.as_bytes());
    text.extend_from_slice(b"ssh-ed25519 CCCC last \xff line");
    std::fs::write(ssh.join("authorized_keys"), &text).unwrap();
    std::fs::set_permissions(
        ssh.join("authorized_keys"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    for tag in [TAG, OTHER, "keadm-batch-relay-20240101T000000Z-ab12"] {
        std::fs::write(home.path().join(format!(".{tag}.0123456789abcdef")), "x").unwrap();
    }
    (home, text, mine, live, expired)
}

fn copies(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".keadm-batch-relay-"))
        .collect();
    names.sort();
    names
}

/// A directory whose commands are busybox's applets (the clearing works with them too),
/// and busybox itself.
fn busybox_bin(dir: &Path) -> (PathBuf, String) {
    let bin = dir.join("busybox-bin");
    std::fs::create_dir(&bin).unwrap();
    let busybox = Command::new("sh")
        .args(["-c", "command -v busybox"])
        .output()
        .unwrap();
    let busybox = String::from_utf8(busybox.stdout).unwrap();
    assert!(
        !busybox.trim().is_empty(),
        "this test needs busybox (scripts/setup.sh installs it)"
    );
    for applet in [
        "sh", "grep", "sed", "date", "rm", "cp", "wc", "tail", "mv", "cat", "head", "tr", "chmod",
        "mkdir",
    ] {
        std::os::unix::fs::symlink(busybox.trim(), bin.join(applet)).unwrap();
    }
    (bin, busybox.trim().to_string())
}

/// The clearing removes this run's lines and expired ones (with their copies), keeps a
/// concurrent run's and every operator line byte for byte, in a UTF-8 locale, with
/// dash and GNU tools and with busybox's, and keeps the file's mode.
#[test]
fn the_clearing_removes_only_this_runs_and_expired_lines_byte_for_byte() {
    for busybox in [false, true] {
        let (home, text, mine, live, expired) = hostile_home();
        let script = clear_script(Some(TAG));
        let out = if busybox {
            let (bin, busybox) = busybox_bin(home.path());
            Command::new(busybox)
                .args(["sh", "-c", &script])
                .env_clear()
                .env("PATH", bin)
                .env("HOME", home.path())
                .env("LC_ALL", "C.UTF-8")
                .output()
                .unwrap()
        } else {
            run_in(home.path(), &script, None, "sh")
        };
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "{busybox}: {out:?}"
        );
        let ak = home.path().join(".ssh/authorized_keys");
        let now = std::fs::read(&ak).unwrap();
        let mut expected = b"ssh-ed25519 AAAA op\xe9rateur\n".to_vec();
        expected.extend_from_slice(b"ssh-rsa BBBB nul\0byte keadm-batch-relay-x\n");
        expected.extend_from_slice(live.as_bytes());
        expected.extend_from_slice(b"ssh-ed25519 CCCC last \xff line\n");
        assert_eq!(
            String::from_utf8_lossy(&now),
            String::from_utf8_lossy(&expected),
            "busybox {busybox}"
        );
        assert_eq!(now, expected);
        assert!(text.windows(mine.len()).any(|w| w == mine.as_bytes()));
        assert!(text.windows(expired.len()).any(|w| w == expired.as_bytes()));
        assert_eq!(
            std::fs::metadata(&ak).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(
            copies(home.path()),
            vec![format!(".{OTHER}.0123456789abcdef")]
        );
        let left: Vec<String> = std::fs::read_dir(home.path().join(".ssh"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["authorized_keys".to_string()]);
    }
}

/// At the start of a run no line is this run's: only expired ones go.
#[test]
fn the_stale_clearing_removes_only_expired_lines() {
    let (home, _, mine, live, _) = hostile_home();
    let out = run(home.path(), &clear_script(None));
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    let now = std::fs::read(home.path().join(".ssh/authorized_keys")).unwrap();
    let now = String::from_utf8_lossy(&now);
    assert!(now.contains(&mine) && now.contains(&live), "{now}");
    assert!(!now.contains("20240101T000000Z"), "{now}");
    assert_eq!(
        copies(home.path()),
        vec![
            format!(".{TAG}.0123456789abcdef"),
            format!(".{OTHER}.0123456789abcdef")
        ]
    );
}

/// A filter whose output does not add up to the file (here a grep that drops a line,
/// as one that calls the file binary does) leaves the file as it was, and says so; so
/// does a symlinked file.
#[test]
fn a_clearing_that_would_lose_a_line_leaves_the_file_and_says_so() {
    let (home, text, _, _, _) = hostile_home();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let grep = bin.join("grep");
    std::fs::write(
        &grep,
        "#!/bin/sh\ncase \"$1 $2\" in '-a -v') /bin/grep \"$@\" | /bin/sed 1d ;; *) exec /bin/grep \"$@\" ;; esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&grep, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = PathBuf::from(format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap()
    ));
    let out = run_in(home.path(), &clear_script(Some(TAG)), Some(&path), "sh");
    let said = stdout(&out);
    assert!(
        said.starts_with("KB_RELAY_KEPT the filter's output does not add up to the file ("),
        "{said}"
    );
    let ak = home.path().join(".ssh/authorized_keys");
    assert_eq!(std::fs::read(&ak).unwrap(), text);
    assert_eq!(
        std::fs::read_dir(home.path().join(".ssh")).unwrap().count(),
        1
    );

    let elsewhere = home.path().join("elsewhere");
    std::fs::rename(&ak, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &ak).unwrap();
    let out = run(home.path(), &clear_script(Some(TAG)));
    assert_eq!(
        stdout(&out),
        "KB_RELAY_KEPT the login user's .ssh/authorized_keys is a symbolic link\n"
    );
    assert_eq!(std::fs::read(&elsewhere).unwrap(), text);
}

/// Runs `script` (a fetch) with `ssh` replaced by `fake_ssh` and `rm` by one that logs
/// the size of each file it removes; the run's key on stdin.
fn run_fetch(dir: &Path, script: &str, fake_ssh: &str) -> (Output, Vec<u64>) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exec = |name: &str, text: &str| {
        let path = bin.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    exec("ssh", fake_ssh);
    let log = dir.join("removed");
    exec(
        "rm",
        &format!(
            "#!/bin/sh\nfor f in \"$@\"; do [ -f \"$f\" ] && wc -c < \"$f\" >> '{}'; done\nexec /bin/rm \"$@\"\n",
            log.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "key line\n{KEY_END}").unwrap();
    let out = child.wait_with_output().unwrap();
    let removed = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    (out, removed)
}

/// What the fetch left in `dir` but its own helpers.
fn left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "bin" && n != "removed")
        .collect()
}

/// A source that trickles (here an `ssh` that never ends) is given up at the read's
/// limit: the script says so on its failure line, exits 1, and leaves neither the
/// partial copy nor the key files behind.
#[test]
fn a_read_that_does_not_end_in_time_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = source();
    let path = dir.path().display().to_string();
    let mut f = fetch(&path, &source, "00", 7);
    f.limit_secs = 1;
    let started = std::time::Instant::now();
    let (out, _) = run_fetch(
        dir.path(),
        &fetch_script(&f),
        "#!/bin/sh\nprintf partial\nexec sleep 30\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "{RELAY_FAILED_LINE} the read did not end within 1 s"
        )),
        "{text}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(left_in(dir.path()), Vec::<String>::new());
}

/// A source that sends endless bytes: the read stops at the payload's size plus one
/// byte, which is all the copy ever held, and the failure line says so.
///
/// Both ways the bound is kept: the kernel's file size limit through util-linux's
/// `prlimit` (here, Debian's), and `head -c` on a node without it (a `prlimit` that
/// fails stands for none).
#[test]
fn a_source_that_sends_endless_bytes_is_cut_at_one_byte_more() {
    for without_prlimit in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        if without_prlimit {
            let bin = dir.path().join("bin");
            std::fs::create_dir(&bin).unwrap();
            let stub = bin.join("prlimit");
            std::fs::write(&stub, "#!/bin/sh\nexit 127\n").unwrap();
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let source = source();
        let path = dir.path().display().to_string();
        let (out, removed) = run_fetch(
            dir.path(),
            &fetch_script(&fetch(&path, &source, "00", 1000)),
            "#!/bin/sh\nexec cat /dev/zero\n",
        );
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{without_prlimit}: {text}");
        assert_eq!(
            text,
            format!("{RELAY_FAILED_LINE} the source sent more than 1000 bytes\n"),
            "without prlimit: {without_prlimit}"
        );
        assert_eq!(
            removed.iter().max(),
            Some(&1001),
            "without prlimit: {without_prlimit}: {removed:?}"
        );
        assert_eq!(left_in(dir.path()), Vec::<String>::new());
    }
}

/// ssh's own exit status survives the pipe that bounds the read: a failed ssh whose
/// output happens to have the right size fails with what ssh said; a good one lands
/// with its mode.
#[test]
fn the_fetch_keeps_sshs_exit_status_and_its_words() {
    let sha = "239f59ed55e737c77147cf55ad0c1b030b6d7ee748a7426952f9b852d5a935e5"; // sha256("payload")
    let source = source();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let (out, _) = run_fetch(
        dir.path(),
        &fetch_script(&fetch(&path, &source, sha, 7)),
        "#!/bin/sh\nprintf payload\necho 'Permission denied (publickey).' >&2\nexit 255\n",
    );
    assert_eq!(
        stdout(&out),
        format!("{RELAY_FAILED_LINE} Permission denied (publickey). \n")
    );
    assert_eq!(left_in(dir.path()), Vec::<String>::new());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let (out, _) = run_fetch(
        dir.path(),
        &fetch_script(&fetch(&path, &source, sha, 7)),
        "#!/bin/sh\nprintf payload\n",
    );
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    let copy = dir.path().join(".keadm.t-1.tmp");
    assert_eq!(std::fs::read(&copy).unwrap(), b"payload");
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(left_in(dir.path()), vec![".keadm.t-1.tmp".to_string()]);
}
