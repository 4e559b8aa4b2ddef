//! The check after `keadm reset` exited with 0: that the node is clean, as keadm's reset
//! promises, in one round trip: no process named edgecore, no edgecore unit (the unit file
//! keadm writes, /etc/systemd/system/edgecore.service, nor one systemd still has loaded),
//! no /etc/kubeedge, or an empty one (keadm join's own rule: an empty directory is
//! often a mount point). It changes nothing; it prints a `KB_LEFT` line for each thing left
//! and [`CHECKED`] at its end, which [`parse_reset_check`] reads.

use std::sync::LazyLock;

use crate::node_text::one_line;

/// The line the check prints last: output without it is a check that did not finish.
const CHECKED: &str = "KB_RESET_CHECKED";

/// The check (scripts/reset_check.sh): POSIX sh, read-only. Run it with the privileges keadm had (inside
/// [`super::wrap`] under sudo), so it sees what keadm's reset should have removed.
pub static RESET_CHECK: LazyLock<String> =
    LazyLock::new(|| super::script::sendable(include_str!("scripts/reset_check.sh")));

/// The most of each kind of leftover kept: a node that reports thousands is not clean
/// either, and the message stays a line.
const MAX_ITEMS: usize = 16;

/// The longest leftover kept, in characters (a unit's line names its state).
const ITEM_CHARS: usize = 120;

/// What [`RESET_CHECK`] found left on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetCheck {
    /// Whether the check printed its last line: without it, what it found is not all.
    pub finished: bool,
    /// The pids of processes named edgecore.
    pub pids: Vec<String>,
    /// edgecore's unit file, or the unit as systemd has it loaded.
    pub units: Vec<String>,
    /// Paths keadm's reset removes that are still there (/etc/kubeedge).
    pub paths: Vec<String>,
}

impl ResetCheck {
    /// Whether nothing was left (and the check finished).
    pub fn clean(&self) -> bool {
        self.finished && self.pids.is_empty() && self.units.is_empty() && self.paths.is_empty()
    }

    /// What is left, as one clause per kind for a sentence: `edgecore still runs (pid 12
    /// 34); edgecore's unit is still there (/etc/systemd/system/edgecore.service); ...`.
    pub fn left(&self) -> String {
        let mut parts = Vec::new();
        if !self.pids.is_empty() {
            parts.push(format!("edgecore still runs (pid {})", self.pids.join(" ")));
        }
        if !self.units.is_empty() {
            parts.push(format!(
                "edgecore's unit is still there ({})",
                self.units.join("; ")
            ));
        }
        if !self.paths.is_empty() {
            parts.push(format!("{} still exists", self.paths.join(" and ")));
        }
        if !self.finished {
            parts.push("the check did not finish, so more may be left".to_string());
        }
        parts.join("; ")
    }
}

