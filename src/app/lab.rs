//! The lab window: exercise list, lesson, settings and run controls, live charts and results.
//! Saved state (`Saved`) is kept apart from runtime handles (jobs, threads, channels).

use eframe::egui;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use egui::{Color32, RichText};
use egui_commonmark::{CommonMarkCache, CommonMarkViewer};
use serde::{Deserialize, Serialize};

use super::charts::{self, ChartView};
use super::hardware::Hardware;
use super::job::{Job, RunView, Status};
use super::results::{self, WARN};
use crate::exercises::{self, Exercise, Settings, Value};
use crate::report::Report;

/// Time spent per frame moving events from the worker into the UI's histories.
const DRAIN_BUDGET: Duration = Duration::from_millis(3);

/// What survives a restart.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Saved {
    pub selected: String,
    pub settings: BTreeMap<String, Settings>,
    pub show_hardware: bool,
}

/// A background file task's outcome.
enum FileMsg {
    Exported(Result<Vec<PathBuf>, String>),
    Compared(Result<Box<Report>, String>),
    NoDialog(&'static str),
}

/// Screenshot mode: render, capture, save, close.
pub struct ScreenshotPlan {
    pub path: PathBuf,
    pub frames: u32,
    /// Run the exercise first and capture `frames` frames after it finishes.
    pub autorun: bool,
    pub result: Arc<Mutex<Option<Result<(), String>>>>,
    frame: u32,
    after_finish: Option<u32>,
    requested: bool,
    /// When the app was created, and how long the UI work of each frame took while the
    /// exercise ran: printed when the screenshot is saved (the lab's speed figures).
    started: Instant,
    first_frame: Option<Duration>,
    running_ms: Vec<f32>,
}

impl ScreenshotPlan {
    pub fn new(path: PathBuf, frames: u32, autorun: bool, result: Arc<Mutex<Option<Result<(), String>>>>) -> Self {
        ScreenshotPlan {
            path,
            frames: frames.max(1),
            autorun,
            result,
            frame: 0,
            after_finish: None,
            requested: false,
            started: Instant::now(),
            first_frame: None,
            running_ms: Vec::new(),
        }
    }
}

pub struct GpulabApp {
    pub saved: Saved,
    exercises: Vec<Box<dyn Exercise>>,
    hardware: Hardware,
    job: Option<Job>,
    runs: HashMap<String, RunView>,
    lesson_cache: CommonMarkCache,
    /// Text being typed into list/text settings, per (exercise, key), while it differs from the value.
    edits: HashMap<(String, String), String>,
    errors: HashMap<(String, String), String>,
    files_rx: Receiver<FileMsg>,
    files_tx: mpsc::Sender<FileMsg>,
    file_busy: Option<String>,
    file_status: Option<Result<String, String>>,
    compare: Option<Report>,
    compare_path: String,
    frame_times: VecDeque<f32>,
    screenshot: Option<ScreenshotPlan>,
    ctx: egui::Context,
}

impl GpulabApp {
    /// Builds the app; `exercise` (id or number) overrides the saved selection.
    pub fn new(cc: &eframe::CreationContext<'_>, exercise: Option<&str>, screenshot: Option<ScreenshotPlan>) -> Self {
        let saved: Saved = if screenshot.is_none() { cc.storage.and_then(|s| eframe::get_value(s, eframe::APP_KEY)).unwrap_or_default() } else { Saved::default() };
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
            frame_times: VecDeque::new(),
            screenshot,
            ctx: ctx.clone(),
        };
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
        let want = exercise.and_then(|e| app.exercises.iter().find(|x| x.id() == e || x.number().to_string() == e)).map(|x| x.id().to_string());
        if let Some(id) = want {
            app.saved.selected = id;
        }
        if !app.exercises.iter().any(|x| x.id() == app.saved.selected) {
            app.saved.selected = app.exercises[0].id().to_string();
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
    pub fn set_setting(&mut self, key: &str, text: &str) -> crate::Result<()> {
        let id = self.saved.selected.clone();
        let s = self.saved.settings.get_mut(&id).ok_or_else(|| crate::Error::InvalidConfig(format!("no exercise {id}")))?;
        s.set(key, text)?;
        self.edits.remove(&(id.clone(), key.to_string()));
        self.errors.remove(&(id, key.to_string()));
        Ok(())
    }

    /// The adapters, once detected.
    pub fn adapters(&self) -> Option<&[crate::device::gpu::adapters::AdapterSummary]> {
        self.hardware.adapters.as_deref()
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
        let (job, view) = Job::start(&id, settings, Box::new(move || ctx.request_repaint()));
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
                self.job = None;
            } else {
                // More may be waiting; the worker's wake covers new events.
                ctx.request_repaint_after(Duration::from_millis(100));
            }
        }
        while let Ok(m) = self.files_rx.try_recv() {
            self.file_busy = None;
            match m {
                FileMsg::Exported(Ok(paths)) => {
                    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    self.file_status = Some(Ok(format!("wrote {}", list.join(", "))));
                }
                FileMsg::Exported(Err(e)) | FileMsg::Compared(Err(e)) => self.file_status = Some(Err(e)),
                FileMsg::Compared(Ok(r)) => {
                    self.file_status = Some(Ok(format!("loaded {} for comparison", r.title)));
                    self.compare = Some(*r);
                }
                FileMsg::NoDialog(what) => {
                    self.file_status = Some(Err(format!(
                        "No file dialog opened for {what} (this desktop has no file-dialog portal, or it was cancelled). Use “Write to ./gpulab-reports” or type a path."
                    )))
                }
            }
        }
    }

