//! The pre-flight probe for `keadm join`: one read-only round trip per node, before any
//! upload, that finds what would make the join fail (docs/kubeedge.md, "What makes a join fail early").
//!
//! The probe's shell text is `remote::preflight_probe_script`, beside every other script
//! sent to nodes; this module holds what it finds and reads its output. The probe is POSIX
//! sh that works under dash, bash and busybox, runs no tool beyond `ls`, `wc`, `head`,
//! `tr`, `awk`, `df` and `date` (and `pidof`, `systemctl`, `containerd`, `docker`,
//! `bash` with `timeout`, or `nc` when they exist), and writes nothing
//! anywhere: the noexec check reads `/proc/mounts` instead of trying to run a file in the
//! upload directory. It prints one `KB_PF <id> <detail>` line per finding and
//! `KB_PF_DONE` last, so a probe cut off midway is told apart from a clean node.

use crate::cloudcore;
use crate::keadm_cmd::{JoinFlag, KeadmCommand};
use crate::node_text::{MESSAGE_CHARS, one_line};
use crate::remote::{CloudcorePorts, JoinSide};

pub use crate::diagnosis::{Finding, FindingId};

/// The runtime endpoint keadm join uses without `--remote-runtime-endpoint`
/// (kubeedge `staging/.../constants/default_others.go`).
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// The last line of a probe that ran to its end.
const DONE: &str = "KB_PF_DONE";

/// The runtime socket keadm join will dial: `--remote-runtime-endpoint` (`=V` or ` V`)
/// from the command, else keadm's default, without the `unix://` scheme. A bare path is
/// returned as is (the CRI client takes it as unix); any other scheme is returned whole,
/// and the probe reports it, since keadm supports only unix sockets.
pub fn runtime_socket(command: &KeadmCommand) -> String {
    let endpoint = command
        .join_flag(JoinFlag::RemoteRuntimeEndpoint)
        .unwrap_or(DEFAULT_RUNTIME_ENDPOINT)
        .to_string();
    match endpoint.strip_prefix("unix://") {
        Some(path) => path.to_string(),
        None => endpoint,
    }
}

/// The cgroup driver keadm join writes for edgecore without `--cgroupdriver`
/// (keadm's `join` command's default).
pub const DEFAULT_CGROUP_DRIVER: &str = "cgroupfs";

/// What the probe checks of a join from the node's side, from keadmCmd: cloudcore's
/// host with the port of `--cloudcore-ipport` and `--certport` (default 10002), and the
/// cgroup driver keadm will write. Another command than a join checks neither.
pub fn join_side(command: &KeadmCommand) -> JoinSide {
    if !command.is_join() {
        return JoinSide::default();
    }
    let cloudcore = cloudcore::endpoint(command).map(|(host, cert_port)| {
        let port = command
            .join_flag(JoinFlag::CloudCoreIpPort)
            .and_then(|ipport| ipport.rsplit_once(':'))
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .filter(|port| *port != cert_port);
        CloudcorePorts {
            host,
            port,
            cert_port,
        }
    });
    let (cgroup_driver, cgroup_driver_from) = match command.join_flag(JoinFlag::CgroupDriver) {
        Some(driver) => (driver.to_string(), format!("--cgroupdriver={driver}")),
        None => (
            DEFAULT_CGROUP_DRIVER.to_string(),
            "keadm's default without --cgroupdriver".to_string(),
        ),
    };
    JoinSide {
        cloudcore,
        cgroup_driver,
        cgroup_driver_from,
    }
}

/// Reads the probe's output (other lines, such as a sudo probe's, are ignored). A probe
/// that did not print its last line yields a [`FindingId::ProbeIncomplete`] finding with
/// the output's last lines.
pub fn parse(output: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut done = false;
    for line in output.lines() {
        let line = line.trim_end();
        if line == DONE {
            done = true;
            continue;
        }
        let Some(rest) = line.strip_prefix("KB_PF ") else {
            continue;
        };
        let (id, detail) = rest.split_once(' ').unwrap_or((rest, ""));
        let Some(id) = FindingId::from_probe(id) else {
            continue;
        };
        let detail = match id {
            FindingId::LowDisk => disk_detail(detail),
            _ => one_line(detail, MESSAGE_CHARS),
        };
        findings.push(Finding { id, detail });
    }
    if !done {
        findings.push(Finding {
            id: FindingId::ProbeIncomplete,
            detail: how_it_ended(output),
        });
    }
    findings
}

