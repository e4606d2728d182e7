//! The class view: a folder of students' reports from several machines, with a malformed, a
//! foreign and a non-JSON file and a report of an unknown exercise → one table per exercise, a
//! row per machine with the exercise's key figure and its provenance, the bad files listed with
//! the reason; the CSV and HTML exports; `gpulab class`; the lab's class view.

use std::path::Path;
use std::process::Command;

use gpulab::class::{self, Class};
use gpulab::report::{self, Cell, ChartKind, Figure, Metadata, Provenance, Report};
use gpulab::tensor::{BackendInfo, BackendKind};

fn backend(kind: BackendKind, name: &str, api: &str, driver: &str, software: bool) -> BackendInfo {
    BackendInfo {
        kind,
        name: name.into(),
        api: api.into(),
        driver: driver.into(),
        device_type: "DiscreteGpu".into(),
        software,
        timestamps: true,
    }
}

fn fig(label: &str, value: f64, unit: &str, provenance: Provenance) -> Figure {
    Figure { label: label.into(), value, unit: unit.into(), provenance }
}

fn report(exercise: &str, host: &str, started_at: &str, backends: Vec<BackendInfo>, figures: Vec<Figure>) -> Report {
    let metadata =
        Metadata { gpulab_version: "0.1.0".into(), started_at: started_at.into(), host: host.into(), backends, ..Default::default() };
    Report { exercise: exercise.into(), title: exercise.into(), metadata, figures, ..Default::default() }
}

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Ann's laptop (a software adapter and an NVIDIA GPU), Ben's (a software adapter only, a host
/// name with markup), and a folder of files that are not reports.
pub(crate) fn class_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let d = || Provenance::derived("the two measured training times");
    let cpu = |name: &str| backend(BackendKind::Cpu, name, "native", "gemm 0.19 + rayon", false);
    let llvmpipe = backend(BackendKind::Gpu, "llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", "llvmpipe Mesa 22.3.6", true);
    let nvidia = backend(BackendKind::Gpu, "NVIDIA GeForce RTX 3060", "Vulkan", "NVIDIA 550.54.14", false);
    let ann = report(
        "cpu-vs-gpu",
        "AMD Ryzen 7 7840U (16 threads), linux",
        "2026-11-30T09:00:00Z",
        vec![cpu("AMD Ryzen 7 7840U"), llvmpipe.clone(), nvidia],
        vec![
            fig("llvmpipe Vulkan (software GPU) trains slower than the CPU by", 4.0, "×", d()),
            fig("GPU / CPU training speed (llvmpipe Vulkan (software GPU))", 0.25, "×", d()),
            fig("NVIDIA GeForce RTX 3060 Vulkan trains faster than the CPU by", 6.0, "×", d()),
            fig("GPU / CPU training speed (NVIDIA GeForce RTX 3060 Vulkan)", 6.0, "×", d()),
        ],
    );
    report::write_all(&ann, &root.join("ann")).unwrap();
    let warp = backend(BackendKind::Gpu, "Microsoft Basic Render Driver", "Dx12", "", true);
    let ben_host = "Intel Core i5 <script>alert(1)</script> (8 threads), windows";
    let ben = report(
        "cpu-vs-gpu",
        ben_host,
        "2026-11-30T10:00:00Z",
        vec![cpu("Intel Core i5"), warp.clone()],
        vec![fig("GPU / CPU training speed (Microsoft Basic Render Driver Dx12 (software GPU))", 0.5, "×", d())],
    );
    report::write_json(&ben, &root.join("ben/exports/cpu-vs-gpu-report.json")).unwrap();
    let m = Provenance::Measured;
    let t = || Provenance::derived("the two measured throughputs");
    let precision = report(
        "precision",
        ben_host,
        "2026-11-30T11:00:00Z",
        vec![warp],
        vec![
            fig("FP32 throughput", 1000.0, "samples/s", m.clone()),
            fig("fp16 + GradScaler throughput", 1800.0, "samples/s", m.clone()),
            fig("bf16 throughput", 1500.0, "samples/s", m),
            fig("bf16 speed-up over FP32", 1.5, "×", t()),
            fig("fp16 + GradScaler speed-up over FP32", 1.8, "×", t()),
        ],
    );
    report::write_all(&precision, &root.join("ben/precision")).unwrap();
    put(root, "junk/report.json", "{\"exercise\": \"cpu-vs-gpu\", \"title\": ");
    put(root, "junk/package-report.json", "{\"name\": \"left-pad\", \"version\": \"1.3.0\"}");
    put(root, "junk/notes-report.json", "# My notes\nThe GPU was faster.\n");
    put(root, "junk/unrelated.txt", "not a report, not named like one");
    let future = report("warp-drive", "AMD Ryzen 7 7840U (16 threads), linux", "2026-11-30T12:00:00Z", vec![llvmpipe], vec![]);
    report::write_json(&future, &root.join("junk/future/report.json")).unwrap();
    dir
}

