//! A tiny HTTP/1.1 server on 127.0.0.1 for download tests.
//!
//! One thread, one connection at a time, `Connection: close` on every response, so request
//! counts are exact. Paths not in the map get a 404. Stops (and joins its thread) on drop.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
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
        }
    }

    pub fn truncated(mut self, times: u32) -> Route {
        self.truncate = times;
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Route {
        self.delay = delay;
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
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    pub fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || serve(listener, state, stop))
        };
        HttpServer {
            port,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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

fn serve(listener: TcpListener, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // A client that misbehaves must not kill the server for the next test step.
                let _ = handle(stream, &state);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn handle(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Headers are read and ignored; the request has no body (GET only).
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
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

    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        route.status,
        reason(route.status),
        route.body.len()
    );
    stream.write_all(head.as_bytes())?;
    if route.truncate > 0 {
        stream.write_all(&route.body[..route.body.len() / 2])?;
    } else {
        stream.write_all(&route.body)?;
    }
    stream.flush()?;
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
