//! HTTP downloads: status checks, retries with backoff, streaming sha512, progress.
//!
//! keadm runs `curl -L -o` without `-f`, so a 404 page is saved as the tarball and only
//! `tar` complains. Here any non-2xx status is an error naming the URL and the status, and
//! transient failures (connect errors, 5xx, resets, truncated bodies) are retried.

use std::io::{self, Read, Seek, Write};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use sha2::{Digest, Sha512};
use tempfile::NamedTempFile;

use crate::backoff::backoff;
use crate::http_redirect;

use super::StageError;
use super::meter::{Meter, Meters};

/// How one attempt went wrong.
enum Failure {
    /// Worth another attempt: the network or the server had a bad moment.
    Transient(String),
    /// A 5xx (or 408/429) status: retried, and reported as a status when retries run out.
    Status(StatusCode),
    /// Retrying cannot help (a 4xx, a local write error).
    Fatal(StageError),
}

pub(crate) struct Http {
    /// For a request that must stay on https once there: it refuses a redirect to plain
    /// HTTP before following it.
    client: Client,
    /// For a request whose answer may come over plain HTTP (a pin vouches for it, or
    /// `--insecure-http`): it follows such a redirect.
    plain_http_client: Client,
    retries: u32,
    base_delay: Duration,
    /// Where downloads say how far they are.
    meters: Meters,
    /// The most bytes a download may have: a hostile mirror must not fill the disk.
    max_bytes: u64,
}

