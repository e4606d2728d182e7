//! The lab's two looks: the dark theme for a desk, and a light high-contrast "projector" theme
//! (black text on white, thicker strokes, chart colours that stay apart when a projector washes
//! them out). Widgets read colours from `ui.visuals()` (`warn_fg_color`, `error_fg_color`) or
//! from the helpers here, never a dark-only constant, so both themes stay legible.

use eframe::egui;
use egui::{Color32, Stroke, ThemePreference, Visuals};
use serde::{Deserialize, Serialize};

/// Which look the lab wears (persisted with the lab's state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Theme {
    #[default]
    Dark,
    Projector,
}

/// The dark theme's warning and error colours (the lab's colours before the projector theme).
const DARK_WARN: Color32 = super::results::WARN;
const DARK_ERROR: Color32 = Color32::from_rgb(235, 90, 80);

/// Okabe & Ito's colour-blind-safe palette without its yellow and orange (under 3:1 on white):
/// distinct on a washed-out projector, each at least WCAG's 3:1 for graphics.
const PROJECTOR_SERIES: [Color32; 5] = [
    Color32::from_rgb(0, 114, 178),
    Color32::from_rgb(213, 94, 0),
    Color32::from_rgb(0, 158, 115),
    Color32::from_rgb(204, 121, 167),
    Color32::from_rgb(0, 0, 0),
];

/// Makes `theme` the context's look: the dark one, or the light high-contrast one.
pub fn apply(ctx: &egui::Context, theme: Theme) {
    ctx.set_visuals_of(egui::Theme::Dark, dark());
    ctx.set_visuals_of(egui::Theme::Light, projector());
    ctx.set_theme(ThemePreference::from(egui_theme(theme)));
}

/// egui's dark or light for a lab theme.
pub fn egui_theme(theme: Theme) -> egui::Theme {
    match theme {
        Theme::Dark => egui::Theme::Dark,
        Theme::Projector => egui::Theme::Light,
    }
}

fn dark() -> Visuals {
    Visuals { warn_fg_color: DARK_WARN, error_fg_color: DARK_ERROR, ..Visuals::dark() }
}

/// Black on white; every outline at least 1.5 px so it survives a projector's blur.
fn projector() -> Visuals {
    let mut v = Visuals::light();
    let black = Color32::BLACK;
    v.panel_fill = Color32::WHITE;
    v.window_fill = Color32::WHITE;
    v.extreme_bg_color = Color32::WHITE;
    v.faint_bg_color = Color32::from_gray(236);
    v.code_bg_color = Color32::from_gray(228);
    v.weak_text_color = Some(Color32::from_gray(55));
    v.hyperlink_color = Color32::from_rgb(0, 60, 170);
    v.warn_fg_color = Color32::from_rgb(160, 70, 0);
    v.error_fg_color = Color32::from_rgb(180, 0, 0);
    v.window_stroke = Stroke::new(2.0, black);
    v.selection.bg_fill = Color32::from_rgb(0, 90, 190);
    v.selection.stroke = Stroke::new(2.0, Color32::WHITE);
    let w = &mut v.widgets;
    w.noninteractive.fg_stroke = Stroke::new(1.5, black);
    w.noninteractive.bg_stroke = Stroke::new(1.5, Color32::from_gray(70));
    w.noninteractive.bg_fill = Color32::WHITE;
    for (s, width) in [(&mut w.inactive, 1.5), (&mut w.hovered, 2.5), (&mut w.active, 3.0), (&mut w.open, 2.0)] {
        s.fg_stroke = Stroke::new(width, black);
        s.bg_stroke = Stroke::new(width, black);
    }
    w.inactive.bg_fill = Color32::from_gray(225);
    w.inactive.weak_bg_fill = Color32::from_gray(225);
    v
}

/// Series colours on the dark theme: the Okabe–Ito palette, light enough for a dark background.
const DARK_SERIES: [Color32; 6] = [
    Color32::from_rgb(86, 180, 233),
    Color32::from_rgb(230, 159, 0),
    Color32::from_rgb(0, 200, 150),
    Color32::from_rgb(220, 140, 190),
    Color32::from_rgb(240, 228, 66),
    Color32::from_gray(200),
];

