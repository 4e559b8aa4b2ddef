//! A registry on loopback that misbehaves on purpose, for `batch bundle`'s registry
//! client: answers of any size (endless ones too, framed by a length, by the connection's
//! end or in chunks), a length that lies, headers that never end, redirects, a login it
//! asks for. Plain or over TLS (the certificate of tests/common/http_server.rs, trusted
//! through `SSL_CERT_FILE`), on any loopback address (`127.0.0.2` is another host to a
//! client on `127.0.0.1`). It records every request with its headers, so a test can tell
//! what a client sent where.
//!
//! One thread per connection and `Connection: close` on every answer: an endless answer
//! ends when the client hangs up, and never holds up the next request. Paths without a
//! reply get a 404. Stops (and joins its threads) on drop.
//!
//! ```ignore
//! let registry = HostileRegistry::start("127.0.0.1");
//! registry.reply("/v2/pause/manifests/3.9", Reply::endless(Framing::Chunked));
//! // bundle with --registry-mirror registry.k8s.io=<registry.base_url()> --insecure-http
//! assert!(registry.requests().iter().all(|r| r.header("authorization").is_none()));
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::http_server::self_signed_acceptor;

/// How an answer's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` with the body's true length.
    Length,
    /// `Content-Length` with this number, whatever the body holds: a length that lies.
    Claimed(u64),
    /// No length: the body ends when the connection closes.
    Close,
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What a body holds.
#[derive(Clone, Debug)]
pub enum Body {
    Bytes(Vec<u8>),
    /// This many zero bytes, made as they are sent; `u64::MAX` never ends.
    Zeros(u64),
}

/// What the registry does with a request for one path.
#[derive(Clone, Debug)]
pub enum Reply {
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Body,
        framing: Framing,
    },
    /// A status line, then one header line that never ends.
    EndlessHeader,
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply::status(200, body)
    }

    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: Body::Bytes(body.into()),
            framing: Framing::Length,
        }
    }

    /// A 200 whose body is `bytes` zeros (`u64::MAX`: endless), delimited by `framing`.
    pub fn zeros(bytes: u64, framing: Framing) -> Reply {
        Reply::Answer {
            status: 200,
            headers: Vec::new(),
            body: Body::Zeros(bytes),
            framing,
        }
    }

    /// A 200 that never ends, delimited by `framing` (`Length` announces 16 EiB).
    pub fn endless(framing: Framing) -> Reply {
        let framing = match framing {
            Framing::Length => Framing::Claimed(u64::MAX / 2),
            other => other,
        };
        Reply::zeros(u64::MAX, framing)
    }

    /// A 302 to `location`.
    pub fn redirect(location: &str) -> Reply {
        Reply::status(302, "").header("Location", location)
    }

    /// This reply with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }
}

/// One request as the registry received it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The path with its query, as the request line gives it.
    pub target: String,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: HashMap<String, Reply>,
    requests: Vec<Request>,
    /// The `Authorization` every `/v2/` request must carry, and the challenge a request
    /// without it gets (with a 401).
    login: Option<(String, String)>,
}

pub struct HostileRegistry {
    address: String,
    port: u16,
    tls_dir: Option<tempfile::TempDir>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostileRegistry {
    /// A plain-HTTP registry on `address` (a loopback address).
    pub fn start(address: &str) -> HostileRegistry {
        HostileRegistry::spawn(address, None)
    }

    /// An https registry on `address`, with a throwaway certificate for it that clients
    /// trust through [`HostileRegistry::certificate`].
    pub fn start_tls(address: &str) -> HostileRegistry {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = self_signed_acceptor(dir.path(), address);
        HostileRegistry::spawn(address, Some((acceptor, dir)))
    }

    fn spawn(
        address: &str,
        tls: Option<(native_tls::TlsAcceptor, tempfile::TempDir)>,
    ) -> HostileRegistry {
        assert!(
            address.starts_with("127."),
            "tests serve on loopback only, not {address}"
        );
        let listener = TcpListener::bind((address, 0)).expect("bind a loopback port");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (acceptor, tls_dir) = match tls {
            Some((acceptor, dir)) => (Some(Arc::new(acceptor)), Some(dir)),
            None => (None, None),
        };
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || serve(listener, acceptor, state, stop))
        };
        HostileRegistry {
            address: address.to_string(),
            port,
            tls_dir,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://<address>:<port>` (`https://` with TLS), without a trailing slash.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls_dir.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", self.address, self.port)
    }

    /// `base_url()` + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// The certificate (PEM) of a TLS registry.
    pub fn certificate(&self) -> PathBuf {
        self.tls_dir
            .as_ref()
            .expect("a TLS registry")
            .path()
            .join("cert.pem")
    }

