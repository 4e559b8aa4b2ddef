//! The file names keadm-batch accepts from whoever fills `keadm.offlineImages`, puts
//! archives in an offline directory or writes a kit, and how any such name is shown.
//!
//! Accepted: ASCII letters, digits and `.`, `_`, `+`, `-`, not starting with `-` or `.`.
//! That is every name `batch bundle` writes (`pause_3.9.tar`, `registry.k8s.io_pause_3.9.tar`,
//! `keadm-v1.23.0-beta.0.150+16cd8548eedb81-linux-amd64.tar.gz`: image tags and keadm's
//! development versions need `_`, `.`, `-` and `+`), and no character that means something
//! to a shell, to an `authorized_keys` line (`"`, `,`, blanks, a newline) or to the
//! commands that take such a file: a leading `-` reads as an option (`ctr images import
//! -x.tar`), a leading `.` hides the file or names `.`/`..`, and `:` separates the file
//! from the image in skopeo's `docker-archive:FILE:NAME`. Nodes never see these names
//! (each archive goes to a node under a name made from its sha256), so the rule keeps
//! them out of messages, transcripts and kits in a form every tool reads alike.
//!
//! A leaf: it depends on nothing else in the crate.

use std::path::Path;

/// The rule in words, for messages: what an accepted name may hold.
pub const RULE: &str =
    "ASCII letters, digits, `.`, `_`, `+` and `-` only, and does not start with `-` or `.`";

/// Why the file name of `path` is refused, for an error message to say after naming the
/// file; `None` when it is accepted (the directories above it are not looked at).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `its file name `a\nb.tar` holds `\n`, and an accepted name has ...`.
    pub why: String,
    /// The name with every character outside the set made `_`, for the fix.
    pub instead: String,
}

/// The [`Refusal`] of `path`'s file name, if it is refused.
pub fn refusal(path: &Path) -> Option<Refusal> {
    let name = path.file_name().unwrap_or(path.as_os_str());
    refused("file name", name)
}

/// The [`Refusal`] of the first part of the relative path `rel` (a kit's) that is refused:
/// every directory's name and the file's are held to the rule.
pub fn refusal_in(rel: &Path) -> Option<Refusal> {
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        let what = if parts.peek().is_some() {
            "directory name"
        } else {
            "file name"
        };
        if let Some(refused) = refused(what, part.as_os_str()) {
            return Some(refused);
        }
    }
    None
}

/// The [`Refusal`] of `name`, the `what` (`file name`) of a path, if it is refused.
fn refused(what: &str, name: &std::ffi::OsStr) -> Option<Refusal> {
    let problem = problem(name)?;
    Some(Refusal {
        why: format!(
            "its {what} `{}` {problem}, and an accepted name has {RULE}",
            shown_path(Path::new(name))
        ),
        instead: instead(&name.to_string_lossy()),
    })
}

/// `name` made acceptable: each character outside the set becomes `_`, and a leading `-`
/// or `.` goes.
fn instead(name: &str) -> String {
    let made: String = name
        .chars()
        .map(|c| if accepted(c) { c } else { '_' })
        .collect();
    let made = made.trim_start_matches(['-', '.']);
    if made.is_empty() {
        "image.tar".to_string()
    } else {
        made.to_string()
    }
}

/// Why `name` is not an accepted file name, in words that follow "it"; `None` when it is
/// accepted. A name that is not UTF-8 is refused too.
pub fn problem(name: &std::ffi::OsStr) -> Option<String> {
    let Some(name) = name.to_str() else {
        return Some("is not valid UTF-8".to_string());
    };
    if name.is_empty() {
        return Some("is empty".to_string());
    }
    if let Some(first) = name.chars().next().filter(|c| matches!(c, '-' | '.')) {
        return Some(format!("starts with `{first}`"));
    }
    let mut outside: Vec<char> = Vec::new();
    for c in name.chars().filter(|c| !accepted(*c)) {
        if !outside.contains(&c) {
            outside.push(c);
        }
    }
    if outside.is_empty() {
        return None;
    }
    let listed: Vec<String> = outside
        .iter()
        .map(|c| format!("`{}`", shown(&c.to_string())))
        .collect();
    Some(format!("holds {}", listed.join(", ")))
}

/// Whether `c` may appear in an accepted name.
fn accepted(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')
}

/// `text` with every character that is not plainly printable written as Rust writes it
/// in a string (`\n`, `\t`, `\u{1b}`, `\u{202e}`) and `\` doubled, so a name shows on one
/// line, cannot move the cursor or reorder the text around it, and reads back
/// unambiguously. Quotes stay as they are: a shown name sits in backquotes.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' | '\'' => out.push(c),
            c => out.extend(c.escape_debug()),
        }
    }
    out
}

