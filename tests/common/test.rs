//! The one way the tests launch the keadm-batch binary, in the manner of just's `Test`:
//! a builder that runs it and an output with fluent assertions.
//!
//! ```ignore
//! Test::new().config(yaml).args(&["batch", "-c", "config.yaml"]).run().status(2).stderr_has("..");
//! Test::in_dir(&fixtures).args(&[..]).env("SSL_CERT_FILE", &cert).run();
//! let running = sc.command(&[]).spawn(); /* act on the nodes */ running.interrupt(); running.wait();
//! ```
//!
//! Every launch gets the same environment: a scratch HOME unless the test sets one, no
//! RUST_LOG, no KEADM_BATCH_TEST_UNSET (fixtures rely on it being unset), NO_COLOR, and
//! /dev/null as stdin (the binary reads none, so a stray read cannot hang a test). Output
//! goes to anonymous files rather than pipes, so a process that prints megabytes while a
//! test waits for something else never blocks on a full pipe.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A launch of the binary being built: where, with which arguments and environment.
pub struct Test {
    dir: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    /// Scratch dirs this launch owns; they go to its output and live as long as it.
    owned: Vec<TempDir>,
    /// Stdout is a pipe nobody reads, closed before the binary starts (`| head` that has
    /// already quit).
    closed_stdout: bool,
    /// The same for stderr (`2>&1 | head`, a `less` left with `q`, a `tee` that died).
    closed_stderr: bool,
}

impl Test {
    /// A launch in a fresh scratch directory, with HOME at its `home/`.
    pub fn new() -> Test {
        let scratch = tempfile::Builder::new()
            .prefix("keadm-batch-test")
            .tempdir()
            .unwrap();
        let home = scratch.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let mut test = Test::in_dir(scratch.path()).env("HOME", &home);
        test.owned.push(scratch);
        test
    }

    /// A launch in `dir`, which the test owns (fixtures, a scenario's run directory).
    pub fn in_dir(dir: &Path) -> Test {
        Test {
            dir: dir.to_path_buf(),
            args: Vec::new(),
            env: Vec::new(),
            owned: Vec::new(),
            closed_stdout: false,
            closed_stderr: false,
        }
    }

    /// Gives the binary a stdout whose reader has gone away: every write fails with
    /// EPIPE. The output's `stdout` is then empty.
    pub fn closed_stdout(mut self) -> Test {
        self.closed_stdout = true;
        self
    }

    /// Gives the binary a stderr whose reader has gone away, as [`Test::closed_stdout`]
    /// does for stdout. The output's `stderr` is then empty.
    pub fn closed_stderr(mut self) -> Test {
        self.closed_stderr = true;
        self
    }

    /// The directory the binary runs in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `config.yaml` in the directory.
    pub fn config(self, yaml: &str) -> Test {
        self.file("config.yaml", yaml)
    }

