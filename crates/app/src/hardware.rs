//! The hardware panel: adapters (enumerated once on a background thread), the CPU with its live
//! use, and the driver's GPU telemetry (every source of device/monitor.rs: NVML, amdgpu sysfs,
//! DRM fdinfo — the same readers a run's monitor records), in a window the toolbar toggles. A
//! sampler thread refreshes the live figures about once a second and ends when the app drops
//! its handle.
//! The driver notice (no usable GPU driver: why and the fix) is drawn here too.

use eframe::egui;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use egui::RichText;

use gpulab_core::device::gpu::adapters::{self, AdapterSummary};
use gpulab_core::device::gpu::driver_help::{self, DriverNotice, Severity};
use gpulab_core::device::gpu::support::{Support, support};

use gpulab_core::device::monitor::{self, Missing, Sample};

#[derive(Clone, Debug, Default)]
pub struct Live {
    pub cpu_name: String,
    pub threads: usize,
    /// Overall CPU use, percent.
    pub cpu_use: Option<f32>,
    pub per_core: Vec<f32>,
    pub memory_used: u64,
    pub memory_total: u64,
    /// Every telemetry source's readings, each labelled with its source; empty where there is none.
    pub gpus: Vec<Sample>,
    /// The telemetry sources looked for and not found, and why (once the sampler has probed).
    pub missing: Option<Vec<Missing>>,
}

pub struct Hardware {
    /// Whether the window is shown (kept in `Saved::show_hardware`).
    pub open: bool,
    rx: Receiver<(Vec<AdapterSummary>, Option<DriverNotice>, Vec<Vec<Support>>)>,
    /// None while detecting.
    pub adapters: Option<Vec<AdapterSummary>>,
    /// Why no hardware GPU is usable and how to fix it (None when one is, or while detecting).
    pub notice: Option<DriverNotice>,
    /// Per adapter (same order): what it runs and why not (support.rs), computed with the list.
    pub support: Vec<Vec<Support>>,
    pub live: Arc<Mutex<Live>>,
    sampler_started: bool,
}

impl Hardware {
    /// Starts adapter enumeration in the background; `wake` repaints the UI when it is done.
    /// `open`: show the window (as saved).
    pub fn start(open: bool, wake: impl Fn() + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        let _ = std::thread::Builder::new().name("gpulab-adapters".into()).spawn(move || {
            let found = std::panic::catch_unwind(|| {
                let inst = adapters::instance();
                adapters::enumerate(&inst).iter().enumerate().map(|(i, a)| adapters::summarize(i, a)).collect::<Vec<_>>()
            })
            .unwrap_or_default();
            let notice = driver_help::detect(&found);
            let can = found.iter().map(support).collect();
            let _ = tx.send((found, notice, can));
            wake();
        });
        // Loading NVML can take a while: probed once here, off the UI thread, which shows
        // "probing…" until `monitor::telemetry_known` answers.
        let _ = std::thread::Builder::new().name("gpulab-telemetry-probe".into()).spawn(monitor::may_have_telemetry);
        let live = Live { cpu_name: gpulab_core::device::cpu::cpu_name(), threads: rayon::current_num_threads(), ..Default::default() };
        Hardware { open, rx, adapters: None, notice: None, support: Vec::new(), live: Arc::new(Mutex::new(live)), sampler_started: false }
    }

    /// The notice the lab shows as a banner: only a missing driver (a warning).
    pub fn banner(&self) -> Option<&DriverNotice> {
        self.notice.as_ref().filter(|n| n.severity == Severity::Warning)
    }

    pub fn poll(&mut self) {
        if self.adapters.is_none()
            && let Ok((a, notice, can)) = self.rx.try_recv()
        {
            self.adapters = Some(a);
            self.notice = notice;
            self.support = can;
        }
    }

