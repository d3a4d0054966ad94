//! `refscore`: the command line. It only parses settings and wires the
//! pipeline crates together: read → lexical → write.

mod args;
mod inspect;
mod metrics;
mod progress;
mod report;
mod score;
mod settings;

use std::process::ExitCode;

use clap::Parser;
use refscore_batch::{Error, ErrorClass};

use crate::args::{Cli, Command};

fn exit_code(class: ErrorClass) -> u8 {
    match class {
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
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("refscore: error: {e}");
            ExitCode::from(exit_code(e.class))
        }
        // The panic message is already on stderr; temporary files were
        // removed while unwinding.
        Err(_) => ExitCode::from(70),
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Score(args) => settings::Settings::resolve(args).and_then(|s| {
            if let Some(n) = s.threads {
                // Candle's matrix kernels size their thread use from this
                // variable; set it before any thread pool exists.
                std::env::set_var("RAYON_NUM_THREADS", n.to_string());
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build_global()
                    .map_err(|e| Error::config(format!("--threads {n}: {e}")))?;
            }
            let summary = score::run(&s)?;
            if !s.quiet {
                print!("{}", report::table(&summary));
                println!(
                    "wrote {} and {}",
                    s.output.display(),
                    score::summary_path(&s.output).display()
                );
            }
            Ok(())
        }),
        Command::Inspect(args) => inspect::run(args),
    }
}
