//! Pacing handshakes: at most N SSH handshakes in flight to any one sshd, process-wide.
//!
//! sshd admits at most `MaxStartups` unauthenticated connections (default `10:30:100`:
//! past 10, each new one is dropped with a probability that grows to 100 % at 100), and
//! a dropped connection looks like a network fault. With `maxRunNum` 50 behind one
//! bastion, or many config nodes on one address, a run would open far more than 10
//! handshakes on one sshd at once. So a connection takes a turn (a [`Turn`]) for the
//! endpoint it makes its handshake with, before its TCP connect, and holds it until its
//! authentication succeeds or fails; dropping the turn (also on an error, a timeout or a
//! panic) lets the next waiter in. The key is the endpoint as configured, host and port:
//! a bastion's endpoint while connecting to the bastion, and a node address that several
//! config nodes share counts once. A host reached under two spellings (a name and its
//! address) is paced as two; resolving names here would cost a lookup per node before
//! its turn.

use std::collections::HashMap;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::{ConnectSpec, Endpoint, TransportError};

/// The default limit, below sshd's default `MaxStartups` of 10 (and the 10 of CIS's
/// `10:30:60`), with room for an operator's own logins: mscp's default is the same.
pub const DEFAULT_HANDSHAKES_PER_HOST: usize = 8;

/// The handshakes in flight per endpoint, and the waiters for a turn.
pub(crate) struct Pacer {
    in_flight: Mutex<HashMap<Endpoint, usize>>,
    freed: Condvar,
}

/// One handshake's place at one sshd; dropping it gives the place to the next waiter.
#[must_use = "the turn ends when it is dropped"]
pub(crate) struct Turn<'a> {
    pacer: &'a Pacer,
    key: Endpoint,
}

/// The process's pacer: every run, status and probe of this process shares it, so the
/// limit holds however the connections are started.
static PACER: LazyLock<Pacer> = LazyLock::new(Pacer::new);

/// Waits for `spec`'s turn at its endpoint until `deadline`; past it, the connect
/// deadline's error, saying the node was waiting for its turn.
pub(crate) fn turn(spec: &ConnectSpec, deadline: Instant) -> Result<Turn<'static>, TransportError> {
    let started = Instant::now();
    PACER
        .take(&spec.endpoint, spec.handshakes_per_host, deadline)
        .ok_or_else(|| TransportError::PaceTimeout {
            endpoint: spec.endpoint.clone(),
            limit: spec.handshakes_per_host,
            waited: started.elapsed(),
        })
}

impl Pacer {
    pub(crate) fn new() -> Pacer {
        Pacer {
            in_flight: Mutex::new(HashMap::new()),
            freed: Condvar::new(),
        }
    }

    /// Nothing panics while holding the lock, but a poisoned map is still a valid count.
    fn lock(&self) -> MutexGuard<'_, HashMap<Endpoint, usize>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A turn at `key` once fewer than `limit` (at least 1) are in flight there, or
    /// `None` if `deadline` passes first.
    pub(crate) fn take(&self, key: &Endpoint, limit: usize, deadline: Instant) -> Option<Turn<'_>> {
        let limit = limit.max(1);
        let mut in_flight = self.lock();
        loop {
            let count = in_flight.entry(key.clone()).or_insert(0);
            if *count < limit {
                *count += 1;
                return Some(Turn {
                    pacer: self,
                    key: key.clone(),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            // One condvar for every key: a release wakes all waiters, and those of other
            // keys go back to sleep. Wake-ups are rare next to handshakes (ms each).
            in_flight = self
                .freed
                .wait_timeout(in_flight, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    #[cfg(test)]
    fn in_flight(&self, key: &Endpoint) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.pacer.lock();
        if let Some(count) = in_flight.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.key);
            }
        }
        drop(in_flight);
        self.pacer.freed.notify_all();
    }
}

/// The pace as the dry run says it.
pub fn describe(limit: usize) -> String {
    format!(
        "at most {limit} SSH handshakes in flight to one sshd (--handshakes-per-host; sshd's default MaxStartups admits 10)"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn key(port: u16) -> Endpoint {
        Endpoint::new("127.0.0.1", port)
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn at_most_the_limit_per_endpoint_and_other_endpoints_are_not_held_up() {
        let pacer = Pacer::new();
        let a = pacer.take(&key(1), 2, far()).unwrap();
        let b = pacer.take(&key(1), 2, far()).unwrap();
        assert_eq!(pacer.in_flight(&key(1)), 2);
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(
            pacer.take(&key(1), 2, soon).is_none(),
            "a third turn at a limit of 2"
        );
        // Another sshd has its own count.
        let other = pacer.take(&key(2), 2, soon);
        assert!(other.is_some());
        drop((a, b, other));
        assert_eq!(pacer.in_flight(&key(1)), 0);
        assert_eq!(pacer.in_flight(&key(2)), 0);
    }

    #[test]
    fn a_dropped_turn_lets_a_waiter_in() {
        let pacer = Arc::new(Pacer::new());
        let first = pacer.take(&key(3), 1, far()).unwrap();
        let waiter = {
            let pacer = Arc::clone(&pacer);
            std::thread::spawn(move || {
                let started = Instant::now();
                let turn = pacer.take(&key(3), 1, far());
                (turn.is_some(), started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        let (got, waited) = waiter.join().unwrap();
        assert!(got, "the waiter got the turn once it was free");
        assert!(waited >= Duration::from_millis(90), "{waited:?}");
        assert_eq!(pacer.in_flight(&key(3)), 0);
    }

    #[test]
    fn a_turn_is_given_back_when_its_thread_panics() {
        let pacer = Arc::new(Pacer::new());
        let panicking = {
            let pacer = Arc::clone(&pacer);
            std::thread::spawn(move || {
                let _turn = pacer.take(&key(4), 1, far()).unwrap();
                panic!("a handshake that panics");
            })
        };
        assert!(panicking.join().is_err());
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(pacer.take(&key(4), 1, soon).is_some());
    }

    #[test]
    fn never_more_than_the_limit_at_once_under_contention() {
        let pacer = Arc::new(Pacer::new());
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (pacer, now, peak) = (Arc::clone(&pacer), Arc::clone(&now), Arc::clone(&peak));
                std::thread::spawn(move || {
                    let _turn = pacer.take(&key(5), 3, far()).unwrap();
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_wait_ends_at_the_deadline_and_says_it_was_waiting_for_its_turn() {
        let spec = ConnectSpec {
            endpoint: key(6),
            username: "root".into(),
            auth: crate::transport::Auth::Agent { socket: None },
            host_key_policy: crate::transport::HostKeyPolicy::AcceptNew,
            known_hosts: "/dev/null".into(),
            connect_timeout: Duration::from_secs(1),
            keepalive_secs: 0,
            jump: None,
            jump_connections: 1,
            handshakes_per_host: 1,
        };
        let held = turn(&spec, far()).unwrap();
        let started = Instant::now();
        let Err(err) = turn(&spec, Instant::now() + Duration::from_millis(200)) else {
            panic!("a second turn at a limit of 1");
        };
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        let text = err.to_string();
        assert!(text.contains("waiting for its turn"), "{text}");
        assert!(text.contains("--handshakes-per-host"), "{text}");
        assert!(text.contains("127.0.0.1:6"), "{text}");
        assert!(
            err.is_transient(),
            "a node that waited too long may get its turn on a retry"
        );
        drop(held);
        assert!(turn(&spec, far()).is_ok());
    }
}