fn rel(p: &str) -> String {
    p.split('/').collect::<std::path::PathBuf>().display().to_string()
}

fn reason<'c>(c: &'c Class, file: &str) -> &'c str {
    &c.skipped.iter().find(|s| s.file == rel(file)).unwrap_or_else(|| panic!("{file} is not in the skipped list: {:?}", c.skipped)).reason
}

/// What every face checks: the groups, rows, key figures and the skipped files.
pub(crate) fn check_class(c: &Class) {
    let ids: Vec<&str> = c.groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["cpu-vs-gpu", "precision"]);
    let g = &c.groups[0];
    let files: Vec<&str> = g.rows.iter().map(|r| r.file.as_str()).collect();
    assert_eq!(files, [rel("ann/report.json"), rel("ben/exports/cpu-vs-gpu-report.json")]);
    // Ann's key figure is the hardware GPU's ratio, not the software adapter's listed first.
    let ann = &g.rows[0];
    let key = ann.key.as_ref().unwrap();
    assert_eq!((key.label.as_str(), key.value, key.unit.as_str()), ("GPU / CPU training speed (NVIDIA GeForce RTX 3060 Vulkan)", 6.0, "×"));
    assert_eq!(key.provenance, Provenance::derived("the two measured training times"));
    assert!(ann.machine().starts_with("NVIDIA GeForce RTX 3060") && ann.machine().contains("AMD Ryzen 7 7840U"), "{}", ann.machine());
    assert_eq!(ann.drivers, ["llvmpipe Mesa 22.3.6", "NVIDIA 550.54.14"]);
    assert_eq!(ann.backends, ["cpu", "gpu"]);
    assert!(ann.adapters[0].contains("software GPU: runs on your CPU"), "{:?}", ann.adapters);
    let ben = &g.rows[1];
    assert_eq!(ben.key.as_ref().map(|f| f.value), Some(0.5));
    assert!(ben.machine().contains("software GPU"), "{}", ben.machine());
    assert_eq!(ben.date, "2026-11-30T10:00:00Z");
    // Exercise 3's key figure is FP16's speed-up, although bf16's comes first.
    let p = &c.groups[1].rows[0];
    assert_eq!(p.key.as_ref().map(|f| (f.label.as_str(), f.value)), Some(("fp16 + GradScaler speed-up over FP32", 1.8)));

    assert_eq!(c.skipped.len(), 4, "{:?}", c.skipped);
    assert!(reason(c, "junk/report.json").starts_with("not JSON"), "{}", reason(c, "junk/report.json"));
    assert!(reason(c, "junk/notes-report.json").starts_with("not JSON"));
    assert!(
        reason(c, "junk/package-report.json").contains("not a gpulab report") && reason(c, "junk/package-report.json").contains("exercise")
    );
    let future = c.skipped.iter().find(|s| s.reason.contains("warp-drive")).expect("the unknown exercise is skipped");
    assert!(future.reason.contains("does not have") && future.reason.contains("cpu-vs-gpu"), "{}", future.reason);
    // report.csv, report.md and other files are not reports and are not listed.
    assert!(c.skipped.iter().all(|s| s.file.ends_with(".json")), "{:?}", c.skipped);
}

