use super::chart::{linear_ticks, log_ticks};
use super::*;
use crate::report::{Cell, Chart, ChartKind, CheckCard, Column, Provenance, Series, Suggestion, Verdict};

const NASTY: &str = "<script>alert(\"x\")</script> & 'q'";

fn series(name: &str, points: Vec<[f64; 2]>) -> Series {
    Series { name: name.into(), points, provenance: Provenance::Measured }
}

fn chart(id: &str, kind: ChartKind, log_x: bool, series: Vec<Series>) -> Chart {
    Chart {
        kind,
        log_x,
        markers: vec![(100.0, format!("marker {NASTY}"))],
        ..Chart::line(id, &format!("{id} {NASTY}"), "size", "GFLOP/s").with_series(series)
    }
}

fn report() -> Report {
    let mut r = Report { exercise: "cpu-vs-gpu".into(), title: format!("Exercise 1 {NASTY}"), ..Default::default() };
    r.verdict = Verdict { summary: format!("summary {NASTY}"), evidence: vec![format!("evidence {NASTY}")] };
    r.figures.push(Figure {
        label: format!("speed {NASTY}"),
        value: 1234.5678,
        unit: "samples/s".into(),
        provenance: Provenance::derived("two <runs>"),
    });
    r.tables.push(Table {
        title: format!("table {NASTY}"),
        columns: vec![Column::text("backend"), Column::num("time", "ms", 2, Provenance::Simulated("a <model>".into()))],
        rows: vec![vec![Cell::Text(NASTY.into()), Cell::Num(1.5)], vec![Cell::Text("gpu".into()), Cell::Empty]],
    });
    r.tables.push(Table { title: "second".into(), columns: vec![Column::text("x")], rows: vec![] });
    let sweep: Vec<[f64; 2]> = (0..=4).map(|e| [10f64.powi(e), e as f64]).collect();
    r.charts.push(chart(
        "sweep",
        ChartKind::Line,
        true,
        vec![series(&format!("cpu {NASTY}"), sweep), series("gpu", vec![[0.0, 1.0], [10.0, f64::NAN], [100.0, 2.0]])],
    ));
    r.charts.push(chart(
        "memory",
        ChartKind::Bars,
        false,
        vec![series("parameters", vec![[1.0, 10.0], [2.0, 20.0]]), series("activations", vec![[1.0, 5.0], [3.0, 7.0]])],
    ));
    r.charts.push(chart("empty", ChartKind::Line, false, vec![]));
    r.notes.push(format!("note {NASTY}"));
    r.suggestion = Some(Suggestion { label: format!("try {NASTY}"), settings: [("batch".to_string(), "<256>".to_string())].into() });
    r.check_yourself = vec![
        CheckCard { question: format!("Why `x < y`? {NASTY}"), answer: Some("Because `a & b`.\nSecond line.".into()) },
        CheckCard { question: "*Unanswered?* **Really** 2 * 3".into(), answer: None },
    ];
    r.attachments.push(Attachment {
        file_name: "architecture.svg".into(),
        text: format!("<svg><script>alert(1)</script><text>{NASTY}</text></svg>"),
        ..Default::default()
    });
    r.config.insert("backends".into(), "cpu,gpu".into());
    r.metadata.backends.push(gpulab_core::tensor::BackendInfo {
        name: "llvmpipe <x>".into(),
        software: true,
        kind: gpulab_core::tensor::BackendKind::Gpu,
        api: "Vulkan".into(),
        driver: "Mesa".into(),
        device_type: "Cpu".into(),
        timestamps: false,
    });
    r
}

#[test]
fn every_text_is_escaped_and_no_script_gets_in() {
    let h = to_html(&report());
    assert!(!h.contains("<script"), "a raw <script> in the page");
    assert!(!h.contains(NASTY), "unescaped text in the page");
    let escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;";
    for what in ["Exercise 1 ", "summary ", "evidence ", "speed ", "table ", "note ", "try ", "marker ", "cpu "] {
        assert!(h.contains(&format!("{what}{escaped}")), "{what} is not escaped as expected");
    }
    assert!(h.contains("llvmpipe &lt;x&gt;") && h.contains("--set batch=&lt;256&gt;"), "metadata and suggestion escaped");
    assert!(h.contains("<code>x &lt; y</code>") && h.contains("<code>a &amp; b</code>"), "code spans in cards");
    // The diagram goes in as an image (inert), its SVG percent-encoded.
    assert!(h.contains("<img alt=\"architecture.svg\" src=\"data:image/svg+xml,%3Csvg%3E%3Cscript%3E"), "diagram as a data: image");
}

