//! The driver's own telemetry recorded around a run: every exercise that trains or serves runs
//! inside [`Monitored`] (the registry wraps it), which samples the device layer's hardware
//! monitor (gpulab_core::device::monitor: NVML, amdgpu sysfs, DRM fdinfo) on its own thread,
//! draws utilisation live beside GPU busy %, and writes the series (charts) and a summary
//! (figures, labelled with the source) into the report — or, where no source gave a reading, a
//! note naming the sources looked for and why each was missing.

use std::time::Duration;

use super::device_counts;
use super::presets::Preset;
use super::run_control::RunControl;
use super::settings::Settings;
use super::sink::{Event, Sink};
use super::{Exercise, LiveChartSpec};
use gpulab_core::device::monitor::{self, Monitor, Probe, Recording, Sample, Summary};
use gpulab_core::error::Result;
use gpulab_systems::report::{Chart, Figure, Provenance, Report, Series, Table, note_with_details};

/// The live chart: utilisation per device as the driver reports it.
pub const LIVE_CHART: &str = "driver_utilisation";
/// Every summary figure's label starts with this (the class view finds them by it).
pub const FIGURE_PREFIX: &str = "driver telemetry · ";
/// The note's start where nothing was recorded.
pub const NONE_RECORDED: &str = "No GPU telemetry";
/// The same note in reports written before it was one calm line.
const NONE_RECORDED_BEFORE: &str = "No driver telemetry was recorded";
/// How often the sources are read, and how many samples a report keeps at most (thinned
/// evenly when a long run has more).
pub const INTERVAL: Duration = Duration::from_millis(250);
pub const KEEP: usize = 2048;

/// The live chart's declaration.
pub fn live_chart() -> LiveChartSpec {
    LiveChartSpec::line(
        LIVE_CHART,
        "GPU utilisation as the driver reports it (NVML, amdgpu sysfs or DRM fdinfo; every 0.25 s)",
        "seconds since the run started",
        "utilisation (%)",
    )
}

/// An exercise whose runs are watched by the hardware monitor; everything else is the inner
/// exercise's.
pub struct Monitored<E>(pub E);

impl<E: Exercise> Exercise for Monitored<E> {
    fn id(&self) -> &'static str {
        self.0.id()
    }
    fn number(&self) -> u32 {
        self.0.number()
    }
    fn title(&self) -> &'static str {
        self.0.title()
    }
    fn lesson(&self) -> &'static str {
        self.0.lesson()
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        self.0.quick_run()
    }
    fn settings(&self) -> Settings {
        self.0.settings()
    }
    fn validate(&self, settings: &Settings) -> Result<()> {
        self.0.validate(settings)
    }
    fn presets(&self) -> Vec<Preset> {
        self.0.presets()
    }
    /// The inner charts, and the driver's utilisation where this machine may have a source
    /// (right after GPU busy %, where the exercise draws it).
    fn live_charts(&self) -> Vec<LiveChartSpec> {
        let mut c = self.0.live_charts();
        if monitor::may_have_telemetry() {
            let at = c.iter().position(|s| s.id == super::watch::GPU_BUSY).map_or(c.len(), |i| i + 1);
            c.insert(at, live_chart());
        }
        c
    }
    fn controllable(&self) -> bool {
        self.0.controllable()
    }
    /// The inner exercise's key figure, never a telemetry figure (which only a report without
    /// figures of its own would otherwise offer first).
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        self.0.key_figure(report).filter(|f| !f.label.starts_with(FIGURE_PREFIX))
    }
    fn run(&self, settings: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        run_monitored(monitor::probe(), monitor::may_have_telemetry(), sink, |s| self.0.run(settings, s))
    }
}

/// Runs `run` with `probe`'s sources sampled on the monitor's thread; `live`: draw utilisation
/// on the live chart (only where it is declared). The report gets the record (see `record`).
pub fn run_monitored(probe: Probe, live: bool, sink: &mut dyn Sink, run: impl FnOnce(&mut dyn Sink) -> Result<Report>) -> Result<Report> {
    let monitor = match Monitor::start(probe, INTERVAL, KEEP) {
        Ok(m) => m,
        Err(e) => {
            let mut report = run(sink)?;
            report
                .notes
                .push(note_with_details(&format!("{NONE_RECORDED} was recorded: the monitor's thread could not start."), &e.to_string()));
            return Ok(report);
        }
    };
    let mut watched = Watched { inner: sink, monitor: &monitor, live, counts: None, seen: Vec::new() };
    let out = run(&mut watched);
    let counts = watched.counts.take();
    let rec = monitor.finish();
    let mut report = out?;
    record(&rec, &mut report);
    // Every GPU training run's device work, unless the exercise put the table in itself.
    if let Some(t) = counts.filter(|_| !report.tables.iter().any(|t| t.title == device_counts::TITLE)) {
        report.tables.push(t);
    }
    Ok(report)
}

