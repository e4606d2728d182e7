//! The `gpulab` binary: a thin face over the library. `main` calls `try_main` and turns any
//! error into one line on stderr and a non-zero exit.

mod cli;

fn main() {
    if let Err(e) = cli::try_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
