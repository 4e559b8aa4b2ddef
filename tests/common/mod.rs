//! Shared helpers for the integration tests. Each test binary uses only part of them.
#![allow(dead_code)]

pub mod cloudcore;
pub mod fake_keadm;
pub mod fake_release;
pub mod fleet;
pub mod http_server;
pub mod scenario;
pub mod test;