/// A path, shown as [`shown`] shows text; bytes that are not UTF-8 as `\xNN`.
pub fn shown_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(&shown(chunk.valid()));
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// The file name of `path`, shown (the whole path when it has none).
pub fn shown_file_name(path: &Path) -> String {
    match path.file_name() {
        Some(name) => shown_path(Path::new(name)),
        None => shown_path(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    fn problem_of(name: &str) -> Option<String> {
        problem(OsStr::new(name))
    }

    #[test]
    fn the_names_bundle_writes_are_accepted() {
        for name in [
            "pause_3.9.tar",
            "installation-package_v1.23.1.tar",
            "registry.k8s.io_pause_3.9.tar",
            "127.0.0.1_5000_pause_3.9.tar",
            "keadm-v1.23.0-beta.0.150+16cd8548eedb81-linux-amd64.tar.gz",
            "checksum_keadm-v1.23.1-linux-amd64.tar.gz.txt",
            "a+b-1.2_x.tar",
            "A",
            "amd64",
        ] {
            assert_eq!(problem_of(name), None, "{name}");
        }
    }

    #[test]
    fn a_name_outside_the_set_is_refused_with_what_is_wrong_shown_escaped() {
        let cases = [
            ("a\nb.tar", "holds `\\n`"),
            ("a\"b.tar", "holds `\"`"),
            ("a b,c.tar", "holds ` `, `,`"),
            ("x\\y.tar", "holds `\\\\`"),
            ("x:y.tar", "holds `:`"),
            ("x\u{1b}[2Jy\u{1b}.tar", "holds `\\u{1b}`, `[`"),
            ("caf\u{e9}.tar", "holds `\u{e9}`"),
            ("-x.tar", "starts with `-`"),
            (".x.tar", "starts with `.`"),
            ("..", "starts with `.`"),
            ("", "is empty"),
        ];
        for (name, problem) in cases {
            assert_eq!(problem_of(name).as_deref(), Some(problem), "{name:?}");
        }
        assert_eq!(
            problem(OsStr::from_bytes(b"a\xffb.tar")).as_deref(),
            Some("is not valid UTF-8")
        );
    }

    #[test]
    fn a_refusal_names_the_file_and_a_name_that_would_do() {
        let refused = refusal(Path::new("/we\nird/a\nb\".tar")).unwrap();
        assert_eq!(
            refused.why,
            "its file name `a\\nb\".tar` holds `\\n`, `\"`, and an accepted name has ASCII letters, digits, `.`, `_`, `+` and `-` only, and does not start with `-` or `.`"
        );
        assert_eq!(refused.instead, "a_b_.tar");
        assert_eq!(refusal(Path::new("/k/-.x.tar")).unwrap().instead, "x.tar");
        assert_eq!(refusal(Path::new("/we\nird/a+b-1.2_x.tar")), None);
        // In a kit every part counts.
        assert_eq!(refusal_in(Path::new("amd64/images/a+b-1.2_x.tar")), None);
        let refused = refusal_in(Path::new("amd64/-images/a\nb.tar")).unwrap();
        assert!(
            refused
                .why
                .starts_with("its directory name `-images` starts with `-`, "),
            "{}",
            refused.why
        );
        assert!(
            refusal_in(Path::new("amd64/images/a\nb.tar"))
                .unwrap()
                .why
                .starts_with("its file name `a\\nb.tar` holds `\\n`, ")
        );
    }

    #[test]
    fn shown_names_are_one_line_and_unambiguous() {
        assert_eq!(shown("a\nb\r\t\"c'.tar"), "a\\nb\\r\\t\"c'.tar");
        assert_eq!(shown("\u{1b}]0;x\u{7}"), "\\u{1b}]0;x\\u{7}");
        assert_eq!(shown("a\\nb"), "a\\\\nb", "a backslash is not a newline");
        assert_eq!(shown("x\u{202e}rat.exe"), "x\\u{202e}rat.exe");
        assert_eq!(shown("pause_3.9.tar"), "pause_3.9.tar");
        assert_eq!(
            shown_path(Path::new(OsStr::from_bytes(b"/kit/a\n\xffb.tar"))),
            "/kit/a\\n\\xffb.tar"
        );
        assert_eq!(shown_file_name(Path::new("/we\nird/a\nb.tar")), "a\\nb.tar");
    }
}
