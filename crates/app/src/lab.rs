//! The lab window: the panels it is made of, what survives a restart (`Saved`, gathered from
//! the panels that own each part), the frame's layout, and the commands the panels queue, run at
//! the end of the frame (the keyboard's at its start). The actions the tests and screenshot mode
//! call are here too; each one forwards to the panel that owns the state.

use eframe::egui;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use egui::RichText;
use serde::{Deserialize, Serialize};

use super::cards::LessonView;
use super::class_view::ClassView;
use super::context::{Command, LabView};
use super::files::Files;
use super::frame_stats::FrameStats;
use super::hardware::{self, Hardware};
use super::job::RunView;
use super::presenter::Presenter;
use super::progress::Progress;
use super::runs::Runs;
use super::screenshot::{ScreenshotPlan, ShotState};
use super::settings_panel::SettingsPanel;
use super::shortcuts;
use super::sidebar::Sidebar;
use super::theme::Theme;
use gpulab_class::Class;
use gpulab_exercises::{self as exercises, Exercise, RunControl, Settings};
use gpulab_systems::report::Report;

/// What survives a restart (eframe keeps it as RON under `eframe::APP_KEY`). Each field belongs
/// to one panel; the lab gathers them on save and hands them out on start. Every field has a
/// default, so a state saved by an older version (or missing a field) still loads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Saved {
    /// The selected exercise's id.
    pub selected: String,
    /// Every exercise's settings (the settings panel's).
    pub settings: BTreeMap<String, Settings>,
    /// Whether the hardware window is open.
    pub show_hardware: bool,
    /// Which exercises the learner has run (the sidebar marks).
    pub progress: Progress,
    /// UI scale, theme and stage layout.
    pub presenter: Presenter,
}