#[test]
fn a_folder_of_reports_groups_by_exercise_with_key_figures_and_skips_bad_files() {
    let dir = class_folder();
    let c = class::read(dir.path()).unwrap();
    check_class(&c);
    assert_eq!(c.report_count(), 3);
    assert!(c.truncated.is_none());
    assert!(c.summary().starts_with("3 reports from 2 exercises") && c.summary().contains("4 files skipped"), "{}", c.summary());

    // The table: a row per machine; the value column carries the unit and the provenance.
    let t = c.groups[0].table();
    assert_eq!(t.rows.len(), 2);
    let col = |name: &str| t.columns.iter().position(|c| c.name == name).unwrap_or_else(|| panic!("no column {name}"));
    let v = &t.columns[col("value")];
    assert_eq!((v.unit.as_str(), v.provenance.clone()), ("×", Some(Provenance::derived("the two measured training times"))));
    assert_eq!(t.rows[0][col("value")], Cell::Num(6.0));
    assert_eq!(t.rows[1][col("value")], Cell::Num(0.5));
    assert_eq!(t.rows[0][col("source")], Cell::Text("derived from the two measured training times".into()));
    assert_eq!(t.rows[0][col("driver")], Cell::Text("llvmpipe Mesa 22.3.6; NVIDIA 550.54.14".into()));
    // Ben's software adapter has no driver string: the cell says so instead of being blank.
    assert_eq!(t.rows[1][col("driver")], Cell::Empty);

    // The chart: the key figure per machine, x = the row's number.
    let ch = c.groups[0].chart().unwrap();
    assert_eq!(ch.kind, ChartKind::Bars);
    assert_eq!(ch.y_label, "×");
    assert_eq!(ch.series.len(), 1);
    assert_eq!(ch.series[0].points, vec![[1.0, 6.0], [2.0, 0.5]]);
    assert_eq!(ch.series[0].provenance, Provenance::derived("the two measured training times"));
}

