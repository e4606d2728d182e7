//! File work behind the results panel: export a report (dialog or ./gpulab-reports), load a
//! report.json to compare beside the current one. Dialogs, reads and writes run on their own
//! thread and post a `FileMsg` back, so the UI thread never waits on the disk or a dialog.

use eframe::egui;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};

use egui::RichText;

use super::results;
use gpulab_systems::report::Report;

/// A background file task's outcome.
enum FileMsg {
    Exported(Result<Vec<PathBuf>, String>),
    Compared(Result<Box<Report>, String>),
    NoDialog(&'static str),
}

/// File work's state: the task in flight, the last outcome, the report loaded for comparison,
/// and where "Write to ./gpulab-reports" writes.
pub(crate) struct Files {
    tx: Sender<FileMsg>,
    rx: Receiver<FileMsg>,
    busy: Option<String>,
    status: Option<Result<String, String>>,
    compare: Option<Report>,
    /// The path typed beside "Load".
    compare_path: String,
    /// Where "Write to ./gpulab-reports" and Ctrl+E write (a folder per export inside).
    pub export_root: PathBuf,
    /// Wakes the UI when a task ends.
    ctx: egui::Context,
}

impl Files {
    pub fn new(ctx: &egui::Context) -> Self {
        let (tx, rx) = mpsc::channel();
        Files {
            tx,
            rx,
            busy: None,
            status: None,
            compare: None,
            compare_path: String::new(),
            export_root: "gpulab-reports".into(),
            ctx: ctx.clone(),
        }
    }

    pub fn busy(&self) -> bool {
        self.busy.is_some()
    }

    /// The status line under the file buttons (None clears it).
    pub fn set_status(&mut self, status: Option<Result<String, String>>) {
        self.status = status;
    }

    /// The report loaded for comparison, once it has arrived.
    pub fn compared(&self) -> Option<&Report> {
        self.compare.as_ref()
    }

    /// Keeps `r` beside the next result (the one-click suggestion's "measure again").
    /// Drops the comparison (another exercise was selected: a report of this one beside it
    /// would compare unlike runs).
    pub fn close_comparison(&mut self) {
        self.compare = None;
    }

    pub fn compare_to(&mut self, r: Report) {
        self.compare = Some(r);
    }

    /// Takes finished file tasks' outcomes into the status line (each frame).
    pub fn poll(&mut self) {
        while let Ok(m) = self.rx.try_recv() {
            self.busy = None;
            match m {
                FileMsg::Exported(Ok(paths)) => {
                    let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                    self.status = Some(Ok(format!("wrote {}", list.join(", "))));
                }
                FileMsg::Exported(Err(e)) | FileMsg::Compared(Err(e)) => self.status = Some(Err(e)),
                FileMsg::Compared(Ok(r)) => {
                    self.status = Some(Ok(format!("loaded {} for comparison", r.title)));
                    self.compare = Some(*r);
                }
                FileMsg::NoDialog(what) => {
                    self.status = Some(Err(format!(
                        "No file dialog opened for {what} (this desktop has no file-dialog portal, or it was cancelled). Use “Write to ./gpulab-reports” or type a path."
                    )))
                }
            }
        }
    }

    /// Runs file work (dialogs, reading, writing) on its own thread and posts the outcome back,
    /// so the UI thread never waits on the disk or a dialog.
    fn job(&mut self, busy: &str, work: impl FnOnce() -> FileMsg + Send + 'static) {
        let tx = self.tx.clone();
        let ctx = self.ctx.clone();
        self.busy = Some(busy.into());
        std::thread::spawn(move || {
            let _ = tx.send(work());
            ctx.request_repaint();
        });
    }

    fn export_dialog(&mut self, r: &Report) {
        let r = r.clone();
        self.job("waiting for the save dialog…", move || {
            match rfd::FileDialog::new().set_title("Export report").set_file_name(format!("{}-report", r.exercise)).save_file() {
                None => FileMsg::NoDialog("export"),
                Some(p) => FileMsg::Exported(write_report(&r, &p)),
            }
        });
    }

