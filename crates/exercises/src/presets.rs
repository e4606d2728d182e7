//! Named presets: an exercise declares a few named sets of setting values (`Exercise::presets`)
//! that teach something ("big enough for a GPU", "force an out-of-memory"). A preset is the
//! exercise's defaults with its overrides applied, the values written as `--set key=value` takes
//! them; the GUI offers them in a dropdown, the CLI as `gpulab run ID --preset NAME`.
//!
//! A preset never measures anything when it is applied (the GUI applies it on the UI thread):
//! a value that needs a measurement, such as `size=auto`, is resolved by the run
//! (`exercises::sizing`).

use super::Exercise;
use super::settings::Settings;
use gpulab_core::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    /// Shown in the dropdown and typed after `--preset`, e.g. "big enough for a GPU".
    pub name: &'static str,
    /// One line: what the preset shows.
    pub description: &'static str,
    /// Setting key → value text, applied over the defaults in this order.
    pub overrides: Vec<(&'static str, String)>,
}

impl Preset {
    pub fn new(name: &'static str, description: &'static str, overrides: &[(&'static str, &str)]) -> Self {
        Preset { name, description, overrides: overrides.iter().map(|(k, v)| (*k, v.to_string())).collect() }
    }

    /// The overrides as `key=value` pairs (what `Settings::apply` and `--set` take).
    pub fn pairs(&self) -> Vec<String> {
        self.overrides.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// The overrides on one line, e.g. "batch=256, hidden=2048,2048" (for `--show-settings`).
    pub fn summary(&self) -> String {
        if self.overrides.is_empty() {
            "the defaults".into()
        } else {
            self.overrides.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("  ")
        }
    }

    /// `ex`'s defaults with this preset applied; an override the settings refuse is an error
    /// naming the preset and the setting.
    pub fn settings(&self, ex: &(impl Exercise + ?Sized)) -> Result<Settings> {
        let mut s = ex.settings();
        s.apply(&self.pairs()).map_err(|e| Error::InvalidConfig(format!("preset {:?} of {}: {e}", self.name, ex.id())))?;
        Ok(s)
    }
}

/// The preset of `ex` called `name` (exact, or ignoring case); an unknown name is an error that
/// lists the valid ones.
pub fn find(ex: &(impl Exercise + ?Sized), name: &str) -> Result<Preset> {
    let all = ex.presets();
    let wanted = name.trim();
    if let Some(p) = all.iter().find(|p| p.name == wanted).or_else(|| all.iter().find(|p| p.name.eq_ignore_ascii_case(wanted))) {
        return Ok(p.clone());
    }
    let known = if all.is_empty() {
        "it has none".to_string()
    } else {
        format!("valid: {}", all.iter().map(|p| format!("{:?}", p.name)).collect::<Vec<_>>().join(", "))
    };
    Err(Error::InvalidConfig(format!("preset: exercise {} has no preset {wanted:?}; {known}", ex.id())))
}

/// The first preset of `ex` whose settings are exactly `current` (so a preset stays "active"
/// until a setting is edited away from it).
pub fn active(ex: &(impl Exercise + ?Sized), current: &Settings) -> Option<&'static str> {
    ex.presets().into_iter().find(|p| p.settings(ex).is_ok_and(|s| s == *current)).map(|p| p.name)
}