    /// Writes `name` (a path relative to the directory) with `contents`.
    pub fn file(self, name: &str, contents: &str) -> Test {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, contents).unwrap();
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Test {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I>(self, args: I) -> Test
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        args.into_iter().fold(self, Test::arg)
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Test {
        self.env.push((key.into(), value.as_ref().to_owned()));
        self
    }

    /// Runs the binary to its end.
    pub fn run(self) -> Output {
        self.spawn().wait()
    }

    /// Starts the binary, for a test that acts while it runs.
    pub fn spawn(mut self) -> Running {
        if !self.env.iter().any(|(key, _)| key == "HOME") {
            let home = tempfile::Builder::new()
                .prefix("keadm-batch-home")
                .tempdir()
                .unwrap();
            self = self.env("HOME", home.path());
            self.owned.push(home);
        }
        let stdout = tempfile::tempfile().unwrap();
        let stderr = tempfile::tempfile().unwrap();
        // The read end of a closed stream is dropped here, before the binary can write.
        let closed_or = |closed: bool, file: &File| {
            if closed {
                Stdio::from(std::io::pipe().unwrap().1)
            } else {
                Stdio::from(file.try_clone().unwrap())
            }
        };
        let child_stdout = closed_or(self.closed_stdout, &stdout);
        let child_stderr = closed_or(self.closed_stderr, &stderr);
        let child = Command::new(env!("CARGO_BIN_EXE_keadm-batch"))
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .env_remove("KEADM_BATCH_TEST_UNSET")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(child_stdout)
            .stderr(child_stderr)
            .spawn()
            .expect("start keadm-batch");
        Running {
            child,
            stdout,
            stderr,
            dir: self.dir,
            owned: self.owned,
        }
    }
}

/// The binary while it runs. Dropping it kills a process that is still running, so a
/// failed test leaves nothing behind.
pub struct Running {
    child: Child,
    stdout: File,
    stderr: File,
    dir: PathBuf,
    owned: Vec<TempDir>,
}

impl Running {
    /// SIGINT, as Ctrl-C in the operator's terminal sends.
    pub fn interrupt(&self) {
        // SAFETY: plain kill(2) on the child this launch started.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
    }

    /// Ctrl-C twice, 300 ms apart: the second cancels what runs.
    pub fn interrupt_twice(&self) {
        self.interrupt();
        std::thread::sleep(Duration::from_millis(300));
        self.interrupt();
    }

    /// SIGKILL, as the OOM killer or a lost machine would end it.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
    }

    pub fn wait(mut self) -> Output {
        let status = self.child.wait().unwrap();
        self.output(status)
    }

    /// Waits at most `limit` (else kills it and fails the test) and returns the output
    /// with the peak RSS in KiB, sampled from /proc/<pid>/status (VmHWM) while it runs:
    /// wait4's ru_maxrss would also count the test process's pages from before the exec.
    pub fn wait_measured(mut self, limit: Duration) -> (Output, u64) {
        let deadline = Instant::now() + limit;
        let status_file = format!("/proc/{}/status", self.child.id());
        let mut peak_kib = 0u64;
        let status = loop {
            if let Ok(text) = std::fs::read_to_string(&status_file)
                && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
                && let Some(kib) = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "keadm-batch did not finish within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        (self.output(status), peak_kib)
    }

    fn output(&mut self, status: ExitStatus) -> Output {
        let read = |file: &mut File| {
            let mut bytes = Vec::new();
            file.rewind().unwrap();
            file.read_to_end(&mut bytes).unwrap();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Output {
            status,
            stdout: read(&mut self.stdout),
            stderr: read(&mut self.stderr),
            dir: self.dir.clone(),
            _owned: std::mem::take(&mut self.owned),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a finished run left: its exit, its output, and the directory it ran in (which
/// holds its result files; see `scenario.rs` for the readers of a batch run's files).
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub dir: PathBuf,
    _owned: Vec<TempDir>,
}

impl Output {
    /// The exit code, or -1 when a signal ended the process.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// Asserts the exit code.
    pub fn status(&self, code: i32) -> &Output {
        assert_eq!(
            self.code(),
            code,
            "exit status ({})\n--- stdout:\n{}\n--- stderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The signal that ended the process, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }

    pub fn stderr_has(&self, needle: &str) -> &Output {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    pub fn stderr_lacks(&self, needle: &str) -> &Output {
        assert!(
            !self.stderr.contains(needle),
            "stderr has {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    pub fn stdout_has(&self, needle: &str) -> &Output {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}:\n{}",
            self.stdout
        );
        self
    }

    /// `name` in the directory the binary ran in.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Compares `actual` with the golden file `tests/<rel>`; `KEADM_BATCH_BLESS=1` rewrites it.
pub fn golden(rel: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel);
    if std::env::var_os("KEADM_BATCH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing; run with KEADM_BATCH_BLESS=1 to create it",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "output differs from {}; if the change is intended, rerun with KEADM_BATCH_BLESS=1",
        path.display()
    );
}
