//! The integration tests, one binary: a module per area, the shared fakes and the
//! launcher in `common`. Run one area with `cargo test --test main <area>::`.

// The tests print freely: a closed console there only fails the test that printed.
#![allow(clippy::disallowed_macros)]

mod common;

mod airgap;
mod archive_names;
mod bundle;
mod cli;
mod cloud_capacity_e2e;
mod cloud_e2e;
mod cloud_upgrade_e2e;
mod cluster;
mod cluster_capacity;
mod cluster_drain;
mod cluster_extras;
mod docs;
mod faults;
mod fuzz_regressions;
mod gen_config;
mod hostile;
mod jump_hub;
mod junit;
mod keadm_e2e;
mod kubeedge;
mod labels;
mod labels_e2e;
mod metrics;
mod operator;
mod pacing;
mod perf_modes;
mod preflight;
mod preflight_edge;
mod relay;
mod relay_home;
mod report;
mod reset_verified;
mod run;
mod shards;
mod stage;
mod status;
mod sudo;
mod template_go;
mod transport;
mod upgrade;
mod waves;

/// Cargo builds this one binary only (`autotests = false` in Cargo.toml), so a file in
/// tests/ that is not declared above would never be compiled or run.
#[test]
fn every_file_in_tests_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let module = path.file_stem().unwrap().to_string_lossy();
        if module != "main" {
            files += 1;
            assert!(
                main.contains(&format!("\nmod {module};\n")),
                "tests/{module}.rs is not declared in tests/main.rs, so it never runs. Add `mod {module};` there."
            );
        }
    }
    assert!(
        files >= 12,
        "only {files} test files were found in {}",
        dir.display()
    );
}
