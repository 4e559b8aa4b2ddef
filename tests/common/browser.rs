//! A headless Chromium (Debian's `chromium`), driven over the W3C WebDriver protocol by
//! Debian's `chromedriver`, which the test starts on a loopback port of its own. The
//! client is the few WebDriver calls the report's test needs, over the blocking reqwest
//! the crate already has (why not a WebDriver crate: docs/decisions.md).
//!
//! The browser is kept off the network: every host name resolves to nothing but
//! localhost, and its background services (updates, sync, safe browsing) are off, so the
//! only traffic is chromedriver's on loopback and the pages it reads from `file://`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::blocking::Client,
    _profile: tempfile::TempDir,
}

/// Chromium's flags: headless, as root (no sandbox), and nothing that talks to the network.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost",
    "--window-size=1400,1000",
];

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a session in a fresh profile.
    pub fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/setup.sh installs it)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{base}/status")).send().is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer on {base}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        let session = browser.call(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
                "goog:loggingPrefs": {"browser": "ALL"},
            }}}),
        );
        browser.session = session["sessionId"].as_str().unwrap().to_string();
        browser
    }

    /// One WebDriver call; its `value`, or the test fails with the driver's error.
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.to_string()),
        };
        let response = request
            .send()
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let text = response.text().unwrap();
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let value = value["value"].clone();
        if let Some(error) = value.get("error") {
            panic!("{method} {path}: {error}: {}", value["message"]);
        }
        value
    }

    fn session_call(&self, method: &str, path: &str, body: Value) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `file` and waits for it to load.
    pub fn open(&self, file: &Path) {
        let url = format!("file://{}", file.display());
        self.session_call("POST", "/url", json!({ "url": url }));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page: its result.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
    }

    /// The text of the first element `selector` matches, or `None`.
    pub fn text(&self, selector: &str) -> Option<String> {
        self.eval(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            json!([selector]),
        )
        .as_str()
        .map(str::to_string)
    }

    /// How many elements `selector` matches that are shown (not `hidden`, laid out).
    pub fn count_shown(&self, selector: &str) -> usize {
        self.eval(
            "return Array.from(document.querySelectorAll(arguments[0])).filter(e => e.getClientRects().length > 0).length;",
            json!([selector]),
        )
        .as_u64()
        .unwrap() as usize
    }

    /// Types `text` into the input `selector` (replacing what it holds) as a user would:
    /// focus, clear, keys.
    pub fn type_into(&self, selector: &str, text: &str) {
        let element = self.element(selector);
        self.session_call("POST", &format!("/element/{element}/clear"), json!({}));
        self.session_call(
            "POST",
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        );
    }

    /// Picks `value` in the select `selector` by clicking its option.
    pub fn choose(&self, selector: &str, value: &str) {
        let option = self.element(&format!("{selector} option[value=\"{value}\"]"));
        self.session_call("POST", &format!("/element/{option}/click"), json!({}));
    }

    pub fn click(&self, selector: &str) {
        let element = self.element(selector);
        self.session_call("POST", &format!("/element/{element}/click"), json!({}));
    }

    fn element(&self, selector: &str) -> String {
        let found = self.session_call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": selector}),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {selector}"))
            .to_string()
    }

    /// The page's URL now.
    pub fn url(&self) -> String {
        self.session_call("GET", "/url", Value::Null)
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The page's URL once `done` holds for it (up to 20 s; after that, the URL as it is).
    pub fn wait_for_url(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let url = self.url();
            if done(&url) || Instant::now() > deadline {
                return url;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the page logged to its console at level SEVERE (errors, refused scripts).
    pub fn console_errors(&self) -> Vec<String> {
        let entries = self.session_call("POST", "/se/log", json!({"type": "browser"}));
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// A PNG of the window, written to `file`.
    pub fn screenshot(&self, file: &Path) {
        use base64::Engine as _;
        let png = self.session_call("GET", "/screenshot", Value::Null);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(file, bytes).unwrap();
    }

    /// A PNG of the whole page, as tall as its content (up to `max_height` pixels).
    pub fn full_page_screenshot(&self, file: &Path, width: u32, max_height: u32) {
        let height = self
            .eval("return document.documentElement.scrollHeight;", json!([]))
            .as_u64()
            .unwrap_or(1000) as u32;
        self.session_call(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height.min(max_height)}),
        );
        self.screenshot(file);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .http
                .delete(format!("{}/session/{}", self.base, self.session))
                .send();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
