//! Reading a registry's answers into memory: manifests, indexes, configs, tokens and
//! error bodies, which are small. Each is bounded before it is buffered (one that
//! announces more than its limit is refused unread, one that sends more is cut off one
//! byte past it) and must arrive whole within the timeout, since the client's timeout
//! bounds each read, not the transfer: a registry that trickles bytes would otherwise
//! hold the bundle for as long as it likes. Blobs are streamed to disk instead (`blob`).

use std::io::{self, Read};
use std::time::{Duration, Instant};

use reqwest::blocking::Response;

use crate::stage::error_chain;

/// A manifest or index is a few KiB, an image config a few KiB to a few hundred; this
/// bounds what a hostile registry can make us hold (containerd's limit for manifests).
pub(crate) const MAX_DOCUMENT_BYTES: u64 = 4 << 20;
/// A token is a few KiB of JWT.
pub(super) const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// What is read of an error's body, for its code.
pub(super) const MAX_ERROR_BYTES: u64 = 64 << 10;

/// Why an answer could not be read whole.
#[derive(Debug)]
pub(super) enum BodyFailure {
    /// It announced or sent more than the limit.
    TooLarge,
    /// The transfer broke off or took longer than the timeout: worth another attempt.
    Broken(String),
}

/// The body of `response`, at most `limit` bytes, arrived whole within `within` of now.
pub(super) fn read_whole(
    response: Response,
    limit: u64,
    within: Duration,
) -> Result<Vec<u8>, BodyFailure> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(BodyFailure::TooLarge);
    }
    let deadline = Deadline::start(within);
    let mut body = Vec::new();
    let mut reader = response.take(limit + 1);
    let mut buf = [0u8; 16 * 1024];
    loop {
        deadline.check().map_err(BodyFailure::Broken)?;
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(BodyFailure::Broken(error_chain(&e))),
        }
    }
    if body.len() as u64 > limit {
        return Err(BodyFailure::TooLarge);
    }
    Ok(body)
}

/// When a transfer that must arrive whole has to end.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline {
    at: Instant,
    within: Duration,
}

impl Deadline {
    /// `within` from now.
    pub(super) fn start(within: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + within,
            within,
        }
    }

    /// Why the transfer must stop, once the deadline has passed.
    pub(super) fn check(&self) -> Result<(), String> {
        if Instant::now() > self.at {
            return Err(format!(
                "the answer did not arrive whole within {}",
                seconds(self.within)
            ));
        }
        Ok(())
    }
}

/// `1 MiB (1048576 bytes)`: a limit as messages give it.
pub(super) fn limit_text(bytes: u64) -> String {
    format!("{} MiB ({bytes} bytes)", bytes >> 20)
}

/// A registry's own words in a message (an error code, a platform, a media type): on one
/// line, control characters escaped, and short, so a registry cannot forge a line or
/// drive the terminal of the machine that bundles. Real ones are a word or two.
pub(super) fn registry_words(text: &str) -> String {
    crate::node_text::one_line(text, 80)
}

/// `0.3 s`, `60 s`.
fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_times_read_as_messages_give_them() {
        assert_eq!(limit_text(MAX_DOCUMENT_BYTES), "4 MiB (4194304 bytes)");
        assert_eq!(limit_text(MAX_TOKEN_BYTES), "1 MiB (1048576 bytes)");
        assert_eq!(seconds(Duration::from_millis(300)), "0.3 s");
        assert_eq!(seconds(Duration::from_secs(60)), "60 s");
    }
}
