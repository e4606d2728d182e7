//! A real-window smoke test: the binary opens the lab, renders, saves a screenshot, and exits.
//! Without a display it skips with a reason, unless GPULAB_REQUIRE_DISPLAY=1 (CI under Xvfb).

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether a display is there for a real window; without one, a skip with a reason (a failure
/// under GPULAB_REQUIRE_DISPLAY=1).
pub(crate) fn has_display(test: &str) -> bool {
    let has_display =
        std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty()) || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty());
    if !has_display {
        assert!(
            std::env::var("GPULAB_REQUIRE_DISPLAY").map_or(true, |v| v != "1"),
            "GPULAB_REQUIRE_DISPLAY=1 but neither DISPLAY nor WAYLAND_DISPLAY is set"
        );
        eprintln!("{test}: skipped — no DISPLAY (run under xvfb-run, or set GPULAB_REQUIRE_DISPLAY=1 to make this a failure)");
    }
    has_display
}

#[test]
fn screenshot_mode_renders_the_real_window() {
    if !has_display("window") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let shot = dir.path().join("shot.png");
    // One retry: a freshly started Xvfb occasionally refuses the very first client.
    let mut status = screenshot(&shot);
    if !status.success() {
        eprintln!("window: first attempt failed ({status}); retrying once");
        status = screenshot(&shot);
    }
    assert!(status.success(), "gpulab --screenshot failed: {status}");
    let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");

    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
    let mut reader = decoder.read_info().expect("PNG header");
    let (w, h) = (reader.info().width, reader.info().height);
    assert!(w >= 640 && h >= 480, "screenshot is only {w}×{h}");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let frame = reader.next_frame(&mut buf).expect("PNG data");
    let px = frame.color_type.samples();
    let distinct: HashSet<&[u8]> = buf[..frame.buffer_size()].chunks(px).collect();
    assert!(distinct.len() > 50, "the screenshot is nearly one flat colour ({} distinct pixels)", distinct.len());
}

/// Runs `gpulab --screenshot`, killing it after 90 s.
fn screenshot(shot: &std::path::Path) -> std::process::ExitStatus {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpulab"))
        .args(["--screenshot"])
        .arg(shot)
        .args(["--frames", "20", "--exercise", "cpu-vs-gpu"])
        .env("XDG_RUNTIME_DIR", std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into_os_string()))
        .spawn()
        .expect("start gpulab");
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if t0.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpulab --screenshot did not exit within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