/// Reads [`RESET_CHECK`]'s output: only its own `KB_LEFT` lines count, each bounded and
/// escaped (the node's output is untrusted), at most [`MAX_ITEMS`] of a kind. A pid line
/// that is not a number is not taken as one.
pub fn parse_reset_check(output: &str) -> ResetCheck {
    let mut check = ResetCheck::default();
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        if line == CHECKED {
            check.finished = true;
            continue;
        }
        let Some(rest) = line.strip_prefix("KB_LEFT ") else {
            continue;
        };
        let (kind, what) = rest.split_once(' ').unwrap_or((rest, ""));
        let list = match kind {
            "pid" if !what.is_empty() && what.bytes().all(|b| b.is_ascii_digit()) => {
                &mut check.pids
            }
            "unit" => &mut check.units,
            "path" => &mut check.paths,
            _ => continue,
        };
        let what = one_line(what, ITEM_CHARS);
        if list.len() < MAX_ITEMS && !what.is_empty() && !list.contains(&what) {
            list.push(what);
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::sent_forms::{Forms, assert_forms_posix_sh};

    #[test]
    fn the_check_is_posix_sh() {
        // As the login user runs it, and as it goes to a sudo node.
        assert_forms_posix_sh("the reset check", &RESET_CHECK, Forms::Every, &[]);
    }

    /// [`RESET_CHECK`] with its places moved under `dir` (the machine's own /etc/kubeedge
    /// and systemd are other tests' and other runs'), run by `sh` with `path` first on
    /// PATH. Processes are not looked at here: this machine's pid namespace holds every
    /// test node's processes, fake edgecores among them.
    fn run_check(dir: &std::path::Path, path: &std::path::Path) -> ResetCheck {
        let quoted = |rel: &str| crate::shell::shell_quote(dir.join(rel).to_str().unwrap());
        let script = RESET_CHECK
            .replace(
                "KE=/etc/kubeedge",
                &format!("KE={}", quoted("etc-kubeedge")),
            )
            .replace(
                "SD=/run/systemd/system",
                &format!("SD={}", quoted("run-systemd-system")),
            );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("PATH", format!("{}:/usr/bin:/bin", path.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        parse_reset_check(&String::from_utf8_lossy(&out.stdout))
    }

    /// What the check prints is what the parser reads: the management dir when it is
    /// there, nothing when it is not.
    #[test]
    fn the_check_run_by_sh_finds_the_management_dir() {
        let dir = tempfile::tempdir().unwrap();
        let check = run_check(dir.path(), dir.path());
        assert!(
            check.finished && check.units.is_empty() && check.paths.is_empty(),
            "{check:?}"
        );
        // Empty, as keadm join accepts it (a mount point): clean.
        let ke = dir.path().join("etc-kubeedge");
        std::fs::create_dir(&ke).unwrap();
        let check = run_check(dir.path(), dir.path());
        assert!(check.clean(), "{check:?}");
        std::fs::create_dir(ke.join("ca")).unwrap();
        let check = run_check(dir.path(), dir.path());
        assert_eq!(
            check.paths,
            [format!("{} (1 entries: ca)", ke.to_str().unwrap())]
        );
    }

    /// Where systemd runs, its view counts: an active unit and a unit file systemd loaded
    /// from elsewhere are left; a stopped unit whose file is gone is not. A fake
    /// `systemctl` on PATH answers `show` as systemd does.
    #[test]
    fn systemds_view_of_the_unit_counts_where_systemd_runs() {
        let dir = tempfile::tempdir().unwrap();
        let sd = dir.path().join("run-systemd-system");
        std::fs::create_dir(&sd).unwrap();
        let unit = dir.path().join("edgecore.service");
        std::fs::write(&unit, "[Unit]\n").unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let check = |active: &str, fragment: &str| {
            let systemctl = bin.join("systemctl");
            std::fs::write(
                &systemctl,
                format!("#!/bin/sh\nprintf 'ActiveState={active}\\nFragmentPath={fragment}\\n'\n"),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
            run_check(dir.path(), &bin)
        };
        let unit = unit.to_str().unwrap();
        assert_eq!(
            check("active", unit).units,
            ["edgecore.service is active in systemd", unit]
        );
        assert_eq!(check("inactive", unit).units, [unit]);
        assert_eq!(
            check("inactive", "/nonexistent/edgecore.service").units,
            [""; 0]
        );
        assert_eq!(check("failed", "").units, [""; 0]);
    }

    #[test]
    fn leftovers_are_read_bounded_and_named() {
        let mut output =
            String::from("noise\nKB_LEFT pid 12\nKB_LEFT pid 34\nKB_LEFT pid 1; rm -rf /\n");
        output.push_str("KB_LEFT unit /etc/systemd/system/edgecore.service\n");
        output.push_str(&format!(
            "KB_LEFT path /etc/kubeedge\x1b[31m{}\n",
            "x".repeat(500)
        ));
        for i in 0..100 {
            output.push_str(&format!("KB_LEFT pid {}\n", 100 + i));
        }
        output.push_str("KB_RESET_CHECKED\n");
        let check = parse_reset_check(&output);
        assert!(check.finished && !check.clean());
        assert_eq!(check.pids.len(), MAX_ITEMS);
        assert_eq!(&check.pids[..3], ["12", "34", "100"]);
        assert_eq!(check.units, ["/etc/systemd/system/edgecore.service"]);
        let path = &check.paths[0];
        assert!(path.starts_with("/etc/kubeedge\\x1b[31m"), "{path}");
        assert!(path.ends_with("... (401 more characters)"), "{path}");
        let left = check.left();
        assert!(
            left.starts_with("edgecore still runs (pid 12 34 100 "),
            "{left}"
        );
        assert!(
            left.contains("; edgecore's unit is still there (/etc/systemd/system/edgecore.service); /etc/kubeedge"),
            "{left}"
        );
    }

    #[test]
    fn a_check_cut_short_is_not_clean() {
        let check = parse_reset_check("KB_LEFT path /etc/kubeedge\n");
        assert!(!check.clean());
        assert_eq!(
            check.left(),
            "/etc/kubeedge still exists; the check did not finish, so more may be left"
        );
        assert!(!parse_reset_check("").clean());
        assert!(parse_reset_check("KB_RESET_CHECKED\n").clean());
    }
}
