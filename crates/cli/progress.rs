//! Progress on stderr: a bar when stderr is a terminal, a log line every few
//! seconds otherwise, nothing with `--quiet`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Reports rows done against the total known from the Parquet footers.
pub struct Progress {
    bar: Option<ProgressBar>,
    log: bool,
    total: u64,
    done: u64,
    start: Instant,
    last_log: Instant,
}

const LOG_EVERY: Duration = Duration::from_secs(10);

impl Progress {
    /// Chooses the form from `quiet` and whether stderr is a terminal.
    pub fn new(total: u64, quiet: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:40.cyan/blue} {human_pos}/{human_len} rows  {msg}  ETA {eta}",
                )
                .expect("valid template"),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            bar,
            log: !quiet && !terminal,
            total,
            done: 0,
            start: now,
            last_log: now,
        }
    }

    /// Adds `rows` finished rows.
    pub fn advance(&mut self, rows: u64) {
        self.done += rows;
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
            let rate = self.done as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{rate:.0} rows/s"));
        } else if self.log && self.last_log.elapsed() >= LOG_EVERY {
            self.last_log = Instant::now();
            let secs = self.start.elapsed().as_secs_f64();
            let rate = self.done as f64 / secs.max(1e-9);
            let eta = (self.total.saturating_sub(self.done)) as f64 / rate.max(1e-9);
            eprintln!(
                "refscore: {}/{} rows ({:.1}%), {:.0} rows/s, ETA {:.0}s",
                self.done,
                self.total,
                100.0 * self.done as f64 / (self.total.max(1)) as f64,
                rate,
                eta
            );
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
