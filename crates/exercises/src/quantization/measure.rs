//! Exercise 9's measurements on one backend: FP32, FP16 and four INT8 variants side by side
//! (latency at batch 1 and the latency batch, memory by ledger category, accuracy, agreement
//! with FP32), the calibration observers compared, per-layer error and sensitivity, and the
//! largest layer's GEMM alone in f32 and int8 (what explains the end-to-end ratio).

use gpulab_core::error::Result;
use gpulab_core::stats::Spread;
use gpulab_core::tensor::{BackendInfo, DType, MemCategory, MemoryReport, QuantGranularity, prelude::*};
use gpulab_systems::bench::{random_matrix, time_op_spread};
use gpulab_systems::data::Dataset;
use gpulab_systems::nn::DenseStack;
use gpulab_systems::quant::{ActScales, HostLayer, ObserverKind, QuantizedModel, calibrate, metrics, quantize_model};

/// The inputs shared by every backend's measurements.
pub struct Plan<'a> {
    pub layers: &'a [HostLayer],
    pub data: &'a Dataset,
    /// [n, features] held-out training samples for calibration.
    pub calib: &'a [f32],
    pub observer: ObserverKind,
    pub runs: usize,
    pub batch: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    F32,
    F16,
    Int8 { weights: QuantGranularity, activations: ActScales },
}

impl Kind {
    pub fn label(self) -> String {
        match self {
            Kind::F32 => "FP32".into(),
            Kind::F16 => "FP16".into(),
            Kind::Int8 { weights, activations } => {
                format!("INT8 {} activations, {} weights", activations.name(), gpulab_systems::quant::granularity_name(weights))
            }
        }
    }
    /// The INT8 model the verdict and the export use: static scales, per-channel weights.
    pub fn headline() -> Kind {
        Kind::Int8 { weights: QuantGranularity::PerChannel, activations: ActScales::Static }
    }
}

pub struct Measured {
    /// Seconds per forward pass over the timed runs (median and middle half) at batch 1 and at
    /// the latency batch.
    pub latency1: Spread,
    pub latency_batch: Spread,
    pub weight_bytes: u64,
    /// The ledger while building the model and running the latency batch.
    pub memory: MemoryReport,
    pub accuracy: f64,
    /// Fraction of validation samples with FP32's argmax.
    pub agreement: f64,
}

pub struct Variant {
    pub kind: Kind,
    pub kernel: String,
    pub result: std::result::Result<Measured, String>,
}

pub struct LayerRow {
    pub shape: [usize; 2],
    pub weight_sqnr: Option<f64>,
    pub output_sqnr: Option<f64>,
    pub max_weight_error: f64,
    /// max |w − ŵ| / (s/2): ≤ 1 means every weight is within half a step.
    pub half_step_ratio: f64,
    /// Validation accuracy with only this layer in int8.
    pub only_this_accuracy: f64,
}

pub struct ObserverRow {
    pub kind: ObserverKind,
    pub ranges: Vec<f32>,
    pub accuracy: f64,
    pub agreement: f64,
}

/// The largest layer's GEMM at the latency batch: seconds (median and middle half of the timed
/// runs) in f32 and in int8.
pub struct GemmProbe {
    pub mkn: [usize; 3],
    pub f32: Spread,
    pub int8: Spread,
}

pub struct BackendRun {
    pub info: BackendInfo,
    pub int8_kernel: String,
    pub variants: Vec<Variant>,
    pub observers: Vec<ObserverRow>,
    pub layers: Vec<LayerRow>,
    pub gemm: Option<GemmProbe>,
    /// The headline INT8 model, as exported.
    pub model: Option<QuantizedModel>,
}

impl BackendRun {
    pub fn variant(&self, kind: Kind) -> Option<&Measured> {
        self.variants.iter().find(|v| v.kind == kind).and_then(|v| v.result.as_ref().ok())
    }
}

/// The validation split's logits, in batches of 256.
fn val_logits<B: Backend>(b: &mut B, m: &DenseStack<B>, data: &Dataset) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(data.val_len() * data.classes);
    for chunk in data.val_x.chunks(256 * data.features) {
        let x = b.upload_f32(chunk, [chunk.len() / data.features, data.features], MemCategory::Inputs)?;
        let y = m.forward(b, &x)?;
        out.extend(b.read_f32(&y)?);
    }
    Ok(out)
}

