//! The lab window: its state (what survives a restart, `Saved`, apart from runtime handles —
//! jobs, threads, channels), the actions the panels and tests call, and the frame's layout.
//! The panels live in `panels`, the settings editor in `settings_panel`, file work in `files`,
//! screenshot mode in `screenshot`.

use eframe::egui;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use egui::RichText;
use egui_commonmark::CommonMarkCache;
use serde::{Deserialize, Serialize};

use super::files::FileMsg;
use super::frame_stats::FrameStats;
use super::hardware::Hardware;
use super::job::{Job, RunView, Status};
use super::screenshot::ScreenshotPlan;
use gpulab_exercises::{self as exercises, Exercise, Settings};
use gpulab_systems::report::Report;

/// Time spent per frame moving events from the worker into the UI's histories.
const DRAIN_BUDGET: Duration = Duration::from_millis(3);

/// One simulated hour per second: a simulated day fills the charts in about half a minute.
const DEFAULT_RUN_SPEED: f64 = 3600.0;

/// What survives a restart.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Saved {
    pub selected: String,
    pub settings: BTreeMap<String, Settings>,
    pub show_hardware: bool,
    /// Which exercises the learner has run (the sidebar marks).
    pub progress: super::progress::Progress,
    /// UI scale, theme and stage layout.
    pub presenter: super::presenter::Presenter,
}

pub struct GpulabApp {
    pub saved: Saved,
    pub(super) exercises: Vec<Box<dyn Exercise>>,
    pub(super) hardware: Hardware,
    pub(super) job: Option<Job>,
    pub(super) runs: HashMap<String, RunView>,
    pub(super) lesson_cache: CommonMarkCache,
    /// Text being typed into list/text settings, per (exercise, key), while it differs from the value.
    pub(super) edits: HashMap<(String, String), String>,
    pub(super) errors: HashMap<(String, String), String>,
    pub(super) files_rx: Receiver<FileMsg>,
    pub(super) files_tx: mpsc::Sender<FileMsg>,
    pub(super) file_busy: Option<String>,
    pub(super) file_status: Option<Result<String, String>>,
    pub(super) compare: Option<Report>,
    pub(super) compare_path: String,
    pub(super) frame_stats: FrameStats,
    pub(super) screenshot: Option<ScreenshotPlan>,
    pub(super) ctx: egui::Context,
    /// Simulated seconds per wall second for controllable runs (0 = as fast as possible).
    pub(super) run_speed: f64,
    pub(super) class: super::class_view::ClassView,
    /// Where "Write to ./gpulab-reports" and Ctrl+E write (a folder per export inside).
    pub(super) export_root: std::path::PathBuf,
}

impl GpulabApp {
    /// Builds the app; `exercise` (id or number) overrides the saved selection.
    pub fn new(cc: &eframe::CreationContext<'_>, exercise: Option<&str>, screenshot: Option<ScreenshotPlan>) -> Self {
        let saved: Saved = if screenshot.is_none() {
            cc.storage.and_then(|s| eframe::get_value(s, eframe::APP_KEY)).unwrap_or_default()
        } else {
            Saved::default()
        };
        Self::with_state(&cc.egui_ctx, saved, exercise, screenshot)
    }

    pub fn with_state(ctx: &egui::Context, saved: Saved, exercise: Option<&str>, screenshot: Option<ScreenshotPlan>) -> Self {
        let exercises = exercises::registry();
        let wake_ctx = ctx.clone();
        let hardware = Hardware::start(move || wake_ctx.request_repaint());
        let (files_tx, files_rx) = mpsc::channel();
        let mut app = GpulabApp {
            saved,
            exercises,
            hardware,
            job: None,
            runs: HashMap::new(),
            lesson_cache: CommonMarkCache::default(),
            edits: HashMap::new(),
            errors: HashMap::new(),
            files_rx,
            files_tx,
            file_busy: None,
            file_status: None,
            compare: None,
            compare_path: String::new(),
            frame_stats: FrameStats::new(screenshot.is_some()),
            screenshot,
            ctx: ctx.clone(),
            run_speed: DEFAULT_RUN_SPEED,
            class: super::class_view::ClassView::new(),
            export_root: "gpulab-reports".into(),
        };
        app.presenter_start();
        // Saved settings are merged into today's defaults key by key, so a changed exercise
        // never loads a stale or invalid configuration.
        let mut merged = BTreeMap::new();
        for ex in &app.exercises {
            let mut s = ex.settings();
            if let Some(old) = app.saved.settings.get(ex.id()) {
                for o in &old.0 {
                    if s.get(&o.key).is_some_and(|d| std::mem::discriminant(&d.value) == std::mem::discriminant(&o.value)) {
                        let _ = s.set(&o.key, &o.value.to_text());
                    }
                }
            }
            merged.insert(ex.id().to_string(), s);
        }
        app.saved.settings = merged;
        let want =
            exercise.and_then(|e| app.exercises.iter().find(|x| x.id() == e || x.number().to_string() == e)).map(|x| x.id().to_string());
        if let Some(id) = want {
            app.saved.selected = id;
        }
        if !app.exercises.iter().any(|x| x.id() == app.saved.selected)
            && let Some(first) = app.exercises.first()
        {
            app.saved.selected = first.id().to_string();
        }
        app
    }