    fn screenshot_tick(&mut self, ctx: &egui::Context) {
        let autorun_now = self.screenshot.as_ref().is_some_and(|p| p.autorun && p.frame == 1);
        if autorun_now {
            self.start_run();
        }
        let running = self.job.is_some();
        let Some(plan) = &mut self.screenshot else { return };
        plan.frame += 1;
        ctx.request_repaint();
        if plan.requested {
            return;
        }
        let ready = if plan.autorun {
            if running || plan.frame < 3 {
                false
            } else {
                let since = plan.after_finish.get_or_insert(plan.frame);
                plan.frame >= *since + plan.frames
            }
        } else {
            plan.frame >= plan.frames
        };
        if !ready {
            return;
        }
        plan.requested = true;
        if let Some(first) = plan.first_frame {
            let mut v = plan.running_ms.clone();
            v.sort_by(|a, b| a.total_cmp(b));
            let median = v.get(v.len() / 2).map(|m| format!("{m:.2} ms")).unwrap_or_else(|| "—".into());
            eprintln!(
                "screenshot: first frame {:.0} ms after start; UI work per frame while the exercise ran: median {median} over {} frames (measured)",
                first.as_secs_f64() * 1e3,
                v.len()
            );
        }
        let path = plan.path.clone();
        let result = plan.result.clone();
        let ctx2 = ctx.clone();
        ctx.request_screenshot(move |image| {
            // Encode and write off the UI thread, then close the window.
            std::thread::spawn(move || {
                let r = super::write_png(&path, &image);
                if let Ok(mut g) = result.lock() {
                    *g = Some(r);
                }
                ctx2.send_viewport_cmd(egui::ViewportCommand::Close);
                ctx2.request_repaint();
            });
        });
    }

    fn record_frame_time(&mut self, ms: f32) {
        let running = self.job.is_some();
        if let Some(plan) = &mut self.screenshot {
            plan.first_frame.get_or_insert_with(|| plan.started.elapsed());
            if running {
                plan.running_ms.push(ms);
            }
        }
        if self.frame_times.len() >= 120 {
            self.frame_times.pop_front();
        }
        self.frame_times.push_back(ms);
    }

