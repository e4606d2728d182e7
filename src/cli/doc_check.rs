//! The docs checked against the code, so that they cannot drift from it unnoticed: every
//! `gpulab …` command named in a lesson, lessons/README.md, the README or ARCHITECTURE.md is
//! parsed by the real clap parser (`Cli::try_parse_from`); a concrete `gpulab run …` builds its
//! settings the way the CLI does (preset, --set, --scenario) and passes the exercise's own
//! validation; the cheap ones (`list`, `lesson N`, `run … --show-settings`) run. A synopsis
//! (`gpulab run ID [--preset NAME] …`) names a real subcommand and only its real flags. Every
//! `key=value`, "setting `x`" and preset a lesson names is one of its exercise's; every file path
//! it puts in backticks exists; every kernel it names is a row of the kernels table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use gpulab::exercises::{self, Exercise, Settings};

use super::{Cli, Command};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One document: its name for messages, its text, and the exercise it teaches (lessons).
struct Doc {
    name: String,
    text: String,
    exercise: Option<Box<dyn Exercise>>,
}

fn docs() -> Vec<Doc> {
    let mut d: Vec<Doc> = exercises::registry()
        .into_iter()
        .map(|e| Doc { name: format!("lesson {}", e.number()), text: e.lesson().to_string(), exercise: Some(e) })
        .collect();
    for f in ["lessons/README.md", "README.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(repo().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        d.push(Doc { name: f.into(), text, exercise: None });
    }
    d
}

