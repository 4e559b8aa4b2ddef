//! Waiting on sockets with poll(2), for the exec loop and the jump-host bridge: both run
//! libssh2 non-blocking and sleep until the socket is ready in the direction libssh2 is
//! blocked on.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use ssh2::{BlockDirections, Session};

/// The readiness `session` waits for. Blocked on a channel (its window) rather than the
/// socket, it waits for input, which is what will unblock it.
pub(super) fn wanted(session: &Session) -> PollFlags {
    match session.block_directions() {
        BlockDirections::Outbound => PollFlags::OUT,
        BlockDirections::Both => PollFlags::IN | PollFlags::OUT,
        BlockDirections::Inbound | BlockDirections::None => PollFlags::IN,
    }
}

/// Waits until one of `fds` is ready or `limit` passes (at least 1 ms, so a wait never
/// turns into a busy loop). A signal that interrupts the wait counts as a wake-up.
pub(super) fn wait(fds: &mut [PollFd<'_>], limit: Duration) -> io::Result<()> {
    let limit = limit.max(Duration::from_millis(1));
    let timeout = Timespec {
        tv_sec: limit.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: limit.subsec_nanos() as _,
    };
    match rustix::event::poll(fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Puts a TCP socket into quick-ack mode: what arrives is acknowledged at once instead of
/// after the delayed-ACK timer (40 ms on Linux). Linux leaves the mode again once the
/// traffic looks interactive, so it is set before every wait. A socket that is not TCP
/// (a socket pair under a jump chain) is left as it is.
pub(super) fn ack_at_once(fd: BorrowedFd<'_>) {
    let _ = rustix::net::sockopt::set_tcp_quickack(fd, true);
}
