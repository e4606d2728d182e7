//! Exercises whose labs are not built yet: listed with their lesson, plainly not runnable.

use super::{Exercise, Settings};
use crate::error::{Error, Result};
use crate::report::Report;

pub struct Planned {
    id: &'static str,
    number: u32,
    title: &'static str,
}

pub fn all() -> Vec<Planned> {
    [
        ("distributed", 6, "1 vs N GPUs: data parallelism"),
        ("inference-batching", 8, "Inference batching and dynamic batching"),
    ]
    .into_iter()
    .map(|(id, number, title)| Planned { id, number, title })
    .collect()
}

impl Exercise for Planned {
    fn id(&self) -> &'static str {
        self.id
    }
    fn number(&self) -> u32 {
        self.number
    }
    fn title(&self) -> &'static str {
        self.title
    }
    fn runnable(&self) -> bool {
        false
    }
    fn settings(&self) -> Settings {
        Settings::default()
    }
    fn validate(&self, _settings: &Settings) -> Result<()> {
        Err(self.not_built())
    }
    fn run(&self, _settings: &Settings, _sink: &mut dyn super::Sink) -> Result<Report> {
        Err(self.not_built())
    }
}

impl Planned {
    fn not_built(&self) -> Error {
        Error::NotRunnable { id: format!("{} ({})", self.number, self.id) }
    }
}
