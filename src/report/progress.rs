//! The live console: on a terminal, one status line (counts by phase, nodes per minute,
//! ETA, the slowest running nodes) under the per-node result lines; elsewhere, plain
//! timestamped lines. Log records go through [`ConsoleWriter`] so they never tear the
//! status line. Every line goes through [`crate::console`], so a closed stderr ends none
//! of it.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::console::console_line;
use crate::outcome::Phase;

/// Every bar on stderr draws through this one target: the status line, and the bar of a
/// download staged before or during the run (staging takes it as its progress target), so
/// they share the bottom lines instead of overwriting each other.
pub fn console() -> MultiProgress {
    static CONSOLE: OnceLock<MultiProgress> = OnceLock::new();
    CONSOLE
        .get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4)))
        .clone()
}

/// The status line in use, if any, so log records and result lines print above it.
fn active_bar() -> &'static Mutex<Option<ProgressBar>> {
    static BAR: OnceLock<Mutex<Option<ProgressBar>>> = OnceLock::new();
    BAR.get_or_init(|| Mutex::new(None))
}

/// Prints a line on stderr above the status line (or plainly when there is none).
pub fn println(line: &str) {
    let bar = active_bar()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    match bar {
        Some(bar) => bar.println(line),
        None => crate::console::line(line),
    }
}

/// stderr for env_logger: records print above the status line.
pub struct ConsoleWriter;

impl Write for ConsoleWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let bar = active_bar()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match bar {
            Some(bar) => {
                bar.suspend(|| crate::console::write(buf));
            }
            None => crate::console::write(buf),
        }
        // A record the console could not show is still a record written: the run's own
        // files keep what matters, and a logger that failed would only be noise.
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Every write above flushed already.
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct NodeState {
    name: String,
    phase: Phase,
    since: Instant,
}