/// Passes every event on, and after each the utilisation read since (a live point per device).
struct Watched<'a> {
    inner: &'a mut dyn Sink,
    monitor: &'a Monitor,
    live: bool,
    /// The device-work rows of every training run so far (see device_counts.rs).
    counts: Option<Table>,
    /// NVML's utilisation readings so far (t_s, device, %), at most `KEEP` (older ones dropped),
    /// for `nvml_utilisation_since`.
    seen: Vec<(f64, String, f64)>,
}

impl Watched<'_> {
    /// Takes the monitor's new samples: drawn live where declared, NVML's kept.
    fn take_new(&mut self) {
        for s in self.monitor.take_new() {
            let Some(u) = s.sample.utilisation else { continue };
            if self.live {
                let series = series_name(&s.sample.device, &s.sample.source);
                self.inner.emit(Event::Point { chart: LIVE_CHART.into(), series, x: s.t_s, y: u, provenance: Provenance::Measured });
            }
            if s.sample.source == monitor::NVML {
                if self.seen.len() >= KEEP {
                    self.seen.remove(0);
                }
                self.seen.push((s.t_s, s.sample.device, u));
            }
        }
    }
}

impl Sink for Watched<'_> {
    fn emit(&mut self, ev: Event) {
        let ev = match ev {
            Event::Table(t) if t.title == device_counts::TITLE => {
                match self.counts.as_mut() {
                    Some(all) => device_counts::merge(all, t),
                    None => self.counts = Some(t),
                }
                Event::Table(self.counts.clone().expect("set above"))
            }
            ev => ev,
        };
        self.inner.emit(ev);
        self.take_new();
    }
    fn stop(&self) -> &gpulab_core::stop::Stop {
        self.inner.stop()
    }
    fn run_control(&self) -> Option<&RunControl> {
        self.inner.run_control()
    }
    fn telemetry_clock(&self) -> Option<f64> {
        Some(self.monitor.now_s())
    }
    fn nvml_utilisation_since(&mut self, adapter: &str, from_s: f64) -> Option<f64> {
        self.take_new();
        let wanted = adapter.to_lowercase();
        let got: Vec<f64> = self.seen.iter().filter(|(t, d, _)| *t >= from_s && monitor::names_match(d, &wanted)).map(|s| s.2).collect();
        (!got.is_empty()).then(|| got.iter().sum::<f64>() / got.len() as f64)
    }
}

fn series_name(device: &str, source: &str) -> String {
    format!("{device} (from {source})")
}

/// One figure the driver reports, as the report's charts draw it.
struct Metric {
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    value: fn(&Sample) -> Option<f64>,
}

