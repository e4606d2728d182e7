//! The lesson panel: the lesson's markdown with its "Check yourself" questions drawn as cards in
//! their place — the question, and a "Show answer" toggle (closed by default) that opens the
//! answer as markdown. The split is parsed once per lesson and kept in egui's temporary memory.

use std::sync::Arc;

use eframe::egui;
use egui::RichText;
use egui_commonmark::{CommonMarkCache, CommonMarkViewer};

use gpulab_exercises::Exercise;
use gpulab_exercises::lessons::{self, CHECK_YOURSELF_HEADING, Card};

/// A lesson cut around its "Check yourself" section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LessonParts {
    /// The markdown before the section.
    pub before: String,
    /// The section's heading, without the `## `.
    pub heading: String,
    pub cards: Vec<Card>,
    /// The markdown after the section (e.g. "Going further").
    pub after: String,
}

impl LessonParts {
    pub fn parse(markdown: &str) -> Self {
        let mut at = 0;
        let mut found = None;
        for line in markdown.split_inclusive('\n') {
            if line.starts_with(CHECK_YOURSELF_HEADING) {
                found = Some((at, line));
                break;
            }
            at += line.len();
        }
        match found {
            None => LessonParts { before: markdown.to_string(), ..Default::default() },
            Some((at, line)) => LessonParts {
                before: markdown[..at].to_string(),
                heading: line.trim_start_matches('#').trim().to_string(),
                cards: lessons::check_yourself(&markdown[at..]),
                after: lessons::without_check_yourself(&markdown[at..]),
            },
        }
    }
}

/// The lesson panel: the selected exercise's lesson, scrolled, with its cards. It owns the
/// markdown viewer's cache (images, code highlighting); the split into text and cards is kept
/// per lesson in egui's temporary memory, each card's open state too.
#[derive(Default)]
pub(crate) struct LessonView {
    cache: CommonMarkCache,
}

impl LessonView {
    pub fn ui(&mut self, ui: &mut egui::Ui, ex: &dyn Exercise) {
        egui::ScrollArea::vertical().id_salt(("lesson", ex.id())).auto_shrink([false, false]).show(ui, |ui| {
            show_lesson(ui, &mut self.cache, ex.lesson(), ex.id());
        });
    }
}

/// Draws a lesson (call inside a scroll area); `salt` tells one lesson's cards from another's.
fn show_lesson(ui: &mut egui::Ui, cache: &mut CommonMarkCache, markdown: &'static str, salt: &str) {
    let key = egui::Id::unique(("lesson-parts", salt));
    let parts: Arc<LessonParts> = match ui.data(|d| d.get_temp::<Arc<LessonParts>>(key)) {
        Some(p) => p,
        None => {
            let p = Arc::new(LessonParts::parse(markdown));
            ui.data_mut(|d| d.insert_temp(key, p.clone()));
            p
        }
    };
    markdown_ui(ui, cache, &parts.before, (salt, "before"));
    if !parts.cards.is_empty() {
        ui.add_space(6.0);
        ui.heading(&parts.heading);
        ui.add_space(4.0);
        for (i, card) in parts.cards.iter().enumerate() {
            card_ui(ui, cache, card, i, salt);
            ui.add_space(6.0);
        }
    }
    if !parts.after.trim().is_empty() {
        markdown_ui(ui, cache, &parts.after, (salt, "after"));
    }
}

/// A piece of a lesson: markdown, or a fenced code block's text.
#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    Text(String),
    Code(String),
}

/// `markdown` cut at its fenced code blocks (fences at the start of a line), so each block is
/// drawn by `code_block`: scrolled sideways, never wrapped (exercise 10's diagram wrapped
/// mid-arrow at 1280×800).
pub fn segments(markdown: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut code: Option<String> = None;
    for line in markdown.split_inclusive('\n') {
        let fence = line.starts_with("```");
        match (&mut code, fence) {
            (None, true) => {
                if !text.is_empty() {
                    out.push(Segment::Text(std::mem::take(&mut text)));
                }
                code = Some(String::new());
            }
            (Some(c), true) => {
                out.push(Segment::Code(c.trim_end_matches('\n').to_string()));
                code = None;
            }
            (Some(c), false) => c.push_str(line),
            (None, false) => text.push_str(line),
        }
    }
    // An unclosed fence runs to the end, as CommonMark reads it.
    if let Some(c) = code {
        out.push(Segment::Code(c.trim_end_matches('\n').to_string()));
    }
    if !text.is_empty() {
        out.push(Segment::Text(text));
    }
    out
}

/// Markdown with its code blocks drawn by `code_block`; `salt` tells this piece's blocks apart.
fn markdown_ui(ui: &mut egui::Ui, cache: &mut CommonMarkCache, markdown: &str, salt: impl std::hash::Hash + std::fmt::Debug + Copy) {
    for (i, seg) in segments(markdown).iter().enumerate() {
        match seg {
            Segment::Text(t) => {
                CommonMarkViewer::new().show(ui, cache, t);
            }
            Segment::Code(c) => code_block(ui, c, (salt, i)),
        }
    }
}

