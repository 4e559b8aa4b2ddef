//! The keadmCmd template renderer (Go's text/template through gotmpl, with our additions)
//! on arbitrary templates, with a fake lookup that knows a few keys and variables: a
//! rendered text, or an error with a message.
#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use keadm_batch::config::template::{self, Lookup};
use libfuzzer_sys::fuzz_target;

struct FakeLookup(BTreeMap<String, String>);

impl Lookup for FakeLookup {
    fn args(&self) -> &BTreeMap<String, String> {
        &self.0
    }
    fn env(&self, name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("abc.def".to_string()),
            "MULTI" => Some("a\nb 'c'".to_string()),
            "NEXT" => Some("TOKEN".to_string()),
            _ => None,
        }
    }
}

static LOOKUP: LazyLock<FakeLookup> = LazyLock::new(|| {
    let args = [
        ("name", "edge-01"),
        ("cloudcore-ipport", "192.0.2.10:10000"),
        ("empty", ""),
        ("braces", "{{.name}}"),
        ("v", "1.20"),
    ];
    FakeLookup(args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
});

fuzz_target!(|text: &str| {
    // A panic or a hang is what this target hunts; any rendered text is fine.
    if let Err(err) = template::render(text, &*LOOKUP) {
        assert!(!err.message.is_empty(), "an error without a message");
    }
});
