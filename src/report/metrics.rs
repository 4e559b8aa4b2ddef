//! `--metrics FILE`: the run in Prometheus' text exposition format, for node_exporter's
//! textfile collector (docs/summary.md, "Prometheus metrics"). Made from the summary, so
//! it says what summary.json says. The encoding (escaping, numbers, histogram layout) is
//! the `prometheus-client` crate's (docs/decisions.md).
//!
//! Only our own enums (phase, failure class) and the run's id and config path become label
//! values: a node's name or text never does, so a fleet cannot blow up the series count.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::summary::{FINAL_PHASES, Summary, counted_as};
use crate::diagnosis::FailureClass;
use crate::outcome::{NodeOutcome, SiteTraffic};

/// Seconds, for SSH work: a connect takes a tenth of a second on a LAN, a keadm join
/// or an upload over a thin uplink minutes.
const BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0,
];

type Labels = Vec<(&'static str, String)>;

/// The seconds a node spent in one step, if it reached it.
type StepSeconds = fn(&NodeOutcome) -> Option<f64>;

/// Series of one family in a fixed order. (The crate's `Family` keeps a hash map, whose
/// order changes from one write to the next; a file an operator diffs should not.)
#[derive(Debug)]
struct Ordered<M> {
    series: Vec<(Labels, M)>,
    kind: MetricType,
}

impl<M: EncodeMetric> EncodeMetric for Ordered<M> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        for (labels, metric) in &self.series {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

/// A counter of this run, in the Prometheus text format. The crate writes OpenMetrics,
/// whose counter family `x` has the sample `x_total`; the Prometheus text parsers (the
/// textfile collector's, Python's `prometheus_client.parser`) then see an untyped
/// `x_total` beside an empty counter `x`. Registered under its full `_total` name and
/// written as a plain sample, it is the counter those parsers expect.
#[derive(Debug)]
struct RunCounter(u64);

impl EncodeMetric for RunCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_gauge(&self.0)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

fn gauge(value: i64) -> Gauge {
    let g = Gauge::default();
    g.set(value);
    g
}

fn seconds(value: f64) -> Gauge<f64, std::sync::atomic::AtomicU64> {
    let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    g.set(value);
    g
}

/// What the exposition is made of: a finished run's summary, or a run still going.
struct Run<'a> {
    run_id: &'a str,
    config: &'a str,
    started_at: f64,
    /// `None` while the run goes: no end timestamp yet.
    finished_at: Option<f64>,
    /// The nodes finished so far.
    nodes: &'a [NodeOutcome],
    /// `None` while the run goes: the relay counts the sites' traffic at its end.
    sites: Option<&'a [SiteTraffic]>,
}

/// The exposition of this summary.
pub fn render(summary: &Summary) -> String {
    render_run(&Run {
        run_id: &summary.run_id,
        config: &summary.config,
        started_at: summary.started_at,
        finished_at: Some(summary.finished_at),
        nodes: &summary.nodes,
        sites: Some(&summary.sites),
    })
}

fn render_run(run: &Run) -> String {
    let mut registry = Registry::default();
    let nodes = run.nodes;

    let by_phase = FINAL_PHASES.map(|phase| {
        let n = nodes
            .iter()
            .filter(|o| counted_as(o.phase) == phase)
            .count();
        (vec![("phase", phase.as_str().to_string())], gauge(n as i64))
    });
    registry.register(
        "keadm_batch_nodes",
        "Nodes of this run by final phase",
        Ordered {
            series: by_phase.into(),
            kind: MetricType::Gauge,
        },
    );

    let by_class = FailureClass::ALL.map(|class| {
        let n = nodes
            .iter()
            .filter(|o| o.failure_class == Some(class))
            .count();
        (vec![("class", class.as_str().to_string())], gauge(n as i64))
    });
    registry.register(
        "keadm_batch_node_failures",
        "Nodes of this run that did not succeed, by failure class",
        Ordered {
            series: by_class.into(),
            kind: MetricType::Gauge,
        },
    );

    let steps: [(&str, StepSeconds); 5] = [
        ("connect", |o| o.steps.connect),
        ("prepare", |o| o.steps.prepare),
        ("upload", |o| o.steps.upload),
        ("run", |o| o.steps.run),
        ("ready", |o| o.cluster.as_ref().and_then(|c| c.ready_after)),
    ];
    let durations = steps.map(|(phase, secs)| {
        let histogram = Histogram::new(BUCKETS);
        nodes
            .iter()
            .filter_map(secs)
            .for_each(|s| histogram.observe(s));
        (vec![("phase", phase.to_string())], histogram)
    });
    registry.register(
        "keadm_batch_phase_duration_seconds",
        "Seconds each node spent in each step it reached (ready: from keadm's exit to its Node Ready)",
        Ordered {
            series: durations.into(),
            kind: MetricType::Histogram,
        },
    );
    // keadm join exits only after edgecore ran a while, so `ready` above is often 0: the
    // time from the node's start to its Node Ready is the time a node takes to come up.
    let from_start = Histogram::new(BUCKETS);
    nodes
        .iter()
        .filter_map(|o| o.cluster.as_ref()?.ready_after_start)
        .for_each(|s| from_start.observe(s));
    registry.register(
        "keadm_batch_node_ready_seconds",
        "Seconds from each node's start (its connect) to its Node Ready in the cluster",
        from_start,
    );

    registry.register(
        "keadm_batch_uploaded_bytes_total",
        "Bytes this machine uploaded to the nodes",
        RunCounter(nodes.iter().map(|o| o.bytes_uploaded).sum()),
    );
    if let Some(sites) = run.sites {
        registry.register(
            "keadm_batch_relayed_bytes_total",
            "Bytes the nodes of a site copied from each other (--relay auto)",
            RunCounter(sites.iter().map(|s| s.peer_bytes).sum()),
        );
    }
    registry.register(
        "keadm_batch_run_start_timestamp_seconds",
        "When the run started, in seconds since the Unix epoch",
        seconds(run.started_at),
    );
    if let Some(finished_at) = run.finished_at {
        registry.register(
            "keadm_batch_run_end_timestamp_seconds",
            "When the run ended, in seconds since the Unix epoch",
            seconds(finished_at),
        );
    }
    registry.register(
        "keadm_batch_run_info",
        "The run: its id and config file",
        Ordered {
            series: vec![(
                vec![
                    ("run_id", run.run_id.to_string()),
                    ("config", run.config.to_string()),
                ],
                gauge(1),
            )],
            kind: MetricType::Gauge,
        },
    );

    let mut out = String::new();
    // Writing into a String cannot fail, and every metric above encodes.
    let _ = text::encode(&mut out, &registry);
    out
}

/// Writes the exposition to `path` atomically: a temporary file in the same directory,
/// then a rename, so node_exporter never reads half a file. The temporary name does not
/// end in `.prom`, which the collector would read.
///
/// Mode 0644, not the run directory's owner-only 0600: node_exporter usually runs as its
/// own user, and the file holds only counts, times, the run id and the config's path (no
/// node name, address or secret).
pub fn write(summary: &Summary, path: &Path) -> io::Result<()> {
    write_text(&render(summary), path)
}

fn write_text(text: &str, path: &Path) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} names no file", path.display())))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)?;
    // The umask may have taken bits off.
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// How often the file is rewritten while the run goes, at most.
const REFRESH: Duration = Duration::from_secs(10);

