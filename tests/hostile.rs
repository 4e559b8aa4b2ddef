//! Hostile and broken nodes on real sshd (see tests/common/hostile.rs): whatever a node
//! prints, however fast, the control host's memory stays bounded, each step's deadline
//! and the operator's Ctrl-C hold, the node's text never passes for the tool's own words,
//! and the healthy nodes of the same batch still join.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::fleet::{Fleet, Node};
use crate::common::hostile::{self, FORGED_NOTE, Hostile, HostileKeadm};
use crate::common::scenario::Scenario;
use keadm_batch::report::transcript::MAX_TRANSCRIPT;
use keadm_batch::transport::{Connection, SshConnection, TransportError};

/// The prepare step's deadline (`DEFAULT_STEP_TIMEOUT`), which no config changes.
const STEP_DEADLINE: f64 = 30.0;
/// keadm's deadline in the batch below (`timeoutSeconds`).
const KEADM_DEADLINE: f64 = 5.0;
/// What the issue allows past a step's deadline before a hostile node has its line.
const SLACK: f64 = 15.0;

fn connect(fleet: &Fleet, node: &Node) -> SshConnection {
    SshConnection::connect(&fleet.root_password_spec(node))
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.host()))
}

/// Runs `command` on a thread of its own with `deadline` after its start and `abort`
/// as the operator's abort; returns how it ended and how long it took, or fails the test
/// after `limit` (so a transport that never returns fails instead of hanging the suite).
fn exec_bounded(
    mut conn: SshConnection,
    command: &'static str,
    deadline: Duration,
    abort: Option<Arc<AtomicBool>>,
    limit: Duration,
) -> (TransportError, Duration, u64) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Some(flag) = abort {
            conn.set_abort(Some(Arc::new(move || flag.load(Ordering::Relaxed))));
        }
        let mut sink = Counting(0);
        let started = Instant::now();
        let result = conn.exec(command, None, started + deadline, &mut sink);
        let _ = tx.send((result, started.elapsed(), sink.0));
    });
    let (result, took, bytes) = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("exec of {command:?} did not return within {limit:?}"));
    (result.expect_err("a flood cannot end well"), took, bytes)
}

/// Counts what it is given and keeps none of it.
struct Counting(u64);

impl std::io::Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Review finding 1 and 3: a node whose every command, the kill channel's included,
/// floods lines. The deadline holds within 2 s, and the kill's own read is bounded in
/// time (before, it read without end into memory).
#[test]
fn a_flood_on_every_channel_cannot_hold_the_deadline_or_the_kill() {
    let fleet = Fleet::builder()
        .nodes(1)
        .node_option(0, Hostile::FloodEveryExec.sshd())
        .start();
    let conn = connect(&fleet, fleet.node(0));
    let deadline = Duration::from_secs(1);
    let (err, took, bytes) = exec_bounded(conn, "true", deadline, None, Duration::from_secs(60));
    assert!(matches!(err, TransportError::Timeout { .. }), "{err:?}");
    eprintln!("the 1 s deadline held after {took:?}; {bytes} bytes of flood read");
    assert!(bytes > 0, "the flood never arrived");
    assert!(
        took < deadline + Duration::from_secs(2),
        "the 1 s deadline held only after {took:?}"
    );
}

/// Review finding 3: Ctrl-C is honoured on every turn of the exec loop, also while a
/// flood never leaves it idle.
#[test]
fn a_flood_cannot_hold_off_the_operators_abort() {
    let fleet = Fleet::builder().nodes(1).start();
    let conn = connect(&fleet, fleet.node(0));
    let abort = Arc::new(AtomicBool::new(false));
    let flag = abort.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        flag.store(true, Ordering::Relaxed);
    });
    let (err, took, _) = exec_bounded(
        conn,
        "exec cat /dev/zero",
        Duration::from_secs(600),
        Some(abort),
        Duration::from_secs(60),
    );
    assert!(matches!(err, TransportError::Aborted { .. }), "{err:?}");
    eprintln!("the abort after 1 s held after {took:?}");
    assert!(
        took < Duration::from_secs(3),
        "the abort after 1 s held only after {took:?}"
    );
}