    /// Answers requests for `path` (without its query) with `reply`.
    pub fn reply(&self, path: &str, reply: Reply) {
        self.state
            .lock()
            .unwrap()
            .replies
            .insert(path.to_string(), reply);
    }

    /// Answers every `/v2/` request that does not carry `authorization` with a 401 and
    /// `challenge` (`WWW-Authenticate`), as a registry that wants a login does.
    pub fn require(&self, authorization: &str, challenge: &str) {
        self.state.lock().unwrap().login = Some((authorization.to_string(), challenge.to_string()));
    }

    /// Every request so far, in the order they came.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Forgets the requests so far.
    pub fn clear_requests(&self) {
        self.state.lock().unwrap().requests.clear();
    }

    /// How many requests came for `path` (without its query).
    pub fn hits(&self, path: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.target.split('?').next() == Some(path))
            .count()
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    tls: Option<Arc<native_tls::TlsAcceptor>>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let mut connections = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let (tls, state, stop) = (tls.clone(), state.clone(), stop.clone());
                connections.push(std::thread::spawn(move || {
                    // A client that hangs up mid-answer is what these tests expect.
                    let _ = handle(stream, tls.as_deref(), &state, &stop);
                }));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    for connection in connections {
        let _ = connection.join();
    }
}

fn handle(
    stream: TcpStream,
    tls: Option<&native_tls::TlsAcceptor>,
    state: &Mutex<State>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let raw = stream.try_clone()?;
    match tls {
        Some(acceptor) => {
            let mut stream = acceptor.accept(stream).map_err(std::io::Error::other)?;
            respond(&mut stream, state, stop)?;
            let _ = stream.shutdown();
        }
        None => {
            let mut stream = stream;
            respond(&mut stream, state, stop)?;
        }
    }
    let _ = raw.shutdown(Shutdown::Both);
    Ok(())
}

fn respond<S: Read + Write>(
    stream: &mut S,
    state: &Mutex<State>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut request_line = String::new();
    let mut headers = Vec::new();
    {
        let mut reader = BufReader::new(&mut *stream);
        reader.read_line(&mut request_line)?;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let path = target.split('?').next().unwrap_or_default().to_string();
    let reply = {
        let mut state = state.lock().unwrap();
        let refused = state.login.as_ref().and_then(|(expected, challenge)| {
            let given = headers.iter().find(|(n, _)| n == "authorization");
            (path.starts_with("/v2/") && given.is_none_or(|(_, v)| v != expected))
                .then(|| Reply::status(401, "").header("WWW-Authenticate", challenge))
        });
        state.requests.push(Request { target, headers });
        refused.or_else(|| state.replies.get(&path).cloned())
    };
    let reply = reply.unwrap_or_else(|| Reply::status(404, "Not Found\n"));
    let still = || !stop.load(Ordering::SeqCst);
    match reply {
        Reply::EndlessHeader => {
            stream.write_all(b"HTTP/1.1 200 OK\r\nX-Endless: ")?;
            let line = [b'a'; 64 * 1024];
            while still() {
                stream.write_all(&line)?;
            }
            Ok(())
        }
        Reply::Answer {
            status,
            headers,
            body,
            framing,
        } => {
            let length = match &body {
                Body::Bytes(bytes) => bytes.len() as u64,
                Body::Zeros(n) => *n,
            };
            let mut head = format!("HTTP/1.1 {status} Status\r\nConnection: close\r\n");
            for (name, value) in &headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            if !headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            {
                head.push_str("Content-Type: application/octet-stream\r\n");
            }
            match framing {
                Framing::Length => head.push_str(&format!("Content-Length: {length}\r\n")),
                Framing::Claimed(claimed) => {
                    head.push_str(&format!("Content-Length: {claimed}\r\n"))
                }
                Framing::Chunked => head.push_str("Transfer-Encoding: chunked\r\n"),
                Framing::Close => {}
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes())?;
            let mut send = |part: &[u8]| -> std::io::Result<()> {
                if framing == Framing::Chunked {
                    stream.write_all(format!("{:x}\r\n", part.len()).as_bytes())?;
                    stream.write_all(part)?;
                    stream.write_all(b"\r\n")
                } else {
                    stream.write_all(part)
                }
            };
            match body {
                Body::Bytes(bytes) => {
                    if !bytes.is_empty() {
                        send(&bytes)?;
                    }
                }
                Body::Zeros(total) => {
                    let zeros = vec![0u8; 64 * 1024];
                    let mut left = total;
                    while left > 0 && still() {
                        let n = left.min(zeros.len() as u64) as usize;
                        send(&zeros[..n])?;
                        if total != u64::MAX {
                            left -= n as u64;
                        }
                    }
                }
            }
            if framing == Framing::Chunked {
                stream.write_all(b"0\r\n\r\n")?;
            }
            stream.flush()
        }
    }
}
