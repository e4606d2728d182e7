//! Presenter mode: the UI scale (`Presenter::ui_scale`, the one value the toolbar and Ctrl +/−/0
//! both change, kept in egui's zoom factor each frame), the projector theme, and the stage layout
//! (lesson and settings hidden; the run's charts, figures and verdict get the screen). The
//! `Presenter` owns all three, and `Saved::presenter` keeps them.

use eframe::egui;
use egui::{RichText, Role, WidgetInfo};
use serde::{Deserialize, Serialize};

use super::shortcuts::{self, tip};
use super::theme::{self, Theme};

/// The UI scale's range: small enough for a laptop, large enough for the back of a room.
pub const MIN_SCALE: f32 = 0.5;
pub const MAX_SCALE: f32 = 3.0;

/// What presenter mode keeps across restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Presenter {
    /// egui's zoom factor (1.0 = 100 %).
    pub ui_scale: f32,
    pub theme: Theme,
    /// The stage layout: results only.
    pub stage: bool,
}

impl Default for Presenter {
    fn default() -> Self {
        Presenter { ui_scale: 1.0, theme: Theme::Dark, stage: false }
    }
}

/// A scale from storage or egui's zoom, kept in range (a damaged value means 100 %).
fn sane_scale(s: f32) -> f32 {
    if s.is_finite() { s.clamp(MIN_SCALE, MAX_SCALE) } else { 1.0 }
}

/// Screenshot mode's presenter settings (it starts from defaults, not the saved state):
/// `GPULAB_SCREENSHOT_THEME=dark|projector`, `GPULAB_SCREENSHOT_SCALE=1.5` (0.5–3),
/// `GPULAB_SCREENSHOT_STAGE=1`. A bad value is an error naming the variable and what it takes.
pub fn from_env() -> gpulab_core::Result<Presenter> {
    let bad = |var: &str, v: &str, want: &str| gpulab_core::Error::Screenshot(format!("{var}={v:?}: expected {want}"));
    let mut p = Presenter::default();
    if let Ok(v) = std::env::var("GPULAB_SCREENSHOT_THEME") {
        p.theme = match v.trim() {
            "dark" => Theme::Dark,
            "projector" => Theme::Projector,
            _ => return Err(bad("GPULAB_SCREENSHOT_THEME", &v, "dark or projector")),
        };
    }
    if let Ok(v) = std::env::var("GPULAB_SCREENSHOT_SCALE") {
        p.ui_scale = v
            .trim()
            .parse::<f32>()
            .ok()
            .filter(|s| (MIN_SCALE..=MAX_SCALE).contains(s))
            .ok_or_else(|| bad("GPULAB_SCREENSHOT_SCALE", &v, &format!("a number from {MIN_SCALE} to {MAX_SCALE}")))?;
    }
    if let Ok(v) = std::env::var("GPULAB_SCREENSHOT_STAGE") {
        p.stage = match v.trim() {
            "1" => true,
            "0" => false,
            _ => return Err(bad("GPULAB_SCREENSHOT_STAGE", &v, "1 or 0")),
        };
    }
    Ok(p)
}

impl Presenter {
    /// Applies the saved scale and theme to a new context.
    pub fn start(&mut self, ctx: &egui::Context) {
        self.ui_scale = sane_scale(self.ui_scale);
        ctx.set_zoom_factor(self.ui_scale);
        theme::apply(ctx, self.theme);
    }

    /// Each frame: keeps egui's zoom at the saved scale (the one truth, which the toolbar and
    /// Ctrl +/−/0 change through `step_scale`; egui's own keyboard zoom is off so nothing else
    /// moves it, and a start-up pass that drops a pending zoom cannot lose the saved one), and
    /// puts the chosen theme back if something else (a host setting its own theme after the
    /// app was built) changed it.
    pub fn tick(&mut self, ctx: &egui::Context) {
        if ctx.theme() != theme::egui_theme(self.theme) {
            theme::apply(ctx, self.theme);
        }
        if ctx.options(|o| o.zoom_with_keyboard) {
            ctx.options_mut(|o| o.zoom_with_keyboard = false);
        }
        self.ui_scale = sane_scale(self.ui_scale);
        if ctx.zoom_factor() != self.ui_scale {
            ctx.set_zoom_factor(self.ui_scale);
        }
    }

    /// One step of the UI scale (`+1` larger, `-1` smaller, `0` back to 100 %), in tenths as
    /// browsers and `egui::gui_zoom` do.
    pub fn step_scale(&mut self, ctx: &egui::Context, step: i32) {
        self.ui_scale = if step == 0 { 1.0 } else { sane_scale(((self.ui_scale + 0.1 * step as f32) * 10.0).round() / 10.0) };
        ctx.set_zoom_factor(self.ui_scale);
    }

    pub fn set_theme(&mut self, ctx: &egui::Context, t: Theme) {
        self.theme = t;
        theme::apply(ctx, t);
    }

    /// The toolbar's presenter toggles, drawn right to left: stage and theme.
    pub fn toggles_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        ui.toggle_value(&mut self.stage, "Stage").on_hover_text(tip(
            &ctx,
            "Stage layout: hide the lesson and settings so the charts, figures and verdict fill the screen",
            &shortcuts::STAGE,
        ));
        let mut projector = self.theme == Theme::Projector;
        if ui
            .toggle_value(&mut projector, "Projector theme")
            .on_hover_text("Black on white with thick lines and strong chart colours, for projectors and bright rooms")
            .changed()
        {
            self.set_theme(&ctx, if projector { Theme::Projector } else { Theme::Dark });
        }
    }

    /// The UI scale controls, drawn left to right at the window's left edge: a change of scale
    /// grows the window's contents from there, so the buttons stay under the pointer and a
    /// second click on "+" zooms again instead of landing on another control. The percentage
    /// is padded to one width, so "90%" and "100%" do not shift "+".
    pub fn scale_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let scale = self.ui_scale;
        let pct = (scale * 100.0).round();
        // Icon-only and number buttons get a spoken label for screen readers (and tests).
        let minus = ui.add_enabled(scale > MIN_SCALE + 1e-3, egui::Button::new("−")).on_hover_text(tip(
            &ctx,
            "Smaller",
            &egui::gui_zoom::kb_shortcuts::ZOOM_OUT,
        ));
        minus.widget_info(|| WidgetInfo::labeled(Role::Button, minus.enabled(), "Zoom out"));
        if minus.clicked() {
            self.step_scale(&ctx, -1);
        }
        let reset = ui.button(RichText::new(format!("{pct:>3.0}%")).monospace()).on_hover_text(tip(
            &ctx,
            "UI scale; click for 100%",
            &egui::gui_zoom::kb_shortcuts::ZOOM_RESET,
        ));
        reset.widget_info(|| WidgetInfo::labeled(Role::Button, true, format!("UI scale {pct:.0}%: reset to 100%")));
        if reset.clicked() {
            self.step_scale(&ctx, 0);
        }
        let plus = ui.add_enabled(scale < MAX_SCALE - 1e-3, egui::Button::new("+")).on_hover_text(tip(
            &ctx,
            "Larger",
            &egui::gui_zoom::kb_shortcuts::ZOOM_IN,
        ));
        plus.widget_info(|| WidgetInfo::labeled(Role::Button, plus.enabled(), "Zoom in"));
        if plus.clicked() {
            self.step_scale(&ctx, 1);
        }
    }
}
