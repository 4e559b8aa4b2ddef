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
use std::path::Path;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::summary::Summary;
use crate::diagnosis::FailureClass;
use crate::outcome::Phase;

/// The final phases, as `keadm_batch_nodes{phase}` lists them.
const FINAL_PHASES: [Phase; 5] = [
    Phase::Succeeded,
    Phase::Failed,
    Phase::TimedOut,
    Phase::Skipped,
    Phase::Interrupted,
];

/// Seconds, for SSH work: a connect takes a tenth of a second on a LAN, a keadm join
/// or an upload over a thin uplink minutes.
const BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0,
];

type Labels = Vec<(&'static str, String)>;

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

/// The exposition of this summary.
pub fn render(summary: &Summary) -> String {
    let mut registry = Registry::default();
    let nodes = &summary.nodes;

    let by_phase = FINAL_PHASES.map(|phase| {
        let n = nodes.iter().filter(|o| bucket_of(o.phase) == phase).count();
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

    let steps: [(&str, fn(&crate::outcome::NodeOutcome) -> Option<f64>); 5] = [
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

    registry.register(
        "keadm_batch_uploaded_bytes_total",
        "Bytes this machine uploaded to the nodes",
        RunCounter(nodes.iter().map(|o| o.bytes_uploaded).sum()),
    );
    registry.register(
        "keadm_batch_relayed_bytes_total",
        "Bytes the nodes of a site copied from each other (--relay auto)",
        RunCounter(summary.sites.iter().map(|s| s.peer_bytes).sum()),
    );
    registry.register(
        "keadm_batch_run_start_timestamp_seconds",
        "When the run started, in seconds since the Unix epoch",
        seconds(summary.started_at),
    );
    registry.register(
        "keadm_batch_run_end_timestamp_seconds",
        "When the run ended, in seconds since the Unix epoch",
        seconds(summary.finished_at),
    );
    registry.register(
        "keadm_batch_run_info",
        "The run: its id and config file",
        Ordered {
            series: vec![(
                vec![
                    ("run_id", summary.run_id.clone()),
                    ("config", summary.config.clone()),
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

/// A final phase as `keadm_batch_nodes` counts it: as the summary's totals do, any phase
/// that is not one of the other four (a node that never finished) counts as failed.
fn bucket_of(phase: Phase) -> Phase {
    match phase {
        Phase::Succeeded | Phase::TimedOut | Phase::Skipped | Phase::Interrupted => phase,
        _ => Phase::Failed,
    }
}

/// Writes the exposition to `path` atomically: a temporary file in the same directory,
/// then a rename, so node_exporter never reads half a file. The temporary name does not
/// end in `.prom`, which the collector would read.
///
/// Mode 0644, not the run directory's owner-only 0600: node_exporter usually runs as its
/// own user, and the file holds only counts, times, the run id and the config's path (no
/// node name, address or secret).
pub fn write(summary: &Summary, path: &Path) -> io::Result<()> {
    let text = render(summary);
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

/// `--metrics FILE`, at the end of a run: a failed write is said, not fatal, as for
/// summary.json (the results are in the run directory all the same).
pub fn write_if_asked(summary: &Summary, path: Option<&Path>) {
    let Some(path) = path else { return };
    if let Err(e) = write(summary, path) {
        log::error!(
            "Could not write the metrics file {}: {e}. Check that its directory exists and is writable; the run's results are in its summary.json all the same.",
            path.display()
        );
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