    /// Starts the ~1 s sampler (CPU use, memory, GPU telemetry) the first time the panel is shown.
    fn ensure_sampler(&mut self, ctx: &egui::Context) {
        if self.sampler_started {
            return;
        }
        self.sampler_started = true;
        let weak: Weak<Mutex<Live>> = Arc::downgrade(&self.live);
        let ctx = ctx.clone();
        let _ = std::thread::Builder::new().name("gpulab-sampler".into()).spawn(move || sample_loop(weak, ctx));
    }

    /// The toolbar's toggle.
    pub fn toggle_ui(&mut self, ui: &mut egui::Ui) {
        ui.toggle_value(&mut self.open, "Hardware");
    }

    /// The window, when open (each frame); the live sampler starts the first time it shows.
    pub fn window(&mut self, ctx: &egui::Context) {
        if !self.open {
            return;
        }
        self.ensure_sampler(ctx);
        let mut open = true;
        egui::Window::new("Hardware").open(&mut open).default_size([520.0, 560.0]).vscroll(true).show(ctx, |ui| self.ui(ui));
        self.open = open;
    }

    fn ui(&mut self, ui: &mut egui::Ui) {
        if let Some(n) = &self.notice {
            notice_ui(ui, n, true);
            ui.separator();
        }
        ui.heading("GPU adapters");
        match &self.adapters {
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("detecting…");
                });
            }
            Some(list) if list.is_empty() => {
                ui.colored_label(ui.visuals().warn_fg_color, "No GPU adapter found — the CPU backend still works.");
            }
            Some(list) => {
                for (i, a) in list.iter().enumerate() {
                    let can = self.support.get(i).map(Vec::as_slice).unwrap_or_default();
                    egui::CollapsingHeader::new(RichText::new(format!("#{} {}", a.index, a.name)).strong())
                        .id_salt(("adapter", a.index))
                        .default_open(true)
                        .show(ui, |ui| {
                            if a.software {
                                ui.colored_label(
                                    ui.visuals().warn_fg_color,
                                    "Warning: software GPU: runs on your CPU — its numbers are your CPU's, not a GPU's",
                                );
                            }
                            egui::Grid::new(("adapter-grid", a.index)).num_columns(2).striped(true).show(ui, |ui| {
                                let mut row = |k: &str, v: String| {
                                    ui.label(k);
                                    ui.add(egui::Label::new(v).wrap());
                                    ui.end_row();
                                };
                                row("backend", a.backend.clone());
                                row("device type", a.device_type.clone());
                                row("driver", format!("{} {}", a.driver, a.driver_info).trim().to_string());
                                row("use as", format!("gpu:{}", a.index));
                                row(
                                    "features",
                                    if a.features.is_empty() {
                                        "none of the optional ones".into()
                                    } else {
                                        a.features
                                            .iter()
                                            .map(|f| gpulab_core::device::gpu::adapters::feature_label(f))
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    },
                                );
                                let l = &a.limits;
                                row("max buffer", bytes(l.max_buffer_size));
                                row("max storage binding", bytes(l.max_storage_buffer_binding_size));
                                row("workgroup storage", bytes(l.max_compute_workgroup_storage_size as u64));
                                row("invocations / workgroup", l.max_compute_invocations_per_workgroup.to_string());
                                row("workgroup size x", l.max_compute_workgroup_size_x.to_string());
                                row("workgroups / dimension", l.max_compute_workgroups_per_dimension.to_string());
                                row("storage buffers / stage", l.max_storage_buffers_per_shader_stage.to_string());
                            });
                            support_ui(ui, can);
                        });
                }
            }
        }
        ui.separator();
        let live = self.live.lock().map(|l| l.clone()).unwrap_or_default();
        ui.heading("CPU");
        ui.label(format!("{} — {}", live.cpu_name, gpulab_core::format::plural(live.threads as u64, "thread")));
        match live.cpu_use {
            Some(u) => {
                ui.add(egui::ProgressBar::new(u / 100.0).text(format!("CPU use {u:.0}% (measured, ~1 s)")));
                if !live.per_core.is_empty() {
                    let cores: Vec<String> = live.per_core.iter().map(|c| format!("{c:.0}%")).collect();
                    ui.small(format!("per core: {}", cores.join("  ")));
                }
                if live.memory_total > 0 {
                    ui.label(format!("memory {} of {} in use (measured)", bytes(live.memory_used), bytes(live.memory_total)));
                }
            }
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("measuring CPU use…");
                });
            }
        }
        if monitor::telemetry_known().is_none() {
            ui.separator();
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("GPU telemetry: probing…");
            });
        } else if live.gpus.is_empty()
            && let Some(missing) = &live.missing
        {
            // One calm line; the loader's own errors one click away.
            ui.separator();
            ui.label("No GPU telemetry on this machine.");
            egui::CollapsingHeader::new(RichText::new("details").small()).id_salt("telemetry-missing").default_open(false).show(ui, |ui| {
                for m in missing {
                    ui.add(egui::Label::new(RichText::new(format!("{}: {}", m.source, m.why)).small()).wrap());
                }
                if missing.is_empty() {
                    ui.small("A source was found but has given no reading yet.");
                }
            });
        }
        if monitor::telemetry_known().is_some() && !live.gpus.is_empty() {
            ui.separator();
            ui.heading("GPU telemetry from the driver (measured)");
            for g in &live.gpus {
                ui.label(RichText::new(&g.device).strong());
                ui.label(g.describe());
                ui.add(egui::Label::new(RichText::new(format!("from {} — {}", g.source, g.origin)).weak()).wrap());
            }
        }
    }
}

