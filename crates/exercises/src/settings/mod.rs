//! Exercise settings: an ordered list of typed, bounded values with labels and help text. The
//! GUI draws a widget per setting, the CLI parses `--set key=value` into it, persistence stores
//! it, and each exercise turns it into its own typed config with cross-field validation.

//!
//! Values are read by key only here: each exercise's config (`settings::<exercise>`) reads its
//! settings once, and the run and the report take that typed config (a test greps the sources).

pub mod batch_sweep;
pub mod checkpointing;
pub mod cpu_vs_gpu;
pub mod distributed;
pub mod inference;
pub mod input_pipeline;
pub mod platform;
pub mod precision;
pub mod profiling;
pub mod quantization;
pub mod shared;
pub mod training;

use serde::{Deserialize, Serialize};

use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};

/// The most values a list setting takes (`Value::List`): a sweep's points or a model's hidden
/// layers. Every lab's lists hold a handful.
pub const MAX_LIST_ITEMS: usize = 64;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Int {
        value: i64,
        min: i64,
        max: i64,
    },
    Float {
        value: f64,
        min: f64,
        max: f64,
    },
    Bool(bool),
    Choice {
        value: String,
        options: Vec<String>,
    },
    /// A comma-separated list of positive integers (batch sizes, layer widths, matrix sizes).
    List {
        value: Vec<u64>,
        min: u64,
        max: u64,
    },
    /// Compute backends (`cpu`, `gpu`, `gpu:N`, `gpu:NAME`, `cuda:N`), comma-separated.
    Devices(Vec<String>),
    Text(String),
}

impl Value {
    pub fn to_text(&self) -> String {
        match self {
            Value::Int { value, .. } => value.to_string(),
            Value::Float { value, .. } => value.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Choice { value, .. } => value.clone(),
            Value::List { value, .. } => value.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
            Value::Devices(d) => d.join(","),
            Value::Text(t) => t.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub key: String,
    pub label: String,
    pub help: String,
    pub value: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings(pub Vec<Setting>);

fn invalid(key: &str, msg: String) -> Error {
    Error::InvalidConfig(format!("{key}: {msg}"))
}

impl Settings {
    pub fn add(mut self, key: &str, label: &str, help: &str, value: Value) -> Self {
        self.0.push(Setting { key: key.into(), label: label.into(), help: help.into(), value });
        self
    }

    /// The setting `key` as declared (its label, help and value), for the forms that list them.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.0.iter().find(|s| s.key == key)
    }

    /// True when the exercise declares the setting `key`.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn value(&self, key: &str) -> Result<&Value> {
        self.get(key).map(|s| &s.value).ok_or_else(|| invalid(key, "no such setting".into()))
    }

    /// Parses `text` into the setting's type and checks its bounds; leaves it unchanged on error.
    pub fn set(&mut self, key: &str, text: &str) -> Result<()> {
        let known = self.0.iter().map(|s| s.key.as_str()).collect::<Vec<_>>().join(", ");
        let s = self.0.iter_mut().find(|s| s.key == key).ok_or_else(|| invalid(key, format!("unknown setting; known: {known}")))?;
        let text = text.trim();
        let new = match &s.value {
            Value::Int { min, max, .. } => {
                let v: i64 = text.parse().map_err(|_| invalid(key, format!("{text:?} is not a whole number")))?;
                if v < *min || v > *max {
                    return Err(invalid(key, format!("{v} is outside {min}..={max}")));
                }
                Value::Int { value: v, min: *min, max: *max }
            }
            Value::Float { min, max, .. } => {
                let v: f64 = text.parse().map_err(|_| invalid(key, format!("{text:?} is not a number")))?;
                if !v.is_finite() || v < *min || v > *max {
                    return Err(invalid(key, format!("{v} is outside {min}..={max}")));
                }
                Value::Float { value: v, min: *min, max: *max }
            }
            Value::Bool(_) => Value::Bool(match text {
                "true" | "yes" | "on" | "1" => true,
                "false" | "no" | "off" | "0" => false,
                _ => return Err(invalid(key, format!("{text:?} is not true or false"))),
            }),
            Value::Choice { options, .. } => {
                if !options.iter().any(|o| o == text) {
                    return Err(invalid(key, format!("{text:?} is not one of {}", options.join(", "))));
                }
                Value::Choice { value: text.into(), options: options.clone() }
            }
            Value::List { min, max, .. } => {
                let count = text.split(',').map(str::trim).filter(|p| !p.is_empty()).count();
                if count > MAX_LIST_ITEMS {
                    return Err(invalid(
                        key,
                        format!(
                            "{count} values; at most {MAX_LIST_ITEMS}: each value is a run of a sweep or a layer of the \
                             model, and a longer list would run for hours or build a model no machine holds"
                        ),
                    ));
                }
                let mut v = Vec::new();
                for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let n: u64 = part.parse().map_err(|_| invalid(key, format!("{part:?} is not a positive whole number")))?;
                    if n < *min || n > *max {
                        return Err(invalid(key, format!("{n} is outside {min}..={max}")));
                    }
                    v.push(n);
                }
                if v.is_empty() {
                    return Err(invalid(key, "the list is empty".into()));
                }
                Value::List { value: v, min: *min, max: *max }
            }
            Value::Devices(_) => {
                let v: Vec<String> = text.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect();
                for d in &v {
                    d.parse::<gpulab_core::device::Device>().map_err(|e| invalid(key, e.to_string()))?;
                }
                if v.is_empty() {
                    return Err(invalid(key, "choose at least one backend".into()));
                }
                Value::Devices(v)
            }
            Value::Text(_) => Value::Text(text.into()),
        };
        s.value = new;
        Ok(())
    }

