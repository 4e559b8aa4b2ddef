//! Requests to a registry: a GET of `/v2/<repository>/...` that answers one
//! authentication challenge (a bearer token from the challenge's realm, or basic auth,
//! with the docker client's login for the host), what a status means, and retries with
//! backoff.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use reqwest::StatusCode;
use reqwest::blocking::{RequestBuilder, Response};
use reqwest::header::{ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};

use super::body::{
    BodyFailure, MAX_ERROR_BYTES, MAX_TOKEN_BYTES, limit_text, read_whole, registry_words,
};
use super::{Failure, Place, Registry, bad_manifest};
use crate::backoff::backoff;
use crate::bundle::error::BundleError;
use crate::image_ref::ImageRef;
use crate::stage::error_chain;

impl Registry {
    /// A GET of `/v2/<repository>/<path>`, answering one authentication challenge.
    pub(super) fn get(
        &mut self,
        place: &Place,
        image: &ImageRef,
        path: &str,
        accept: Option<&str>,
    ) -> Result<Response, Failure> {
        let url = format!("{}/v2/{}/{path}", place.base, image.repository());
        let key = (place.base.clone(), image.repository().to_string());
        let mut challenged = false;
        loop {
            let mut request = self.client.get(&url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(auth) = self.auth.get(&key) {
                request = request.header(AUTHORIZATION, auth);
            }
            let response = send(request, image, place)?;
            if response.status() == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let auth = self.authenticate(place, image, &challenge)?;
                self.auth.insert(key.clone(), auth);
                continue;
            }
            return Ok(response);
        }
    }

    /// The `Authorization` value that answers `challenge`: a bearer token from the
    /// challenge's realm (with the login, when there is one), or the login itself.
    fn authenticate(
        &self,
        place: &Place,
        image: &ImageRef,
        challenge: &str,
    ) -> Result<String, Failure> {
        let login = self.credentials.for_host(&place.host).cloned();
        let source_name = self.credentials_source();
        let (scheme, params) = parse_challenge(challenge);
        if scheme.eq_ignore_ascii_case("basic") || scheme.is_empty() {
            let Some(login) = login else {
                return Err(Failure::from(BundleError::NeedsLogin {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    source_name,
                }));
            };
            let pair = format!("{}:{}", login.user, login.password);
            return Ok(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ));
        }
        let realm = params.get("realm").cloned().unwrap_or_default();
        let token_error = |error: String| {
            Failure::from(BundleError::Token {
                image: image.to_string(),
                realm: realm.clone(),
                error,
                source_name: source_name.clone(),
            })
        };
        if !scheme.eq_ignore_ascii_case("bearer") || realm.is_empty() {
            return Err(token_error(format!(
                "the registry asks for {challenge:?}, which keadm-batch cannot answer"
            )));
        }
        let scope = params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", image.repository()));
        let mut query = vec![("scope", scope.as_str())];
        if let Some(service) = params.get("service") {
            query.push(("service", service.as_str()));
        }
        let url = reqwest::Url::parse_with_params(&realm, &query)
            .map_err(|e| token_error(format!("the realm is not a URL ({e})")))?;
        // The login goes where basic auth would send it (the registry's own origin), or
        // to a realm over https, as the docker client sends it (Docker Hub's realm is
        // auth.docker.io): a registry could ask for it with basic auth anyway. Never in
        // plain text to another host, whatever the realm's URL holds.
        let login_goes = url.scheme() == "https" || same_origin(&url, &place.base);
        let mut request = self.client.get(url);
        if let Some(login) = login.as_ref().filter(|_| login_goes) {
            request = request.basic_auth(&login.user, Some(&login.password));
        }
        let response = send(request, image, place).map_err(|failure| match failure {
            Failure::Transient(error) => token_error(error),
            other => other,
        })?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(Failure::from(self.refused(image, place, status)));
        }
        if !status.is_success() {
            return Err(token_error(format!(
                "the token service answered {}",
                status_text(status)
            )));
        }
        let body =
            read_whole(response, MAX_TOKEN_BYTES, self.settings.timeout).map_err(|failure| {
                match failure {
                    BodyFailure::TooLarge => token_error(format!(
                        "its answer is larger than {}, which no token is",
                        limit_text(MAX_TOKEN_BYTES)
                    )),
                    BodyFailure::Broken(reason) => token_error(reason),
                }
            })?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| token_error(format!("its answer is not JSON ({e})")))?;
        let token = answer
            .get("token")
            .or_else(|| answer.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| token_error("its answer holds no token".into()))?;
        Ok(format!("Bearer {token}"))
    }

    fn credentials_source(&self) -> String {
        match &self.credentials.source {
            Some(path) => path.display().to_string(),
            None => match &self.settings.docker_config {
                Some(path) => format!("{} (which does not exist)", path.display()),
                None => "the docker config file (none found)".into(),
            },
        }
    }

    /// NeedsLogin without a login for the host, Denied with one.
    fn refused(&self, image: &ImageRef, place: &Place, status: StatusCode) -> BundleError {
        if self.credentials.for_host(&place.host).is_none() {
            BundleError::NeedsLogin {
                image: image.to_string(),
                registry: place.label.clone(),
                source_name: self.credentials_source(),
            }
        } else {
            BundleError::Denied {
                image: image.to_string(),
                registry: place.label.clone(),
                status: status_text(status),
                source_name: self.credentials_source(),
            }
        }
    }

    /// `response` when it is a success; what its status means otherwise. `blob` names a
    /// blob that was asked for (a missing blob is a broken image, not a missing one).
    pub(super) fn check_status(
        &self,
        response: Response,
        image: &ImageRef,
        place: &Place,
        blob: Option<&str>,
    ) -> Result<Response, Failure> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            return Err(Failure::Status(status));
        }
        let error = match (status, blob) {
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => {
                self.refused(image, place, status)
            }
            (StatusCode::NOT_FOUND, None) => BundleError::NotFound {
                image: image.to_string(),
                registry: place.label.clone(),
                status: format!(
                    "{}{}",
                    status_text(status),
                    registry_error_code(response, self.settings.timeout)
                ),
            },
            (StatusCode::NOT_FOUND, Some(what)) => bad_manifest(
                image,
                place,
                &format!("its {what} is missing from the registry (404 Not Found)"),
            ),
            _ => BundleError::Status {
                image: image.to_string(),
                registry: place.label.clone(),
                status: status_text(status),
            },
        };
        Err(Failure::from(error))
    }
}

