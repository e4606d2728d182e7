//! The desktop lab (egui). Placeholder until the app lands: the CLI calls `run`.

use std::path::PathBuf;

/// How the binary starts the app.
#[derive(Clone, Debug, Default)]
pub struct AppOptions {
    /// Render the real window for `frames` frames, save a PNG here, and exit.
    pub screenshot: Option<PathBuf>,
    /// The exercise to select at start (id or number).
    pub exercise: Option<String>,
    pub frames: u32,
}

pub fn run(_opts: AppOptions) -> crate::Result<()> {
    Err(crate::Error::InvalidConfig("the desktop lab is not built yet; use `gpulab run ID`".into()))
}
