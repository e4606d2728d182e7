//! `size=auto`: the model sized from the adapter's measured peak, so that a run takes about the
//! same time on a laptop and on a workstation ("scaled to this adapter").
//!
//! Choosing the preset only sets `size=auto` (the GUI applies presets on the UI thread, which
//! must not measure). The run resolves it before training: it opens the sizing backend, reads
//! its peak FLOP/s from gpulab's cache or measures it (`profile::peaks`, a second or two), and
//! scales the `hidden` widths by one factor so that the run's training FLOPs take `target_s`
//! seconds at that peak. The report's `config` holds the chosen widths (so a `size=as-set` run
//! with them repeats the model), and its figures say the peak, where it came from, the widths
//! and the estimate; real training runs below the matmul peak, so the measured time is longer.

use super::settings::training::Training;
use super::settings::{self, Settings};
use super::sink::{Event, Sink};
use gpulab_core::device::Device;
use gpulab_core::error::Result;
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;
use gpulab_systems::data::Dataset;
use gpulab_systems::profile::peaks::{self, Peaks};
use gpulab_systems::report::{Figure, Provenance};

pub const SIZE: &str = "size";
pub const TARGET: &str = "target_s";
/// The widest hidden layer `size=auto` chooses: a 8192-wide MLP already needs hundreds of MiB
/// for weights, gradients and optimizer state.
pub const MAX_WIDTH: u64 = 8192;
const MIN_WIDTH: u64 = 16;
/// Widths are rounded to a multiple of this (GEMM tiles like it).
const ROUND: u64 = 16;

/// Adds the `size` and `target_s` settings, `size` as set by default.
pub fn settings(s: Settings) -> Settings {
    settings_with(s, "as-set", 20.0)
}

/// Adds the `size` and `target_s` settings with these defaults: an exercise whose first run
/// should show its effect on any hardware defaults to `auto`.
pub fn settings_with(s: Settings, size: &str, target_s: f64) -> Settings {
    s.add(
        SIZE,
        "Model size",
        "as-set: the hidden widths above · auto: the run scales them from the backends' measured peak FLOP/s (cached per adapter) so training takes about the target time (an MLP's; a CNN keeps its widths)",
        settings::choice(size, &["as-set", "auto"]),
    )
    .add(TARGET, "Target time (s)", "size=auto: seconds the run's training arithmetic should take at the measured peaks", settings::float(target_s, 1.0, 3600.0))
}

/// The "big enough for a GPU" data set: 64×64 RGB shapes (12,288 inputs per sample).
pub const BIG_DATASET: &str = "shapes:res=64,channels=3,n=4000";

/// The three presets exercises 1–3 share, each described by the exercise: "as in the lesson"
/// (the defaults), "big enough for a GPU" (a 2048-wide MLP on BIG_DATASET, plus `big`) and
/// "scaled to this adapter" (`size=auto` on BIG_DATASET, plus `scaled`).
pub fn presets(
    lesson: &'static str,
    big: (&'static str, &[(&'static str, &str)]),
    scaled: (&'static str, &[(&'static str, &str)]),
) -> Vec<super::Preset> {
    use super::Preset;
    let with = |base: &[(&'static str, &str)], extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        base.iter().chain(extra).map(|(k, v)| (*k, v.to_string())).collect()
    };
    vec![
        Preset::new("as in the lesson", lesson, &[]),
        Preset {
            name: "big enough for a GPU",
            description: big.0,
            overrides: with(&[("dataset", BIG_DATASET), ("hidden", "2048,2048"), ("lr", "0.01"), (SIZE, "as-set")], big.1),
        },
        Preset {
            name: "scaled to this adapter",
            description: scaled.0,
            overrides: with(&[("dataset", BIG_DATASET), ("lr", "0.01"), (SIZE, "auto")], scaled.1),
        },
    ]
}

/// The preset of exercises whose default is `size=auto`: the lesson's small model as set, too
/// small for a GPU to win (the failure mode the default avoids).
pub fn too_small_preset(description: &'static str) -> super::Preset {
    super::Preset::new("too small for a GPU", description, &[(SIZE, "as-set")])
}

pub use super::settings::training::trained;

/// The settings `size=auto` replaces at run time (the lab marks them so), when `s` asks for it.
pub fn overridden(s: &Settings, key: &str) -> bool {
    matches!(key, "hidden" | "epochs") && Training::parse(s).is_ok_and(|t| sizes(&t))
}

/// True when `size=auto` will size the model: the setting says so and the model is the MLP
/// (the cost model counts an MLP's matmuls; a CNN keeps its widths, and its report says so).
fn sizes(t: &Training) -> bool {
    let cnn = t.model.as_ref().is_some_and(|m| m != "mlp");
    t.size.as_ref().is_some_and(|(size, _)| size == "auto") && !cnn
}

/// What `size=auto` chose and from what.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    /// The backends whose peaks sized the model, as labelled in the report.
    pub device: String,
    /// The peak the plan used: one backend's, or for several that train one after another the
    /// rate at which they finish the same FLOPs together (1 / Σ 1/peak).
    pub peak: Peaks,
    /// True when every peak came from the cache (measured by an earlier run on this adapter).
    pub cached: bool,
    /// Each backend's label, peak FLOP/s and whether it came from the cache.
    pub each: Vec<(String, f64, bool)>,
    pub target_s: f64,
    pub plan: Plan,
}

