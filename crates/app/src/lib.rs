//! The desktop lab (egui + eframe on wgpu): a thin face over the exercises. No math and no I/O
//! on the UI thread: runs, adapter detection, sampling and file work happen on other threads.
//! The app knows no exercise by name: lessons, settings and live charts come from the registry.
//!
//! `lab` composes the panels, each a struct that owns its state (egui_demo_app's sub-apps) and
//! reads the frame's shared `context::LabView`; a panel that needs another's state queues a
//! `context::Command`, run at the end of the frame (rerun's viewer). The panels: `sidebar` the
//! exercise list with its `progress` marks · `cards` the lesson with its check-yourself cards ·
//! `settings_panel` the settings editor and presets · `runs` Run/Stop, the run's log and the
//! results (live charts, the report) over `job`, a run on a worker thread · `files` export and
//! compare · `hardware` the hardware window and the driver notice · `class_view` the class view
//! (a folder of reports) · `presenter` UI scale, theme toggle and the stage layout ·
//! `screenshot` screenshot mode · `status_bar` · `frame_stats` UI frame times. Drawing helpers
//! without state: `charts`, `results`, `timeline`, `diagram` (system diagrams and the
//! pause/step/speed bar), `theme` (the dark and projector looks), `shortcuts` (the keyboard).

use eframe::egui;
mod cards;
mod charts;
mod class_view;
mod context;
mod diagram;
mod files;
mod frame_stats;
mod hardware;
mod job;
mod lab;
mod presenter;
mod progress;
mod results;
mod runs;
mod screenshot;
mod settings_panel;
mod shortcuts;
mod sidebar;
mod status_bar;
mod theme;
mod timeline;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use job::{RunView, Status};
pub use lab::{GpulabApp, Saved};
pub use presenter::{MAX_SCALE, MIN_SCALE, Presenter};
pub use progress::{KeyFigure, Progress, RunMark};
pub use screenshot::ScreenshotPlan;
pub use theme::Theme;

/// The app id: the name of the installed `.desktop` file (Wayland matches windows to it) and
/// the X11 window class.
pub const APP_ID: &str = "gpulab";
/// The window icon, assets/icon's 256 px rendering of gpulab.svg, embedded.
const ICON_PNG: &[u8] = include_bytes!("../../../assets/icon/hicolor/256x256/apps/gpulab.png");

/// The decoded window icon (None only if the embedded PNG were corrupt; the window opens anyway).
pub fn window_icon() -> Option<egui::IconData> {
    eframe::icon_data::from_png_bytes(ICON_PNG).ok()
}

/// How the binary starts the app.
#[derive(Clone, Debug, Default)]
pub struct AppOptions {
    /// Render the real window for `frames` frames, save a PNG here, and exit.
    pub screenshot: Option<PathBuf>,
    /// The exercise to select at start (id or number).
    pub exercise: Option<String>,
    pub frames: u32,
}

/// Opens the lab window (blocks until it closes).
///
/// In screenshot mode, `GPULAB_SCREENSHOT_SIZE=WxH` sets the window size (default 1280x800),
/// `GPULAB_SCREENSHOT_RUN=1` runs the exercise first and captures `frames` frames after it
/// finishes (a failed run makes this return an error after the PNG is saved), `GPULAB_SCREENSHOT_SET="key=value;key=value"` applies settings before,
/// and `GPULAB_SCREENSHOT_CLASS=DIR` opens the class view on DIR.
/// `GPULAB_SCREENSHOT_THEME`, `GPULAB_SCREENSHOT_SCALE` and `GPULAB_SCREENSHOT_STAGE` set presenter mode (`presenter::from_env`).
pub fn run(opts: AppOptions) -> gpulab_core::Result<()> {
    let result: screenshot::ShotResult = Arc::new(Mutex::new(None));
    let env = match &opts.screenshot {
        Some(_) => screenshot::ShotEnv::read()?,
        None => screenshot::ShotEnv { size: [1280.0, 800.0], autorun: false, sets: Vec::new() },
    };
    let plan = opts.screenshot.clone().map(|p| ScreenshotPlan::new(p, opts.frames, env.autorun, result.clone()));
    let native = eframe::NativeOptions {
        renderer: eframe::Renderer::Wgpu,
        viewport: {
            let v = egui::ViewportBuilder::default()
                .with_title("gpulab")
                .with_app_id(APP_ID)
                .with_inner_size(env.size)
                .with_min_inner_size([720.0, 480.0]);
            match window_icon() {
                Some(icon) => v.with_icon(Arc::new(icon)),
                None => v,
            }
        },
        persist_window: opts.screenshot.is_none(),
        // Screenshot mode reads no saved state: a window size saved by the lab would otherwise
        // win over GPULAB_SCREENSHOT_SIZE (eframe restores it whatever `persist_window` says).
        // The file is never written (nothing is saved in screenshot mode).
        persistence_path: opts
            .screenshot
            .as_ref()
            .map(|_| std::env::temp_dir().join(format!("gpulab-screenshot-{}.ron", std::process::id()))),
        ..Default::default()
    };
    let exercise = opts.exercise.clone();
    let sets = env.sets;
    // Screenshot mode only: open the class view on this folder first.
    let class_dir = opts.screenshot.as_ref().and(std::env::var_os("GPULAB_SCREENSHOT_CLASS")).map(PathBuf::from);
    let presenter = if opts.screenshot.is_some() { Some(presenter::from_env()?) } else { None };
    let mut apply_err: Option<String> = None;
    let err_slot = &mut apply_err;
    let outcome = eframe::run_native(
        "gpulab",
        native,
        Box::new(move |cc| {
            let mut app = GpulabApp::new(cc, exercise.as_deref(), plan);
            if let Some(dir) = &class_dir {
                app.open_class_folder(dir.clone());
            }
            if let Some(p) = presenter {
                app.set_presenter(p);
            }
            for (k, v) in &sets {
                if let Err(e) = app.set_setting(k, v) {
                    *err_slot = Some(format!("{k}={v}: {e}"));
                }
            }
            Ok(Box::new(app))
        }),
    );
    outcome.map_err(|e| gpulab_core::Error::Window(e.to_string()))?;
    if let Some(e) = apply_err {
        return Err(gpulab_core::Error::InvalidConfig(e));
    }
    if opts.screenshot.is_some() {
        return screenshot::outcome(&result);
    }
    Ok(())
}
