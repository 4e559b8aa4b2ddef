//! Inputs for the fuzz targets (fuzz/fuzz_targets/) that must keep working: every file
//! under tests/fixtures/fuzz/<target>/ runs through the same code as that target, plus a
//! few generated hostile inputs too large for the fuzzer's length limit. A crash found by
//! scripts/fuzz.sh is copied there (named after what it broke) before it is fixed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keadm_batch::config::template::{self, Lookup};
use keadm_batch::config::{load, validate, yaml};

struct FakeEnv;

impl validate::Environment for FakeEnv {
    fn var(&self, name: &str) -> Option<String> {
        (name == "EDGE_TOKEN").then(|| "fuzz-token".to_string())
    }
    fn home(&self) -> Option<PathBuf> {
        Some(PathBuf::from("/nonexistent/fuzz-home"))
    }
    fn current_dir(&self) -> PathBuf {
        PathBuf::from("/nonexistent/fuzz-cwd")
    }
}

/// What fuzz/fuzz_targets/config_load.rs does.
fn config_load(text: &str) {
    let path = Path::new("/nonexistent/fuzz-cwd/config.yaml");
    let mut diags = Vec::new();
    match load::read(text, &mut diags) {
        Ok(raw) => {
            let _ = validate::validate(raw, path, &FakeEnv, &mut diags);
        }
        Err(syntax) => diags.push(syntax),
    }
    for diag in &diags {
        let _ = diag.render(path);
    }
}

struct FakeArgs(BTreeMap<String, String>);

impl Lookup for FakeArgs {
    fn args(&self) -> &BTreeMap<String, String> {
        &self.0
    }
    fn env(&self, name: &str) -> Option<String> {
        (name == "EDGE_TOKEN").then(|| "fuzz-token".to_string())
    }
}

/// What fuzz/fuzz_targets/template_render.rs checks.
fn template_render(text: &str) {
    let args = FakeArgs([("name".to_string(), "edge-01".to_string())].into());
    if let Err(err) = template::render(text, &args) {
        assert!(!err.message.is_empty(), "an error without a message");
    }
}

fn fixtures(target: &str) -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(target);
    let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let bytes = std::fs::read(e.path()).unwrap();
                    (e.path(), String::from_utf8_lossy(&bytes).into_owned())
                })
                .collect()
        })
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files.sort();
    files
}

/// Runs `f` on `input` and fails if it takes longer than `limit` (a hang the fuzzer's
/// own timeout would report).
fn quickly(what: &str, limit: Duration, f: impl FnOnce()) {
    let started = Instant::now();
    f();
    assert!(
        started.elapsed() < limit,
        "{what} took {:?}",
        started.elapsed()
    );
}

#[test]
fn yaml_fixtures_parse_or_fail_cleanly() {
    for (path, text) in fixtures("yaml_parse") {
        quickly(&path.display().to_string(), Duration::from_secs(5), || {
            let _ = yaml::parse(&text);
        });
    }
}

#[test]
fn config_fixtures_load_or_fail_cleanly() {
    for (path, text) in fixtures("config_load") {
        quickly(&path.display().to_string(), Duration::from_secs(5), || {
            config_load(&text)
        });
    }
}

#[test]
fn template_fixtures_render_or_fail_cleanly() {
    for (path, text) in fixtures("template_render") {
        quickly(&path.display().to_string(), Duration::from_secs(5), || {
            template_render(&text)
        });
    }
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    for (open, close) in [("[", "]"), ("{", "}"), ("- ", "")] {
        let text = format!("{}x{}", open.repeat(100_000), close.repeat(100_000));
        quickly("deep nesting", Duration::from_secs(10), || {
            let _ = yaml::parse(&text);
            config_load(&text);
        });
    }
}

#[test]
fn alias_bombs_are_refused() {
    let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..12 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        text.push_str(&format!(
            "l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        ));
    }
    quickly("an alias bomb", Duration::from_secs(10), || {
        assert!(
            yaml::parse(&text).is_err(),
            "a 10^13-node document was accepted"
        );
        config_load(&text);
    });
}
