//! Shared helpers for the integration tests. Each test binary uses only part of them.
#![allow(dead_code)]

pub mod fake_keadm;
pub mod fleet;
