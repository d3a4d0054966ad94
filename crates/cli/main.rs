//! `refscore`: the command line. It only parses settings and wires the
//! crates together: read → stages (lexical, embed, judge) → write, inside
//! the job that owns checkpoints, resume and shards.

mod args;
mod html_report;
mod inspect;
mod merge;
mod metrics;
mod progress;
mod report;
mod score;
mod settings;
mod stages;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use refscore_batch::{Error, ErrorClass};

use crate::args::{Cli, Command};

fn exit_code(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Usage => 64,
        ErrorClass::BadInput => 65,
        ErrorClass::Io => 74,
        ErrorClass::Temporary => 75,
        ErrorClass::Config => 78,
        ErrorClass::Internal => 70,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli)));
    match outcome {
        Ok(Ok(0)) => ExitCode::SUCCESS,
        Ok(Ok(code)) => ExitCode::from(code),
        Ok(Err(e)) => {
            eprintln!("refscore: error: {e}");
            ExitCode::from(exit_code(e.class))
        }
        // The panic message is already on stderr; temporary files were
        // removed while unwinding.
        Err(_) => ExitCode::from(70),
    }
}

/// Runs a command; `Ok` holds the exit code (0, or 1 for a failed
/// regression gate).
fn run(cli: Cli) -> Result<u8, Error> {
    match cli.command {
        Command::Report(args) => html_report::run(*args).map(u8::from),
        command => run_other(command).map(|()| 0),
    }
}

fn run_other(command: Command) -> Result<(), Error> {
    match command {
        Command::Score(args) => settings::Settings::resolve(*args).and_then(|s| {
            if let Some(n) = s.threads {
                // Candle's matrix kernels size their thread use from this
                // variable; set it before any thread pool exists.
                std::env::set_var("RAYON_NUM_THREADS", n.to_string());
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build_global()
                    .map_err(|e| Error::config(format!("--threads {n}: {e}")))?;
            }
            match score::run(&s)? {
                score::Outcome::Scored(summary) if !s.quiet => print_out(&format!(
                    "{}wrote {} and {}\n",
                    report::table(&summary),
                    s.output.display(),
                    refscore_write::summary_path(&s.output).display()
                )),
                score::Outcome::Scored(_) => Ok(()),
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
        Command::MergeSummaries(args) => merge::run(args),
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
