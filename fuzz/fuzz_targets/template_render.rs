//! The keadmCmd template renderer on arbitrary templates, with a fake lookup that knows a
//! few keys and variables: a rendered text or an error at an offset inside the template.
#![no_main]

use keadm_batch::config::template::{self, Lookup};
use libfuzzer_sys::fuzz_target;

struct FakeLookup;

impl Lookup for FakeLookup {
    fn arg(&self, key: &str) -> Option<&str> {
        match key {
            "name" => Some("edge-01"),
            "cloudcore-ipport" => Some("192.0.2.10:10000"),
            "empty" => Some(""),
            "braces" => Some("{{.name}}"),
            _ => None,
        }
    }
    fn env(&self, name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("abc.def".to_string()),
            "MULTI" => Some("a\nb 'c'".to_string()),
            _ => None,
        }
    }
}

fuzz_target!(|text: &str| {
    match template::render(text, &FakeLookup) {
        // A panic is what this target hunts; any rendered text is fine.
        Ok(_) => {}
        Err(err) => assert!(
            err.offset <= text.len(),
            "error offset {} is past the end of a {}-byte template",
            err.offset,
            text.len()
        ),
    }
});