/// A code block as monospace text that keeps its lines whole: a horizontal scroll bar where a
/// line is wider than the pane, selectable for copying.
fn code_block(ui: &mut egui::Ui, code: &str, salt: impl std::hash::Hash + std::fmt::Debug) {
    egui::Frame::group(ui.style()).fill(ui.visuals().extreme_bg_color).show(ui, |ui| {
        ui.set_width(ui.available_width());
        egui::ScrollArea::horizontal().id_salt(("code", salt)).auto_shrink([false, true]).show(ui, |ui| {
            ui.add(egui::Label::new(RichText::new(code).monospace()).wrap_mode(egui::TextWrapMode::Extend));
        });
    });
    ui.add_space(4.0);
}

fn card_ui(ui: &mut egui::Ui, cache: &mut CommonMarkCache, card: &Card, index: usize, salt: &str) {
    let open_id = egui::Id::unique(("card-open", salt, index));
    let mut open = ui.data(|d| d.get_temp::<bool>(open_id)).unwrap_or(false);
    egui::Frame::group(ui.style()).fill(ui.visuals().faint_bg_color).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.horizontal_top(|ui| {
            ui.label(RichText::new(format!("{}.", index + 1)).strong());
            // The question may carry markdown (emphasis, code); draw it as such.
            ui.vertical(|ui| CommonMarkViewer::new().show(ui, cache, &card.question));
        });
        match &card.answer {
            Some(answer) => {
                let label = if open { "Hide answer" } else { "Show answer" };
                if ui.small_button(label).clicked() {
                    open = !open;
                    ui.data_mut(|d| d.insert_temp(open_id, open));
                }
                if open {
                    ui.separator();
                    markdown_ui(ui, cache, answer, (salt, "answer", index));
                }
            }
            None => {
                ui.label(RichText::new("No answer written for this question yet.").small().weak());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code blocks come out whole, between the markdown around them.
    #[test]
    fn code_blocks_are_cut_out_whole() {
        let md = "Intro.\n\n```\na -> b\n   -> c\n```\n\nAfter.\n";
        assert_eq!(
            segments(md),
            vec![Segment::Text("Intro.\n\n".into()), Segment::Code("a -> b\n   -> c".into()), Segment::Text("\nAfter.\n".into())]
        );
        let diagram = gpulab_exercises::registry().into_iter().find(|e| e.number() == 10).unwrap().lesson();
        let code: Vec<String> =
            segments(diagram).into_iter().filter_map(|s| if let Segment::Code(c) = s { Some(c) } else { None }).collect();
        assert!(code.iter().any(|c| c.contains("object storage -> training data set")), "{code:?}");
    }

    /// Every character of every lesson's code blocks is in egui's monospace font (or its
    /// fallbacks): no missing-glyph box.
    #[test]
    fn code_blocks_have_every_glyph() {
        let ctx = egui::Context::default();
        let _ = ctx.run_ui(egui::RawInput::default(), |_| {});
        let font = egui::FontId::monospace(13.0);
        for ex in gpulab_exercises::registry() {
            for seg in segments(ex.lesson()) {
                if let Segment::Code(c) = seg {
                    let missing: Vec<char> =
                        c.chars().filter(|ch| !ch.is_whitespace() && !ctx.fonts_mut(|f| f.has_glyph(&font, *ch))).collect();
                    assert!(missing.is_empty(), "lesson {}: no glyph for {missing:?} in {c:?}", ex.number());
                }
            }
        }
    }

    #[test]
    fn parts_keep_the_order_and_drop_only_the_section() {
        let md = "# T\n\nIntro.\n\n## Check yourself against your numbers\n\n1. Q?\n   *Answer:* A.\n\n## Going further\n\nMore.\n";
        let p = LessonParts::parse(md);
        assert_eq!(p.before, "# T\n\nIntro.\n\n");
        assert_eq!(p.heading, "Check yourself against your numbers");
        assert_eq!(p.cards, vec![Card { question: "Q?".into(), answer: Some("A.".into()) }]);
        assert!(p.after.starts_with("## Going further") && p.after.contains("More.") && !p.after.contains("Q?"), "{}", p.after);
        let none = LessonParts::parse("# T\n\nNo questions.\n");
        assert!(none.cards.is_empty() && none.before.contains("No questions."));
    }

    #[test]
    fn every_lesson_splits_into_text_and_cards() {
        for ex in gpulab_exercises::registry() {
            let (n, p) = (ex.number(), LessonParts::parse(ex.lesson()));
            assert!(!p.cards.is_empty(), "lesson {n}");
            assert!(!p.before.contains(CHECK_YOURSELF_HEADING) && !p.after.contains(CHECK_YOURSELF_HEADING), "lesson {n}");
            assert_eq!(p.cards, lessons::check_yourself(ex.lesson()), "lesson {n}");
        }
    }
}
