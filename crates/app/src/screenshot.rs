//! Screenshot mode: open the real window, optionally run the exercise, capture a frame, save it
//! as PNG and close. Configured from the command line and `GPULAB_SCREENSHOT_*` variables.

use eframe::egui;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::job::Status;
use gpulab_core::error::Error;

/// Where the save thread leaves its outcome for `app::run`.
pub type ShotResult = Arc<Mutex<Option<Result<(), String>>>>;

/// Screenshot mode: render, capture, save, close.
pub struct ScreenshotPlan {
    pub path: PathBuf,
    pub frames: u32,
    /// Run the exercise first and capture `frames` frames after it finishes.
    pub autorun: bool,
    pub result: ShotResult,
    frame: u32,
    after_finish: Option<u32>,
    requested: bool,
}

impl ScreenshotPlan {
    pub fn new(path: PathBuf, frames: u32, autorun: bool, result: ShotResult) -> Self {
        ScreenshotPlan { path, frames: frames.max(1), autorun, result, frame: 0, after_finish: None, requested: false }
    }
}

/// The window size, autorun flag and settings screenshot mode reads from the environment:
/// `GPULAB_SCREENSHOT_SIZE=WxH` (default 1280x800), `GPULAB_SCREENSHOT_RUN=1`,
/// `GPULAB_SCREENSHOT_SET="key=value;key=value"`.
pub struct ShotEnv {
    pub size: [f32; 2],
    pub autorun: bool,
    pub sets: Vec<(String, String)>,
}

impl ShotEnv {
    pub fn read() -> Result<Self, Error> {
        let mut size = [1280.0f32, 800.0];
        if let Ok(s) = std::env::var("GPULAB_SCREENSHOT_SIZE") {
            let parsed = s.split_once('x').and_then(|(w, h)| Some([w.trim().parse::<f32>().ok()?, h.trim().parse::<f32>().ok()?]));
            size = parsed
                .filter(|[w, h]| *w >= 1.0 && *h >= 1.0)
                .ok_or_else(|| Error::Screenshot(format!("GPULAB_SCREENSHOT_SIZE={s:?} is not WIDTHxHEIGHT, e.g. 1280x800")))?;
        }
        let autorun = std::env::var("GPULAB_SCREENSHOT_RUN").is_ok_and(|v| v == "1");
        let mut sets = Vec::new();
        for kv in std::env::var("GPULAB_SCREENSHOT_SET").unwrap_or_default().split(';').filter(|p| !p.trim().is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| Error::Screenshot(format!("GPULAB_SCREENSHOT_SET: {kv:?} is not key=value")))?;
            sets.push((k.trim().to_string(), v.to_string()));
        }
        Ok(ShotEnv { size, autorun, sets })
    }
}

/// What the save thread reported, as the binary's result.
pub fn outcome(result: &ShotResult) -> gpulab_core::Result<()> {
    let r = result.lock().map_err(|_| Error::Internal("the screenshot result lock was poisoned".into()))?.clone();
    match r {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(Error::Screenshot(e)),
        None => Err(Error::Screenshot("the window closed before the screenshot was taken".into())),
    }
}

/// What the lab tells screenshot mode each frame.
pub(crate) struct ShotState {
    /// Whether a run is in flight.
    pub running: bool,
    /// `FrameStats::summary`.
    pub frames: Option<String>,
    /// The driver notice on screen, as one line.
    pub notice: Option<String>,
    /// How the selected exercise's latest run stands.
    pub run_end: Option<Status>,
}

impl ScreenshotPlan {
    /// Called every frame: once enough frames have been drawn (after the run, with autorun) asks
    /// egui for the screenshot. Returns true on the frame the autorun should start.
    pub(crate) fn tick(&mut self, ctx: &egui::Context, state: ShotState) -> bool {
        let start_run = self.autorun && self.frame == 1;
        self.frame += 1;
        ctx.request_repaint();
        if self.requested {
            return start_run;
        }
        let ready = if self.autorun {
            if state.running || start_run || self.frame < 3 {
                false
            } else {
                let since = self.after_finish.get_or_insert(self.frame);
                self.frame >= *since + self.frames
            }
        } else {
            self.frame >= self.frames
        };
        if !ready {
            return start_run;
        }
        self.requested = true;
        // What the log (and CI) learns besides the picture: the driver notice on screen and how
        // an autorun ended — a failed run makes screenshot mode fail after saving the PNG.
        if let Some(line) = state.frames {
            eprintln!("screenshot: {line}");
        }
        if let Some(n) = state.notice {
            eprintln!("screenshot: driver notice shown: {n}");
        }
        let failed = match state.run_end.filter(|_| self.autorun) {
            Some(Status::Failed(m)) => Some(m),
            Some(s) => {
                eprintln!("screenshot: the run ended: {s:?}");
                None
            }
            None => None,
        };
        let path = self.path.clone();
        let result = self.result.clone();
        let ctx2 = ctx.clone();
        ctx.request_screenshot(move |image| {
            // Encode and write off the UI thread, then close the window.
            std::thread::spawn(move || {
                let r = write_png(&path, &image).and_then(|()| match failed {
                    Some(m) => Err(format!("saved {}, but the run failed: {m}", path.display())),
                    None => Ok(()),
                });
                if let Ok(mut g) = result.lock() {
                    *g = Some(r);
                }
                ctx2.send_viewport_cmd(egui::ViewportCommand::Close);
                ctx2.request_repaint();
            });
        });
        start_run
    }
}

/// Saves an RGBA screenshot as PNG, durably (`fsutil::write_file_atomic`: a crash leaves the
/// old file or the new one, never half a PNG).
pub(crate) fn write_png(path: &Path, image: &egui::ColorImage) -> Result<(), String> {
    let [w, h] = image.size;
    let mut png_bytes = Vec::new();
    let mut enc = png::Encoder::new(&mut png_bytes, w as u32, h as u32);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| format!("{}: {e}", path.display()))?;
    let data: Vec<u8> = image.pixels.iter().flat_map(|p| p.to_array()).collect();
    writer.write_image_data(&data).map_err(|e| format!("{}: {e}", path.display()))?;
    writer.finish().map_err(|e| format!("{}: {e}", path.display()))?;
    gpulab_core::fsutil::write_file_atomic(path, &png_bytes).map(drop).map_err(|(p, e)| format!("{}: {e}", p.display()))
}
