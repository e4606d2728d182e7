//! `gpulab run all [--backend …] [--only ID,ID…] --out DIR`: every exercise with its defaults,
//! one after another, each report in DIR/<id>/, and DIR/index.html linking them. A failing
//! exercise is listed with its error and the rest still run; the index is rewritten after each
//! exercise, so an interrupted run (Ctrl-C ends the process, as with `gpulab run`) leaves an
//! index of what finished.

use std::path::Path;
use std::time::Instant;

use gpulab::exercises::{self, Exercise, Settings, Value};
use gpulab::report::{self, Report, html::IndexRow};

use super::progress;
use super::run::{CliSink, RunArgs};

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let selected = select(&a.only)?;
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let heading = format!(
        "gpulab {} · {} exercise(s) with their default settings{} · started {started} · {}",
        env!("CARGO_PKG_VERSION"),
        selected.len(),
        a.backend.as_deref().map(|b| format!(", backend {b} where an exercise has a backend setting")).unwrap_or_default(),
        report::Metadata::new(0).host
    );
    let index = a.out.join("index.html");
    let mut rows: Vec<IndexRow> = Vec::new();
    // An index exists from the start, so even a run stopped during the first exercise leaves one.
    report::write_index(&index, &heading, &rows)?;
    let total = Instant::now();
    for (i, ex) in selected.iter().enumerate() {
        eprintln!("[{}/{}] {} …", i + 1, selected.len(), ex.title());
        let t = Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_one(ex.as_ref(), a.backend.as_deref(), &a.out.join(ex.id()))))
                .unwrap_or_else(|p| Err(anyhow::anyhow!("the exercise panicked: {}", panic_text(&p))));
        let seconds = t.elapsed().as_secs_f64();
        let row = match result {
            Ok(r) => {
                let summary = gpulab::text::terminal_text(&r.verdict.summary);
                eprintln!("[{}/{}] {} finished in {seconds:.1} s: {summary}", i + 1, selected.len(), ex.id());
                IndexRow {
                    number: ex.number(),
                    title: r.title.clone(),
                    key_figure: ex.key_figure(&r).cloned(),
                    verdict: r.verdict.summary.clone(),
                    seconds,
                    link: Some(format!("{}/report.html", ex.id())),
                    error: None,
                }
            }
            Err(e) => {
                let why = gpulab::text::terminal_text(&format!("{e:#}")).into_owned();
                eprintln!("[{}/{}] {} FAILED after {seconds:.1} s: {why}", i + 1, selected.len(), ex.id());
                IndexRow {
                    number: ex.number(),
                    title: format!("Exercise {} · {}", ex.number(), ex.title()),
                    key_figure: None,
                    verdict: String::new(),
                    seconds,
                    link: None,
                    error: Some(format!("{e:#}")),
                }
            }
        };
        rows.push(row);
        report::write_index(&index, &heading, &rows)?;
    }
    let failed: Vec<String> = rows.iter().filter(|r| r.error.is_some()).map(|r| r.number.to_string()).collect();
    println!(
        "ran {} exercise(s) in {:.1} s; wrote {}",
        rows.len(),
        total.elapsed().as_secs_f64(),
        gpulab::text::terminal_line(&index.display().to_string())
    );
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} exercises failed (numbers {}); index.html lists each with its error",
            failed.len(),
            rows.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// The exercises to run, in chapter order: all, or those named by `--only`.
pub(super) fn select(only: &[String]) -> anyhow::Result<Vec<Box<dyn Exercise>>> {
    let all = exercises::registry();
    if only.is_empty() {
        return Ok(all);
    }
    let mut wanted = Vec::new();
    for name in only.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let Some(ex) = exercises::find(name) else {
            anyhow::bail!("--only: no exercise {name:?}; known: {}", exercises::ids().join(", "));
        };
        wanted.push(ex.id());
    }
    if wanted.is_empty() {
        anyhow::bail!("--only: name at least one exercise (ids or numbers, comma-separated)");
    }
    Ok(all.into_iter().filter(|e| wanted.contains(&e.id())).collect())
}

/// One exercise with its defaults (and the backend override), its report written into `dir`.
fn run_one(ex: &dyn Exercise, backend: Option<&str>, dir: &Path) -> anyhow::Result<Report> {
    let mut settings = ex.settings();
    if let Some(b) = backend {
        override_backends(&mut settings, b)?;
    }
    ex.validate(&settings)?;
    let mut sink = CliSink { bar: progress::bar(0, ex.title()) };
    let report = ex.run(&settings, &mut sink);
    sink.bar.finish_and_clear();
    let report = report?;
    report::write_all(&report, dir)?;
    Ok(report)
}

/// Sets every backend (device-list) setting the exercise has to `devices`.
fn override_backends(settings: &mut Settings, devices: &str) -> anyhow::Result<()> {
    let keys: Vec<String> = settings.0.iter().filter(|s| matches!(s.value, Value::Devices(_))).map(|s| s.key.clone()).collect();
    for k in keys {
        settings.set(&k, devices).map_err(|e| anyhow::anyhow!("--backend {devices}: {e}"))?;
    }
    Ok(())
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "no message".into())
}
