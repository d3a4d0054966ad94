//! The `calibrate-band` command: flags → `refscore_report::band`, then the
//! lines (and JSON) saying which `--judge-band` to use and what it costs.

use refscore_core::files::write_atomically;
use refscore_core::Error;
use refscore_read::Table;
use refscore_report::band::{calibrate, BandReport, BandRequest};

use crate::args::CalibrateBandArgs;

/// Fits the band and prints it.
pub fn run(args: CalibrateBandArgs) -> Result<(), Error> {
    if !(0.0..1.0).contains(&args.max_error) {
        return Err(Error::usage(format!(
            "--max-error {}: expected a share from 0 up to (not including) 1, e.g. 0.02",
            args.max_error
        )));
    }
    let table = Table::open(&args.result)?;
    let report = calibrate(
        &table,
        &BandRequest {
            metric: args.metric,
            by: args.by,
            gold: args.gold,
            max_error: args.max_error,
        },
    )?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).expect("serialisable") + "\n";
        write_atomically(path, text.as_bytes())
            .map_err(|e| Error::io(format!("{}: cannot write: {e}", path.display())))?;
    }
    let text = if args.quiet {
        format!("--judge-band {}\n", report.judge_band)
    } else {
        lines(&report)
    };
    crate::print_out(&text)
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
}

/// The figures in words.
fn lines(r: &BandReport) -> String {
    let f = &r.fit;
    let side = |name: &str, at: f32, decided: &str, s: &refscore_stats::band::Side| {
        if s.labels == 0 {
            format!(
                "{name}: open (no cut-off keeps the error within {}): decides nothing\n",
                pct(Some(f.max_error))
            )
        } else {
            format!(
                "{name} {at}: {} labelled rows decided {decided}, {} labelled otherwise: error {} [{}, {}] (asked at most {})\n",
                s.labels,
                s.errors,
                pct(s.error),
                pct(s.error_low),
                pct(s.error_high),
                pct(Some(f.max_error))
            )
        }
    };
    let mut out = format!("--judge-band {}\n", r.judge_band);
    out += &side("below", f.lo as f32, "false", &f.below);
    out += &side("above", f.hi as f32, "true", &f.above);
    out += &format!(
        "rows still judged: {} ({} of {} with a {} value); judge calls saved at this result's volume: {}\n",
        pct(Some(r.share_judged)),
        r.rows_inside,
        r.rows,
        r.by,
        r.calls_saved
    );
    if r.labels_compared > 0 {
        out += &format!(
            "error added where the band replaces the judge ({} labelled rows the judge answered here): band wrong on {}, judge on {}: {:+.1} points\n",
            r.labels_compared,
            r.band_errors,
            r.judge_errors,
            r.error_added.unwrap_or(0.0) * 100.0
        );
    }
    out
}
