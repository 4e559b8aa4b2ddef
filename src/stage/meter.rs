//! How far a long step over many bytes has got: a release download, an image layer
//! `bundle` pulls. On a terminal it is a bar among the console's
//! bars (`label  ███▌  12.3 MiB/45.6 MiB  7.8 MiB/s`), redrawn by indicatif; elsewhere a
//! plain line on stderr every few seconds (`label  12.3/45.6 MiB  7.8 MiB/s`), so a log
//! shows the step is moving, but a step that ends sooner prints nothing; with `-q`
//! nothing at all. When the step ends, its last state is printed (above the bars, or as a
//! last plain line after plain lines), and the bar goes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// How often a plain line is printed while a step runs: often enough that a log never
/// looks stuck, seldom enough that a slow link does not flood it.
pub const LINE_EVERY: Duration = Duration::from_secs(3);

/// Where long steps say how far they are.
#[derive(Clone, Debug, Default)]
pub enum Meters {
    /// Bars among the console's bars: on a terminal, so a step that starts mid-run draws
    /// beside the run's status line, not through it.
    Bars(MultiProgress),
    /// Plain lines (stderr is no terminal).
    Lines(Lines),
    /// Nothing (`-q`).
    #[default]
    Off,
}

/// Plain progress lines: one each `every`, written by `out`.
#[derive(Clone)]
pub struct Lines {
    pub every: Duration,
    pub out: Arc<dyn Fn(&str) + Send + Sync>,
}

impl fmt::Debug for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lines")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Meters {
    /// Plain lines on stderr every [`LINE_EVERY`].
    pub fn lines() -> Meters {
        Meters::Lines(Lines {
            every: LINE_EVERY,
            out: Arc::new(|line| crate::console::line(line)),
        })
    }
}

/// The bar's look when the size is known, and when it is not.
const SIZED_TEMPLATE: &str =
    "{prefix}  {bar:24} {binary_bytes}/{binary_total_bytes}  {binary_bytes_per_sec}";
const UNSIZED_TEMPLATE: &str = "{prefix}  {spinner} {binary_bytes}  {binary_bytes_per_sec}";

/// One step's meter, from [`Meter::start`] to [`Meter::finish`] (or drop, for a step
/// abandoned on an error, which leaves no bar behind and prints nothing more).
pub(crate) struct Meter {
    bar: Option<ProgressBar>,
    lines: Option<Lines>,
    /// When the next plain line is due.
    next_line: Instant,
    /// Whether a plain line was printed, so the last state is printed too.
    printed: bool,
    label: String,
    total: Option<u64>,
    start: Instant,
}

impl Meter {
    /// A meter for the step `label`, of `total` bytes when known.
    pub(crate) fn start(meters: &Meters, label: &str, total: Option<u64>) -> Meter {
        let bar = match meters {
            Meters::Bars(console) => {
                let (bar, template) = match total {
                    Some(total) => (ProgressBar::new(total), SIZED_TEMPLATE),
                    None => (ProgressBar::no_length(), UNSIZED_TEMPLATE),
                };
                // Into the console before anything is set: a setter draws, and a bar drawn
                // outside the console would be left behind on the screen.
                let bar = console.add(bar);
                bar.set_style(
                    ProgressStyle::with_template(template)
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_prefix(label.to_string());
                Some(bar)
            }
            _ => None,
        };
        let lines = match meters {
            Meters::Lines(lines) => Some(lines.clone()),
            _ => None,
        };
        let start = Instant::now();
        Meter {
            bar,
            next_line: start + lines.as_ref().map_or(Duration::ZERO, |l| l.every),
            lines,
            printed: false,
            label: label.to_string(),
            total,
            start,
        }
    }

    /// The step has got to `done` bytes.
    pub(crate) fn advance(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
        if let Some(lines) = &self.lines {
            let now = Instant::now();
            if now >= self.next_line {
                (lines.out)(&self.line(done));
                self.printed = true;
                self.next_line = now + lines.every;
            }
        }
    }

    /// The step ended (completed or not) after `done` bytes.
    pub(crate) fn finish(&mut self, done: u64) {
        if let Some(bar) = self.bar.take() {
            bar.println(self.line(done));
            bar.finish_and_clear();
        }
        if let Some(lines) = self.lines.take()
            && self.printed
        {
            (lines.out)(&self.line(done));
        }
    }

    /// The step's state: `label  12.3/45.6 MiB  7.8 MiB/s`.
    fn line(&self, done: u64) -> String {
        progress_line(&self.label, done, self.total, self.start.elapsed())
    }
}

impl Drop for Meter {
    /// A step abandoned on an error leaves no bar behind among the console's.
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// `label  12.3/45.6 MiB  7.8 MiB/s`, or `label  12.3 MiB  7.8 MiB/s` without a total.
fn progress_line(label: &str, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let rate = done as f64 / MIB / elapsed.as_secs_f64().max(0.001);
    match total {
        Some(total) => format!(
            "{label}  {:.1}/{:.1} MiB  {rate:.1} MiB/s",
            done as f64 / MIB,
            total as f64 / MIB
        ),
        None => format!("{label}  {:.1} MiB  {rate:.1} MiB/s", done as f64 / MIB),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Plain lines with no pause between them, collected.
    pub(crate) fn collected() -> (Meters, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let meters = Meters::Lines(Lines {
            every: Duration::ZERO,
            out: Arc::new(move |line| sink.lock().unwrap().push(line.to_string())),
        });
        (meters, seen)
    }

    #[test]
    fn progress_shows_size_and_rate() {
        let line = progress_line(
            "pkg",
            3 * 1024 * 1024,
            Some(6 * 1024 * 1024),
            Duration::from_secs(2),
        );
        assert_eq!(line, "pkg  3.0/6.0 MiB  1.5 MiB/s");
        let line = progress_line("pkg", 1024 * 1024, None, Duration::from_secs(1));
        assert_eq!(line, "pkg  1.0 MiB  1.0 MiB/s");
    }

    #[test]
    fn bars_parse_and_leave_the_console_when_done() {
        for template in [SIZED_TEMPLATE, UNSIZED_TEMPLATE] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
        let console = MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden());
        let bars = Meters::Bars(console);
        let mut done = Meter::start(&bars, "pkg", Some(10));
        done.advance(5);
        done.finish(10);
        assert!(done.bar.is_none());
        let abandoned = Meter::start(&bars, "pkg", None);
        assert!(abandoned.bar.is_some());
        drop(abandoned);
        assert!(Meter::start(&Meters::Off, "pkg", None).bar.is_none());
    }

    #[test]
    fn plain_lines_come_when_due_and_end_with_the_last_state() {
        let (meters, seen) = collected();
        let mut meter = Meter::start(&meters, "layer 1", Some(2 << 20));
        meter.advance(1 << 20);
        meter.advance(2 << 20);
        meter.finish(2 << 20);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[0].starts_with("layer 1  1.0/2.0 MiB  "), "{seen:?}");
        assert!(seen[2].starts_with("layer 1  2.0/2.0 MiB  "), "{seen:?}");

        // Not due yet: a step shorter than the pause prints nothing, not even its end.
        let quiet = Meters::Lines(Lines {
            every: Duration::from_secs(3600),
            out: Arc::new(|line| panic!("printed {line}")),
        });
        let mut meter = Meter::start(&quiet, "fast", None);
        meter.advance(1);
        meter.finish(1);
        let mut off = Meter::start(&Meters::Off, "off", None);
        off.advance(1);
        off.finish(1);
    }
}