#[test]
fn every_table_chart_figure_and_card_is_present() {
    let r = report();
    let h = to_html(&r);
    assert_eq!(h.matches("class=\"chart\"").count(), r.charts.len());
    for c in &r.charts {
        assert!(h.contains(&format!("data-chart=\"{}\"", c.id)), "chart {} missing", c.id);
    }
    // Each report table, plus the reproducibility table.
    assert_eq!(h.matches("<table>").count(), r.tables.len() + 1);
    assert_eq!(h.matches("<div class=\"tw\"><table>").count(), r.tables.len(), "wide tables scroll inside their box");
    assert!(
        h.contains("time (ms)")
            && h.contains("simulated: a &lt;model&gt;")
            && h.contains("<td class=\"n\">1.50</td>")
            && h.contains("<td>—</td>"),
        "units, provenance and cells"
    );
    assert!(h.contains("1235 samples/s") && h.contains("derived from two &lt;runs&gt;"), "headline figure with its provenance");
    assert_eq!(h.matches("<details>").count(), 2);
    assert!(h.contains("No answer written yet"), "an unanswered card says so");
    assert!(h.contains("<summary><em>Unanswered?</em> <strong>Really</strong> 2 * 3</summary>"), "emphasis; a lone * stays text");
    assert!(h.contains("Because <code>a &amp; b</code>.<br>\nSecond line."), "answer lines kept");
    assert!(h.contains("software GPU: runs on your CPU"), "a software adapter is labelled");
    assert!(h.contains("gpulab run cpu-vs-gpu --set backends=cpu,gpu"), "the settings as a command");
    assert!(h.contains("no data points in this run"), "an empty chart says so");
}

#[test]
fn charts_draw_series_bars_markers_and_a_log_axis() {
    let r = report();
    let line = chart_svg(&r.charts[0]);
    assert_eq!(line.matches("<polyline class=\"series\"").count(), 2);
    assert!(line.contains("size (log scale)") && line.contains("class=\"marker\""), "log axis title and marker");
    for tick in [">1<", ">10<", ">100<", ">1000<", ">10k<"] {
        assert!(line.contains(tick), "log tick {tick} missing");
    }
    assert!(line.contains("2 points not drawn"), "x = 0 on the log axis and NaN are counted: {line}");
    assert!(line.contains("measured"), "series provenance in the legend");
    let bars = chart_svg(&r.charts[1]);
    assert_eq!(bars.matches("<rect class=\"bar\"").count(), 4);
    assert!(bars.contains("marker at 100: marker"), "bar charts list their markers");
}

#[test]
fn a_note_shows_its_line_and_folds_its_details() {
    let mut r = report();
    r.notes = vec![crate::report::note_with_details(
        "No GPU telemetry on this machine.",
        "NVML: libnvidia-ml.so.1: cannot open shared object file",
    )];
    let h = to_html(&r);
    let line = h.find("No GPU telemetry on this machine.").expect("the line is shown");
    let folded = h.find("<details><summary>details</summary><p>NVML: libnvidia-ml.so.1").expect("the loader's error is folded");
    assert!(line < folded);
    let md = crate::report::markdown(&r);
    assert!(md.contains("> No GPU telemetry on this machine.\n>\n> - NVML: libnvidia-ml"), "{md}");
}