/// The model and epochs for a FLOP budget (`plan`).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub hidden: Vec<u64>,
    pub epochs: u64,
    /// The run's training and validation FLOPs with these widths and epochs.
    pub flops: f64,
    /// True when the widths hit MIN_WIDTH or MAX_WIDTH and the epochs 1 or MAX_EPOCHS, so the
    /// estimate differs from the target.
    pub clamped: bool,
    /// True when the widths as set already take longer than the target and the exercise only
    /// grows a model (exercise 6: a smaller one would show less of data parallelism).
    pub kept: bool,
}

/// The most epochs `size=auto` sets when the widest model is still too quick.
pub const MAX_EPOCHS: u64 = 1000;

impl Sizing {
    pub fn estimated_s(&self) -> f64 {
        self.plan.flops / self.peak.flops_per_s.max(1.0)
    }

    fn peak_provenance(cached: bool) -> Provenance {
        if cached {
            Provenance::derived("a measurement an earlier run cached for this adapter, driver and gpulab version")
        } else {
            Provenance::Measured
        }
    }

    /// The report's figures: each peak, the widths (and epochs) chosen, the estimate.
    pub fn figures(&self) -> Vec<Figure> {
        let from = format!("{}'s measured peak and target_s = {} s", self.device, self.target_s);
        let mut f: Vec<Figure> = self
            .each
            .iter()
            .map(|(name, flops, cached)| Figure {
                label: format!("{name} matmul peak (sized the model)"),
                value: flops / 1e9,
                unit: "GFLOP/s".into(),
                provenance: Self::peak_provenance(*cached),
            })
            .collect();
        for (i, w) in self.plan.hidden.iter().enumerate() {
            f.push(Figure {
                label: format!("auto-sized hidden layer {}", i + 1),
                value: *w as f64,
                unit: "units".into(),
                provenance: Provenance::derived(&from),
            });
        }
        f.push(Figure {
            label: "auto-sized epochs".into(),
            value: self.plan.epochs as f64,
            unit: "".into(),
            provenance: Provenance::derived(&from),
        });
        f.push(Figure {
            label: "estimated training arithmetic at that peak".into(),
            value: self.estimated_s(),
            unit: "s".into(),
            provenance: Provenance::derived(&format!("{:.3e} FLOPs ÷ the peak", self.plan.flops)),
        });
        f
    }