/// `--metrics FILE` for the whole run: written as the run starts, again when a node
/// finishes and the last write is 10 s old, and for the last time from the summary.
/// Between the first and the last write the file has no end timestamp and no relayed
/// bytes (the relay counts them at the end). The writes are made by the worker whose
/// node just finished, one at a time (`try_lock`: a worker never waits for another's
/// write), and the final write holds the lock, so no live write runs after it.
#[derive(Default)]
pub struct Live {
    state: Mutex<Option<LiveState>>,
}

struct LiveState {
    path: PathBuf,
    run_id: String,
    config: String,
    started_at: f64,
    last: Instant,
    /// A failed write is said once, not every 10 s.
    said_failure: bool,
}

impl LiveState {
    fn write(&mut self, text: &str) {
        self.last = Instant::now();
        if let Err(e) = write_text(text, &self.path) {
            if !self.said_failure {
                log::error!(
                    "Could not write the metrics file {}: {e}. Check that its directory exists and is writable; the run's results are in its summary.json all the same.",
                    self.path.display()
                );
            }
            self.said_failure = true;
        }
    }
}

impl Live {
    /// With `--metrics FILE` (`path`): the first write, with no node finished yet.
    pub fn start(&self, path: Option<&Path>, run_id: &str, config: &Path, started_at: f64) {
        let Some(path) = path else { return };
        let mut state = LiveState {
            path: path.to_path_buf(),
            run_id: run_id.to_string(),
            config: config.display().to_string(),
            started_at,
            last: Instant::now(),
            said_failure: false,
        };
        state.write(&render_run(&Run {
            run_id: &state.run_id,
            config: &state.config,
            started_at,
            finished_at: None,
            nodes: &[],
            sites: None,
        }));
        *self.lock() = Some(state);
    }

    /// A node finished: rewrite the file if the last write is old enough and no other
    /// worker is writing it.
    pub fn node_finished(&self, outcomes: impl FnOnce() -> Vec<NodeOutcome>) {
        let Ok(mut guard) = self.state.try_lock() else {
            return;
        };
        let Some(state) = guard.as_mut() else { return };
        if state.last.elapsed() < REFRESH {
            return;
        }
        let nodes = outcomes();
        let text = render_run(&Run {
            run_id: &state.run_id,
            config: &state.config,
            started_at: state.started_at,
            finished_at: None,
            nodes: &nodes,
            sites: None,
        });
        state.write(&text);
    }

    /// The run is over: the last write, from its summary; no live write comes after.
    pub fn finish(&self, summary: &Summary) {
        if let Some(mut state) = self.lock().take() {
            state.said_failure = false;
            state.write(&render(summary));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LiveState>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests;