#[test]
fn a_target_is_drawn_as_a_line_inside_the_plot() {
    let r = report();
    for (i, y) in [(0, 12.0), (1, 40.0)] {
        let mut c = r.charts[i].clone();
        c.targets = vec![(y, format!("SLO {NASTY}"))];
        let svg = chart_svg(&c);
        assert_eq!(svg.matches("<line class=\"target\"").count(), 1, "one target line on chart {i}: {svg}");
        assert!(svg.contains("SLO &lt;script"), "the target's label, escaped");
        // Above every point, the y range grew to include it: its line sits inside the plot.
        let at = svg.find("<line class=\"target\"").unwrap();
        let py: f64 = svg[at..].split("y1=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        assert!((TOP_PX..=TOP_PX + PLOT_PX).contains(&py), "target at y={py} px is outside the plot");
    }
    assert!(!chart_svg(&r.charts[0]).contains("class=\"target\""), "no target, no line");
}

const TOP_PX: f64 = 16.0;
const PLOT_PX: f64 = 300.0;

#[test]
fn log_ticks_are_decades_or_one_two_five() {
    assert_eq!(log_ticks(1.0, 10_000.0), vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]);
    assert_eq!(log_ticks(32.0, 4096.0), vec![50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]);
    assert_eq!(linear_ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    assert_eq!(linear_ticks(0.13, 0.61), vec![0.2, 0.30000000000000004, 0.4, 0.5, 0.6000000000000001]);
}

#[test]
fn log_axis_spaces_decades_evenly() {
    let c = chart("d", ChartKind::Line, true, vec![series("s", vec![[1.0, 1.0], [10.0, 2.0], [100.0, 3.0]])]);
    let svg = chart_svg(&c);
    let xs: Vec<f64> = svg.split("<circle cx=\"").skip(1).filter_map(|p| p.split('"').next()?.parse().ok()).collect();
    assert_eq!(xs.len(), 3, "{svg}");
    assert!(((xs[1] - xs[0]) - (xs[2] - xs[1])).abs() < 0.2, "decades evenly spaced: {xs:?}");
}

#[test]
fn index_links_reports_and_lists_failures() {
    let fig = Figure { label: "speed-up".into(), value: 3.25, unit: "×".into(), provenance: Provenance::derived("runs") };
    let rows = vec![
        IndexRow {
            number: 1,
            title: "One <a>".into(),
            key_figure: Some(fig),
            verdict: "GPU wins".into(),
            seconds: 12.34,
            link: Some("cpu-vs-gpu/report.html".into()),
            error: None,
        },
        IndexRow {
            number: 2,
            title: "Two".into(),
            key_figure: None,
            verdict: String::new(),
            seconds: 0.5,
            link: None,
            error: Some("invalid setting: backend <x>".into()),
        },
    ];
    let h = index_html("heading & more", &rows);
    assert!(h.contains("<a href=\"cpu-vs-gpu/report.html\">One &lt;a&gt;</a>") && h.contains("3.25 ×") && h.contains("12.3"), "{h}");
    assert!(h.contains("failed: invalid setting: backend &lt;x&gt;") && h.matches("<a href").count() == 1, "{h}");
    assert!(h.contains("heading &amp; more"));
}

#[test]
fn timelines_draw_a_row_per_lane_and_merge_touching_spans() {
    use crate::profile::{Span, Timeline};
    let span = |lane: &str, name: &str, a: f64, b: f64| Span {
        lane: lane.into(),
        name: name.into(),
        start_s: a,
        end_s: b,
        flops: None,
        bytes: None,
    };
    // 1000 back-to-back spans of one stage merge into one bar; a gap splits them.
    let mut spans: Vec<Span> = (0..1000).map(|i| span("main thread", "compute <k>", i as f64 * 1e-4, (i + 1) as f64 * 1e-4)).collect();
    spans.push(span("loader worker 0", "load", 0.2, 0.3));
    spans.push(span("loader worker 0", "load", 0.5, 0.6));
    let t = Timeline::new("run <1>", spans, String::new());
    let svg = timeline_svg(&t);
    assert!(svg.contains("run &lt;1&gt;") && svg.contains("compute &lt;k&gt;") && !svg.contains("<k>"), "escaped");
    for lane in &t.lanes {
        assert!(svg.contains(&format!(">{}</text>", escape(lane))), "lane {lane} labelled");
    }
    // Bars: one merged compute bar, two load bars; plus one legend swatch per stage.
    assert_eq!(svg.matches("<rect ").count(), 3 + 2, "{svg}");
    assert!(svg.contains(" ms</text>"), "a time axis in ms");
}