/// Sends `request` for `image`. What fails the same way every time is fatal: a malformed
/// URL, a redirect loop, a redirect from https to plain HTTP (refused before it is
/// followed, see [`crate::http_redirect`]), headers past what the HTTP client takes; anything
/// else is worth another attempt.
fn send(request: RequestBuilder, image: &ImageRef, place: &Place) -> Result<Response, Failure> {
    request.send().map_err(|e| {
        if let Some(to) = crate::http_redirect::refused_downgrade(&e) {
            Failure::from(BundleError::PlainHttpRedirect {
                image: image.to_string(),
                registry: place.label.clone(),
                to: to.to_string(),
            })
        } else if e.is_builder() || e.is_redirect() {
            Failure::from(BundleError::Unreachable {
                image: image.to_string(),
                registry: place.label.clone(),
                attempts: 1,
                error: error_chain(&e),
            })
        } else if error_chain(&e).contains(HEAD_TOO_LARGE) {
            Failure::from(BundleError::HeadersTooLarge {
                image: image.to_string(),
                registry: place.label.clone(),
            })
        } else {
            Failure::Transient(error_chain(&e))
        }
    })
}

/// hyper's words for an answer whose head is more than its buffer (408 KiB) or has more
/// than 100 headers; reqwest does not tell that apart otherwise.
const HEAD_TOO_LARGE: &str = "message head is too large";

/// Runs `attempt` up to `1 + retries` times, with backoff between attempts.
pub(super) fn with_retries<T>(
    retries: u32,
    base_delay: Duration,
    image: &ImageRef,
    place: &Place,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, BundleError> {
    let attempts = retries.saturating_add(1);
    let mut number = 1;
    loop {
        let reason = match attempt() {
            Ok(value) => return Ok(value),
            Err(Failure::Fatal(error)) => return Err(*error),
            Err(Failure::Status(status)) if number >= attempts => {
                return Err(BundleError::Status {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    status: format!("{} (after {attempts} attempts)", status_text(status)),
                });
            }
            Err(Failure::Transient(error)) if number >= attempts => {
                return Err(BundleError::Unreachable {
                    image: image.to_string(),
                    registry: place.label.clone(),
                    attempts,
                    error,
                });
            }
            Err(Failure::Status(status)) => format!("HTTP status {}", status_text(status)),
            Err(Failure::Transient(error)) => error,
        };
        let delay = backoff(base_delay, number);
        log::warn!(
            "pulling {image} from {} failed ({reason}); retrying in {:.1} s (attempt {} of {attempts})",
            place.label,
            delay.as_secs_f64(),
            number + 1
        );
        std::thread::sleep(delay);
        number += 1;
    }
}

/// ` (MANIFEST_UNKNOWN)`: the registry's error code from a JSON error body, when there is one.
fn registry_error_code(response: Response, within: Duration) -> String {
    let body = read_whole(response, MAX_ERROR_BYTES, within).unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.get("errors")?
                .get(0)?
                .get("code")?
                .as_str()
                .map(str::to_string)
        })
        .map(|code| format!(" ({})", registry_words(&code)))
        .unwrap_or_default()
}

