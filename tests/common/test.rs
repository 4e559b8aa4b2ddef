//! A fluent harness for running the keadm-batch binary in a scratch directory, in the
//! manner of just's `Test`: `Test::new().config(..).args(..).run().status(2).stderr_has(..)`.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub struct Test {
    pub dir: TempDir,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Test {
    pub fn new() -> Test {
        let dir = tempfile::Builder::new()
            .prefix("keadm-batch-test")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        Test {
            dir,
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `config.yaml` in the scratch directory.
    pub fn config(self, yaml: &str) -> Test {
        self.file("config.yaml", yaml)
    }

    pub fn file(self, name: &str, contents: &str) -> Test {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, contents).unwrap();
        self
    }

    pub fn args(mut self, args: &[&str]) -> Test {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Test {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The binary, in the scratch dir with its HOME, without this test's arguments.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keadm-batch"));
        cmd.current_dir(self.dir.path())
            .env("HOME", self.dir.path().join("home"))
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run(self) -> Output {
        let out = self.command().args(&self.args).output().unwrap();
        Output {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            test: self,
        }
    }
}

pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    pub test: Test,
}

impl Output {
    pub fn status(self, code: i32) -> Output {
        assert_eq!(
            self.status, code,
            "exit status\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn stderr_has(self, needle: &str) -> Output {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    pub fn stderr_lacks(self, needle: &str) -> Output {
        assert!(
            !self.stderr.contains(needle),
            "stderr has {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    pub fn stdout_has(self, needle: &str) -> Output {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}:\n{}",
            self.stdout
        );
        self
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.test.dir.path().join(name)
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
