//! The integration tests, one binary: a module per area, the shared fakes and the
//! launcher in `common`. Run one area with `cargo test --test main <area>::`.

mod common;

mod cli;
mod faults;
mod fuzz_regressions;
mod kubeedge;
mod operator;
mod perf_modes;
mod preflight;
mod run;
mod shards;
mod stage;
mod sudo;
mod transport;