    pub fn note(&self) -> String {
        let source = if self.cached { "cached from an earlier measurement" } else { "measured at the start of this run" };
        let widths = self.plan.hidden.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let clamp = if self.plan.clamped {
            format!(
                " A limit was reached (widths {MIN_WIDTH}..={MAX_WIDTH}, 1..={MAX_EPOCHS} epochs), so the estimate differs from the target."
            )
        } else {
            String::new()
        };
        let peaks = self.each.iter().map(|(n, p, _)| format!("{n} {:.1} GFLOP/s", p / 1e9)).collect::<Vec<_>>().join(", ");
        if self.plan.kept {
            return format!(
                "size=auto: the hidden layers as set ({widths}) already take about {:.1} s of arithmetic at the measured peak ({peaks}; {source}), at least the target of {} s, so they were kept: a smaller model would show less.",
                self.estimated_s(),
                self.target_s
            );
        }
        format!(
            "size=auto: hidden layers {widths} and {}, chosen so the run's {:.2e} FLOPs take about {:.1} s at the measured peak{} ({peaks}; {source}). Training runs below a large matmul's peak, so the measured time is longer.{clamp}",
            gpulab_core::format::plural(self.plan.epochs, "epoch"),
            self.plan.flops,
            self.estimated_s(),
            if self.each.len() > 1 { "s of the backends, one after another" } else { "" }
        )
    }
}

/// Adds what `size=auto` chose to the report: its figures after the exercise's own (the key
/// figure stays first) and its note; or that a CNN kept its widths.
pub fn annotate(sizing: Option<&Sizing>, report: &mut gpulab_systems::report::Report) {
    if let Some(z) = sizing {
        report.figures.extend(z.figures());
        report.notes.push(z.note());
    } else if report.config.get(SIZE).is_some_and(|v| v == "auto") {
        report.notes.push("size=auto sizes an MLP's hidden layers from the measured peak; this CNN kept the hidden widths as set.".into());
    }
}

/// Σ d_i·d_{i+1} over the MLP's layers: the multiply-adds of one sample's forward pass.
pub fn layer_products(features: usize, hidden: &[u64], classes: usize) -> f64 {
    let dims: Vec<f64> =
        std::iter::once(features as f64).chain(hidden.iter().map(|&h| h as f64)).chain(std::iter::once(classes as f64)).collect();
    dims.windows(2).map(|w| w[0] * w[1]).sum()
}

/// FLOPs of one pass over the data per multiply-add of the model: 6 per training sample
/// (forward, gradient of the weights, gradient of the input) and 2 per validation sample.
pub fn pass_flops(train: usize, val: usize) -> f64 {
    6.0 * train as f64 + 2.0 * val as f64
}

/// Scales `hidden` by one factor k so that `layer_products` ≈ `products`; widths rounded to a
/// multiple of 16 within MIN_WIDTH..=MAX_WIDTH. Returns the widths and whether one was clamped.
pub fn scale_hidden(features: usize, hidden: &[u64], classes: usize, products: f64) -> (Vec<u64>, bool) {
    let h: Vec<f64> = hidden.iter().map(|&x| x as f64).collect();
    let (Some(first), Some(last)) = (h.first(), h.last()) else { return (Vec::new(), false) };
    // products(k) = a·k² + b·k
    let a: f64 = h.windows(2).map(|w| w[0] * w[1]).sum();
    let b = features as f64 * first + last * classes as f64;
    let k = if a > 0.0 { (-b + (b * b + 4.0 * a * products.max(0.0)).sqrt()) / (2.0 * a) } else { products / b.max(1.0) };
    let mut clamped = false;
    let widths = h
        .iter()
        .map(|&x| {
            let w = ((x * k / ROUND as f64).round() as u64).saturating_mul(ROUND);
            let c = w.clamp(MIN_WIDTH, MAX_WIDTH);
            clamped |= c != w;
            c
        })
        .collect();
    (widths, clamped)
}

/// The run's shape, for `plan`: the data set's dimensions, and how many passes the run makes:
/// `runs` trainings of `epochs` epochs each plus `extra_passes` that do not scale with `epochs`
/// (exercise 3's underflow demo).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub features: usize,
    pub classes: usize,
    pub train: usize,
    pub val: usize,
    pub epochs: u64,
    pub runs: f64,
    pub extra_passes: f64,
}

impl Shape {
    fn flops(&self, hidden: &[u64], epochs: u64) -> f64 {
        (self.runs * epochs as f64 + self.extra_passes)
            * pass_flops(self.train, self.val)
            * layer_products(self.features, hidden, self.classes)
    }
}

