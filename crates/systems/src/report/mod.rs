//! What an exercise run produces: headline figures, tables, chart series and a verdict, each
//! number labelled with where it came from, plus the metadata needed to reproduce the run.
//! The GUI shows it, the CLI writes it, the tests check it.

pub mod agree;
pub mod claims;
mod diagram;
pub mod html;
pub mod number;
mod write;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use gpulab_core::tensor::BackendInfo;

pub use claims::{Claim, Claims, FACT, Part};
pub use diagram::{Diagram, DiagramNode, edge_points};
pub use write::{
    MAX_JSON_BYTES, MAX_JSON_VALUES, markdown, parse_json, read_json, write_all, write_csv, write_html, write_index, write_json,
    write_markdown,
};

/// Where a number came from. Shown next to it and written into every report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "from", rename_all = "lowercase")]
pub enum Provenance {
    /// Measured on this machine in this run.
    Measured,
    /// Computed from measured figures; says from which.
    Derived(String),
    /// From a model, not this machine; says which.
    Simulated(String),
}

impl Provenance {
    pub fn derived(from: &str) -> Self {
        Provenance::Derived(from.to_string())
    }

    pub fn label(&self) -> String {
        match self {
            Provenance::Measured => "measured".into(),
            Provenance::Derived(f) => format!("derived from {f}"),
            Provenance::Simulated(m) => format!("simulated: {m}"),
        }
    }

    pub fn short(&self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::Derived(_) => "derived",
            Provenance::Simulated(_) => "simulated",
        }
    }
}

/// One headline number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub label: String,
    #[serde(with = "number")]
    pub value: f64,
    pub unit: String,
    pub provenance: Provenance,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub unit: String,
    /// Decimals shown for numbers, at most `MAX_DECIMALS` (a report read from a file is held to it).
    #[serde(deserialize_with = "capped_decimals")]
    pub decimals: usize,
    pub provenance: Option<Provenance>,
}

/// The most decimals a column shows: an f64 has no more than 17 significant digits, and
/// `format!` panics on a precision above 65535, which a crafted report.json could ask for.
pub const MAX_DECIMALS: usize = 17;

fn capped_decimals<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    u64::deserialize(d).map(|n| n.min(MAX_DECIMALS as u64) as usize)
}

impl Column {
    pub fn text(name: &str) -> Self {
        Column { name: name.into(), unit: String::new(), decimals: 0, provenance: None }
    }
    pub fn num(name: &str, unit: &str, decimals: usize, provenance: Provenance) -> Self {
        Column { name: name.into(), unit: unit.into(), decimals, provenance: Some(provenance) }
    }
}

/// A table cell: in JSON a number (or "NaN", "inf", "-inf", see `number`), a string, or null.
/// A text cell that spells one of those three reads back as the number, which shows the same.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Num(f64),
    Text(String),
    Empty,
}

impl Serialize for Cell {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Cell::Num(v) => number::serialize(v, s),
            Cell::Text(t) => s.serialize_str(t),
            Cell::Empty => s.serialize_unit(),
        }
    }
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match d.deserialize_any(number::NumVisitor)? {
            number::Read::Num(v) => Cell::Num(v),
            number::Read::Text(t) => Cell::Text(t),
            number::Read::Null => Cell::Empty,
        })
    }
}

impl Cell {
    pub fn format(&self, col: &Column) -> String {
        match self {
            Cell::Num(v) => gpulab_core::format::fixed(*v, col.decimals.min(MAX_DECIMALS)),
            Cell::Text(t) => t.clone(),
            Cell::Empty => "—".into(),
        }
    }
}

