//! The `refscore` binary: the library's command line with this process's
//! arguments.

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: the encoder's large per-operation
/// buffers are reused instead of mapped and faulted in again each time
/// (see the root Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ExitCode::from(refscore::main(std::env::args_os()))
}
