//! Named presets: every one validates, names are found (and unknown ones refused with the valid
//! list), the active preset is recognised until a setting changes, "force an out-of-memory"
//! really reaches the out-of-memory path, and `size=auto` sizes the model from a measured peak.

use gpulab::exercises::{self, CollectSink, presets};
use gpulab::report::{Cell, Provenance};

#[test]
fn every_preset_of_every_exercise_validates() {
    let mut with_presets = 0;
    for ex in exercises::registry() {
        let all = ex.presets();
        with_presets += usize::from(!all.is_empty());
        let mut names: Vec<&str> = all.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "{}: two presets share a name", ex.id());
        for p in &all {
            assert!(!p.description.trim().is_empty(), "{} / {}: no description", ex.id(), p.name);
            let s = p.settings(ex.as_ref()).unwrap_or_else(|e| panic!("{} / {}: {e}", ex.id(), p.name));
            ex.validate(&s).unwrap_or_else(|e| panic!("{} / {} does not validate: {e}", ex.id(), p.name));
            // Each override is what the settings now hold (none is silently dropped).
            for (k, v) in &p.overrides {
                let mut want = ex.settings();
                want.set(k, v).unwrap();
                assert_eq!(s.get(k).map(|x| &x.value), want.get(k).map(|x| &x.value), "{} / {}: {k}", ex.id(), p.name);
            }
        }
    }
    assert_eq!(with_presets, 10, "every exercise offers presets");
}

#[test]
fn presets_are_found_by_name_and_unknown_ones_list_the_valid() {
    let ex = exercises::find("cpu-vs-gpu").unwrap();
    assert_eq!(presets::find(ex.as_ref(), "Big Enough For A GPU").unwrap().name, "big enough for a GPU");
    let err = presets::find(ex.as_ref(), "warp speed").unwrap_err().to_string();
    for want in ["warp speed", "as in the lesson", "big enough for a GPU", "scaled to this adapter"] {
        assert!(err.contains(want), "{want:?} missing from {err}");
    }
}

#[test]
fn the_active_preset_is_the_one_the_settings_match() {
    let ex = exercises::find("batch-sweep").unwrap();
    // The defaults are the lesson's preset.
    assert_eq!(presets::active(ex.as_ref(), &ex.settings()), Some("as in the lesson"));
    let mut s = presets::find(ex.as_ref(), "force an out-of-memory").unwrap().settings(ex.as_ref()).unwrap();
    assert_eq!(presets::active(ex.as_ref(), &s), Some("force an out-of-memory"));
    s.set("epochs", "2").unwrap();
    assert_eq!(presets::active(ex.as_ref(), &s), None, "an edited setting ends the preset");
}

/// Runs exercise 2's "force an out-of-memory" preset on `backend`: the small batches train, the
/// largest is refused by the ledger's budget, and the sweep goes on.
fn out_of_memory_preset_on(backend: &str) {
    let ex = exercises::find("batch-sweep").unwrap();
    let mut s = presets::find(ex.as_ref(), "force an out-of-memory").unwrap().settings(ex.as_ref()).unwrap();
    s.set("backend", backend).unwrap();
    let report = ex.run(&s, &mut CollectSink::default()).unwrap();
    let t = report.table("Batch sizes").expect("a Batch sizes table");
    let status: Vec<String> = t.rows.iter().map(|r| if let Cell::Text(t) = &r[1] { t.clone() } else { String::new() }).collect();
    assert_eq!(status.len(), 3, "{status:?}");
    assert_eq!(&status[..2], ["ok", "ok"], "{backend}: the small batches should fit: {status:?}");
    assert!(status[2].starts_with("OUT OF MEMORY"), "{backend}: batch 8192 should not fit: {status:?}");
    assert!(report.verdict.summary.contains("did not fit"), "{}", report.verdict.summary);
}

#[test]
fn the_out_of_memory_preset_reaches_the_out_of_memory_path_on_the_cpu() {
    out_of_memory_preset_on("cpu");
}

#[test]
fn the_out_of_memory_preset_reaches_the_out_of_memory_path_on_a_gpu() {
    crate::common::with_gpu("the_out_of_memory_preset_on_a_gpu", |_| out_of_memory_preset_on("gpu"));
}

#[test]
fn size_auto_reports_the_widths_it_chose_from_the_measured_peak() {
    let ex = exercises::find("batch-sweep").unwrap();
    let mut s = presets::find(ex.as_ref(), "scaled to this adapter").unwrap().settings(ex.as_ref()).unwrap();
    s.apply(&["backend=cpu", "dataset=digits", "batch_sizes=128", "target_s=1", "epochs=1"].map(String::from)).unwrap();
    let report = ex.run(&s, &mut CollectSink::default()).unwrap();
    let peak = report.figures.iter().find(|f| f.label.contains("matmul peak")).expect("the peak that sized the model");
    assert!(peak.value > 0.0 && peak.unit == "GFLOP/s", "{peak:?}");
    // Measured now, or read from the cache of an earlier measurement: never a bare number.
    assert!(
        matches!(&peak.provenance, Provenance::Measured) || matches!(&peak.provenance, Provenance::Derived(f) if f.contains("cached")),
        "{:?}",
        peak.provenance
    );
    let widths: Vec<f64> = report.figures.iter().filter(|f| f.label.starts_with("auto-sized hidden layer")).map(|f| f.value).collect();
    assert_eq!(widths.len(), 2, "{:?}", report.figures);
    // The report's config holds the widths the run trained with.
    let config = &report.config["hidden"];
    assert_eq!(config, &widths.iter().map(|w| w.to_string()).collect::<Vec<_>>().join(","));
    assert_eq!(report.config["size"], "auto");
    assert!(report.notes.iter().any(|n| n.starts_with("size=auto")), "{:?}", report.notes);
}
