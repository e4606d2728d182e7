//! The `gpulab` binary: a thin face over the library. `main` calls `try_main` and turns any
//! error into one line on stderr and a non-zero exit.
//!
//! On Windows a release build is a GUI program (no console window opens with the lab); when it
//! is started from a terminal it attaches to that terminal's console so the CLI subcommands
//! still print there.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod cli;

fn main() {
    #[cfg(windows)]
    attach_parent_console();
    if let Err(e) = cli::try_main() {
        // An error can quote a file's contents or name: shown with its escape sequences escaped.
        eprintln!("error: {}", gpulab::text::terminal_text(&format!("{e:#}")));
        std::process::exit(1);
    }
}

/// Windows: writes to stdout/stderr go to the console of the terminal that started gpulab, if
/// any (started from Explorer there is none, and this does nothing). Unverified here: CI for
/// Windows runs in the release workflow only.
#[cfg(windows)]
fn attach_parent_console() {
    #[link(name = "kernel32")]
    unsafe extern "system" {
        fn AttachConsole(process_id: u32) -> i32;
    }
    const ATTACH_PARENT_PROCESS: u32 = u32::MAX;
    // SAFETY: AttachConsole takes a process id by value and has no other preconditions; failure
    // (no parent console, or one already attached) is harmless and ignored.
    unsafe {
        AttachConsole(ATTACH_PARENT_PROCESS);
    }
}
