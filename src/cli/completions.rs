//! `keadm-batch completions SHELL`: the shell completion scripts, made from the clap
//! command.

use super::command;

/// A shell name clap_complete does not know. `Command::Completions` carries names clap
/// has already checked, so this only guards the conversion back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "There is no completion script for the shell `{0}`. Use bash, zsh, fish, elvish or powershell."
)]
pub struct UnknownShell(pub String);

/// Writes the completion script for `shell` (a name `Command::Completions` carries).
pub fn write_completions(shell: &str, out: &mut dyn std::io::Write) -> Result<(), UnknownShell> {
    let shell: clap_complete::Shell = shell
        .parse()
        .map_err(|_: String| UnknownShell(shell.to_string()))?;
    clap_complete::generate(shell, &mut command(), "keadm-batch", out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_for_an_unknown_shell_are_a_typed_error() {
        let mut out = Vec::new();
        assert_eq!(
            write_completions("tcsh", &mut out),
            Err(UnknownShell("tcsh".into()))
        );
        assert!(out.is_empty());
        write_completions("bash", &mut out).unwrap();
        assert!(!out.is_empty());
    }
}
