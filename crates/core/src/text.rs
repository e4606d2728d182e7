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
/// tab or a carriage return would be taken for a formula, so it gets a leading `'` (OWASP's
/// rule for CSV injection). Only for text; numbers gpulab formats itself are written as they are.
pub fn csv_text_cell(s: &str) -> Cow<'_, str> {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) { Cow::Owned(format!("'{s}")) } else { Cow::Borrowed(s) }
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
        assert_eq!(csv_text_cell("RTX 4090"), "RTX 4090");
        assert_eq!(csv_text_cell(""), "");
    }
}
