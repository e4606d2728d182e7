//! The learner's progress: which exercises they have run, when last, and the headline figure of
//! that run (`Exercise::key_figure`). The sidebar owns it and `Saved` keeps it, so it survives a
//! restart; recorded when a run's report arrives (never for a failed run); drawn under each
//! exercise in the sidebar, with a button that clears it.

use std::collections::BTreeMap;

use eframe::egui;
use egui::RichText;
use serde::{Deserialize, Serialize};

use super::results::WARN;
use gpulab_exercises::Exercise;
use gpulab_systems::report::{Provenance, Report};

/// The mark of an exercise run to its end.
const DONE: egui::Color32 = egui::Color32::from_rgb(90, 180, 110);

/// The last finished run of each exercise, by exercise id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Progress {
    pub runs: BTreeMap<String, RunMark>,
}

/// What the sidebar shows for one exercise.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunMark {
    /// When the report arrived, RFC 3339 in UTC (e.g. `2026-12-01T06:20:00Z`).
    pub finished_at: String,
    pub stopped_early: bool,
    /// The run's headline figure; None when the report has no figures.
    pub figure: Option<KeyFigure>,
}

/// The headline figure as it was reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyFigure {
    pub label: String,
    pub value: f64,
    pub unit: String,
    pub provenance: Provenance,
}

impl RunMark {
    /// The mark for `report`, finished now; `figure` is the exercise's key figure of it.
    pub fn new(report: &Report, figure: Option<&gpulab_systems::report::Figure>) -> Self {
        RunMark {
            finished_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            stopped_early: report.stopped_early,
            figure: figure.map(|f| KeyFigure {
                label: f.label.clone(),
                value: f.value,
                unit: f.unit.clone(),
                provenance: f.provenance.clone(),
            }),
        }
    }

    /// `Ran · 2026-12-01 06:20 UTC`, or `Stopped early · …` for a run stopped before its end.
    pub fn mark(&self) -> String {
        format!("{} · {}", if self.stopped_early { "Stopped early" } else { "Ran" }, self.when())
    }

    /// `2026-12-01 06:20 UTC`, or the stored text as it is if it is not RFC 3339.
    pub fn when(&self) -> String {
        let t = &self.finished_at;
        match (t.get(..10), t.get(11..16)) {
            (Some(day), Some(hm)) if t.as_bytes().get(10) == Some(&b'T') => format!("{day} {hm} UTC"),
            _ => t.clone(),
        }
    }

    /// The headline figure as one line, e.g. `GPU/CPU training speed-up: 3.2 × (measured)`.
    pub fn figure_text(&self) -> Option<String> {
        let f = self.figure.as_ref()?;
        Some(format!("{}: {} ({})", f.label, gpulab_core::format::with_unit(f.value, &f.unit), f.provenance.short()))
    }
}

impl Progress {
    /// Records the finished run of `ex` from its report (called once when the run ends; a failed
    /// run, which has no report, leaves the previous mark).
    pub(crate) fn record(&mut self, ex: &dyn Exercise, report: &Report) {
        self.runs.insert(ex.id().to_string(), RunMark::new(report, ex.key_figure(report)));
    }

    /// The lines under an exercise in the sidebar: the run mark with its date, then the
    /// headline figure.
    pub(crate) fn line_ui(&self, ui: &mut egui::Ui, exercise: &str) {
        let Some(m) = self.runs.get(exercise) else { return };
        let color = if m.stopped_early { WARN } else { DONE };
        ui.add(egui::Label::new(RichText::new(m.mark()).small().color(color)).wrap());
        let hover = m.figure.as_ref().map_or_else(|| "this run's report has no headline figure".to_string(), |f| f.provenance.label());
        let figure = m.figure_text().unwrap_or_else(|| "no headline figure".into());
        ui.add(egui::Label::new(RichText::new(figure).small().weak()).wrap()).on_hover_text(hover);
    }

    /// "Clear progress", under the list of `total` exercises, when there is any.
    pub(crate) fn controls_ui(&mut self, ui: &mut egui::Ui, total: usize) {
        if self.runs.is_empty() {
            return;
        }
        ui.add_space(8.0);
        ui.small(format!("{} of {total} exercises run", self.runs.len()));
        if ui.small_button("Clear progress").on_hover_text("Forget which exercises you have run (the reports you exported stay)").clicked()
        {
            self.runs.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Figure;

    #[test]
    fn a_mark_shows_date_and_figure() {
        let mut r = Report::default();
        let f = Figure { label: "speed-up".into(), value: 3.2, unit: "×".into(), provenance: Provenance::Measured };
        r.figures.push(f.clone());
        let m = RunMark::new(&r, Some(&f));
        assert_eq!(m.when().len(), "2026-12-01 06:20 UTC".len(), "{}", m.when());
        assert!(m.when().ends_with(" UTC"));
        assert_eq!(m.figure_text().as_deref(), Some("speed-up: 3.2 × (measured)"));
        assert!(m.mark().starts_with("Ran · ") && m.mark().ends_with(" UTC"), "{}", m.mark());
        let stopped = RunMark { stopped_early: true, ..m.clone() };
        assert!(stopped.mark().starts_with("Stopped early · "), "{}", stopped.mark());
        let odd = RunMark { finished_at: "yesterday".into(), ..Default::default() };
        assert_eq!(odd.when(), "yesterday");
        assert_eq!(odd.figure_text(), None);
    }

    #[test]
    fn old_saves_without_progress_still_load() {
        let saved: super::super::Saved = serde_json::from_str(r#"{"selected":"precision"}"#).unwrap();
        assert!(saved.progress.runs.is_empty());
        let p: Progress = serde_json::from_str(r#"{"runs":{"x":{"finished_at":"2026-12-01T06:20:00Z"}}}"#).unwrap();
        assert_eq!(p.runs["x"].when(), "2026-12-01 06:20 UTC");
    }
}
