//! What an installed gpulab needs: it works from any working directory (lessons, data and
//! shaders are embedded), and without a Vulkan driver the lab still opens, says why, shows the
//! fix and runs exercise 1 on the CPU.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The built binary, started in `cwd` (not the repository).
fn gpulab_in(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpulab"));
    c.current_dir(cwd).env("XDG_RUNTIME_DIR", std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into_os_string()));
    c
}

#[test]
fn the_binary_reads_lessons_and_trains_from_any_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = gpulab_in(dir.path()).args(["lesson", "1"]).output().expect("gpulab lesson runs");
    assert!(out.status.success(), "gpulab lesson 1 failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CPU vs GPU") && text.len() > 2000, "lesson 1 is not the embedded lesson: {:.200}", text);
    let bad = gpulab_in(dir.path()).args(["lesson", "nope"]).output().expect("gpulab lesson runs");
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("gpulab list"),
        "an unknown lesson id must fail naming `gpulab list`"
    );

    let args = [
        "run",
        "cpu-vs-gpu",
        "--set",
        "backends=cpu",
        "--set",
        "epochs=1",
        "--set",
        "sweep_sizes=32",
        "--set",
        "sweep_runs=1",
        "--set",
        "size=as-set",
        "--out",
        "report",
    ];
    let out = gpulab_in(dir.path()).args(args).env("GPULAB_CACHE_DIR", dir.path().join("cache")).output().expect("gpulab run runs");
    assert!(out.status.success(), "training from {} failed: {}", dir.path().display(), String::from_utf8_lossy(&out.stderr));
    let report =
        std::fs::read_to_string(dir.path().join("report/report.json")).expect("report.json written relative to the working directory");
    let v: serde_json::Value = serde_json::from_str(&report).expect("report.json is JSON");
    let trained = v["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["title"] == "Training"))
        .and_then(|t| t["rows"].as_array())
        .map_or(0, |r| r.len());
    assert_eq!(trained, 1, "the report has no training row for the CPU: {report:.400}");
    assert!(
        v["verdict"]["summary"].as_str().is_some_and(|s| s.contains("CPU")),
        "the verdict does not speak of the CPU run: {report:.400}"
    );
}

#[test]
fn the_window_icon_is_the_embedded_256_px_drawing() {
    let icon = gpulab::app::window_icon().expect("the embedded icon decodes");
    assert_eq!((icon.width, icon.height), (256, 256));
    assert_eq!(icon.rgba.len(), 256 * 256 * 4);
    let opaque = icon.rgba.chunks(4).filter(|p| p[3] == 255).count();
    assert!(
        opaque > 256 * 256 / 2 && opaque < 256 * 256,
        "the icon should be mostly opaque with transparent corners ({opaque} opaque pixels)"
    );
}

#[test]
fn without_a_vulkan_driver_the_lab_opens_shows_the_fix_and_runs_exercise_1_on_the_cpu() {
    if !crate::window::has_display("install") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let no_driver = |c: &mut Command| {
        // Both spellings: newer Vulkan loaders prefer VK_DRIVER_FILES.
        c.env("VK_ICD_FILENAMES", "/nonexistent").env("VK_DRIVER_FILES", "/nonexistent").env("GPULAB_CACHE_DIR", dir.path().join("cache"));
    };
    // The CLI says the same as the lab.
    let mut info = gpulab_in(dir.path());
    no_driver(&mut info);
    let out = info.arg("info").output().expect("gpulab info runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("why:") && text.contains("/nonexistent"), "gpulab info without a Vulkan driver:\n{text}");
    let mut info = gpulab_in(dir.path());
    no_driver(&mut info);
    let out = info.args(["info", "--json"]).output().expect("gpulab info --json runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gpulab info --json prints JSON");
    assert_eq!(v["driver_notice"]["severity"], "warning", "info --json without a Vulkan driver: {v}");
    assert!(v["driver_notice"]["fixes"].as_array().is_some_and(|f| f.len() >= 2), "info --json lists no fixes: {v}");

    let shot = dir.path().join("shot.png");
    let log = dir.path().join("stderr.txt");
    let mut lab = gpulab_in(dir.path());
    no_driver(&mut lab);
    lab.args(["--screenshot", "shot.png", "--exercise", "1", "--frames", "5"])
        .env("GPULAB_SCREENSHOT_RUN", "1")
        .env("GPULAB_SCREENSHOT_SET", "backends=cpu;epochs=1;sweep_sizes=32,64;sweep_runs=1;size=as-set")
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")));
    let mut child = lab.spawn().expect("start gpulab");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpulab without a Vulkan driver did not finish within 240 s: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the lab without a Vulkan driver failed ({status}):\n{err}");
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "no screenshot:\n{err}");
    let shown =
        err.lines().find(|l| l.contains("driver notice shown:")).unwrap_or_else(|| panic!("the lab showed no driver notice:\n{err}"));
    assert!(
        shown.contains("No Vulkan GPU driver") || shown.contains("No GPU adapter"),
        "the notice does not say the driver is missing: {shown}"
    );
    if cfg!(target_os = "linux") {
        assert!(shown.contains("apt install libvulkan1 mesa-vulkan-drivers"), "the notice does not show the Debian fix first: {shown}");
    }
    assert!(err.contains("the run ended: Finished"), "exercise 1 did not finish on the CPU:\n{err}");
}
