//! The class view window: "Open a folder of reports…" reads a folder tree of students'
//! report.json files (`gpulab_class`) and shows, per exercise, the class table and a bar chart
//! of the key figure per machine, then the files skipped with the reason; it exports the class
//! as CSV or HTML. Dialogs, reading and writing run on their own thread, like `files`.

use eframe::egui;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

use egui::{Color32, RichText};

use super::charts::{self, ChartView};
use super::results::{self, WARN};
use gpulab_class::Class;

/// A background task's outcome.
enum ClassMsg {
    Loaded(Result<Box<Class>, String>),
    Exported(Result<Vec<PathBuf>, String>),
    NoDialog(&'static str),
}

/// The window's state.
pub(crate) struct ClassView {
    open: bool,
    class: Option<Class>,
    busy: Option<String>,
    status: Option<Result<String, String>>,
    /// A folder typed in (for desktops without a dialog portal).
    path: String,
    tx: Sender<ClassMsg>,
    rx: Receiver<ClassMsg>,
    /// Wakes the UI when a task ends.
    ctx: egui::Context,
}

fn load(dir: PathBuf) -> ClassMsg {
    ClassMsg::Loaded(gpulab_class::read(&dir).map(Box::new).map_err(|e| e.to_string()))
}

impl ClassView {
    pub fn new(ctx: &egui::Context) -> Self {
        let (tx, rx) = mpsc::channel();
        ClassView { open: false, class: None, busy: None, status: None, path: String::new(), tx, rx, ctx: ctx.clone() }
    }

    /// Opens the class view on `dir` without a dialog; the folder is read off the UI thread.
    pub fn open_folder(&mut self, dir: impl Into<PathBuf>) {
        let dir = dir.into();
        self.path = dir.display().to_string();
        self.open = true;
        self.job("reading the reports…", move || load(dir));
    }

    /// The class read from the folder, once it has arrived.
    pub fn class(&self) -> Option<&Class> {
        self.class.as_ref()
    }

    /// Whether a class read or export is still running.
    pub fn busy(&self) -> bool {
        self.busy.is_some()
    }

    /// Writes class.csv and class.html into `dir` without a dialog (off the UI thread).
    pub fn export_to(&mut self, dir: impl Into<PathBuf>) {
        let Some(c) = self.class.clone() else { return };
        let dir = dir.into();
        self.job("writing…", move || ClassMsg::Exported(gpulab_class::write_all(&c, &dir).map_err(|e| e.to_string())));
    }

    fn job(&mut self, busy: &str, work: impl FnOnce() -> ClassMsg + Send + 'static) {
        let tx = self.tx.clone();
        let ctx = self.ctx.clone();
        self.busy = Some(busy.into());
        std::thread::spawn(move || {
            let _ = tx.send(work());
            ctx.request_repaint();
        });
    }

    fn poll(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            self.busy = None;
            match m {
                ClassMsg::Loaded(Ok(c)) => {
                    self.status = None;
                    self.class = Some(*c);
                }
                ClassMsg::Exported(Ok(paths)) => {
                    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    self.status = Some(Ok(format!("wrote {}", list.join(", "))));
                }
                ClassMsg::Loaded(Err(e)) | ClassMsg::Exported(Err(e)) => self.status = Some(Err(e)),
                ClassMsg::NoDialog(what) => {
                    self.status = Some(Err(format!(
                        "No dialog opened for {what} (no file-dialog portal, or cancelled). Type a folder path, or use “Write both to ./gpulab-reports”."
                    )))
                }
            }
        }
    }

    fn folder_dialog(&mut self) {
        self.open = true;
        self.job("waiting for the folder dialog…", || match rfd::FileDialog::new().set_title("Open a folder of reports").pick_folder() {
            None => ClassMsg::NoDialog("opening a folder"),
            Some(d) => load(d),
        });
    }

