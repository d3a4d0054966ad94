//! The `refscore` binary: the library's command line with this process's
//! arguments.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(refscore::main(std::env::args_os()))
}
