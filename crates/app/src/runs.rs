//! The runs: the one in flight (a `Job` on its worker thread), the latest run of each exercise
//! as the UI received it (`RunView`), and the speed of controllable runs. Drawn as the Run / Stop
//! buttons with the run's status and log, and as the results panel (live charts while a run goes,
//! the report after, beside a loaded report to compare).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use eframe::egui;
use egui::RichText;

use super::charts::{self, ChartView};
use super::context::{Command, LabView};
use super::diagram;
use super::files::Files;
use super::job::{Job, RunView, Status};
use super::results;
use super::shortcuts::{self, tip};
use super::timeline;
use gpulab_exercises::{RunControl, Settings};
use gpulab_systems::report::Report;

/// Time spent per frame moving events from the worker into the UI's histories.
const DRAIN_BUDGET: Duration = Duration::from_millis(3);

/// One simulated hour per second: a simulated day fills the charts in about half a minute.
const DEFAULT_RUN_SPEED: f64 = 3600.0;

pub(crate) struct Runs {
    job: Option<Job>,
    views: HashMap<String, RunView>,
    /// Simulated seconds per wall second for controllable runs (0 = as fast as possible).
    speed: f64,
    /// Wakes the UI when the worker sends an event.
    ctx: egui::Context,
}

impl Runs {
    pub fn new(ctx: &egui::Context) -> Self {
        Runs { job: None, views: HashMap::new(), speed: DEFAULT_RUN_SPEED, ctx: ctx.clone() }
    }

    /// The exercise whose run is in flight.
    pub fn running(&self) -> Option<&str> {
        self.job.as_ref().map(|j| j.exercise.as_str())
    }

    /// The latest run of exercise `id`.
    pub fn view(&self, id: &str) -> Option<&RunView> {
        self.views.get(id)
    }

    pub fn report(&self, id: &str) -> Option<&Report> {
        self.view(id).and_then(|v| v.report.as_deref())
    }

    /// Starts exercise `id` on a worker thread (unless a run is in flight).
    pub fn start(&mut self, id: &str, settings: Settings) {
        if self.job.is_some() {
            return;
        }
        let ctx = self.ctx.clone();
        let control = Arc::new(RunControl::new(self.speed));
        let (job, view) = Job::start(id, settings, Box::new(move || ctx.request_repaint()), control);
        self.views.insert(id.to_string(), view);
        self.job = Some(job);
    }

    pub fn stop(&mut self) {
        if let Some(j) = &self.job {
            j.request_stop();
            if let Some(v) = self.views.get_mut(&j.exercise)
                && v.status == Status::Running
            {
                v.status = Status::Stopping;
                v.phase = format!("{} — stopping…", v.phase);
            }
        }
    }

    /// The speed of controllable runs, also applied to the run in flight.
    pub fn set_speed(&mut self, speed: f64) {
        self.speed = speed;
        if let Some(j) = &self.job {
            j.control.set_speed(speed);
        }
    }

    /// The run in flight's pause / step / speed handle.
    pub fn control(&self) -> Option<&RunControl> {
        self.job.as_ref().map(|j| &*j.control)
    }

    /// Each frame: moves the worker's events into its view for a few milliseconds. Returns the
    /// exercise whose run ended in this frame.
    pub fn poll(&mut self) -> Option<String> {
        let job = self.job.as_mut()?;
        let ended = match self.views.get_mut(&job.exercise) {
            Some(view) => job.drain(view, DRAIN_BUDGET),
            None => true,
        };
        if ended {
            return self.job.take().map(|j| j.exercise);
        }
        // More may be waiting; the worker's wake covers new events.
        self.ctx.request_repaint_after(Duration::from_millis(100));
        None
    }

    /// Closing mid-run: asks the worker to stop, waits at most `timeout`, and lets it go.
    pub fn shutdown(&mut self, timeout: Duration) {
        if let Some(job) = self.job.take() {
            job.shutdown(timeout);
        }
    }

    /// Run and Stop for exercise `id` (with their shortcuts on hover), and which other exercise
    /// is running; `can_run`: its settings validate.
    pub fn buttons_ui(&self, ui: &mut egui::Ui, id: &str, can_run: bool, commands: &mut Vec<Command>) {
        let ctx = ui.ctx().clone();
        let this_running = self.running() == Some(id);
        let run = ui
            .add_enabled(self.job.is_none() && can_run, egui::Button::new(RichText::new("Run").strong()).min_size(egui::vec2(80.0, 26.0)))
            .on_hover_text(tip(&ctx, "Run the exercise with these settings", &shortcuts::RUN));
        if run.clicked() {
            commands.push(Command::StartRun);
        }
        if ui
            .add_enabled(this_running, egui::Button::new("Stop").min_size(egui::vec2(80.0, 26.0)))
            .on_hover_text(tip(&ctx, "Stop the run; what ran so far is reported", &shortcuts::STOP))
            .clicked()
        {
            commands.push(Command::StopRun);
        }
        if let Some(other) = self.running().filter(|r| *r != id) {
            ui.small(format!("{other} is running"));
        }
    }

