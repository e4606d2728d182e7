//! `gpulab class DIR [--out OUTDIR]`: the class view in the terminal — a table per exercise of
//! the reports found under DIR, the skipped files with the reason — and, with --out, class.csv
//! and class.html.

use std::path::PathBuf;

use clap::Args;
use gpulab::report::{Cell, Table};
use gpulab::text::{terminal_line, terminal_text};

#[derive(Args)]
pub struct ClassArgs {
    /// The folder holding the students' exported reports (every *report.json below it is read).
    dir: PathBuf,
    /// Write class.csv (one long table) and class.html (tables and charts, self-contained) here.
    #[arg(long, value_name = "OUTDIR")]
    out: Option<PathBuf>,
}

/// The columns the terminal shows (the files have them all).
const SHOWN: [&str; 9] = ["#", "machine", "driver", "date", "key figure", "value", "source", "run", "file"];
/// Longest cell text printed; the files have the whole.
const MAX_CELL: usize = 48;

pub fn run(a: ClassArgs) -> anyhow::Result<()> {
    let class = gpulab::class::read(&a.dir)?;
    let mut text = format!("{}\n", class.summary());
    for g in &class.groups {
        text.push('\n');
        text.push_str(&table_text(&g.table()));
    }
    if !class.skipped.is_empty() {
        text.push_str("\nSkipped files:\n");
        for s in &class.skipped {
            text.push_str(&format!("  {}: {}\n", terminal_line(&s.file), terminal_line(&s.reason)));
        }
    }
    // Every string above came from students' files (or their names): cells and file names are
    // escaped one by one, and the whole once more, so no escape sequence reaches the terminal.
    print(&terminal_text(&text))?;
    if let Some(out) = &a.out {
        let paths = gpulab::class::write_all(&class, out)?;
        let wrote: Vec<String> = paths.iter().map(|p| format!("wrote {}\n", terminal_line(&p.display().to_string()))).collect();
        print(&format!("\n{}", wrote.concat()))?;
    }
    Ok(())
}

/// Writes to stdout; a closed pipe (`gpulab class DIR | head`) ends the output quietly.
fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn clip(s: String) -> String {
    if s.chars().count() > MAX_CELL { format!("{}…", s.chars().take(MAX_CELL - 1).collect::<String>()) } else { s }
}

/// The table as aligned text: the columns in `SHOWN`, long cells clipped.
fn table_text(t: &Table) -> String {
    let idx: Vec<usize> = SHOWN.iter().filter_map(|n| t.columns.iter().position(|c| c.name == *n)).collect();
    let head: Vec<String> = idx
        .iter()
        .map(|&i| {
            if t.columns[i].unit.is_empty() { t.columns[i].name.clone() } else { format!("{} ({})", t.columns[i].name, t.columns[i].unit) }
        })
        .collect();
    let rows: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| idx.iter().map(|&i| clip(terminal_line(&r.get(i).unwrap_or(&Cell::Empty).format(&t.columns[i])).into_owned())).collect())
        .collect();
    let widths: Vec<usize> =
        (0..idx.len()).map(|j| rows.iter().map(|r| r[j].chars().count()).chain([head[j].chars().count()]).max().unwrap_or(0)).collect();
    let line = |cells: &[String]| {
        cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string() + "\n"
    };
    let rule = widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  ") + "\n";
    let mut out = format!("{}\n{}{rule}", terminal_line(&t.title), line(&head));
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}