/// The widths (scaled from `hidden`) and epochs whose FLOPs come closest to `budget`: widths
/// first; when even the widest model is too quick (or the narrowest too slow), epochs.
pub fn plan(shape: &Shape, hidden: &[u64], budget: f64) -> Plan {
    let passes = shape.runs * shape.epochs as f64 + shape.extra_passes;
    let per_product = passes * pass_flops(shape.train, shape.val);
    let (hidden, mut clamped) = scale_hidden(shape.features, hidden, shape.classes, budget / per_product.max(1.0));
    let mut epochs = shape.epochs;
    if clamped {
        // Widths alone cannot meet the budget: whole epochs, at least one, make up the rest
        // (the demo's extra passes do not grow with epochs).
        let per_epoch = shape.flops(&hidden, 1) - shape.flops(&hidden, 0);
        let wanted = ((budget - shape.flops(&hidden, 0)) / per_epoch.max(1.0)).round();
        epochs = wanted.clamp(1.0, MAX_EPOCHS as f64) as u64;
        clamped = wanted < 1.0 || wanted > MAX_EPOCHS as f64;
    }
    Plan { flops: shape.flops(&hidden, epochs), hidden, epochs, clamped, kept: false }
}

/// `plan`, but never below the widths as set: when they already take the budget or more, they
/// and the epochs are kept (`Plan::kept`).
pub fn plan_at_least(shape: &Shape, hidden: &[u64], budget: f64) -> Plan {
    let p = plan(shape, hidden, budget);
    if p.hidden.iter().zip(hidden).any(|(a, b)| a < b) {
        return Plan {
            hidden: hidden.to_vec(),
            epochs: shape.epochs,
            flops: shape.flops(hidden, shape.epochs),
            clamped: false,
            kept: true,
        };
    }
    p
}

/// With `size=auto`, the settings with `hidden` (and, if need be, `epochs`) sized for `device`,
/// and what was chosen; else the settings unchanged. `t` (read from `s`) is sized the same way.
/// `runs` and `extra_passes` as in `Shape`.
pub fn resolve(
    s: &Settings,
    t: &mut Training,
    device: &Device,
    data: &Dataset,
    runs: f64,
    extra_passes: f64,
    sink: &mut dyn Sink,
) -> Result<(Settings, Option<Sizing>)> {
    resolve_for(s, t, std::slice::from_ref(device), data, Budget { runs, extra_passes, grow_only: false }, sink)
}

/// How the run spends the sizing budget.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// As in `Shape`: trainings of `epochs` epochs on each backend, and passes that do not grow
    /// with `epochs`.
    pub runs: f64,
    pub extra_passes: f64,
    /// Never size below the widths as set (`plan_at_least`).
    pub grow_only: bool,
}