    fn export_dialog(&mut self, name: &'static str) {
        let Some(c) = self.class.clone() else { return };
        self.job("waiting for the save dialog…", move || {
            match rfd::FileDialog::new().set_title("Export the class view").set_file_name(name).save_file() {
                None => ClassMsg::NoDialog("exporting"),
                Some(p) => {
                    let res = if name.ends_with(".csv") { gpulab_class::write_csv(&c, &p) } else { gpulab_class::write_html(&c, &p) };
                    ClassMsg::Exported(res.map(|p| vec![p]).map_err(|e| e.to_string()))
                }
            }
        });
    }

    /// The toolbar button.
    pub fn button_ui(&mut self, ui: &mut egui::Ui) {
        if ui
            .add_enabled(self.busy.is_none(), egui::Button::new("Open a folder of reports…"))
            .on_hover_text("A class view: every report.json below a folder, a table and chart per exercise")
            .clicked()
        {
            self.folder_dialog();
        }
    }

    /// The window, when open (each frame; also takes finished tasks' outcomes).
    pub fn window(&mut self, ctx: &egui::Context) {
        self.poll();
        if !self.open {
            return;
        }
        let mut open = true;
        egui::Window::new("Class view").open(&mut open).default_size([1100.0, 900.0]).vscroll(true).show(ctx, |ui| self.ui(ui));
        self.open = open;
    }

    fn ui(&mut self, ui: &mut egui::Ui) {
        let busy = self.busy.is_some();
        ui.horizontal_wrapped(|ui| {
            if ui.add_enabled(!busy, egui::Button::new("Open a folder…")).clicked() {
                self.folder_dialog();
            }
            ui.label("or folder:");
            ui.add(egui::TextEdit::singleline(&mut self.path).hint_text("…/class-reports").desired_width(260.0));
            if ui.add_enabled(!busy && !self.path.trim().is_empty(), egui::Button::new("Open")).clicked() {
                let p = PathBuf::from(self.path.trim());
                self.open_folder(p);
            }
            let has = self.class.is_some() && !busy;
            if ui.add_enabled(has, egui::Button::new("Export CSV…")).on_hover_text("class.csv: one long table, a row per report").clicked()
            {
                self.export_dialog("class.csv");
            }
            if ui
                .add_enabled(has, egui::Button::new("Export HTML…"))
                .on_hover_text("class.html: tables and bar charts in one self-contained page")
                .clicked()
            {
                self.export_dialog("class.html");
            }
            if ui.add_enabled(has, egui::Button::new("Write both to ./gpulab-reports")).clicked() {
                let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
                self.export_to(PathBuf::from("gpulab-reports").join(format!("class-{stamp}")));
            }
        });
        if let Some(b) = &self.busy {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(b);
            });
        }
        match &self.status {
            Some(Ok(m)) => {
                ui.add(egui::Label::new(RichText::new(m).small().color(Color32::from_rgb(110, 190, 110))).wrap());
            }
            Some(Err(e)) => {
                ui.add(egui::Label::new(RichText::new(e).small().color(WARN)).wrap());
            }
            None => {}
        }
        let Some(c) = &self.class else { return };
        ui.separator();
        ui.label(RichText::new(c.summary()).strong());
        for g in &c.groups {
            ui.add_space(8.0);
            let n = g.rows.len();
            ui.heading(format!("Exercise {} · {} — {n} report{}", g.number, g.title, if n == 1 { "" } else { "s" }));
            if let Some(chart) = g.chart() {
                charts::show(ui, &ChartView::from_report(&chart), "class", 150.0);
            }
            let mut t = g.table();
            t.title = "A row per report".into();
            results::table(ui, &t, &format!("class-{}", g.id));
        }
        if !c.skipped.is_empty() {
            ui.add_space(8.0);
            ui.heading("Skipped files");
            egui::Grid::new("class-skipped").striped(true).spacing([14.0, 4.0]).show(ui, |ui| {
                for s in &c.skipped {
                    ui.label(&s.file);
                    ui.add(egui::Label::new(RichText::new(&s.reason).color(WARN)).wrap());
                    ui.end_row();
                }
            });
        }
    }
}
