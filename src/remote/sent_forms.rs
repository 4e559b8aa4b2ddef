//! Test support: a script passes Debian's shellcheck for POSIX sh in every form the tool
//! sends it in. shellcheck reads a `sudo sh -c '...'` argument as an opaque string, so
//! the text that sudo's shell runs is checked on its own: the script itself, or, when
//! sudo reads the password first, the script after [`SKIP_TO_MARK`].

use super::{Privilege, SKIP_TO_MARK, with_sudo_probe, wrap};
use crate::shell::shellcheck::assert_posix_sh;

/// What shellcheck finds in the receiving scripts, and why it is right there: they chain
/// their steps with `&&` and end in `|| { clean up; exit 3; }`, meant for any failed step.
pub(crate) const CLEAN_UP_AFTER_ANY_STEP: (&str, &str) = (
    "SC2015",
    "the `|| { ...; exit 3; }` after the `&&` chain is the clean-up after any failed step",
);

/// What shellcheck finds in the runtime probe, and why it is right there: it reads
/// `ls -l` of `/proc/<pid>/fd` for the `socket:[inode]` targets.
pub(crate) const LS_OF_PROC_FDS: (&str, &str) = (
    "SC2012",
    "ls -l names each /proc/<pid>/fd entry's target, socket:[inode], which is what the awk after it reads; the names are digits",
);

/// The forms a script is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forms {
    /// Only as the login user (the SSH engine's own kill of a command's siblings).
    Login,
    /// With any privilege the run may have ([`wrap`]), and inside the sudo probe
    /// ([`with_sudo_probe`]): as the login user, under sudo without and with a password.
    Every,
}

/// Asserts that `script` passes shellcheck in each of its `forms`; `allowed` as for
/// [`assert_posix_sh`], for every form. Each distinct text is checked once: the script
/// as the login user runs it (and as sudo's `sh -c` runs it without a password), the
/// script after [`SKIP_TO_MARK`] (as sudo's shell runs it after reading the password),
/// and each command that wraps one of them.
pub(crate) fn assert_forms_posix_sh(
    what: &str,
    script: &str,
    forms: Forms,
    allowed: &[(&str, &str)],
) {
    assert_posix_sh(&format!("{what} (as the login user)"), script, allowed);
    if forms == Forms::Login {
        return;
    }
    assert_posix_sh(
        &format!("{what} (as sudo's shell runs it after the password)"),
        &format!("{}{script}", *SKIP_TO_MARK),
        allowed,
    );
    let outer = with_sh_c_quoting(allowed);
    for (form, command) in [
        (
            "under passwordless sudo",
            wrap(script, Privilege::SudoNoPassword),
        ),
        (
            "under sudo with a password",
            wrap(script, Privilege::SudoPassword),
        ),
        ("inside the sudo probe", with_sudo_probe(script)),
    ] {
        assert_posix_sh(&format!("{what} ({form})"), &command, &outer);
    }
}

/// Asserts that `command`, as sent, passes shellcheck, and so does every script it hands
/// to `sh -c '...'` (what sudo runs).
pub(crate) fn assert_sent_posix_sh(what: &str, command: &str, allowed: &[(&str, &str)]) {
    let inner = sh_c_arguments(command);
    if inner.is_empty() {
        return assert_posix_sh(what, command, allowed);
    }
    assert_posix_sh(what, command, &with_sh_c_quoting(allowed));
    for (n, inner) in inner.iter().enumerate() {
        assert_posix_sh(
            &format!("{what}, the script sudo's sh -c runs (#{})", n + 1),
            inner,
            allowed,
        );
    }
}

/// `allowed`, and what quoting a script for `sh -c '...'` trips: `shell_quote` spells a
/// quote inside the script as `'\''`, so quoting the script again leaves a
/// single-quoted backslash (`'\'`), which is meant literally; and the sudo probe's
/// `KB_SCRIPT='...'` is a script for its `sh -c "$KB_SCRIPT"`, whose `$` are that shell's
/// (shellcheck knows `sh -c '...'` as a script, not a variable that holds one).
fn with_sh_c_quoting<'a>(allowed: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut outer = allowed.to_vec();
    outer.push((
        "SC1003",
        "a backslash in single quotes is shell_quote's spelling of the script's own quotes",
    ));
    outer.push((
        "SC2016",
        "the sudo probe's KB_SCRIPT='...' is the script its sh -c runs: the $ are that shell's",
    ));
    outer
}

/// The single-quoted arguments of each `sh -c '...'` in `command`, and the script the
/// sudo probe hands to its `sh -c "$KB_SCRIPT"` (its `KB_SCRIPT='...'`), unquoted as the
/// shell unquotes `shell_quote`'s spelling (`'\''` for a quote inside).
fn sh_c_arguments(command: &str) -> Vec<String> {
    let mut found = Vec::new();
    for open in ["sh -c '", "KB_SCRIPT='"] {
        found.extend(single_quoted_after(command, open));
    }
    found
}

/// The single-quoted texts that follow each `open` (which ends with the opening quote) in
/// `command`, unquoted.
fn single_quoted_after(command: &str, open: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = command;
    while let Some(at) = rest.find(open) {
        rest = &rest[at + open.len()..];
        let mut text = String::new();
        loop {
            let end = rest
                .find('\'')
                .unwrap_or_else(|| panic!("an sh -c argument without its closing quote"));
            text.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            match rest.strip_prefix("\\''") {
                Some(after) => {
                    text.push('\'');
                    rest = after;
                }
                None => break,
            }
        }
        found.push(text);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_inside_sh_c_are_unquoted_as_the_shell_reads_them() {
        let script = "echo 'it'\\''s'\nx=$1";
        let wrapped = wrap(script, Privilege::SudoNoPassword);
        assert_eq!(sh_c_arguments(&wrapped), [script]);
        let probed = with_sudo_probe(script);
        assert_eq!(sh_c_arguments(&probed), [script]);
        // Cross-checked against the shell itself.
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("printf %s {}", &wrapped["sudo -n sh -c ".len()..]),
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), script);
    }

    #[test]
    #[should_panic(expected = "the script sudo's sh -c runs")]
    fn a_finding_inside_sudo_s_script_fails() {
        let wrapped = wrap("[[ -n $1 ]]\n", Privilege::SudoNoPassword);
        assert_sent_posix_sh("a bashism under sudo", &wrapped, &[]);
    }
}
