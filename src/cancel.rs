//! The operator's request to stop, shared by the signal handler, the pool and every
//! node's pipeline. A leaf: it depends on nothing else in the crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// How far a run has been asked to stop: by the first and second Ctrl-C (or SIGTERM).
#[derive(Debug, Default, Clone)]
pub struct Cancel(Arc<AtomicU8>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// The first request stops starting nodes; the second also stops running commands.
    pub fn request(&self) -> u8 {
        self.0.fetch_add(1, Ordering::SeqCst).saturating_add(1)
    }

    /// No new node may start.
    pub fn stopping(&self) -> bool {
        self.0.load(Ordering::SeqCst) >= 1
    }

    /// Running commands must be cancelled (and killed on their nodes).
    pub fn aborting(&self) -> bool {
        self.0.load(Ordering::SeqCst) >= 2
    }
}