/// Where every node is. The pipeline reports phase changes here; the status line and
/// nothing else reads it.
pub struct Progress {
    total: usize,
    started: Instant,
    nodes: Mutex<Vec<Option<NodeState>>>,
    finished: Mutex<usize>,
    /// In a rollout in waves: the wave under way and the last wave's number.
    wave: Mutex<Option<(usize, usize)>>,
    /// Joins waiting for their turn (`--joins-in-flight`), started by a worker but not yet.
    waiting_for_turn: Mutex<usize>,
    bar: Option<ProgressBar>,
    stop: Arc<AtomicBool>,
    ticker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Progress {
    /// A status line on stderr when `live` (a terminal, not quiet); otherwise silent.
    pub fn new(total: usize, slots: usize, live: bool) -> Arc<Progress> {
        let bar = live.then(|| {
            let bar = console().add(ProgressBar::new(total as u64));
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        if let Some(bar) = &bar {
            *active_bar().lock().unwrap_or_else(|e| e.into_inner()) = Some(bar.clone());
        }
        let progress = Arc::new(Progress {
            total,
            started: Instant::now(),
            nodes: Mutex::new(vec![None; slots]),
            finished: Mutex::new(0),
            wave: Mutex::new(None),
            waiting_for_turn: Mutex::new(0),
            bar,
            stop: Arc::new(AtomicBool::new(false)),
            ticker: Mutex::new(None),
        });
        if progress.bar.is_some() {
            let weak = Arc::downgrade(&progress);
            let stop = progress.stop.clone();
            let handle = std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match weak.upgrade() {
                        Some(p) => p.redraw(),
                        None => break,
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
            *progress.ticker.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        }
        progress
    }

    /// Node `index` (its position in the config) entered `phase`.
    pub fn phase(&self, index: usize, name: &str, phase: Phase) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if index >= nodes.len() {
            nodes.resize(index + 1, None);
        }
        if phase.is_final() {
            nodes[index] = None;
        } else {
            nodes[index] = Some(NodeState {
                name: name.to_string(),
                phase,
                since: Instant::now(),
            });
        }
    }

    /// A node finished; `line` is its result line.
    pub fn finished(&self, line: &str) {
        self.finished_many(1, line);
    }

    /// `count` nodes finished together (those a stopped run never started); `line` says
    /// so for all of them.
    pub fn finished_many(&self, count: usize, line: &str) {
        let done = {
            let mut finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
            *finished += count;
            *finished
        };
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.set_position(done as u64);
            }
            None => console_line!("{} {line}", timestamp()),
        }
    }

    /// Wave `number` of `last` has started.
    pub fn wave(&self, number: usize, last: usize) {
        *self.wave.lock().unwrap_or_else(|e| e.into_inner()) = Some((number, last));
    }

    /// `count` joins wait for their turn to start (`--joins-in-flight`).
    pub fn waiting_for_turn(&self, count: usize) {
        *self
            .waiting_for_turn
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = count;
    }

    /// A line of the run's own (a wave starts, a pause), printed as result lines are.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => console_line!("{} {line}", timestamp()),
        }
    }

    /// The status text: counts by phase, rate, ETA, slowest running nodes.
    pub fn status(&self) -> String {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let finished = *self.finished.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = [0usize; 4];
        let mut verifying = 0usize;
        let mut draining = 0usize;
        let mut running: Vec<&NodeState> = Vec::new();
        for state in nodes.iter().flatten() {
            match state.phase {
                Phase::Connecting => counts[0] += 1,
                Phase::Preparing => counts[1] += 1,
                Phase::Uploading => counts[2] += 1,
                Phase::Running => counts[3] += 1,
                Phase::Verifying => verifying += 1,
                Phase::Draining => draining += 1,
                _ => {}
            }
            running.push(state);
        }
        running.sort_by_key(|s| s.since);
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = finished as f64 / elapsed * 60.0;
        let wave = *self.wave.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = wave
            .map(|(number, last)| format!("wave {number}/{last} · "))
            .unwrap_or_default();
        // Only --drain runs have nodes in this phase.
        if draining > 0 {
            text.push_str(&format!("draining {draining} · "));
        }
        // Only runs whose joins outnumber --joins-in-flight have joins waiting here.
        let turn = *self
            .waiting_for_turn
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if turn > 0 {
            text.push_str(&format!("waiting for a join slot {turn} · "));
        }
        text.push_str(&format!(
            "connecting {} · preparing {} · uploading {} · running {}",
            counts[0], counts[1], counts[2], counts[3]
        ));
        // Only runs that verify joins in the cluster have nodes in this phase.
        if verifying > 0 {
            text.push_str(&format!(" · waiting for Ready {verifying}"));
        }
        text.push_str(&format!(" | {rate:.0}/min"));
        if finished > 0 && finished < self.total {
            let eta = (self.total - finished) as f64 / (finished as f64 / elapsed);
            text.push_str(&format!(" | ETA {}", crate::human::duration(eta)));
        }
        let slowest: Vec<String> = running
            .iter()
            .take(3)
            .filter(|s| s.since.elapsed() > Duration::from_secs(5))
            .map(|s| {
                format!(
                    "{} {} {}",
                    s.name,
                    s.phase.as_str(),
                    crate::human::duration(s.since.elapsed().as_secs_f64())
                )
            })
            .collect();
        if !slowest.is_empty() {
            text.push_str(&format!(" | slowest: {}", slowest.join(", ")));
        }
        text
    }

    fn redraw(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(self.status());
            bar.tick();
        }
    }

    /// Removes the status line; later output prints plainly.
    pub fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.ticker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = handle.join();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            *active_bar().lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// `01:02:03` UTC, for plain lines.
fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rem = secs % 86_400;
    format!("{:02}:{:02}:{:02}", rem / 3600, (rem / 60) % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counts_phases() {
        let p = Progress::new(4, 4, false);
        p.phase(0, "a", Phase::Connecting);
        p.phase(1, "b", Phase::Running);
        p.phase(2, "c", Phase::Running);
        p.phase(2, "c", Phase::Succeeded);
        p.finished("[1/4] ok c");
        let status = p.status();
        assert!(
            status.starts_with("connecting 1 · preparing 0 · uploading 0 · running 1"),
            "{status}"
        );
        assert!(status.contains("ETA"), "{status}");
        p.wave(2, 4);
        let status = p.status();
        assert!(status.starts_with("wave 2/4 · connecting 1 ·"), "{status}");
        p.waiting_for_turn(3);
        let status = p.status();
        assert!(
            status.starts_with("wave 2/4 · waiting for a join slot 3 · connecting 1 ·"),
            "{status}"
        );
        p.finish();
    }
}
