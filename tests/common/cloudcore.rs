//! A stand-in for cloudcore's https port on 127.0.0.1: `GET /ca.crt` returns a CA file
//! and `GET /node/<name>` answers 200 for names made "registered" and 404 otherwise, as
//! cloudcore's CheckNode does. TLS with a throwaway self-signed certificate.

use base64::Engine as _;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CA: &[u8] = b"fake cloudcore CA certificate, DER in real life";

pub struct FakeCloudcore {
    pub port: u16,
    registered: Arc<Mutex<HashSet<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeCloudcore {
    pub fn start() -> FakeCloudcore {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = super::http_server::self_signed_acceptor(dir.path(), "127.0.0.1");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let registered = Arc::new(Mutex::new(HashSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let registered = registered.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((stream, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    let Ok(mut tls) = acceptor.accept(stream) else {
                        continue;
                    };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let (status, body): (&str, Vec<u8>) = if path == "/ca.crt" {
                        ("200 OK", CA.to_vec())
                    } else if let Some(name) = path.strip_prefix("/node/") {
                        if registered.lock().unwrap().contains(name) {
                            ("200 OK", b"Node found".to_vec())
                        } else {
                            ("404 Not Found", b"Node not found".to_vec())
                        }
                    } else {
                        ("404 Not Found", b"404: Page Not Found".to_vec())
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(head.as_bytes());
                    let _ = tls.write_all(&body);
                    let _ = tls.shutdown();
                }
            })
        };
        FakeCloudcore {
            port,
            registered,
            stop,
            thread: Some(thread),
        }
    }

    /// Makes cloudcore answer 200 for this node name.
    pub fn register(&self, name: &str) {
        self.registered.lock().unwrap().insert(name.to_string());
    }

    /// The token CA hash that matches this cloudcore's CA.
    pub fn ca_hash(&self) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(CA))
    }
}

impl Drop for FakeCloudcore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A join token with this CA hash that expires at `exp` (unix seconds).
pub fn token(ca_hash: &str, exp: u64) -> String {
    // Unpadded URL-safe base64, as in a JWT.
    let b64 = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    format!(
        "{ca_hash}.{}.{}.{}",
        b64(br#"{"alg":"HS256","typ":"JWT"}"#),
        b64(format!("{{\"exp\":{exp}}}").as_bytes()),
        b64(b"signature")
    )
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