impl Http {
    pub(crate) fn new(
        retries: u32,
        base_delay: Duration,
        meters: Meters,
        max_bytes: u64,
    ) -> Result<Http, StageError> {
        // Proxy environment variables are honoured by reqwest's default builder.
        let client = |plain_http_ok| {
            Client::builder()
                .user_agent(concat!("keadm-batch/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(15))
                // In the blocking client this bounds the wait for headers and for each
                // read, not the whole transfer: a stalled mirror fails, a slow one does not.
                .timeout(Duration::from_secs(60))
                .redirect(http_redirect::policy(plain_http_ok))
                .build()
                .map_err(|e| StageError::HttpClient {
                    error: error_chain(&e),
                })
        };
        Ok(Http {
            client: client(false)?,
            plain_http_client: client(true)?,
            retries,
            base_delay,
            meters,
            max_bytes,
        })
    }

    /// Fetches a small text file. `Ok(None)` when the server answers 404. `plain_http_ok`:
    /// whether an answer over plain HTTP may be used (see [`Http::send`]).
    pub(crate) fn get_text(
        &self,
        url: &str,
        plain_http_ok: bool,
    ) -> Result<Option<String>, StageError> {
        self.with_retries(url, || {
            let response = match self.send(url, plain_http_ok)? {
                Some(response) => response,
                None => return Ok(None),
            };
            // Checksum files are 129 bytes; anything huge is not one. Bytes, not a String:
            // a non-UTF-8 answer is a bad checksum file, not a reason to retry.
            let mut body = Vec::new();
            response
                .take(64 * 1024)
                .read_to_end(&mut body)
                .map_err(|e| Failure::Transient(error_chain(&e)))?;
            Ok(Some(String::from_utf8_lossy(&body).into_owned()))
        })
    }

    /// Downloads `url` into `dest`, a temporary file this run created (each attempt starts
    /// it over), fsyncs it, and returns its sha512 in lowercase hex. A 404 is an error here,
    /// and so is a body of more than `max_bytes`, which is refused when announced and cut
    /// off when not.
    pub(crate) fn download(
        &self,
        url: &str,
        dest: &NamedTempFile,
        label: &str,
        plain_http_ok: bool,
    ) -> Result<String, StageError> {
        self.with_retries(url, || {
            let response = match self.send(url, plain_http_ok)? {
                Some(response) => response,
                None => {
                    return Err(Failure::Fatal(StageError::http_status(
                        url,
                        status_text(StatusCode::NOT_FOUND),
                        false,
                    )));
                }
            };
            self.save(response, dest, label)
        })
    }

    /// Sends a GET. `Ok(None)` for 404; other non-2xx statuses are failures. Unless
    /// `plain_http_ok`, a redirect from https to plain HTTP is refused before it is
    /// followed: an https mirror that redirects to http would otherwise get round the
    /// plain-HTTP rule (an `http://` URL without a pin or `--insecure-http` is refused
    /// before any request).
    fn send(&self, url: &str, plain_http_ok: bool) -> Result<Option<Response>, Failure> {
        let client = if plain_http_ok {
            &self.plain_http_client
        } else {
            &self.client
        };
        let response = client.get(url).send().map_err(|e| {
            // A refused downgrade, a malformed URL or a redirect loop fails the same way
            // every time.
            if let Some(to) = http_redirect::refused_downgrade(&e) {
                Failure::Fatal(StageError::RedirectedToPlainHttp {
                    url: url.to_string(),
                    to: to.to_string(),
                })
            } else if e.is_builder() || e.is_redirect() {
                Failure::Fatal(StageError::BadUrl {
                    url: url.to_string(),
                    error: error_chain(&e),
                })
            } else {
                Failure::Transient(error_chain(&e))
            }
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(Some(response))
        } else if status == StatusCode::NOT_FOUND {
            Ok(None)
        } else if status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            Err(Failure::Status(status))
        } else {
            Err(Failure::Fatal(StageError::http_status(
                url,
                status_text(status),
                status.is_server_error(),
            )))
        }
    }

    fn save(
        &self,
        mut response: Response,
        dest: &NamedTempFile,
        label: &str,
    ) -> Result<String, Failure> {
        let local = |action, e| Failure::Fatal(StageError::io(action, dest.path(), e));
        let mut file = dest.as_file();
        file.set_len(0)
            .and_then(|()| file.rewind())
            .map_err(|e| local("truncate", e))?;
        let total = response.content_length();
        // The URL that served the bytes, which a redirect may have changed.
        let url = response.url().to_string();
        let too_large = |reason: String| {
            Failure::Fatal(StageError::DownloadTooLarge {
                url: url.clone(),
                reason,
                limit: self.max_bytes,
            })
        };
        if let Some(total) = total
            && total > self.max_bytes
        {
            return Err(too_large(format!("the server announces {total} bytes")));
        }
        let mut progress = Meter::start(&self.meters, label, total);
        let mut hasher = Sha512::new();
        let mut received: u64 = 0;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            // One byte past the limit is enough to know the body is too large.
            let room = (self.max_bytes - received).saturating_add(1);
            let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            let n = match response.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    progress.finish(received);
                    return Err(Failure::Transient(format!(
                        "the transfer broke off after {received} bytes: {}",
                        error_chain(&e)
                    )));
                }
            };
            if received + n as u64 > self.max_bytes {
                progress.finish(received);
                return Err(too_large(format!(
                    "it sent more than {0} bytes, so the download was stopped at {0} bytes",
                    self.max_bytes
                )));
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n]).map_err(|e| local("write", e))?;
            received += n as u64;
            progress.advance(received);
        }
        progress.finish(received);
        if let Some(total) = total
            && received != total
        {
            return Err(Failure::Transient(format!(
                "the server closed the connection after {received} of {total} bytes"
            )));
        }
        file.sync_all().map_err(|e| local("flush", e))?;
        Ok(hex::encode(hasher.finalize()))
    }

    /// Runs `attempt` up to `1 + retries` times, sleeping `base, 2*base, 4*base...` (with
    /// jitter, see [`backoff`]) between attempts.
    fn with_retries<T>(
        &self,
        url: &str,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, StageError> {
        let attempts = self.retries.saturating_add(1);
        let mut number = 1;
        loop {
            let failure = match attempt() {
                Ok(value) => return Ok(value),
                Err(Failure::Fatal(error)) => return Err(error),
                Err(failure) => failure,
            };
            let reason = match &failure {
                Failure::Status(status) => format!("HTTP status {}", status_text(*status)),
                Failure::Transient(reason) => reason.clone(),
                Failure::Fatal(_) => unreachable!("returned above"),
            };
            if number >= attempts {
                return Err(match failure {
                    Failure::Status(status) => StageError::http_status(
                        url,
                        format!("{} (after {attempts} attempts)", status_text(status)),
                        true,
                    ),
                    _ => StageError::Transfer {
                        url: url.to_string(),
                        attempts,
                        error: reason,
                    },
                });
            }
            let delay = backoff(self.base_delay, number);
            log::warn!(
                "downloading {url} failed ({reason}); retrying in {:.1} s (attempt {} of {attempts})",
                delay.as_secs_f64(),
                number + 1
            );
            std::thread::sleep(delay);
            number += 1;
        }
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// An error and its causes on one line: reqwest's top-level message alone ("error sending
/// request") does not say what went wrong.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_has_code_and_reason() {
        assert_eq!(status_text(StatusCode::NOT_FOUND), "404 Not Found");
        assert_eq!(status_text(StatusCode::from_u16(599).unwrap()), "599");
    }
}