/// What an adapter runs (✔) and what it refuses, with the refusal the run would give (✘).
fn support_ui(ui: &mut egui::Ui, can: &[Support]) {
    for s in can {
        match &s.refusal {
            None => ui.label(format!("✔ {}", s.what)),
            Some(why) => ui.add(egui::Label::new(RichText::new(format!("✘ {}: {why}", s.what)).color(ui.visuals().warn_fg_color)).wrap()),
        };
    }
}

/// The driver notice: headline, why, and (when `fixes_open`, or on click) the fixes for this OS.
pub fn notice_ui(ui: &mut egui::Ui, n: &DriverNotice, fixes_open: bool) {
    let colour = match n.severity {
        Severity::Warning => ui.visuals().warn_fg_color,
        Severity::Info => super::theme::info(ui.visuals()),
    };
    ui.label(RichText::new(&n.headline).color(colour).strong());
    ui.add(egui::Label::new(&n.why).wrap());
    egui::CollapsingHeader::new(format!("How to fix it on {}", std::env::consts::OS))
        .id_salt("driver-fixes")
        .default_open(fixes_open)
        .show(ui, |ui| {
            for f in &n.fixes {
                ui.add(egui::Label::new(format!("• {f}")).wrap());
            }
        });
}

fn sample_loop(weak: Weak<Mutex<Live>>, ctx: egui::Context) {
    let Ok(mut sys) = sysinfo::System::new() else { return };
    let mut sources = monitor::probe();
    if let Some(live) = weak.upgrade()
        && let Ok(mut l) = live.lock()
    {
        l.missing = Some(sources.missing.clone());
    }
    // CPU use is measured between two refreshes.
    sys.refresh_cpu_usage();
    std::thread::sleep(Duration::from_millis(300));
    loop {
        sys.refresh_cpu_usage();
        sys.refresh_memory();
        let gpus = sources.read_all();
        let Some(live) = weak.upgrade() else { return };
        if let Ok(mut l) = live.lock() {
            l.cpu_use = Some(sys.global_cpu_usage());
            l.per_core = sys.cpus().iter().map(|c| c.usage()).collect();
            l.memory_used = sys.used_memory();
            l.memory_total = sys.total_memory();
            l.gpus = gpus;
        }
        drop(live);
        ctx.request_repaint();
        std::thread::sleep(Duration::from_millis(1000));
    }
}

pub fn bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f >= K * K * K {
        format!("{:.1} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{b} B")
    }
}
