//! Everything a run writes: keadm's `batch_process_log.txt`, the run directory
//! (transcripts, journal, summary), and the console. Only consumes outcomes.

pub mod files;
pub mod findings;
pub mod html;
pub mod json_path;
pub mod junit;
pub mod log;
pub mod merge;
pub mod metrics;
pub mod names;
pub mod next_command;
pub mod progress;
pub mod recap;
pub mod run_dir;
pub mod status;
pub mod stdout;
pub mod summary;
pub mod transcript;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::outcome::NodeOutcome;
use crate::waves::WaveRecord;
use progress::Progress;

pub use run_dir::RunDir;

/// Records each finished node the moment it finishes: one line in keadm's log, one line
/// in the journal, one line on the console. Shared by all workers.
pub struct Recorder {
    inner: Mutex<Inner>,
    /// Outcomes recorded that did not succeed, for `--max-fail` and the canary.
    failures: std::sync::atomic::AtomicUsize,
    quiet: bool,
    progress: Arc<Progress>,
    /// `--metrics FILE`, refreshed as nodes finish.
    pub metrics: metrics::Live,
}

struct Inner {
    log: log::ResultLog,
    journal: run_dir::Journal,
    outcomes: Vec<NodeOutcome>,
    total: usize,
    /// In a rollout in waves: each node's wave, by its index, stamped on its outcome.
    wave_of: HashMap<usize, usize>,
    waves: Vec<WaveRecord>,
}

impl Recorder {
    pub fn new(
        log: log::ResultLog,
        journal: run_dir::Journal,
        total: usize,
        quiet: bool,
        progress: Arc<Progress>,
    ) -> Recorder {
        Recorder {
            inner: Mutex::new(Inner {
                log,
                journal,
                outcomes: Vec::with_capacity(total),
                total,
                wave_of: HashMap::new(),
                waves: Vec::new(),
            }),
            quiet,
            progress,
            metrics: metrics::Live::default(),
            failures: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many recorded outcomes did not succeed.
    pub fn failures(&self) -> usize {
        self.failures.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Writes and flushes the node's result everywhere. A write failure is reported on
    /// the console but does not stop the run: the other records still hold the result.
    pub fn record(&self, outcome: NodeOutcome) {
        let line = self.keep(outcome);
        if let Some(line) = line {
            self.progress.finished(&line);
        }
        self.metrics.node_finished(|| self.outcomes());
    }

    /// Records the nodes a run ended without starting (a stopped rollout, the operator's
    /// Ctrl-C) everywhere as [`Recorder::record`] does, with one console line for all of
    /// them instead of a line each: at scale those lines buried what stopped the run, and
    /// the recap names each of them once.
    pub fn record_not_started(&self, outcomes: Vec<NodeOutcome>) {
        let count = outcomes.len();
        for outcome in outcomes.iter().cloned() {
            self.keep(outcome);
        }
        if count > 0 {
            let (done, total) = {
                let inner = self.lock();
                (inner.outcomes.len(), inner.total)
            };
            // With -q there is no recap to name them, so this line does.
            let line = recap::not_started_line(&outcomes, done, total, self.quiet);
            self.progress.finished_many(count, &line);
            self.metrics.node_finished(|| self.outcomes());
        }
    }

    /// Writes the node's result to the log and the journal and keeps it; its console
    /// line, unless `-q` hides it.
    fn keep(&self, mut outcome: NodeOutcome) -> Option<String> {
        if !outcome.succeeded() {
            self.failures
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&wave) = inner.wave_of.get(&outcome.index) {
            outcome.wave = Some(wave);
        }
        if let Err(err) = inner.log.append(&outcome) {
            ::log::error!(
                "Could not write to batch_process_log.txt: {err}. Node {}'s result is still in the journal and summary.json.",
                outcome.name
            );
        }
        if let Err(err) = inner.journal.append(&outcome) {
            ::log::error!(
                "Could not write to the journal: {err}. Node {}'s result is still in batch_process_log.txt and summary.json.",
                outcome.name
            );
        }
        inner.outcomes.push(outcome);
        let done = inner.outcomes.len();
        let total = inner.total;
        let last = inner.outcomes.last().expect("just pushed");
        let show = !self.quiet || !last.succeeded();
        show.then(|| recap::node_line(last, done, total))
    }

    /// All outcomes so far, in config order.
    pub fn outcomes(&self) -> Vec<NodeOutcome> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = inner.outcomes.clone();
        all.sort_by_key(|o| o.index);
        all
    }

    pub fn recorded(&self, index: usize) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.outcomes.iter().any(|o| o.index == index)
    }

    /// How many outcomes are recorded so far.
    pub fn recorded_count(&self) -> usize {
        self.lock().outcomes.len()
    }

    /// A rollout in waves: the wave of each node (by index), recorded with its outcome.
    pub fn assign_waves(&self, wave_of: HashMap<usize, usize>) {
        self.lock().wave_of = wave_of;
    }

    /// A wave starts: the status line shows it, and `line` says so (not with -q).
    pub fn wave_started(&self, number: usize, last: usize, line: &str) {
        self.progress.wave(number, last);
        self.note(line);
    }

    /// A line of the run's own on the console, not with -q.
    pub fn note(&self, line: &str) {
        if !self.quiet {
            self.progress.note(line);
        }
    }

    /// What became of each wave, for summary.json and the recap.
    pub fn set_waves(&self, waves: Vec<WaveRecord>) {
        self.lock().waves = waves;
    }

    pub fn waves(&self) -> Vec<WaveRecord> {
        self.lock().waves.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