#[test]
fn class_exports_hold_every_row_escaped() {
    let dir = class_folder();
    let c = class::read(dir.path()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let paths = class::write_all(&c, out.path()).unwrap();
    assert_eq!(paths, [out.path().join("class.csv"), out.path().join("class.html")]);

    // CSV: one long table, the header then a row per report of every exercise.
    let mut r = csv::Reader::from_path(&paths[0]).unwrap();
    let head: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(head, class::CSV_HEADER);
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 3);
    let f = |row: &csv::StringRecord, name: &str| row.get(head.iter().position(|h| h == name).unwrap()).unwrap().to_string();
    assert_eq!((f(&rows[0], "exercise"), f(&rows[0], "value"), f(&rows[0], "unit")), ("cpu-vs-gpu".into(), "6".into(), "×".into()));
    assert_eq!(f(&rows[0], "provenance"), "derived from the two measured training times");
    assert_eq!(f(&rows[1], "host"), "Intel Core i5 <script>alert(1)</script> (8 threads), windows");
    assert_eq!((f(&rows[2], "exercise"), f(&rows[2], "value")), ("precision".into(), "1.8".into()));
    assert_eq!(f(&rows[2], "key_figure"), "fp16 + GradScaler speed-up over FP32");

    // HTML: self-contained, escaped, a table and an SVG bar per report, the skipped files.
    let html = std::fs::read_to_string(&paths[1]).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<style>"));
    assert!(!html.contains("<script"), "no scripts, and report text is escaped");
    assert!(html.contains("Intel Core i5 &lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("src=") && !html.contains("<link"), "no external resources");
    assert_eq!(html.matches("<svg").count(), 2, "one chart per exercise");
    assert_eq!(html.matches("<rect").count(), 3, "one bar per report");
    for text in [
        "Exercise 1 · CPU vs GPU",
        "GPU / CPU training speed (NVIDIA GeForce RTX 3060 Vulkan)",
        "fp16 + GradScaler speed-up over FP32",
        "derived from the two measured training times",
        "Skipped files",
        "not JSON",
        "warp-drive",
    ] {
        assert!(html.contains(text), "class.html lacks {text:?}");
    }
    assert!(html.contains(&rel("ann/report.json")) && html.contains(&rel("junk/package-report.json")));
    // The page parses as XML-ish markup with balanced SVG (a cheap well-formedness check).
    for svg in html.split("<svg").skip(1) {
        let body = &svg[..svg.find("</svg>").expect("every svg is closed")];
        let doc = format!("<svg{body}</svg>");
        roxmltree::Document::parse(&doc).unwrap_or_else(|e| panic!("the SVG is not well formed: {e}\n{doc}"));
    }
}

#[test]
fn class_refuses_a_missing_folder_or_a_file_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = class::read(&missing).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
    put(dir.path(), "report.json", "{}");
    let e = class::read(&dir.path().join("report.json")).unwrap_err().to_string();
    assert!(e.contains("not a folder"), "{e}");
    // An empty folder is a class of nobody, not an error.
    let empty = tempfile::tempdir().unwrap();
    let c = class::read(empty.path()).unwrap();
    assert!(c.groups.is_empty() && c.skipped.is_empty());
    assert!(class::html_page(&c).contains("0 reports"));
}

#[test]
fn gpulab_class_prints_the_tables_and_writes_the_files() {
    let dir = class_folder();
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpulab")).arg("class").arg(dir.path()).arg("--out").arg(out.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    for text in [
        "3 reports from 2 exercises",
        "Exercise 1 · CPU vs GPU",
        "Exercise 3 ·",
        "NVIDIA GeForce RTX 3060",
        "Skipped files",
        "not JSON",
        "not a gpulab report",
        "warp-drive",
        "class.csv",
        "class.html",
    ] {
        assert!(stdout.contains(text), "stdout lacks {text:?}:\n{stdout}");
    }
    assert!(stdout.contains(&rel("ben/exports/cpu-vs-gpu-report.json")));
    assert!(out.path().join("class.csv").is_file() && out.path().join("class.html").is_file());

    let o = Command::new(env!("CARGO_BIN_EXE_gpulab")).args(["class", "/definitely/not/a/class"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("/definitely/not/a/class") && !err.contains("panicked"), "{err}");
}

#[cfg(feature = "gui")]
#[test]
fn the_lab_opens_a_class_view_of_a_folder_with_its_tables_and_skipped_files() {
    use egui_kittest::kittest::Queryable;
    use std::time::{Duration, Instant};
    let dir = class_folder();
    let mut h = crate::gui::harness();
    h.step();
    assert!(h.query_by_label("Open a folder of reports…").is_some(), "the toolbar offers the class view");
    h.state_mut().open_class_folder(dir.path());
    let t0 = Instant::now();
    while h.state().class_busy() || h.state().class_view().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the folder was not read in 60 s");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
    h.step();
    check_class(h.state().class_view().unwrap());
    // What the instructor sees: the summary, a table per exercise with the machines and key
    // figures, and the skipped files with their reasons.
    h.get_by_label_contains("3 reports from 2 exercises");
    h.get_by_label("Exercise 1 · CPU vs GPU — 2 reports");
    h.get_by_label("Exercise 3 · FP32 vs FP16/BF16 mixed precision — 1 report");
    h.get_by_label("GPU / CPU training speed (NVIDIA GeForce RTX 3060 Vulkan)");
    h.get_by_label("fp16 + GradScaler speed-up over FP32");
    assert!(h.query_all_by_label_contains("NVIDIA GeForce RTX 3060 · AMD Ryzen 7 7840U").count() > 0, "the machine column");
    h.get_by_label("Skipped files");
    h.get_by_label(&rel("junk/package-report.json"));
    assert!(h.query_all_by_label_contains("not JSON").count() >= 2, "the reasons are shown");
    h.get_by_label("Export CSV…");
    h.get_by_label("Export HTML…");
    // Exporting without a dialog writes both files.
    let out = tempfile::tempdir().unwrap();
    h.state_mut().export_class_to(out.path().join("class"));
    let t0 = Instant::now();
    while h.state().class_busy() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the export did not finish");
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    let csv = std::fs::read_to_string(out.path().join("class/class.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(out.path().join("class/class.html").is_file());
}

/// A report whose run recorded driver telemetry (a fake source's readings through the report
/// writer every monitored exercise uses) and one whose machine had no source: the class view
/// shows the summary per machine, in the table, the CSV and the page.
#[test]
fn the_class_view_shows_each_machines_driver_telemetry_or_that_there_was_none() {
    use gpulab::device::monitor::{Missing, Recording, Sample};
    use gpulab::exercises::monitor;
    let dir = tempfile::tempdir().unwrap();
    let gpu = |util: f64, mem: u64, watts: f64| Sample { source: "NVML".into(), ..Sample::of("NVIDIA L4", util, mem, 61.0, watts) };
    let mut rec = Recording::new(0.25, 64);
    rec.push(0.0, &[gpu(90.0, 2 << 30, 60.0)]);
    rec.push(0.25, &[gpu(70.0, 4 << 30, 70.0)]);
    let nvidia = backend(BackendKind::Gpu, "NVIDIA L4", "Vulkan", "NVIDIA 550.54.14", false);
    let mut ann = report("batch-sweep", "AMD EPYC (8 threads), linux", "2026-12-01T09:00:00Z", vec![nvidia], vec![]);
    monitor::record(&rec, &mut ann);
    report::write_json(&ann, &dir.path().join("ann/report.json")).unwrap();
    let none = Recording { missing: vec![Missing { source: "NVML".into(), why: "no library".into() }], ..Recording::new(0.25, 64) };
    let mut ben = report("batch-sweep", "Intel Core i5 (4 threads), linux", "2026-12-01T10:00:00Z", vec![], vec![]);
    monitor::record(&none, &mut ben);
    report::write_json(&ben, &dir.path().join("ben/report.json")).unwrap();

    let c = class::read(dir.path()).unwrap();
    let rows = &c.groups[0].rows;
    let want =
        "NVIDIA L4 (from NVML): mean utilisation 80 %, max utilisation 90 %, peak memory 4096 MiB, max temperature 61 °C, mean power 65 W";
    assert_eq!(rows[0].telemetry.as_deref(), Some(want));
    assert_eq!(rows[1].telemetry.as_deref(), Some("none recorded (no source on this machine)"));
    assert_eq!(rows[0].key, None, "a telemetry figure is not the exercise's key figure");
    let t = c.groups[0].table();
    let col = t.columns.iter().position(|c| c.name == "driver telemetry").expect("a driver telemetry column");
    assert_eq!(t.rows[0][col], Cell::Text(want.into()));
    let csv = class::csv_text(&c).unwrap();
    assert!(csv.lines().next().unwrap().contains("driver_telemetry") && csv.contains(want), "{csv}");
    assert!(class::html_page(&c).contains("mean utilisation 80 %"));
}

/// One scan holds a bounded amount: a string longer than the class view keeps is cut, saying
/// how much; once the scan has read its byte budget the remaining reports are skipped by name
/// with the reason (eight reports with a 30 MB string each took 1,089 MB before).
#[test]
fn a_scan_bounds_the_bytes_it_reads_and_the_strings_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let long = "A".repeat(1 << 20);
    let r = report("cpu-vs-gpu", &long, "2026-11-30T09:00:00Z", vec![], vec![fig(&long, 1.0, "×", Provenance::Measured)]);
    report::write_json(&r, &dir.path().join("a-long-report.json")).unwrap();
    // Sparse files of 30 MiB each, 360 MiB together: read (and found not to be JSON), they use
    // up the scan's byte budget without using the disk.
    for i in 0..12 {
        let f = std::fs::File::create(dir.path().join(format!("big{i:02}-report.json"))).unwrap();
        f.set_len(30 << 20).unwrap();
    }
    let c = class::read(dir.path()).unwrap();
    assert_eq!(c.report_count(), 1, "{:?}", c.skipped);
    let row = &c.groups[0].rows[0];
    assert!(row.host.len() < 10_000 && row.host.contains("bytes cut"), "kept {} bytes of the host name", row.host.len());
    let label = &row.key.as_ref().unwrap().label;
    assert!(label.len() < 10_000 && label.contains("bytes cut"), "kept {} bytes of the key figure's label", label.len());
    let over: Vec<_> = c.skipped.iter().filter(|s| s.reason.contains("MiB this scan reads")).collect();
    assert!(!over.is_empty(), "{:?}", c.skipped);
    assert!(c.truncated.as_deref().is_some_and(|t| t.contains("MiB")), "{:?}", c.truncated);
}
