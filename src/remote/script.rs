//! The node scripts as files. Each script the tool sends is a POSIX sh file in
//! src/remote/scripts/, included at build time, whose header says what it does, its
//! parameters and its exit codes; `shellcheck -s sh src/remote/scripts/*.sh` reads them
//! as they are (.ci/run). A value reaches a script only as a parameter: a preamble of
//! assignments (`KB_DIR='/srv/edge nodes'`) and, for a list, `set --` with its words,
//! each quoted by [`shell_quote`], the one quoting function. No value is ever spliced
//! into a script's own text.
//!
//! What is sent is the file without its comment lines (a line whose first non-blank
//! character is `#`) and blank lines, so a file says as much as it needs to and a node
//! gets no more bytes for it; no script holds a quoted text or a here-document with such
//! a line. A file's `. ./lib.sh` line is replaced by the functions of
//! [scripts/lib.sh](scripts/lib.sh) the script calls (and the ones those call), never the
//! whole file: the functions several scripts share live there once, and a node gets only
//! the ones its script uses.

use crate::shell::shell_quote;

/// The shell functions the scripts share.
const LIB: &str = include_str!("scripts/lib.sh");

/// The line of a script that stands for the functions of [`LIB`] it calls; shellcheck
/// follows it to the file (with the `# shellcheck source=lib.sh` line before it).
const LIB_LINE: &str = ". ./lib.sh";

/// `file` (a script's text) as it is sent: without its comments and blank lines, its
/// `. ./lib.sh` line replaced by the functions of lib.sh it calls.
pub(crate) fn sendable(file: &str) -> String {
    let own: String = code_lines(file)
        .filter(|line| line.trim() != LIB_LINE)
        .flat_map(|line| [line, "\n"])
        .collect();
    let mut sent = String::with_capacity(file.len());
    for line in code_lines(file) {
        if line.trim() == LIB_LINE {
            sent.push_str(&functions_called_by(&own));
        } else {
            sent.push_str(line);
            sent.push('\n');
        }
    }
    sent
}

/// `file` as [`sendable`] sends it, after one assignment per value: `NAME=quoted`, each
/// on a line of its own. A name is a constant of the caller's, in capitals.
pub(crate) fn with_values(file: &str, values: &[(&str, &str)]) -> String {
    with_values_and_words(file, values, None)
}

/// As [`with_values`], with `words` as the script's positional parameters (`set --`
/// and each word quoted), for a list.
pub(crate) fn with_values_and_words(
    file: &str,
    values: &[(&str, &str)],
    words: Option<&[&str]>,
) -> String {
    let mut sent = assignments(values);
    if let Some(words) = words {
        sent.push_str("set --");
        for word in words {
            sent.push(' ');
            sent.push_str(&shell_quote(word));
        }
        sent.push('\n');
    }
    sent.push_str(&sendable(file));
    sent
}

/// One line `NAME=quoted` per value, the value quoted by [`shell_quote`].
pub(crate) fn assignments(values: &[(&str, &str)]) -> String {
    let mut text = String::new();
    for (name, value) in values {
        debug_assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{name} is not a parameter's name"
        );
        text.push_str(name);
        text.push('=');
        text.push_str(&shell_quote(value));
        text.push('\n');
    }
    text
}

/// The lines of `file` that are code: not a comment line, not blank.
fn code_lines(file: &str) -> impl Iterator<Item = &str> {
    file.lines().filter(|line| {
        let code = line.trim_start();
        !code.is_empty() && !code.starts_with('#')
    })
}

/// The functions of [`LIB`] that `script` calls, and those they call in turn, in
/// lib.sh's order, as sent.
fn functions_called_by(script: &str) -> String {
    let functions = lib_functions();
    let mut wanted = vec![false; functions.len()];
    // A function is wanted when the script or a wanted function calls it; each pass
    // adds at least one, or ends.
    loop {
        let mut added = false;
        for (i, (name, _)) in functions.iter().enumerate() {
            if wanted[i] {
                continue;
            }
            let named = calls(script, name)
                || functions
                    .iter()
                    .zip(&wanted)
                    .any(|((_, text), &w)| w && calls(text, name));
            if named {
                wanted[i] = true;
                added = true;
            }
        }
        if !added {
            break;
        }
    }
    functions
        .iter()
        .zip(&wanted)
        .filter(|(_, w)| **w)
        .map(|((_, text), _)| text.as_str())
        .collect()
}

