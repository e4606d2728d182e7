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
    CommonMarkViewer::new().show(ui, cache, &parts.before);
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
        CommonMarkViewer::new().show(ui, cache, &parts.after);
    }
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
                    CommonMarkViewer::new().show(ui, cache, answer);
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
