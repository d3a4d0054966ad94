//! The `report` command: flags → `refscore_report::Options`, then the page,
//! the JSON and the verdict lines.

use std::path::Path;

use refscore_core::files::write_atomically;
use refscore_core::Error;
use refscore_read::ColumnMapping;
use refscore_report::rate_gate::{check_confidence, RateGate};
use refscore_report::{Gate, Options};

use crate::args::ReportArgs;
use crate::metrics;

/// How to read `spec` for `--night NIGHT` (`flag`): only the files the
/// commit of that table version, or of that run, added.
fn night(
    spec: &str,
    night: Option<&str>,
    flag: &str,
) -> Result<refscore_read::SourceOptions, Error> {
    let Some(night) = night.map(str::trim) else {
        return Ok(refscore_read::SourceOptions::default());
    };
    let version = match night.parse::<u64>() {
        Ok(version) => version,
        Err(_) => {
            let table = if refscore_read::source::is_url(spec) {
                refscore_write::DeltaTable::remote(
                    spec,
                    &std::env::temp_dir(),
                    refscore_read::StoreOptions::default(),
                )?
            } else {
                refscore_write::DeltaTable::local(Path::new(spec))?
            };
            table.version_of_run(night)?.ok_or_else(|| {
                Error::usage(format!(
                    "{flag} {night}: the table {spec} holds no run of that id (give a run id \
                     from a summary's run_id, or the table version of its commit)"
                ))
            })?
        }
    };
    Ok(refscore_read::SourceOptions {
        table_version: Some(version),
        table_commit_only: true,
        ..Default::default()
    })
}

/// Builds and writes the report; returns true when a regression gate or a
/// rate gate failed.
pub fn run(args: ReportArgs) -> Result<bool, Error> {
    if args.output.is_none() && args.json.is_none() {
        return Err(Error::usage(
            "report: nothing to write: pass -o report.html and/or --json report.json",
        ));
    }
    if !(100..=100_000).contains(&args.replicates) {
        return Err(Error::usage(format!(
            "--replicates {}: expected 100 to 100000",
            args.replicates
        )));
    }
    for path in args.output.iter().chain(args.json.iter()) {
        check_writable(path)?;
    }
    let thresholds = args
        .threshold
        .iter()
        .map(|t| metrics::parse_threshold(t, &metrics::report_metric))
        .collect::<Result<Vec<_>, _>>()?;
    let gates = args
        .fail_on_regression
        .iter()
        .filter(|g| !g.trim().is_empty())
        .map(|g| Gate::parse(g))
        .collect::<Result<Vec<_>, _>>()?;
    let rate_gates = args
        .gate
        .iter()
        .filter(|g| !g.trim().is_empty())
        .map(|g| RateGate::parse(g))
        .collect::<Result<Vec<_>, _>>()?;
    check_confidence(args.gate_confidence)?;
    let result_source = night(&args.result, args.night.as_deref(), "--night")?;
    let baseline_source = match &args.baseline {
        Some(b) => night(b, args.baseline_night.as_deref(), "--baseline-night")?,
        None if args.baseline_night.is_some() => {
            return Err(Error::usage(
                "--baseline-night: applies to a --baseline that is a Delta table",
            ))
        }
        None => refscore_read::SourceOptions::default(),
    };
    let options = Options {
        result_source,
        baseline_source,
        result: args.result,
        baseline: args.baseline,
        input: args.input,
        mapping: ColumnMapping {
            id: args.mapping.id_col,
            input: args.mapping.input_col,
            reference: args.mapping.reference_col,
            output: args.mapping.output_col,
        },
        by: args.by,
        thresholds,
        gates,
        rate_gates,
        gate_confidence: args.gate_confidence,
        lowest: args.lowest,
        flips: args.flips,
        seed: args.seed,
        replicates: args.replicates,
        gold: args
            .gold
            .iter()
            .map(|g| refscore_report::gold::parse_mapping(g))
            .collect::<Result<_, _>>()?,
    };
    let report = refscore_report::build(&options)?;
    if let Some(path) = &args.output {
        let html = report.html()?;
        write_atomically(path, html.as_bytes())
            .map_err(|e| Error::io(format!("{}: cannot write: {e}", path.display())))?;
    }
    if let Some(path) = &args.json {
        write_atomically(path, report.json().as_bytes())
            .map_err(|e| Error::io(format!("{}: cannot write: {e}", path.display())))?;
    }
    if !args.quiet {
        let mut out = String::new();
        for m in &report.metrics {
            if let Some(c) = &m.change {
                out.push_str(&c.line);
                out.push('\n');
            }
        }
        for g in report.rate_gates.iter().filter(|g| !g.failed) {
            out.push_str(&format!("gate passed: {}\n", g.line));
        }
        for p in args.output.iter().chain(args.json.iter()) {
            out.push_str(&format!("wrote {}\n", p.display()));
        }
        crate::print_out(&out)?;
    }
    let failed = report.failed_gates();
    for g in &failed {
        eprintln!("refscore: {g}");
    }
    Ok(!failed.is_empty())
}

/// Fails before any reading when an output's folder is missing.
fn check_writable(path: &Path) -> Result<(), Error> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Error::io(format!(
            "{}: output folder {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(Error::io(format!("{}: is a directory", path.display())));
    }
    Ok(())
}
