#![allow(dead_code)]

pub mod fake_release;
pub mod http_server;
pub mod test;