/// `resolve` for a run that trains the same model on each of `devices` in turn: the model is
/// sized so that all of them together take about `target_s` (the slowest dominates). A backend
/// that does not open is left out (the run reports it).
pub fn resolve_for(
    s: &Settings,
    t: &mut Training,
    devices: &[Device],
    data: &Dataset,
    budget: Budget,
    sink: &mut dyn Sink,
) -> Result<(Settings, Option<Sizing>)> {
    let Some((_, target_s)) = t.size.clone().filter(|_| sizes(t)) else {
        return Ok((s.clone(), None));
    };
    let mut each = Vec::new();
    let mut last: Option<Peaks> = None;
    for device in devices {
        sink.emit(Event::Phase(format!("sizing the model for {device}")));
        let Ok(mut engine) = device.open(None) else { continue };
        let info = with_backend!(&mut engine, b => b.info());
        let (peak, cached) = with_backend!(&mut engine, b => peaks::measure_or_cached(b))?;
        each.push((super::cpu_vs_gpu::short_label(&info), peak.flops_per_s, cached));
        last = Some(peak);
    }
    let Some(last) = last else { return Ok((s.clone(), None)) };
    // The same FLOPs on each backend in turn: time = F · Σ 1/peak_i.
    let combined = 1.0 / each.iter().map(|e| 1.0 / e.1.max(1.0)).sum::<f64>();
    let peak = Peaks { flops_per_s: combined, ..last };
    let shape = Shape {
        features: data.features,
        classes: data.classes,
        train: data.train_len(),
        val: data.val_len(),
        epochs: t.epochs.max(1) as u64,
        runs: budget.runs,
        extra_passes: budget.extra_passes,
    };
    let hidden = t.hidden.clone();
    let plan =
        if budget.grow_only { plan_at_least(&shape, &hidden, target_s * combined) } else { plan(&shape, &hidden, target_s * combined) };
    let mut out = s.clone();
    out.set("hidden", &plan.hidden.iter().map(u64::to_string).collect::<Vec<_>>().join(","))?;
    out.set("epochs", &plan.epochs.to_string())?;
    t.hidden = plan.hidden.clone();
    t.epochs = plan.epochs as i64;
    let device = each.iter().map(|e| e.0.as_str()).collect::<Vec<_>>().join(" and ");
    let cached = each.iter().all(|e| e.2);
    let sizing = Sizing { device, peak, cached, each, target_s, plan };
    sink.emit(Event::Log(sizing.note()));
    Ok((out, Some(sizing)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_widths_meet_the_budget_and_keep_the_shape() {
        for (hidden, budget) in [(vec![128u64, 64], 5.0e6), (vec![256, 128], 4.0e7), (vec![1000], 3.0e6)] {
            let (w, clamped) = scale_hidden(784, &hidden, 10, budget);
            assert!(!clamped, "{hidden:?} at {budget}: {w:?}");
            let got = layer_products(784, &w, 10);
            // Rounding to multiples of 16 moves the products by a few percent at most.
            assert!((got / budget - 1.0).abs() < 0.1, "{hidden:?}: {w:?} gives {got}, wanted {budget}");
            assert!(w.iter().all(|x| x % ROUND == 0));
            if hidden.len() == 2 {
                let (r0, r1) = (hidden[0] as f64 / hidden[1] as f64, w[0] as f64 / w[1] as f64);
                assert!((r0 / r1 - 1.0).abs() < 0.1, "ratio {r0} became {r1}");
            }
        }
    }

    #[test]
    fn widths_are_clamped_and_say_so() {
        let (w, clamped) = scale_hidden(784, &[128, 64], 10, 1e15);
        assert!(clamped && w.iter().all(|&x| x <= MAX_WIDTH) && w[0] == MAX_WIDTH, "{w:?}");
        let (w, clamped) = scale_hidden(784, &[128, 64], 10, 1.0);
        assert!(clamped && w == vec![MIN_WIDTH, MIN_WIDTH], "{w:?}");
    }

    #[test]
    fn a_faster_adapter_gets_a_bigger_model_in_the_same_time() {
        let shape = Shape { features: 784, classes: 10, train: 3200, val: 800, epochs: 3, runs: 2.0, extra_passes: 1.0 };
        let target = 20.0;
        let mut last = 0;
        for peak in [5e9, 50e9, 500e9, 5e12, 50e12] {
            let p = plan(&shape, &[256, 128], target * peak);
            assert!(p.hidden[0] >= last, "{peak}: {p:?}");
            last = p.hidden[0];
            assert!(!p.clamped, "{peak}: {p:?}");
            // Rounding widths and whole epochs keep the estimate near the target.
            let secs = p.flops / peak;
            assert!((secs / target - 1.0).abs() < 0.3, "{peak}: {p:?} takes {secs} s");
        }
        // The fastest ones ran out of width and got more epochs instead; a very slow one runs the
        // narrowest model for one epoch and says the target was out of reach.
        assert!(plan(&shape, &[256, 128], target * 50e12).epochs > 3);
        let slow = plan(&Shape { features: 12288, ..shape }, &[256, 128], 1e9);
        assert_eq!((slow.hidden.as_slice(), slow.epochs, slow.clamped), (&[MIN_WIDTH, MIN_WIDTH][..], 1, true));
    }
}
