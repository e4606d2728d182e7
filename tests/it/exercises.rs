//! The exercises headless, as the CLI and the GUI run them: tiny configs to completion, the
//! tables and verdicts they promise, settings that refuse bad values, reports that round-trip.

use gpulab::exercises::{self, CollectSink, Event, Settings};
use gpulab::report::{self, Cell, Report};

use crate::common::require_gpu;

fn settings(id: &str, pairs: &[&str]) -> Settings {
    let ex = exercises::find(id).unwrap();
    let mut s = ex.settings();
    s.apply(&pairs.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap();
    s
}

fn run(id: &str, s: &Settings) -> (Report, Vec<Event>) {
    let mut sink = CollectSink::default();
    let report = exercises::find(id).unwrap().run(s, &mut sink).unwrap();
    (report, sink.events)
}

fn text(c: &Cell) -> String {
    match c {
        Cell::Text(t) => t.clone(),
        Cell::Num(v) => v.to_string(),
        Cell::Empty => String::new(),
    }
}

/// The registry is the one list of exercises: numbered 1, 2, … in order without a gap, ids
/// unique and findable by id or number, each with its lesson (headed `# N · `) and a quick run
/// whose settings apply and validate.
#[test]
fn registry_numbers_its_exercises_in_order_with_lessons_and_quick_runs() {
    let all = exercises::registry();
    assert!(!all.is_empty());
    let mut ids: Vec<&str> = Vec::new();
    for (i, e) in all.iter().enumerate() {
        let n = i + 1;
        assert_eq!(e.number() as usize, n, "{}: numbers run 1, 2, … in the registry's order", e.id());
        assert!(!ids.contains(&e.id()), "two exercises are called {}", e.id());
        ids.push(e.id());
        assert!(e.lesson().starts_with(&format!("# {n} ")), "lesson {n} heading");
        assert_eq!(exercises::find(e.id()).map(|x| x.number()), Some(e.number()));
        assert_eq!(exercises::find(&n.to_string()).map(|x| x.id()), Some(e.id()));
        let mut s = e.settings();
        let pairs: Vec<String> = e.quick_run().iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.apply(&pairs).unwrap_or_else(|err| panic!("{}: quick run: {err}", e.id()));
        e.validate(&s).unwrap_or_else(|err| panic!("{}: quick run: {err}", e.id()));
    }
    assert_eq!(exercises::ids(), ids);
}

#[test]
fn cpu_vs_gpu_runs_to_a_computed_verdict() {
    use gpulab::device::gpu::adapters;
    let has_gpu = require_gpu() || !adapters::enumerate(&adapters::instance()).is_empty();
    let backends = if has_gpu { "cpu,gpu" } else { "cpu" };
    let s = settings(
        "cpu-vs-gpu",
        &[&format!("backends={backends}"), "epochs=1", "sweep_sizes=16,48", "sweep_runs=1", "hidden=32", "size=as-set"],
    );
    let (r, events) = run("cpu-vs-gpu", &s);
    let training = r.table("Training").unwrap();
    assert_eq!(training.rows.len(), backends.split(',').count());
    assert!(training.rows.iter().all(|row| text(row.last().unwrap()) == "ok"), "{:?}", training.rows);
    let sweep = r.table("Matmul sweep").unwrap();
    assert_eq!(sweep.rows.len(), 2);
    assert!(r.chart("gflops").unwrap().series.iter().all(|s| s.points.len() == 2));
    assert!(!r.verdict.summary.is_empty());
    if backends.contains("gpu") {
        // The verdict quotes the measured times, so it changes with the numbers.
        assert!(r.verdict.summary.contains(" against ") && r.verdict.summary.contains('×'), "{}", r.verdict.summary);
        assert!(r.figures.iter().any(|f| f.label.contains("than the CPU by") && f.value >= 1.0));
        // The key figure (the class view's) is the GPU / CPU speed ratio, consistent with it.
        let key = exercises::find("cpu-vs-gpu").unwrap().key_figure(&r).cloned().expect("a key figure");
        assert!(key.label.starts_with("GPU / CPU training speed") && key.value > 0.0, "{key:?}");
        let factor = r.figures.iter().find(|f| f.label.contains("than the CPU by")).unwrap();
        let expect = if factor.label.contains("faster") { factor.value } else { 1.0 / factor.value };
        assert!((key.value - expect).abs() <= 1e-9 * expect, "{key:?} vs {factor:?}");
        for b in r.metadata.backends.iter().filter(|b| b.software) {
            assert!(r.notes.iter().any(|n| n.contains("software GPU: runs on your CPU")), "{b:?}");
        }
    }
    assert!(events.iter().any(|e| matches!(e, Event::Point { chart, .. } if chart == "loss")));
    assert!(events.iter().any(|e| matches!(e, Event::Phase(p) if p.contains("matmul sweep"))));
}

#[test]
fn batch_sweep_reports_memory_and_an_out_of_memory_row_then_continues() {
    // 0.6 MiB fits batch 16 of the digits MLP but not batch 2048; batch 32 after it must still run.
    let s = settings(
        "batch-sweep",
        &["backend=cpu", "dataset=digits", "hidden=64", "epochs=1", "batch_sizes=16,2048,32", "vram_budget_mib=0.6"],
    );
    let (r, _) = run("batch-sweep", &s);
    let t = r.table("Batch sizes").unwrap();
    let status: Vec<String> = t.rows.iter().map(|row| text(&row[1])).collect();
    assert_eq!(status[0], "ok");
    assert!(status[1].starts_with("OUT OF MEMORY") && status[1].contains("budget"), "{status:?}");
    assert_eq!(status[2], "ok", "the sweep continues after an out-of-memory");
    assert!(r.verdict.summary.contains("Batch 2048 did not fit"), "{}", r.verdict.summary);
    assert!(r.verdict.evidence.iter().any(|e| e.contains("reduce the batch size")));
    // Activations grow with the batch; parameters do not.
    let col = |name: &str| t.columns.iter().position(|c| c.name == name).unwrap();
    let num = |row: usize, c: usize| match t.rows[row][c] {
        Cell::Num(v) => v,
        _ => panic!("not a number"),
    };
    assert_eq!(num(0, col("parameters")), num(2, col("parameters")));
    assert!(num(2, col("activations")) > num(0, col("activations")));
    assert!(r.notes.iter().any(|n| n.contains("simulated")));
    // The key figure is the highest measured throughput, of the batch size the table shows.
    let key = exercises::find("batch-sweep").unwrap().key_figure(&r).cloned().expect("a key figure");
    let tp = col("throughput");
    let best = (0..t.rows.len())
        .filter_map(|i| match t.rows[i][tp] {
            Cell::Num(v) => Some(v),
            _ => None,
        })
        .fold(f64::MIN, f64::max);
    assert!(key.label.starts_with("highest throughput") && key.value == best, "{key:?} vs {best}");
}

#[test]
fn batch_sweep_trains_the_cnn_and_names_it() {
    let s =
        settings("batch-sweep", &["backend=cpu", "model=cnn", "dataset=shapes:res=8,n=200", "hidden=16", "epochs=1", "batch_sizes=8,32"]);
    let (r, _) = run("batch-sweep", &s);
    let t = r.table("Batch sizes").unwrap();
    assert!(t.rows.iter().all(|row| text(&row[1]) == "ok"), "{:?}", t.rows);
    assert_eq!(r.config.get("model").map(String::as_str), Some("cnn"));
    let arch = r.metadata.hyperparameters.get("architecture").unwrap();
    assert!(arch.starts_with("CNN 1x8x8 conv3x3 16-pool-conv3x3 32-pool-128-16-4"), "{arch}");
    // The exercises without a model setting train the MLP, and say so.
    let ex = exercises::find("quantization").unwrap();
    assert!(ex.settings().get("model").is_none());
}

#[test]
fn the_model_setting_is_validated_against_the_data_set() {
    let with_model: Vec<_> = exercises::registry().into_iter().filter(|e| e.settings().get("model").is_some()).collect();
    assert!(with_model.len() >= 6, "the training exercises have a model setting");
    for ex in with_model {
        let id = ex.id();
        let mut s = ex.settings();
        assert!(s.apply(&["model=resnet".to_string()]).is_err(), "{id}: model=resnet accepted");
        s.apply(&["model=cnn".to_string(), "dataset=digits".to_string()]).unwrap();
        ex.validate(&s).unwrap_or_else(|e| panic!("{id}: cnn on digits refused: {e}"));
    }
    let ex = exercises::find("profiling").unwrap();
    let mut s = ex.settings();
    // The CNN trains under autocast too.
    s.apply(&["model=cnn".to_string(), "dataset=shapes".to_string(), "precision=bf16".to_string()]).unwrap();
    ex.validate(&s).unwrap_or_else(|e| panic!("profiling: a bf16 cnn refused: {e}"));
}

#[test]
fn settings_refuse_bad_values_and_keep_the_old_ones() {
    let ex = exercises::find("cpu-vs-gpu").unwrap();
    let mut s = ex.settings();
    for (pair, word) in [
        ("batch=0", "outside"),
        ("lr=NaN", "outside"),
        ("lr=-1", "outside"),
        ("epochs=ten", "whole number"),
        ("backends=tpu", "unknown backend"),
        ("sweep_sizes=", "empty"),
        ("nonsense=1", "unknown setting"),
        ("optimizer=lion", "not one of"),
    ] {
        let err = s.apply(&[pair.to_string()]).unwrap_err().to_string();
        assert!(err.contains(word), "{pair}: {err}");
    }
    assert_eq!(s, ex.settings(), "failed edits leave the settings unchanged");
    s.apply(&["dataset=shapes:res=0".to_string()]).unwrap();
    assert!(ex.validate(&s).is_err(), "an invalid data set is caught by validate");
    let mut b = exercises::find("batch-sweep").unwrap().settings();
    b.apply(&["backend=cpu,gpu".to_string()]).unwrap();
    assert!(exercises::find("batch-sweep").unwrap().validate(&b).unwrap_err().to_string().contains("exactly one"));
}

#[test]
fn reports_round_trip_through_json_and_write_all_four_files() {
    let s = settings("batch-sweep", &["backend=cpu", "dataset=digits", "hidden=16", "epochs=1", "batch_sizes=64"]);
    let (r, _) = run("batch-sweep", &s);
    let dir = tempfile::tempdir().unwrap();
    let paths = report::write_all(&r, dir.path()).unwrap();
    assert_eq!(paths.len(), 4);
    assert_eq!(report::read_json(&paths[0]).unwrap(), r);
    let html = std::fs::read_to_string(&paths[3]).unwrap();
    assert!(
        html.contains(&report::html::escape(&r.verdict.summary)) && html.matches("class=\"chart\"").count() == r.charts.len(),
        "report.html has the verdict and every chart"
    );
    let csv = std::fs::read_to_string(&paths[1]).unwrap();
    assert!(csv.starts_with("chart,x_label,y_label,series,x,y,provenance") && csv.contains("measured"));
    let md = std::fs::read_to_string(&paths[2]).unwrap();
    assert!(md.contains("## Verdict") && md.contains(&r.verdict.summary) && md.contains("seed 42"));
    let err = report::read_json(&paths[2]).unwrap_err().to_string();
    assert!(err.contains("not a gpulab report"), "{err}");
}

#[test]
fn stopping_returns_a_partial_report() {
    let mut sink = CollectSink { events: vec![], stop: gpulab::stop::Stop::set_already() };
    let s = settings("batch-sweep", &["backend=cpu", "dataset=digits", "epochs=1"]);
    let r = exercises::find("batch-sweep").unwrap().run(&s, &mut sink).unwrap();
    assert!(r.stopped_early);
    assert!(r.table("Batch sizes").unwrap().rows.is_empty());
}
