//! A tiny HTTP/1.1 server on 127.0.0.1 for download tests, plain or over TLS.
//!
//! One thread, one connection at a time, `Connection: close` on every response, so request
//! counts are exact. Paths not in the map get a 404. Stops (and joins its thread) on drop.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the server answers for one path.
#[derive(Clone, Debug)]
pub struct Route {
    pub status: u16,
    pub body: Vec<u8>,
    /// The first `truncate` responses announce the full length but send only half the
    /// body, then close. `u32::MAX` truncates every time.
    pub truncate: u32,
    /// Wait this long before answering (to widen races in concurrency tests).
    pub delay: Duration,
    /// Send `Content-Length`; without it the body simply ends when the connection closes,
    /// so the client cannot know the size up front.
    pub announce_length: bool,
    /// A `Location` header (for redirects).
    pub location: Option<String>,
    /// Send the body this many bytes at a time, pausing this long after each part: a slow
    /// link, for tests of what the client shows meanwhile.
    pub pace: Option<(usize, Duration)>,
}

impl Route {
    pub fn ok(body: impl Into<Vec<u8>>) -> Route {
        Route::status(200, body)
    }

    pub fn status(status: u16, body: impl Into<Vec<u8>>) -> Route {
        Route {
            status,
            body: body.into(),
            truncate: 0,
            delay: Duration::ZERO,
            announce_length: true,
            location: None,
            pace: None,
        }
    }

    /// A 302 to `location`.
    pub fn redirect(location: &str) -> Route {
        let mut route = Route::status(302, "");
        route.location = Some(location.to_string());
        route
    }

    pub fn without_length(mut self) -> Route {
        self.announce_length = false;
        self
    }

    pub fn truncated(mut self, times: u32) -> Route {
        self.truncate = times;
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Route {
        self.delay = delay;
        self
    }

    /// Sends the body `part` bytes at a time with `pause` after each.
    pub fn paced(mut self, part: usize, pause: Duration) -> Route {
        self.pace = Some((part, pause));
        self
    }
}

#[derive(Default)]
struct State {
    routes: HashMap<String, Route>,
    hits: HashMap<String, usize>,
}

pub struct HttpServer {
    port: u16,
    /// With TLS: the directory holding the certificate (kept until the server is dropped).
    tls_dir: Option<tempfile::TempDir>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    pub fn start() -> HttpServer {
        HttpServer::spawn(None, None)
    }

    /// An https server with a throwaway self-signed certificate for 127.0.0.1; clients
    /// trust it through [`HttpServer::certificate`] (`SSL_CERT_FILE` for keadm-batch).
    pub fn start_tls() -> HttpServer {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = self_signed_acceptor(dir.path(), "127.0.0.1");
        HttpServer::spawn(Some(acceptor), Some(dir))
    }

    fn spawn(
        tls: Option<native_tls::TlsAcceptor>,
        tls_dir: Option<tempfile::TempDir>,
    ) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || serve(listener, tls, state, stop))
        };
        HttpServer {
            port,
            tls_dir,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// The certificate (PEM) of a TLS server.
    pub fn certificate(&self) -> PathBuf {
        let dir: &Path = self.tls_dir.as_ref().expect("a TLS server").path();
        dir.join("cert.pem")
    }

    /// `http://127.0.0.1:<port>` (`https://` with TLS), without a trailing slash.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls_dir.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// `base_url()` + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    pub fn route(&self, path: &str, route: Route) {
        self.state
            .lock()
            .unwrap()
            .routes
            .insert(path.to_string(), route);
    }

    pub fn remove(&self, path: &str) {
        self.state.lock().unwrap().routes.remove(path);
    }

    /// Requests received for `path` so far (whatever was answered).
    pub fn hits(&self, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests received for every path together.
    pub fn total_hits(&self) -> usize {
        self.state.lock().unwrap().hits.values().sum()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    tls: Option<native_tls::TlsAcceptor>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // A client that misbehaves must not kill the server for the next test step.
                let _ = handle(stream, tls.as_ref(), &state);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn handle(
    stream: TcpStream,
    tls: Option<&native_tls::TlsAcceptor>,
    state: &Mutex<State>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    match tls {
        Some(acceptor) => {
            let mut stream = acceptor.accept(stream).map_err(std::io::Error::other)?;
            respond(&mut stream, state)?;
            let _ = stream.shutdown();
        }
        None => {
            let mut stream = stream;
            respond(&mut stream, state)?;
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
    Ok(())
}

fn respond<S: Read + Write>(stream: &mut S, state: &Mutex<State>) -> std::io::Result<()> {
    let mut request_line = String::new();
    {
        // Headers are read and ignored; the request has no body (GET only).
        let mut reader = BufReader::new(&mut *stream);
        reader.read_line(&mut request_line)?;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
                break;
            }
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();

    let route = {
        let mut state = state.lock().unwrap();
        *state.hits.entry(path.clone()).or_insert(0) += 1;
        let route = state.routes.get(&path).cloned();
        if let Some(route) = state.routes.get_mut(&path)
            && route.truncate > 0
            && route.truncate != u32::MAX
        {
            route.truncate -= 1;
        }
        route
    };
    let route = route.unwrap_or_else(|| Route::status(404, "Not Found\n"));
    std::thread::sleep(route.delay);

    let mut headers = String::new();
    if route.announce_length {
        headers.push_str(&format!("Content-Length: {}\r\n", route.body.len()));
    }
    if let Some(location) = &route.location {
        headers.push_str(&format!("Location: {location}\r\n"));
    }
    let head = format!(
        "HTTP/1.1 {} {}\r\n{headers}Content-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        route.status,
        reason(route.status),
    );
    stream.write_all(head.as_bytes())?;
    if route.truncate > 0 {
        stream.write_all(&route.body[..route.body.len() / 2])?;
    } else if let Some((part, pause)) = route.pace {
        for chunk in route.body.chunks(part.max(1)) {
            stream.write_all(chunk)?;
            stream.flush()?;
            std::thread::sleep(pause);
        }
    } else {
        stream.write_all(&route.body)?;
    }
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A throwaway self-signed P-256 certificate for `ip`, valid for `days` from now, made by
/// the openssl CLI: its key written to `key`, itself to `cert`, both in PEM.
pub fn self_signed(key: &std::path::Path, cert: &std::path::Path, ip: &str, days: u32) {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days"])
        .arg(days.to_string())
        .args(["-subj", &format!("/CN={ip}")])
        .args(["-addext", &format!("subjectAltName=IP:{ip}")])
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A TLS acceptor with a throwaway self-signed P-256 certificate for `ip`, written as
/// `cert.pem` and `key.pem` in `dir` (clients may trust `cert.pem`).
pub fn self_signed_acceptor(dir: &std::path::Path, ip: &str) -> native_tls::TlsAcceptor {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    self_signed(&key, &cert, ip, 1);
    let identity = native_tls::Identity::from_pkcs8(
        &std::fs::read(&cert).unwrap(),
        &std::fs::read(&key).unwrap(),
    )
    .unwrap();
    native_tls::TlsAcceptor::new(identity).unwrap()
}
