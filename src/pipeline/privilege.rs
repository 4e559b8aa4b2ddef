//! Running scripts with the node's privileges: the one place that wraps a script for sudo
//! and feeds sudo the login password, so the password never lands in a file, on a
//! command line or on keadm's stdin.

use std::io::{Cursor, Read, Write};
use std::time::Instant;

use crate::config::AuthSpec;
use crate::plan::NodePlan;
use crate::remote::{self, Privilege};
use crate::transport::{Connection, RemoteExit, TransportError};

/// The login password, which sudo may need on stdin.
pub(super) fn password_of(node: &NodePlan) -> Option<&str> {
    match &node.ssh.auth {
        AuthSpec::Password(p) => Some(p.expose()),
        _ => None,
    }
}

/// Runs `script` with `privilege` (one `sudo sh -c` around it for non-root logins). When
/// sudo needs the password it goes first on stdin, then `body`.
pub(super) fn exec_as(
    conn: &mut dyn Connection,
    script: &str,
    privilege: Privilege,
    password: Option<&str>,
    body: Option<&mut dyn Read>,
    deadline: Instant,
    output: &mut dyn Write,
) -> Result<RemoteExit, TransportError> {
    let preamble = password
        .filter(|_| privilege.needs_password_line())
        .map(remote::password_preamble);
    exec_with_preamble(
        conn,
        &remote::wrap(script, privilege),
        preamble,
        body,
        deadline,
        output,
    )
}

/// Runs `script` under sudo before the node's privilege is known: the script itself
/// finds out whether sudo needs a password (see [`remote::with_sudo_probe`]), so the
/// password, when the login has one, goes on stdin in case it does. `as_login` runs
/// first, in the same exec, as the login user (the pre-flight probe's own checks, which
/// read no stdin, before its image check); it may be empty.
pub(super) fn exec_probing_sudo(
    conn: &mut dyn Connection,
    as_login: &str,
    script: &str,
    password: Option<&str>,
    deadline: Instant,
    output: &mut dyn Write,
) -> Result<RemoteExit, TransportError> {
    exec_with_preamble(
        conn,
        &format!("{as_login}{}", remote::with_sudo_probe(script)),
        password.map(remote::password_preamble),
        None,
        deadline,
        output,
    )
}

/// Runs `command` with `preamble` (the sudo password lines), then `body`, on its stdin.
/// Without either, the command gets no stdin at all.
fn exec_with_preamble(
    conn: &mut dyn Connection,
    command: &str,
    preamble: Option<String>,
    body: Option<&mut dyn Read>,
    deadline: Instant,
    output: &mut dyn Write,
) -> Result<RemoteExit, TransportError> {
    let prefix = Cursor::new(preamble.unwrap_or_default().into_bytes());
    match body {
        Some(body) => {
            let mut stdin = prefix.chain(body);
            conn.exec(command, Some(&mut stdin), deadline, output)
        }
        None if !prefix.get_ref().is_empty() => {
            let mut stdin = prefix;
            conn.exec(command, Some(&mut stdin), deadline, output)
        }
        None => conn.exec(command, None, deadline, output),
    }
}