    /// "Write to ./gpulab-reports" (and Ctrl+E): all files into a new folder under `export_root`.
    pub fn export_default(&mut self, r: &Report) {
        let r = r.clone();
        let root = self.export_root.clone();
        self.job("writing…", move || {
            let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
            let dir = root.join(format!("{}-{stamp}", r.exercise));
            let res = gpulab_systems::report::write_all(&r, &dir)
                .map_err(|e| e.to_string())
                .map(|v| v.into_iter().map(|p| std::fs::canonicalize(&p).unwrap_or(p)).collect());
            FileMsg::Exported(res)
        });
    }

    fn compare_dialog(&mut self) {
        self.job("waiting for the open dialog…", || {
            match rfd::FileDialog::new().set_title("Open report.json to compare").add_filter("gpulab report", &["json"]).pick_file() {
                None => FileMsg::NoDialog("opening a report"),
                Some(p) => compared(&p),
            }
        });
    }

    /// Loads a report.json to show beside the current result (what the path box's Load does).
    pub fn compare_with(&mut self, path: &str) {
        self.compare_path = path.to_string();
        self.load_compare_path();
    }

    fn load_compare_path(&mut self) {
        let path = PathBuf::from(self.compare_path.trim());
        self.job("reading…", move || {
            let p = if path.is_dir() { path.join("report.json") } else { path };
            compared(&p)
        });
    }

    /// The buttons under a finished run's report `r`, the path box, and the status line.
    pub fn bar_ui(&mut self, ui: &mut egui::Ui, r: &Report) {
        ui.horizontal_wrapped(|ui| {
            let busy = self.busy.is_some();
            if ui
                .add_enabled(!busy, egui::Button::new("Export report…"))
                .on_hover_text("Save report.json/.csv/.md (pick a folder name, or a file ending in .json, .csv or .md)")
                .clicked()
            {
                self.export_dialog(r);
            }
            let tip = super::shortcuts::tip(
                ui.ctx(),
                "Write all three files into ./gpulab-reports/<exercise>-<time>/ without a dialog",
                &super::shortcuts::EXPORT,
            );
            if ui.add_enabled(!busy, egui::Button::new("Write to ./gpulab-reports")).on_hover_text(tip).clicked() {
                self.export_default(r);
            }
            if ui.add_enabled(!busy, egui::Button::new("Open report to compare…")).clicked() {
                self.compare_dialog();
            }
            if self.compare.is_some() && ui.button("Close comparison").clicked() {
                self.compare = None;
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("or compare with path:").id;
            let resp = ui
                .add(egui::TextEdit::singleline(&mut self.compare_path).hint_text("…/report.json").desired_width(220.0))
                .labelled_by(label);
            let go = ui.add_enabled(self.busy.is_none() && !self.compare_path.trim().is_empty(), egui::Button::new("Load")).clicked();
            if go || (resp.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) && !self.compare_path.trim().is_empty()) {
                self.load_compare_path();
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
                ui.add(egui::Label::new(RichText::new(m).small().color(super::theme::good(ui.visuals()))).wrap());
            }
            Some(Err(e)) => {
                ui.add(egui::Label::new(RichText::new(e).small().color(ui.visuals().warn_fg_color)).wrap());
            }
            None => {}
        }
        ui.add_space(4.0);
    }

    /// This run's report (`current`, None before one) beside the loaded one.
    pub fn compare_ui(&self, ui: &mut egui::Ui, current: Option<&Report>) {
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
}

/// Writes a report by the chosen path's extension, or all four files into it as a folder.
fn write_report(r: &Report, p: &Path) -> Result<Vec<PathBuf>, String> {
    let ext = p.extension().and_then(|e| e.to_str()).map(|e| e.to_lowercase());
    let res = match ext.as_deref() {
        Some("json") => gpulab_systems::report::write_json(r, p).map(|_| vec![p.to_path_buf()]),
        Some("csv") => gpulab_systems::report::write_csv(r, p).map(|_| vec![p.to_path_buf()]),
        Some("md") => gpulab_systems::report::write_markdown(r, p).map(|_| vec![p.to_path_buf()]),
        Some("html" | "htm") => gpulab_systems::report::write_html(r, p).map(|_| vec![p.to_path_buf()]),
        _ => gpulab_systems::report::write_all(r, p),
    };
    res.map_err(|e| e.to_string())
}

fn compared(path: &Path) -> FileMsg {
    FileMsg::Compared(gpulab_systems::report::read_json(path).map(Box::new).map_err(|e| e.to_string()))
}
