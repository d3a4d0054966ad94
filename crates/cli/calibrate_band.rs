//! The `calibrate-band` command: flags → the fitting hook of each tier
//! kind that offers one (`refscore_judge::tiers::TierFit`), then the lines
//! (and JSON) saying which flags to use and what they cost.

use refscore_core::files::write_atomically;
use refscore_core::Error;
use refscore_judge::tiers::{flag, FitRequest, Fitted, TierKind, KINDS};
use refscore_read::Table;

use crate::args::CalibrateBandArgs;

/// Fits the tiers of each kind that offers a fit, and prints them.
pub fn run(args: CalibrateBandArgs) -> Result<(), Error> {
    if !(0.0..1.0).contains(&args.max_error) {
        return Err(Error::usage(format!(
            "--max-error {}: expected a share from 0 up to (not including) 1, e.g. 0.02",
            args.max_error
        )));
    }
    if let Some(c) = args.confidence {
        if !(c > 0.0 && c < 1.0) {
            return Err(Error::usage(format!(
                "--confidence {c}: expected a probability between 0 and 1 (not included), e.g. 0.9"
            )));
        }
        if args.max_error == 0.0 {
            return Err(Error::usage(
                "--max-error 0 with --confidence: no number of labels bounds an error at 0; ask for a share above 0, e.g. 0.05"
                    .to_string(),
            ));
        }
    }
    if let Some(by) = args.by.iter().find(|b| b.trim().is_empty()) {
        return Err(Error::usage(format!(
            "--by '{by}': expected score names separated by commas, e.g. cosine,nli_equivalence"
        )));
    }
    let table = Table::open(&args.result)?;
    let request = FitRequest {
        table: &table,
        metric: &args.metric,
        by: &args.by,
        gold: args.gold.as_deref(),
        max_error: args.max_error,
        confidence: args.confidence,
    };
    let mut fits: Vec<(&dyn TierKind, Fitted)> = Vec::new();
    for &kind in KINDS {
        if let Some(fitter) = kind.fitter() {
            let fitted = fitter.fit(&request)?;
            warn(&fitted.warnings);
            fits.push((kind, fitted));
        }
    }
    let text: String = fits
        .iter()
        .map(|(kind, f)| {
            if args.quiet {
                option_line(*kind, &f.values)
            } else {
                f.lines.clone()
            }
        })
        .collect();
    if let Some(path) = &args.json {
        let json = json_of(&fits) + "\n";
        write_atomically(path, json.as_bytes())
            .map_err(|e| Error::io(format!("{}: cannot write: {e}", path.display())))?;
    }
    crate::print_out(&text)
}

/// Says on stderr what makes a fit's figures weak (too few labels), quiet
/// or not: the flags on stdout stay the only thing a script reads.
fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("refscore: warning: {w}");
    }
}

/// A kind's fitted values as its flags, on one line (`--quiet`).
fn option_line(kind: &dyn TierKind, values: &[String]) -> String {
    let flags: Vec<String> = values
        .iter()
        .map(|v| format!("{} {v}", flag(kind)))
        .collect();
    flags.join(" ") + "\n"
}

/// The `--json` file: the one fitted kind's report, or with several, an
/// object of their reports by the kind's name.
fn json_of(fits: &[(&dyn TierKind, Fitted)]) -> String {
    if let [(_, one)] = fits {
        return one.json.clone();
    }
    let by_kind: serde_json::Map<String, serde_json::Value> = fits
        .iter()
        .map(|(kind, f)| {
            let report = serde_json::from_str(&f.json).expect("a fit's JSON");
            (kind.name().to_string(), report)
        })
        .collect();
    serde_json::to_string_pretty(&by_kind).expect("serialisable")
}
