//! The desktop lab (egui + eframe on wgpu): a thin face over the exercises. No math and no I/O
//! on the UI thread: runs, adapter detection, sampling and file work happen on other threads.

use eframe::egui;
mod charts;
mod hardware;
mod job;
mod lab;
mod results;
mod timeline;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use job::{RunView, Status};
pub use lab::{GpulabApp, Saved, ScreenshotPlan};

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
/// finishes, and `GPULAB_SCREENSHOT_SET="key=value;key=value"` applies settings before.
pub fn run(opts: AppOptions) -> crate::Result<()> {
    let result: Arc<Mutex<Option<Result<(), String>>>> = Arc::new(Mutex::new(None));
    let mut size = [1280.0f32, 800.0];
    let mut autorun = false;
    let mut sets: Vec<String> = Vec::new();
    if opts.screenshot.is_some() {
        if let Ok(s) = std::env::var("GPULAB_SCREENSHOT_SIZE")
            && let Some((w, h)) = s.split_once('x')
            && let (Ok(w), Ok(h)) = (w.trim().parse::<f32>(), h.trim().parse::<f32>())
        {
            size = [w, h];
        }
        autorun = std::env::var("GPULAB_SCREENSHOT_RUN").is_ok_and(|v| v == "1");
        sets = std::env::var("GPULAB_SCREENSHOT_SET").map(|s| s.split(';').filter(|p| !p.trim().is_empty()).map(String::from).collect()).unwrap_or_default();
    }
    let plan = opts.screenshot.clone().map(|p| ScreenshotPlan::new(p, opts.frames, autorun, result.clone()));
    let native = eframe::NativeOptions {
        renderer: eframe::Renderer::Wgpu,
        viewport: egui::ViewportBuilder::default().with_title("gpulab").with_inner_size(size).with_min_inner_size([720.0, 480.0]),
        persist_window: opts.screenshot.is_none(),
        ..Default::default()
    };
    let exercise = opts.exercise.clone();
    let mut apply_err: Option<String> = None;
    let err_slot = &mut apply_err;
    let outcome = eframe::run_native(
        "gpulab",
        native,
        Box::new(move |cc| {
            let mut app = GpulabApp::new(cc, exercise.as_deref(), plan);
            for kv in &sets {
                if let Some((k, v)) = kv.split_once('=')
                    && let Err(e) = app.set_setting(k.trim(), v)
                {
                    *err_slot = Some(e.to_string());
                }
            }
            Ok(Box::new(app))
        }),
    );
    outcome.map_err(|e| crate::Error::Window(e.to_string()))?;
    if let Some(e) = apply_err {
        return Err(crate::Error::InvalidConfig(e));
    }
    if opts.screenshot.is_some() {
        let r = result.lock().map(|g| g.clone()).unwrap_or(None);
        return match r {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(crate::Error::Gpu(format!("screenshot failed: {e}"))),
            None => Err(crate::Error::Gpu("the window closed before the screenshot was taken".into())),
        };
    }
    Ok(())
}

/// Saves an RGBA screenshot as PNG.
pub(crate) fn write_png(path: &Path, image: &egui::ColorImage) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let [w, h] = image.size;
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w as u32, h as u32);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| e.to_string())?;
    let data: Vec<u8> = image.pixels.iter().flat_map(|p| p.to_array()).collect();
    writer.write_image_data(&data).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())
}