    // ---- state access (used by the tests) ----

    pub fn selected(&self) -> &str {
        &self.saved.selected
    }

    pub fn select(&mut self, id: &str) {
        if let Some(ex) = self.exercises.iter().find(|x| x.id() == id || x.number().to_string() == id) {
            self.saved.selected = ex.id().to_string();
        }
    }

    pub fn settings(&self, id: &str) -> Option<&Settings> {
        self.saved.settings.get(id)
    }

    /// Sets a setting of the selected exercise as the settings panel would.
    pub fn set_setting(&mut self, key: &str, text: &str) -> gpulab_core::Result<()> {
        let id = self.saved.selected.clone();
        let s = self.saved.settings.get_mut(&id).ok_or_else(|| gpulab_core::Error::InvalidConfig(format!("no exercise {id}")))?;
        s.set(key, text)?;
        self.edits.remove(&(id.clone(), key.to_string()));
        self.errors.remove(&(id, key.to_string()));
        Ok(())
    }

    /// The adapters, once detected.
    pub fn adapters(&self) -> Option<&[gpulab_core::device::gpu::adapters::AdapterSummary]> {
        self.hardware.adapters.as_deref()
    }

    /// Why no hardware GPU is usable and the fix, once adapters are detected.
    pub fn driver_notice(&self) -> Option<&gpulab_core::device::gpu::driver_help::DriverNotice> {
        self.hardware.notice.as_ref()
    }

    /// Points "Write to ./gpulab-reports" and Ctrl+E at another folder (tests use a temp dir).
    pub fn set_export_root(&mut self, dir: impl Into<std::path::PathBuf>) {
        self.export_root = dir.into();
    }

    pub fn is_running(&self) -> bool {
        self.job.is_some()
    }

    /// The latest run of the selected exercise.
    pub fn run_view(&self) -> Option<&RunView> {
        self.runs.get(&self.saved.selected)
    }

    pub fn report(&self) -> Option<&Report> {
        self.run_view().and_then(|r| r.report.as_deref())
    }

    pub fn start_run(&mut self) {
        if self.job.is_some() {
            return;
        }
        let id = self.saved.selected.clone();
        let Some(settings) = self.saved.settings.get(&id).cloned() else { return };
        let ctx = self.ctx.clone();
        let control = std::sync::Arc::new(exercises::RunControl::new(self.run_speed));
        let (job, view) = Job::start(&id, settings, Box::new(move || ctx.request_repaint()), control);
        self.runs.insert(id, view);
        self.job = Some(job);
        self.file_status = None;
    }

    /// The one-click next step a report suggests: change its settings, keep this run for
    /// comparison, and run again ("measure again").
    pub fn apply_suggestion(&mut self) {
        let Some(r) = self.report().cloned() else { return };
        let Some(sg) = r.suggestion.clone() else { return };
        for (k, v) in &sg.settings {
            if let Err(e) = self.set_setting(k, v) {
                self.file_status = Some(Err(format!("could not apply {k} = {v}: {e}")));
                return;
            }
        }
        self.compare = Some(r);
        self.start_run();
    }

    /// The speed of controllable runs (simulated seconds per wall second; 0 = flat out), also
    /// applied to the run in progress.
    pub fn set_run_speed(&mut self, speed: f64) {
        self.run_speed = speed;
        if let Some(j) = &self.job {
            j.control.set_speed(speed);
        }
    }

    /// The run in progress's pause / step / speed handle.
    pub fn run_control(&self) -> Option<&exercises::RunControl> {
        self.job.as_ref().map(|j| &*j.control)
    }

    pub fn stop_run(&mut self) {
        if let Some(j) = &self.job {
            j.request_stop();
            if let Some(v) = self.runs.get_mut(&j.exercise)
                && v.status == Status::Running
            {
                v.status = Status::Stopping;
                v.phase = format!("{} — stopping…", v.phase);
            }
        }
    }

    // ---- per-frame work ----

    fn tick(&mut self, ctx: &egui::Context) {
        self.hardware.poll();
        if let Some(job) = &mut self.job {
            let ended = match self.runs.get_mut(&job.exercise) {
                Some(view) => job.drain(view, DRAIN_BUDGET),
                None => true,
            };
            if ended {
                let exercise = job.exercise.clone();
                self.job = None;
                self.record_progress(&exercise);
            } else {
                // More may be waiting; the worker's wake covers new events.
                ctx.request_repaint_after(Duration::from_millis(100));
            }
        }
        self.poll_files();
    }
}