impl From<f64> for Cell {
    fn from(v: f64) -> Self {
        Cell::Num(v)
    }
}
impl From<Option<f64>> for Cell {
    fn from(v: Option<f64>) -> Self {
        v.map(Cell::Num).unwrap_or(Cell::Empty)
    }
}
impl From<&str> for Cell {
    fn from(v: &str) -> Self {
        Cell::Text(v.to_string())
    }
}
impl From<String> for Cell {
    fn from(v: String) -> Self {
        Cell::Text(v)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub title: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    #[serde(with = "number::points")]
    pub points: Vec<[f64; 2]>,
    pub provenance: Provenance,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChartKind {
    Line,
    Bars,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: ChartKind,
    pub log_x: bool,
    pub series: Vec<Series>,
    /// Vertical markers, e.g. the size where the GPU starts to win.
    #[serde(with = "number::markers")]
    pub markers: Vec<(f64, String)>,
    /// Horizontal target lines (y, what it is), drawn where a target exists: a latency SLO, an
    /// efficiency goal.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "number::markers")]
    pub targets: Vec<(f64, String)>,
    /// A bar chart's group names by x value ("1 slow", "4 + cache"), where the run's name says
    /// more than its number.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "number::markers")]
    pub x_names: Vec<(f64, String)>,
}

impl Chart {
    /// A line chart with no series yet (linear x, no markers, targets or group names).
    pub fn line(id: &str, title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            kind: ChartKind::Line,
            log_x: false,
            series: Vec::new(),
            markers: Vec::new(),
            targets: Vec::new(),
            x_names: Vec::new(),
        }
    }

    /// A bar chart with no series yet.
    pub fn bars(id: &str, title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart { kind: ChartKind::Bars, ..Chart::line(id, title, x_label, y_label) }
    }

    /// The same chart on a logarithmic x axis.
    pub fn log_x(self) -> Chart {
        Chart { log_x: true, ..self }
    }

    /// The same chart with these series.
    pub fn with_series(self, series: Vec<Series>) -> Chart {
        Chart { series, ..self }
    }
}

/// The conclusion, computed from the numbers: a summary and the evidence behind it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub summary: String,
    pub evidence: Vec<String>,
}

/// Everything needed to reproduce the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub gpulab_version: String,
    pub started_at: String,
    pub seed: u64,
    pub backends: Vec<BackendInfo>,
    pub precision: String,
    pub dataset: String,
    pub hyperparameters: BTreeMap<String, String>,
    pub host: String,
}

impl Metadata {
    pub fn new(seed: u64) -> Self {
        Metadata {
            gpulab_version: env!("CARGO_PKG_VERSION").into(),
            started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            seed,
            precision: "f32".into(),
            host: format!("{} ({} threads), {}", gpulab_core::device::cpu::cpu_name(), rayon::current_num_threads(), std::env::consts::OS),
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub exercise: String,
    pub title: String,
    /// The settings as the user gave them (key → value text).
    pub config: BTreeMap<String, String>,
    pub metadata: Metadata,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
    pub charts: Vec<Chart>,
    pub verdict: Verdict,
    /// Caveats the reader must see, e.g. that an adapter is a software GPU. A note is one line
    /// a learner reads; details for whoever wants them follow after a line break and are shown
    /// folded (`note_parts`, `note_with_details`).
    pub notes: Vec<String>,
    pub stopped_early: bool,
    /// Profiler timelines (exercises 4 and 7): drawn in the app, exported as trace JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<crate::profile::Timeline>,
    /// A next step computed from this run (e.g. the profiler's fix for its bottleneck): the
    /// lab offers it as one click that changes these settings and runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<Suggestion>,
    /// Files an exercise exports beside the report (e.g. the platform's scenario JSON, which
    /// replays the run); `write_all` writes each under its name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The lesson's "Check yourself" questions (answers where the lesson has them), so every
    /// export of this run (report.html) carries them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_yourself: Vec<CheckCard>,
}

/// One check-yourself question and its answer, if the lesson gives one.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CheckCard {
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// One exported file: a plain file name (no folders) and its text.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Attachment {
    pub file_name: String,
    pub text: String,
    /// Binary content (e.g. exercise 9's int8 safetensors); written instead of `text` when not
    /// empty, and not part of the report's JSON.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// Settings to change for the next run, and what the change is.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Suggestion {
    pub label: String,
    /// Setting key → new value text, as `--set key=value` takes it.
    pub settings: BTreeMap<String, String>,
}

/// A note of one calm line with details shown on demand (a loader's own error, every source
/// looked for): folded in the lab and the HTML report, indented in Markdown, left out of the CLI.
pub fn note_with_details(line: &str, details: &str) -> String {
    format!("{}\n{}", line.replace('\n', " "), details.trim())
}

/// A note's line and its details, if any (see `note_with_details`).
pub fn note_parts(note: &str) -> (&str, Option<&str>) {
    match note.split_once('\n') {
        Some((line, details)) if !details.trim().is_empty() => (line, Some(details)),
        Some((line, _)) => (line, None),
        None => (note, None),
    }
}

impl Report {
    /// Every exercise warns that a software adapter's numbers are the CPU's.
    pub fn note_software_backends(&mut self) {
        for b in self.metadata.backends.iter().filter(|b| b.software) {
            self.notes
                .push(format!("{} ({}) is a software GPU: runs on your CPU. Its numbers are your CPU's, not a GPU's.", b.name, b.api));
        }
    }

    pub fn table(&self, title: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.title == title)
    }
    pub fn chart(&self, id: &str) -> Option<&Chart> {
        self.charts.iter().find(|c| c.id == id)
    }
}
