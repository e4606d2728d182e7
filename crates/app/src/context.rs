//! What every panel may read in a frame (`LabView`, rerun's viewer context) and what a panel may
//! ask of the others (`Command`). A panel changes only its own state; anything that reaches
//! another panel's is a command, queued while the frame is drawn and run by the lab at its end.

use gpulab_core::device::gpu::adapters::AdapterSummary;
use gpulab_exercises::Exercise;

/// The lab's shared, read-only state for one frame.
pub(crate) struct LabView<'a> {
    /// The registry, in the chapter's order.
    pub exercises: &'a [Box<dyn Exercise>],
    /// The selected exercise's id.
    pub selected: &'a str,
    /// The exercise whose run is in flight, if any.
    pub running: Option<String>,
    /// The wgpu adapters, once detected.
    pub adapters: Option<&'a [AdapterSummary]>,
    /// What the selected exercise's last run trained where `size=auto` chose it: (hidden
    /// widths, epochs), which replace the settings' own.
    pub trained: Option<(String, String)>,
}

impl LabView<'_> {
    pub fn exercise(&self, id: &str) -> Option<&dyn Exercise> {
        self.exercises.iter().find(|e| e.id() == id).map(|e| e.as_ref())
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

/// A request from a panel (or the keyboard) that touches another panel's state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Command {
    /// Select the exercise with this id.
    Select(String),
    /// Select the exercise `n` places away in the list, wrapping around.
    SelectRelative(isize),
    /// Run the selected exercise with its settings (when nothing runs).
    StartRun,
    /// Ask the run in flight to stop; what ran so far is reported.
    StopRun,
    /// The report's one-click next step: set its settings, keep this report for comparison, run.
    ApplySuggestion,
    /// Write the selected exercise's report into the reports folder (Ctrl+E).
    ExportReport,
    /// One step of the UI scale: +1, −1, or 0 for 100 %.
    StepScale(i32),
    ToggleStage,
    /// A line for the results panel's status (what file work and one-click actions report).
    Status(Result<String, String>),
}
