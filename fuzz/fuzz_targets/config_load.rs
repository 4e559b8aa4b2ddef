//! The config loader on arbitrary text: `load::read`, then validation (which renders
//! `keadmCmd` templates) against a fixed, fake environment. Diagnostics, never a panic.
#![no_main]

use std::path::{Path, PathBuf};

use keadm_batch::config::{load, validate};
use libfuzzer_sys::fuzz_target;

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

fuzz_target!(|text: &str| {
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
});
