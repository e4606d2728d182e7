//! Strings that came from a file (a student's report, a file name, a scenario) made safe for
//! where they go: a terminal, which would obey their escape sequences, and a spreadsheet,
//! which would run a cell that starts like a formula.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters a terminal may act on instead of showing: C0 and C1 controls, DEL, and the
/// bidirectional overrides that make text show in another order than it reads ("Trojan
/// Source"). `keep_newlines` lets line breaks through for multi-line text.
fn is_unsafe(c: char, keep_newlines: bool) -> bool {
    (c.is_control() && !(keep_newlines && c == '\n'))
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c, keep_newlines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c, keep_newlines) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` for one line of a terminal (a table cell, a file name): every control character,
/// line breaks and tabs included, shown escaped as `\u{1b}`.
pub fn terminal_line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` for a terminal, keeping its line breaks (a verdict, an error message).
pub fn terminal_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// A text cell for a CSV that a spreadsheet opens: one that starts with `=`, `+`, `-`, `@`, a
/// tab or a carriage return, or with whitespace or a line break before one of those (spreadsheets
/// trim it), would be taken for a formula, so it gets a leading `'` (OWASP's rule for CSV
/// injection). Only for text; numbers gpulab formats itself are written as they are.
pub fn csv_text_cell(s: &str) -> Cow<'_, str> {
    let formula = |t: &str| t.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if formula(s) || formula(s.trim_start()) { Cow::Owned(format!("'{s}")) } else { Cow::Borrowed(s) }
}

/// A list of text items joined by `sep` as one CSV cell, each item guarded as `csv_text_cell`
/// guards a cell: a formula inside the list stays text when a spreadsheet splits it.
pub fn csv_text_list(items: &[String], sep: &str) -> String {
    items.iter().map(|i| csv_text_cell(i)).collect::<Vec<_>>().join(sep)
}

/// `s` without the characters a terminal or a spreadsheet may act on (`is_unsafe`, line breaks
/// included): for a file meant for other programs (class.csv), where an escape shown as text
/// would only be noise.
pub fn without_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c, false)) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.chars().filter(|&c| !is_unsafe(c, false)).collect())
}

/// Characters Markdown (and the HTML it may carry) gives a meaning: shown with a backslash,
/// CommonMark's escape for any ASCII punctuation.
const MARKDOWN_SPECIAL: [char; 8] = ['\\', '`', '<', '>', '&', '[', ']', '|'];

/// `s` as Markdown that shows as written, on one line: controls and line breaks escaped as for a
/// terminal (`\u{1b}`), and the characters that would start HTML (`<script>`, `<img onerror>`),
/// an entity, a link, code or a table column escaped with a backslash.
pub fn markdown_text(s: &str) -> Cow<'_, str> {
    let line = escape(s, false);
    if !line.contains(MARKDOWN_SPECIAL) {
        return line;
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if MARKDOWN_SPECIAL.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_controls_and_bidi_overrides() {
        assert_eq!(terminal_line("plain — ünïcode"), "plain — ünïcode");
        assert!(matches!(terminal_line("plain"), Cow::Borrowed(_)));
        assert_eq!(terminal_line("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(terminal_line("x\u{9b}31m\u{7f}"), "x\\u{9b}31m\\u{7f}");
        assert_eq!(terminal_line("evil\u{202e}fdp.exe"), "evil\\u{202e}fdp.exe");
        assert_eq!(terminal_line("two\nlines\r\t"), "two\\u{a}lines\\u{d}\\u{9}");
        assert_eq!(terminal_text("two\nlines\x07"), "two\nlines\\u{7}");
    }

    #[test]
    fn csv_formula_prefixes_are_neutralised() {
        for bad in ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"] {
            assert_eq!(csv_text_cell(bad), format!("'{bad}"));
        }
        for bad in [" =1", "\n=1", " \t@x", "\r\n+cmd", "  -2"] {
            assert_eq!(csv_text_cell(bad), format!("'{bad}"));
        }
        assert_eq!(csv_text_list(&["a".into(), " =b".into()], "; "), "a; ' =b");
        assert_eq!(csv_text_cell("RTX 4090"), "RTX 4090");
        assert_eq!(csv_text_cell(""), "");
    }

    #[test]
    fn markdown_shows_html_and_controls_as_text() {
        assert!(matches!(markdown_text("plain text 1.5 ×"), Cow::Borrowed(_)));
        assert_eq!(markdown_text("<img src=x onerror=alert(1)>"), "\\<img src=x onerror=alert(1)\\>");
        assert_eq!(markdown_text("a|b\n# h\x1b"), "a\\|b\\\\u{a}# h\\\\u{1b}");
        assert_eq!(without_controls("a\x1b[2Jb\n\u{202e}c"), "a[2Jbc");
    }
}
