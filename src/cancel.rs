//! The operator's request to stop, shared by the signal handler, the pool and every
//! node's pipeline. A leaf: it depends on nothing else in the crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

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

    /// Waits `how_long`, or less when the operator asks to stop meanwhile (`--wave-pause`:
    /// the first Ctrl-C ends the wait at once). Returns whether the run is stopping.
    pub fn sleep(&self, how_long: Duration) -> bool {
        let deadline = Instant::now() + how_long;
        while !self.stopping() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_ends_at_the_first_request() {
        let cancel = Cancel::new();
        assert!(!cancel.sleep(Duration::from_millis(1)));
        let asker = cancel.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            asker.request();
        });
        // Ends at the request, long before an hour.
        assert!(cancel.sleep(Duration::from_secs(3600)));
        waker.join().unwrap();
        assert!(cancel.sleep(Duration::from_secs(3600)), "already stopping");
    }
}