    /// Exercise `id`'s latest run under the buttons: its phase and time, progress, and log.
    pub fn status_ui(&self, ui: &mut egui::Ui, id: &str) {
        let Some(v) = self.views.get(id) else { return };
        ui.add_space(4.0);
        match &v.status {
            Status::Failed(msg) => {
                ui.add(egui::Label::new(RichText::new(format!("Failed: {msg}")).color(ui.visuals().error_fg_color)).wrap());
            }
            _ => {
                let t = v.elapsed.unwrap_or_else(|| v.started.elapsed()).as_secs_f32();
                ui.label(format!("{} · {t:.1} s", v.phase));
            }
        }
        if v.is_active() {
            match v.progress {
                Some((done, total)) if total > 0 => {
                    ui.add(egui::ProgressBar::new(done as f32 / total as f32).text(format!("{done} / {total}")));
                }
                _ => {
                    ui.add(egui::ProgressBar::new(0.0).animate(true));
                }
            }
        }
        ui.add_space(6.0);
        egui::CollapsingHeader::new(format!("Log ({} lines)", v.logs.len())).id_salt(("log", id)).default_open(true).show(ui, |ui| {
            egui::ScrollArea::vertical().id_salt(("log-scroll", id)).max_height(110.0).stick_to_bottom(true).show(ui, |ui| {
                for l in &v.logs {
                    ui.add(egui::Label::new(RichText::new(l).monospace().small()).wrap());
                }
            });
        });
    }

    /// The results panel for the selected exercise: the pause / step / speed bar of a
    /// controllable run, then live tables, timelines and charts while it runs, or the report
    /// (with the file bar and any comparison from `files`) once it has finished. `stage`: the
    /// presenter's stage layout, with taller charts.
    pub fn results_ui(&mut self, ui: &mut egui::Ui, view: &LabView, files: &mut Files, stage: bool, commands: &mut Vec<Command>) {
        let id = view.selected;
        let wide = ui.available_width();
        if let Some(job) = &self.job
            && job.exercise == id
            && view.exercise(id).is_some_and(|e| e.controllable())
        {
            diagram::run_controls(ui, &job.control, &mut self.speed);
        }
        egui::ScrollArea::vertical().id_salt(("results", id)).auto_shrink([false, false]).show(ui, |ui| {
            let Some(v) = self.views.get(id) else {
                ui.heading("Results");
                ui.label("Press Run to start. Live charts appear here while the exercise runs; the verdict, tables and final charts when it finishes.");
                if files.compared().is_some() {
                    files.compare_ui(ui, None);
                }
                return;
            };
            if let Some(r) = &v.report {
                ui.heading(format!("Results · {}", r.title));
                ui.small(results::provenance_line(r));
                if let Some(line) = results::sized_line(r) {
                    ui.label(RichText::new(line).color(super::theme::info(ui.visuals())));
                }
                ui.add_space(4.0);
            } else {
                ui.heading("Live");
            }
            if let Status::Failed(msg) = &v.status {
                ui.add(egui::Label::new(RichText::new(format!("The run failed: {msg}")).color(ui.visuals().error_fg_color)).wrap());
            }
            let chart_h = if stage { (ui.available_height() * 0.42).clamp(220.0, 520.0) } else if wide > 700.0 { 220.0 } else { 180.0 };
            if let Some(d) = &v.diagram {
                diagram::show(ui, d, id);
                ui.add_space(8.0);
            }
            if let Some(r) = v.report.clone() {
                // An Arc: a pointer copy per frame, not the report's tables and series.
                if let Some(sg) = &r.suggestion {
                    let hover = sg.settings.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ");
                    if ui
                        .add_enabled(self.job.is_none(), egui::Button::new(RichText::new(&sg.label).strong()))
                        .on_hover_text(format!("Sets {hover}, runs again, and shows this run beside the new one"))
                        .clicked()
                    {
                        commands.push(Command::ApplySuggestion);
                    }
                    ui.add_space(4.0);
                }
                files.bar_ui(ui, &r);
                if files.compared().is_some() {
                    files.compare_ui(ui, Some(&r));
                } else {
                    results::report(ui, &r, "current");
                }
                ui.add_space(8.0);
                ui.separator();
                ui.label(RichText::new("Charts").strong());
                for c in &r.charts {
                    charts::show(ui, &ChartView::from_report(c), "report", chart_h);
                    ui.add_space(8.0);
                }
            } else {
                for t in &v.tables {
                    results::table(ui, t, "live");
                    ui.add_space(6.0);
                }
                if !v.timelines.is_empty() {
                    ui.label(RichText::new("Timelines so far").strong());
                    for t in &v.timelines {
                        ui.label(RichText::new(&t.title).small().strong());
                        timeline::show(ui, t, "live");
                        ui.add_space(6.0);
                    }
                }
                if v.live.is_empty() {
                    ui.label("Waiting for the first measurements…");
                }
                for c in &v.live {
                    charts::show(ui, &ChartView::from_live(c, &v.chart_spec(&c.id)), "live", chart_h);
                    ui.add_space(8.0);
                }
            }
        });
    }
}
