//! What a learner reads agrees with what the report holds, in every exercise: each exercise's
//! quick run to its report, then (1) every number its verdict prints is a number of the report
//! or derived from them (`report::agree`), (2) its text follows the one way to print a number
//! (`gpulab_core::format`: counts without decimals, no run of zeros, no raw loader error), and
//! (3) its summary answers in at most two sentences.

use gpulab::exercises::{self, CollectSink};
use gpulab::report::{Report, agree};

/// The exercise's quick run (the smallest run that fills its report).
fn quick_report(id: &str) -> Report {
    let ex = exercises::find(id).unwrap();
    let mut s = ex.settings();
    let pairs: Vec<String> = ex.quick_run().iter().map(|(k, v)| format!("{k}={v}")).collect();
    s.apply(&pairs).unwrap();
    ex.run(&s, &mut CollectSink::default()).unwrap_or_else(|e| panic!("exercise {id}: {e}"))
}

/// Every piece of text a report shows: verdict, notes, figures and table cells as printed.
pub(crate) fn shown_text(r: &Report) -> Vec<(String, String)> {
    let mut out = vec![("summary".to_string(), r.verdict.summary.clone())];
    out.extend(r.verdict.evidence.iter().map(|e| ("evidence".to_string(), e.clone())));
    // A note's line; its details (a loader's own error) are folded, shown on demand.
    out.extend(r.notes.iter().map(|n| ("note".to_string(), gpulab::report::note_parts(n).0.to_string())));
    for f in &r.figures {
        out.push((format!("figure {:?}", f.label), gpulab::format::with_unit(f.value, &f.unit)));
    }
    for t in &r.tables {
        for row in &t.rows {
            for (c, col) in row.iter().zip(&t.columns) {
                // A money column's cell reads as money, "$" and all.
                let money = matches!(col.unit.as_str(), "USD" | "$") && matches!(c, gpulab::report::Cell::Num(_));
                let text = if money { format!("${}", c.format(col)) } else { c.format(col) };
                out.push((format!("table {:?}, column {:?}", t.title, col.name), text));
            }
        }
    }
    out
}

/// Ways of printing a number that the format module rules out, found in `text`.
pub(crate) fn format_violations(text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    const COUNTED: [&str; 16] = [
        "step",
        "steps",
        "worker",
        "workers",
        "replica",
        "replicas",
        "epoch",
        "epochs",
        "layer",
        "layers",
        "checkpoint",
        "checkpoints",
        "kernels",
        "requests",
        "GPUs",
        "runs",
    ];
    for w in words.windows(2) {
        let n = w[0].trim_start_matches(['(', '“', '"']);
        let noun = w[1].trim_end_matches([',', '.', ';', ':', ')']);
        if COUNTED.contains(&noun) && n.contains('.') && n.trim_end_matches('0').ends_with('.') && n.parse::<f64>().is_ok() {
            bad.push(format!("a count printed with decimals: \"{} {}\"", w[0], w[1]));
        }
        if n == "1" && COUNTED.contains(&noun) && noun.ends_with('s') {
            bad.push(format!("one of a thing, plural: \"{} {}\"", w[0], w[1]));
        }
    }
    // Money as a long decimal ("$0.0000272", "$0.00000305"): a fraction of a cent reads as a
    // price per thousand or per million items (`format::money_per`).
    for (i, _) in text.match_indices('$') {
        let w: String = text[i..].chars().skip(1).take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-')).collect();
        if w.starts_with("0.000") || (w.contains("e-") && w.parse::<f64>().is_ok()) {
            bad.push(format!("money as a long decimal: \"${w}\""));
        }
    }
    // A decimal ending in four zeros hides a value or pads one ("0.0000 USD", "60.0000 s").
    for w in text.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
        if w.contains('.') && w.ends_with("0000") && w.parse::<f64>().is_ok() {
            bad.push(format!("a run of zeros: {w:?}"));
        }
    }
    bad
}

/// What prose (a verdict, a note) must not print: money as a row of zeros ("$0.000000377" reads
/// "$0.38 per million …"), a loader's raw error, a non-finite price.
pub(crate) fn prose_violations(text: &str) -> Vec<String> {
    let mut bad = format_violations(text);
    for needle in ["cannot open shared object file", "NaN USD", "inf USD", "$NaN", "$inf"] {
        if text.contains(needle) {
            bad.push(format!("prints {needle:?}"));
        }
    }
    bad
}

/// The three checks on one exercise's quick-run report.
fn check(id: &str) {
    let r = quick_report(id);
    let mut bad = agree::disagreements(&r);
    for (place, text) in shown_text(&r) {
        let prose = matches!(place.as_str(), "summary" | "evidence" | "note");
        let found = if prose { prose_violations(&text) } else { format_violations(&text) };
        bad.extend(found.into_iter().map(|v| format!("{place}: {v} — in {text:?}")));
    }
    let sentences = r.verdict.summary.split_terminator(". ").count();
    if sentences > 2 {
        bad.push(format!("the summary has {sentences} sentences (at most 2): {:?}", r.verdict.summary));
    }
    assert!(bad.is_empty(), "exercise {id}:\n{}", bad.join("\n"));
}

macro_rules! every_exercise {
    ($($name:ident => $id:literal),* $(,)?) => {
        $(#[test] fn $name() { check($id); })*

        /// The list above names every exercise in the registry.
        #[test]
        fn every_exercise_is_checked() {
            let checked = [$($id),*];
            for e in exercises::registry() {
                assert!(checked.contains(&e.number().to_string().as_str()), "exercise {} has no agreement test", e.number());
            }
        }
    };
}

every_exercise! {
    exercise_01_agrees_with_itself => "1",
    exercise_02_agrees_with_itself => "2",
    exercise_03_agrees_with_itself => "3",
    exercise_04_agrees_with_itself => "4",
    exercise_05_agrees_with_itself => "5",
    exercise_06_agrees_with_itself => "6",
    exercise_07_agrees_with_itself => "7",
    exercise_08_agrees_with_itself => "8",
    exercise_09_agrees_with_itself => "9",
    exercise_10_agrees_with_itself => "10",
}

#[test]
fn format_violations_are_found() {
    assert_eq!(format_violations("20.0 steps lost").len(), 1);
    assert_eq!(format_violations("with 1 workers serving").len(), 1);
    assert!(format_violations("1 worker, 2 workers, 1 requests/s").is_empty());
    assert_eq!(format_violations("0.0000 USD").len(), 1);
    assert_eq!(format_violations("60.0000 s").len(), 1);
    assert!(format_violations("0.0000162").is_empty(), "significant digits after zeros are a value");
    assert_eq!(prose_violations("libnvidia-ml.so.1: cannot open shared object file").len(), 1);
    assert_eq!(prose_violations("an epoch cost $0.0000074").len(), 1);
    // Today's table cells of exercises 1 and 8 (USD columns) and what replaced them.
    assert_eq!(format_violations("$0.0000272").len(), 1);
    assert_eq!(format_violations("$0.00000305").len(), 1);
    assert_eq!(format_violations("$6.5e-7").len(), 1, "an exponent is no way to print money");
    assert!(format_violations("$0.0272 per thousand epochs; $3.05 per billion predictions; $0.0038").is_empty());
    assert!(prose_violations("20 steps lost; $0.38 per million predictions; 9.94 s").is_empty());
}
