//! report.html and `gpulab run all`: a real report rendered in headless Chromium (a non-blank
//! screenshot; every chart's <svg> present and laid out with a non-zero size) and the run-all
//! index, whose every link resolves. Without Chromium the rendering test skips with a printed
//! reason, except under GPULAB_REQUIRE_CHROMIUM=1 (CI), where that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpulab::exercises::{self, CollectSink};

fn require_chromium() -> bool {
    std::env::var("GPULAB_REQUIRE_CHROMIUM").is_ok_and(|v| v == "1")
}

/// The Chromium binary on PATH, or None with the reason printed (a failure when required).
fn chromium_or_skip(test: &str) -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()));
    if found.is_none() {
        assert!(!require_chromium(), "GPULAB_REQUIRE_CHROMIUM=1 but no chromium on PATH (Debian: apt-get install chromium)");
        eprintln!("SKIPPED {test}: no chromium on PATH (set GPULAB_REQUIRE_CHROMIUM=1 to make this a failure)");
    }
    found
}

/// Runs headless Chromium on a local page with a private profile, killed after 120 s.
fn chromium(bin: &str, profile: &Path, args: &[String], page: &Path) -> Output {
    let mut child = Command::new(bin)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let t0 = Instant::now();
    while child.try_wait().expect("wait for chromium").is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("chromium output")
}

/// Appended to a copy of the page (the report itself has no script): writes each SVG's laid-out
/// size into the DOM, which --dump-dom prints.
const PROBE: &str = "<script>for (const s of document.querySelectorAll('svg')) { const r = s.getBoundingClientRect(); const p = document.createElement('pre'); p.className = 'probe'; p.textContent = 'SVG|' + (s.getAttribute('data-chart') || s.getAttribute('class')) + '|' + r.width + '|' + r.height + '|'; document.body.appendChild(p); }</script>";

#[cfg(feature = "gui")] // the PNG decoder comes with the gui feature
#[test]
fn report_html_renders_in_headless_chromium_with_every_chart_sized() {
    let Some(bin) = chromium_or_skip("report_html_renders_in_headless_chromium_with_every_chart_sized") else { return };
    // Exercise 2 on the CPU: a log-x line chart and a bar chart, tables, check-yourself cards.
    let ex = exercises::find("batch-sweep").unwrap();
    let mut s = ex.settings();
    s.apply(&["backend=cpu".to_string(), "epochs=1".to_string(), "batch_sizes=16,64".to_string()]).unwrap();
    let report = ex.run(&s, &mut CollectSink::default()).unwrap();
    assert!(report.charts.len() >= 2 && !report.check_yourself.is_empty(), "the run made charts and carries its cards");
    let dir = tempfile::tempdir().unwrap();
    gpulab::report::write_all(&report, dir.path()).unwrap();
    let page = dir.path().join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script"), "report.html needs no script");

    let shot = dir.path().join("shot.png");
    let out =
        chromium(bin, &dir.path().join("profile"), &[format!("--screenshot={}", shot.display()), "--window-size=1000,2400".into()], &page);
    assert!(out.status.success(), "chromium --screenshot failed: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("a PNG");
    let (w, h) = (reader.info().width, reader.info().height);
    assert!(w >= 900 && h >= 2000, "screenshot is {w}×{h}");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let frame = reader.next_frame(&mut buf).expect("PNG data");
    let px = frame.color_type.samples();
    let distinct: std::collections::HashSet<&[u8]> = buf[..frame.buffer_size()].chunks(px).collect();
    assert!(distinct.len() > 50, "the screenshot is nearly blank ({} distinct colours)", distinct.len());

    let probe = dir.path().join("probe.html");
    std::fs::write(&probe, html.replace("</body>", &format!("{PROBE}\n</body>"))).unwrap();
    let out = chromium(bin, &dir.path().join("profile"), &["--dump-dom".into()], &probe);
    assert!(out.status.success(), "chromium --dump-dom failed: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout);
    let sizes: Vec<(String, f64, f64)> = dom
        .split("<pre class=\"probe\">SVG|")
        .skip(1)
        .map(|p| {
            let f: Vec<&str> = p.split('|').collect();
            (f[0].to_string(), f[1].parse().unwrap_or(0.0), f[2].parse().unwrap_or(0.0))
        })
        .collect();
    for c in &report.charts {
        let (_, w, h) =
            sizes.iter().find(|s| s.0 == c.id).unwrap_or_else(|| panic!("chart {} has no <svg> in the rendered page: {sizes:?}", c.id));
        assert!(*w > 100.0 && *h > 100.0, "chart {} is laid out at {w}×{h}", c.id);
    }
    assert_eq!(sizes.len(), report.charts.len() + report.timelines.len(), "one <svg> per chart and timeline: {sizes:?}");
}

/// Every href in a page that is not a fragment or external, relative to the page's folder.
fn local_links(page: &Path) -> Vec<PathBuf> {
    let html = std::fs::read_to_string(page).unwrap();
    let base = page.parent().unwrap();
    html.split("href=\"")
        .skip(1)
        .filter_map(|p| p.split('"').next())
        .filter(|l| !l.starts_with('#') && !l.contains("://"))
        .map(|l| base.join(l))
        .collect()
}

/// `gpulab ARGS --out OUT`.
fn gpulab(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpulab")).args(args).arg("--out").arg(out).output().expect("the binary runs")
}

#[test]
fn run_all_writes_an_index_whose_links_all_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpulab(&["run", "all", "--only", "quantization,10", "--backend", "cpu"], dir.path());
    assert!(out.status.success(), "run all failed: {}", String::from_utf8_lossy(&out.stderr));
    let index = dir.path().join("index.html");
    let links = local_links(&index);
    assert_eq!(links.len(), 2, "one link per exercise: {links:?}");
    for l in &links {
        assert!(l.is_file(), "index links {} which does not exist", l.display());
        for inner in local_links(l) {
            assert!(inner.is_file(), "{} links {} which does not exist", l.display(), inner.display());
        }
    }
    for id in ["quantization", "platform"] {
        for f in ["report.json", "report.csv", "report.md", "report.html"] {
            assert!(dir.path().join(id).join(f).is_file(), "{id}/{f} missing");
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[1/2]") && stderr.contains("[2/2]"), "progress on stderr: {stderr}");
}

#[test]
fn run_all_lists_a_failing_exercise_and_runs_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Adapter 99 does not exist: exercise 9 (backends) fails; exercise 10 simulates, its
    // calibration backend unused with the preset calibration.
    let out = gpulab(&["run", "all", "--only", "platform,quantization", "--backend", "gpu:99"], dir.path());
    assert!(!out.status.success(), "a failed exercise makes the command fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 exercises failed"), "{}", String::from_utf8_lossy(&out.stderr));
    let index = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(index.contains("failed: ") && index.matches("<a href=").count() == 1, "{index}");
    assert!(dir.path().join("platform/report.html").is_file());

    let bad = gpulab(&["run", "all", "--only", "nope"], dir.path());
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--only: no exercise \"nope\""),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let mixed = gpulab(&["run", "cpu-vs-gpu", "--backend", "cpu"], dir.path());
    assert!(!mixed.status.success() && String::from_utf8_lossy(&mixed.stderr).contains("--backend and --only go with `gpulab run all`"));
}
