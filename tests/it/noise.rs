//! Conclusions that survive noise: the same settings run twice must not give opposite
//! conclusions outside noise (one "faster", the other "slower"). Each verdict that compares two
//! measured figures judges them by their repeats' spread (`gpulab_exercises::noise`), saying
//! "within noise" where the spreads overlap and "in one measurement" where it has no repeats.

use gpulab::exercises::{self, CollectSink};
use gpulab::report::Report;

fn run(id: &str, sets: &[&str]) -> Report {
    let ex = exercises::find(id).unwrap();
    let mut s = ex.settings();
    s.apply(&sets.iter().map(|x| x.to_string()).collect::<Vec<_>>()).unwrap();
    ex.run(&s, &mut CollectSink::default()).unwrap_or_else(|e| panic!("exercise {id}: {e}"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Said {
    Higher,
    Lower,
    WithinNoise,
    Once,
}

/// What a sentence concludes, from the words after `marker`: `higher` or `lower`, "within
/// noise", or "in one measurement".
fn said(sentence: &str, marker: &str, higher: &str, lower: &str) -> Option<Said> {
    let rest = &sentence[sentence.find(marker)? + marker.len()..];
    Some(if rest.contains("in one measurement") {
        Said::Once
    } else if rest.starts_with("within noise") {
        Said::WithinNoise
    } else if rest.starts_with(higher) {
        Said::Higher
    } else if rest.starts_with(lower) {
        Said::Lower
    } else {
        panic!("no conclusion after {marker:?} in {sentence:?}")
    })
}

/// Each 16-bit run's conclusion against FP32, by its label.
fn precision_conclusions(r: &Report) -> Vec<(String, Said)> {
    r.verdict
        .evidence
        .iter()
        .filter_map(|e| Some((e.split(':').next()?.to_string(), said(e, "× FP32's throughput — ", "faster", "slower")?)))
        .collect()
}

fn opposite(a: Said, b: Said) -> bool {
    matches!((a, b), (Said::Higher, Said::Lower) | (Said::Lower, Said::Higher))
}

/// Exercise 3 on the CPU flipped between "0.82×" and "1.38×" with the same settings; with its
/// epochs as repeats both runs judge the same way or one says "within noise".
#[test]
fn exercise_3_twice_does_not_contradict_itself() {
    let sets = ["backend=cpu", "epochs=4", "hidden=32", "size=as-set", "batch=64", "underflow_demo=false", "precisions=fp32,fp16,bf16"];
    let (a, b) = (precision_conclusions(&run("precision", &sets)), precision_conclusions(&run("precision", &sets)));
    assert_eq!(a.len(), 2, "fp16 and bf16 each compared with FP32: {a:?}");
    for ((la, sa), (lb, sb)) in a.iter().zip(&b) {
        assert_eq!(la, lb);
        assert_ne!(*sa, Said::Once, "4 epochs are repeats: {la}");
        assert!(!opposite(*sa, *sb), "{la}: {sa:?} in one run, {sb:?} in the other");
    }
}

/// One epoch is one measurement, and the verdict says so rather than "faster" or "slower".
#[test]
fn one_epoch_is_one_measurement() {
    let r = run("precision", &["backend=cpu", "epochs=1", "hidden=32", "size=as-set", "underflow_demo=false", "precisions=fp32,bf16"]);
    let c = precision_conclusions(&r);
    assert_eq!(c.iter().map(|(_, s)| *s).collect::<Vec<_>>(), [Said::Once], "{:?}", r.verdict.evidence);
}

#[test]
fn conclusions_are_read_from_the_words() {
    let m = "× FP32's throughput — ";
    assert_eq!(said("bf16: 1.38× FP32's throughput — faster.", m, "faster", "slower"), Some(Said::Higher));
    assert_eq!(said("bf16: 0.82× FP32's throughput — within noise (…).", m, "faster", "slower"), Some(Said::WithinNoise));
    assert_eq!(said("bf16: 0.82× FP32's throughput — slower in one measurement (…).", m, "faster", "slower"), Some(Said::Once));
    assert!(opposite(Said::Higher, Said::Lower) && !opposite(Said::Higher, Said::WithinNoise));
}

/// Exercise 9 judges INT8 against FP32 by the timed runs' spread: with 9 runs each the speed
/// sentence says faster, slower or within noise (never "one measurement"), and two runs of the
/// same settings never say opposite things.
#[test]
fn exercise_9_judges_int8_by_the_timed_runs() {
    let sets = ["backends=cpu", "epochs=1", "hidden=32", "latency_runs=9"];
    let at = |r: &Report| {
        let s = &r.verdict.summary;
        assert!(s.contains(" µs against FP32's ") || s.contains(" ms against FP32's "), "one unit for both times: {s}");
        let rest = &s[s.find("at batch 64: ").unwrap_or_else(|| panic!("no batch-64 conclusion in {s}")) + "at batch 64: ".len()..];
        let w = rest.split(';').next().unwrap_or("");
        if w.contains("in one measurement") {
            Said::Once
        } else if w.starts_with("within noise") {
            Said::WithinNoise
        } else if w.contains("× faster") {
            Said::Lower
        } else if w.contains("× slower") {
            Said::Higher
        } else {
            panic!("no conclusion in {w:?}")
        }
    };
    let (a, b) = (run("quantization", &sets), run("quantization", &sets));
    let (sa, sb) = (at(&a), at(&b));
    assert_ne!(sa, Said::Once, "{}", a.verdict.summary);
    assert!(!opposite(sa, sb), "{sa:?} in one run, {sb:?} in the other");
    let t = a.table("FP32 vs FP16 vs INT8").expect("the comparison table");
    assert!(t.columns.iter().any(|c| c.name.contains("lower quartile")), "the spread is in the table");
}

/// Exercises 4 and 7 at their defaults (CPU) judge their runs by repeats (log windows of a
/// one- or two-epoch run), not "one measurement".
#[test]
fn exercises_4_and_7_defaults_have_repeats() {
    let p = run("profiling", &["backend=cpu"]);
    assert!(p.verdict.summary.contains("measured again"), "{}", p.verdict.summary);
    assert!(!p.verdict.summary.contains("one measurement"), "{}", p.verdict.summary);
    let i = run("input-pipeline", &["backend=cpu"]);
    assert!(!i.verdict.summary.contains("one measurement"), "{}", i.verdict.summary);
}