const METRICS: [Metric; 4] = [
    Metric { id: "telemetry_utilisation", title: "GPU utilisation", unit: "%", value: |s| s.utilisation },
    Metric { id: "telemetry_memory", title: "GPU memory in use (the driver's count)", unit: "MiB", value: |s| s.memory_used.map(mib) },
    Metric { id: "telemetry_temperature", title: "GPU temperature", unit: "°C", value: |s| s.temperature_c },
    Metric { id: "telemetry_power", title: "GPU power draw", unit: "W", value: |s| s.power_w },
];

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Writes the record into the report: a chart per figure some source gave (a series per device,
/// measured, named with its source) and the summary figures; where nothing was recorded, a note
/// naming every source looked for and why it was missing (and no chart).
pub fn record(rec: &Recording, report: &mut Report) {
    if rec.is_empty() {
        report.notes.push(missing_note(rec));
        return;
    }
    report.charts.extend(METRICS.iter().filter_map(|m| chart(rec, m)));
    report.figures.extend(rec.summaries.iter().flat_map(|s| figures(s, rec.interval_s)));
}

/// One calm line ("No GPU telemetry on this machine"), with every source looked for and why it
/// was missing — the loader's own message included ("libnvidia-ml.so.1: cannot open shared
/// object file") — folded under it as details.
fn missing_note(rec: &Recording) -> String {
    if rec.missing.is_empty() {
        return format!("{NONE_RECORDED} was recorded: no telemetry source was looked for.");
    }
    let names: Vec<String> = rec.missing.iter().map(|m| m.source.clone()).collect();
    let details: Vec<String> = rec.missing.iter().map(|m| format!("{}: {}.", m.source, m.why.trim_end_matches('.'))).collect();
    note_with_details(
        &format!("{NONE_RECORDED} on this machine: the driver publishes none that gpulab reads (looked for {}).", join_and(&names)),
        &details.join("\n"),
    )
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn chart(rec: &Recording, m: &Metric) -> Option<Chart> {
    let mut series: Vec<Series> = Vec::new();
    let mut sources: Vec<String> = Vec::new();
    for st in &rec.series {
        let Some(y) = (m.value)(&st.sample).filter(|y| y.is_finite()) else { continue };
        let name = series_name(&st.sample.device, &st.sample.source);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push([st.t_s, y]),
            None => series.push(Series { name, points: vec![[st.t_s, y]], provenance: Provenance::Measured }),
        }
        if !sources.contains(&st.sample.source) {
            sources.push(st.sample.source.clone());
        }
    }
    (!series.is_empty()).then(|| {
        Chart::line(
            m.id,
            &format!("{} during the run, from {} (every {:.2} s)", m.title, join_and(&sources), rec.interval_s),
            "seconds since the run started",
            m.unit,
        )
        .with_series(series)
    })
}

/// The summary of one device: mean and max utilisation, peak memory, max temperature, mean
/// power — those its source gave.
fn figures(s: &Summary, interval_s: f64) -> Vec<Figure> {
    let label = |what: &str| format!("{FIGURE_PREFIX}{what} · {}", series_name(&s.device, &s.source));
    let mean = || Provenance::Derived(format!("the mean of {} {} readings about every {interval_s:.2} s", s.samples, s.source));
    let fig =
        |what: &str, value: f64, unit: &str, provenance: Provenance| Figure { label: label(what), value, unit: unit.into(), provenance };
    let mut out = Vec::new();
    if let Some(v) = s.utilisation_mean {
        out.push(fig("mean utilisation", v, "%", mean()));
    }
    if let Some(v) = s.utilisation_max {
        out.push(fig("max utilisation", v, "%", Provenance::Measured));
    }
    if let Some(v) = s.memory_peak {
        out.push(fig("peak memory", mib(v), "MiB", Provenance::Measured));
    }
    if let Some(v) = s.temperature_max {
        out.push(fig("max temperature", v, "°C", Provenance::Measured));
    }
    if let Some(v) = s.power_mean {
        out.push(fig("mean power", v, "W", mean()));
    }
    out
}

/// The telemetry summary of a report in one line per device for the class view ("NVIDIA H200
/// (from NVML): mean utilisation 63 %, …"), or that none was recorded; None for reports that
/// predate the monitor or exercises it does not watch.
pub fn class_summary(r: &Report) -> Option<String> {
    let mut devices: Vec<(String, Vec<String>)> = Vec::new();
    for f in &r.figures {
        let Some((what, device)) = f.label.strip_prefix(FIGURE_PREFIX).and_then(|l| l.split_once(" · ")) else { continue };
        let decimals = if f.value.abs() < 10.0 { 1 } else { 0 };
        let item = format!("{what} {:.*} {}", decimals, f.value, f.unit);
        match devices.iter_mut().find(|d| d.0 == device) {
            Some(d) => d.1.push(item),
            None => devices.push((device.to_string(), vec![item])),
        }
    }
    if devices.is_empty() {
        return r
            .notes
            .iter()
            .any(|n| n.starts_with(NONE_RECORDED) || n.starts_with(NONE_RECORDED_BEFORE))
            .then(|| "none recorded (no source on this machine)".to_string());
    }
    Some(devices.iter().map(|(d, items)| format!("{d}: {}", items.join(", "))).collect::<Vec<_>>().join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::CollectSink;
    use gpulab_core::device::monitor::{AMDGPU, AmdSysfsSource, FDINFO, FakeSource, FdinfoSource, Missing, NVML};

    fn blank_run(sink: &mut dyn Sink) -> Result<Report> {
        sink.emit(Event::Log("training".into()));
        Ok(Report {
            figures: vec![Figure { label: "speed-up".into(), value: 2.0, unit: "×".into(), provenance: Provenance::Measured }],
            ..Default::default()
        })
    }

    #[test]
    fn a_fake_source_is_recorded_as_charts_and_summary_figures_labelled_with_it() {
        // The monitor reads at its start and again at its end: both scripted readings, whatever
        // the timing in between.
        let script = vec![
            vec![Sample::of("Fake GPU", 20.0, 1 << 30, 50.0, 100.0)],
            vec![Sample { temperature_c: None, ..Sample::of("Fake GPU", 60.0, 3 << 30, 70.0, 200.0) }],
        ];
        let probe = Probe { sources: vec![Box::new(FakeSource::new("fake NVML", script))], missing: vec![] };
        let mut sink = CollectSink::default();
        let r = run_monitored(probe, true, &mut sink, blank_run).unwrap();
        assert_eq!(r.figures[0].label, "speed-up", "the exercise's own figures stay first");
        let fig = |what: &str| {
            let label = format!("{FIGURE_PREFIX}{what} · Fake GPU (from fake NVML)");
            r.figures.iter().find(|f| f.label == label).unwrap_or_else(|| panic!("no figure {label}: {:#?}", r.figures))
        };
        assert_eq!((fig("mean utilisation").value, fig("mean utilisation").unit.as_str()), (40.0, "%"));
        assert!(matches!(&fig("mean utilisation").provenance, Provenance::Derived(d) if d.contains("2 fake NVML readings")));
        assert_eq!((fig("max utilisation").value, fig("max utilisation").provenance.clone()), (60.0, Provenance::Measured));
        assert_eq!((fig("peak memory").value, fig("peak memory").unit.as_str()), (3072.0, "MiB"));
        assert_eq!(fig("max temperature").value, 50.0, "an absent reading is not a zero");
        assert_eq!(fig("mean power").value, 150.0);
        for id in ["telemetry_utilisation", "telemetry_memory", "telemetry_temperature", "telemetry_power"] {
            let c = r.chart(id).unwrap_or_else(|| panic!("no chart {id}"));
            assert!(c.title.contains("from fake NVML"), "{}", c.title);
            assert_eq!(c.series[0].name, "Fake GPU (from fake NVML)");
            assert_eq!(c.series[0].provenance, Provenance::Measured);
        }
        assert_eq!(r.chart("telemetry_utilisation").unwrap().series[0].points.iter().map(|p| p[1]).collect::<Vec<_>>(), [20.0, 60.0]);
        assert_eq!(r.chart("telemetry_temperature").unwrap().series[0].points.len(), 1);
        assert!(!r.notes.iter().any(|n| n.starts_with(NONE_RECORDED)));
        // Live points, where the monitor's reading came before an event, are on the declared chart.
        for e in &sink.events {
            if let Event::Point { chart, series, .. } = e {
                assert_eq!((chart.as_str(), series.as_str()), (LIVE_CHART, "Fake GPU (from fake NVML)"));
            }
        }
        let line = class_summary(&r).unwrap();
        assert_eq!(
            line,
            "Fake GPU (from fake NVML): mean utilisation 40 %, max utilisation 60 %, peak memory 3072 MiB, max temperature 50 °C, mean power 150 W"
        );
    }

    #[test]
    fn with_no_source_the_note_names_every_source_looked_for_and_there_is_no_chart() {
        let (drm, fdinfo) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let probe = Probe {
            sources: vec![Box::new(FdinfoSource::new(fdinfo.path())), Box::new(AmdSysfsSource::new(drm.path()))],
            missing: vec![Missing { source: NVML.into(), why: "the NVIDIA driver's library did not load".into() }],
        };
        let mut sink = CollectSink::default();
        let r = run_monitored(probe, true, &mut sink, blank_run).unwrap();
        let note = r.notes.iter().find(|n| n.starts_with(NONE_RECORDED)).expect("a note says nothing was recorded");
        let (line, details) = gpulab_systems::report::note_parts(note);
        assert_eq!(
            line,
            format!(
                "{NONE_RECORDED} on this machine: the driver publishes none that gpulab reads (looked for {NVML}, {AMDGPU} and {FDINFO})."
            )
        );
        let details = details.expect("why each source was missing, folded");
        assert!(details.contains("did not load") && details.contains("no amdgpu card") && details.contains("no DRM device"), "{details}");
        assert!(r.charts.is_empty() && r.figures.len() == 1, "no empty chart, no telemetry figure");
        assert!(!sink.events.iter().any(|e| matches!(e, Event::Point { .. })));
        assert_eq!(class_summary(&r).as_deref(), Some("none recorded (no source on this machine)"));
        assert_eq!(class_summary(&Report::default()), None, "a report from before the monitor says nothing");
    }

    #[test]
    fn every_exercise_that_trains_or_serves_is_monitored_and_its_key_figure_is_its_own() {
        for ex in crate::registry() {
            let watched = ex.id() != "platform";
            let r = Report {
                figures: vec![Figure {
                    label: format!("{FIGURE_PREFIX}mean power · X (from NVML)"),
                    value: 1.0,
                    unit: "W".into(),
                    provenance: Provenance::Measured,
                }],
                ..Default::default()
            };
            if watched {
                assert!(ex.key_figure(&r).is_none(), "{}: a telemetry figure is never the key figure", ex.id());
            }
            assert_eq!(ex.live_charts().iter().any(|c| c.id == LIVE_CHART), watched && monitor::may_have_telemetry(), "{}", ex.id());
        }
    }
}
