//! keadm-batch: enroll, reset, upgrade and reconfigure KubeEdge edge nodes in bulk over SSH.
//!
//! Data flows one way: `cli -> config -> plan -> stage -> pool(pipeline(transport)) -> report`.
//! Nothing downstream reaches back upstream, and only `cli` knows clap:
//! `python3 scripts/module-graph.py` draws the import graph at every level and fails on a
//! cycle. docs/architecture.md is the map.

mod app;
pub mod arch;
pub mod backoff;
pub mod bundle;
pub mod cancel;
pub mod cert_expiry;
pub mod cli;
pub mod cloudcore;
pub mod cluster;
pub mod cluster_run;
pub mod config;
pub mod console;
pub mod diagnosis;
pub mod digest;
pub mod drain_run;
pub mod dry_run;
pub mod error;
pub mod gen_config;
pub mod http_redirect;
pub mod human;
pub mod image_ref;
pub mod keadm_cmd;
pub mod kit;
pub mod kube_name;
pub mod kubeedge;
pub mod node_text;
pub mod options;
pub mod outcome;
pub mod pace;
pub mod pipeline;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod redact;
pub mod remote;
pub mod report;
pub mod rerun;
pub mod safe_name;
pub mod shell;
pub mod stage;
pub mod status;
pub mod transport;
pub mod utc;
pub mod verify;
pub mod waves;

pub use app::main_with_args;
