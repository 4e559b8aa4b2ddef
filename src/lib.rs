//! keadm-batch: enroll, reset, upgrade and reconfigure KubeEdge edge nodes in bulk over SSH.
//!
//! Data flows one way: `cli -> config -> plan -> stage -> pool(pipeline(transport)) -> report`.
//! Nothing downstream reaches back upstream, and only `cli` knows clap.

pub mod redact;
pub mod transport;
