//! The lessons' "Check yourself" cards. Each exercise embeds its own lesson (`Exercise::lesson`,
//! an `include_str!` of `lessons/NN-….md`), so the app needs no files at run time.

/// One "Check yourself" question of a lesson, with its answer when the lesson gives one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub question: String,
    pub answer: Option<String>,
}

/// The heading every lesson's questions sit under.
pub const CHECK_YOURSELF_HEADING: &str = "## Check yourself";

/// The lesson without its "Check yourself" section, for views that draw the cards themselves.
pub fn without_check_yourself(markdown: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in markdown.lines() {
        if line.starts_with("## ") {
            skipping = line.starts_with(CHECK_YOURSELF_HEADING);
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The lesson's "Check yourself" questions as cards. The format, in the lesson's markdown: under a
/// heading starting with `## Check yourself`, each question is a numbered item (`1. …`); lines
/// indented under it continue it, and the first indented line starting with `*Answer:*` begins
/// its answer, which runs to the next item. The section ends at the next `## ` heading.
pub fn check_yourself(markdown: &str) -> Vec<Card> {
    let mut cards: Vec<Card> = Vec::new();
    let mut inside = false;
    let mut in_answer = false;
    for line in markdown.lines() {
        if line.starts_with("## ") {
            inside = line.starts_with(CHECK_YOURSELF_HEADING);
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(rest) = numbered_item(line) {
            cards.push(Card { question: rest.trim().to_string(), answer: None });
            in_answer = false;
            continue;
        }
        let Some(card) = cards.last_mut() else { continue };
        let body = line.trim();
        if body.is_empty() || !line.starts_with(' ') {
            if !body.is_empty() {
                in_answer = false;
            }
            continue;
        }
        if let Some(a) = body.strip_prefix("*Answer:*") {
            card.answer = Some(a.trim().to_string());
            in_answer = true;
        } else if in_answer {
            let a = card.answer.get_or_insert_with(String::new);
            a.push_str(if a.is_empty() { "" } else { "\n" });
            a.push_str(body);
        } else {
            card.question.push(' ');
            card.question.push_str(body);
        }
    }
    cards
}

/// `12. text` → `text`.
fn numbered_item(line: &str) -> Option<&str> {
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    line[digits..].strip_prefix(". ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lesson_has_check_yourself_questions() {
        for ex in crate::registry() {
            let (n, cards) = (ex.number(), check_yourself(ex.lesson()));
            assert!(cards.len() >= 3, "lesson {n} has {} check-yourself questions", cards.len());
            assert!(cards.iter().all(|c| !c.question.is_empty()), "lesson {n} has an empty question");
        }
    }

    /// Every question has its worked answer (how to get it from the report, what to expect and
    /// why), and no answer swallowed the next question.
    #[test]
    fn every_check_yourself_question_has_an_answer() {
        for ex in crate::registry() {
            let (n, cards) = (ex.number(), check_yourself(ex.lesson()));
            for (i, c) in cards.iter().enumerate() {
                let a = c.answer.as_deref().unwrap_or("");
                assert!(a.len() >= 80, "lesson {n}, question {}: no answer (or a stub): {a:?}", i + 1);
                assert!(
                    !a.contains("*Answer:*") && !c.question.contains("*Answer:*"),
                    "lesson {n}, question {}: two answers ran together",
                    i + 1
                );
            }
            let count = ex.lesson().lines().filter(|l| l.trim_start().starts_with("*Answer:*")).count();
            assert_eq!(count, cards.len(), "lesson {n}: answers outside the Check yourself list");
        }
    }

    #[test]
    fn cards_parse_questions_continuations_and_answers() {
        let md = "# T\n\n## Check yourself against your numbers\n\n1. First?\n   More of it.\n   *Answer:* Because.\n   Second line.\n2. Second?\n\n## Going further\n\n3. not a card\n";
        let cards = check_yourself(md);
        assert_eq!(
            cards,
            vec![
                Card { question: "First? More of it.".into(), answer: Some("Because.\nSecond line.".into()) },
                Card { question: "Second?".into(), answer: None },
            ]
        );
        let rest = without_check_yourself(md);
        assert!(rest.contains("## Going further") && !rest.contains("First?"), "{rest}");
    }
}
