//! Helpers shared by the integration tests. Each test file uses a subset of them.
#![allow(dead_code)]

pub mod fake_release;
pub mod http_server;
