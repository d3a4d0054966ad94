//! `refscore`: the command line and the Python package share this library.
//! It only parses settings and wires the crates together: read → stages
//! (lexical, embed, judge) → write, inside the job that owns checkpoints,
//! resume and shards. The `refscore` binary is [`main`] with the process's
//! arguments; `crates/python` wraps [`main`], [`score_parquet`] and
//! [`Scorer`] for Python.

mod args;
mod calibrate_band;
mod config;
mod gold;
mod inspect;
mod judge_metrics;
mod judge_prompt;
mod merge;
mod metrics;
mod pipeline;
mod progress;
mod python_api;
mod report;
mod score;
mod settings;
mod summary_table;

use std::ffi::OsString;
use std::io::Write;

use clap::{CommandFactory, FromArgMatches};
pub use refscore_core::{Error, ErrorClass};

use crate::args::{Cli, Command};
pub use crate::python_api::{plan, score_parquet, Plan, Scorer};

/// The documented exit code of an error class ([`ErrorClass::exit_code`]).
pub fn exit_code(class: ErrorClass) -> u8 {
    class.exit_code()
}

/// The whole command line: parses `args` (the program name first), runs the
/// command, prints errors, and returns the exit code.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let parsed = Cli::command()
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = if e.use_stderr() {
                ErrorClass::Usage.exit_code()
            } else {
                0
            };
            let _ = e.print();
            return code;
        }
    };
    // The words after `score` (or `judge-prompt`, which takes its flags):
    // its settings are read from them (and its config file) by the one
    // parser they share.
    let command = match cli.command {
        Command::JudgePrompt(_) => "judge-prompt",
        _ => "score",
    };
    let score_words = argv
        .iter()
        .skip(1)
        .position(|a| a == command)
        .map_or(&[][..], |at| &argv[at + 2..]);
    let score_matches = matches.subcommand_matches("score");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(cli, score_matches, score_words)
    }));
    match outcome {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("refscore: error: {e}");
            exit_code(e.class)
        }
        // The panic message is already on stderr; temporary files were
        // removed while unwinding.
        Err(_) => ErrorClass::Internal.exit_code(),
    }
}

/// Runs a command; `Ok` holds the exit code (0, or 1 for a failed
/// regression gate of `report`).
fn run(
    cli: Cli,
    score_matches: Option<&clap::ArgMatches>,
    score_words: &[OsString],
) -> Result<u8, Error> {
    match cli.command {
        Command::Report(args) => report::run(*args).map(u8::from),
        command => run_other(command, score_matches, score_words).map(|()| 0),
    }
}

fn run_other(
    command: Command,
    score_matches: Option<&clap::ArgMatches>,
    score_words: &[OsString],
) -> Result<(), Error> {
    match command {
        Command::Score(args) => {
            let matches = score_matches.ok_or_else(|| Error::internal("score without matches"))?;
            settings::Settings::from_parsed(*args, matches, score_words)
        }
        .and_then(|s| {
            python_api::set_threads(s.threads)?;
            match score::run(&s)? {
                score::Outcome::Scored {
                    summary,
                    summary_at,
                } if !s.quiet => print_out(&format!(
                    "{}wrote {} and {summary_at}\n",
                    summary_table::table(&summary),
                    s.sink.shown(),
                )),
                score::Outcome::Scored { .. } => Ok(()),
                score::Outcome::Published { note, .. }
                | score::Outcome::AlreadyPublished { note, .. } => {
                    if !s.quiet {
                        eprintln!("refscore: {note}");
                    }
                    Ok(())
                }
                score::Outcome::AlreadyComplete => {
                    if !s.quiet {
                        eprintln!(
                            "refscore: {} is already complete for these inputs and settings; nothing to do",
                            s.output.display()
                        );
                    }
                    Ok(())
                }
            }
        }),
        Command::Inspect(args) => inspect::run(args),
        Command::JudgeMetrics(args) => judge_metrics::run(args),
        Command::JudgePrompt(_) => judge_prompt::run(score_words),
        Command::MergeSummaries(args) => merge::run(args),
        Command::CalibrateBand(args) => calibrate_band::run(args),
        Command::Report(_) => unreachable!("handled in run"),
    }
}

/// Prints to stdout; a reader that went away (`refscore inspect F | head -1`)
/// is a normal end, not an error.
pub(crate) fn print_out(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io(format!("stdout: {e}"))),
    }
}