/// How a probe that stopped short ended, from its `output`: its last three lines that
/// are not its own (`KB_` lines), which are the shell's or sudo's words.
pub fn how_it_ended(output: &str) -> String {
    let tail: Vec<&str> = output
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("KB_"))
        .collect();
    let tail = &tail[tail.len().saturating_sub(3)..];
    if tail.is_empty() {
        "it printed nothing more".to_string()
    } else {
        format!(
            "it ended with: {}",
            one_line(&tail.join("\n"), MESSAGE_CHARS)
        )
    }
}

/// `<free KiB> <needed KiB> <dir>` into words.
fn disk_detail(raw: &str) -> String {
    let mut parts = raw.splitn(3, ' ');
    match (
        parts.next().and_then(|v| v.parse::<u64>().ok()),
        parts.next().and_then(|v| v.parse::<u64>().ok()),
        parts.next(),
    ) {
        (Some(free), Some(need), Some(dir)) => format!(
            "{} free in {dir}, {} needed",
            human_kib(free),
            human_kib(need)
        ),
        _ => raw.trim().to_string(),
    }
}

fn human_kib(kib: u64) -> String {
    if kib < 10 * 1024 {
        format!("{kib} KiB")
    } else {
        format!("{} MiB", kib / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::preflight_probe_script;
    use crate::shell::shell_quote;
    use std::os::unix::net::UnixListener;
    use std::path::Path;
    use std::process::Command;

    /// The probe without the join-side checks that need keadmCmd.
    fn probe_script(upload_dir: &str, socket: &str, needed: u64) -> String {
        preflight_probe_script(upload_dir, socket, needed, &JoinSide::default())
    }

    fn run_sh(script: &str) -> String {
        let out = Command::new("sh").args(["-c", script]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn ids(findings: &[Finding]) -> Vec<FindingId> {
        findings.iter().map(|f| f.id).collect()
    }

    /// Only these findings: the host this runs on may have edgecore-named test processes
    /// or an /etc/kubeedge of its own, which the fleet tests rule out with namespaces.
    fn local_ids(findings: &[Finding]) -> Vec<FindingId> {
        ids(findings)
            .into_iter()
            .filter(|id| {
                !matches!(
                    id,
                    FindingId::EdgecoreRunning | FindingId::ManagementDirNotClean
                )
            })
            .collect()
    }

    #[test]
    fn runtime_socket_from_the_command_or_keadms_default() {
        assert_eq!(
            runtime_socket(&KeadmCommand::parse("join --x=1")),
            "/run/containerd/containerd.sock"
        );
        assert_eq!(
            runtime_socket(&KeadmCommand::parse(
                "join --remote-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock"
            )),
            "/run/k3s/containerd/containerd.sock"
        );
        assert_eq!(
            runtime_socket(&KeadmCommand::parse(
                "join -p '/var/run/crio/crio.sock' --y"
            )),
            "/var/run/crio/crio.sock"
        );
        assert_eq!(
            runtime_socket(&KeadmCommand::parse(
                "join --remote-runtime-endpoint=tcp://1.2.3.4:1"
            )),
            "tcp://1.2.3.4:1"
        );
        assert_eq!(
            runtime_socket(&KeadmCommand::parse("join --remote-runtime-endpoint=")),
            "/run/containerd/containerd.sock"
        );
    }

    #[test]
    fn the_script_is_valid_sh_and_quotes_its_arguments() {
        let script = probe_script("/tmp/it's here", "/run/a b.sock", 1);
        let status = Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(script.contains(r"UP='/tmp/it'\''s here'"), "{script}");
        assert!(script.contains("NEED_KIB=1\n"));
        assert!(probe_script("/x", "/s", 1025).contains("NEED_KIB=2\n"));
    }

    #[test]
    fn a_good_local_setup_has_no_findings() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("containerd.sock");
        let _listener = UnixListener::bind(&sock).unwrap();
        let up = dir.path().join("kubeedge/keadm");
        let out = run_sh(&probe_script(
            up.to_str().unwrap(),
            sock.to_str().unwrap(),
            4096,
        ));
        assert!(out.ends_with("KB_PF_DONE\n"), "{out}");
        assert_eq!(local_ids(&parse(&out)), [], "{out}");
        // The probe created nothing.
        assert!(!dir.path().join("kubeedge").exists());
    }

    #[test]
    fn a_missing_socket_names_the_sockets_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.sock");
        let out = run_sh(&probe_script("/tmp", missing.to_str().unwrap(), 0));
        let findings = parse(&out);
        let f = findings
            .iter()
            .find(|f| f.id == FindingId::RuntimeSocketMissing)
            .unwrap();
        assert_eq!(f.detail, format!("{} does not exist", missing.display()));

        let not_socket = dir.path().join("file.sock");
        std::fs::write(&not_socket, "").unwrap();
        let out = run_sh(&probe_script(
            "/tmp",
            &format!("unix://{}", not_socket.display()),
            0,
        ));
        let f = parse(&out)
            .into_iter()
            .find(|f| f.id == FindingId::RuntimeSocketMissing)
            .unwrap();
        assert_eq!(
            f.detail,
            format!("{} is not a socket", not_socket.display())
        );

        let out = run_sh(&probe_script("/tmp", "tcp://10.0.0.1:5000", 0));
        let f = parse(&out)
            .into_iter()
            .find(|f| f.id == FindingId::RuntimeSocketMissing)
            .unwrap();
        assert!(f.detail.contains("not a unix:// endpoint"), "{}", f.detail);
    }

    #[test]
    fn too_little_disk_is_reported_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let up = dir.path().join("a/b");
        // More than any disk this runs on.
        let out = run_sh(&probe_script(up.to_str().unwrap(), "/dev/null", 1 << 60));
        let f = parse(&out)
            .into_iter()
            .find(|f| f.id == FindingId::LowDisk)
            .unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert!(
            f.detail.contains(&format!("free in {}, ", real.display())),
            "{}",
            f.detail
        );
        assert!(f.detail.ends_with(" MiB needed"), "{}", f.detail);
    }

    #[test]
    fn noexec_is_read_from_the_mount_table_longest_prefix_last_wins() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let up = base.join("my dir/kubeedge");
        std::fs::create_dir_all(&up).unwrap();
        let escaped = base.display().to_string();
        let table = |lines: &[String]| {
            let path = base.join("mounts");
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            path
        };
        let probe = |mounts: &Path| {
            let script = probe_script(up.to_str().unwrap(), "/dev/null", 0).replace(
                "MOUNTS=/proc/mounts",
                &format!("MOUNTS={}", shell_quote(mounts.to_str().unwrap())),
            );
            parse(&run_sh(&script))
                .into_iter()
                .filter(|f| f.id == FindingId::UploadDirNoexec)
                .collect::<Vec<_>>()
        };
        let root = "/dev/vda / ext4 rw,relatime 0 0".to_string();
        // A noexec mount on a sibling with a shared prefix does not count.
        let sibling = format!("tmpfs {escaped}/my tmpfs rw,noexec 0 0");
        assert_eq!(probe(&table(&[root.clone(), sibling])), []);
        // The mount holding the dir, its name escaped as in /proc/mounts.
        let holder = format!("tmpfs {escaped}/my\\040dir tmpfs rw,nosuid,noexec 0 0");
        let found = probe(&table(&[root.clone(), holder.clone()]));
        assert_eq!(
            found[0].detail,
            format!(
                "{} is on {}, mounted noexec",
                up.display(),
                base.join("my dir").display()
            )
        );
        // Mounted over again without noexec: the later line is on top.
        let over = format!("tmpfs {escaped}/my\\040dir tmpfs rw,nosuid 0 0");
        assert_eq!(probe(&table(&[root.clone(), holder.clone(), over])), []);
        // A noexec root holds everything without a mount of its own.
        let noexec_root = "/dev/vda / ext4 ro,noexec 0 0".to_string();
        assert_eq!(probe(&table(&[noexec_root])).len(), 1);
    }

    #[test]
    fn edgecore_by_process_name() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("edgecore");
        std::fs::copy("/bin/sleep", &fake).unwrap();
        // Another test thread that forks while the copy is still open for writing holds
        // it open in its child until that child execs: exec fails with "text file busy"
        // for that moment, so try again briefly.
        let mut tries = 0;
        let mut child = loop {
            match Command::new(&fake).arg("30").spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        let out = run_sh(&probe_script("/tmp", "/dev/null", 0));
        let _ = child.kill();
        let _ = child.wait();
        let f = parse(&out)
            .into_iter()
            .find(|f| f.id == FindingId::EdgecoreRunning);
        let f = f.unwrap_or_else(|| panic!("{out}"));
        assert!(
            f.detail
                .split_whitespace()
                .any(|p| p == child.id().to_string()),
            "{}",
            f.detail
        );
    }

    /// A directory of links to the real `tools`, for a PATH that holds only them.
    fn bin_of(dir: &Path, tools: &[&str]) -> std::path::PathBuf {
        let bin = dir.join("bin");
        std::fs::create_dir(&bin).unwrap();
        for tool in tools {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("this machine has no {tool}"));
            std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
        }
        bin
    }

    /// The tools the probe needs, without `dirname`.
    const PROBE_TOOLS: [&str; 7] = ["ls", "wc", "head", "tr", "awk", "df", "date"];

    /// Runs `script` under `/bin/sh` (dash) with `PATH=bin` and nothing else in its
    /// environment, in `cwd`; its stdout and stderr. A probe still running after 20 s
    /// fails the test (it would have run on to the step's deadline on a node).
    fn run_with_path(bin: &Path, cwd: &Path, script: &str) -> (String, String) {
        let out = tempfile::tempdir().unwrap();
        let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
        let mut child = Command::new("/bin/sh")
            .args(["-c", script])
            .env_clear()
            .env("PATH", bin)
            .current_dir(cwd)
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                let said = std::fs::read(&stderr).unwrap();
                panic!(
                    "the probe did not end within 20 s; its stderr began: {}",
                    String::from_utf8_lossy(&said[..said.len().min(200)])
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let read = |path: &Path| String::from_utf8(std::fs::read(path).unwrap()).unwrap();
        (read(&stdout), read(&stderr))
    }

    #[test]
    fn no_bash_on_path_is_found_and_the_probe_needs_only_a_few_tools() {
        let dir = tempfile::tempdir().unwrap();
        let bin = bin_of(dir.path(), &PROBE_TOOLS);
        let script = probe_script(dir.path().join("up").to_str().unwrap(), "/dev/null", 1);
        let (out, err) = run_with_path(&bin, dir.path(), &script);
        assert!(err.is_empty(), "{err}");
        let findings = parse(&out);
        assert_eq!(
            local_ids(&findings),
            [FindingId::RuntimeSocketMissing, FindingId::BashMissing],
            "{out}"
        );
        assert_eq!(
            findings.last().unwrap().detail,
            format!("no bash on PATH ({})", bin.display())
        );
    }

    /// On a node without `dirname` the walk up from an upload dir that does not exist yet
    /// to the directory holding it ends (it looped until the step's deadline), and finds
    /// the same directory; a walk that reaches no directory (a relative path, which only
    /// the script's callers could give) leaves the two checks it serves undone and says so.
    #[test]
    fn the_walk_to_the_upload_dirs_parent_needs_no_dirname_and_ends() {
        let dir = tempfile::tempdir().unwrap();
        let bin = bin_of(dir.path(), &PROBE_TOOLS);
        let up = dir.path().join("not/there/yet");
        let (out, err) = run_with_path(
            &bin,
            dir.path(),
            &probe_script(up.to_str().unwrap(), "/dev/null", 1 << 60),
        );
        assert!(err.is_empty(), "{err}");
        assert!(out.ends_with("KB_PF_DONE\n"), "{out}");
        let findings = parse(&out);
        let real = dir.path().canonicalize().unwrap();
        assert!(
            findings.iter().any(|f| f.id == FindingId::LowDisk
                && f.detail.contains(&format!("free in {}, ", real.display()))),
            "{out}"
        );
        assert!(
            !ids(&findings).contains(&FindingId::ProbeIncomplete),
            "{out}"
        );

        let (out, err) = run_with_path(
            &bin,
            dir.path(),
            &probe_script("nowhere/up", "/dev/null", 1 << 60),
        );
        assert!(err.is_empty(), "{err}");
        let findings = parse(&out);
        assert!(out.ends_with("KB_PF_DONE\n"), "{out}");
        assert!(!ids(&findings).contains(&FindingId::LowDisk), "{out}");
        let incomplete: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.id == FindingId::ProbeIncomplete)
            .collect();
        assert_eq!(incomplete.len(), 1, "{out}");
        assert_eq!(
            incomplete[0].detail,
            "the noexec and free disk checks did not run: no directory holds nowhere/up"
        );
    }

    /// A `df` that fails (or is missing) is a `probe_incomplete` finding with its words,
    /// never a disk that passed: it was skipped without a word.
    #[test]
    fn a_disk_check_that_cannot_run_is_reported_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let tools: Vec<&str> = PROBE_TOOLS.iter().copied().filter(|t| *t != "df").collect();
        let bin = bin_of(dir.path(), &tools);
        let up = dir.path().join("up");
        let script = probe_script(up.to_str().unwrap(), "/dev/null", 1);
        let real = dir.path().canonicalize().unwrap();
        let incomplete = |out: &str| -> Vec<String> {
            assert!(out.ends_with("KB_PF_DONE\n"), "{out}");
            parse(out)
                .into_iter()
                .filter(|f| f.id == FindingId::ProbeIncomplete)
                .map(|f| f.detail)
                .collect()
        };
        // No df at all: the shell's words.
        let (out, err) = run_with_path(&bin, dir.path(), &script);
        assert!(err.is_empty(), "{err}");
        let found = incomplete(&out);
        assert_eq!(found.len(), 1, "{out}");
        assert!(
            found[0].starts_with(&format!(
                "the free disk check did not run: df -Pk {} failed: ",
                real.display()
            )) && found[0].contains("df: not found"),
            "{}",
            found[0]
        );
        // A df that fails: its words.
        let df = bin.join("df");
        std::fs::write(
            &df,
            "#!/bin/sh\necho \"df: $2: Input/output error\" >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&df, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let (out, err) = run_with_path(&bin, dir.path(), &script);
        assert!(err.is_empty(), "{err}");
        assert_eq!(
            incomplete(&out),
            [format!(
                "the free disk check did not run: df -Pk {0} failed: df: {0}: Input/output error",
                real.display()
            )],
            "{out}"
        );
        // A df that succeeds with no free size in its answer.
        std::fs::write(&df, "#!/bin/sh\necho 'Filesystem 1024-blocks Used'\n").unwrap();
        let (out, err) = run_with_path(&bin, dir.path(), &script);
        assert!(err.is_empty(), "{err}");
        assert_eq!(
            incomplete(&out),
            [format!(
                "the free disk check did not run: df -Pk {} told no free size: Filesystem 1024-blocks Used",
                real.display()
            )],
            "{out}"
        );
        // No upload to make: no disk check, so nothing to report.
        let none = probe_script(up.to_str().unwrap(), "/dev/null", 0);
        let (out, _) = run_with_path(&bin, dir.path(), &none);
        assert_eq!(incomplete(&out), Vec::<String>::new());
    }

    #[test]
    fn parse_reads_findings_and_notices_a_cut_off_probe() {
        let out = "KB_SUDO nopasswd\nKB_PF edgecore_running pid 12 40\nKB_PF low_disk 900 51200 /tmp\nKB_PF future_check x\nKB_PF_DONE\n";
        assert_eq!(
            parse(out),
            [
                Finding {
                    id: FindingId::EdgecoreRunning,
                    detail: "pid 12 40".into()
                },
                Finding {
                    id: FindingId::LowDisk,
                    detail: "900 KiB free in /tmp, 50 MiB needed".into()
                }
            ]
        );
        let cut = parse("KB_PF bash_missing no bash\nsudo: a password is required\n");
        assert_eq!(
            ids(&cut),
            [FindingId::BashMissing, FindingId::ProbeIncomplete]
        );
        assert_eq!(cut[1].detail, "it ended with: sudo: a password is required");
        assert_eq!(parse("")[0].detail, "it printed nothing more");
    }

    #[test]
    fn every_finding_has_fixed_sentences() {
        for id in FindingId::ALL {
            let f = Finding {
                id,
                detail: String::new(),
            };
            assert!(
                f.message().ends_with('.') && f.suggested_action().ends_with('.'),
                "{id}"
            );
            assert_eq!(FindingId::from_probe(id.as_str()), Some(id));
            // Two are found on the control host only: an image neither the runtime lists
            // nor an archive provides (`kubeedge::images`), and a node clock off the
            // control host's (`clock_skew`). A probe that stopped short is found there
            // too, and a check the probe could not run on the node.
            assert!(
                probe_script("/x", "/s", 1).contains(id.as_str())
                    || matches!(id, FindingId::ImageMissing | FindingId::ClockSkew),
                "{id}"
            );
        }
        let f = Finding {
            id: FindingId::UploadDirNoexec,
            detail: "/tmp is on /tmp, mounted noexec".into(),
        };
        assert_eq!(
            f.to_string(),
            "The upload directory is on a noexec mount, so the uploaded keadm could not run there (/tmp is on /tmp, mounted noexec)"
        );
    }
}