impl eframe::App for GpulabApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let t0 = Instant::now();
        let ctx = ui.ctx().clone();
        self.tick(&ctx);
        self.screenshot_tick(&ctx);
        self.presenter_tick(&ctx);
        self.shortcuts(&ctx);
        if ctx.input(|i| i.viewport().close_requested()) {
            self.stop_run();
        }

        let ex_idx = self.exercises.iter().position(|x| x.id() == self.saved.selected).unwrap_or(0);
        let size = ui.available_size();
        let narrow = size.x < 1100.0;

        egui::Panel::top("top").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.label(RichText::new("gpulab").strong().size(18.0));
                if size.x >= 1050.0 {
                    // Room for the subtitle beside the presenter controls.
                    ui.label(RichText::new("— how GPUs accelerate deep learning, measured on your machine").weak());
                }
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    ui.toggle_value(&mut self.saved.show_hardware, "Hardware");
                    self.class_button(ui);
                    ui.separator();
                    self.presenter_toolbar(ui);
                });
            });
        });
        if let Some(n) = self.hardware.banner() {
            // No GPU driver: why, and the fix for this system. (A software-only adapter is noted
            // in the Hardware window and the status bar instead: a banner appearing after the
            // first frames would shift the layout under the learner's pointer on every start.)
            egui::Panel::top("driver-notice").show(ui, |ui| super::hardware::notice_ui(ui, n, true));
        }
        egui::Panel::bottom("status").show(ui, |ui| self.status_bar(ui));
        if self.saved.presenter.stage {
            // Stage: no exercise list, lesson or settings; the results get the screen.
            egui::CentralPanel::default().show(ui, |ui| self.stage_view(ui, ex_idx));
        } else {
            egui::Panel::left("exercises").resizable(true).default_size(220.0).size_range(170.0..=360.0).show(ui, |ui| {
                egui::ScrollArea::vertical().id_salt("exercise-list").show(ui, |ui| self.exercise_list(ui));
            });
            let has_results = self.runs.contains_key(&self.saved.selected) || self.compare.is_some();
            if narrow {
                egui::Panel::bottom("results")
                    .resizable(true)
                    .default_size(if has_results { size.y * 0.5 } else { 120.0 })
                    .size_range(80.0..=size.y * 0.8)
                    .show(ui, |ui| self.results_panel(ui));
            } else {
                egui::Panel::right("results")
                    .resizable(true)
                    .default_size((size.x * 0.42).max(420.0))
                    .size_range(320.0..=size.x * 0.65)
                    .show(ui, |ui| self.results_panel(ui));
            }
            egui::CentralPanel::default().show(ui, |ui| {
                let ex = &self.exercises[ex_idx];
                ui.label(RichText::new(format!("Exercise {} · {}", ex.number(), ex.title())).size(20.0).strong());
                ui.separator();
                let avail = ui.available_size();
                if avail.x >= 760.0 {
                    // Lesson and controls side by side.
                    let lesson_w = avail.x * 0.55;
                    ui.horizontal_top(|ui| {
                        let down = egui::Layout::top_down(egui::Align::Min);
                        // The lesson gets exactly its share: a long unbreakable code span is
                        // clipped (the lesson can be widened by narrowing the panels) instead of
                        // pushing the controls off screen.
                        let (rect, _) = ui.allocate_exact_size(egui::vec2(lesson_w, avail.y), egui::Sense::hover());
                        let mut lesson_ui = ui.new_child(egui::UiBuilder::new().max_rect(rect).layout(down));
                        lesson_ui.set_clip_rect(rect.intersect(ui.clip_rect()));
                        self.lesson(&mut lesson_ui, ex_idx);
                        ui.separator();
                        ui.allocate_ui_with_layout(egui::vec2(ui.available_width(), avail.y), down, |ui| self.controls(ui, ex_idx));
                    });
                } else {
                    // Stacked: the lesson above, the controls below.
                    egui::Panel::bottom("controls")
                        .resizable(true)
                        .default_size(avail.y * 0.55)
                        .size_range(140.0..=avail.y * 0.85)
                        .show(ui, |ui| self.controls(ui, ex_idx));
                    self.lesson(ui, ex_idx);
                }
            });
        }

        if self.saved.show_hardware {
            self.hardware.ensure_sampler(&ctx);
            let mut open = true;
            egui::Window::new("Hardware").open(&mut open).default_size([520.0, 560.0]).vscroll(true).show(&ctx, |ui| self.hardware.ui(ui));
            if !open {
                self.saved.show_hardware = false;
            }
        }
        self.class_window(&ctx);
        let running = self.job.is_some();
        self.frame_stats.record(t0.elapsed().as_secs_f64() * 1e3, running);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if self.screenshot.is_none() {
            eframe::set_value(storage, eframe::APP_KEY, &self.saved);
        }
    }
}

impl Drop for GpulabApp {
    fn drop(&mut self) {
        // Closing mid-run: ask the worker to stop, wait briefly, and let it go.
        if let Some(job) = self.job.take() {
            job.shutdown(Duration::from_secs(2));
        }
    }
}