/// The lab: the registry's exercises, the selection, and a struct per panel, each owning its
/// state. Nothing here blocks: runs, file work, adapter detection and sampling run on other
/// threads and wake the UI.
pub struct GpulabApp {
    ctx: egui::Context,
    exercises: Vec<Box<dyn Exercise>>,
    selected: String,
    sidebar: Sidebar,
    lesson: LessonView,
    settings: SettingsPanel,
    runs: Runs,
    files: Files,
    hardware: Hardware,
    class: ClassView,
    presenter: Presenter,
    screenshot: Option<ScreenshotPlan>,
    frame_stats: FrameStats,
    /// What the panels asked for while this frame was drawn.
    commands: Vec<Command>,
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
        let wake = ctx.clone();
        let mut app = GpulabApp {
            ctx: ctx.clone(),
            settings: SettingsPanel::new(&exercises, &saved.settings),
            sidebar: Sidebar::new(saved.progress),
            lesson: LessonView::default(),
            runs: Runs::new(ctx),
            files: Files::new(ctx),
            hardware: Hardware::start(saved.show_hardware, move || wake.request_repaint()),
            class: ClassView::new(ctx),
            presenter: saved.presenter,
            frame_stats: FrameStats::new(screenshot.is_some()),
            screenshot,
            selected: saved.selected,
            exercises,
            commands: Vec::new(),
        };
        app.presenter.start(ctx);
        if let Some(e) = exercise {
            app.select(e);
        }
        if app.exercise(&app.selected).is_none()
            && let Some(first) = app.exercises.first()
        {
            app.selected = first.id().to_string();
        }
        app
    }

    /// What `Saved` keeps, from the panels that own it.
    fn saved(&self) -> Saved {
        Saved {
            selected: self.selected.clone(),
            settings: self.settings.saved(),
            show_hardware: self.hardware.open,
            progress: self.sidebar.progress.clone(),
            presenter: self.presenter.clone(),
        }
    }

    fn exercise(&self, id: &str) -> Option<&dyn Exercise> {
        self.exercises.iter().find(|x| x.id() == id || x.number().to_string() == id).map(|e| e.as_ref())
    }

    // ---- the actions the tests and screenshot mode call ----

    pub fn selected(&self) -> &str {
        &self.selected
    }

    /// Selects an exercise by id or number.
    pub fn select(&mut self, id: &str) {
        if let Some(ex) = self.exercise(id) {
            let id = ex.id().to_string();
            self.set_selected(id);
        }
    }

    /// Makes `id` the selected exercise; a comparison loaded for another one is closed.
    fn set_selected(&mut self, id: String) {
        if id != self.selected {
            self.files.close_comparison();
        }
        self.selected = id;
    }

    pub fn settings(&self, id: &str) -> Option<&Settings> {
        self.settings.get(id)
    }

    /// Sets a setting of the selected exercise as the settings panel would.
    pub fn set_setting(&mut self, key: &str, text: &str) -> gpulab_core::Result<()> {
        self.settings.set(&self.selected, key, text)
    }

    /// Sets the selected exercise's settings to its preset `name` (its defaults with the
    /// preset's values), as choosing it in the dropdown does.
    pub fn apply_preset(&mut self, name: &str) -> gpulab_core::Result<()> {
        let ex = self.exercises.iter().find(|e| e.id() == self.selected);
        let ex = ex.ok_or_else(|| gpulab_core::Error::InvalidConfig(format!("no exercise {}", self.selected)))?;
        self.settings.apply_preset(ex.as_ref(), name)
    }

    /// The preset the selected exercise's settings match, if any (what the dropdown shows).
    pub fn active_preset(&self) -> Option<&'static str> {
        self.settings.active_preset(self.exercise(&self.selected)?)
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
    pub fn set_export_root(&mut self, dir: impl Into<PathBuf>) {
        self.files.export_root = dir.into();
    }

    pub fn is_running(&self) -> bool {
        self.runs.running().is_some()
    }

    /// The latest run of the selected exercise.
    pub fn run_view(&self) -> Option<&RunView> {
        self.runs.view(&self.selected)
    }

    pub fn report(&self) -> Option<&Report> {
        self.runs.report(&self.selected)
    }

    /// The speed of controllable runs (simulated seconds per wall second; 0 = flat out), also
    /// applied to the run in progress.
    pub fn set_run_speed(&mut self, speed: f64) {
        self.runs.set_speed(speed);
    }

    /// The run in progress's pause / step / speed handle.
    pub fn run_control(&self) -> Option<&RunControl> {
        self.runs.control()
    }

    /// Loads a report.json to show beside the current result (what the path box's Load does).
    pub fn compare_with(&mut self, path: &str) {
        self.files.compare_with(path);
    }

    /// The report loaded for comparison, once it has arrived.
    pub fn compared(&self) -> Option<&Report> {
        self.files.compared()
    }

    /// The learner's progress (what the sidebar shows).
    pub fn progress(&self) -> &Progress {
        &self.sidebar.progress
    }

    /// Opens the class view on `dir` without a dialog; the folder is read off the UI thread.
    pub fn open_class_folder(&mut self, dir: impl Into<PathBuf>) {
        self.class.open_folder(dir);
    }

    /// The class read from the folder, once it has arrived.
    pub fn class_view(&self) -> Option<&Class> {
        self.class.class()
    }

    /// Whether a class read or export is still running.
    pub fn class_busy(&self) -> bool {
        self.class.busy()
    }

    /// Writes class.csv and class.html into `dir` without a dialog (off the UI thread).
    pub fn export_class_to(&mut self, dir: impl Into<PathBuf>) {
        self.class.export_to(dir);
    }

    /// Replaces the presenter settings (screenshot mode) and applies them.
    pub fn set_presenter(&mut self, p: Presenter) {
        self.presenter = p;
        self.presenter.start(&self.ctx);
    }

    /// The UI scale (what the toolbar shows and restarts restore).
    pub fn ui_scale(&self) -> f32 {
        self.presenter.ui_scale
    }

    pub fn set_theme(&mut self, t: Theme) {
        self.presenter.set_theme(&self.ctx, t);
    }

    pub fn stage(&self) -> bool {
        self.presenter.stage
    }

    // ---- commands ----

    /// Runs the queued commands, in order.
    fn execute(&mut self, commands: Vec<Command>) {
        for c in commands {
            match c {
                Command::Select(id) => self.select(&id),
                Command::SelectRelative(step) => {
                    let n = self.exercises.len() as isize;
                    if n > 0 {
                        let at = self.exercises.iter().position(|x| x.id() == self.selected).unwrap_or(0) as isize;
                        let id = self.exercises[(at + step).rem_euclid(n) as usize].id().to_string();
                        self.set_selected(id);
                    }
                }
                Command::StartRun => self.start_run(),
                Command::StopRun => self.runs.stop(),
                Command::ApplySuggestion => self.apply_suggestion(),
                Command::ExportReport => {
                    if let Some(r) = self.runs.report(&self.selected).cloned()
                        && !self.files.busy()
                    {
                        self.files.export_default(&r);
                    }
                }
                Command::StepScale(step) => self.presenter.step_scale(&self.ctx, step),
                Command::ToggleStage => self.presenter.stage = !self.presenter.stage,
                Command::Status(s) => self.files.set_status(Some(s)),
            }
        }
    }

    /// Starts the selected exercise with its settings (unless a run is in flight).
    fn start_run(&mut self) {
        if self.is_running() {
            return;
        }
        let Some(settings) = self.settings.get(&self.selected).cloned() else { return };
        self.runs.start(&self.selected, settings);
        self.files.set_status(None);
    }

    /// The one-click next step a report suggests: change its settings, keep this run for
    /// comparison, and run again ("measure again").
    fn apply_suggestion(&mut self) {
        let Some(r) = self.report().cloned() else { return };
        let Some(sg) = r.suggestion.clone() else { return };
        for (k, v) in &sg.settings {
            if let Err(e) = self.set_setting(k, v) {
                self.files.set_status(Some(Err(format!("could not apply {k} = {v}: {e}"))));
                return;
            }
        }
        self.files.compare_to(r);
        self.start_run();
    }

    /// Whether the selected exercise can run now (what enables Run and F5).
    fn can_run(&mut self) -> bool {
        let Some(ex) = self.exercises.iter().find(|x| x.id() == self.selected) else { return false };
        !self.is_running() && self.settings.validate(ex.as_ref()).is_ok()
    }

    // ---- the frame ----

    /// Before drawing: the worker's events, finished runs into the progress marks, file and
    /// adapter outcomes, screenshot mode, the presenter's scale and theme, and the keyboard.
    fn begin_frame(&mut self, ctx: &egui::Context) {
        self.hardware.poll();
        if let Some(id) = self.runs.poll()
            && let (Some(ex), Some(report)) = (self.exercises.iter().find(|e| e.id() == id), self.runs.report(&id))
        {
            self.sidebar.progress.record(ex.as_ref(), report);
        }
        self.files.poll();
        if let Some(plan) = &mut self.screenshot {
            let state = ShotState {
                running: self.runs.running().is_some(),
                frames: self.frame_stats.summary(),
                notice: self.hardware.banner().map(|n| format!("{} | {}", n.headline, n.fixes.first().map_or("", |f| f.as_str()))),
                run_end: self.runs.view(&self.selected).map(|v| v.status.clone()),
            };
            if plan.tick(ctx, state) {
                self.execute(vec![Command::StartRun]);
            }
        }
        self.presenter.tick(ctx);
        let can_run = self.can_run();
        let keys = shortcuts::read(ctx, self.is_running(), can_run);
        self.execute(keys);
        if ctx.input(|i| i.viewport().close_requested()) {
            self.runs.stop();
        }
    }

    fn layout(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let ex_idx = self.exercises.iter().position(|x| x.id() == self.selected).unwrap_or(0);
        let size = ui.available_size();
        let narrow = size.x < 1100.0;

        egui::Panel::top("top").show(ui, |ui| {
            ui.horizontal(|ui| {
                self.presenter.scale_ui(ui);
                ui.separator();
                ui.label(RichText::new("gpulab").strong().size(18.0));
                if size.x >= 1050.0 {
                    // Room for the subtitle beside the presenter controls.
                    ui.label(RichText::new("— how GPUs accelerate deep learning, measured on your machine").weak());
                }
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    self.hardware.toggle_ui(ui);
                    self.class.button_ui(ui);
                    ui.separator();
                    self.presenter.toggles_ui(ui);
                });
            });
        });
        if let Some(n) = self.hardware.banner() {
            // No GPU driver: why, and the fix for this system. (A software-only adapter is noted
            // in the Hardware window and the status bar instead: a banner appearing after the
            // first frames would shift the layout under the learner's pointer on every start.)
            egui::Panel::top("driver-notice").show(ui, |ui| hardware::notice_ui(ui, n, true));
        }
        egui::Panel::bottom("status").show(ui, |ui| super::status_bar::show(ui, &self.frame_stats, &self.hardware));
        let view = LabView {
            exercises: &self.exercises,
            selected: &self.selected,
            running: self.runs.running().map(str::to_string),
            adapters: self.hardware.adapters.as_deref(),
            trained: self
                .runs
                .report(&self.selected)
                .and_then(|r| gpulab_exercises::sizing::trained(&r.config))
                .map(|(h, e)| (h.to_string(), e.to_string())),
        };
        let commands = &mut self.commands;
        let (runs, files, settings, lesson, sidebar) =
            (&mut self.runs, &mut self.files, &mut self.settings, &mut self.lesson, &mut self.sidebar);
        let stage = self.presenter.stage;
        let ex = self.exercises[ex_idx].as_ref();
        if stage {
            // Stage: no exercise list, lesson or settings; the results get the screen.
            egui::CentralPanel::default().show(ui, |ui| {
                ui.horizontal(|ui| {
                    ui.label(RichText::new(format!("Exercise {} · {}", ex.number(), ex.title())).size(20.0).strong());
                    ui.add_space(12.0);
                    let valid = settings.validate(ex).is_ok();
                    runs.buttons_ui(ui, ex.id(), valid, commands);
                });
                ui.separator();
                runs.results_ui(ui, &view, files, true, commands);
            });
        } else {
            egui::Panel::left("exercises").resizable(true).default_size(220.0).size_range(170.0..=360.0).show(ui, |ui| {
                egui::ScrollArea::vertical().id_salt("exercise-list").show(ui, |ui| sidebar.ui(ui, &view, commands));
            });
            let has_results = runs.view(&self.selected).is_some() || files.compared().is_some();
            if narrow {
                egui::Panel::bottom("results")
                    .resizable(true)
                    .default_size(if has_results { size.y * 0.5 } else { 120.0 })
                    .size_range(80.0..=size.y * 0.8)
                    .show(ui, |ui| runs.results_ui(ui, &view, files, false, commands));
            } else {
                egui::Panel::right("results")
                    .resizable(true)
                    .default_size((size.x * 0.42).max(420.0))
                    .size_range(320.0..=size.x * 0.65)
                    .show(ui, |ui| runs.results_ui(ui, &view, files, false, commands));
            }
            egui::CentralPanel::default().show(ui, |ui| {
                ui.label(RichText::new(format!("Exercise {} · {}", ex.number(), ex.title())).size(20.0).strong());
                ui.separator();
                let avail = ui.available_size();
                let mut controls = |ui: &mut egui::Ui| {
                    egui::ScrollArea::vertical().id_salt(("controls", ex.id())).auto_shrink([false, false]).show(ui, |ui| {
                        let valid = settings.validate(ex);
                        if let Err(e) = &valid {
                            ui.add(egui::Label::new(RichText::new(e).color(ui.visuals().error_fg_color)).wrap());
                        }
                        ui.horizontal(|ui| runs.buttons_ui(ui, ex.id(), valid.is_ok(), commands));
                        runs.status_ui(ui, ex.id());
                        ui.add_space(8.0);
                        ui.separator();
                        settings.ui(ui, &view, ex, commands);
                        ui.add_space(6.0);
                    });
                };
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
                        lesson.ui(&mut lesson_ui, ex);
                        ui.separator();
                        ui.allocate_ui_with_layout(egui::vec2(ui.available_width(), avail.y), down, |ui| controls(ui));
                    });
                } else {
                    // Stacked: the lesson above, the controls below.
                    egui::Panel::bottom("controls")
                        .resizable(true)
                        .default_size(avail.y * 0.55)
                        .size_range(140.0..=avail.y * 0.85)
                        .show(ui, |ui| controls(ui));
                    lesson.ui(ui, ex);
                }
            });
        }
        self.hardware.window(&ctx);
        self.class.window(&ctx);
    }
}

impl eframe::App for GpulabApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let t0 = Instant::now();
        let ctx = ui.ctx().clone();
        self.begin_frame(&ctx);
        self.layout(ui);
        let commands = std::mem::take(&mut self.commands);
        self.execute(commands);
        self.frame_stats.record(t0.elapsed().as_secs_f64() * 1e3, self.is_running());
    }

    /// Screenshot mode leaves the learner's saved state alone, egui's memory included.
    fn persist_egui_memory(&self) -> bool {
        self.screenshot.is_none()
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if self.screenshot.is_none() {
            eframe::set_value(storage, eframe::APP_KEY, &self.saved());
        }
    }
}

impl Drop for GpulabApp {
    fn drop(&mut self) {
        // Closing mid-run: ask the worker to stop, wait briefly, and let it go.
        self.runs.shutdown(Duration::from_secs(2));
    }
}
