//! Shared helpers for the integration tests, compiled once into the one test binary.

pub mod apiserver;
pub mod browser;
pub mod cloudcore;
pub mod containerd;
pub mod edge_state;
pub mod fake_keadm;
pub mod fake_release;
pub mod fake_upgrade;
pub mod fleet;
pub mod hostile;
pub mod hostile_registry;
pub mod http_server;
pub mod image_archive;
pub mod lan;
pub mod pod;
pub mod real_cloud;
pub mod registry;
pub mod scenario;
pub mod ssh_agent;
pub mod test;

/// The test's own uid (the owner the binary expects of its own files and directories).
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