    fn median_frame_ms(&self) -> Option<f32> {
        if self.frame_times.is_empty() {
            return None;
        }
        let mut v: Vec<f32> = self.frame_times.iter().copied().collect();
        v.sort_by(|a, b| a.total_cmp(b));
        Some(v[v.len() / 2])
    }

    // ---- files ----

    /// Runs file work (dialogs, reading, writing) on its own thread and posts the outcome back,
    /// so the UI thread never waits on the disk or a dialog.
    fn file_job(&mut self, busy: &str, work: impl FnOnce() -> FileMsg + Send + 'static) {
        let tx = self.files_tx.clone();
        let ctx = self.ctx.clone();
        self.file_busy = Some(busy.into());
        std::thread::spawn(move || {
            let _ = tx.send(work());
            ctx.request_repaint();
        });
    }

    fn export_dialog(&mut self) {
        let Some(r) = self.report().cloned() else { return };
        self.file_job("waiting for the save dialog…", move || {
            match rfd::FileDialog::new().set_title("Export report").set_file_name(format!("{}-report", r.exercise)).save_file() {
                None => FileMsg::NoDialog("export"),
                Some(p) => FileMsg::Exported(write_report(&r, &p)),
            }
        });
    }

    fn export_default(&mut self) {
        let Some(r) = self.report().cloned() else { return };
        self.file_job("writing…", move || {
            let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
            let dir = PathBuf::from("gpulab-reports").join(format!("{}-{stamp}", r.exercise));
            let res = crate::report::write_all(&r, &dir)
                .map_err(|e| e.to_string())
                .map(|v| v.into_iter().map(|p| std::fs::canonicalize(&p).unwrap_or(p)).collect());
            FileMsg::Exported(res)
        });
    }

    fn compare_dialog(&mut self) {
        self.file_job("waiting for the open dialog…", || {
            match rfd::FileDialog::new().set_title("Open report.json to compare").add_filter("gpulab report", &["json"]).pick_file() {
                None => FileMsg::NoDialog("opening a report"),
                Some(p) => compared(&p),
            }
        });
    }

    /// Loads a report.json to show beside the current result (what the path box's Load does).
    pub fn compare_with(&mut self, path: &str) {
        self.compare_path = path.to_string();
        self.compare_path();
    }

    /// The report loaded for comparison, once it has arrived.
    pub fn compared(&self) -> Option<&Report> {
        self.compare.as_ref()
    }

    fn compare_path(&mut self) {
        let path = PathBuf::from(self.compare_path.trim());
        self.file_job("reading…", move || {
            let p = if path.is_dir() { path.join("report.json") } else { path };
            compared(&p)
        });
    }

    // ---- panels ----

    fn exercise_list(&mut self, ui: &mut egui::Ui) {
        ui.add_space(4.0);
        ui.heading("Exercises");
        ui.add_space(4.0);
        let mut clicked = None;
        for ex in &self.exercises {
            let sel = self.saved.selected == ex.id();
            let label = format!("{}. {}", ex.number(), ex.title());
            let text = if ex.runnable() { RichText::new(label) } else { RichText::new(label).weak() };
            let running = self.job.as_ref().is_some_and(|j| j.exercise == ex.id());
            ui.horizontal(|ui| {
                let r = ui.add(egui::Button::selectable(sel, text).wrap_mode(egui::TextWrapMode::Wrap));
                if r.clicked() {
                    clicked = Some(ex.id().to_string());
                }
                if running {
                    ui.spinner();
                }
            });
            if !ex.runnable() {
                ui.label(RichText::new("   planned · lesson only").small().weak());
            }
        }
        if let Some(id) = clicked {
            self.saved.selected = id;
        }
    }