/// `rows` validation samples (cycled when the split is smaller).
fn sample_rows(data: &Dataset, rows: usize) -> Vec<f32> {
    data.val_x.iter().copied().cycle().take(rows * data.features).collect()
}

fn latency<B: Backend>(b: &mut B, m: &DenseStack<B>, data: &Dataset, rows: usize, runs: usize) -> Result<Spread> {
    let x = b.upload_f32(&sample_rows(data, rows), [rows, data.features], MemCategory::Inputs)?;
    time_op_spread(b, runs, |b| m.forward(b, &x).map(drop))
}

/// Builds the model with fresh ledger peaks, times it, then scores it against FP32's logits.
fn measure<B: Backend>(
    b: &mut B,
    p: &Plan,
    build: impl FnOnce(&mut B) -> Result<DenseStack<B>>,
    weight_bytes: u64,
    fp32: Option<&[f32]>,
) -> Result<(Measured, Vec<f32>)> {
    b.sync()?;
    b.reset_memory_peaks();
    let m = build(b)?;
    let latency_batch = latency(b, &m, p.data, p.batch, p.runs)?;
    b.sync()?;
    let memory = b.memory();
    let latency1 = latency(b, &m, p.data, 1, p.runs)?;
    let logits = val_logits(b, &m, p.data)?;
    let accuracy = metrics::accuracy(&logits, &p.data.val_y);
    let agreement = fp32.map_or(1.0, |f| metrics::agreement(f, &logits, p.data.classes));
    Ok((Measured { latency1, latency_batch, weight_bytes, memory, accuracy, agreement }, logits))
}

fn float_bytes(layers: &[HostLayer], bytes: u64) -> u64 {
    layers.iter().map(|l| (l.shape[0] * l.shape[1]) as u64 * bytes).sum()
}

/// Every measurement of the exercise on `b`.
pub fn run_backend<B: Backend>(b: &mut B, p: &Plan, phase: &mut dyn FnMut(String)) -> Result<BackendRun> {
    let info = b.info();
    let int8_kernel = b.int8_kernel().unwrap_or_else(|| "unavailable".into());
    phase(format!("FP32 inference on {}", info.label()));
    let (fp32, fp32_logits) = measure(b, p, |b| DenseStack::float(b, p.layers, DType::F32), float_bytes(p.layers, 4), None)?;
    let mut variants = vec![Variant { kind: Kind::F32, kernel: "f32 matmul".into(), result: Ok(fp32) }];
    phase(format!("FP16 inference on {}", info.label()));
    let f16 = measure(b, p, |b| DenseStack::float(b, p.layers, DType::F16), float_bytes(p.layers, 2), Some(&fp32_logits));
    variants.push(Variant {
        kind: Kind::F16,
        kernel: "matmul16 (f16 operands, f32 sums)".into(),
        result: f16.map(|r| r.0).map_err(|e| e.to_string()),
    });

    phase(format!("calibrating on {} samples", p.calib.len() / p.data.features));
    let mut observers = Vec::new();
    let mut kinds = vec![ObserverKind::MinMax, ObserverKind::Percentile(99.9), ObserverKind::Percentile(99.99)];
    if !kinds.contains(&p.observer) {
        kinds.push(p.observer);
    }
    let mut chosen_ranges = None;
    for kind in kinds {
        let ranges = calibrate(b, p.layers, p.calib, 64, kind)?;
        let q = quantize_model(b, p.layers, Some(&ranges), QuantGranularity::PerChannel)?;
        let m = DenseStack::quantized(b, &q)?;
        let logits = val_logits(b, &m, p.data)?;
        observers.push(ObserverRow {
            kind,
            accuracy: metrics::accuracy(&logits, &p.data.val_y),
            agreement: metrics::agreement(&fp32_logits, &logits, p.data.classes),
            ranges: ranges.clone(),
        });
        if kind == p.observer {
            chosen_ranges = Some(ranges);
        }
    }
    let ranges = chosen_ranges.ok_or_else(|| gpulab_core::Error::Internal("the chosen observer was not calibrated".into()))?;

    let mut headline = None;
    for weights in [QuantGranularity::PerChannel, QuantGranularity::PerTensor] {
        for activations in [ActScales::Static, ActScales::Dynamic] {
            let kind = Kind::Int8 { weights, activations };
            phase(format!("{} on {}", kind.label(), info.label()));
            let q = quantize_model(b, p.layers, (activations == ActScales::Static).then_some(&ranges[..]), weights)?;
            let r = measure(b, p, |b| DenseStack::quantized(b, &q), q.weight_bytes(), Some(&fp32_logits));
            variants.push(Variant { kind, kernel: int8_kernel.clone(), result: r.map(|r| r.0).map_err(|e| e.to_string()) });
            if kind == Kind::headline() {
                headline = Some(q);
            }
        }
    }
    let headline = headline.ok_or_else(|| gpulab_core::Error::Internal("the headline INT8 model was not built".into()))?;

    phase(format!("per-layer error and sensitivity on {}", info.label()));
    let layers = layer_rows(b, p, &headline)?;
    phase(format!("f32 vs int8 GEMM of the largest layer on {}", info.label()));
    let gemm = gemm_probe(b, p).ok();
    Ok(BackendRun { info, int8_kernel, variants, observers, layers, gemm, model: Some(headline) })
}