/// lib.sh's functions, each its name and its text as sent: from its `name() {` line to
/// the first line `}` after it (or its one line).
fn lib_functions() -> Vec<(&'static str, String)> {
    let mut functions = Vec::new();
    let mut current: Option<(&'static str, String)> = None;
    for line in code_lines(LIB) {
        match current.as_mut() {
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
                if line == "}" {
                    functions.extend(current.take());
                }
            }
            None => {
                let name = line
                    .split_once("() {")
                    .map(|(name, _)| name)
                    .unwrap_or_else(|| panic!("lib.sh: a line outside a function: {line}"));
                let text = [line, "\n"].concat();
                if line.ends_with('}') {
                    functions.push((name, text));
                } else {
                    current = Some((name, text));
                }
            }
        }
    }
    assert!(current.is_none(), "lib.sh: a function without its end");
    functions
}

/// Whether `text` calls the function `name`: names it as a word (not as part of a longer
/// name) where a command starts, at the start of a line or after `;`, `&`, `|`, `(`,
/// `{`, `)`, a backquote, `!` or a keyword before a command (`if`, `then`, `else`,
/// `elif`, `while`, `until`, `do`). The same word in a message (`the login user has no
/// home`) is no call of lib.sh's `has`.
fn calls(text: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let command_starts = |before: &str| {
        let before = before.trim_end_matches([' ', '\t']);
        before.is_empty()
            || before.ends_with(['\n', ';', '&', '|', '(', '{', ')', '`', '!'])
            || ["if", "then", "else", "elif", "while", "until", "do"]
                .iter()
                .any(|keyword| {
                    before
                        .strip_suffix(keyword)
                        .is_some_and(|rest| !word(rest.chars().next_back()))
                })
    };
    text.match_indices(name).any(|(at, _)| {
        !word(text[..at].chars().next_back())
            && !word(text[at + name.len()..].chars().next())
            && command_starts(&text[..at])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_gets_the_functions_it_calls_and_theirs_and_no_comments() {
        let script = "# a comment\n\n# shellcheck source=lib.sh\n. ./lib.sh\n  # indented\nkb_edgecore_pids\necho \"$ec\"\n";
        let sent = sendable(script);
        // kb_edgecore_pids calls has; nothing calls the version functions.
        assert!(sent.starts_with("has() {"), "{sent}");
        assert!(sent.contains("kb_edgecore_pids() {\n"), "{sent}");
        assert!(!sent.contains("kb_logged_version"), "{sent}");
        assert!(
            !sent.contains("comment") && !sent.contains("indented"),
            "{sent}"
        );
        assert!(
            sent.ends_with("}\nkb_edgecore_pids\necho \"$ec\"\n"),
            "{sent}"
        );
        // A longer name that contains a function's is not a call of it, nor is the word
        // in a message.
        assert_eq!(functions_called_by("hash_it; kb_has"), "");
        assert_eq!(
            functions_called_by("echo the login user has no home\necho \"it has\"\n"),
            ""
        );
        for call in [
            "has x",
            "if has x",
            "a && has x",
            "x=$(has y)",
            "case $a in b) has x ;; esac",
            "! has x",
            "{ has x; }",
        ] {
            assert!(functions_called_by(call).starts_with("has() {"), "{call}");
        }
    }

    #[test]
    fn lib_sh_is_functions_only() {
        let names: Vec<&str> = lib_functions().iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"has") && names.contains(&"kb_recorded_group"));
    }

    /// Values with every character a config may hold reach the script as they are.
    #[test]
    fn values_and_words_arrive_as_they_are() {
        let odd = "/srv/edge nodes/it's \"kb\" $(touch x) `id` \\ \n*";
        let script = with_values_and_words(
            "printf '<%s>' \"$KB_A\" \"$@\"\n",
            &[("KB_A", odd)],
            Some(&[odd, "", "b"]),
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("<{odd}><{odd}><><b>")
        );
    }
}