    fn lesson(&mut self, ui: &mut egui::Ui, ex_idx: usize) {
        let ex = &self.exercises[ex_idx];
        egui::ScrollArea::vertical().id_salt(("lesson", ex.id())).auto_shrink([false, false]).show(ui, |ui| {
            if !ex.runnable() {
                egui::Frame::group(ui.style()).stroke(egui::Stroke::new(1.0, WARN)).show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.colored_label(WARN, "Not runnable yet: this lab is planned. Read the lesson; the Run button arrives with the lab.");
                });
                ui.add_space(6.0);
            }
            CommonMarkViewer::new().show(ui, &mut self.lesson_cache, ex.lesson());
        });
    }

    fn settings_ui(&mut self, ui: &mut egui::Ui, id: &str) {
        let adapters = self.hardware.adapters.clone();
        let Some(settings) = self.saved.settings.get_mut(id) else { return };
        let edits = &mut self.edits;
        let errors = &mut self.errors;
        let running = self.job.is_some();
        let keys: Vec<String> = settings.0.iter().map(|s| s.key.clone()).collect();
        ui.add_enabled_ui(!running, |ui| {
            egui::Grid::new(("settings", id)).num_columns(2).spacing([10.0, 6.0]).show(ui, |ui| {
                for key in &keys {
                    let Some(s) = settings.get(key).cloned() else { continue };
                    let ek = (id.to_string(), key.clone());
                    let lab_id = ui.label(&s.label).on_hover_text(&s.help).id;
                    let mut new_text: Option<String> = None;
                    ui.vertical(|ui| {
                        match &s.value {
                            Value::Int { value, min, max } => {
                                let mut v = *value;
                                if ui.add(egui::DragValue::new(&mut v).range(*min..=*max)).labelled_by(lab_id).on_hover_text(&s.help).changed() {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Float { value, min, max } => {
                                let mut v = *value;
                                let speed = ((max - min).abs() / 1000.0).clamp(1e-4, 1.0);
                                if ui.add(egui::DragValue::new(&mut v).range(*min..=*max).speed(speed).max_decimals(6)).labelled_by(lab_id).on_hover_text(&s.help).changed() {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Bool(b) => {
                                let mut v = *b;
                                if ui.checkbox(&mut v, "").labelled_by(lab_id).on_hover_text(&s.help).changed() {
                                    new_text = Some(v.to_string());
                                }
                            }
                            Value::Choice { value, options } => {
                                let mut v = value.clone();
                                egui::ComboBox::from_id_salt(("choice", id, key))
                                    .selected_text(&v)
                                    .show_ui(ui, |ui| {
                                        for o in options {
                                            ui.selectable_value(&mut v, o.clone(), o);
                                        }
                                    })
                                    .response
                                    .labelled_by(lab_id)
                                    .on_hover_text(&s.help);
                                if v != *value {
                                    new_text = Some(v);
                                }
                            }
                            Value::Devices(list) => {
                                let mut chosen = list.clone();
                                let mut toggle = |ui: &mut egui::Ui, dev: &str, label: String, hover: &str| {
                                    let mut on = chosen.iter().any(|d| d == dev);
                                    if ui.checkbox(&mut on, label).on_hover_text(hover).changed() {
                                        if on {
                                            chosen.push(dev.to_string());
                                        } else {
                                            chosen.retain(|d| d != dev);
                                        }
                                    }
                                };
                                toggle(ui, "cpu", "CPU".into(), "The CPU backend (GEMM + rayon)");
                                toggle(ui, "gpu", "Best GPU (auto)".into(), "The best adapter gpulab finds");
                                match &adapters {
                                    None => {
                                        ui.horizontal(|ui| {
                                            ui.spinner();
                                            ui.small("detecting adapters…");
                                        });
                                    }
                                    Some(list) => {
                                        for a in list {
                                            let dev = format!("gpu:{}", a.index);
                                            toggle(ui, &dev, a.label(), &format!("{dev}: {} {}", a.driver, a.driver_info));
                                        }
                                    }
                                }
                                // Backends typed elsewhere (gpu:NAME, cuda:N) stay visible and removable.
                                for d in list.iter().filter(|d| d.as_str() != "cpu" && d.as_str() != "gpu" && !adapters.as_ref().is_some_and(|a| a.iter().any(|a| format!("gpu:{}", a.index) == **d))) {
                                    toggle(ui, d, d.clone(), "set from a saved or typed configuration");
                                }
                                if chosen != *list {
                                    new_text = Some(chosen.join(","));
                                }
                            }
                            Value::List { .. } | Value::Text(_) => {
                                let mut text = edits.get(&ek).cloned().unwrap_or_else(|| s.value.to_text());
                                let r = ui.add(egui::TextEdit::singleline(&mut text).desired_width(180.0)).labelled_by(lab_id).on_hover_text(&s.help);
                                if r.changed() {
                                    edits.insert(ek.clone(), text.clone());
                                    new_text = Some(text);
                                }
                                if r.lost_focus() && !errors.contains_key(&ek) {
                                    edits.remove(&ek);
                                }
                            }
                        }
                        if let Some(t) = &new_text {
                            match settings.set(key, t) {
                                Ok(()) => {
                                    errors.remove(&ek);
                                }
                                Err(e) => {
                                    errors.insert(ek.clone(), e.to_string());
                                }
                            }
                        }
                        if let Some(e) = errors.get(&ek) {
                            ui.add(egui::Label::new(RichText::new(e).color(Color32::from_rgb(235, 90, 80)).small()).wrap());
                        }
                    });
                    ui.end_row();
                }
            });
        });
    }

    fn controls(&mut self, ui: &mut egui::Ui, ex_idx: usize) {
        let (id, runnable) = {
            let ex = &self.exercises[ex_idx];
            (ex.id().to_string(), ex.runnable())
        };
        egui::ScrollArea::vertical().id_salt(("controls", &id)).auto_shrink([false, false]).show(ui, |ui| {
            if !runnable {
                ui.heading("Not runnable yet");
                ui.colored_label(WARN, "This exercise is not runnable yet — there is nothing to run. Read its lesson; exercises 1 and 2 are ready.");
                return;
            }
            let valid = self.saved.settings.get(&id).map(|s| self.exercises[ex_idx].validate(s)).unwrap_or(Ok(()));
            if let Err(e) = &valid {
                ui.add(egui::Label::new(RichText::new(e.to_string()).color(Color32::from_rgb(235, 90, 80))).wrap());
            }
            let this_running = self.job.as_ref().is_some_and(|j| j.exercise == id);
            ui.horizontal(|ui| {
                let can_run = self.job.is_none() && valid.is_ok();
                let run = ui.add_enabled(can_run, egui::Button::new(RichText::new("Run").strong()).min_size(egui::vec2(80.0, 26.0)));
                if run.clicked() {
                    self.start_run();
                }
                if ui.add_enabled(this_running, egui::Button::new("Stop").min_size(egui::vec2(80.0, 26.0))).clicked() {
                    self.stop_run();
                }
                if let Some(other) = self.job.as_ref().filter(|j| j.exercise != id) {
                    ui.small(format!("{} is running", other.exercise));
                }
            });
            if let Some(v) = self.runs.get(&id) {
                ui.add_space(4.0);
                match &v.status {
                    Status::Failed(msg) => {
                        ui.add(egui::Label::new(RichText::new(format!("Failed: {msg}")).color(Color32::from_rgb(235, 90, 80))).wrap());
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
                egui::CollapsingHeader::new(format!("Log ({} lines)", v.logs.len())).id_salt(("log", &id)).default_open(true).show(ui, |ui| {
                    egui::ScrollArea::vertical().id_salt(("log-scroll", &id)).max_height(110.0).stick_to_bottom(true).show(ui, |ui| {
                        for l in &v.logs {
                            ui.add(egui::Label::new(RichText::new(l).monospace().small()).wrap());
                        }
                    });
                });
            }
            ui.add_space(8.0);
            ui.separator();
            ui.horizontal(|ui| {
                ui.heading("Settings");
                if ui.add_enabled(self.job.is_none(), egui::Button::new("Reset to defaults").small()).clicked() {
                    let defaults = self.exercises[ex_idx].settings();
                    self.saved.settings.insert(id.clone(), defaults);
                    self.edits.retain(|k, _| k.0 != id);
                    self.errors.retain(|k, _| k.0 != id);
                }
            });
            self.settings_ui(ui, &id);
            ui.add_space(6.0);
        });
    }

    fn results_panel(&mut self, ui: &mut egui::Ui) {
        let id = self.saved.selected.clone();
        let wide = ui.available_width();
        egui::ScrollArea::vertical().id_salt(("results", &id)).auto_shrink([false, false]).show(ui, |ui| {
            let Some(v) = self.runs.get(&id) else {
                ui.heading("Results");
                ui.label("Press Run to start. Live charts appear here while the exercise runs; the verdict, tables and final charts when it finishes.");
                if self.compare.is_some() {
                    self.compare_ui(ui, None);
                }
                return;
            };
            if let Some(r) = &v.report {
                ui.heading(format!("Results · {}", r.title));
                ui.small(results::provenance_line(r));
                ui.add_space(4.0);
            } else {
                ui.heading("Live");
            }
            if let Status::Failed(msg) = &v.status {
                ui.add(egui::Label::new(RichText::new(format!("The run failed: {msg}")).color(Color32::from_rgb(235, 90, 80))).wrap());
            }
            let chart_h = if wide > 700.0 { 220.0 } else { 180.0 };
            if let Some(r) = v.report.clone() {
                // An Arc: a pointer copy per frame, not the report's tables and series.
                if let Some(sg) = &r.suggestion {
                    let hover = sg.settings.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ");
                    if ui.add_enabled(self.job.is_none(), egui::Button::new(RichText::new(&sg.label).strong())).on_hover_text(format!("Sets {hover}, runs again, and shows this run beside the new one")).clicked() {
                        self.apply_suggestion();
                    }
                    ui.add_space(4.0);
                }
                self.file_bar(ui);
                if self.compare.is_some() {
                    self.compare_ui(ui, Some(&r));
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
                if v.live.is_empty() {
                    ui.label("Waiting for the first measurements…");
                }
                for c in &v.live {
                    charts::show(ui, &ChartView::from_live(c), "live", chart_h);
                    ui.add_space(8.0);
                }
            }
        });
    }

    fn file_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            let busy = self.file_busy.is_some();
            if ui.add_enabled(!busy, egui::Button::new("Export report…")).on_hover_text("Save report.json/.csv/.md (pick a folder name, or a file ending in .json, .csv or .md)").clicked() {
                self.export_dialog();
            }
            if ui.add_enabled(!busy, egui::Button::new("Write to ./gpulab-reports")).on_hover_text("Write all three files into ./gpulab-reports/<exercise>-<time>/ without a dialog").clicked() {
                self.export_default();
            }
            if ui.add_enabled(!busy, egui::Button::new("Open report to compare…")).clicked() {
                self.compare_dialog();
            }
            if self.compare.is_some() && ui.button("Close comparison").clicked() {
                self.compare = None;
            }
        });
        ui.horizontal(|ui| {
            ui.label("or compare with path:");
            let r = ui.add(egui::TextEdit::singleline(&mut self.compare_path).hint_text("…/report.json").desired_width(220.0));
            let go = ui.add_enabled(self.file_busy.is_none() && !self.compare_path.trim().is_empty(), egui::Button::new("Load")).clicked();
            if go || (r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) && !self.compare_path.trim().is_empty()) {
                self.compare_path();
            }
        });
        if let Some(b) = &self.file_busy {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(b);
            });
        }
        match &self.file_status {
            Some(Ok(m)) => {
                ui.add(egui::Label::new(RichText::new(m).small().color(Color32::from_rgb(110, 190, 110))).wrap());
            }
            Some(Err(e)) => {
                ui.add(egui::Label::new(RichText::new(e).small().color(WARN)).wrap());
            }
            None => {}
        }
        ui.add_space(4.0);
    }

    fn compare_ui(&mut self, ui: &mut egui::Ui, current: Option<&Report>) {
        let Some(other) = &self.compare else { return };
        ui.columns(2, |cols| {
            cols[0].label(RichText::new("This run").strong());
            match current {
                Some(r) => results::report(&mut cols[0], r, "cmp-current"),
                None => {
                    cols[0].label("no result yet");
                }
            }
            cols[1].label(RichText::new(format!("Compared: {}", other.title)).strong());
            cols[1].small(results::provenance_line(other));
            results::report(&mut cols[1], other, "cmp-other");
        });
    }

    fn status_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            match self.median_frame_ms() {
                Some(ms) => ui.small(format!("frame {ms:.1} ms (median of last 120, measured)")),
                None => ui.small("frame — ms"),
            };
            ui.separator();
            match &self.hardware.adapters {
                None => {
                    ui.small("GPU adapters: detecting…");
                }
                Some(a) if a.is_empty() => {
                    ui.small(RichText::new("no GPU adapter found — CPU only").color(WARN));
                }
                Some(a) => {
                    let names: Vec<String> = a.iter().map(|a| if a.software { format!("{} (software GPU: runs on your CPU)", a.name) } else { a.name.clone() }).collect();
                    ui.small(format!("GPU: {}", names.join(", ")));
                }
            }
        });
    }
}