fn layer_rows<B: Backend>(b: &mut B, p: &Plan, q: &QuantizedModel) -> Result<Vec<LayerRow>> {
    let rows = p.data.val_len().min(256);
    let x = b.upload_f32(&p.data.val_x[..rows * p.data.features], [rows, p.data.features], MemCategory::Inputs)?;
    let f = DenseStack::float(b, p.layers, DType::F32)?;
    let reference: Vec<Vec<f32>> = f.forward_all(b, &x)?.iter().map(|t| b.read_f32(t)).collect::<Result<_>>()?;
    let m = DenseStack::quantized(b, q)?;
    let quantized: Vec<Vec<f32>> = m.forward_all(b, &x)?.iter().map(|t| b.read_f32(t)).collect::<Result<_>>()?;
    let mut out = Vec::new();
    for (i, (fl, ql)) in p.layers.iter().zip(&q.layers).enumerate() {
        let (max_weight_error, half_step_ratio) = metrics::weight_error(fl, ql);
        let only = DenseStack::mixed(b, q, p.layers, i)?;
        let only_this_accuracy = metrics::accuracy(&val_logits(b, &only, p.data)?, &p.data.val_y);
        out.push(LayerRow {
            shape: fl.shape,
            weight_sqnr: metrics::sqnr_db(&fl.weight, &metrics::dequantized(ql)),
            output_sqnr: metrics::sqnr_db(&reference[i], &quantized[i]),
            max_weight_error,
            half_step_ratio,
            only_this_accuracy,
        });
    }
    Ok(out)
}

fn gemm_probe<B: Backend>(b: &mut B, p: &Plan) -> Result<GemmProbe> {
    let l = p.layers.iter().max_by_key(|l| l.shape[0] * l.shape[1]).ok_or_else(|| gpulab_core::Error::Internal("no layers".into()))?;
    let [k, n] = l.shape;
    let m = p.batch;
    let x = b.upload_f32(&random_matrix(m * k, 11), [m, k], MemCategory::Inputs)?;
    let w = b.upload_f32(&l.weight, [k, n], MemCategory::Parameters)?;
    let mut y = b.zeros([m, n], DType::F32, MemCategory::Activations)?;
    let f32 = time_op_spread(b, p.runs, |b| b.matmul(&x, &w, &mut y, false, false, false))?;
    let mut xq = b.zeros([m, k], DType::I8, MemCategory::Inputs)?;
    let mut wq = b.zeros([k, n], DType::I8, MemCategory::Parameters)?;
    let mut sx = b.zeros([1, 1], DType::F32, MemCategory::Other)?;
    let mut sw = b.zeros([1, n], DType::F32, MemCategory::Other)?;
    b.quantize(&x, &mut xq, &mut sx, QuantGranularity::PerTensor)?;
    b.quantize(&w, &mut wq, &mut sw, QuantGranularity::PerChannel)?;
    let mut acc = b.zeros([m, n], DType::I32, MemCategory::Activations)?;
    let int8 = time_op_spread(b, p.runs, |b| b.matmul_i8(&xq, &wq, &mut acc, false, false))?;
    Ok(GemmProbe { mkn: [m, k, n], f32, int8 })
}
