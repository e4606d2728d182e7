//! The status bar: the UI's frame time (measured) and the GPU adapters found, a software one
//! named as such.

use eframe::egui;
use egui::RichText;

use super::frame_stats::FrameStats;
use super::hardware::Hardware;

pub(crate) fn show(ui: &mut egui::Ui, frames: &FrameStats, hardware: &Hardware) {
    ui.horizontal(|ui| {
        match frames.median_ms() {
            Some(ms) => ui.small(format!("frame {ms:.1} ms (median of last 120, measured)")),
            None => ui.small("frame — ms"),
        };
        ui.separator();
        match &hardware.adapters {
            None => {
                ui.small("GPU adapters: detecting…");
            }
            Some(a) if a.is_empty() => {
                ui.small(RichText::new("no GPU adapter found — CPU only").color(ui.visuals().warn_fg_color));
            }
            Some(a) => {
                let names: Vec<String> = a
                    .iter()
                    .map(|a| if a.software { format!("{} (software GPU: runs on your CPU)", a.name) } else { a.name.clone() })
                    .collect();
                ui.small(format!("GPU: {}", names.join(", ")));
            }
        }
    });
}