/// The text outside fenced code blocks, and the lines inside them.
fn split_fences(text: &str) -> (String, Vec<String>) {
    let (mut prose, mut code, mut inside) = (String::new(), Vec::new(), false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            prose.push('\n');
            continue;
        }
        if inside {
            code.push(line.to_string());
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    (prose, code)
}

/// The inline code spans of prose (a span may wrap onto the next line).
fn spans(prose: &str) -> Vec<String> {
    prose.split('`').skip(1).step_by(2).map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// Every `gpulab …` command: inline spans that start with it, and code-block lines that do
/// (with the more indented lines under them that continue a synopsis: `[--x …]`, `--y …`).
fn commands(doc: &Doc) -> Vec<String> {
    let (prose, code) = split_fences(&doc.text);
    let mut out: Vec<String> = spans(&prose).into_iter().filter(|s| s.starts_with("gpulab ")).collect();
    let mut current: Option<(usize, String)> = None;
    let mut prev: (usize, String) = (0, String::new());
    for line in code {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        // A wrapped sentence of a description may start with the word "gpulab".
        let prose =
            prev.0 == indent && !prev.1.starts_with("gpulab ") && prev.1.chars().last().is_some_and(|c| c.is_alphanumeric() || c == ',');
        prev = (indent, t.to_string());
        if let Some((i, cmd)) = &mut current {
            if indent > *i && (t.starts_with('[') || t.starts_with("--")) {
                cmd.push(' ');
                cmd.push_str(t);
                continue;
            }
            out.push(std::mem::take(cmd));
            current = None;
        }
        if t.starts_with("gpulab ") && !prose {
            current = Some((indent, t.to_string()));
        }
    }
    out.extend(current.map(|c| c.1));
    // Comments after the command are the reader's, not the shell's.
    out.into_iter().map(|c| c.split(" # ").next().unwrap_or("").trim().to_string()).collect()
}

/// Shell words: spaces split, double or single quotes group.
fn words(cmd: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for ch in cmd.chars() {
        match (quote, ch) {
            (None, '"' | '\'') => {
                quote = Some(ch);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// A placeholder the reader fills in: ID, DIR, N, NAME, CKPT, idx:DIR, DIR/ckpt-….safetensors
/// (a quoted preset name with spaces, "big enough for a GPU", is not one).
fn placeholder(word: &str) -> bool {
    !word.contains(' ')
        && word.split(|c: char| !c.is_ascii_alphanumeric()).any(|piece| !piece.is_empty() && piece.chars().all(|c| c.is_ascii_uppercase()))
}

/// A synopsis rather than a command to paste: alternatives, optional parts, placeholders.
fn synopsis(w: &[String]) -> bool {
    w.iter().any(|x| x.contains('[') || x.contains('|') || x.contains("...") || x.contains('…') || placeholder(x))
}

/// The subcommand path a command names (`run`, `bench matmul`, …) and the clap command.
fn subcommand<'a>(root: &'a clap::Command, w: &[String]) -> (Vec<String>, &'a clap::Command) {
    let mut cmd = root;
    let mut path = Vec::new();
    for x in &w[1..] {
        match cmd.find_subcommand(x) {
            Some(c) => {
                path.push(x.clone());
                cmd = c;
            }
            None => break,
        }
    }
    (path, cmd)
}

/// A synopsis: a real subcommand and only its real flags.
fn check_synopsis(cmd: &str, w: &[String], problems: &mut Vec<String>) {
    let root = Cli::command();
    let (path, sub) = subcommand(&root, w);
    if path.is_empty() && w.len() > 1 && !w[1].starts_with('-') {
        problems.push(format!("{cmd:?}: no subcommand {:?}", w[1]));
    }
    let longs: BTreeSet<String> = sub.get_arguments().chain(root.get_arguments()).filter_map(|a| a.get_long().map(String::from)).collect();
    for x in w.iter().map(|x| x.trim_start_matches('[')) {
        if let Some(flag) = x.strip_prefix("--") {
            let flag: String = flag.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            if !flag.is_empty() && !longs.contains(&flag) && flag != "help" && flag != "version" {
                problems.push(format!("{cmd:?}: `gpulab {}` has no --{flag}", path.join(" ")));
            }
        }
    }
}

/// A value naming the reader's own file (read by validation, which the docs cannot provide).
fn names_a_file(value: &str) -> bool {
    value.contains('/') || [".json", ".csv", ".safetensors"].iter().any(|e| value.ends_with(e))
}

/// A concrete command: parsed by the real CLI; `run`'s settings built as the CLI builds them and
/// validated by the exercise; the cheap ones run.
fn check_command(cmd: &str, w: &[String], problems: &mut Vec<String>) {
    let cli = match Cli::try_parse_from(w) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            // A bare mention of a command that takes arguments (`gpulab run`, `gpulab bench`).
            if matches!(e.kind(), DisplayVersion | DisplayHelp) {
                return;
            }
            if matches!(e.kind(), MissingRequiredArgument | MissingSubcommand | DisplayHelpOnMissingArgumentOrSubcommand)
                && !w.iter().any(|x| x.starts_with('-'))
            {
                return check_synopsis(cmd, w, problems);
            }
            problems.push(format!("{cmd:?} does not parse: {}", e.to_string().lines().next().unwrap_or_default()));
            return;
        }
    };
    let result = match cli.command {
        Some(Command::List) => super::run::list(),
        Some(Command::Lesson { id }) => super::run::lesson(&id),
        Some(Command::Run(a)) if a.id == "all" => super::run_all::select(&a.only).map(drop),
        Some(Command::Run(a)) => (|| {
            let (ex, settings) = super::run::settings_for(&a)?;
            let files = w.iter().any(|x| x.split_once('=').is_some_and(|(_, v)| names_a_file(v))) || w.iter().any(|x| x == "--scenario");
            if !files {
                ex.validate(&settings)?;
            }
            // And as the reader would list them.
            let mut shown = w.to_vec();
            shown.push("--show-settings".into());
            match Cli::try_parse_from(&shown)?.command {
                Some(Command::Run(a)) => super::run::run(a),
                _ => unreachable!("the same command"),
            }
        })(),
        _ => Ok(()),
    };
    if let Err(e) = result {
        problems.push(format!("{cmd:?}: {e:#}"));
    }
}

/// Every command in every document parses (and validates, and the cheap ones run).
#[test]
fn every_documented_command_parses_validates_and_the_cheap_ones_run() {
    let mut problems = Vec::new();
    let mut seen = 0;
    for doc in docs() {
        for cmd in commands(&doc) {
            let w = words(&cmd);
            seen += 1;
            let mut p = Vec::new();
            if synopsis(&w) {
                check_synopsis(&cmd, &w, &mut p);
            } else {
                check_command(&cmd, &w, &mut p);
            }
            problems.extend(p.into_iter().map(|x| format!("{}: {x}", doc.name)));
        }
    }
    assert!(seen >= 40, "only {seen} commands found: the extraction broke");
    assert!(problems.is_empty(), "documented commands that drifted from the code:\n{}", problems.join("\n"));
}

/// Exercises that have `key` as a setting, with the value applied (None: not a setting there).
fn applies(ex: &dyn Exercise, key: &str, value: &str) -> Option<Result<(), String>> {
    let mut s: Settings = ex.settings();
    s.get(key)?;
    if placeholder(value) || value.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
        return Some(Ok(()));
    }
    Some(s.apply(&[format!("{key}={value}")]).map_err(|e| e.to_string()))
}

/// `key=value` spans a lesson names that are not gpulab settings, each with what it is.
const NOT_SETTINGS: [(&str, &str); 6] = [
    ("signal", "scenario.json's autoscaler.signal (lesson 10)"),
    ("target", "scenario.json's autoscaler.target (lesson 10)"),
    ("format", "the int8 file's metadata (lesson 9)"),
    ("checkpoint_every", "the chapter's notation for K (lesson 5)"),
    ("activities", "torch.profiler's argument (lesson 7)"),
    ("dtype", "PyTorch's and Keras's argument (lesson 3)"),
];

/// Every `key=value` a lesson names is a setting of its exercise (or, with `--set`, of some
/// exercise) and the value is one it accepts; every "setting `x`" is one of its settings.
#[test]
fn every_setting_a_document_names_exists_and_accepts_the_value() {
    let all = exercises::registry();
    let mut problems = Vec::new();
    for doc in docs() {
        let (prose, _) = split_fences(&doc.text);
        for span in spans(&prose) {
            let set = span.strip_prefix("--set ").map(str::trim);
            let kv = set.unwrap_or(&span);
            let Some((key, value)) = kv.split_once('=') else { continue };
            // Settings are lower-case snake_case keys; values have no spaces.
            if !key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') || key.is_empty() || value.contains(' ') {
                continue;
            }
            // Python's keyword arguments (`pin_memory=True`) are the frameworks', not gpulab's.
            if value.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && value.chars().any(|c| c.is_ascii_lowercase()) {
                continue;
            }
            let own = doc.exercise.as_deref().and_then(|e| applies(e, key, value));
            let result = match (own, set.is_some() || doc.exercise.is_none()) {
                (Some(r), _) => r,
                (None, true) => match all.iter().filter_map(|e| applies(e.as_ref(), key, value)).next() {
                    Some(r) => r,
                    None if NOT_SETTINGS.iter().any(|n| n.0 == key) => Ok(()),
                    None => Err("no exercise has this setting".into()),
                },
                (None, false) if NOT_SETTINGS.iter().any(|n| n.0 == key) => Ok(()),
                (None, false) => Err(format!("exercise {} has no setting {key:?}", doc.exercise.as_ref().map_or(0, |e| e.number()))),
            };
            if let Err(e) = result {
                problems.push(format!("{}: `{span}`: {e}", doc.name));
            }
        }
        if let Some(ex) = &doc.exercise {
            let flat = prose.split_whitespace().collect::<Vec<_>>().join(" ");
            for (i, _) in flat.match_indices("setting `") {
                let key: String = flat[i + 9..].chars().take_while(|c| *c != '`').collect();
                if ex.settings().get(&key).is_none() {
                    problems.push(format!("{}: names setting `{key}`, which exercise {} does not have", doc.name, ex.number()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "settings the documents name that the code does not have:\n{}", problems.join("\n"));
}

/// Every preset a lesson names (**"name"**, *name* preset) is one of its exercise's; every
/// `--preset "name"` in a command is checked with the command.
#[test]
fn every_preset_a_lesson_names_exists() {
    let mut problems = Vec::new();
    for doc in docs() {
        let Some(ex) = &doc.exercise else { continue };
        let names: Vec<&str> = ex.presets().iter().map(|p| p.name).collect();
        let flat = doc.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut named: Vec<String> = flat.split("**\"").skip(1).filter_map(|s| s.split_once("\"**").map(|x| x.0.to_string())).collect();
        // *name* preset (a bold **"name"** was taken above).
        for (i, _) in flat.match_indices("* preset") {
            let before = &flat[..i];
            if before.ends_with('"') || before.ends_with('*') {
                continue;
            }
            if let Some(start) = before.rfind('*') {
                named.push(before[start + 1..].to_string());
            }
        }
        for n in named {
            if !names.iter().any(|p| p.eq_ignore_ascii_case(&n)) {
                problems.push(format!("{}: names preset {n:?}; exercise {} has {names:?}", doc.name, ex.number()));
            }
        }
    }
    assert!(problems.is_empty(), "presets the lessons name that the code does not have:\n{}", problems.join("\n"));
}

/// The kernels table's rows (`Kernel` variants), read from the table itself.
fn kernels() -> BTreeSet<String> {
    let src = std::fs::read_to_string(repo().join("crates/core/src/device/gpu/kernels.rs")).expect("the kernels table");
    let table = src.split("\nkernels! {").nth(1).expect("the kernels! table");
    table.lines().filter_map(|l| l.trim().split_once(" => \"").map(|(k, _)| k.trim().to_string())).collect()
}

/// Names in backticks that look like kernels (CamelCase) but are the frameworks' or the
/// chapter's, each with what it is.
const NOT_KERNELS: [(&str, &str); 7] = [
    ("GradScaler", "PyTorch's loss scaler (lesson 3)"),
    ("ModelCheckpoint", "Keras's callback (lesson 5)"),
    ("BackupAndRestore", "Keras's callback (lesson 5)"),
    ("TerminateProcess", "the Windows call (lesson 5)"),
    ("MultiWorkerMirroredStrategy", "TensorFlow's strategy (lesson 6)"),
    ("MinMaxObserver", "PyTorch's observer (lesson 9)"),
    ("ModelKind", "gpulab's model enum"),
];

/// Every repository path a lesson puts in backticks exists; every `.wgsl` it names is a shader;
/// every CamelCase name in backticks is a kernel of the table (or a framework's, listed above).
#[test]
fn every_file_and_kernel_a_lesson_names_exists() {
    let root = repo();
    let top: BTreeSet<String> = std::fs::read_dir(&root)
        .expect("the repository")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let kernels = kernels();
    assert!(kernels.len() > 30 && kernels.contains("MatmulRegBlock"), "reading the kernels table broke: {kernels:?}");
    let exists = |p: &str| -> bool {
        let p = p.trim_end_matches('/');
        match p.rsplit_once('/') {
            // `trace-*.json`: some file in that folder matches the pattern.
            Some((dir, file)) if file.contains('*') => {
                let (a, b) = file.split_once('*').unwrap_or((file, ""));
                std::fs::read_dir(root.join(dir)).is_ok_and(|d| {
                    d.filter_map(|e| e.ok()).any(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with(a) && n.ends_with(b)
                    })
                })
            }
            _ => Path::new(&root).join(p).exists(),
        }
    };
    let mut problems = Vec::new();
    for doc in docs().into_iter().filter(|d| d.exercise.is_some() || d.name == "README.md") {
        let (prose, _) = split_fences(&doc.text);
        for span in spans(&prose) {
            if span.contains(' ') {
                continue;
            }
            let first = span.split('/').next().unwrap_or("");
            // `target/…` holds what a build writes, not the repository's files.
            if span.contains('/') && top.contains(first) && first != "target" && !exists(&span) {
                problems.push(format!("{}: `{span}` is not in the repository", doc.name));
            }
            if let Some(stem) = span.strip_suffix(".wgsl")
                && !root.join("shaders").join(format!("{}.wgsl", stem.rsplit('/').next().unwrap_or(stem))).exists()
            {
                problems.push(format!("{}: `{span}` is not a shader in shaders/", doc.name));
            }
            let camel = span.len() > 2
                && span.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && span.chars().all(|c| c.is_ascii_alphanumeric())
                && span.chars().any(|c| c.is_ascii_lowercase());
            if doc.exercise.is_some() && camel && !kernels.contains(&span) && !NOT_KERNELS.iter().any(|n| n.0 == span) {
                problems.push(format!(
                    "{}: `{span}` is not a kernel of the kernels table (nor a framework name listed in doc_check.rs)",
                    doc.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "files and kernels the documents name that do not exist:\n{}", problems.join("\n"));
}

#[test]
fn commands_are_found_in_prose_code_blocks_and_synopses() {
    let doc = Doc {
        name: "t".into(),
        text: "Run `gpulab list` or\n```sh\ngpulab run cpu-vs-gpu --set backends=cpu   # a comment\ngpulab train --backend cpu|gpu\n             [--model mlp|cnn]\n    Prose under it.\n```\n".into(),
        exercise: None,
    };
    assert_eq!(
        commands(&doc),
        ["gpulab list", "gpulab run cpu-vs-gpu --set backends=cpu", "gpulab train --backend cpu|gpu [--model mlp|cnn]"]
    );
    assert_eq!(
        words(r#"gpulab run x --preset "big enough" --set a='b c'"#),
        ["gpulab", "run", "x", "--preset", "big enough", "--set", "a=b c"]
    );
    assert!(synopsis(&words("gpulab run ID --out DIR")) && !synopsis(&words("gpulab run precision --set backend=cpu")));
    let mut p = Vec::new();
    check_synopsis("gpulab run ID [--nope]", &words("gpulab run ID [--nope]"), &mut p);
    assert!(p.iter().any(|x| x.contains("--nope")), "{p:?}");
    p.clear();
    check_command("gpulab run precision --set precisions=fp8", &words("gpulab run precision --set precisions=fp8"), &mut p);
    assert!(p.iter().any(|x| x.contains("fp8")), "validation runs: {p:?}");
}