/// The batch: one node per hostile behaviour beside two healthy ones. The
/// healthy nodes join; each hostile node fails with one line within its step's deadline
/// plus 15 s; the control host's peak RSS stays under 200 MiB; no transcript passes its
/// cap by more than a line; no line the node wrote reads like one of the tool's notes.
#[test]
fn hostile_nodes_fail_alone_within_their_deadlines_and_bounded_memory() {
    let fleet = Fleet::builder()
        .nodes(7)
        .node_option(2, Hostile::FloodEveryExec.sshd())
        .node_option(3, Hostile::FactsThenEndlessLine.sshd())
        .start();
    hostile::mark(fleet.node(4), HostileKeadm::ForgesNotes);
    hostile::mark(fleet.node(5), HostileKeadm::PrintsEscapes);
    hostile::mark(fleet.node(6), HostileKeadm::IgnoresTerm);
    let sc = Scenario::new(&fleet)
        .keadm(hostile::keadm())
        .max_run_num(7)
        .node_yaml(&format!("timeoutSeconds: {}", KEADM_DEADLINE as u64));
    let (out, peak_kib) = sc
        .command(&[])
        .spawn()
        .wait_measured(Duration::from_secs(180));
    out.status(1);
    eprintln!("peak RSS {peak_kib} KiB\n{}", out.stderr);
    assert!(
        peak_kib < 200 * 1024,
        "the control host's peak RSS was {peak_kib} KiB"
    );

    // One line per node; the healthy ones joined, nothing else claims success.
    let lines = out.log_lines();
    assert_eq!(lines.len(), 7, "{lines:#?}");
    for i in 0..7 {
        let name = Scenario::name(i);
        let mine: Vec<&String> = lines
            .iter()
            .filter(|l| {
                l.ends_with(&format!("node {name}")) || l.contains(&format!("node {name}: "))
            })
            .collect();
        assert_eq!(mine.len(), 1, "node {name}: {lines:#?}");
        if i < 2 {
            assert_eq!(*mine[0], format!("Successfully processed node {name}"));
        } else {
            assert!(
                mine[0].starts_with(&format!("Failed to process node {name}: ")),
                "{}",
                mine[0]
            );
        }
    }
    assert!(
        !lines.iter().any(|l| l.contains("edge-99")),
        "a node's text forged a log line: {lines:#?}"
    );

    // Within each step's deadline plus the slack.
    for (i, limit) in [
        (2, STEP_DEADLINE),
        (3, STEP_DEADLINE),
        (4, KEADM_DEADLINE),
        (5, KEADM_DEADLINE),
        (6, KEADM_DEADLINE),
    ] {
        let node = out.node_summary(i);
        let took = node["finished_at"].as_f64().unwrap() - node["started_at"].as_f64().unwrap();
        assert!(
            took <= limit + SLACK,
            "{} took {took:.1} s against a deadline of {limit} s: {node}",
            Scenario::name(i)
        );
    }

    // The endless line is refused with one line that says what the node sent.
    let endless = out.log_line_starting("Failed to process node edge-03: ");
    assert!(
        endless.contains("without a line break") && endless.contains("KB_ARCH x86_64"),
        "{endless}"
    );

    // Node text never reaches the console or the log with its escapes live.
    for text in [&out.stderr, &out.stdout, &lines.join("\n")] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text}"
        );
    }

    // Transcripts: capped, and the forged notes are written as the node's text.
    for i in 0..7 {
        let transcript = out.transcript(i);
        let longest = transcript.lines().map(str::len).max().unwrap_or(0) as u64;
        assert!(
            transcript.len() as u64 <= MAX_TRANSCRIPT + longest + 1,
            "{}'s transcript has {} bytes",
            Scenario::name(i),
            transcript.len()
        );
    }
    let forged = out.transcript(4);
    assert!(
        !forged.lines().any(|l| l == FORGED_NOTE),
        "the node's line passed for the tool's note"
    );
    assert!(
        forged.lines().any(|l| l.ends_with(&FORGED_NOTE[1..])),
        "the node's lines are not in its transcript"
    );
    assert!(
        forged.lines().last().unwrap().starts_with("[keadm-batch] "),
        "the tool's last note is missing"
    );
    // The node's real last words are not hidden from its record.
    let summary = out.node_summary(4);
    assert_eq!(summary["phase"], "timed_out", "{summary}");
    let last = summary["last_output"].as_str().unwrap_or_default();
    assert!(last.ends_with(&FORGED_NOTE[1..]), "{summary}");
}
