//! A fake `keadm`: a small shell script whose behaviour each test chooses.
//!
//! ```ignore
//! FakeKeadm::new().prints("joining...").exits_with(3).write_to(&path)?;
//! // ... the tool uploads and runs it on a node ...
//! let calls = fake_keadm::calls(&node.tmp_path("kubeedge/keadm/keadm"));
//! assert_eq!(calls[0].args, ["join", "--token=x"]);
//! ```
//!
//! Every run appends a record to `<script>.calls` next to the script (on the node, so
//! read it through `Node::tmp_path`): one line per fact, prefixed with the shell's pid so
//! parallel runs can be told apart:
//!
//! ```text
//! <pid> start <unix time, ns precision>
//! <pid> cwd <dir>
//! <pid> arg <one argument>          (one line per argument, in order)
//! <pid> stdin <the line read>       (only with reads_stdin_line)
//! <pid> end <unix time> <exit code> (missing if it was killed)
//! ```
//!
//! Arguments containing newlines are not representable; keadm's never do.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default)]
pub struct FakeKeadm {
    stdout_lines: Vec<String>,
    stderr_lines: Vec<String>,
    exit_code: i32,
    sleep_secs: f64,
    read_stdin_line: bool,
    shell: Vec<String>,
    pad_to: usize,
    already_joined_until_reset: bool,
}

impl FakeKeadm {
    /// A keadm that records its call and exits 0, printing nothing.
    pub fn new() -> FakeKeadm {
        FakeKeadm::default()
    }

    /// Prints `line` to stdout (in order, before sleeping).
    pub fn prints(mut self, line: &str) -> Self {
        self.stdout_lines.push(line.to_string());
        self
    }

    /// Prints `line` to stderr (after the stdout lines).
    pub fn prints_stderr(mut self, line: &str) -> Self {
        self.stderr_lines.push(line.to_string());
        self
    }

    pub fn exits_with(mut self, code: i32) -> Self {
        self.exit_code = code;
        self
    }

    /// Sleeps this long after printing, before exiting.
    pub fn sleeps(mut self, secs: f64) -> Self {
        self.sleep_secs = secs;
        self
    }

    /// Runs this shell text after printing and before sleeping, e.g.
    /// `"if [ -e /tmp/hang ]; then sleep 600; fi"` for a fault on one node only (each node
    /// has its own /tmp).
    pub fn runs(mut self, shell: &str) -> Self {
        self.shell.push(shell.to_string());
        self
    }

    /// Pads the script with comment lines after its `exit` to at least `bytes`, so its
    /// upload takes a while or fills a small disk.
    pub fn padded_to(mut self, bytes: usize) -> Self {
        self.pad_to = bytes;
        self
    }

    /// Reads one line from stdin first and records it (as `yes |` or sudo's password line
    /// would feed it).
    pub fn reads_stdin_line(mut self) -> Self {
        self.read_stdin_line = true;
        self
    }

    /// Acts like a node that was joined before: `join` fails with keadm's "already
    /// running" error until a `reset` call has run on the node.
    pub fn already_joined_until_reset(mut self) -> Self {
        self.already_joined_until_reset = true;
        self
    }

    /// The script text.
    pub fn script(&self) -> String {
        let mut s = String::from(
            "#!/bin/sh\n\
             # Fake keadm written by tests/common/fake_keadm.rs.\n\
             rec=\"$(cd \"$(dirname \"$0\")\" && pwd)/$(basename \"$0\").calls\"\n\
             id=$$\n\
             echo \"$id start $(date +%s.%N)\" >> \"$rec\"\n\
             echo \"$id cwd $(pwd)\" >> \"$rec\"\n\
             echo \"$id uid $(id -u)\" >> \"$rec\"\n\
             for a in \"$@\"; do printf '%s arg %s\\n' \"$id\" \"$a\" >> \"$rec\"; done\n",
        );
        if self.already_joined_until_reset {
            s.push_str(
                "mark=\"$(dirname \"$rec\")/.was-reset\"\n\
                 if [ \"$1\" = reset ]; then touch \"$mark\"; echo \"$id end $(date +%s.%N) 0\" >> \"$rec\"; exit 0; fi\n\
                 if [ ! -e \"$mark\" ]; then\n\
                 echo 'I1130 12:00:00.000000    1 join.go:78] 1. Check KubeEdge edgecore process status' >&2\n\
                 echo 'Error: EdgeCore is already running on this node, please run reset to clean up first' >&2\n\
                 echo \"$id end $(date +%s.%N) 1\" >> \"$rec\"; exit 1\n\
                 fi\n",
            );
        }
        if self.read_stdin_line {
            s.push_str(
                "IFS= read -r line || line=''\n\
                 printf '%s stdin %s\\n' \"$id\" \"$line\" >> \"$rec\"\n",
            );
        }
        for line in &self.stdout_lines {
            s.push_str(&format!("printf '%s\\n' {}\n", shell_quote(line)));
        }
        for line in &self.stderr_lines {
            s.push_str(&format!("printf '%s\\n' {} >&2\n", shell_quote(line)));
        }
        for line in &self.shell {
            s.push_str(line);
            s.push('\n');
        }
        if self.sleep_secs > 0.0 {
            s.push_str(&format!("sleep {}\n", self.sleep_secs));
        }
        s.push_str(&format!(
            "echo \"$id end $(date +%s.%N) {code}\" >> \"$rec\"\nexit {code}\n",
            code = self.exit_code
        ));
        // Never read: the shell stops at `exit`.
        let pad = format!("# {}\n", "x".repeat(1021));
        while s.len() < self.pad_to {
            s.push_str(&pad);
        }
        s
    }

    /// Writes the script to `path` with mode 0755.
    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        fs::write(path, self.script())?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
    }
}

/// One recorded run of the fake.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Call {
    pub pid: String,
    pub start: f64,
    pub end: Option<f64>,
    pub exit_code: Option<i32>,
    pub cwd: String,
    pub args: Vec<String>,
    pub stdin_line: Option<String>,
    /// The user id keadm ran as.
    pub uid: Option<u32>,
}

/// The path of the record file of the fake at `script`.
pub fn calls_path(script: &Path) -> PathBuf {
    let mut name = script.as_os_str().to_owned();
    name.push(".calls");
    PathBuf::from(name)
}

/// Every recorded run of the fake at `script`, in start order; empty if it never ran.
pub fn calls(script: &Path) -> Vec<Call> {
    let text = fs::read_to_string(calls_path(script)).unwrap_or_default();
    let mut calls: Vec<Call> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(pid), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let rest = parts.next().unwrap_or("");
        let idx = match calls.iter().position(|c| c.pid == pid && c.end.is_none()) {
            Some(i) if kind != "start" => i,
            _ => {
                calls.push(Call {
                    pid: pid.to_string(),
                    ..Call::default()
                });
                calls.len() - 1
            }
        };
        let call = &mut calls[idx];
        match kind {
            "start" => call.start = rest.parse().unwrap_or(0.0),
            "cwd" => call.cwd = rest.to_string(),
            "uid" => call.uid = rest.parse().ok(),
            "arg" => call.args.push(rest.to_string()),
            "stdin" => call.stdin_line = Some(rest.to_string()),
            "end" => {
                let mut f = rest.split(' ');
                call.end = f.next().and_then(|t| t.parse().ok());
                call.exit_code = f.next().and_then(|c| c.parse().ok());
            }
            _ => {}
        }
    }
    calls.sort_by(|a, b| a.start.total_cmp(&b.start));
    calls
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