    /// Applies `key=value` pairs (e.g. from `--set`), all or nothing.
    pub fn apply(&mut self, pairs: &[String]) -> Result<()> {
        let mut next = self.clone();
        for p in pairs {
            let (k, v) = p.split_once('=').ok_or_else(|| Error::InvalidConfig(format!("--set {p:?}: expected key=value")))?;
            next.set(k.trim(), v)?;
        }
        *self = next;
        Ok(())
    }

    pub(in crate::settings) fn int(&self, key: &str) -> Result<i64> {
        match self.value(key)? {
            Value::Int { value, .. } => Ok(*value),
            _ => Err(invalid(key, "not a whole-number setting".into())),
        }
    }
    pub(in crate::settings) fn float(&self, key: &str) -> Result<f64> {
        match self.value(key)? {
            Value::Float { value, .. } => Ok(*value),
            _ => Err(invalid(key, "not a number setting".into())),
        }
    }
    pub(in crate::settings) fn bool(&self, key: &str) -> Result<bool> {
        match self.value(key)? {
            Value::Bool(b) => Ok(*b),
            _ => Err(invalid(key, "not a yes/no setting".into())),
        }
    }
    pub(in crate::settings) fn choice(&self, key: &str) -> Result<String> {
        match self.value(key)? {
            Value::Choice { value, .. } => Ok(value.clone()),
            _ => Err(invalid(key, "not a choice setting".into())),
        }
    }
    pub(in crate::settings) fn list(&self, key: &str) -> Result<Vec<u64>> {
        match self.value(key)? {
            Value::List { value, .. } => Ok(value.clone()),
            _ => Err(invalid(key, "not a list setting".into())),
        }
    }
    pub(in crate::settings) fn devices(&self, key: &str) -> Result<Vec<gpulab_core::device::Device>> {
        match self.value(key)? {
            Value::Devices(d) => d.iter().map(|s| s.parse()).collect(),
            _ => Err(invalid(key, "not a backend setting".into())),
        }
    }
    /// A backend setting as set, named by its key.
    pub(in crate::settings) fn backends(&self, key: &'static str) -> Result<Backends> {
        Ok(Backends { key, devices: self.devices(key)? })
    }
    /// The one backend of a single-backend exercise (`Backends::one`).
    pub(in crate::settings) fn one_device(&self, key: &'static str) -> Result<Device> {
        self.backends(key)?.one()
    }
    pub(in crate::settings) fn text(&self, key: &str) -> Result<String> {
        match self.value(key)? {
            Value::Text(t) => Ok(t.clone()),
            v => Ok(v.to_text()),
        }
    }

    /// key → value text, for reports.
    pub fn to_map(&self) -> std::collections::BTreeMap<String, String> {
        self.0.iter().map(|s| (s.key.clone(), s.value.to_text())).collect()
    }
}

/// The backends a backend setting names.
#[derive(Clone, Debug, PartialEq)]
pub struct Backends {
    pub key: &'static str,
    pub devices: Vec<Device>,
}

impl Backends {
    /// The one backend of a single-backend exercise; any other count is a named refusal, the
    /// same words in every exercise.
    pub fn one(&self) -> Result<Device> {
        match self.devices.as_slice() {
            [d] => Ok(d.clone()),
            d => Err(invalid(self.key, format!("choose exactly one backend, not {}", d.len()))),
        }
    }
}

/// Shorthands for building settings.
pub fn int(value: i64, min: i64, max: i64) -> Value {
    Value::Int { value, min, max }
}
pub fn float(value: f64, min: f64, max: f64) -> Value {
    Value::Float { value, min, max }
}
pub fn list(value: &[u64], min: u64, max: u64) -> Value {
    Value::List { value: value.to_vec(), min, max }
}
pub fn choice(value: &str, options: &[&str]) -> Value {
    Value::Choice { value: value.into(), options: options.iter().map(|s| s.to_string()).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `.rs` file under `dir`.
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Settings are read by key only in this module: each exercise's config reads them once
    /// and the run and the report take the config. The typed readers are private to this
    /// module; this also catches a `get("key")` (or a reader made public again) elsewhere.
    #[test]
    fn no_setting_is_read_by_key_outside_the_settings_module() {
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().unwrap();
        let (root, here) = (manifest.join("../..").canonicalize().unwrap(), manifest.join("src/settings"));
        let keys: std::collections::BTreeSet<String> =
            crate::registry().iter().flat_map(|e| e.settings().0.into_iter().map(|s| s.key)).collect();
        let mut files = Vec::new();
        sources(&root.join("src"), &mut files);
        for c in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
            sources(&c.path().join("src"), &mut files);
        }
        let readers = ["get", "int", "float", "bool", "choice", "list", "devices", "backends", "one_device", "text"];
        let mut found = Vec::new();
        for f in files.iter().filter(|f| !f.starts_with(&here)) {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                for k in &keys {
                    if readers.iter().any(|r| line.contains(&format!(".{r}(\"{k}\")"))) {
                        found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "settings read by key outside crates/exercises/src/settings/ (read them in the exercise's config):\n{}",
            found.join("\n")
        );
    }

    fn with_backends(d: &[&str]) -> Settings {
        Settings::default().add("backend", "Backend", "", Value::Devices(d.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn one_device_refuses_none_and_several_with_one_message() {
        assert_eq!(with_backends(&["cpu"]).one_device("backend").unwrap().to_string(), "cpu");
        for d in [&[][..], &["cpu", "gpu"][..]] {
            let err = with_backends(d).one_device("backend").unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
            assert_eq!(err.to_string(), format!("invalid setting: backend: choose exactly one backend, not {}", d.len()));
        }
    }
}
