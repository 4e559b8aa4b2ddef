//! The YAML tree builder on arbitrary text: a syntax error or a tree, never a panic.
#![no_main]

use keadm_batch::config::yaml;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = yaml::parse(text);
});