/// Whether `url` has the scheme, host and port of the base URL `base`.
fn same_origin(url: &reqwest::Url, base: &str) -> bool {
    reqwest::Url::parse(base).is_ok_and(|base| {
        base.scheme() == url.scheme()
            && base.host_str() == url.host_str()
            && base.port_or_known_default() == url.port_or_known_default()
    })
}

/// `Bearer realm="...",service="..."` into its scheme and parameters.
fn parse_challenge(header: &str) -> (String, HashMap<String, String>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
        }
        params.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    (scheme.to_string(), params)
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Arch;
    use crate::bundle::registry::RegistrySettings;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::time::Instant;

    /// A registry on loopback that reads each request's head and then does `answer` on
    /// the connection (which may never end); its base URL.
    fn serve(answer: fn(&mut TcpStream)) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    answer(&mut stream);
                });
            }
        });
        url
    }

    /// What resolving an image from the registry at `url` ends with, and how long it
    /// took, with a timeout of 0.3 s and one retry; `None` when it has not ended after
    /// 10 s.
    fn resolve_from(url: &str) -> Option<(BundleError, Duration)> {
        let settings = RegistrySettings {
            mirrors: vec![("registry.example".into(), url.into())],
            insecure_http: true,
            max_image_bytes: 1 << 20,
            retries: 1,
            retry_base_delay: Duration::from_millis(10),
            timeout: Duration::from_millis(300),
            docker_config: None,
            meters: crate::stage::Meters::Off,
        };
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let start = Instant::now();
            let image = ImageRef::parse("registry.example/app:1").unwrap();
            let result = Registry::new(settings).and_then(|mut r| r.resolve(&image, Arch::Amd64));
            let _ = sender.send((result.err(), start.elapsed()));
        });
        let (error, took) = receiver.recv_timeout(Duration::from_secs(10)).ok()?;
        Some((error.expect("the registry sent no manifest"), took))
    }

    #[test]
    fn a_registry_that_never_answers_fails_at_the_timeout() {
        let url = serve(|_| std::thread::sleep(Duration::from_secs(30)));
        let (error, took) = resolve_from(&url).expect("resolving never ended");
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "Cannot reach {url} (the mirror for registry.example) for the image registry.example/app:1 after 2 attempt(s): "
            )) && text.contains("timed out"),
            "{text}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    /// A manifest that comes one byte at a time, each well within the timeout, must still
    /// arrive whole within it: reads that each succeed do not make a deadline.
    #[test]
    fn a_manifest_that_trickles_in_fails_at_the_timeout() {
        let url = serve(|stream| {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{";
            let _ = stream.write_all(head.as_bytes());
            while stream.write_all(b" ").is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (error, took) = resolve_from(&url).expect("resolving never ended");
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "Cannot reach {url} (the mirror for registry.example) for the image registry.example/app:1 after 2 attempt(s): the answer did not arrive whole within 0.3 s."
            )),
            "{text}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn only_the_same_scheme_host_and_port_is_the_same_origin() {
        let url = |text| reqwest::Url::parse(text).unwrap();
        let base = "http://127.0.0.1:5000";
        assert!(same_origin(&url("http://127.0.0.1:5000/token?x=1"), base));
        assert!(!same_origin(&url("http://127.0.0.2:5000/token"), base));
        assert!(!same_origin(&url("http://127.0.0.1:5001/token"), base));
        assert!(!same_origin(&url("https://127.0.0.1:5000/token"), base));
        assert!(!same_origin(
            &url("http://evil.example/?via=://127.0.0.1:5000/"),
            base
        ));
        assert!(same_origin(
            &url("https://registry.example/token"),
            "https://registry.example:443"
        ));
    }

    #[test]
    fn challenges_are_parsed_with_quotes_and_commas() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(params["realm"], "https://auth.docker.io/token");
        assert_eq!(params["service"], "registry.docker.io");
        assert_eq!(params["scope"], "repository:library/busybox:pull,push");
        let (scheme, params) = parse_challenge(r#"Basic realm=basic-realm"#);
        assert_eq!(
            (scheme.as_str(), params["realm"].as_str()),
            ("Basic", "basic-realm")
        );
        assert_eq!(parse_challenge("").0, "");
    }
}
