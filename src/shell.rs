//! Quoting for the POSIX shell on the nodes. A leaf: it depends on nothing else in the
//! crate, so the plan, the remote scripts and the pre-flight probe share it without
//! depending on each other.

/// Quotes `s` for a POSIX shell, leaving plain paths as they are for readability.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@,".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
pub mod shellcheck;
