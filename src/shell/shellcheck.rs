//! Test support: every script the tool sends to a node is POSIX sh that Debian's
//! `shellcheck` finds nothing in. The nodes run whatever `/bin/sh` they have (dash,
//! busybox ash), so a bashism or a swallowed exit status is a bug on some of them;
//! the exchange's and the relay's worst bugs were of that kind.

use std::io::Write;
use std::process::{Command, Stdio};

/// Asserts that `script` passes `shellcheck -s sh` at every severity. `allowed` lists
/// the checks this script may trip, each with the reason it is right to (for example
/// SC2016 where a `$` in single quotes is meant for the node's later shell); any other
/// finding fails the test with the script's numbered lines. `what` names the script in
/// the message. A machine without shellcheck fails: `scripts/setup.sh` installs it.
pub fn assert_posix_sh(what: &str, script: &str, allowed: &[(&str, &str)]) {
    let mut args = vec![
        "--shell=sh".to_string(),
        "--severity=style".to_string(),
        "--format=gcc".to_string(),
        "--norc".to_string(),
    ];
    if !allowed.is_empty() {
        let codes: Vec<&str> = allowed
            .iter()
            .map(|(code, why)| {
                assert!(!why.is_empty(), "{what}: say why {code} is allowed");
                code.trim_start_matches("SC")
            })
            .collect();
        args.push(format!("--exclude={}", codes.join(",")));
    }
    args.push("-".to_string());
    let mut child = Command::new("shellcheck")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{what}: cannot run shellcheck ({e}); scripts/setup.sh installs it")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let findings = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && findings.trim().is_empty() {
        return;
    }
    let numbered: String = script
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{:4} {line}\n", i + 1))
        .collect();
    panic!(
        "{what} does not pass shellcheck for POSIX sh:\n{findings}{}\nthe script:\n{numbered}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_script_passes() {
        assert_posix_sh("a clean script", "set -e\nprintf '%s\\n' \"$1\"\n", &[]);
    }

    #[test]
    #[should_panic(expected = "SC3043")]
    fn a_bashism_fails() {
        assert_posix_sh("a bashism", "f() { local x=1; echo \"$x\"; }\nf\n", &[]);
    }

    #[test]
    fn an_allowed_check_passes_only_with_its_reason() {
        assert_posix_sh(
            "a deferred expansion",
            "echo '$HOME'\n",
            &[("SC2016", "the $ is for a later shell")],
        );
    }
}