/// Writes a report by the chosen path's extension, or all three files into it as a folder.
fn write_report(r: &Report, p: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    let ext = p.extension().and_then(|e| e.to_str()).map(|e| e.to_lowercase());
    let res = match ext.as_deref() {
        Some("json") => crate::report::write_json(r, p).map(|_| vec![p.to_path_buf()]),
        Some("csv") => crate::report::write_csv(r, p).map(|_| vec![p.to_path_buf()]),
        Some("md") => crate::report::write_markdown(r, p).map(|_| vec![p.to_path_buf()]),
        _ => crate::report::write_all(r, p),
    };
    res.map_err(|e| e.to_string())
}

impl eframe::App for GpulabApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let t0 = Instant::now();
        let ctx = ui.ctx().clone();
        self.tick(&ctx);
        self.screenshot_tick(&ctx);
        if ctx.input(|i| i.viewport().close_requested()) {
            self.stop_run();
        }

        let ex_idx = self.exercises.iter().position(|x| x.id() == self.saved.selected).unwrap_or(0);
        let size = ui.available_size();
        let narrow = size.x < 1100.0;

        egui::Panel::top("top").show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.label(RichText::new("gpulab").strong().size(18.0));
                ui.label(RichText::new("— how GPUs accelerate deep learning, measured on your machine").weak());
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    ui.toggle_value(&mut self.saved.show_hardware, "Hardware");
                });
            });
        });
        egui::Panel::bottom("status").show(ui, |ui| self.status_bar(ui));
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
            egui::Panel::right("results").resizable(true).default_size((size.x * 0.42).max(420.0)).size_range(320.0..=size.x * 0.65).show(ui, |ui| self.results_panel(ui));
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

        if self.saved.show_hardware {
            self.hardware.ensure_sampler(&ctx);
            let mut open = true;
            egui::Window::new("Hardware").open(&mut open).default_size([520.0, 560.0]).vscroll(true).show(&ctx, |ui| self.hardware.ui(ui));
            if !open {
                self.saved.show_hardware = false;
            }
        }
        self.record_frame_time(t0.elapsed().as_secs_f32() * 1000.0);
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

fn compared(path: &std::path::Path) -> FileMsg {
    FileMsg::Compared(crate::report::read_json(path).map(Box::new).map_err(|e| e.to_string()))
}