/// A plot series' colour: the projector palette in the light theme, `DARK_SERIES` in the dark
/// one. Always given, so the legend drawn beside a chart matches its lines.
pub fn series_color(v: &Visuals, i: usize) -> Color32 {
    if v.dark_mode { DARK_SERIES[i % DARK_SERIES.len()] } else { PROJECTOR_SERIES[i % PROJECTOR_SERIES.len()] }
}

/// A plot line's width: thicker on the projector.
pub fn line_width(v: &Visuals) -> f32 {
    if v.dark_mode { 1.5 } else { 3.0 }
}

/// Markers on charts (e.g. "fits in memory"): orange on dark, a darker red-orange on white.
pub fn marker(v: &Visuals) -> Color32 {
    if v.dark_mode { Color32::from_rgb(230, 120, 80) } else { Color32::from_rgb(190, 50, 0) }
}

/// "Done" messages (e.g. files written).
pub fn good(v: &Visuals) -> Color32 {
    if v.dark_mode { Color32::from_rgb(110, 190, 110) } else { Color32::from_rgb(0, 110, 0) }
}

/// Informational notes (a hint, not a warning).
pub fn info(v: &Visuals) -> Color32 {
    if v.dark_mode { Color32::from_rgb(150, 190, 230) } else { Color32::from_rgb(0, 70, 160) }
}

/// A fixed colour made dark enough to read on white in the light theme (timeline stages).
pub fn on_background(v: &Visuals, c: Color32) -> Color32 {
    if v.dark_mode { c } else { Color32::from_rgb((c.r() as f32 * 0.72) as u8, (c.g() as f32 * 0.72) as u8, (c.b() as f32 * 0.72) as u8) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WCAG relative luminance contrast ratio.
    fn contrast(a: Color32, b: Color32) -> f32 {
        let lum = |c: Color32| {
            let ch = |x: u8| {
                let s = x as f32 / 255.0;
                if s <= 0.03928 { s / 12.92 } else { ((s + 0.055) / 1.055).powf(2.4) }
            };
            0.2126 * ch(c.r()) + 0.7152 * ch(c.g()) + 0.0722 * ch(c.b())
        };
        let (x, y) = (lum(a), lum(b));
        (x.max(y) + 0.05) / (x.min(y) + 0.05)
    }

    #[test]
    fn projector_colours_are_legible_on_white() {
        let v = projector();
        assert!(!v.dark_mode);
        assert_eq!(v.text_color(), Color32::BLACK);
        // WCAG AA for normal text is 4.5:1; every text colour the lab uses on the panel passes.
        for (name, c) in [
            ("warn", v.warn_fg_color),
            ("error", v.error_fg_color),
            ("weak", v.weak_text_color()),
            ("marker", marker(&v)),
            ("good", good(&v)),
            ("info", info(&v)),
            ("link", v.hyperlink_color),
        ] {
            let r = contrast(c, v.panel_fill);
            assert!(r >= 4.5, "{name} {c:?} has contrast {r:.2} on the panel");
        }
        // Chart series: at least WCAG's 3:1 for graphics against white, and no two alike.
        for (i, c) in PROJECTOR_SERIES.iter().enumerate() {
            assert!(contrast(*c, Color32::WHITE) >= 3.0, "series {i} {c:?} is too pale");
            for d in &PROJECTOR_SERIES[i + 1..] {
                assert_ne!(c, d);
            }
        }
    }

    #[test]
    fn dark_theme_keeps_the_labs_warning_colours() {
        let v = dark();
        assert!(v.dark_mode);
        assert_eq!(v.warn_fg_color, DARK_WARN);
        assert_eq!(v.error_fg_color, DARK_ERROR);
        assert_ne!(series_color(&v, 0), series_color(&v, 1));
        assert_ne!(series_color(&v, 0), series_color(&projector(), 0));
    }
}
