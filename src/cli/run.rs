use std::path::PathBuf;

use clap::Args;
use gpulab::exercises::{self, Event, Sink};
use gpulab::text::{terminal_line, terminal_text};
use indicatif::ProgressBar;

use super::progress;

#[derive(Args)]
pub struct RunArgs {
    /// Exercise id (see `gpulab list`) or number; `all` runs every exercise with its defaults.
    pub(super) id: String,
    /// Override a setting, e.g. --set batch=128 --set backends=cpu,gpu:0 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Folder for report.json, report.csv, report.md and report.html (with `all`: a folder per
    /// exercise and index.html).
    #[arg(long, default_value = "gpulab-report")]
    pub(super) out: PathBuf,
    /// Replay a scenario file (the scenario.json written beside a report); for exercises with a
    /// `scenario_file` setting (10, platform). Same as --set scenario_file=FILE.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Start from a named preset of the exercise (see --show-settings), e.g.
    /// --preset "big enough for a GPU"; --set still overrides its values.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Print the settings with their defaults (and the exercise's presets) and exit.
    #[arg(long)]
    show_settings: bool,
    /// With `all`: the backend(s) for every exercise that has a backend setting, e.g. cpu.
    #[arg(long, value_name = "DEVICES")]
    pub(super) backend: Option<String>,
    /// With `all`: only these exercises (ids or numbers, comma-separated).
    #[arg(long, value_name = "ID,ID…", value_delimiter = ',')]
    pub(super) only: Vec<String>,
}

pub fn list() -> anyhow::Result<()> {
    for e in exercises::registry() {
        println!("{:<20} {:>2}. {}", e.id(), e.number(), e.title());
    }
    Ok(())
}

/// Prints an exercise's lesson (Markdown, embedded in the binary).
pub fn lesson(id: &str) -> anyhow::Result<()> {
    let Some(e) = exercises::find(id) else {
        anyhow::bail!("no exercise {id:?}; `gpulab list` shows the ids (or use the number 1–10)");
    };
    print!("{}", e.lesson());
    Ok(())
}

/// The exercise `a` names and its settings: the preset's (or the defaults), then each --set,
/// then --scenario. Not yet validated as a whole (`Exercise::validate`).
pub(super) fn settings_for(a: &RunArgs) -> anyhow::Result<(Box<dyn exercises::Exercise>, exercises::Settings)> {
    let ex =
        exercises::find(&a.id).ok_or_else(|| anyhow::anyhow!("unknown exercise {:?}; known: {}", a.id, exercises::ids().join(", ")))?;
    let mut settings = match &a.preset {
        Some(name) => exercises::presets::find(ex.as_ref(), name)?.settings(ex.as_ref())?,
        None => ex.settings(),
    };
    settings.apply(&a.set)?;
    if let Some(file) = &a.scenario {
        if !settings.has("scenario_file") {
            anyhow::bail!("--scenario: exercise {} takes no scenario file (only exercises with a scenario_file setting do)", ex.id());
        }
        if a.set.iter().any(|s| s.trim_start().starts_with("scenario_file=")) {
            anyhow::bail!("--scenario and --set scenario_file= both name a scenario; give one");
        }
        settings.apply(&[format!("scenario_file={}", file.display())])?;
    }
    Ok((ex, settings))
}

/// Progress bars for a headless run; events that matter are printed above them.
pub(super) struct CliSink {
    pub(super) bar: ProgressBar,
}

impl Sink for CliSink {
    fn emit(&mut self, ev: Event) {
        match ev {
            Event::Phase(p) => {
                self.bar.suspend(|| eprintln!("== {}", terminal_text(&p)));
                self.bar.set_prefix(p);
                self.bar.set_position(0);
            }
            Event::Progress { done, total } => {
                self.bar.set_length(total);
                self.bar.set_position(done);
            }
            Event::Log(l) => self.bar.suspend(|| eprintln!("   {}", terminal_text(&l))),
            Event::Point { .. } | Event::Table(_) | Event::Timeline(_) | Event::Diagram(_) | Event::Finished(_) | Event::Failed(_) => {}
        }
    }
    fn stop(&self) -> &gpulab::stop::Stop {
        gpulab::stop::Stop::never()
    }
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    if a.id == "all" {
        if !a.set.is_empty() || a.scenario.is_some() || a.show_settings {
            anyhow::bail!(
                "`gpulab run all` runs every exercise with its defaults: --set, --scenario and --show-settings go with one exercise (`gpulab run ID`)"
            );
        }
        return super::run_all::run(a);
    }
    if a.backend.is_some() || !a.only.is_empty() {
        anyhow::bail!("--backend and --only go with `gpulab run all`; for one exercise use --set backend=… (see --show-settings)");
    }
    let (ex, settings) = settings_for(&a)?;
    if a.show_settings {
        for s in &settings.0 {
            println!("{:<16} = {:<24} {}", s.key, s.value.to_text(), s.help);
        }
        let presets = ex.presets();
        if !presets.is_empty() {
            println!("\npresets (--preset NAME; --set still overrides):");
            for p in presets {
                println!("  {:?}: {}\n      {}", p.name, p.description, p.summary());
            }
        }
        return Ok(());
    }
    ex.validate(&settings)?;
    let mut sink = CliSink { bar: progress::bar(0, ex.title()) };
    let report = ex.run(&settings, &mut sink);
    sink.bar.finish_and_clear();
    let report = report?;
    let paths = gpulab::report::write_all(&report, &a.out)?;
    // A report's strings can come from files (a scenario's name, a checkpoint's metadata).
    println!("{}\n", terminal_text(&report.title));
    println!("{}", terminal_text(&report.verdict.summary));
    for e in &report.verdict.evidence {
        println!("  - {}", terminal_text(e));
    }
    // A note's details (a loader's own error) are in report.md and report.html.
    for n in &report.notes {
        println!("note: {}", terminal_text(gpulab::report::note_parts(n).0));
    }
    println!();
    for p in paths {
        println!("wrote {}", terminal_line(&p.display().to_string()));
    }
    Ok(())
}
